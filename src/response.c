/*
 * response.c -- status, headers and JSON body of an answer.
 *
 * The worker writes whatever ends up here through FCGX_PutStr in one go;
 * formatting is done with snprintf-style helpers (libfcgi's own printf
 * cannot format size_t or intmax_t).  Bodies are built with json-c so that
 * strings are always escaped correctly and zeros are never dropped.
 *
 * Header semantics: X-RateLimit-* describe the most restrictive limit of
 * the rule (X-RateLimit-Reset in unix seconds, from Redis time); the IETF
 * fields of draft-ietf-httpapi-ratelimit-headers-11 list every limit:
 *   RateLimit-Policy: "name";q=<quota>;w=<window seconds>, ...
 *   RateLimit: "name";r=<available>;t=<seconds>, ...
 *
 * Every refusal has one shape: a JSON object with "error" (a code) and
 * "message" (a sentence for a person).  A denial (429) adds what the
 * client needs to come back: "retry_after", whole seconds rounded up (as
 * Retry-After), and "retry_after_ms", the exact wait, so that a limit of
 * 50 a second can say 20 ms where Retry-After can only say 1 s.  A 401
 * says how to authenticate: WWW-Authenticate, for the key that is sent
 * as "Authorization: Bearer <key>" (or in X-API-Key).
 */
#include <stdarg.h>
#include <string.h>

#include <json-c/json.h>

#include "ratelimit.h"

/* The challenge of every 401. */
#define RESPONSE_CHALLENGE "Bearer realm=\"ratelimit-fcgi\""

void
response_init(struct rl_response *r)
{
    r->status = 200;
    r->content_type = "application/json";
    r->no_store = 1;
    r->error = NULL;
    buf_init(&r->headers);
    buf_init(&r->body);
}

void
response_free(struct rl_response *r)
{
    buf_free(&r->headers);
    buf_free(&r->body);
}

void
response_reset(struct rl_response *r)
{
    r->status = 200;
    r->content_type = "application/json";
    r->no_store = 1;
    r->error = NULL;
    buf_reset(&r->headers);
    buf_reset(&r->body);
}

const char *
response_reason(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Unknown";
    }
}

void
response_header(struct rl_response *r, const char *name, const char *fmt, ...)
{
    char value[1024];
    va_list ap;
    size_t i;

    va_start(ap, fmt);
    vsnprintf(value, sizeof(value), fmt, ap);
    va_end(ap);
    for (i = 0; value[i] != '\0'; i++)
        if (value[i] == '\r' || value[i] == '\n')
            value[i] = ' ';
    buf_puts(&r->headers, name);
    buf_append(&r->headers, ": ", 2);
    buf_puts(&r->headers, value);
    buf_append(&r->headers, "\r\n", 2);
}

void
response_json(struct rl_response *r, struct json_object *obj)
{
    size_t len;
    const char *s = json_object_to_json_string_length(obj,
        JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);

    buf_reset(&r->body);
    buf_append(&r->body, s, len);
    buf_append(&r->body, "\n", 1);
    json_object_put(obj);
}

/* A refusal's status on r and the start of its body, {"error": code,
 * "message": message} (no message when NULL), for the caller to add to and
 * give to response_json(). */
static struct json_object *
response_error_object(struct rl_response *r, int status, const char *code,
    const char *message)
{
    struct json_object *o = json_object_new_object();

    r->status = status;
    r->error = code;
    json_object_object_add(o, "error", json_object_new_string(code));
    if (message != NULL)
        json_object_object_add(o, "message", json_object_new_string(message));
    return o;
}

void
response_error(struct rl_response *r, int status, const char *code,
    const char *message)
{
    response_json(r, response_error_object(r, status, code, message));
    /* RFC 9110 wants a challenge on every 401 (RFC 6750 for the scheme):
     * the key is a bearer token, wherever the client puts it. */
    if (status == 401)
        response_header(r, "WWW-Authenticate", "%s", RESPONSE_CHALLENGE);
}

