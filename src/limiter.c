/*
 * limiter.c -- the two ends of the one Redis round trip of a check.
 *
 * limiter_build() turns a rule and a request into the EVALSHA arguments of
 * lua/check.lua, limiter_budget() adds the tenant's counter budget to them,
 * the Redis store adds the request's own key with limiter_request_key()
 * and, when it must send the call again, limiter_resend()'s mark (together
 * they make the resend harmless); limiter_decode() turns the script's flat
 * integer reply back into a decision, or the budget's refusal.  The call
 * keeps how it is made up (limits, budget, reply slot) beside its
 * arguments, so each step knows where the others put theirs.
 * Caller-supplied strings (route, subject) enter
 * Redis keys only as fixed-length SHA-256 prefixes, so a key's size is
 * bounded whatever the caller sends, and the {tenant} hash tag keeps every
 * key of one check in one Redis Cluster slot.
 */
#include <stdio.h>
#include <string.h>

#include "ratelimit.h"

/* Hex characters of SHA-256 used in keys: 128 bits. */
#define LIMITER_HASH_HEX 32
/* The longest counter key: the tenant's id, two ids, two hash parts. */
#define LIMITER_KEY_MAX 640

/* The key count, argv[0], of a call: the limits' keys, the budget's two,
 * the reply slot. */
static const char *const limiter_nkeys_text[] = { "0", "1", "2", "3", "4",
    "5", "6", "7", "8", "9", "10", "11", "12" };
_Static_assert(sizeof(limiter_nkeys_text) / sizeof(limiter_nkeys_text[0]) >
    RL_MAX_LIMITS + 4, "a key count for every call");

/* Appends s (n bytes) as the next argument.  Returns 0 or -1 (no room). */
static int
limiter_arg(struct limiter_call *call, size_t *used, const char *s, size_t n)
{
    char *dst;

    if (call->argc >= LIMITER_MAX_ARGS || *used + n + 1 > sizeof(call->store))
        return -1;
    dst = call->store + *used;
    memcpy(dst, s, n);
    dst[n] = '\0';
    call->argv[call->argc] = dst;
    call->argvlen[call->argc] = n;
    call->argc++;
    *used += n + 1;
    return 0;
}

/* Appends v in decimal as the next argument. */
static int
limiter_arg_ll(struct limiter_call *call, size_t *used, long long v)
{
    char digits[21];
    size_t n = util_lltoa(v, digits);

    return limiter_arg(call, used, digits, n);
}

/* Appends a counter's key, "rl:{TENANT}:RULE:LIMIT" then the route and
 * client parts, built by hand: this runs for every limit of every check. */
static int
limiter_arg_key(struct limiter_call *call, size_t *used,
    const char *tenant_id, long long rule, long long limit,
    const char *route_part, const char *who_part)
{
    char key[LIMITER_KEY_MAX];
    size_t n = 0, t = strlen(tenant_id), r = strlen(route_part),
        w = strlen(who_part);

    if (t + r + w + 2 * 21 + 8 > sizeof(key))
        return -1;
    memcpy(key, "rl:{", 4);
    n = 4;
    memcpy(key + n, tenant_id, t);
    n += t;
    memcpy(key + n, "}:", 2);
    n += 2;
    n += util_lltoa(rule, key + n);
    key[n++] = ':';
    n += util_lltoa(limit, key + n);
    memcpy(key + n, route_part, r);
    n += r;
    memcpy(key + n, who_part, w);
    n += w;
    return limiter_arg(call, used, key, n);
}

/* ":<prefix><the first LIMITER_HASH_HEX hex digits of SHA-256 of s>" into
 * out. */
static void
limiter_hash_part(struct sha256_memo *memo, char *out, char prefix,
    const char *s)
{
    unsigned char md[32];
    char hash[65];

    util_sha256_memo(memo, s, strlen(s), md);
    util_hex(md, sizeof(md), hash);
    out[0] = ':';
    out[1] = prefix;
    memcpy(out + 2, hash, LIMITER_HASH_HEX);
    out[2 + LIMITER_HASH_HEX] = '\0';
}

/* Appends the algorithm and its three parameters for limit l (algo.c
 * writes them). */
