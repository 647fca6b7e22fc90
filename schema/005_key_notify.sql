-- 005_key_notify.sql -- a key's change notification names its hash.
--
-- Workers keep a filter of the hashes of every active key (the service's
-- key_filter_mb): a key it vouches for is looked up at once however many
-- unknown keys arrive, a key it does not is looked up only within
-- key_lookup_rate.  For that the filter must learn of a new key the moment
-- it is committed, so a key's notification carries its hash while the key
-- is active: "api_keys:<tenant id>:<key hash>", and "api_keys:<tenant id>:"
-- when it is not (revoked, or deleted).  Workers drop their cached answers
-- for any api_keys notification, as before.
--
-- ratelimitctl migrate runs this file in one transaction; it is idempotent.
CREATE OR REPLACE FUNCTION ratelimit_notify_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'DELETE' THEN
        PERFORM pg_notify('ratelimit_changes', 'api_keys:' || NEW.tenant_id::text
            || ':' || CASE WHEN NEW.status = 'active' THEN NEW.key_hash ELSE '' END);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        IF TG_OP = 'DELETE' OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
            OR OLD.key_hash IS DISTINCT FROM NEW.key_hash THEN
            PERFORM pg_notify('ratelimit_changes', 'api_keys:' || OLD.tenant_id::text || ':');
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
