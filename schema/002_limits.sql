-- 002_limits.sql -- two more algorithms (GCRA and calendar fixed windows),
-- "always" rules that count in addition to the most specific matching rule,
-- sane upper bounds on every limit parameter, and at most 8 limits per rule.
--
-- ratelimitctl migrate runs this file inside one transaction after
-- 001_init.sql; the file itself is idempotent.  Adding the new CHECKs
-- validates the existing rows: a limit written before this migration with a
-- refill_rate above 10^8 (001 and the old ratelimitctl allowed up to 10^9)
-- makes the migration fail with "check constraint limits_parameters ... is
-- violated by some row" and change nothing; lower that rate and run it again.

-- An "always" rule applies whenever its pattern matches, in addition to the
-- most specific matching rule (e.g. a tenant-wide daily quota on "*"); its
-- limits join the same all-or-nothing decision.
ALTER TABLE rules
    ADD COLUMN IF NOT EXISTS always boolean NOT NULL DEFAULT false;

-- gcra: limit_count requests per period_us microseconds (requests are
-- spaced about period_us / limit_count apart), plus up to burst requests at
-- once beyond that pace.  fixed_window: limit_count requests per UTC calendar
-- minute, hour, day or month; the count starts again when the next begins.
ALTER TABLE limits
    ADD COLUMN IF NOT EXISTS period_us bigint,
    ADD COLUMN IF NOT EXISTS burst     bigint,
    ADD COLUMN IF NOT EXISTS calendar  text;

ALTER TABLE limits DROP CONSTRAINT IF EXISTS limits_algorithm_valid;
ALTER TABLE limits ADD CONSTRAINT limits_algorithm_valid
    CHECK (algorithm IN ('token_bucket', 'sliding_window', 'gcra',
                         'fixed_window'));

-- Each algorithm has exactly its own parameters, every other one NULL.  The
-- bounds: counts and capacities up to 10^12; windows and periods up to 366
-- days (31622400 s); bursts up to 10^9; refill rates from 0.000001 to 10^8
-- tokens per second, because the service sends rates with 6 decimals and a
-- double holds about 15 significant digits.  GCRA spaces requests
-- ceil(period_us / limit_count) microseconds apart and lets burst more
-- through at once; lua/gcra.lua refuses a limit whose (burst + 1) spacings
-- exceed 10^15 us (about 31 years), so the schema does too, instead of
-- letting every check of such a rule fail.  The comparisons are false for
-- NaN (PostgreSQL sorts it above every number), so NaN and infinities fail.
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
        AND refill_rate IS NULL AND period_us IS NULL AND burst IS NULL));

-- At most 8 limits per rule (RL_MAX_LIMITS in src/ratelimit.h), whoever
-- writes them.  Two transactions adding a limit to the same rule at once
-- must not both see 7: the trigger first rewrites the rule's row unchanged,
-- which makes the second wait for the first to end (under READ COMMITTED it
-- then counts afresh and sees the first one's limit) or, under REPEATABLE
-- READ and SERIALIZABLE, fail with a serialization error, to be retried.  A
-- plain SELECT ... FOR UPDATE would not do for REPEATABLE READ, whose count
-- would still come from the old snapshot.  The unchanged row fires neither
-- rules_touch_updated_at nor rules_notify_update (both compare OLD.* with
-- NEW.*).  In a multi-row INSERT each row's count sees the rows before it.
CREATE OR REPLACE FUNCTION ratelimit_check_limits_per_rule() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.rule_id IS NOT DISTINCT FROM OLD.rule_id THEN
        RETURN NEW;
    END IF;
    UPDATE rules SET priority = priority WHERE id = NEW.rule_id;
    SELECT count(*) INTO n FROM limits WHERE rule_id = NEW.rule_id;
    IF n >= 8 THEN
        RAISE EXCEPTION 'rule % already has 8 limits, the most a rule may have',
                NEW.rule_id
            USING ERRCODE = 'check_violation',
                  CONSTRAINT = 'limits_per_rule_max',
                  TABLE = 'limits';
    END IF;
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS limits_per_rule_max ON limits;
CREATE TRIGGER limits_per_rule_max
    BEFORE INSERT OR UPDATE OF rule_id ON limits
    FOR EACH ROW EXECUTE FUNCTION ratelimit_check_limits_per_rule();

-- The notifications of 001 need nothing new: rules_notify_update and
-- limits_notify_update fire when OLD.* IS DISTINCT FROM NEW.*, a comparison
-- of whole rows that includes the columns added above.
