/*
 * status.c -- GET /status, php-fpm's pool status page, and /dashboard.
 *
 * The fields are php-fpm's, with its names, so that the tools and habits
 * of its users apply: pool, process manager, start time, start since,
 * accepted conn, listen queue, max listen queue, listen queue len, idle /
 * active / total processes, max active processes, max children reached,
 * slow requests.  The query string picks, in any order and combination:
 *
 *   json | html | openmetrics   the format (text when none is given)
 *   full                        one entry per worker as well
 *   history                     (json) the last STATS_HISTORY seconds of
 *                               checks by outcome and latency, the tenants
 *                               and rules denied most in the last minute
 *                               (a rule by its route and limit names, with
 *                               what it had left after its last decision),
 *                               the tenants with the most checks in it,
 *                               the latency of Redis and PostgreSQL in it,
 *                               the caches' hits and misses, and the
 *                               health of Redis and PostgreSQL: what
 *                               /dashboard draws
 *   tenant=NAME                 (json, with history) one tenant's rules
 *                               with their checks and denials in the last
 *                               minute, and its checks and denials in
 *                               each second of it: the dashboard's tenant
 *                               view (NAME percent-encoded)
 *
 * "listen queue" and its maximum are sampled by the master once a second
 * (as php-fpm does); "max children reached" counts the samples in which
 * every worker was busy; "slow requests" counts checks over slowlog_ms.
 *
 * Who asks decides what is shown (api.c): the operator sees the pool; an
 * admin key sees the pool's fields and history, which name no tenant, and
 * of the workers' last requests, the top lists and the tenant view only
 * its own tenant's.
 * Another tenant's entries keep pid, state and times, with method, URI,
 * content length and tenant blanked.  Texts a request chose (method, URI)
 * have their control bytes escaped in the text and HTML formats.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "service.h"
#include "lease.h"

enum { FMT_TEXT, FMT_JSON, FMT_HTML, FMT_OPENMETRICS };

struct status_query {
    int format;
    int full;
    int history;
    int has_tenant;
    char tenant[129];           /* tenant=, decoded; cut to a pair's name */
};

/* Decodes the n bytes of a query value at p (%XX, and '+' as a space)
 * into out, cut to size - 1 bytes.  A '%' not followed by two hex digits
 * is kept as it is. */
static void
status_query_value(const char *p, size_t n, char *out, size_t size)
{
    size_t i, o = 0;
    int hi, lo;

    for (i = 0; i < n && o + 1 < size; i++) {
        if (p[i] == '%' && i + 2 < n &&
            (hi = util_hex_digit((unsigned char)p[i + 1])) >= 0 &&
            (lo = util_hex_digit((unsigned char)p[i + 2])) >= 0) {
            out[o++] = (char)(hi << 4 | lo);
            i += 2;
        } else
            out[o++] = p[i] == '+' ? ' ' : p[i];
    }
    out[o] = '\0';
}

/* The parameters of the query string; unknown ones are ignored, as
 * php-fpm does. */
static void
status_query_parse(const char *q, struct status_query *sq)
{
    const char *p = q, *end, *eq;
    size_t n, len;

    memset(sq, 0, sizeof(*sq));
    while (*p != '\0') {
        end = strchr(p, '&');
        len = n = end != NULL ? (size_t)(end - p) : strlen(p);
        /* "json=1" counts as "json". */
        if ((eq = memchr(p, '=', n)) != NULL)
            n = (size_t)(eq - p);
        if (n == 6 && memcmp(p, "tenant", 6) == 0 && eq != NULL) {
            sq->has_tenant = 1;
            status_query_value(eq + 1, len - n - 1, sq->tenant,
                sizeof(sq->tenant));
        }
        if (n == 4 && memcmp(p, "json", 4) == 0)
            sq->format = FMT_JSON;
        else if (n == 4 && memcmp(p, "html", 4) == 0)
            sq->format = FMT_HTML;
        else if (n == 11 && memcmp(p, "openmetrics", 11) == 0)
            sq->format = FMT_OPENMETRICS;
        else if (n == 4 && memcmp(p, "full", 4) == 0)
            sq->full = 1;
        else if (n == 7 && memcmp(p, "history", 7) == 0)
            sq->history = 1;
        if (end == NULL)
            break;
        p = end + 1;
    }
}

/* The pool's fields, in php-fpm's order. */
struct status_pool {
    int64_t start_s;
    unsigned long accepted, queue, max_queue, queue_len, idle, active, total,
        max_active, max_reached, slow;
    const char *pm;
};

