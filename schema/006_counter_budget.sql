-- 006_counter_budget.sql -- a tenant's own counter budget.
--
-- Every counter is a Redis key, and a tenant whose callers send a new
-- subject (or route, or address) with every check makes a new one every
-- time.  The service lets a tenant create at most its counter budget of
-- such counters an hour (lua/budget.lua); past it, a check that would
-- create one is answered 429 counter_budget_exceeded until the hour ends,
-- while the counters it has go on.  The budget is the service's
-- tenant_counter_budget unless the tenant has one of its own here:
--
--   NULL   the configuration's tenant_counter_budget (the default)
--   0      unlimited, for this tenant
--   N      at most N new counters an hour (up to 10^9)
--
-- A change notifies the workers (the tenants triggers of 001), which drop
-- what they cached of the tenant's keys and use the new budget at once.
--
-- ratelimitctl migrate runs this file in one transaction; it is idempotent.
ALTER TABLE tenants
    ADD COLUMN IF NOT EXISTS counter_budget bigint;

ALTER TABLE tenants DROP CONSTRAINT IF EXISTS tenants_counter_budget_range;
ALTER TABLE tenants ADD CONSTRAINT tenants_counter_budget_range
    CHECK (counter_budget BETWEEN 0 AND 1000000000);
