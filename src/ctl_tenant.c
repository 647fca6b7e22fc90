/*
 * ctl_tenant.c -- the tenant and key commands of ratelimitctl.
 *
 * A tenant is a name, a status (active or suspended) and a counter budget
 * (how many new counters it may make in Redis an hour; NULL: the
 * service's tenant_counter_budget, schema/006_counter_budget.sql).  An API
 * key is
 * made of CTL_TENANT_KEY_RANDOM_BYTES from the operating system's random
 * generator, written "rl_" and URL-safe base64; it is shown once and
 * stored only as its SHA-256 (what the service looks up) and its first
 * CTL_TENANT_KEY_PREFIX_LEN characters (so that people can tell keys apart
 * in listings).  Revoking a key keeps its row, so that listings show it;
 * the key to revoke is named by its id, by the whole key or by its prefix.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "ctl.h"

#define CTL_TENANT_KEY_RANDOM_BYTES 24
#define CTL_TENANT_KEY_PREFIX_LEN 8

int
ctl_tenant_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *name = a->pos[0];
    const char *params[1] = { name };
    const char *names[2] = { "id", "name" }, *values[2];
    char err[256];
    PGresult *res;
    int rc;

    if (validate_tenant_name("tenant name", name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    res = ctl_db_query(ctl, "INSERT INTO tenants (name) VALUES ($1) "
        "RETURNING id", 1, params);
    if (res == NULL) {
        if (strcmp(ctl->sqlstate, "23505") == 0)
            return ctl_fail("tenant \"%s\" already exists", name);
        return ctl_db_fail(ctl);
    }
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = name;
    ctl_db_print_fields(names, values, 2);
    PQclear(res);
    return CTL_EXIT_OK;
}

/* A tenant's active keys and rules, as tenant list counts them. */
#define CTL_TENANT_COUNTS_SQL \
    "(SELECT count(*) FROM api_keys k " \
    " WHERE k.tenant_id = t.id AND k.status = 'active'), " \
    "(SELECT count(*) FROM rules r WHERE r.tenant_id = t.id)"

int
ctl_tenant_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "NAME", "STATUS", "KEYS",
        "RULES", "CREATED", NULL };
    static const struct ctl_db_listing listing = {
        "SELECT t.id, t.name, t.status, " CTL_TENANT_COUNTS_SQL ", "
        "  to_char(t.created_at AT TIME ZONE 'UTC', "
        "          'YYYY-MM-DD HH24:MI:SS') "
        "FROM tenants t ORDER BY t.name", headers,
        "SELECT t.id, t.name, t.status, " CTL_TENANT_COUNTS_SQL ", "
        "  " CTL_DB_JSON_TIME("t.created_at") " "
        "FROM tenants t ORDER BY t.name", headers, "tenants" };
    int rc;

    (void)cmd;
    (void)a;
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    return ctl_db_print_listing(ctl, &listing, NULL, 0, NULL);
}