static void
status_pool(const struct scoreboard *b, struct status_pool *p)
{
    const struct rl_stats *st = &b->stats;

    memset(p, 0, sizeof(*p));
    p->start_s = b->start_s;
    p->pm = b->workers == 0 ? "none" : "static";
    p->accepted = __atomic_load_n(&b->accepted, __ATOMIC_RELAXED);
    scoreboard_count(b, &p->total, &p->active);
    p->idle = p->total - p->active;
    p->queue = (unsigned long)st->listen_queue;
    p->max_queue = (unsigned long)st->max_listen_queue;
    p->queue_len = (unsigned long)st->listen_queue_len;
    p->max_active = (unsigned long)st->max_active;
    if (p->active > p->max_active)
        p->max_active = p->active;
    p->max_reached = (unsigned long)st->max_children_reached;
    p->slow = (unsigned long)st->slow;
}

static const char *
status_state(int state)
{
    switch (state) {
    case SLOT_READING:
        return "Reading headers";
    case SLOT_BUSY:
        return "Running";
    case SLOT_KEEPALIVE:
        return "Idle (kept connection)";
    default:
        return "Idle";
    }
}

/* A slot's texts, copied and terminated: the worker may be writing them. */
struct status_proc {
    long pid;
    const char *state;
    int64_t start_s;
    unsigned long requests;
    long long duration_us;
    long content_length;
    int hidden;                 /* its request is not the viewer's to see */
    char method[8], uri[64], tenant[64];
};

/* Whether the viewer's tenant made the request of p's texts, by name: the
 * slot keeps the name only, cut to 63 bytes, so a longer one never
 * matches.  stable: the texts are known to be of one request. */
static int
status_proc_own(const struct status_proc *p, const struct key_info *viewer,
    int stable)
{
    size_t n = strlen(viewer->tenant_name);

    return stable && p->tenant[0] != '\0' && n < sizeof(p->tenant) &&
        strcmp(p->tenant, viewer->tenant_name) == 0;
}

/*
 * Copies slot i into p; returns 0 when no worker has it.  For a viewer
 * (not the operator) the texts of a request not its own are blanked
 * (p->hidden).  They are read without a lock, so they might be a mix of
 * two requests, one of them another tenant's: a worker writes them, in
 * observe_request, while its state is SLOT_BUSY, and counts the request
 * after.  So texts copied between two reads of a state other than busy,
 * of the same count and pid, are one request's; and the worker answering
 * this request, busy, writes its own only after it.
 */
static int
status_proc(const struct scoreboard *b, int i,
    const struct key_info *viewer, struct status_proc *p)
{
    const struct scoreboard_slot *s = &b->slots[i];
    unsigned long requests;
    pid_t pid;
    int state, stable;

    pid = __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE);
    if (pid == 0)
        return 0;
    state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
    requests = __atomic_load_n(&s->requests, __ATOMIC_ACQUIRE);
    p->pid = (long)pid;
    p->state = status_state(state);
    p->start_s = s->start_s;
    p->requests = requests;
    /* On a request: how long so far; else how long the last one took. */
    p->duration_us = state == SLOT_BUSY || state == SLOT_READING ?
        (long long)(util_now_ms() - s->state_since_ms) * 1000 :
        (long long)s->request_us;
    p->content_length = s->content_length;
    memcpy(p->method, s->method, sizeof(p->method));
    p->method[sizeof(p->method) - 1] = '\0';
    memcpy(p->uri, s->uri, sizeof(p->uri));
    p->uri[sizeof(p->uri) - 1] = '\0';
    memcpy(p->tenant, s->tenant, sizeof(p->tenant));
    p->tenant[sizeof(p->tenant) - 1] = '\0';
    p->hidden = 0;
    if (viewer == NULL)
        return 1;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    stable = pid == getpid() || (state != SLOT_BUSY &&
        __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_BUSY &&
        __atomic_load_n(&s->requests, __ATOMIC_ACQUIRE) == requests &&
        __atomic_load_n(&s->pid, __ATOMIC_ACQUIRE) == pid);
    if (!status_proc_own(p, viewer, stable)) {
        p->hidden = 1;
        p->content_length = 0;
        p->method[0] = p->uri[0] = p->tenant[0] = '\0';
    }
    return 1;
}

static void
status_date(int64_t t, char *out, size_t len)
{
    time_t tt = (time_t)t;
    struct tm tm;

    gmtime_r(&tt, &tm);
    strftime(out, len, "%d/%b/%Y:%H:%M:%S +0000", &tm);
}

/* ------------------------------------------------------------------ */
/* text */

/* A text of a request for a line of the text format: "-" when empty,
 * else escaped (the request chose those bytes: a CR or LF in them would
 * start lines of their own). */
static const char *
status_text_value(const char *v, char *out, size_t size)
{
    if (v[0] == '\0')
        return "-";
    util_escape(out, size, v, strlen(v));
    return out;
}

