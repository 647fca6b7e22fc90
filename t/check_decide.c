/*
 * check_decide.c -- the decision (src/decide.c, src/authorizer.c) with fake
 * stores.
 *
 * The stores behind the seam are a table of keys, a table of rules and a
 * script that answers what the test sets; each counts its calls.  So every
 * row of the README's status table, fail open and closed, shadow rules,
 * a key store that goes away after a key was learnt, the limits on key
 * lookups and "no rule, no script call" are checked without a network.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <check.h>

#include "decide.h"
#include "service.h"            /* struct scoreboard: the segment as served */
#include "fixtures.h"

#define TENANT "11111111-2222-3333-4444-555555555555"

enum script_mode { SCRIPT_ALLOW, SCRIPT_DENY, SCRIPT_DOWN, SCRIPT_ERROR,
    SCRIPT_SHADOW_DENY, SCRIPT_OVER_BUDGET };

struct fake {
    int pg_down;
    int script_mode;
    int key_calls, rules_calls, script_calls, tenant_calls, used_calls;
    long long retry_ms;         /* of a denial; 0 = 1500 */
    long long key_budget;       /* the tenant's counter budget (-1: none
                                   of its own) */
    char call_budget[24];       /* the last call's budget argument, "" */
    long long used_id;
    int changed;
    struct rl_rule rules[8];
    int nrules;
    int too_many;               /* the store had more than RL_MAX_RULES */
    struct store_change named[4];   /* notified next, by name */
    int nnamed;
    int many;                   /* prefix rules of /m/<i>/ to add */
};

struct fake_key {
    const char *key;
    int admin, revoked, suspended;
};

static const struct fake_key fake_keys[] = {
    { "good-key", 0, 0, 0 },
    { "admin-key", 1, 0, 0 },
    { "revoked-key", 0, 1, 0 },
    { "suspended-key", 0, 0, 1 },
};

static int
fake_key(void *ctx, const char *hash, struct key_info *out)
{
    struct fake *f = ctx;
    char h[65];
    size_t i;

    f->key_calls++;
    if (f->pg_down)
        return STORE_UNAVAILABLE;
    memset(out, 0, sizeof(*out));
    for (i = 0; i < sizeof(fake_keys) / sizeof(fake_keys[0]); i++) {
        util_sha256_hex(fake_keys[i].key, strlen(fake_keys[i].key), h);
        if (strcmp(h, hash) != 0)
            continue;
        out->found = 1;
        out->key_id = (long long)i + 1;
        strcpy(out->key_prefix, "fake");
        strcpy(out->tenant_id, TENANT);
        strcpy(out->tenant_name, "acme");
        out->admin = fake_keys[i].admin;
        out->revoked = fake_keys[i].revoked;
        out->suspended = fake_keys[i].suspended;
        out->counter_budget = f->key_budget;
    }
    return STORE_OK;
}

static int
fake_tenant(void *ctx, const char *name, struct key_info *out)
{
    struct fake *f = ctx;

    f->tenant_calls++;
    if (f->pg_down)
        return STORE_UNAVAILABLE;
    memset(out, 0, sizeof(*out));
    if (strcmp(name, "anon") == 0) {
        out->found = 1;
        strcpy(out->tenant_id, TENANT);
        out->counter_budget = f->key_budget;
    }
    return STORE_OK;
}

static int
fake_rules(void *ctx, const char *tenant_id, struct tenant_rules **out)
{
    struct fake *f = ctx;
    struct tenant_rules *tr;
    int i;

    f->rules_calls++;
    if (f->pg_down)
        return STORE_UNAVAILABLE;
    ck_assert_str_eq(tenant_id, TENANT);
    tr = calloc(1, sizeof(*tr));
    tr->rules = calloc(8 + (size_t)f->many, sizeof(*tr->rules));
    memcpy(tr->rules, f->rules, sizeof(f->rules));
    tr->n = f->nrules;
    tr->too_many = f->too_many;
    for (i = 0; i < f->many; i++) {
        char pattern[32];

        snprintf(pattern, sizeof(pattern), "/m/%d/*", i);
        fixture_rule_init(&tr->rules[tr->n], 1000 + i, pattern, 0);
        fixture_rule_limits(&tr->rules[tr->n], 1, NULL, 100000 + i);
        tr->n++;
    }
    *out = tr;
    return STORE_OK;
}

