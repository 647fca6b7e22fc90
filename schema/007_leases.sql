-- 007_leases.sql -- concurrency limits: at most N requests in flight.
--
-- A limit with algorithm 'concurrency' lets at most limit_count (1 to
-- 100000) checks hold a lease at once; a lease frees its slot when it is
-- released (POST /v1/release) or when its ttl, period_us (1 s to 1 h, in
-- microseconds), passes.  It uses the columns other algorithms have
-- (limit_count, period_us) and no new one, so the service reads it as it
-- reads any limit; every other parameter is NULL.  The leases themselves
-- live in Redis (lua/concurrency.lua, lua/lease.lua), never here.
--
-- ratelimitctl migrate runs this file in one transaction; it is
-- idempotent.  A service older than this migration logs a limit with this
-- algorithm as unknown and answers the checks of its rule 503
-- "misconfigured" rather than deciding without it.
ALTER TABLE limits DROP CONSTRAINT IF EXISTS limits_algorithm_valid;
ALTER TABLE limits ADD CONSTRAINT limits_algorithm_valid
    CHECK (algorithm IN ('token_bucket', 'sliding_window', 'gcra',
                         'fixed_window', 'concurrency'));

-- 002's bounds, and those of a concurrency limit.
ALTER TABLE limits DROP CONSTRAINT IF EXISTS limits_parameters;
ALTER TABLE limits ADD CONSTRAINT limits_parameters CHECK (
    (algorithm = 'token_bucket'
        AND bucket_capacity IS NOT NULL
        AND bucket_capacity BETWEEN 1 AND 1000000000000
        AND refill_rate IS NOT NULL
        AND refill_rate >= 0.000001::double precision
        AND refill_rate <= 100000000::double precision
        AND limit_count IS NULL AND window_seconds IS NULL
        AND period_us IS NULL AND burst IS NULL AND calendar IS NULL)
    OR
    (algorithm = 'sliding_window'
        AND limit_count IS NOT NULL
        AND limit_count BETWEEN 1 AND 1000000000000
        AND window_seconds IS NOT NULL
        AND window_seconds BETWEEN 1 AND 31622400
        AND bucket_capacity IS NULL AND refill_rate IS NULL
        AND period_us IS NULL AND burst IS NULL AND calendar IS NULL)
    OR
    (algorithm = 'gcra'
        AND limit_count IS NOT NULL
        AND limit_count BETWEEN 1 AND 1000000000000
        AND period_us IS NOT NULL
        AND period_us BETWEEN 1 AND 31622400000000
        AND burst IS NOT NULL
        AND burst BETWEEN 0 AND 1000000000
        AND (burst + 1) * ceil(period_us::numeric / limit_count)
            <= 1000000000000000
        AND window_seconds IS NULL AND bucket_capacity IS NULL
        AND refill_rate IS NULL AND calendar IS NULL)
    OR
    (algorithm = 'fixed_window'
        AND limit_count IS NOT NULL
        AND limit_count BETWEEN 1 AND 1000000000000
        AND calendar IS NOT NULL
        AND calendar IN ('minute', 'hour', 'day', 'month')
        AND window_seconds IS NULL AND bucket_capacity IS NULL
        AND refill_rate IS NULL AND period_us IS NULL AND burst IS NULL)
    OR
    (algorithm = 'concurrency'
        AND limit_count IS NOT NULL
        AND limit_count BETWEEN 1 AND 100000
        AND period_us IS NOT NULL
        AND period_us BETWEEN 1000000 AND 3600000000
        AND window_seconds IS NULL AND bucket_capacity IS NULL
        AND refill_rate IS NULL AND burst IS NULL AND calendar IS NULL));