static void
status_text(const struct scoreboard *b, const struct status_pool *p,
    int full, const struct key_info *viewer, struct rl_response *resp)
{
    struct rl_buf *o = &resp->body;
    struct status_proc pr;
    char date[64], len[24], method[4 * sizeof(pr.method)],
        uri[4 * sizeof(pr.uri)], tenant[4 * sizeof(pr.tenant)];
    int64_t now = util_wall_s();
    int i;

    resp->content_type = "text/plain";
    status_date(p->start_s, date, sizeof(date));
    buf_printf(o,
        "pool:                 ratelimit-fcgi\n"
        "process manager:      %s\n"
        "start time:           %s\n"
        "start since:          %lld\n"
        "accepted conn:        %lu\n"
        "listen queue:         %lu\n"
        "max listen queue:     %lu\n"
        "listen queue len:     %lu\n"
        "idle processes:       %lu\n"
        "active processes:     %lu\n"
        "total processes:      %lu\n"
        "max active processes: %lu\n"
        "max children reached: %lu\n"
        "slow requests:        %lu\n",
        p->pm, date, (long long)(now - p->start_s), p->accepted, p->queue,
        p->max_queue, p->queue_len, p->idle, p->active, p->total,
        p->max_active, p->max_reached, p->slow);
    if (!full)
        return;
    for (i = 0; i < RL_MAX_WORKERS; i++) {
        if (!status_proc(b, i, viewer, &pr))
            continue;
        status_date(pr.start_s, date, sizeof(date));
        if (pr.hidden)
            snprintf(len, sizeof(len), "-");
        else
            snprintf(len, sizeof(len), "%ld", pr.content_length);
        buf_printf(o,
            "\n************************\n"
            "pid:                  %ld\n"
            "state:                %s\n"
            "start time:           %s\n"
            "start since:          %lld\n"
            "requests:             %lu\n"
            "request duration:     %lld\n"
            "request method:       %s\n"
            "request URI:          %s\n"
            "content length:       %s\n"
            "tenant:               %s\n",
            pr.pid, pr.state, date, (long long)(now - pr.start_s),
            pr.requests, pr.duration_us,
            status_text_value(pr.method, method, sizeof(method)),
            status_text_value(pr.uri, uri, sizeof(uri)), len,
            status_text_value(pr.tenant, tenant, sizeof(tenant)));
    }
}

/* ------------------------------------------------------------------ */
/* html */

/* Writes s as HTML text: markup characters as entities, control bytes
 * escaped as in the text format. */
static void
status_html_text(struct rl_buf *o, const char *s)
{
    char esc[5];

    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<': buf_puts(o, "&lt;"); break;
        case '>': buf_puts(o, "&gt;"); break;
        case '&': buf_puts(o, "&amp;"); break;
        case '"': buf_puts(o, "&quot;"); break;
        case '\'': buf_puts(o, "&#39;"); break;
        default:
            if (util_escape_char((unsigned char)*s, esc) > 0)
                buf_puts(o, esc);
            else
                buf_append(o, s, 1);
        }
    }
}

static void
status_html_row(struct rl_buf *o, const char *name, const char *value)
{
    buf_printf(o, "<tr><th>%s</th><td>", name);
    status_html_text(o, value);
    buf_puts(o, "</td></tr>\n");
}

static void
status_html(const struct scoreboard *b, const struct status_pool *p,
    int full, const struct key_info *viewer, struct rl_response *resp)
{
    static const char *const heads[] = { "pid", "state", "start time",
        "start since", "requests", "request duration", "request method",
        "request URI", "content length", "tenant" };
    struct rl_buf *o = &resp->body;
    struct status_proc pr;
    char date[64], v[32];
    int64_t now = util_wall_s();
    size_t h;
    int i;

    resp->content_type = "text/html; charset=utf-8";
    buf_puts(o, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        "<title>ratelimit-fcgi status</title></head><body>\n"
        "<table border=\"1\">\n");
    status_date(p->start_s, date, sizeof(date));
    status_html_row(o, "pool", "ratelimit-fcgi");
    status_html_row(o, "process manager", p->pm);
    status_html_row(o, "start time", date);
#define ROW(name, fmt, val) do { snprintf(v, sizeof(v), fmt, val); \
    status_html_row(o, name, v); } while (0)
    ROW("start since", "%lld", (long long)(now - p->start_s));
    ROW("accepted conn", "%lu", p->accepted);
    ROW("listen queue", "%lu", p->queue);
    ROW("max listen queue", "%lu", p->max_queue);
    ROW("listen queue len", "%lu", p->queue_len);
    ROW("idle processes", "%lu", p->idle);
    ROW("active processes", "%lu", p->active);
    ROW("total processes", "%lu", p->total);
    ROW("max active processes", "%lu", p->max_active);
    ROW("max children reached", "%lu", p->max_reached);
    ROW("slow requests", "%lu", p->slow);