static int
fake_script(void *ctx, struct limiter_call *call, int nlimits,
    struct rl_decision *d)
{
    struct fake *f = ctx;
    int i;

    f->script_calls++;
    /* The budget's arguments, when it has them, are the last but two. */
    snprintf(f->call_budget, sizeof(f->call_budget), "%s", call->budgeted ?
        call->argv[call->argc - 3] : "");
    if (f->script_mode == SCRIPT_DOWN)
        return STORE_UNAVAILABLE;
    if (f->script_mode == SCRIPT_ERROR)
        return STORE_BAD_REPLY;
    memset(d, 0, sizeof(*d));
    d->now_ms = 1700000000000LL;
    if (f->script_mode == SCRIPT_OVER_BUDGET) {
        d->over_budget = 1;
        d->budget_retry_ms = 1200500;
        return STORE_OK;
    }
    d->nlimits = nlimits;
    d->allowed = f->script_mode != SCRIPT_DENY;
    for (i = 0; i < nlimits; i++) {
        d->st[i].allowed = f->script_mode == SCRIPT_ALLOW;
        d->st[i].limit = 10;
        d->st[i].remaining = d->st[i].allowed ? 9 : 0;
        d->st[i].reset_ms = 1000;
        d->st[i].retry_after_ms = d->st[i].allowed ? 0 :
            f->retry_ms > 0 ? f->retry_ms : 1500;
    }
    return STORE_OK;
}

static void
fake_used(void *ctx, long long key_id)
{
    struct fake *f = ctx;

    f->used_calls++;
    f->used_id = key_id;
}

static int
fake_changed(void *ctx, struct store_change *out, int max)
{
    struct fake *f = ctx;
    int c = f->changed, i;

    f->changed = 0;
    if (c)
        return -1;
    for (i = 0; i < f->nnamed && i < max; i++)
        out[i] = f->named[i];
    c = f->nnamed;
    f->nnamed = 0;
    return c;
}

static struct rl_config cfg;
static struct rl_counters counters;
static struct decider dc;
static struct fake fk, fk2;
static struct shm shm;
static void *shm_base;
static struct rl_response resp;

static void
add_rule(long long id, const char *pattern, int nlimits, int fail_open,
    int shadow, int always)
{
    struct rl_rule *r = &fk.rules[fk.nrules++];

    fixture_rule_init(r, id, pattern, 0);
    r->fail_open = fail_open;
    r->shadow = shadow;
    r->always = always;
    fixture_rule_limits(r, nlimits, NULL, id * 100);
}

static void
setup(void)
{
    size_t counts[SHM_NTABLES] = { 64, 64, 16 }, size;
    struct decide_store store = { &fk, fake_key, fake_tenant, fake_rules,
        fake_script, fake_changed, fake_used };

    config_defaults(&cfg);
    cfg.key_lookup_rate = 0;
    strcpy(cfg.anonymous_tenant, "anon");
    memset(&counters, 0, sizeof(counters));
    memset(&fk, 0, sizeof(fk));
    fk.key_budget = -1;
    add_rule(1, "/api/*", 1, 0, 0, 0);
    add_rule(2, "/open/*", 1, 1, 0, 0);
    add_rule(3, "/shadow/*", 1, 0, 1, 0);
    add_rule(4, "/nine/*", 8, 0, 0, 0);
    fk.rules[3].limits[7].id = 999;
    shm_base = fixture_shm_region(sizeof(struct scoreboard), counts, &size);
    ck_assert_int_eq(shm_init(&shm, shm_base, size,
        sizeof(struct scoreboard), counts), 0);
    ck_assert_int_eq(decide_init(&dc, &cfg, &counters, &shm, &store), 0);
    response_init(&resp);
}

static void
teardown(void)
{
    response_free(&resp);
    decide_free(&dc);
    free(shm_base);
}

/* The decider check() asks: a worker of the pool. */
static struct decider *checker = &dc;

/* One check: key (NULL: none), body; fills resp. */
static int
check(const char *key, const char *body)
{
    struct http_request req;

    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/v1/check";
    req.path_len = strlen(req.path);
    req.query = "";
    req.x_api_key = key;
    req.body = body;
    req.body_len = strlen(body);
    response_reset(&resp);
    decide_check(checker, &req, &resp);
    return resp.status;
}

/* One authorizer request for path from 192.0.2.1 with key (NULL: none);
 * fills resp. */
