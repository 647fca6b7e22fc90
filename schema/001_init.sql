-- 001_init.sql -- tenants, their API keys, their rules and the limits of
-- each rule (doc/design.md, "Data model"), and the change notifications
-- that let workers drop cached keys and rules at once instead of at TTL
-- expiry.
--
-- ratelimitctl migrate runs this file inside one transaction and records it
-- in schema_migrations; the file itself is idempotent, so running it again
-- by hand changes nothing.  Needs PostgreSQL 13 or later (gen_random_uuid
-- is built in there).

CREATE TABLE IF NOT EXISTS tenants (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    name        text        NOT NULL UNIQUE
                            CONSTRAINT tenants_name_length
                            CHECK (char_length(name) BETWEEN 1 AND 128),
    status      text        NOT NULL DEFAULT 'active'
                            CONSTRAINT tenants_status_valid
                            CHECK (status IN ('active', 'suspended')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- The raw key is never stored: only its SHA-256 (what the service looks up)
-- and its first 8 characters (so that an operator can tell keys apart).
CREATE TABLE IF NOT EXISTS api_keys (
    id           bigserial   PRIMARY KEY,
    tenant_id    uuid        NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    key_hash     char(64)    NOT NULL UNIQUE
                             CONSTRAINT api_keys_hash_hex
                             CHECK (key_hash ~ '^[0-9a-f]{64}$'),
    key_prefix   text        NOT NULL
                             CONSTRAINT api_keys_prefix_length
                             CHECK (char_length(key_prefix) BETWEEN 1 AND 16),
    role         text        NOT NULL DEFAULT 'check'
                             CONSTRAINT api_keys_role_valid
                             CHECK (role IN ('check', 'admin')),
    status       text        NOT NULL DEFAULT 'active'
                             CONSTRAINT api_keys_status_valid
                             CHECK (status IN ('active', 'revoked')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    last_used_at timestamptz,
    CONSTRAINT api_keys_revoked_at_iff_revoked
        CHECK ((status = 'revoked') = (revoked_at IS NOT NULL))
);

-- route_pattern: "*" matches every route, "/prefix*" a prefix, anything
-- else exactly.  Its bound is the check API's route bound, in bytes.
CREATE TABLE IF NOT EXISTS rules (
    id            bigserial   PRIMARY KEY,
    tenant_id     uuid        NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    route_pattern text        NOT NULL
                              CONSTRAINT rules_route_pattern_length
                              CHECK (octet_length(route_pattern) BETWEEN 1 AND 512),
    enabled       boolean     NOT NULL DEFAULT true,
    shadow        boolean     NOT NULL DEFAULT false,
    failure_mode  text        NOT NULL DEFAULT 'closed'
                              CONSTRAINT rules_failure_mode_valid
                              CHECK (failure_mode IN ('closed', 'open')),
    per           text        NOT NULL DEFAULT 'rule'
                              CONSTRAINT rules_per_valid
                              CHECK (per IN ('rule', 'route')),
    priority      integer     NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- A rule carries one or more limits, all enforced together.  Each algorithm
-- has exactly its own parameters, all positive: a token bucket holds
-- bucket_capacity tokens and gains refill_rate tokens per second; a sliding
-- window allows limit_count requests per window_seconds.  The limit name
-- becomes part of a Redis key, hence the short, plain alphabet.
-- (refill_rate < 'Infinity' also rejects NaN, which PostgreSQL sorts above
-- every other value.)
CREATE TABLE IF NOT EXISTS limits (
    id              bigserial        PRIMARY KEY,
    rule_id         bigint           NOT NULL REFERENCES rules (id) ON DELETE CASCADE,
    name            text             NOT NULL DEFAULT 'default'
                                     CONSTRAINT limits_name_valid
                                     CHECK (char_length(name) BETWEEN 1 AND 64
                                            AND name ~ '^[A-Za-z0-9_.-]+$'),
    algorithm       text             NOT NULL
                                     CONSTRAINT limits_algorithm_valid
                                     CHECK (algorithm IN ('token_bucket', 'sliding_window')),
    limit_count     bigint,
    window_seconds  bigint,
    bucket_capacity bigint,
    refill_rate     double precision,
    CONSTRAINT limits_name_unique UNIQUE (rule_id, name),
    CONSTRAINT limits_parameters CHECK (
        (algorithm = 'token_bucket'
            AND bucket_capacity IS NOT NULL AND bucket_capacity > 0
            AND refill_rate IS NOT NULL AND refill_rate > 0
            AND refill_rate < 'Infinity'::double precision
            AND limit_count IS NULL AND window_seconds IS NULL)
        OR
        (algorithm = 'sliding_window'
            AND limit_count IS NOT NULL AND limit_count > 0
            AND window_seconds IS NOT NULL AND window_seconds > 0
            AND bucket_capacity IS NULL AND refill_rate IS NULL))
);

CREATE INDEX IF NOT EXISTS api_keys_tenant_id_idx ON api_keys (tenant_id);
CREATE INDEX IF NOT EXISTS rules_tenant_id_idx ON rules (tenant_id);
CREATE INDEX IF NOT EXISTS limits_rule_id_idx ON limits (rule_id);

-- rules.updated_at follows every real change of a rule (an UPDATE that
-- changes nothing leaves it, and the notification below, alone).
CREATE OR REPLACE FUNCTION ratelimit_touch_updated_at() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END;
$$;

DROP TRIGGER IF EXISTS rules_touch_updated_at ON rules;
CREATE TRIGGER rules_touch_updated_at
    BEFORE UPDATE ON rules
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION ratelimit_touch_updated_at();

-- Change notifications.  Workers LISTEN on ratelimit_changes; the payload is
-- "<table>:<id>" where the id is the tenant's for tenants, api_keys and
-- rules, and the rule's for limits.  A row moved to another tenant or rule
-- notifies both the old and the new owner.  Notifications are delivered at
-- commit and only when the transaction commits.
CREATE OR REPLACE FUNCTION ratelimit_notify_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    new_owner text;
    old_owner text;
BEGIN
    -- Separate statements, not one CASE: PL/pgSQL resolves every field named
    -- in an expression, and each table has only one of these columns.
    IF TG_OP <> 'DELETE' THEN
        IF TG_TABLE_NAME = 'tenants' THEN
            new_owner := NEW.id::text;
        ELSIF TG_TABLE_NAME = 'limits' THEN
            new_owner := NEW.rule_id::text;
        ELSE
            new_owner := NEW.tenant_id::text;
        END IF;
        PERFORM pg_notify('ratelimit_changes', TG_TABLE_NAME || ':' || new_owner);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        IF TG_TABLE_NAME = 'tenants' THEN
            old_owner := OLD.id::text;
        ELSIF TG_TABLE_NAME = 'limits' THEN
            old_owner := OLD.rule_id::text;
        ELSE
            old_owner := OLD.tenant_id::text;
        END IF;
        IF old_owner IS DISTINCT FROM new_owner THEN
            PERFORM pg_notify('ratelimit_changes', TG_TABLE_NAME || ':' || old_owner);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- Inserts and deletes always notify; updates only when something a worker
-- caches changed.  For api_keys that excludes last_used_at, which the
-- service may refresh often: a bookkeeping write must not empty every
-- worker's key cache.
DROP TRIGGER IF EXISTS tenants_notify ON tenants;
CREATE TRIGGER tenants_notify
    AFTER INSERT OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_change();
DROP TRIGGER IF EXISTS tenants_notify_update ON tenants;
CREATE TRIGGER tenants_notify_update
    AFTER UPDATE ON tenants
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION ratelimit_notify_change();

DROP TRIGGER IF EXISTS api_keys_notify ON api_keys;
CREATE TRIGGER api_keys_notify
    AFTER INSERT OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_change();
DROP TRIGGER IF EXISTS api_keys_notify_update ON api_keys;
CREATE TRIGGER api_keys_notify_update
    AFTER UPDATE ON api_keys
    FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
                       OR OLD.key_hash IS DISTINCT FROM NEW.key_hash
                       OR OLD.role IS DISTINCT FROM NEW.role
                       OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION ratelimit_notify_change();

DROP TRIGGER IF EXISTS rules_notify ON rules;
CREATE TRIGGER rules_notify
    AFTER INSERT OR DELETE ON rules
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_change();
DROP TRIGGER IF EXISTS rules_notify_update ON rules;
CREATE TRIGGER rules_notify_update
    AFTER UPDATE ON rules
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION ratelimit_notify_change();

DROP TRIGGER IF EXISTS limits_notify ON limits;
CREATE TRIGGER limits_notify
    AFTER INSERT OR DELETE ON limits
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_change();
DROP TRIGGER IF EXISTS limits_notify_update ON limits;
CREATE TRIGGER limits_notify_update
    AFTER UPDATE ON limits
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION ratelimit_notify_change();