static int
limiter_params(struct limiter_call *call, size_t *used,
    const struct rl_limit *l)
{
    char args[ALGO_SCRIPT_ARGS][ALGO_TEXT_MAX];
    int i;

    if (algo_script_args(l, args) == -1)
        return -1;
    for (i = 0; i < ALGO_SCRIPT_ARGS; i++)
        if (limiter_arg(call, used, args[i], strlen(args[i])) == -1)
            return -1;
    return 0;
}

int
limiter_build(const char *tenant_id, const struct rl_plan *plan,
    const struct check_request *req, struct limiter_call *call)
{
    /* The last route, identity and subject hashed: they often repeat. */
    static struct sha256_memo route_memo, who_memo[2];
    char route_part[LIMITER_HASH_HEX + 4];
    char who_part[2][LIMITER_HASH_HEX + 4];     /* subject, identity */
    const char *part;
    size_t used = 0;
    int i, n = plan->n, need_identity;

    call->argc = 0;
    if (n < 1 || n > RL_MAX_LIMITS)
        return -1;
    route_part[0] = '\0';
    for (i = 0; i < n; i++)
        if (plan->rule[i]->per_route) {
            limiter_hash_part(&route_memo, route_part, 'r', req->route);
            break;
        }
    /* Who a counter is for (enum rl_count): the subject, else the
     * identity; the identity; or nobody (the tenant).  Both as the same
     * ":s<hash>", so that a limit counting subjects and one counting keys
     * name the same client alike. */
    who_part[0][0] = who_part[1][0] = '\0';
    need_identity = !req->has_subject;
    for (i = 0; i < n; i++)
        if (plan->limit[i]->count == RL_COUNT_KEY)
            need_identity = 1;
    if (need_identity && req->identity[0] != '\0')
        limiter_hash_part(&who_memo[1], who_part[1], 's', req->identity);
    if (req->has_subject)
        limiter_hash_part(&who_memo[0], who_part[0], 's', req->subject);
    else
        memcpy(who_part[0], who_part[1], sizeof(who_part[0]));
    call->nlimits = call->budgeted = call->keyed = call->leased = 0;
    if (limiter_arg_ll(call, &used, n) == -1)
        return -1;
    for (i = 0; i < n; i++) {
        switch (plan->limit[i]->count) {
        case RL_COUNT_TENANT:
            part = "";
            break;
        case RL_COUNT_KEY:
            part = who_part[1];
            break;
        default:
            part = who_part[0];
            break;
        }
        if (limiter_arg_key(call, &used, tenant_id, plan->rule[i]->id,
            plan->limit[i]->id, plan->rule[i]->per_route ? route_part : "",
            part) == -1)
            return -1;
    }
    if (limiter_arg_ll(call, &used, req->cost) == -1 ||
        limiter_arg(call, &used, req->peek ? "1" : "0", 1) == -1 ||
        limiter_arg_ll(call, &used, n) == -1)
        return -1;
    for (i = 0; i < n; i++)
        if (limiter_params(call, &used, plan->limit[i]) == -1 ||
            limiter_arg(call, &used, plan->rule[i]->shadow ? "1" : "0", 1) ==
            -1)
            return -1;
    call->nlimits = n;
    return 0;
}

/* The keys of call, the reply slot's included. */
static int
limiter_nkeys(const struct limiter_call *call)
{
    return call->nlimits + 2 * call->budgeted + call->leased + call->keyed;
}

/* Whether call is as limiter_build(), limiter_budget(), limiter_lease()
 * and limiter_request_key() make it: 1 + 4 + 6n arguments for n limits,
 * five more with the budget, three more with a lease, two more with the
 * reply slot. */
static int
limiter_shape_ok(const struct limiter_call *call)
{
    int n = call->nlimits;

    return n >= 1 && n <= RL_MAX_LIMITS && call->argc ==
        4 + 6 * n + 5 * call->budgeted + 3 * call->leased +
        2 * call->keyed &&
        strcmp(call->argv[0], limiter_nkeys_text[limiter_nkeys(call)]) == 0;
}

/* The end of the last argument in call's store: where the next goes. */
static size_t
limiter_used(const struct limiter_call *call)
{
    return (size_t)(call->argv[call->argc - 1] - call->store) +
        call->argvlen[call->argc - 1] + 1;
}

static int
limiter_id_ok(const char *id, size_t len)
{
    static const char id_chars[] = "0123456789abcdefghijklmnopqrstuvwxyz"
        "ABCDEFGHIJKLMNOPQRSTUVWXYZ.-";

    return len > 0 && len <= LIMITER_ID_MAX && strspn(id, id_chars) == len;
}