static int
authorize(const char *path, const char *key)
{
    struct http_request req;

    memset(&req, 0, sizeof(req));
    req.method = "GET";
    req.path = path;
    req.path_len = strlen(path);
    req.query = "";
    req.authorizer = 1;
    req.remote_addr = "192.0.2.1";
    req.x_api_key = key;
    response_reset(&resp);
    authorizer_decide(&dc, &req, &resp);
    return resp.status;
}

static const char *
body_has(const char *text)
{
    return strstr(resp.body.data != NULL ? resp.body.data : "", text);
}

static const char *
header_has(const char *text)
{
    return strstr(resp.headers.data != NULL ? resp.headers.data : "", text);
}

START_TEST(test_allowed_and_denied)
{
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_ptr_nonnull(body_has("\"allowed\":true"));
    ck_assert_ptr_nonnull(header_has("X-RateLimit-Limit: 10"));
    ck_assert_int_eq(fk.script_calls, 1);
    /* The key served is reported (for last_used_at). */
    ck_assert_int_eq(fk.used_calls, 1);
    ck_assert_int_gt(fk.used_id, 0);
    fk.script_mode = SCRIPT_DENY;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 429);
    ck_assert_ptr_nonnull(header_has("Retry-After: 2"));
    ck_assert_int_eq((int)counters.allowed, 1);
    ck_assert_int_eq((int)counters.denied, 1);
}
END_TEST

START_TEST(test_identification)
{
    char longkey[RL_KEY_MAX + 2];

    ck_assert_int_eq(check(NULL, "{\"route\":\"/api/x\"}"), 401);
    ck_assert_ptr_nonnull(body_has("missing API key"));
    ck_assert_int_eq(check("no-such-key", "{\"route\":\"/api/x\"}"), 401);
    ck_assert_ptr_nonnull(body_has("invalid API key"));
    ck_assert_int_eq(check("revoked-key", "{\"route\":\"/api/x\"}"), 401);
    ck_assert_int_eq(check("suspended-key", "{\"route\":\"/api/x\"}"), 403);
    ck_assert_ptr_nonnull(body_has("tenant_suspended"));
    ck_assert_int_eq(check("admin-key", "{\"route\":\"/api/x\"}"), 403);
    ck_assert_ptr_nonnull(body_has("admin_key_cannot_check"));
    memset(longkey, 'k', sizeof(longkey) - 1);
    longkey[sizeof(longkey) - 1] = '\0';
    ck_assert_int_eq(check(longkey, "{\"route\":\"/api/x\"}"), 401);
    ck_assert_ptr_nonnull(body_has("API key is too long"));
    ck_assert_int_eq(fk.script_calls, 0);
}
END_TEST

START_TEST(test_bad_input)
{
    struct http_request req;

    ck_assert_int_eq(check("good-key", "{\"route\":"), 400);
    ck_assert_ptr_nonnull(body_has("invalid_request"));
    memset(&req, 0, sizeof(req));
    req.method = "POST";
    req.path = "/v1/check";
    req.path_len = 9;
    req.x_api_key = "good-key";
    req.body = "";
    req.body_too_large = 1;
    response_reset(&resp);
    decide_check(&dc, &req, &resp);
    ck_assert_int_eq(resp.status, 413);
    /* A NUL in the key's parameter: what libfcgi left is not the key. */
    req.body_too_large = 0;
    req.body = "{\"route\":\"/api/x\"}";
    req.body_len = strlen(req.body);
    req.nul_in_key = 1;
    response_reset(&resp);
    decide_check(&dc, &req, &resp);
    ck_assert_int_eq(resp.status, 401);
    ck_assert_int_eq(fk.script_calls, 0);
}
END_TEST

START_TEST(test_no_rule_no_script_call)
{
    ck_assert_int_eq(check("good-key", "{\"route\":\"/elsewhere\"}"), 200);
    ck_assert_ptr_nonnull(body_has("{\"allowed\":true}"));
    ck_assert_int_eq(fk.script_calls, 0);
    ck_assert_int_eq((int)counters.no_rule, 1);
}
END_TEST

