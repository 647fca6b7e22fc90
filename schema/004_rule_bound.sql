-- 004_rule_bound.sql -- at most 10000 rules per tenant.
--
-- The service holds a tenant's rules in memory and matches every check
-- against them; it loads at most 10000 (RL_MAX_RULES in src/ratelimit.h,
-- which must say the same number).  Rather than let a tenant have rules
-- the service would not enforce, the database refuses the 10001st: an
-- INSERT, or an UPDATE that moves rules to another tenant, that leaves a
-- tenant with more than 10000 rules (enabled or not) fails with
-- check_violation.  Should the bound be crossed another way all the same
-- (the trigger dropped, say), the service answers every check of that
-- tenant 503 "misconfigured" instead of deciding on some of its rules.
--
-- The count runs once per INSERT statement, after it, for each tenant the
-- statement gave rules to, and after each rule moved to another tenant.  Two transactions adding rules to one tenant
-- take turns on the tenant's row (FOR NO KEY UPDATE, which does not wait
-- for the foreign-key locks the inserts themselves hold), and the second
-- counts after the first committed.
--
-- ratelimitctl migrate runs this file in one transaction; it is idempotent.
CREATE OR REPLACE FUNCTION ratelimit_rule_bound_check(t uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    PERFORM 1 FROM tenants WHERE id = t FOR NO KEY UPDATE;
    SELECT count(*) INTO n FROM rules WHERE tenant_id = t;
    IF n > 10000 THEN
        RAISE EXCEPTION 'tenant % would have % rules; a tenant may have at most 10000', t, n
            USING ERRCODE = 'check_violation',
                  HINT = 'remove rules, or merge routes into prefix patterns';
    END IF;
END;
$$;

-- Inserts: once per statement, for each tenant it gave rules to.
CREATE OR REPLACE FUNCTION ratelimit_rule_bound() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t uuid;
BEGIN
    FOR t IN SELECT DISTINCT tenant_id FROM changed_rules ORDER BY 1 LOOP
        PERFORM ratelimit_rule_bound_check(t);
    END LOOP;
    RETURN NULL;
END;
$$;

-- A rule moved to another tenant: per row, and only then (002's limit
-- triggers touch rules with UPDATEs that change nothing of this).
CREATE OR REPLACE FUNCTION ratelimit_rule_bound_moved() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ratelimit_rule_bound_check(NEW.tenant_id);
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS rules_bound_insert ON rules;
CREATE TRIGGER rules_bound_insert
    AFTER INSERT ON rules
    REFERENCING NEW TABLE AS changed_rules
    FOR EACH STATEMENT EXECUTE FUNCTION ratelimit_rule_bound();
DROP TRIGGER IF EXISTS rules_bound_update ON rules;
CREATE TRIGGER rules_bound_update
    AFTER UPDATE OF tenant_id ON rules
    FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id)
    EXECUTE FUNCTION ratelimit_rule_bound_moved();