/* ctl.h: tenant suspend / tenant resume. */
int
ctl_tenant_status(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *name = a->pos[0];
    const char *status = strcmp(cmd->verb, "suspend") == 0 ? "suspended" :
        "active";
    const char *params[2] = { name, status };
    char err[256];
    int rc, n;

    if (validate_tenant_name("tenant name", name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    n = ctl_db_query_rows(ctl, "UPDATE tenants SET status = $2 "
        "WHERE name = $1 RETURNING id", 2, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n == 0)
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    printf("tenant %s is %s\n", name, status);
    return CTL_EXIT_OK;
}

/* The largest counter budget the schema takes. */
#define CTL_TENANT_BUDGET_MAX 1000000000LL

/*
 * tenant budget NAME COUNT|default: at most COUNT new counters an hour (0:
 * unlimited), or "default": the service's tenant_counter_budget.  The
 * change notifies the workers, which use it at once.
 */
int
ctl_tenant_budget(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *name = a->pos[0], *count = a->pos[1];
    const char *params[2] = { name, NULL };
    char err[256], digits[21];
    long long v = 0;
    size_t i;
    int rc, n;

    if (validate_tenant_name("tenant name", name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (strcmp(count, "default") != 0) {
        for (i = 0; i < 12 && count[i] != '\0'; i++) {
            if (count[i] < '0' || count[i] > '9')
                break;
            v = v * 10 + (count[i] - '0');
        }
        if (i == 0 || count[i] != '\0' || v > CTL_TENANT_BUDGET_MAX)
            return ctl_usage_error(cmd, "COUNT: \"%s\" is not a number of "
                "counters from 0 (unlimited) to %lld, nor \"default\"",
                count, CTL_TENANT_BUDGET_MAX);
        util_lltoa(v, digits);
        params[1] = digits;
    }
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    n = ctl_db_query_rows(ctl, "UPDATE tenants SET counter_budget = "
        "$2::bigint WHERE name = $1 RETURNING id", 2, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n == 0)
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    if (params[1] == NULL)
        printf("tenant %s: counter budget of the configuration "
            "(tenant_counter_budget)\n", name);
    else if (v == 0)
        printf("tenant %s: counter budget unlimited\n", name);
    else
        printf("tenant %s: counter budget %lld new counters an hour\n",
            name, v);
    return CTL_EXIT_OK;
}

/* tenant show NAME: one tenant, with what it has. */
int
ctl_tenant_show(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const names[] = { "id", "name", "status", "created",
        "keys", "revoked_keys", "rules", "limits", "counter_budget" };
    static const char *const headers[] = { "ID", "NAME", "STATUS",
        "CREATED", "KEYS", "REVOKED_KEYS", "RULES", "LIMITS",
        "COUNTER_BUDGET", NULL };
    const char *params[1] = { a->pos[0] };
    const char *values[9];
    char err[256], sql[1024];
    struct json_object *o;
    PGresult *res;
    int rc, i;

    if (validate_tenant_name("tenant name", a->pos[0], err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    /* The table shows a budget that is not set as "default"; JSON has
     * null. */
    snprintf(sql, sizeof(sql), "SELECT t.id, t.name, t.status, %s, "
        "  (SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id "
        "   AND k.status = 'active'), "
        "  (SELECT count(*) FROM api_keys k WHERE k.tenant_id = t.id "
        "   AND k.status <> 'active'), "
        "  (SELECT count(*) FROM rules r WHERE r.tenant_id = t.id), "
        "  (SELECT count(*) FROM limits l JOIN rules r ON r.id = l.rule_id "
        "   WHERE r.tenant_id = t.id), %s "
        "FROM tenants t WHERE t.name = $1", ctl_db_is_json() ?
        CTL_DB_JSON_TIME("t.created_at") :
        "to_char(t.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS')",
        ctl_db_is_json() ? "t.counter_budget::bigint" :
        "coalesce(t.counter_budget::text, 'default')");
    res = ctl_db_query(ctl, sql, 1, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (PQntuples(res) == 0) {
        PQclear(res);
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", a->pos[0]);
    }
    if (ctl_db_is_json()) {
        o = ctl_db_json_doc();
        ctl_db_json_row(res, 0, headers, o);
        ctl_db_json_print(o);
    } else {
        for (i = 0; i < 9; i++)
            values[i] = PQgetvalue(res, 0, i);
        ctl_db_print_fields(names, values, 9);
    }
    PQclear(res);
    return CTL_EXIT_OK;
}

/*
 * tenant remove NAME [--force]: the tenant with its keys, rules and limits
 * (ON DELETE CASCADE), in one statement.  While it has active keys, only
 * with --force: a key in use would start answering 401.  Its counters in
 * Redis are left to expire.
 */
int
ctl_tenant_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[2] = { a->pos[0], NULL };
    char err[256];
    PGresult *res;
    int rc;

    params[1] = ctl_args_flag(cmd, a, "force") ? "true" : "false";
    if (validate_tenant_name("tenant name", a->pos[0], err,
        sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;
    /* One statement: the count and the delete see the same rows. */
    res = ctl_db_query(ctl, "WITH t AS (SELECT id, (SELECT count(*) "
        "  FROM api_keys k WHERE k.tenant_id = tenants.id "
        "  AND k.status = 'active') AS active FROM tenants WHERE name = $1), "
        "d AS (DELETE FROM tenants WHERE id IN (SELECT id FROM t "
        "  WHERE active = 0 OR $2::boolean) RETURNING id) "
        "SELECT t.active, (SELECT count(*) FROM d) FROM t", 2, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (PQntuples(res) == 0) {
        PQclear(res);
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", a->pos[0]);
    }
    if (strcmp(PQgetvalue(res, 0, 1), "0") == 0) {
        fprintf(stderr, CTL_NAME ": tenant remove: %s has %s active keys, "
            "which would start answering 401; revoke them first (key list "
            "%s) or remove it anyway with --force\n", a->pos[0],
            PQgetvalue(res, 0, 0), a->pos[0]);
        PQclear(res);
        return CTL_EXIT_USAGE;
    }
    PQclear(res);
    printf("tenant %s removed, with its keys, rules and limits\n",
        a->pos[0]);
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* Keys */

/* URL-safe base64 without padding; out must hold 4 * ceil(n / 3) + 1. */
static void
ctl_tenant_base64url(const unsigned char *in, size_t n, char *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned long v;
    size_t i, rest;

    for (i = 0; i + 2 < n; i += 3) {
        v = (unsigned long)in[i] << 16 | (unsigned long)in[i + 1] << 8 |
            in[i + 2];
        *out++ = alphabet[(v >> 18) & 63];
        *out++ = alphabet[(v >> 12) & 63];
        *out++ = alphabet[(v >> 6) & 63];
        *out++ = alphabet[v & 63];
    }
    rest = n - i;
    if (rest > 0) {
        v = (unsigned long)in[i] << 16;
        if (rest == 2)
            v |= (unsigned long)in[i + 1] << 8;
        *out++ = alphabet[(v >> 18) & 63];
        *out++ = alphabet[(v >> 12) & 63];
        if (rest == 2)
            *out++ = alphabet[(v >> 6) & 63];
    }
    *out = '\0';
}

int
ctl_tenant_key_create(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *tenant = a->pos[0];
    const char *role = ctl_args_value(cmd, a, "role");
    unsigned char random[CTL_TENANT_KEY_RANDOM_BYTES];
    char key[4 + (CTL_TENANT_KEY_RANDOM_BYTES + 2) / 3 * 4 + 1];
    char hash[65], prefix[CTL_TENANT_KEY_PREFIX_LEN + 1], err[256];
    const char *params[4];
    const char *names[5] = { "id", "tenant", "role", "prefix", "key" };
    const char *values[5];
    PGresult *res;
    int rc;

    if (validate_tenant_name("tenant name", tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (role == NULL)
        role = "check";
    if (strcmp(role, "check") != 0 && strcmp(role, "admin") != 0)
        return ctl_usage_error(cmd, "--role: \"%s\" is not check or admin",
            role);
    if ((rc = ctl_db_connect(ctl)) != 0)
        return rc;

    if (util_random(random, sizeof(random)) == -1)
        return ctl_fail("cannot read the random generator: %s",
            strerror(errno));
    memcpy(key, "rl_", 3);
    ctl_tenant_base64url(random, sizeof(random), key + 3);
    util_sha256_hex(key, strlen(key), hash);
    memcpy(prefix, key, CTL_TENANT_KEY_PREFIX_LEN);
    prefix[CTL_TENANT_KEY_PREFIX_LEN] = '\0';

    params[0] = tenant;
    params[1] = hash;
    params[2] = prefix;
    params[3] = role;
    res = ctl_db_query(ctl,
        "INSERT INTO api_keys (tenant_id, key_hash, key_prefix, role) "
        "SELECT id, $2, $3, $4 FROM tenants WHERE name = $1 "
        "RETURNING id", 4, params);
    memset(random, 0, sizeof(random));
    if (res == NULL) {
        memset(key, 0, sizeof(key));
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        memset(key, 0, sizeof(key));
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", tenant);
    }
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = tenant;
    values[2] = role;
    values[3] = prefix;
    values[4] = key;
    ctl_db_print_fields(names, values, 5);
    fflush(stdout);
    fputs(CTL_NAME ": store the key now: it is not kept and cannot be "
        "shown again\n", stderr);
    PQclear(res);
    memset(key, 0, sizeof(key));
    return CTL_EXIT_OK;
}

int
ctl_tenant_key_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "PREFIX", "ROLE", "STATUS",
        "CREATED", "LAST_USED", NULL };
    static const struct ctl_db_listing listing = {
        "SELECT id, key_prefix, role, status, "
        "  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "
        "  coalesce(to_char(last_used_at AT TIME ZONE 'UTC', "
        "                   'YYYY-MM-DD HH24:MI:SS'), 'never') "
        "FROM api_keys WHERE tenant_id = $1::uuid ORDER BY id", headers,
        "SELECT id, key_prefix, role, status, "
        "  " CTL_DB_JSON_TIME("created_at") ", "
        "  " CTL_DB_JSON_TIME("last_used_at") " "
        "FROM api_keys WHERE tenant_id = $1::uuid ORDER BY id", headers,
        "keys" };

    return ctl_db_print_tenant_query(ctl, cmd, a->pos[0], &listing);
}

/* The start of every key: the part a prefix must go beyond. */
#define CTL_TENANT_KEY_START "rl_"

/*
 * How "key revoke" was told which key: 'i' an id (digits only), 'k' a
 * whole key (longer than the prefix that is kept), 'p' a prefix (at most
 * CTL_TENANT_KEY_PREFIX_LEN characters, beyond "rl_"), or 0: none of them.
 */
static int
ctl_tenant_key_form(const char *s)
{
    static const char key_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        "abcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t len = strlen(s), start = strlen(CTL_TENANT_KEY_START);

    if (len > 0 && strspn(s, "0123456789") == len)
        return 'i';
    if (strncmp(s, CTL_TENANT_KEY_START, start) != 0 || len == start ||
        strspn(s + start, key_chars) != len - start)
        return 0;
    return len > CTL_TENANT_KEY_PREFIX_LEN ? 'k' : 'p';
}

/*
 * The id of the one key whose prefix begins with prefix, into id (decimal).
 * Returns 0; CTL_EXIT_FAIL when no key does (or on a database error);
 * CTL_EXIT_USAGE when several do, listing them.
 */
static int
ctl_tenant_key_by_prefix(struct ctl *ctl, const char *prefix, char *id,
    size_t idlen)
{
    const char *params[1] = { prefix };
    PGresult *res;
    int i, n;

    res = ctl_db_query(ctl, "SELECT k.id, t.name, k.status, k.key_prefix "
        "FROM api_keys k JOIN tenants t ON t.id = k.tenant_id "
        "WHERE left(k.key_prefix, length($1)) = $1 ORDER BY k.id "
        "LIMIT 11", 1, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if ((n = PQntuples(res)) == 1) {
        snprintf(id, idlen, "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
        return 0;
    }
    if (n == 0) {
        PQclear(res);
        return ctl_fail("key revoke: no key begins with %s (see '" CTL_NAME
            " key list TENANT')", prefix);
    }
    ctl_warn("key revoke: %s is ambiguous: it begins %s%d keys; give the "
        "KEY_ID or more of the key; nothing was revoked:", prefix,
        n > 10 ? "more than " : "", n > 10 ? 10 : n);
    for (i = 0; i < n && i < 10; i++)
        fprintf(stderr, "    key %s  %s  tenant %s, %s\n",
            PQgetvalue(res, i, 0), PQgetvalue(res, i, 3),
            PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
    PQclear(res);
    return CTL_EXIT_USAGE;
}

/*
 * key revoke KEY_ID|KEY|PREFIX: the key named by its id, by the whole key
 * (looked up by its SHA-256, as the service does) or by its prefix as
 * "key list" shows it (or the start of one), which must name exactly one
 * key.  A longer part of a key cannot be told from a whole one that is
 * wrong: it is looked up as a whole key, and found by no one.
 */
int
ctl_tenant_key_revoke(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *arg = a->pos[0];
    const char *params[1];
    int form = ctl_tenant_key_form(arg);
    char id[24], hash[65];
    PGresult *res;
    long long v;
    int rc, n;

    /* (A mistyped key is a secret still: at most its prefix is shown.) */
    if (form == 0)
        return ctl_usage_error(cmd, "\"%.*s%s\" is not a KEY_ID (a number), "
            "a key (" CTL_TENANT_KEY_START "...) nor a prefix of one as '"
            CTL_NAME " key list' shows it (" CTL_TENANT_KEY_START " and at "
            "least one more character)", CTL_TENANT_KEY_PREFIX_LEN, arg,
            strlen(arg) > CTL_TENANT_KEY_PREFIX_LEN ? "..." : "");
    if (form == 'i') {
        if ((rc = ctl_db_parse_id_connect(ctl, cmd, "KEY_ID", arg, &v)) != 0)
            return rc;
        snprintf(id, sizeof(id), "%lld", v);
    } else {
        if ((rc = ctl_db_connect(ctl)) != 0)
            return rc;
        if (form == 'p' && (rc = ctl_tenant_key_by_prefix(ctl, arg, id,
            sizeof(id))) != 0)
            return rc;
    }
    if (form == 'k') {
        util_sha256_hex(arg, strlen(arg), hash);
        params[0] = hash;
        res = ctl_db_query(ctl, "SELECT id FROM api_keys WHERE key_hash = $1",
            1, params);
        if (res == NULL)
            return ctl_db_fail(ctl);
        if (PQntuples(res) == 0) {
            PQclear(res);
            return ctl_fail("key revoke: no key is %.*s... (a whole key, or "
                "its first %d characters as 'key list' shows them)",
                CTL_TENANT_KEY_PREFIX_LEN, arg, CTL_TENANT_KEY_PREFIX_LEN);
        }
        snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
        PQclear(res);
    }
    params[0] = id;
    n = ctl_db_query_rows(ctl, "UPDATE api_keys "
        "SET status = 'revoked', revoked_at = now() "
        "WHERE id = $1::bigint AND status = 'active' RETURNING id",
        1, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n > 0) {
        printf("key %s revoked\n", id);
        return CTL_EXIT_OK;
    }
    n = ctl_db_query_rows(ctl,
        "SELECT status FROM api_keys WHERE id = $1::bigint", 1, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n == 0)
        return ctl_fail("no key with id %s", id);
    printf("key %s was already revoked\n", id);
    return CTL_EXIT_OK;
}