START_TEST(test_fail_open_and_closed)
{
    fk.script_mode = SCRIPT_DOWN;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("service_unavailable"));
    ck_assert_ptr_nonnull(header_has("Retry-After: 1"));
    ck_assert_int_eq(check("good-key", "{\"route\":\"/open/x\"}"), 200);
    ck_assert_ptr_nonnull(header_has("X-RateLimit-Status: fail-open"));
    ck_assert_int_eq((int)counters.fail_open, 1);
    ck_assert_int_eq((int)counters.redis_errors, 2);
    /* An error reply is not an outage: closed even for an open rule. */
    fk.script_mode = SCRIPT_ERROR;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/open/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("script_error"));
    ck_assert_int_eq((int)counters.script_errors, 1);
    ck_assert_int_eq((int)counters.fail_open, 1);
}
END_TEST

START_TEST(test_shadow)
{
    fk.script_mode = SCRIPT_SHADOW_DENY;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/shadow/x\"}"), 200);
    ck_assert_ptr_nonnull(body_has("shadow_denied"));
    ck_assert_int_eq((int)counters.shadow_denied, 1);
}
END_TEST

/* A cost above what a limit lets through at once (10 here) is a 400 that
 * names the limit, without a script call; a shadow limit decides
 * nothing. */
START_TEST(test_cost_exceeds_limit)
{
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"cost\":11}"), 400);
    ck_assert_ptr_nonnull(body_has("\"error\":\"cost_exceeds_limit\""));
    ck_assert_ptr_nonnull(body_has("\"limit\":\"l0\""));
    ck_assert_ptr_nonnull(body_has("\"max_cost\":10"));
    ck_assert_ptr_nonnull(body_has("\"cost\":11"));
    ck_assert_ptr_null(header_has("Retry-After"));
    ck_assert_int_eq(fk.script_calls, 0);
    ck_assert_int_eq((int)counters.denied, 0);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"cost\":10}"), 200);
    ck_assert_int_eq(fk.script_calls, 1);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/shadow/x\",\"cost\":11}"), 200);
    ck_assert_int_eq(fk.script_calls, 2);
}
END_TEST

/* The shared over-limit cache: a denial Redis gave is answered again
 * without Redis until its Retry-After, for the same counters and at least
 * the same cost; never an allowed answer, never a peek, never across a
 * change of generation. */
START_TEST(test_overlimit_cache)
{
    const char *body = "{\"route\":\"/api/x\",\"subject\":\"s\"}";

    fk.script_mode = SCRIPT_ALLOW;
    ck_assert_int_eq(check("good-key", body), 200);
    ck_assert_int_eq(check("good-key", body), 200);
    ck_assert_int_eq(fk.script_calls, 2);           /* never cached */
    fk.script_mode = SCRIPT_DENY;
    ck_assert_int_eq(check("good-key", body), 429);
    ck_assert_int_eq(fk.script_calls, 3);
    ck_assert_int_eq((int)counters.overlimit_inserts, 1);
    ck_assert_int_eq(check("good-key", body), 429);
    ck_assert_int_eq(fk.script_calls, 3);           /* from the cache */
    ck_assert_int_eq((int)counters.overlimit_hits, 1);
    ck_assert_ptr_nonnull(header_has("Retry-After: 2"));
    ck_assert_ptr_nonnull(header_has("X-RateLimit-Remaining: 0"));
    ck_assert_int_eq((int)counters.denied, 2);
    /* Another subject is other counters. */
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"t\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 4);
    /* A larger cost is denied as well... */
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"s\",\"cost\":2}"), 429);
    ck_assert_int_eq(fk.script_calls, 4);
    /* ...but a smaller one may pass: Redis decides. */
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"c\",\"cost\":2}"), 429);
    ck_assert_int_eq(fk.script_calls, 5);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"c\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 6);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"c\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 6);
    /* A peek always asks Redis. */
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"s\",\"peek\":true}"), 429);
    ck_assert_int_eq(fk.script_calls, 7);
    /* A change of keys or rules (or a reload) forgets every denial. */
    shm_changed(&shm);
    ck_assert_int_eq(check("good-key", body), 429);
    ck_assert_int_eq(fk.script_calls, 8);
    /* Never past the time Redis gave. */
    fk.retry_ms = 60;
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"u\"}"), 429);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"u\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 9);
    usleep(80000);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"u\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 10);
    /* A Retry-After below overlimit_cache_min_ms is not kept. */
    fk.retry_ms = 20;
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"v\"}"), 429);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"v\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 12);
    /* Off: every check asks Redis. */
    cfg.overlimit_cache_size = 0;
    fk.retry_ms = 0;
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"w\"}"), 429);
    ck_assert_int_eq(check("good-key",
        "{\"route\":\"/api/x\",\"subject\":\"w\"}"), 429);
    ck_assert_int_eq(fk.script_calls, 14);
}
END_TEST

