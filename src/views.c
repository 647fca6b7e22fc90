/*
 * views.c -- the read-only answers: health, metrics, pool status and the
 * caller's own configuration.
 *
 *   GET /health/live      the process answers
 *   GET /health/ready     PostgreSQL, Redis and the script are usable; the
 *                         reason in a 503 is short and names no address
 *   GET /metrics          Prometheus counters of the whole pool
 *   GET /status           php-fpm style pool status (?json)
 *   GET /v1/config/...    the caller's own tenant and rules, as a check
 *                         would see them
 */
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "service.h"

void
views_live(struct rl_response *resp)
{
    buf_puts(&resp->body, "{\"status\":\"live\"}\n");
}

void
views_ready(struct service *svc, struct rl_response *resp)
{
    struct json_object *o;
    const char *reason = NULL, *status = "ready";
    int pg_down;

    /* The reasons are short texts without host, port or server message:
     * anyone who reaches the listener may ask.  The log has the detail.
     * Checks are served while Redis answers: without PostgreSQL the keys
     * and rules the pool knows keep working, so that is "degraded", not
     * unavailable, unless ready_requires_postgresql says otherwise. */
    pg_down = pg_store_ready(&svc->pg) != STORE_OK;
    if (redis_store_ready(&svc->redis) != STORE_OK) {
        reason = svc->redis.error[0] ? svc->redis.error : "redis unreachable";
        status = "unavailable";
    } else if (pg_down) {
        reason = svc->pg.error[0] ? svc->pg.error : "postgresql unreachable";
        status = strcmp(svc->cfg->ready_requires_postgresql, "on") == 0 ?
            "unavailable" : "degraded";
    }
    o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_string(status));
    if (reason != NULL)
        json_object_object_add(o, "reason", json_object_new_string(reason));
    if (strcmp(status, "unavailable") == 0) {
        resp->status = 503;
        response_header(resp, "Retry-After", "%ld",
            svc->cfg->retry_after_unavailable);
    }
    response_json(resp, o);
}

static void
views_metric(struct rl_buf *b, const char *name, const char *help,
    const char *type, const char *labels, unsigned long v)
{
    if (help != NULL)
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    buf_printf(b, "%s%s %lu\n", name, labels, v);
}

void
views_metrics(struct service *svc, struct rl_response *resp)
{
    const struct rl_counters *c = svc->counters;
    struct rl_buf *b = &resp->body;
    unsigned long live, busy;

    scoreboard_count(svc->board, &live, &busy);
    resp->content_type = "text/plain; version=0.0.4";
    views_metric(b, "ratelimit_requests_total", "FastCGI requests accepted.",
        "counter", "", c->requests);
    views_metric(b, "ratelimit_checks_total", "Decisions, by result.",
        "counter", "{result=\"allowed\"}", c->allowed);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"denied\"}", c->denied);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"no_rule\"}", c->no_rule);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"fail_open\"}", c->fail_open);
    views_metric(b, "ratelimit_unavailable_total",
        "Answers 503 because a store was unreachable.", "counter", "",
        c->unavailable);
    views_metric(b, "ratelimit_shadow_denied_total",
        "Requests a shadow rule would have denied.", "counter", "",
        c->shadow_denied);
    views_metric(b, "ratelimit_redis_errors_total",
        "Checks that could not reach Redis.", "counter", "", c->redis_errors);
    views_metric(b, "ratelimit_redis_redirects_total", "Redis Cluster "
        "redirections (MOVED, ASK) followed: each cost one more round "
        "trip.", "counter", "", c->redis_redirects);
    views_metric(b, "ratelimit_redis_topology_refreshes_total", "Redis "
        "Cluster slot maps read and Sentinel lookups of the master.",
        "counter", "", c->redis_lookups);
    views_metric(b, "ratelimit_overlimit_cache_total", "The shared "
        "over-limit cache: denials answered without Redis (hit), denials "
        "stored (insert), entries pushed out by others (eviction).",
        "counter", "{event=\"hit\"}", c->overlimit_hits);
    views_metric(b, "ratelimit_overlimit_cache_total", NULL, NULL,
        "{event=\"insert\"}", c->overlimit_inserts);
    views_metric(b, "ratelimit_overlimit_cache_total", NULL, NULL,
        "{event=\"eviction\"}", c->overlimit_evictions);
    views_metric(b, "ratelimit_script_errors_total", "Checks whose script "
        "call Redis answered with an error (503 script_error).", "counter",
        "", c->script_errors);
    views_metric(b, "ratelimit_misconfigured_total", "Checks refused because "
        "more limits apply than one check can decide.", "counter", "",
        c->misconfigured);
    views_metric(b, "ratelimit_fcgi_refused_total", "FastCGI connections "
        "dropped for malformed or refused records.", "counter", "",
        c->fcgi_refused);
    views_metric(b, "ratelimit_worker_crashes_total", "Workers that died "
        "abnormally (signal or non-zero status).", "counter", "",
        c->worker_crashes);
    views_metric(b, "ratelimit_worker_rss_exits_total", "Workers replaced "
        "because their memory passed max_worker_rss_mb.", "counter", "",
        c->worker_rss_exits);
    views_metric(b, "ratelimit_key_lookups_total", "API key lookups in "
        "PostgreSQL.", "counter", "", c->key_lookups);
    views_metric(b, "ratelimit_key_lookups_limited_total", "Unknown API keys "
        "answered 401 without a lookup (key_lookup_rate).", "counter", "",
        c->key_lookups_limited);
    views_metric(b, "ratelimit_workers", "Worker processes alive.", "gauge",
        "", live);
    views_metric(b, "ratelimit_workers_busy", "Workers on a request.", "gauge",
        "", busy);
}