#undef ROW
    buf_puts(o, "</table>\n");
    if (full) {
        buf_puts(o, "<table border=\"1\">\n<tr>");
        for (h = 0; h < sizeof(heads) / sizeof(heads[0]); h++)
            buf_printf(o, "<th>%s</th>", heads[h]);
        buf_puts(o, "</tr>\n");
        for (i = 0; i < RL_MAX_WORKERS; i++) {
            if (!status_proc(b, i, viewer, &pr))
                continue;
            status_date(pr.start_s, date, sizeof(date));
            buf_printf(o, "<tr><td>%ld</td><td>%s</td><td>%s</td><td>%lld"
                "</td><td>%lu</td><td>%lld</td><td>", pr.pid, pr.state, date,
                (long long)(now - pr.start_s), pr.requests, pr.duration_us);
            status_html_text(o, pr.method);
            buf_puts(o, "</td><td>");
            status_html_text(o, pr.uri);
            if (pr.hidden)
                buf_puts(o, "</td><td></td><td>");
            else
                buf_printf(o, "</td><td>%ld</td><td>", pr.content_length);
            status_html_text(o, pr.tenant);
            buf_puts(o, "</td></tr>\n");
        }
        buf_puts(o, "</table>\n");
    }
    buf_puts(o, "</body></html>\n");
}

/* ------------------------------------------------------------------ */
/* openmetrics */

static void
status_om(struct rl_buf *o, const char *name, const char *type,
    const char *help, unsigned long long v)
{
    buf_printf(o, "# TYPE ratelimit_pool_%s %s\n# HELP ratelimit_pool_%s "
        "%s\nratelimit_pool_%s%s %llu\n", name, type, name, help, name,
        strcmp(type, "counter") == 0 ? "_total" : "", v);
}

static void
status_openmetrics(const struct status_pool *p, struct rl_response *resp)
{
    struct rl_buf *o = &resp->body;

    resp->content_type = "application/openmetrics-text; version=1.0.0; "
        "charset=utf-8";
    status_om(o, "up", "gauge", "The pool answers.", 1);
    status_om(o, "start_since", "gauge", "Seconds since the pool started.",
        (unsigned long long)(util_wall_s() - p->start_s));
    status_om(o, "accepted_connections", "counter", "Requests accepted.",
        p->accepted);
    status_om(o, "listen_queue", "gauge", "Connections waiting to be "
        "accepted (sampled each second).", p->queue);
    status_om(o, "max_listen_queue", "gauge", "The most connections seen "
        "waiting since the start.", p->max_queue);
    status_om(o, "listen_queue_length", "gauge", "The listen backlog.",
        p->queue_len);
    status_om(o, "idle_processes", "gauge", "Workers waiting.", p->idle);
    status_om(o, "active_processes", "gauge", "Workers on a request.",
        p->active);
    status_om(o, "total_processes", "gauge", "Workers alive.", p->total);
    status_om(o, "max_active_processes", "gauge", "The most workers seen "
        "on a request at once since the start.", p->max_active);
    status_om(o, "max_children_reached", "counter", "Seconds in which "
        "every worker was busy.", p->max_reached);
    status_om(o, "slow_requests", "counter", "Checks slower than "
        "slowlog_ms.", p->slow);
    buf_puts(o, "# EOF\n");
}

/* ------------------------------------------------------------------ */
/* json */

static void
status_add_int(struct json_object *o, const char *k, int64_t v)
{
    json_object_object_add(o, k, json_object_new_int64(v));
}

static struct json_object *
status_series(const struct rl_stats *st, int64_t end, int outcome)
{
    struct json_object *a = json_object_new_array();
    const struct stats_second *row;
    int64_t s;

    for (s = end - STATS_HISTORY + 1; s <= end; s++) {
        row = stats_second_at(st, s);
        json_object_array_add(a, json_object_new_int64(row != NULL ?
            (int64_t)row->outcome[outcome] : 0));
    }
    return a;
}

static struct json_object *
status_latency(const struct rl_stats *st, int64_t end, double q)
{
    struct json_object *a = json_object_new_array();
    const struct stats_second *row;
    uint32_t bucket[STATS_BUCKETS];
    double v;
    int64_t s;

    for (s = end - STATS_HISTORY + 1; s <= end; s++) {
        row = stats_second_at(st, s);
        if (row != NULL) {
            memcpy(bucket, row->bucket, sizeof(bucket));
            v = stats_quantile(bucket, q);
        } else
            v = -1;
        json_object_array_add(a, v < 0 ? NULL :
            json_object_new_double((double)(int64_t)(v + 0.5) / 1000.0));
    }
    return a;
}

/* Room for the names of a rule's limits, joined by ", ". */
#define STATUS_LIMITS_MAX (RL_MAX_LIMITS * (RL_NAME_MAX + 2))

/*
 * The route pattern of a tenant's rule and the names of its limits, as a
 * check would see them now (the worker's rule cache, else PostgreSQL);
 * both empty when the rule is no longer the tenant's or its rules cannot
 * be read.  These lookups are the page's, not a check's: they are left
 * out of the caches' hits and misses and of PostgreSQL's latency.
 */