/* The tenant's counter budget goes with every call (its own, else the
 * configuration's; 0: none); a refusal is 429 counter_budget_exceeded with
 * the wait, from the check API and the authorizer alike, and is never
 * remembered as a denial. */
START_TEST(test_counter_budget)
{
    const char *body = "{\"route\":\"/api/x\",\"subject\":\"s\"}";

    ck_assert_int_eq(check("good-key", body), 200);
    ck_assert_str_eq(fk.call_budget, "100000");
    fk.key_budget = 40;
    fk.changed = 1;
    ck_assert_int_eq(check("good-key", body), 200);
    ck_assert_str_eq(fk.call_budget, "40");
    cfg.tenant_counter_budget = 0;
    fk.key_budget = -1;
    fk.changed = 1;
    ck_assert_int_eq(check("good-key", body), 200);
    ck_assert_str_eq(fk.call_budget, "");
    cfg.tenant_counter_budget = 7;
    fk.changed = 1;
    fk.script_mode = SCRIPT_OVER_BUDGET;
    ck_assert_int_eq(check("good-key", body), 429);
    ck_assert_str_eq(fk.call_budget, "7");
    ck_assert_ptr_nonnull(body_has("\"error\":\"counter_budget_exceeded\""));
    ck_assert_ptr_nonnull(header_has("Retry-After: 1201"));
    /* The one refusal shape: the waits in the body too. */
    ck_assert_ptr_nonnull(body_has("\"retry_after\":1201,"));
    ck_assert_ptr_nonnull(body_has("\"retry_after_ms\":1200500}"));
    ck_assert_ptr_nonnull(body_has("\"message\":"));
    ck_assert_int_eq(check("good-key", body), 429);
    ck_assert_int_eq(fk.script_calls, 5);
    ck_assert_int_eq((int)counters.over_budget, 2);
    ck_assert_int_eq((int)counters.denied, 0);
    ck_assert_int_eq((int)counters.overlimit_inserts, 0);

    ck_assert_int_eq(authorize("/api/x", NULL), 429);
    ck_assert_ptr_nonnull(header_has("Retry-After: 1201"));
    ck_assert_int_eq((int)counters.over_budget, 3);
}
END_TEST

START_TEST(test_misconfigured)
{
    /* 8 limits on the /nine/ rule, and an always rule for all: 9. */
    add_rule(5, "*", 1, 0, 0, 1);
    ck_assert_int_eq(check("good-key", "{\"route\":\"/nine/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("misconfigured"));
    ck_assert_int_eq(fk.script_calls, 0);
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(fk.script_calls, 1);
}
END_TEST

START_TEST(test_misconfigured_rules)
{
    /* A rule of which a limit could not be loaded: its routes are refused,
     * the others decided. */
    fk.rules[0].broken = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("misconfigured"));
    ck_assert_int_eq(check("good-key", "{\"route\":\"/open/x\"}"), 200);
    ck_assert_int_eq(fk.script_calls, 1);
    /* More rules than a tenant may have: not one route is decided from
     * the rules that were loaded, not even a route without a rule. */
    fk.rules[0].broken = 0;
    fk.too_many = 1;
    fk.changed = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/open/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("misconfigured"));
    ck_assert_int_eq(check("good-key", "{\"route\":\"/none\"}"), 503);
    ck_assert_int_eq(fk.script_calls, 1);
    ck_assert_int_eq((int)counters.misconfigured, 3);
}
END_TEST

/* The key store goes away after the key was learnt: the pool's
 * knowledge is used, even past its TTL; an unknown key gets 503. */
