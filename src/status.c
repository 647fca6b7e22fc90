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
 *                               and rules denied most in the last minute,
 *                               and the health of Redis and PostgreSQL:
 *                               what /dashboard draws
 *
 * "listen queue" and its maximum are sampled by the master once a second
 * (as php-fpm does); "max children reached" counts the samples in which
 * every worker was busy; "slow requests" counts checks over slowlog_ms.
 *
 * Who asks decides what is shown (api.c): the operator sees the pool; an
 * admin key sees the pool's fields and history, which name no tenant, and
 * of the workers' last requests and the top list only its own tenant's.
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

enum { FMT_TEXT, FMT_JSON, FMT_HTML, FMT_OPENMETRICS };

struct status_query {
    int format;
    int full;
    int history;
};

/* The parameters of the query string; unknown ones are ignored, as
 * php-fpm does. */
static void
status_query_parse(const char *q, struct status_query *sq)
{
    const char *p = q, *end;
    size_t n;

    memset(sq, 0, sizeof(*sq));
    while (*p != '\0') {
        end = strchr(p, '&');
        n = end != NULL ? (size_t)(end - p) : strlen(p);
        /* "json=1" counts as "json". */
        if (memchr(p, '=', n) != NULL)
            n = (size_t)((const char *)memchr(p, '=', n) - p);
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
 * whole pool, or of the viewer's tenant only (by id). */
static struct json_object *
status_top(const struct rl_stats *st, int64_t now,
    const struct key_info *viewer)
{
    static struct status_top top[STATS_PAIRS];
    struct json_object *a = json_object_new_array(), *o;
    const struct stats_pair *p;
    int i, n = 0;

    for (i = 0; i < STATS_PAIRS; i++) {
        p = &st->pairs[i];
        if (!__atomic_load_n(&p->ready, __ATOMIC_ACQUIRE))
            continue;
        if (viewer != NULL && strcmp(p->tenant_id, viewer->tenant_id) != 0)
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
        status_add_int(o, "rule", p->rule);
        status_add_int(o, "denied", (int64_t)top[i].recent);
        status_add_int(o, "remaining", p->remaining);
        json_object_array_add(a, o);
    }
    return a;
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
        json_object_object_add(o, "top", status_top(st, now, viewer));
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