/* Every refusal, once (see enum rl_refusal). */
static const struct {
    int status;
    const char *code;
    const char *message;
} response_refusals[RL_REFUSAL_COUNT] = {
    [RL_REFUSE_KEY_MISSING] = { 401, "unauthorized", "missing API key" },
    [RL_REFUSE_KEY_TOO_LONG] = { 401, "unauthorized", "API key is too long" },
    [RL_REFUSE_KEY_INVALID] = { 401, "unauthorized", "invalid API key" },
    [RL_REFUSE_TENANT_SUSPENDED] = { 403, "tenant_suspended",
        "tenant is suspended" },
    [RL_REFUSE_ADMIN_KEY_CHECKS] = { 403, "admin_key_cannot_check",
        "admin keys cannot be used for checks" },
    [RL_REFUSE_ADMIN_NEEDED] = { 403, "forbidden", "an admin key is needed" },
    [RL_REFUSE_OWN_TENANT_ONLY] = { 403, "forbidden",
        "a key may read its own tenant only" },
    [RL_REFUSE_CLIENT_UNKNOWN] = { 403, "forbidden",
        "X-Forwarded-For from a peer not in trusted_proxies, or naming no "
        "address: the client is unknown; an admin key reads its own tenant "
        "from anywhere" },
    [RL_REFUSE_ADDRESS_NOT_LISTED] = { 403, "forbidden",
        "this address may not read this; an admin key reads its own tenant "
        "from anywhere" },
    [RL_REFUSE_INVALID_REQUEST] = { 400, "invalid_request",
        "the request is not a valid check" },
    [RL_REFUSE_NUL_PARAMETER] = { 400, "invalid_request",
        "a request parameter holds a NUL byte" },
    [RL_REFUSE_BAD_PATH] = { 400, "invalid_request",
        "request path is not absolute, badly escaped or longer than 512 "
        "bytes" },
    [RL_REFUSE_COST_EXCEEDS] = { 400, "cost_exceeds_limit",
        "the cost is more than a limit of the rule can ever let through" },
    [RL_REFUSE_OVER_BUDGET] = { 429, "counter_budget_exceeded",
        "this tenant has created as many new counters as its budget allows "
        "this hour; subjects it has not checked lately are refused until "
        "the hour ends" },
    [RL_REFUSE_BODY_TOO_LARGE] = { 413, "invalid_request",
        "request body is too large" },
    [RL_REFUSE_NOT_FOUND] = { 404, "not_found",
        "no such endpoint; the check API is POST /v1/check" },
    [RL_REFUSE_METHOD] = { 405, "method_not_allowed",
        "this method is not allowed here" },
    [RL_REFUSE_KEY_DEFERRED] = { 503, "key_lookup_deferred",
        "this API key is not known here yet and lookups are busy; try again" },
    [RL_REFUSE_KEY_STORE] = { 503, "service_unavailable",
        "key store unavailable" },
    [RL_REFUSE_RULE_STORE] = { 503, "service_unavailable",
        "rule store unavailable" },
    [RL_REFUSE_LIMIT_STORE] = { 503, "service_unavailable",
        "limit store unavailable" },
    [RL_REFUSE_MISCONFIGURED] = { 503, "misconfigured",
        "the rules of this route cannot be decided as they are stored (more "
        "limits than one check decides, more rules than a tenant may have, "
        "or a limit this service cannot load); the operator must fix them" },
    [RL_REFUSE_SCRIPT_ERROR] = { 503, "script_error",
        "the limit store answered with an error" },
    [RL_REFUSE_LEASE_UNKNOWN] = { 404, "lease_unknown",
        "this tenant has no such lease" },
    [RL_REFUSE_LEASE_RELEASED] = { 409, "lease_released",
        "the lease was released already; nothing was changed" },
    [RL_REFUSE_LEASE_EXPIRED] = { 410, "lease_expired",
        "the lease expired before this call: its slots were freed then, "
        "and its cost stays as charged; nothing was changed" },
};

int
response_refusal(enum rl_refusal which, const char **code,
    const char **message)
{
    if ((unsigned)which >= RL_REFUSAL_COUNT)
        which = RL_REFUSE_INVALID_REQUEST;
    *code = response_refusals[which].code;
    *message = response_refusals[which].message;
    return response_refusals[which].status;
}

int
response_refuse(struct rl_response *r, enum rl_refusal which,
    const char *message)
{
    const char *code, *text;
    int status = response_refusal(which, &code, &text);

    response_error(r, status, code, message != NULL ? message : text);
    return status;
}

/* Milliseconds to whole seconds, rounded up; cannot overflow, whatever
 * Redis sent. */
static long long
ceil_div_ms(long long ms)
{
    return ms <= 0 ? 0 : ms / 1000 + (ms % 1000 != 0);
}

void
response_cost_exceeds(struct rl_response *r, const char *limit,
    long long max_cost, long long cost)
{
    struct json_object *o;
    const char *code, *text;
    char msg[256];
    int status = response_refusal(RL_REFUSE_COST_EXCEEDS, &code, &text);

    snprintf(msg, sizeof(msg), "a cost of %lld can never pass limit \"%s\": "
        "it lets at most %lld through at once", cost, limit, max_cost);
    o = response_error_object(r, status, code, msg);
    json_object_object_add(o, "limit", json_object_new_string(limit));
    json_object_object_add(o, "max_cost", json_object_new_int64(max_cost));
    json_object_object_add(o, "cost", json_object_new_int64(cost));
    response_json(r, o);
}