/* Length of the hash tag part "rl:{tenant}" of the first key of call, or 0
 * when it has none or it is too long. */
static size_t
limiter_tag_len(const struct limiter_call *call)
{
    const char *tag = call->argv[1], *end;
    size_t len;

    end = memchr(tag, '}', call->argvlen[1]);
    if (strncmp(tag, "rl:{", 4) != 0 || end == NULL ||
        (len = (size_t)(end - tag) + 1) > 4 + RL_UUID_LEN + 1)
        return 0;
    return len;
}

/* Moves argv[at..] up by by places (room for new arguments there). */
static void
limiter_open(struct limiter_call *call, int at, int by)
{
    int i;

    for (i = call->argc - 1; i >= at; i--) {
        call->argv[i + by] = call->argv[i];
        call->argvlen[i + by] = call->argvlen[i];
    }
    call->argc += by;
}

int
limiter_budget(struct limiter_call *call, const struct rl_plan *plan,
    long long budget)
{
    static const char *const suffix[2] = { ":budget:names", ":budget:made" };
    char mask[RL_MAX_LIMITS + 1], number[21], window[21];
    const char *args[3];
    size_t used, taglen, len[3];
    int i, n, at, any = 0;

    if (!limiter_shape_ok(call) || call->budgeted || call->keyed ||
        call->leased || plan->n != call->nlimits)
        return -1;
    n = call->nlimits;
    for (i = 0; i < n; i++) {
        mask[i] = plan->limit[i]->count != RL_COUNT_TENANT ||
            plan->rule[i]->per_route ? '1' : '0';
        any = any || mask[i] == '1';
    }
    mask[n] = '\0';
    if (budget <= 0 || !any)
        return 0;
    if ((taglen = limiter_tag_len(call)) == 0 ||
        call->argc + 5 > LIMITER_MAX_ARGS)
        return -1;
    args[0] = number;
    len[0] = util_lltoa(budget, number);
    args[1] = window;
    len[1] = util_lltoa(RL_BUDGET_WINDOW_S, window);
    args[2] = mask;
    len[2] = (size_t)n;
    used = limiter_used(call);
    if (used + 2 * (taglen + 14) + len[0] + len[1] + len[2] + 3 >
        sizeof(call->store))
        return -1;
    /* The two keys after the limits' keys, the three arguments last. */
    at = 1 + n;
    limiter_open(call, at, 2);
    for (i = 0; i < 2; i++) {
        char *key = call->store + used;
        size_t slen = strlen(suffix[i]);

        memcpy(key, call->argv[1], taglen);
        memcpy(key + taglen, suffix[i], slen + 1);
        call->argv[at + i] = key;
        call->argvlen[at + i] = taglen + slen;
        used += taglen + slen + 1;
    }
    for (i = 0; i < 3; i++) {
        memcpy(call->store + used, args[i], len[i] + 1);
        call->argv[call->argc] = call->store + used;
        call->argvlen[call->argc] = len[i];
        call->argc++;
        used += len[i] + 1;
    }
    call->budgeted = 1;
    call->argv[0] = limiter_nkeys_text[limiter_nkeys(call)];
    call->argvlen[0] = strlen(call->argv[0]);
    return 0;
}

int
limiter_lease(struct limiter_call *call, const char *key, const char *random,
    long long ttl_ms)
{
    char ttl[21];
    size_t used, klen = strlen(key), rlen = strlen(random), tlen;
    int at, mode;

    if (!limiter_shape_ok(call) || call->keyed || call->leased ||
        ttl_ms < 1000 || ttl_ms > 3600000 ||
        !limiter_id_ok(random, rlen) || klen == 0)
        return -1;
    mode = 1 + limiter_nkeys(call) + 1;     /* the peek argument */
    if (call->argvlen[mode] != 1 || call->argv[mode][0] != '0')
        return -1;
    tlen = util_lltoa(ttl_ms, ttl);
    used = limiter_used(call);
    if (call->argc + 3 > LIMITER_MAX_ARGS ||
        used + klen + rlen + tlen + 3 > sizeof(call->store))
        return -1;
    /* The record's key after the other keys; the id and ttl last. */
    at = 1 + limiter_nkeys(call);
    limiter_open(call, at, 1);
    memcpy(call->store + used, key, klen + 1);
    call->argv[at] = call->store + used;
    call->argvlen[at] = klen;
    used += klen + 1;
    mode++;                                 /* moved up by the key */
    call->argv[mode] = "3";
    memcpy(call->store + used, random, rlen + 1);
    call->argv[call->argc] = call->store + used;
    call->argvlen[call->argc++] = rlen;
    used += rlen + 1;
    memcpy(call->store + used, ttl, tlen + 1);
    call->argv[call->argc] = call->store + used;
    call->argvlen[call->argc++] = tlen;
    call->leased = 1;
    call->argv[0] = limiter_nkeys_text[limiter_nkeys(call)];
    call->argvlen[0] = strlen(call->argv[0]);
    return 0;
}