static void
status_rule_names(struct service *svc, const char *tenant_id, long long rule,
    char route[RL_ROUTE_MAX + 1], char limit[STATUS_LIMITS_MAX])
{
    struct decider *dc = &svc->decider;
    struct rl_stats *counted = dc->stats;
    const struct tenant_rules *tr;
    const struct rl_rule *r;
    size_t n = 0;
    int i, j;

    route[0] = limit[0] = '\0';
    dc->stats = NULL;
    tr = decide_rules(dc, tenant_id);
    dc->stats = counted;
    for (i = 0; tr != NULL && i < tr->n; i++) {
        r = &tr->rules[i];
        if (r->id != rule)
            continue;
        util_copy(route, RL_ROUTE_MAX + 1, r->pattern);
        for (j = 0; j < r->nlimits && n < STATUS_LIMITS_MAX; j++)
            n += (size_t)snprintf(limit + n, STATUS_LIMITS_MAX - n, "%s%s",
                j > 0 ? ", " : "", r->limits[j].name);
        return;
    }
}

/* Adds "rule", "route" and "limit" of a pair's rule to o. */
static void
status_add_rule(struct service *svc, struct json_object *o,
    const char *tenant_id, long long rule)
{
    char route[RL_ROUTE_MAX + 1], limit[STATUS_LIMITS_MAX];

    status_rule_names(svc, tenant_id, rule, route, limit);
    status_add_int(o, "rule", rule);
    json_object_object_add(o, "route", json_object_new_string(route));
    json_object_object_add(o, "limit", json_object_new_string(limit));
}

/* Whether the viewer (NULL: the operator) may see pair p. */
static int
status_pair_visible(const struct stats_pair *p, const struct key_info *viewer)
{
    return __atomic_load_n(&p->ready, __ATOMIC_ACQUIRE) &&
        (viewer == NULL || strcmp(p->tenant_id, viewer->tenant_id) == 0);
}

struct status_top {
    const struct stats_pair *p;
    uint64_t recent;
};

static int
status_top_cmp(const void *a, const void *b)
{
    const struct status_top *x = a, *y = b;

    return (y->recent > x->recent) - (y->recent < x->recent);
}

/* The pairs denied most over the last STATS_WINDOW seconds: of the
 * whole pool, or of the viewer's tenant only (by id).  remaining is what
 * the rule had left after its last decision. */
static struct json_object *
status_top(struct service *svc, int64_t now, const struct key_info *viewer)
{
    static struct status_top top[STATS_PAIRS];
    const struct rl_stats *st = &svc->board->stats;
    struct json_object *a = json_object_new_array(), *o;
    const struct stats_pair *p;
    int i, n = 0;

    for (i = 0; i < STATS_PAIRS; i++) {
        p = &st->pairs[i];
        if (!status_pair_visible(p, viewer))
            continue;
        top[n].p = p;
        if ((top[n].recent = stats_pair_recent(p, now)) > 0)
            n++;
    }
    qsort(top, (size_t)n, sizeof(top[0]), status_top_cmp);
    for (i = 0; i < n && i < 10; i++) {
        p = top[i].p;
        o = json_object_new_object();
        json_object_object_add(o, "tenant", json_object_new_string(p->tenant));
        json_object_object_add(o, "tenant_id",
            json_object_new_string(p->tenant_id));
        status_add_rule(svc, o, p->tenant_id, p->rule);
        status_add_int(o, "denied", (int64_t)top[i].recent);
        status_add_int(o, "remaining", __atomic_load_n(&p->remaining,
            __ATOMIC_RELAXED));
        json_object_array_add(a, o);
    }
    return a;
}

/* A tenant's checks and denials over the last STATS_WINDOW seconds. */
struct status_busy {
    const struct stats_pair *p;     /* one of its pairs, for the names */
    uint64_t checks, denied;
};

static int
status_busy_name_cmp(const void *a, const void *b)
{
    const struct status_busy *x = a, *y = b;
    int c = strcmp(x->p->tenant_id, y->p->tenant_id);

    return c != 0 ? c : strcmp(x->p->tenant, y->p->tenant);
}

static int
status_busy_cmp(const void *a, const void *b)
{
    const struct status_busy *x = a, *y = b;

    if (x->checks != y->checks)
        return (y->checks > x->checks) - (y->checks < x->checks);
    return (y->denied > x->denied) - (y->denied < x->denied);
}

/* The ten tenants (a tenant: an id and a name) with the most checks over
 * the last STATS_WINDOW seconds, with their denials. */