void
response_over_budget(struct rl_response *r, long long retry_after_ms)
{
    struct json_object *o;
    const char *code, *text;
    long long ms = retry_after_ms > 0 ? retry_after_ms : 0;
    int status = response_refusal(RL_REFUSE_OVER_BUDGET, &code, &text);

    o = response_error_object(r, status, code, text);
    json_object_object_add(o, "retry_after",
        json_object_new_int64(ceil_div_ms(ms)));
    json_object_object_add(o, "retry_after_ms", json_object_new_int64(ms));
    response_json(r, o);
    response_header(r, "Retry-After", "%lld", ceil_div_ms(ms));
}


long long
response_reset_at(long long now_s, const struct rl_limit_state *st)
{
    return now_s + ceil_div_ms(st->reset_ms);
}

long long
response_retry_after_s(const struct rl_limit_state *st)
{
    long long s;

    /* -1: this cost can never pass, so there is no time to wait for. */
    if (st->retry_after_ms == -1)
        return -1;
    s = ceil_div_ms(st->retry_after_ms);
    return s < 1 ? 1 : s;
}

/* The exact wait of a denial in milliseconds, at least 1 (as
 * response_retry_after_s() says at least 1 s), or -1 when this cost can
 * never pass. */
static long long
response_retry_after_ms(const struct rl_limit_state *st)
{
    if (st->retry_after_ms == -1)
        return -1;
    return st->retry_after_ms < 1 ? 1 : st->retry_after_ms;
}

/* Seconds within which "remaining" applies (the t of RateLimit): the
 * wait on a denial; else until the full reset, but never more than the
 * window w the policy announces (a sliding window's full reset lies at the
 * end of the next window, and "r within t" holds within w as well). */
static long long
response_effective_s(const struct rl_limit_state *st, long long w)
{
    long long t;

    if (!st->allowed && st->retry_after_ms != -1)
        return response_retry_after_s(st);
    t = ceil_div_ms(st->reset_ms);
    return t > w ? w : t;
}

/* A header whose value is the integer v (no printf, no CR/LF to fold). */
static void
response_header_ll(struct rl_response *r, const char *name, long long v)
{
    buf_puts(&r->headers, name);
    buf_append(&r->headers, ": ", 2);
    buf_put_ll(&r->headers, v);
    buf_append(&r->headers, "\r\n", 2);
}

/* The members that describe one limit, for an object of the body.  The
 * waits are 0 only when both allowed (what the object says) and st do. */
static void
response_state_members(struct rl_buf *b, const struct rl_limit *l,
    const struct rl_limit_state *st, long long now_s, int allowed)
{
    int wait = !allowed || !st->allowed;

    buf_puts(b, allowed ? "\"allowed\":true,\"limit\":" :
        "\"allowed\":false,\"limit\":");
    buf_put_ll(b, st->limit);
    buf_puts(b, ",\"remaining\":");
    buf_put_ll(b, st->remaining);
    buf_puts(b, ",\"reset_at\":");
    buf_put_ll(b, response_reset_at(now_s, st));
    buf_puts(b, ",\"retry_after\":");
    buf_put_ll(b, wait ? response_retry_after_s(st) : 0);
    buf_puts(b, ",\"retry_after_ms\":");
    buf_put_ll(b, wait ? response_retry_after_ms(st) : 0);
    buf_puts(b, ",\"algorithm\":");
    buf_json_str(b, algo_name(l->algorithm));
}

/* The message of a denial by limit name, as a JSON string. */
static void
response_denial_message(struct rl_buf *b, const char *name,
    const struct rl_limit_state *st)
{
    char msg[RL_NAME_MAX + 96];
    long long ms = response_retry_after_ms(st);

    if (ms == -1)
        snprintf(msg, sizeof(msg), "a request of this cost can never pass "
            "limit \"%s\"", name);
    else if (ms < 1000)
        snprintf(msg, sizeof(msg), "too many requests for limit \"%s\"; "
            "try again in %lld ms", name, ms);
    else
        snprintf(msg, sizeof(msg), "too many requests for limit \"%s\"; "
            "try again in %lld s", name, response_retry_after_s(st));
    buf_json_str(b, msg);
}