START_TEST(test_store_down_with_known_key)
{
    cfg.key_cache_ttl = 0;
    cfg.rule_cache_ttl = 0;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    fk.pg_down = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_gt(fk.key_calls, 1);      /* it did try */
    ck_assert_int_eq(check("other-key", "{\"route\":\"/api/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("key store unavailable"));
    /* A change notified: fresh answers are needed, stale ones still
     * serve while the store is down. */
    fk.changed = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
}
END_TEST

START_TEST(test_key_lookups)
{
    int calls;

    /* Unknown keys are remembered: the second try asks nobody. */
    ck_assert_int_eq(check("bad-1", "{\"route\":\"/api/x\"}"), 401);
    calls = fk.key_calls;
    ck_assert_int_eq(check("bad-1", "{\"route\":\"/api/x\"}"), 401);
    ck_assert_int_eq(fk.key_calls, calls);
    /* Known keys too. */
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    calls = fk.key_calls;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(fk.key_calls, calls);
    /* Past key_lookup_rate, a key the pool does not know is not looked
     * up; without a filter of active keys nobody has said it is invalid,
     * so it is asked to come back (503), never told 401; a key the pool
     * knows still works. */
    dc.cfg = &cfg;
    cfg.key_lookup_rate = 1;
    dc.lookup_tokens = 1;
    dc.lookup_refill_ms = util_now_ms();
    ck_assert_int_eq(check("bad-2", "{\"route\":\"/api/x\"}"), 401);
    calls = fk.key_calls;
    ck_assert_int_eq(check("bad-3", "{\"route\":\"/api/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("key_lookup_deferred"));
    ck_assert_ptr_nonnull(header_has("Retry-After: 1\r\n"));
    ck_assert_int_eq(check("suspended-key", "{\"route\":\"/api/x\"}"),
        503);
    ck_assert_int_eq(fk.key_calls, calls);
    ck_assert_int_eq((int)counters.key_lookups_limited, 2);
    ck_assert_int_eq((int)counters.key_lookups_deferred, 2);
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
}
END_TEST

/* A notification that names a key or a tenant makes only that one stale:
 * the other keys and tenants are answered without the store. */
START_TEST(test_named_changes)
{
    int keys, rules;

    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(check("admin-key", "{\"route\":\"/api/x\"}"), 403);
    keys = fk.key_calls;
    rules = fk.rules_calls;
    /* Another key, another tenant: nothing is asked again. */
    util_sha256("admin-key", strlen("admin-key"), fk.named[0].key);
    fk.named[0].kind = STORE_CHANGE_KEY;
    fk.named[1].kind = STORE_CHANGE_TENANT;
    strcpy(fk.named[1].tenant, "99999999-2222-3333-4444-555555555555");
    fk.nnamed = 2;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(fk.key_calls, keys);
    ck_assert_int_eq(fk.rules_calls, rules);
    /* The key named is looked up again, and only it. */
    ck_assert_int_eq(check("admin-key", "{\"route\":\"/api/x\"}"), 403);
    ck_assert_int_eq(fk.key_calls, keys + 1);
    /* The tenant named: its rules are read again, its keys are not. */
    fk.named[0].kind = STORE_CHANGE_TENANT;
    strcpy(fk.named[0].tenant, TENANT);
    fk.nnamed = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(fk.key_calls, keys + 1);
    ck_assert_int_eq(fk.rules_calls, rules + 1);
    /* Anything may have changed: everything is asked again. */
    fk.changed = 1;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/api/x\"}"), 200);
    ck_assert_int_eq(fk.key_calls, keys + 2);
    ck_assert_int_eq(fk.rules_calls, rules + 2);
}
END_TEST

/* A tenant whose rules are too large for a shared entry: with the ring,
 * a worker that starts while the store is down has them all the same;
 * without it, it has nothing to decide by. */
START_TEST(test_large_rules_shared)
{
    struct decide_store down = { &fk2, fake_key, fake_tenant, fake_rules,
        fake_script, fake_changed, fake_used };
    struct decider dc2;
    struct arena ar;
    size_t size = arena_size(4 << 20);
    void *mem = calloc(1, size);

    ck_assert_int_eq(arena_init(&ar, mem, size), 0);
    shm.arena = &ar;
    fk.many = 300;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/m/250/x\"}"), 200);
    ck_assert_int_eq(fk.rules_calls, 1);
    /* Another worker, the store down. */
    memset(&fk2, 0, sizeof(fk2));
    fk2.pg_down = 1;
    ck_assert_int_eq(decide_init(&dc2, &cfg, &counters, &shm, &down), 0);
    checker = &dc2;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/m/250/x\"}"), 200);
    ck_assert_ptr_nonnull(body_has("\"allowed\":true"));
    ck_assert_int_eq(check("good-key", "{\"route\":\"/m/7/y\"}"), 200);
    ck_assert_int_eq(fk2.rules_calls, 0);
    decide_free(&dc2);
    /* Without the ring: the rules were not shared; 503. */
    shm.arena = NULL;
    fk.changed = 1;
    checker = &dc;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/m/250/x\"}"), 200);
    ck_assert_int_eq(decide_init(&dc2, &cfg, &counters, &shm, &down), 0);
    checker = &dc2;
    ck_assert_int_eq(check("good-key", "{\"route\":\"/m/250/x\"}"), 503);
    checker = &dc;
    decide_free(&dc2);
    free(mem);
}
END_TEST

