-- dev_seed.sql -- the demo tenant, its two API keys and its rules, for the
-- development stack and the smoke scripts only (no migration loads it).
--
-- Load it after "ratelimitctl migrate" with
--     psql -v ON_ERROR_STOP=1 -f schema/dev_seed.sql
-- It is idempotent: loading it again adds nothing and changes nothing, also
-- not rules or limits an operator edited in the meantime.
--
-- Keys (never use these outside a development machine):
--     rl_demo_abc123xyz   role check
--     rl_demo_admin_key   role admin
-- They are stored, like every key, only as the lowercase hex SHA-256 of the
-- raw key plus its first 8 characters.

BEGIN;

INSERT INTO tenants (name, status)
VALUES ('demo-corp', 'active')
ON CONFLICT (name) DO NOTHING;

INSERT INTO api_keys (tenant_id, key_hash, key_prefix, role)
SELECT t.id, encode(sha256(convert_to(k.raw, 'UTF8')), 'hex'),
       substr(k.raw, 1, 8), k.role
FROM tenants t,
     (VALUES ('rl_demo_abc123xyz', 'check'),
             ('rl_demo_admin_key', 'admin')) AS k (raw, role)
WHERE t.name = 'demo-corp'
ON CONFLICT (key_hash) DO NOTHING;

-- Rules have no natural unique key (a tenant may give one pattern several
-- rules), so "already there" means: this tenant has a rule with this
-- pattern.
CREATE TEMPORARY TABLE demo_rules (
    route_pattern   text PRIMARY KEY,
    algorithm       text NOT NULL,
    limit_count     bigint,
    window_seconds  bigint,
    bucket_capacity bigint,
    refill_rate     double precision
) ON COMMIT DROP;

INSERT INTO demo_rules VALUES
    ('/v1/check',      'sliding_window', 100,     60,   NULL, NULL),
    ('/api/payments*', 'token_bucket',   NULL,    NULL, 10,   2),
    ('/api/orders*',   'sliding_window', 50,      60,   NULL, NULL),
    ('*',              'sliding_window', 1000,    3600, NULL, NULL),
    ('/bench',         'sliding_window', 1000000, 60,   NULL, NULL);

INSERT INTO rules (tenant_id, route_pattern)
SELECT t.id, d.route_pattern
FROM tenants t, demo_rules d
WHERE t.name = 'demo-corp'
  AND NOT EXISTS (SELECT 1 FROM rules r
                  WHERE r.tenant_id = t.id
                    AND r.route_pattern = d.route_pattern)
ORDER BY d.route_pattern;

-- Every demo rule that has no limit yet gets its limit "default".
INSERT INTO limits (rule_id, name, algorithm, limit_count, window_seconds,
                    bucket_capacity, refill_rate)
SELECT r.id, 'default', d.algorithm, d.limit_count, d.window_seconds,
       d.bucket_capacity, d.refill_rate
FROM tenants t
JOIN rules r ON r.tenant_id = t.id
JOIN demo_rules d ON d.route_pattern = r.route_pattern
WHERE t.name = 'demo-corp'
  AND NOT EXISTS (SELECT 1 FROM limits l WHERE l.rule_id = r.id)
ON CONFLICT (rule_id, name) DO NOTHING;

COMMIT;