/*
 * The answer to a check.  This is every check's path, so the body and the
 * headers are written straight into their buffers rather than through
 * json-c and printf, which cost most of a warm check's instructions.  The
 * body is what json-c printed before (same members, same order, no
 * blanks); t/check_response.c compares the two.
 */
void
response_decision(struct rl_response *r, const struct rl_plan *plan,
    const struct rl_decision *d)
{
    const struct rl_limit_state *st;
    struct rl_buf *b = &r->body;
    long long now_s = d->now_ms / 1000, q, w[RL_MAX_LIMITS];
    int i, primary = limiter_primary(d), shadow_denied = 0, ndenied = 0;

    st = &d->st[primary];
    r->status = d->allowed ? 200 : 429;
    buf_reset(b);
    buf_append(b, "{", 1);
    if (!d->allowed) {
        r->error = "rate_limited";
        buf_puts(b, "\"error\":\"rate_limited\",\"message\":");
        response_denial_message(b, plan->name[primary], st);
        buf_append(b, ",", 1);
    }
    response_state_members(b, plan->limit[primary], st, now_s, d->allowed);
    for (i = 0; i < d->nlimits; i++) {
        if (d->st[i].allowed)
            continue;
        if (d->st[i].shadow) {
            shadow_denied = 1;
            continue;
        }
        buf_puts(b, ndenied++ == 0 ? ",\"denied_by\":[" : ",");
        buf_json_str(b, plan->name[i]);
    }
    if (ndenied > 0)
        buf_append(b, "]", 1);
    if (shadow_denied)
        buf_puts(b, ",\"shadow_denied\":true");
    if (d->nlimits > 1 || shadow_denied) {
        buf_puts(b, ",\"policies\":[");
        for (i = 0; i < d->nlimits; i++) {
            st = &d->st[i];
            buf_append(b, i > 0 ? ",{" : "{", i > 0 ? 2 : 1);
            response_state_members(b, plan->limit[i], st, now_s,
                st->allowed);
            buf_puts(b, ",\"name\":");
            buf_json_str(b, plan->name[i]);
            if (st->shadow)
                buf_puts(b, ",\"shadow\":true");
            buf_append(b, "}", 1);
        }
        buf_append(b, "]", 1);
    }
    if (d->lease[0] != '\0') {
        /* What a release (POST /v1/release) names; ids are [0-9a-f.-]. */
        buf_puts(b, ",\"lease\":\"");
        buf_puts(b, d->lease);
        buf_puts(b, "\",\"lease_ttl_ms\":");
        buf_put_ll(b, d->lease_ttl_ms);
    }
    buf_append(b, "}\n", 2);

    st = &d->st[primary];
    response_header_ll(r, "X-RateLimit-Limit", st->limit);
    response_header_ll(r, "X-RateLimit-Remaining", st->remaining);
    response_header_ll(r, "X-RateLimit-Reset", response_reset_at(now_s, st));
    /* A cost that can never pass gets no Retry-After: waiting won't help. */
    if (!d->allowed && st->retry_after_ms != -1)
        response_header_ll(r, "Retry-After", response_retry_after_s(st));
    if (d->lease[0] != '\0') {
        buf_puts(&r->headers, "X-RateLimit-Lease: ");
        buf_puts(&r->headers, d->lease);
        buf_append(&r->headers, "\r\n", 2);
    }

    /* RateLimit-Policy and RateLimit.  Names are [A-Za-z0-9_.-] (checked
     * when stored), so they need no escaping inside an sf-string. */
    buf_puts(&r->headers, "RateLimit-Policy: ");
    for (i = 0; i < d->nlimits; i++) {
        algo_policy(plan->limit[i], d->st[i].limit, &q, &w[i]);
        buf_puts(&r->headers, i > 0 ? ", \"" : "\"");
        buf_puts(&r->headers, plan->name[i]);
        buf_puts(&r->headers, "\";q=");
        buf_put_ll(&r->headers, q);
        buf_puts(&r->headers, ";w=");
        buf_put_ll(&r->headers, w[i]);
    }
    buf_puts(&r->headers, "\r\nRateLimit: ");
    for (i = 0; i < d->nlimits; i++) {
        buf_puts(&r->headers, i > 0 ? ", \"" : "\"");
        buf_puts(&r->headers, plan->name[i]);
        buf_puts(&r->headers, "\";r=");
        buf_put_ll(&r->headers, d->st[i].remaining);
        buf_puts(&r->headers, ";t=");
        buf_put_ll(&r->headers, response_effective_s(&d->st[i], w[i]));
    }
    buf_append(&r->headers, "\r\n", 2);
}