static struct json_object *
status_tenants(const struct rl_stats *st, int64_t now,
    const struct key_info *viewer)
{
    static struct status_busy t[STATS_PAIRS];
    uint64_t checks[STATS_WINDOW], denied[STATS_WINDOW], c, d;
    struct json_object *a = json_object_new_array(), *o;
    const struct stats_pair *p;
    int i, j, n = 0, m = 0;

    for (i = 0; i < STATS_PAIRS; i++) {
        p = &st->pairs[i];
        if (!status_pair_visible(p, viewer))
            continue;
        memset(checks, 0, sizeof(checks));
        memset(denied, 0, sizeof(denied));
        stats_pair_window(p, now, checks, denied);
        for (c = d = 0, j = 0; j < STATS_WINDOW; j++) {
            c += checks[j];
            d += denied[j];
        }
        if (c == 0)
            continue;
        t[n].p = p;
        t[n].checks = c;
        t[n++].denied = d;
    }
    /* One entry a tenant: its pairs added up. */
    qsort(t, (size_t)n, sizeof(t[0]), status_busy_name_cmp);
    for (i = 0; i < n; i++) {
        if (m > 0 && status_busy_name_cmp(&t[m - 1], &t[i]) == 0) {
            t[m - 1].checks += t[i].checks;
            t[m - 1].denied += t[i].denied;
        } else
            t[m++] = t[i];
    }
    qsort(t, (size_t)m, sizeof(t[0]), status_busy_cmp);
    for (i = 0; i < m && i < 10; i++) {
        o = json_object_new_object();
        json_object_object_add(o, "tenant",
            json_object_new_string(t[i].p->tenant));
        json_object_object_add(o, "tenant_id",
            json_object_new_string(t[i].p->tenant_id));
        status_add_int(o, "checks", (int64_t)t[i].checks);
        status_add_int(o, "denied", (int64_t)t[i].denied);
        json_object_array_add(a, o);
    }
    return a;
}

/*
 * Adds to each tenant of a (status_tenants) its "in_flight": the leases it
 * holds now across every pool (lease_held), and to o "in_flight", their
 * sum, for the dashboard.  A tenant Redis did not answer for has none;
 * after the first such, Redis is not asked again.  Returns a.
 */
static struct json_object *
status_in_flight(struct service *svc, struct json_object *a,
    struct json_object *o)
{
    struct json_object *t, *id;
    long long n, sum = 0;
    size_t i;
    int up = 1;

    for (i = 0; up && i < json_object_array_length(a); i++) {
        t = json_object_array_get_idx(a, i);
        if (!json_object_object_get_ex(t, "tenant_id", &id) ||
            (n = lease_held(&svc->redis, json_object_get_string(id))) < 0)
            up = 0;
        else {
            status_add_int(t, "in_flight", n);
            sum += n;
        }
    }
    if (up)
        status_add_int(o, "in_flight", sum);
    return a;
}

/* A rule of the tenant view. */
struct status_rule {
    const struct stats_pair *p;
    uint64_t checks, denied;        /* in the window */
    uint64_t allowed_total, denied_total;
    int64_t remaining;
};

static int
status_rule_cmp(const void *a, const void *b)
{
    const struct status_rule *x = a, *y = b;

    if (x->denied != y->denied)
        return (y->denied > x->denied) - (y->denied < x->denied);
    if (x->checks != y->checks)
        return (y->checks > x->checks) - (y->checks < x->checks);
    return (x->p->rule > y->p->rule) - (x->p->rule < y->p->rule);
}

/*
 * The tenant view of the tenant called name (of the viewer's tenant only):
 * its rules with their route and limit names, checks and denials over the
 * STATS_WINDOW seconds up to end, totals since the pool started and what
 * was left after the last decision; and the tenant's checks and denials
 * in each of those seconds.  Should the name be another tenant's as well
 * (one removed and created again), both are shown.
 */
static struct json_object *
status_tenant_view(struct service *svc, const char *name, int64_t end,
    const struct key_info *viewer)
{
    static struct status_rule r[STATS_PAIRS];
    const struct rl_stats *st = &svc->board->stats;
    uint64_t checks[STATS_WINDOW], denied[STATS_WINDOW],
        pc[STATS_WINDOW], pd[STATS_WINDOW];
    struct json_object *o = json_object_new_object(), *a, *ro, *cs, *ds;
    const struct stats_pair *p;
    int i, j, k, n = 0;

    memset(checks, 0, sizeof(checks));
    memset(denied, 0, sizeof(denied));
    for (i = 0; i < STATS_PAIRS; i++) {
        p = &st->pairs[i];
        if (!status_pair_visible(p, viewer) || strcmp(p->tenant, name) != 0)
            continue;
        memset(pc, 0, sizeof(pc));
        memset(pd, 0, sizeof(pd));
        stats_pair_window(p, end, pc, pd);
        /* A pair two workers placed at once has two slots: one rule. */
        for (k = 0; k < n && (r[k].p->rule != p->rule ||
            strcmp(r[k].p->tenant_id, p->tenant_id) != 0); k++)
            ;
        if (k == n) {
            memset(&r[n], 0, sizeof(r[n]));
            r[n++].p = p;
        }
        for (j = 0; j < STATS_WINDOW; j++) {
            checks[j] += pc[j];
            denied[j] += pd[j];
            r[k].checks += pc[j];
            r[k].denied += pd[j];
        }
        r[k].allowed_total += __atomic_load_n(&p->allowed, __ATOMIC_RELAXED);
        r[k].denied_total += __atomic_load_n(&p->denied, __ATOMIC_RELAXED);
        r[k].remaining = __atomic_load_n(&p->remaining, __ATOMIC_RELAXED);
    }
    if (n > 0)
        json_object_object_add(o, "tenant", json_object_new_string(name));
    status_add_int(o, "end", end);
    qsort(r, (size_t)n, sizeof(r[0]), status_rule_cmp);
    a = json_object_new_array();
    for (i = 0; i < n; i++) {
        ro = json_object_new_object();
        json_object_object_add(ro, "tenant_id",
            json_object_new_string(r[i].p->tenant_id));
        status_add_rule(svc, ro, r[i].p->tenant_id, r[i].p->rule);
        status_add_int(ro, "checks", (int64_t)r[i].checks);
        status_add_int(ro, "denied", (int64_t)r[i].denied);
        status_add_int(ro, "allowed_total", (int64_t)r[i].allowed_total);
        status_add_int(ro, "denied_total", (int64_t)r[i].denied_total);
        status_add_int(ro, "remaining", r[i].remaining);
        json_object_array_add(a, ro);
    }
    json_object_object_add(o, "rules", a);
    cs = json_object_new_array();
    ds = json_object_new_array();
    for (j = 0; j < STATS_WINDOW; j++) {
        json_object_array_add(cs, json_object_new_int64((int64_t)checks[j]));
        json_object_array_add(ds, json_object_new_int64((int64_t)denied[j]));
    }
    json_object_object_add(o, "checks", cs);
    json_object_object_add(o, "denied", ds);
    return o;
}