int
limiter_key(const char *tenant_id, const struct rl_rule *rule,
    const struct rl_limit *limit, const struct check_request *req,
    char *out, size_t outlen)
{
    struct limiter_call call;
    struct rl_plan plan;

    memset(&plan, 0, sizeof(plan));
    plan.n = 1;
    plan.rule[0] = rule;
    plan.limit[0] = limit;
    if (limiter_build(tenant_id, &plan, req, &call) == -1 ||
        call.argvlen[1] >= outlen)
        return -1;
    memcpy(out, call.argv[1], call.argvlen[1] + 1);
    return 0;
}

int
limiter_peek(const char *key, const struct rl_limit *limit,
    struct limiter_call *call)
{
    size_t used = 0;

    call->argc = 0;
    call->nlimits = call->budgeted = call->keyed = 0;
    if (limiter_arg(call, &used, "1", 1) == -1 ||
        limiter_arg(call, &used, key, strlen(key)) == -1 ||
        limiter_arg(call, &used, "1", 1) == -1 ||      /* cost */
        limiter_arg(call, &used, "1", 1) == -1 ||      /* peek */
        limiter_arg(call, &used, "1", 1) == -1 ||      /* one limit */
        limiter_params(call, &used, limit) == -1 ||
        limiter_arg(call, &used, "0", 1) == -1)        /* not shadow */
        return -1;
    call->nlimits = 1;
    return 0;
}

int
limiter_request_key(struct limiter_call *call, const char *slot,
    const char *id)
{
    char key[RL_UUID_LEN + LIMITER_ID_MAX + 16];
    size_t used, slotlen, idlen, taglen;
    int k, at, n;

    slotlen = strlen(slot);
    idlen = strlen(id);
    if (!limiter_id_ok(slot, slotlen) || !limiter_id_ok(id, idlen))
        return -1;
    if (!limiter_shape_ok(call) || call->keyed)
        return -1;
    /* The key shares the limits' hash tag, rl:{tenant}, and so their Redis
     * Cluster slot. */
    if ((taglen = limiter_tag_len(call)) == 0)
        return -1;
    /* "<tag>:req:<slot>"; both parts were measured above to fit. */
    memcpy(key, call->argv[1], taglen);
    memcpy(key + taglen, ":req:", 5);
    memcpy(key + taglen + 5, slot, slotlen + 1);
    n = (int)(taglen + 5 + slotlen);
    used = limiter_used(call);
    if ((size_t)n >= sizeof(key) ||
        call->argc + 2 > LIMITER_MAX_ARGS ||
        used + (size_t)n + 1 + idlen + 1 > sizeof(call->store))
        return -1;
    /* The key goes in after the other keys, and the key count grows by
     * one; the id goes last. */
    k = limiter_nkeys(call);
    at = 1 + k;
    limiter_open(call, at, 1);
    memcpy(call->store + used, key, (size_t)n + 1);
    call->argv[at] = call->store + used;
    call->argvlen[at] = (size_t)n;
    used += (size_t)n + 1;
    memcpy(call->store + used, id, idlen + 1);
    call->argv[call->argc] = call->store + used;
    call->argvlen[call->argc] = idlen;
    call->argc++;
    call->keyed = 1;
    call->argv[0] = limiter_nkeys_text[k + 1];
    call->argvlen[0] = strlen(call->argv[0]);
    return 0;
}

int
limiter_resend(struct limiter_call *call)
{
    int at;

    if (!limiter_shape_ok(call) || !call->keyed)
        return -1;
    at = 1 + limiter_nkeys(call) + 1;   /* after the keys and the cost */
    if (call->argvlen[at] != 1)
        return -1;
    if (call->argv[at][0] == '0' || call->argv[at][0] == '3') {
        call->argv[at] = call->argv[at][0] == '0' ? "2" : "4";
        return 0;
    }
    return call->argv[at][0] == '1' || call->argv[at][0] == '2' ||
        call->argv[at][0] == '4' ? 0 : -1;
}