static struct json_object *
views_limit_json(const struct rl_limit *l)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "id", json_object_new_int64(l->id));
    json_object_object_add(o, "name", json_object_new_string(l->name));
    json_object_object_add(o, "algorithm",
        json_object_new_string(algo_name(l->algorithm)));
    algo_json_add(o, l);
    return o;
}

/*
 * GET /v1/config/tenants and GET /v1/config/tenants/{id}/rules: what the
 * caller's key may see of the configuration, which is its own tenant only.
 * The rules come from the worker's cache, as a check would see them.
 */
void
views_config(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    static const char base[] = "/v1/config/tenants";
    const struct tenant_rules *tr;
    const struct rl_rule *r;
    struct json_object *o, *arr, *ro, *la;
    struct key_info ki;
    const char *rest = req->path + sizeof(base) - 1;
    size_t restlen = req->path_len - (sizeof(base) - 1);
    int i, j;

    if (decide_identify(&svc->decider, req, 0, &ki, resp) == -1)
        return;
    if (restlen == 0) {
        o = json_object_new_object();
        arr = json_object_new_array();
        ro = json_object_new_object();
        json_object_object_add(ro, "id", json_object_new_string(ki.tenant_id));
        json_object_object_add(ro, "name",
            json_object_new_string(ki.tenant_name));
        json_object_object_add(ro, "status", json_object_new_string("active"));
        json_object_array_add(arr, ro);
        json_object_object_add(o, "tenants", arr);
        response_json(resp, o);
        return;
    }
    if (restlen != 1 + RL_UUID_LEN + 6 || rest[0] != '/' ||
        memcmp(rest + 1 + RL_UUID_LEN, "/rules", 6) != 0) {
        response_error(resp, 404, "not_found", NULL);
        return;
    }
    if (memcmp(rest + 1, ki.tenant_id, RL_UUID_LEN) != 0) {
        response_error(resp, 403, "forbidden",
            "a key may read its own tenant only");
        return;
    }
    if ((tr = decide_rules(&svc->decider, ki.tenant_id)) == NULL) {
        decide_unavailable(&svc->decider, resp, "service_unavailable",
            "rule store unavailable");
        return;
    }
    o = json_object_new_object();
    json_object_object_add(o, "tenant_id", json_object_new_string(ki.tenant_id));
    arr = json_object_new_array();
    for (i = 0; i < tr->n; i++) {
        r = &tr->rules[i];
        ro = json_object_new_object();
        json_object_object_add(ro, "id", json_object_new_int64(r->id));
        json_object_object_add(ro, "route_pattern",
            json_object_new_string(r->pattern));
        json_object_object_add(ro, "priority",
            json_object_new_int(r->priority));
        json_object_object_add(ro, "always", json_object_new_boolean(r->always));
        json_object_object_add(ro, "shadow", json_object_new_boolean(r->shadow));
        json_object_object_add(ro, "failure_mode",
            json_object_new_string(r->fail_open ? "open" : "closed"));
        json_object_object_add(ro, "per",
            json_object_new_string(r->per_route ? "route" : "rule"));
        la = json_object_new_array();
        for (j = 0; j < r->nlimits; j++)
            json_object_array_add(la, views_limit_json(&r->limits[j]));
        json_object_object_add(ro, "limits", la);
        json_object_array_add(arr, ro);
    }
    json_object_object_add(o, "rules", arr);
    response_json(resp, o);
}

/* php-fpm's pool status fields, as text or (?json) JSON. */
void
views_status(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct scoreboard *b = svc->board;
    struct json_object *o;
    unsigned long total, active;
    char start[64];
    time_t t = (time_t)b->start_s;
    struct tm tm;

    scoreboard_count(b, &total, &active);
    gmtime_r(&t, &tm);
    strftime(start, sizeof(start), "%d/%b/%Y:%H:%M:%S +0000", &tm);
    if (strcmp(req->query, "json") == 0) {
        o = json_object_new_object();
        json_object_object_add(o, "pool",
            json_object_new_string("ratelimit-fcgi"));
        json_object_object_add(o, "process manager",
            json_object_new_string(b->workers == 0 ? "none" : "static"));
        json_object_object_add(o, "start time",
            json_object_new_int64(b->start_s));
        json_object_object_add(o, "start since",
            json_object_new_int64(util_wall_s() - b->start_s));
        json_object_object_add(o, "accepted conn",
            json_object_new_int64((int64_t)b->accepted));
        json_object_object_add(o, "idle processes",
            json_object_new_int64((int64_t)(total - active)));
        json_object_object_add(o, "active processes",
            json_object_new_int64((int64_t)active));
        json_object_object_add(o, "total processes",
            json_object_new_int64((int64_t)total));
        response_json(resp, o);
        return;
    }
    resp->content_type = "text/plain";
    buf_printf(&resp->body,
        "pool:                 ratelimit-fcgi\n"
        "process manager:      %s\n"
        "start time:           %s\n"
        "start since:          %lld\n"
        "accepted conn:        %lu\n"
        "idle processes:       %lu\n"
        "active processes:     %lu\n"
        "total processes:      %lu\n",
        b->workers == 0 ? "none" : "static", start,
        (long long)(util_wall_s() - b->start_s), b->accepted, total - active,
        active, total);
}
