/*
 * observe.c -- what happens after each request: the pool's statistics,
 * the access log, the denial log and the slow log.
 *
 * decide.c leaves a trace of the request (who, which rule and limit, what
 * came of it, the time spent in PostgreSQL and Redis); the worker hands it
 * here with the answer and the total time.  Everything counted goes to
 * the shared segment (stats.c), so /metrics, /status and /dashboard show
 * the pool, not one worker: a check's outcome and latency, and its time in
 * Redis and PostgreSQL, by second.
 *
 * Denials are logged at info, at most denial_log_rate lines a second
 * across the pool; the lines held back are counted and said in one line
 * the next second a denial is logged.  A check slower than slowlog_ms is
 * logged at warn with where its time went.  What a request sent (its path,
 * method, request id, route, client address) reaches a log only escaped,
 * so that it can never start a line of its own (observe_escape), and each
 * access log field is cut to OBSERVE_FIELD_MAX bytes.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/time.h>

#include "service.h"

void
observe_begin(struct service *svc)
{
    struct rl_trace *t = &svc->decider.trace;

    memset(t, 0, sizeof(*t));
    t->outcome = -1;
}

/* The outcome of a check for the history: the decision when there was
 * one, else what the status says. */
static int
observe_outcome(const struct rl_trace *t, int status)
{
    if (t->outcome >= 0)
        return t->outcome;
    if (status >= 500)
        return OUT_UNAVAILABLE;
    if (status >= 400)
        return OUT_OTHER_4XX;
    return -1;
}

static const char *
observe_decision(const struct rl_trace *t, int status)
{
    int o = observe_outcome(t, status);

    if (o < 0)
        return "none";
    if (o == OUT_OTHER_4XX)
        return "refused";
    return stats_outcome_name[o];
}

/* The bytes of a value an access log field keeps, so that a line stays
 * short whatever a request sends (a 60 KB X-Request-Id): all of them up to
 * OBSERVE_FIELD_MAX, else fewer, cut before a UTF-8 sequence, and the
 * field ends in "...". */
#define OBSERVE_FIELD_MAX 256

static size_t
observe_cut(const char *s, size_t len)
{
    size_t n = OBSERVE_FIELD_MAX - 3;

    if (len <= OBSERVE_FIELD_MAX)
        return len;
    while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
        n--;
    return n;
}

/* The length of the UTF-8 sequence at p (at most len bytes) and its code
 * point in *cp; 0 when p does not start a well-formed one (a stray or cut
 * byte, an overlong form, a surrogate, past U+10FFFF). */
static size_t
observe_utf8(const unsigned char *p, size_t len, uint32_t *cp)
{
    size_t n, i;
    uint32_t c, min;

    if (p[0] >= 0xc2 && p[0] <= 0xdf) {
        n = 2, c = p[0] & 0x1f, min = 0x80;
    } else if (p[0] >= 0xe0 && p[0] <= 0xef) {
        n = 3, c = p[0] & 0x0f, min = 0x800;
    } else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
        n = 4, c = p[0] & 0x07, min = 0x10000;
    } else
        return 0;
    if (n > len)
        return 0;
    for (i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        c = (c << 6) | (p[i] & 0x3f);
    }
    if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

/*
 * Appends s (len bytes) escaped for a quoted logfmt value (json 0) or a
 * JSON string (json 1), so that what a request sent can never end the
 * line, nor the value: '"' and '\\' escaped; control bytes as \t, \n,
 * \r, else \xNN (logfmt) or \u00NN (JSON); the C1 controls and the
 * Unicode line and paragraph separators (U+0085 is a line break to some
 * readers, U+2028 and U+2029 to others) as \uNNNN in both; a byte that is
 * not part of well-formed UTF-8 as \xNN (logfmt) or \u00NN (JSON: the
 * code point of that number, as Latin-1 reads it), so a line is always
 * UTF-8 text.
 */