/* The checks' Redis script calls (pg 0) or PostgreSQL lookups (pg 1) over
 * the STATS_WINDOW seconds up to now: how many, their p50 and p99 in ms
 * (null when there were none). */
static struct json_object *
status_store(const struct rl_stats *st, int64_t now, int pg)
{
    struct json_object *o = json_object_new_object();
    const struct stats_second *row;
    uint32_t bucket[STATS_BUCKETS];
    const uint32_t *b;
    uint64_t count = 0;
    double v;
    int64_t s;
    int i;

    memset(bucket, 0, sizeof(bucket));
    for (s = now - STATS_WINDOW + 1; s <= now; s++) {
        if ((row = stats_second_at(st, s)) == NULL)
            continue;
        b = pg ? row->pg : row->redis;
        for (i = 0; i < STATS_BUCKETS; i++) {
            bucket[i] += __atomic_load_n(&b[i], __ATOMIC_RELAXED);
            count += __atomic_load_n(&b[i], __ATOMIC_RELAXED);
        }
    }
    status_add_int(o, "count", (int64_t)count);
    v = stats_quantile(bucket, 0.5);
    json_object_object_add(o, "p50_ms", v < 0 ? NULL :
        json_object_new_double((double)(int64_t)(v + 0.5) / 1000.0));
    v = stats_quantile(bucket, 0.99);
    json_object_object_add(o, "p99_ms", v < 0 ? NULL :
        json_object_new_double((double)(int64_t)(v + 0.5) / 1000.0));
    return o;
}

static struct json_object *
status_stores(const struct rl_stats *st, int64_t now)
{
    struct json_object *o = json_object_new_object();

    status_add_int(o, "seconds", STATS_WINDOW);
    json_object_object_add(o, "redis", status_store(st, now, 0));
    json_object_object_add(o, "postgresql", status_store(st, now, 1));
    return o;
}

/* The key and rule caches' hits and misses since the pool started (as
 * ratelimit_cache_lookups_total). */
static struct json_object *
status_caches(const struct rl_stats *st)
{
    struct json_object *o = json_object_new_object(), *c;

    c = json_object_new_object();
    status_add_int(c, "hit", (int64_t)__atomic_load_n(&st->key_hits,
        __ATOMIC_RELAXED));
    status_add_int(c, "miss", (int64_t)__atomic_load_n(&st->key_misses,
        __ATOMIC_RELAXED));
    json_object_object_add(o, "key", c);
    c = json_object_new_object();
    status_add_int(c, "hit", (int64_t)__atomic_load_n(&st->rule_hits,
        __ATOMIC_RELAXED));
    status_add_int(c, "miss", (int64_t)__atomic_load_n(&st->rule_misses,
        __ATOMIC_RELAXED));
    json_object_object_add(o, "rule", c);
    return o;
}

static struct json_object *
status_health(struct service *svc)
{
    struct json_object *h = json_object_new_object(), *r;
    int ok;

    ok = redis_store_ready(&svc->redis) == STORE_OK;
    r = json_object_new_object();
    json_object_object_add(r, "ok", json_object_new_boolean(ok));
    if (!ok)
        json_object_object_add(r, "reason", json_object_new_string(
            svc->redis.error[0] ? svc->redis.error : "redis unreachable"));
    json_object_object_add(h, "redis", r);
    ok = pg_store_ready(&svc->pg) == STORE_OK;
    r = json_object_new_object();
    json_object_object_add(r, "ok", json_object_new_boolean(ok));
    if (!ok)
        json_object_object_add(r, "reason", json_object_new_string(
            svc->pg.error[0] ? svc->pg.error : "postgresql unreachable"));
    json_object_object_add(h, "postgresql", r);
    return h;
}

