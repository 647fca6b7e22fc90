-- 003_count_scope.sql -- what each limit counts.
--
--   subject  one counter per subject: the "subject" of a /v1/check body
--            when there is one, else per API key (or, for an authorizer
--            request without a key, per client address).  The default,
--            and what every limit counted before this migration.
--   key      one counter per API key (per client address without a key),
--            whatever the subject.
--   tenant   one counter for the whole tenant: across its keys, subjects
--            and front ends.
--
-- ratelimitctl migrate runs this file in one transaction; it is idempotent.
ALTER TABLE limits
    ADD COLUMN IF NOT EXISTS count_scope text NOT NULL DEFAULT 'subject';

ALTER TABLE limits DROP CONSTRAINT IF EXISTS limits_count_scope_valid;
ALTER TABLE limits ADD CONSTRAINT limits_count_scope_valid
    CHECK (count_scope IN ('subject', 'key', 'tenant'));