static void
observe_escape(struct rl_buf *b, const char *s, size_t len, int json)
{
    const unsigned char *p = (const unsigned char *)s,
        *end = (const unsigned char *)s + len;
    char esc[5];
    uint32_t cp;
    size_t n;

    while (p < end) {
        if (*p == '"' || *p == '\\') {
            buf_printf(b, "\\%c", *p);
            p++;
        } else if (*p < 0x80) {
            if (*p >= 0x20 && *p != 0x7f)
                buf_append(b, (const char *)p, 1);
            else if (json && *p != '\t' && *p != '\n' && *p != '\r')
                buf_printf(b, "\\u%04x", *p);
            else if (util_escape_char(*p, esc) > 0)
                buf_puts(b, esc);
            p++;
        } else if ((n = observe_utf8(p, (size_t)(end - p), &cp)) == 0) {
            buf_printf(b, json ? "\\u%04x" : "\\x%02x", *p);
            p++;
        } else {
            if (cp <= 0x9f || cp == 0x2028 || cp == 0x2029)
                buf_printf(b, "\\u%04x", (unsigned)cp);
            else
                buf_append(b, (const char *)p, n);
            p += n;
        }
    }
}

/* Appends s (len bytes) as a logfmt value: bare when it is a plain word
 * (printable ASCII, no '"', '=' or '\\'), else quoted and escaped. */
static void
observe_logfmt_value(struct rl_buf *b, const char *s, size_t len)
{
    const unsigned char *p, *end = (const unsigned char *)s + len;
    int plain = len > 0;

    for (p = (const unsigned char *)s; p < end && plain; p++)
        plain = *p > ' ' && *p != '"' && *p != '=' && *p != '\\' &&
            *p < 0x7f;
    if (plain) {
        buf_append(b, s, len);
        return;
    }
    buf_puts(b, "\"");
    observe_escape(b, s, len, 0);
    buf_puts(b, "\"");
}

/* Appends s (len bytes) as a JSON string. */
static void
observe_json_string(struct rl_buf *b, const char *s, size_t len)
{
    buf_puts(b, "\"");
    observe_escape(b, s, len, 1);
    buf_puts(b, "\"");
}

/* One field of the access line, as text, cut to OBSERVE_FIELD_MAX. */
static void
observe_field(struct rl_buf *b, int json, int *first, const char *name,
    const char *value)
{
    size_t len = strlen(value), n = observe_cut(value, len);
    char v[OBSERVE_FIELD_MAX + 1];

    buf_puts(b, *first ? "" : json ? "," : " ");
    *first = 0;
    memcpy(v, value, n);
    if (n < len) {
        memcpy(v + n, "...", 3);
        n += 3;
    }
    if (json) {
        buf_printf(b, "\"%s\":", name);
        observe_json_string(b, v, n);
    } else {
        buf_printf(b, "%s=", name);
        observe_logfmt_value(b, v, n);
    }
}

static void
observe_number(struct rl_buf *b, int json, int *first, const char *name,
    long long v)
{
    buf_puts(b, *first ? "" : json ? "," : " ");
    *first = 0;
    buf_printf(b, json ? "\"%s\":%lld" : "%s=%lld", name, v);
}

/*
 * The access log line: time, request id, method and path, tenant name,
 * key prefix (never the key), the client's address (as the limiter counts
 * it: the peer, or the client a trusted proxy names), the route checked
 * (once the caller is known), the rule and limit that decided (that
 * denied, for a denial), decision, status, remaining, the time to wait
 * (retry_after_ms; 0 when allowed), Redis, PostgreSQL and total
 * microseconds.  Readers should take fields by name: a field may be added
 * anywhere.
 */
static void
observe_access(struct service *svc, const struct http_request *req,
    const struct rl_response *resp, int64_t total_us)
{
    static struct rl_buf line;
    const struct rl_trace *t = &svc->decider.trace;
    int json = strcmp(svc->cfg->access_log_format, "json") == 0, first = 1;
    char stamp[40], path[RL_ROUTE_MAX + 1], client[64];
    struct timeval tv;
    struct tm tm;
    size_t n;

    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(stamp + n, sizeof(stamp) - n, ".%03ldZ",
        (long)(tv.tv_usec / 1000));
    n = req->path_len < RL_ROUTE_MAX ? req->path_len : RL_ROUTE_MAX;
    memcpy(path, req->path, n);
    path[n] = '\0';
    (void)addr_client(req->remote_addr, req->x_forwarded_for,
        svc->cfg->trusted, svc->cfg->ntrusted, client, sizeof(client));
    buf_reset(&line);
    if (json)
        buf_puts(&line, "{");
    observe_field(&line, json, &first, "time", stamp);
    observe_field(&line, json, &first, "request_id",
        req->request_id != NULL ? req->request_id : "");
    observe_field(&line, json, &first, "method", req->method);
    observe_field(&line, json, &first, "path", path);
    observe_field(&line, json, &first, "tenant", t->tenant);
    observe_field(&line, json, &first, "key", t->key_prefix);
    observe_field(&line, json, &first, "client", client);
    observe_field(&line, json, &first, "route", t->route);
    observe_number(&line, json, &first, "rule", t->rule);
    observe_field(&line, json, &first, "limit", t->limit);
    observe_field(&line, json, &first, "decision",
        observe_decision(t, resp->status));
    observe_number(&line, json, &first, "status", resp->status);
    observe_number(&line, json, &first, "remaining", t->remaining);
    observe_number(&line, json, &first, "retry_after_ms",
        resp->status >= 400 ? t->retry_after_ms : 0);
    observe_number(&line, json, &first, "redis_us", t->redis_us);
    observe_number(&line, json, &first, "pg_us", t->pg_us);
    observe_number(&line, json, &first, "total_us", total_us);
    buf_puts(&line, json ? "}\n" : "\n");
    if (line.data != NULL)
        log_access(line.data, line.len);
}