int
limiter_unkey(struct limiter_call *call)
{
    int i, j, n, at, drop_from, drop_to, tail;

    /* A lease's record must be written with its slots: a call with one
     * keeps its keys (and is not run where they cannot all be). */
    if (!limiter_shape_ok(call) || !call->keyed || call->leased)
        return -1;
    n = call->nlimits;
    at = 1 + limiter_nkeys(call) + 1;   /* the peek argument */
    if (call->argvlen[at] != 1 ||
        (call->argv[at][0] != '0' && call->argv[at][0] != '1'))
        return -1;
    /* Out go the keys after the limits' (the budget's two and the reply
     * slot), and the arguments after the limits' (the budget's three and
     * the id). */
    drop_from = 1 + n;
    drop_to = drop_from + 2 * call->budgeted + 1;
    tail = 3 * call->budgeted + 1;
    for (i = drop_from, j = drop_to; j < call->argc - tail; i++, j++) {
        call->argv[i] = call->argv[j];
        call->argvlen[i] = call->argvlen[j];
    }
    call->argc = i;
    call->keyed = call->budgeted = 0;
    call->argv[0] = limiter_nkeys_text[n];
    call->argvlen[0] = strlen(call->argv[0]);
    return 0;
}

int
limiter_decode(const long long *v, size_t n, int nlimits,
    struct rl_decision *d)
{
    const long long *p;
    int i, any = 0;

    memset(d, 0, sizeof(*d));
    if (nlimits >= 1 && nlimits <= RL_MAX_LIMITS &&
        n == 3 + 5 * (size_t)nlimits) {
        /* A call with a lease: the expired leases dropped, last. */
        if (v[n - 1] < 0)
            return -1;
        d->lease_dropped = v[n - 1];
        n--;
    }
    if (nlimits < 1 || nlimits > RL_MAX_LIMITS)
        return -1;
    if (n == 3 && v[0] == -1) {
        /* The counter budget refused: no limit was decided. */
        if (v[2] < 0)
            return -1;
        d->over_budget = 1;
        d->now_ms = v[1];
        d->budget_retry_ms = v[2];
        return 0;
    }
    if (n != 2 + 5 * (size_t)nlimits)
        return -1;
    if (v[0] != 0 && v[0] != 1)
        return -1;
    d->allowed = (int)v[0];
    d->now_ms = v[1];
    d->nlimits = nlimits;
    for (i = 0; i < nlimits; i++) {
        p = v + 2 + 5 * i;
        if ((p[0] != 0 && p[0] != 1) || p[1] < 0 || p[2] < 0 || p[3] < 0 ||
            p[4] < -1)
            return -1;
        d->st[i].allowed = (int)p[0];
        d->st[i].limit = p[1];
        d->st[i].remaining = p[2];
        d->st[i].reset_ms = p[3];
        d->st[i].retry_after_ms = p[4];
        any = any || !p[0];
    }
    /* "Allowed" with no denying part is the only shape a verdict can
     * have without shadow limits; with them, the caller checks the rest. */
    if (!d->allowed && !any)
        return -1;
    return 0;
}

int
limiter_apply_shadow(const struct rl_plan *plan, struct rl_decision *d)
{
    int i, shadow_denied = 0;

    for (i = 0; i < d->nlimits && i < plan->n; i++) {
        d->st[i].shadow = plan->rule[i]->shadow;
        if (d->st[i].shadow && !d->st[i].allowed)
            shadow_denied = 1;
    }
    return shadow_denied;
}

int
limiter_primary(const struct rl_decision *d)
{
    int i, best = 0;

    for (i = 1; i < d->nlimits; i++) {
        const struct rl_limit_state *a = &d->st[i], *b = &d->st[best];

        if (a->shadow != b->shadow) {
            if (!a->shadow)
                best = i;
            continue;
        }
        if (a->allowed != b->allowed) {
            if (!a->allowed)
                best = i;
            continue;
        }
        if (!a->allowed) {
            if (a->retry_after_ms == -1 || (b->retry_after_ms != -1 &&
                a->retry_after_ms > b->retry_after_ms))
                best = i;
        } else if (a->remaining < b->remaining)
            best = i;
    }
    return best;
}