/* With a filter of active keys: a key it vouches for is looked up past
 * key_lookup_rate; once complete, a key it does not know is invalid
 * (401) without a lookup; while incomplete, 503. */
START_TEST(test_key_filter)
{
    struct keyfilter kf;
    unsigned char md[32];
    size_t size = keyfilter_size(4096);
    void *mem = calloc(1, size);
    int calls;

    ck_assert_int_eq(keyfilter_init(&kf, mem, size), 0);
    shm.keyfilter = &kf;
    cfg.key_lookup_rate = 1;
    dc.lookup_tokens = 0;
    dc.lookup_refill_ms = util_now_ms();
    util_sha256("suspended-key", strlen("suspended-key"), md);
    keyfilter_add(&kf, md);
    util_sha256("revoked-key", strlen("revoked-key"), md);
    keyfilter_add(&kf, md);
    calls = fk.key_calls;
    ck_assert_int_eq(check("bad-1", "{\"route\":\"/api/x\"}"), 503);
    ck_assert_ptr_nonnull(body_has("key_lookup_deferred"));
    ck_assert_int_eq(fk.key_calls, calls);
    ck_assert_int_eq(check("suspended-key", "{\"route\":\"/api/x\"}"),
        403);
    ck_assert_int_eq(fk.key_calls, calls + 1);
    keyfilter_release(&kf, 0, 1, 0);
    ck_assert_int_eq(check("bad-2", "{\"route\":\"/api/x\"}"), 401);
    ck_assert_ptr_nonnull(body_has("unauthorized"));
    ck_assert_int_eq(check("revoked-key", "{\"route\":\"/api/x\"}"), 401);
    ck_assert_int_eq(fk.key_calls, calls + 2);
    ck_assert_int_eq((int)counters.key_lookups_limited, 2);
    ck_assert_int_eq((int)counters.key_lookups_deferred, 1);
    shm.keyfilter = NULL;
    free(mem);
}
END_TEST

/* The authorizer: the path decides, the anonymous tenant stands in for a
 * missing key, and nginx gets its 401/403 only. */
START_TEST(test_authorizer)
{
    ck_assert_int_eq(authorize("/api//%78", NULL), 200);
    ck_assert_int_eq(fk.tenant_calls, 1);
    ck_assert_int_eq(fk.script_calls, 1);
    ck_assert_ptr_nonnull(header_has("Variable-RateLimit-Remaining: 9"));
    /* No key, no key served. */
    ck_assert_int_eq(fk.used_calls, 0);
    fk.script_mode = SCRIPT_DENY;
    ck_assert_int_eq(authorize("/api//%78", "good-key"), 429);
    authorizer_nginx(&resp);
    ck_assert_int_eq(resp.status, 403);
    ck_assert_ptr_nonnull(header_has("X-RateLimit-Status: limited"));
}
END_TEST

Suite *
decide_suite(void)
{
    Suite *s = suite_create("decide");
    TCase *tc = tcase_create("fake stores");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_allowed_and_denied);
    tcase_add_test(tc, test_identification);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_no_rule_no_script_call);
    tcase_add_test(tc, test_fail_open_and_closed);
    tcase_add_test(tc, test_shadow);
    tcase_add_test(tc, test_cost_exceeds_limit);
    tcase_add_test(tc, test_overlimit_cache);
    tcase_add_test(tc, test_counter_budget);
    tcase_add_test(tc, test_misconfigured);
    tcase_add_test(tc, test_misconfigured_rules);
    tcase_add_test(tc, test_store_down_with_known_key);
    tcase_add_test(tc, test_key_lookups);
    tcase_add_test(tc, test_key_filter);
    tcase_add_test(tc, test_named_changes);
    tcase_add_test(tc, test_large_rules_shared);
    tcase_add_test(tc, test_authorizer);
    suite_add_tcase(s, tc);
    return s;
}