static void
status_json(struct service *svc, const struct status_pool *p,
    const struct status_query *sq, const struct key_info *viewer,
    struct rl_response *resp)
{
    const struct scoreboard *b = svc->board;
    const struct rl_stats *st = &b->stats;
    struct json_object *o = json_object_new_object(), *arr, *po, *h;
    struct status_proc pr;
    int64_t now = util_wall_s();
    int i;

    json_object_object_add(o, "pool", json_object_new_string("ratelimit-fcgi"));
    json_object_object_add(o, "process manager",
        json_object_new_string(p->pm));
    status_add_int(o, "start time", p->start_s);
    status_add_int(o, "start since", now - p->start_s);
    status_add_int(o, "accepted conn", (int64_t)p->accepted);
    status_add_int(o, "listen queue", (int64_t)p->queue);
    status_add_int(o, "max listen queue", (int64_t)p->max_queue);
    status_add_int(o, "listen queue len", (int64_t)p->queue_len);
    status_add_int(o, "idle processes", (int64_t)p->idle);
    status_add_int(o, "active processes", (int64_t)p->active);
    status_add_int(o, "total processes", (int64_t)p->total);
    status_add_int(o, "max active processes", (int64_t)p->max_active);
    status_add_int(o, "max children reached", (int64_t)p->max_reached);
    status_add_int(o, "slow requests", (int64_t)p->slow);
    if (sq->history) {
        json_object_object_add(o, "version",
            json_object_new_string(RL_VERSION));
        json_object_object_add(o, "health", status_health(svc));
        h = json_object_new_object();
        status_add_int(h, "end", now - 1);
        status_add_int(h, "seconds", STATS_HISTORY);
        for (i = 0; i < OUT_N; i++)
            json_object_object_add(h, stats_outcome_name[i],
                status_series(st, now - 1, i));
        json_object_object_add(h, "p50_ms", status_latency(st, now - 1, 0.5));
        json_object_object_add(h, "p99_ms", status_latency(st, now - 1,
            0.99));
        json_object_object_add(o, "history", h);
        json_object_object_add(o, "top", status_top(svc, now, viewer));
        json_object_object_add(o, "tenants", status_in_flight(svc,
            status_tenants(st, now, viewer), o));
        json_object_object_add(o, "stores", status_stores(st, now));
        json_object_object_add(o, "caches", status_caches(st));
        if (sq->has_tenant)
            json_object_object_add(o, "tenant", status_tenant_view(svc,
                sq->tenant, now - 1, viewer));
    }
    if (sq->full) {
        arr = json_object_new_array();
        for (i = 0; i < RL_MAX_WORKERS; i++) {
            if (!status_proc(b, i, viewer, &pr))
                continue;
            po = json_object_new_object();
            status_add_int(po, "pid", pr.pid);
            json_object_object_add(po, "state",
                json_object_new_string(pr.state));
            status_add_int(po, "start time", pr.start_s);
            status_add_int(po, "start since", now - pr.start_s);
            status_add_int(po, "requests", (int64_t)pr.requests);
            status_add_int(po, "request duration", pr.duration_us);
            json_object_object_add(po, "request method",
                json_object_new_string(pr.method));
            json_object_object_add(po, "request uri",
                json_object_new_string(pr.uri));
            status_add_int(po, "content length", pr.content_length);
            json_object_object_add(po, "tenant",
                json_object_new_string(pr.tenant));
            json_object_array_add(arr, po);
        }
        json_object_object_add(o, "processes", arr);
    }
    response_json(resp, o);
}

void
views_status(struct service *svc, const struct http_request *req,
    const struct key_info *viewer, struct rl_response *resp)
{
    struct status_query sq;
    struct status_pool p;

    status_query_parse(req->query, &sq);
    status_pool(svc->board, &p);
    resp->no_store = 1;
    switch (sq.format) {
    case FMT_JSON:
        status_json(svc, &p, &sq, viewer, resp);
        break;
    case FMT_HTML:
        status_html(svc->board, &p, sq.full, viewer, resp);
        break;
    case FMT_OPENMETRICS:
        status_openmetrics(&p, resp);
        break;
    default:
        status_text(svc->board, &p, sq.full, viewer, resp);
    }
}

/* Until the page is embedded (scripts/embed.sh), there is none. */
extern const char embedded_dashboard_html[] __attribute__((weak));

void
views_dashboard(struct rl_response *resp)
{
    if (embedded_dashboard_html == NULL) {
        response_refuse(resp, RL_REFUSE_NOT_FOUND,
            "this build has no dashboard");
        return;
    }
    resp->content_type = "text/html; charset=utf-8";
    resp->no_store = 1;
    buf_puts(&resp->body, embedded_dashboard_html);
}