static void
observe_denial(struct service *svc, const struct rl_trace *t, int64_t now_s)
{
    unsigned long suppressed;
    int ok = stats_deny_log(&svc->board->stats, now_s,
        svc->cfg->denial_log_rate, &suppressed);

    if (suppressed > 0)
        log_emit(RL_LOG_INFO | RL_LOG_UNLIMITED, __FILE__, __LINE__,
            "denials: suppressed %lu lines in the second before "
            "(denial_log_rate = %ld)", suppressed, svc->cfg->denial_log_rate);
    if (ok)
        log_emit(RL_LOG_INFO | RL_LOG_UNLIMITED, __FILE__, __LINE__,
            "denied: tenant %s key %s rule %lld limit \"%s\" retry after "
            "%lld ms%s", t->tenant, t->key_prefix[0] ? t->key_prefix : "-",
            t->rule, t->limit, t->retry_after_ms,
            t->cached ? " (over-limit cache)" : "");
}

void
observe_request(struct service *svc, const struct http_request *req,
    const struct rl_response *resp, int64_t total_us,
    struct scoreboard_slot *slot)
{
    struct rl_stats *st = &svc->board->stats;
    const struct rl_trace *t = &svc->decider.trace;
    int64_t now_s = util_wall_s();
    int outcome;
    size_t n;

    __atomic_add_fetch(&st->status[stats_status_index(resp->status)], 1,
        __ATOMIC_RELAXED);
    if (slot != NULL) {
        /* The slot is busy while its texts change, and its count moves
         * after: what status.c needs to tell one request's texts (for a
         * tenant's view) from a mix of two. */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        slot->request_us = total_us;
        n = req->path_len < sizeof(slot->uri) - 1 ? req->path_len :
            sizeof(slot->uri) - 1;
        memcpy(slot->uri, req->path, n);
        slot->uri[n] = '\0';
        util_copy(slot->method, sizeof(slot->method), req->method);
        util_copy(slot->tenant, sizeof(slot->tenant), t->tenant);
        slot->content_length = (long)req->body_len;
        __atomic_thread_fence(__ATOMIC_RELEASE);
    }
    if (!t->check)
        return;
    stats_hist_add(&st->check, (uint64_t)total_us);
    if ((outcome = observe_outcome(t, resp->status)) >= 0)
        stats_record(st, now_s, outcome, (uint64_t)total_us);
    stats_record_stores(st, now_s, (uint64_t)t->redis_us, (uint64_t)t->pg_us);
    if (t->rule > 0 && (outcome == OUT_ALLOWED || outcome == OUT_DENIED))
        stats_pair_count(st, t->tenant_id, t->tenant, t->rule,
            outcome == OUT_DENIED, t->remaining, now_s);
    if (outcome == OUT_DENIED)
        observe_denial(svc, t, now_s);
    if (svc->cfg->slowlog_ms > 0 && total_us >= 1000 * svc->cfg->slowlog_ms) {
        __atomic_add_fetch(&st->slow, 1, __ATOMIC_RELAXED);
        log_warn("slow check: %lld us in all (PostgreSQL %lld us, Redis "
            "%lld us, the rest %lld us); tenant %s rule %lld status %d "
            "(slowlog_ms = %ld)", (long long)total_us, (long long)t->pg_us,
            (long long)t->redis_us,
            (long long)(total_us - t->pg_us - t->redis_us),
            t->tenant[0] ? t->tenant : "-", t->rule, resp->status,
            svc->cfg->slowlog_ms);
    }
    if (log_access_on())
        observe_access(svc, req, resp, total_us);
}
