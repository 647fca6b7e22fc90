-- 005_notify_changes.sql -- a change's notification names what changed.
--
-- Workers drop from their caches only what a notification names, so that
-- one key created in one tenant does not make every worker forget every
-- tenant's keys and rules:
--
--   api_keys:<tenant id>:<key hash>:<status>   a key added, changed or
--                                              deleted (status "active",
--                                              "revoked" or "deleted")
--   rules:<tenant id>                          a tenant's rule (as in 001)
--   limits:<tenant id>:<rule id>               a limit of one of its rules
--   tenants:<tenant id>                        the tenant itself (as in 001;
--                                              workers drop everything)
--
-- The key's hash also feeds the workers' filter of active keys (the
-- service's key_filter_mb): a key it vouches for is looked up at once
-- however many unknown keys arrive, so it must learn of a new key the
-- moment it is committed.  A row moved to another tenant or rule notifies
-- both the old and the new owner, as in 001.
--
-- ratelimitctl migrate runs this file in one transaction; it is idempotent.
CREATE OR REPLACE FUNCTION ratelimit_notify_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('ratelimit_changes', 'api_keys:' || NEW.tenant_id::text
            || ':' || NEW.key_hash || ':' || NEW.status);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        IF TG_OP = 'DELETE' OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
            OR OLD.key_hash IS DISTINCT FROM NEW.key_hash THEN
            PERFORM pg_notify('ratelimit_changes', 'api_keys:' || OLD.tenant_id::text
                || ':' || OLD.key_hash || ':deleted');
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS api_keys_notify ON api_keys;
CREATE TRIGGER api_keys_notify
    AFTER INSERT OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_key();
DROP TRIGGER IF EXISTS api_keys_notify_update ON api_keys;
CREATE TRIGGER api_keys_notify_update
    AFTER UPDATE ON api_keys
    FOR EACH ROW WHEN (OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
                       OR OLD.key_hash IS DISTINCT FROM NEW.key_hash
                       OR OLD.role IS DISTINCT FROM NEW.role
                       OR OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION ratelimit_notify_key();

-- Limits: the tenant of the rule, looked up (a limit row has only its
-- rule).  A rule deleted with its limits (ON DELETE CASCADE) finds no
-- tenant here; the rule's own notification covers that.
CREATE OR REPLACE FUNCTION ratelimit_notify_limit() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    t text;
BEGIN
    IF TG_OP <> 'DELETE' THEN
        SELECT tenant_id::text INTO t FROM rules WHERE id = NEW.rule_id;
        IF t IS NOT NULL THEN
            PERFORM pg_notify('ratelimit_changes', 'limits:' || t || ':' || NEW.rule_id::text);
        END IF;
    END IF;
    IF TG_OP <> 'INSERT' AND (TG_OP = 'DELETE' OR OLD.rule_id IS DISTINCT FROM NEW.rule_id) THEN
        SELECT tenant_id::text INTO t FROM rules WHERE id = OLD.rule_id;
        IF t IS NOT NULL THEN
            PERFORM pg_notify('ratelimit_changes', 'limits:' || t || ':' || OLD.rule_id::text);
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS limits_notify ON limits;
CREATE TRIGGER limits_notify
    AFTER INSERT OR DELETE ON limits
    FOR EACH ROW EXECUTE FUNCTION ratelimit_notify_limit();
DROP TRIGGER IF EXISTS limits_notify_update ON limits;
CREATE TRIGGER limits_notify_update
    AFTER UPDATE ON limits
    FOR EACH ROW WHEN (OLD.* IS DISTINCT FROM NEW.*)
    EXECUTE FUNCTION ratelimit_notify_limit();
