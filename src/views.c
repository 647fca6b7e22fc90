/*
 * views.c -- the read-only answers: health, metrics, pool status and the
 * caller's own configuration.
 *
 *   GET /health/live      the process answers
 *   GET /health/ready     PostgreSQL, Redis and the script are usable; the
 *                         reason in a 503 is short and names no address
 *                         (a misconfigured PostgreSQL is a 503 too)
 *   GET /metrics          Prometheus counters of the pool, and per
 *                         tenant (an admin key: its own tenant only)
 *   GET /status           php-fpm style pool status (?json, status.c)
 *   GET /v1/config/...    the caller's own tenant and rules, as a check
 *                         would see them
 */
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "service.h"
#include "lease.h"

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
     * unavailable, unless ready_requires_postgresql says otherwise.  A
     * PostgreSQL that answers but refuses what the service needs (a wrong
     * password, no schema, missing grants: "postgresql misconfigured")
     * is unavailable: it will not come back by itself, and a load
     * balancer should send the traffic elsewhere. */
    pg_down = pg_store_ready(&svc->pg) != STORE_OK;
    if (redis_store_ready(&svc->redis) != STORE_OK) {
        reason = svc->redis.error[0] ? svc->redis.error : "redis unreachable";
        status = "unavailable";
    } else if (pg_down) {
        reason = svc->pg.error[0] ? svc->pg.error : "postgresql unreachable";
        status = svc->pg.misconfigured ||
            strcmp(svc->cfg->ready_requires_postgresql, "on") == 0 ?
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

/* Writes a label value with \, " and newline escaped. */
static void
views_label(struct rl_buf *b, const char *v)
{
    for (; *v != '\0'; v++) {
        if (*v == '\\' || *v == '"')
            buf_printf(b, "\\%c", *v);
        else if (*v == '\n')
            buf_puts(b, "\\n");
        else
            buf_printf(b, "%c", *v);
    }
}

/* A histogram of microseconds, in seconds. */
static void
views_histogram(struct rl_buf *b, const char *name, const char *help,
    const struct stats_hist *h)
{
    uint64_t cum = 0;
    int i;

    buf_printf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    for (i = 0; i < STATS_BUCKETS; i++) {
        cum += __atomic_load_n(&h->bucket[i], __ATOMIC_RELAXED);
        if (i < STATS_BUCKETS - 1)
            buf_printf(b, "%s_bucket{le=\"%g\"} %llu\n", name,
                stats_bucket_us[i] / 1e6, (unsigned long long)cum);
        else
            buf_printf(b, "%s_bucket{le=\"+Inf\"} %llu\n", name,
                (unsigned long long)cum);
    }
    buf_printf(b, "%s_sum %.6f\n%s_count %llu\n", name,
        (double)__atomic_load_n(&h->sum_us, __ATOMIC_RELAXED) / 1e6, name,
        (unsigned long long)cum);
}

/* stats_owner_fn over PostgreSQL: who has the tenant name now. */
static int
views_tenant_owner(void *arg, const char *tenant, char id[RL_UUID_LEN + 1])
{
    struct service *svc = arg;
    struct key_info ki;

    /* A name of 128 bytes may have been cut to fit (128 characters of
     * UTF-8 may take more): another tenant's, or none, by that text. */
    if (strlen(tenant) >= sizeof(ki.tenant_name) - 1)
        return 2;
    if (pg_store_tenant(&svc->pg, tenant, &ki) != STORE_OK)
        return -1;
    if (!ki.found)
        return 0;
    util_copy(id, RL_UUID_LEN + 1, ki.tenant_id);
    return 1;
}

/* The most tenants whose leases one scrape asks Redis about. */
#define VIEWS_LEASE_TENANTS 100

/*
 * ratelimit_tenant_leases_held: for each tenant of ten (the first
 * VIEWS_LEASE_TENANTS), the leases it holds now across the fleet, as its
 * set of leases in Redis has them (lua/lease.lua): one ZCOUNT each, from
 * this host's clock.  Nothing when Redis does not answer.
 */
static void
views_tenant_leases(struct service *svc, const struct stats_tenant *ten,
    int nt, struct rl_buf *b)
{
    long long n;
    int i;

    for (i = 0; i < nt && i < VIEWS_LEASE_TENANTS; i++) {
        if ((n = lease_held(&svc->redis, ten[i].rows[0].tenant_id)) < 0)
            return;
        if (i == 0)
            buf_puts(b, "# HELP ratelimit_tenant_leases_held Leases held "
                "now by those tenants, across every pool.\n"
                "# TYPE ratelimit_tenant_leases_held gauge\n");
        buf_puts(b, "ratelimit_tenant_leases_held{tenant=\"");
        views_label(b, ten[i].rows[0].tenant);
        buf_printf(b, "\"} %lld\n", n);
    }
}

/*
 * ratelimit_tenant_checks_total and ratelimit_rule_checks_total, for the
 * tenants metrics_tenants lets through: none, the top N by checks, or all
 * the pool counts (at most STATS_PAIRS pairs).  Tenants are named by name,
 * and no two series have the same labels: PostgreSQL is asked who has
 * each name shown (stats_tenants), and the counts of a tenant removed,
 * renamed, or whose name another tenant now has are dropped for good.
 * While PostgreSQL cannot say, the counts of one name are added up.  A
 * series may vanish when its tenant drops out of the top N.  A viewer (an
 * admin key) gets its own tenant's series only, unless metrics_tenants is
 * off.
 */
static void
views_tenant_metrics(struct service *svc, const struct key_info *viewer,
    struct rl_buf *b)
{
    static struct stats_pair_row rows[STATS_PAIRS];
    static struct stats_tenant ten[STATS_PAIRS];
    const struct stats_pair_row *r;
    long top = svc->cfg->metrics_top;
    int n, nt, i, j, k;

    if (top == 0)
        return;
    n = stats_pairs_copy(&svc->board->stats, viewer != NULL ?
        viewer->tenant_id : NULL, rows);
    nt = stats_tenants(&svc->board->stats, rows, n, top, views_tenant_owner,
        svc, ten);
    buf_puts(b, "# HELP ratelimit_tenant_checks_total Decisions per tenant "
        "(metrics_tenants bounds which tenants).\n"
        "# TYPE ratelimit_tenant_checks_total counter\n");
    for (i = 0; i < nt; i++)
        for (k = 0; k < 2; k++) {
            buf_puts(b, "ratelimit_tenant_checks_total{tenant=\"");
            views_label(b, ten[i].rows[0].tenant);
            buf_printf(b, "\",result=\"%s\"} %llu\n", k ? "denied" :
                "allowed", (unsigned long long)(k ? ten[i].denied :
                ten[i].allowed));
        }
    buf_puts(b, "# HELP ratelimit_rule_checks_total Decisions per rule "
        "of those tenants.\n# TYPE ratelimit_rule_checks_total counter\n");
    for (i = 0; i < nt; i++)
        for (j = 0; j < ten[i].n; j++) {
            r = &ten[i].rows[j];
            for (k = 0; k < 2; k++) {
                buf_puts(b, "ratelimit_rule_checks_total{tenant=\"");
                views_label(b, r->tenant);
                buf_printf(b, "\",rule=\"%lld\",result=\"%s\"} %llu\n",
                    r->rule, k ? "denied" : "allowed",
                    (unsigned long long)(k ? r->denied : r->allowed));
            }
        }
    views_tenant_leases(svc, ten, nt, b);
}

void
views_metrics(struct service *svc, const struct key_info *viewer,
    struct rl_response *resp)
{
    const struct rl_counters *c = svc->counters;
    const struct rl_stats *st = &svc->board->stats;
    struct rl_buf *b = &resp->body;
    struct keyfilter_stats kst;
    unsigned long live, busy;
    char label[32];
    int i;

    scoreboard_count(svc->board, &live, &busy);
    resp->content_type = "text/plain; version=0.0.4";
    buf_printf(b, "# HELP ratelimit_build_info The version running.\n"
        "# TYPE ratelimit_build_info gauge\n"
        "ratelimit_build_info{version=\"%s\"} 1\n", RL_VERSION);
    views_metric(b, "ratelimit_requests_total", "FastCGI requests accepted.",
        "counter", "", c->requests);
    for (i = 0; i < STATS_STATUSES; i++) {
        if (i < STATS_STATUSES - 1)
            snprintf(label, sizeof(label), "{status=\"%d\"}",
                stats_status_code[i]);
        else
            snprintf(label, sizeof(label), "{status=\"other\"}");
        views_metric(b, "ratelimit_responses_total", i == 0 ? "Answers, by "
            "HTTP status." : NULL, i == 0 ? "counter" : NULL, label,
            (unsigned long)__atomic_load_n(&st->status[i],
            __ATOMIC_RELAXED));
    }
    views_metric(b, "ratelimit_checks_total", "Decisions, by result.",
        "counter", "{result=\"allowed\"}", c->allowed);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"denied\"}", c->denied);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"no_rule\"}", c->no_rule);
    views_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"fail_open\"}", c->fail_open);
    views_histogram(b, "ratelimit_check_duration_seconds", "Time to answer "
        "a check or an authorizer request, from its first byte read.",
        &st->check);
    views_histogram(b, "ratelimit_redis_duration_seconds", "Time of the "
        "script call in Redis, round trip included.", &st->redis);
    views_histogram(b, "ratelimit_postgresql_duration_seconds", "Time of "
        "a key or rule lookup in PostgreSQL.", &st->pg);
    views_metric(b, "ratelimit_slow_checks_total", "Checks slower than "
        "slowlog_ms.", "counter", "", (unsigned long)st->slow);
    views_tenant_metrics(svc, viewer, b);
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
    views_metric(b, "ratelimit_cache_lookups_total", "Lookups in the "
        "pool's key and rule caches: hit (no PostgreSQL query) or miss.",
        "counter", "{cache=\"key\",result=\"hit\"}",
        (unsigned long)st->key_hits);
    views_metric(b, "ratelimit_cache_lookups_total", NULL, NULL,
        "{cache=\"key\",result=\"miss\"}", (unsigned long)st->key_misses);
    views_metric(b, "ratelimit_cache_lookups_total", NULL, NULL,
        "{cache=\"rule\",result=\"hit\"}", (unsigned long)st->rule_hits);
    views_metric(b, "ratelimit_cache_lookups_total", NULL, NULL,
        "{cache=\"rule\",result=\"miss\"}", (unsigned long)st->rule_misses);
    views_metric(b, "ratelimit_script_errors_total", "Checks whose script "
        "call Redis answered with an error (503 script_error).", "counter",
        "", c->script_errors);
    views_metric(b, "ratelimit_misconfigured_total", "Checks refused (503 "
        "misconfigured) because their rules cannot be decided as stored: "
        "more limits than one check decides, more rules than a tenant may "
        "have, or a limit that could not be loaded.", "counter", "",
        c->misconfigured);
    views_metric(b, "ratelimit_budget_refusals_total", "Checks "
        "refused (429 counter_budget_exceeded) because they would have "
        "created counters past their tenant's counter budget.", "counter",
        "", c->over_budget);
    views_metric(b, "ratelimit_leases_total", "Leases: taken by checks, "
        "released, extended, refused (a release or extension answered "
        "404, 409 or 410), expired unreleased (found by a later lease of "
        "their tenant).", "counter", "{event=\"taken\"}", c->leases_taken);
    views_metric(b, "ratelimit_leases_total", NULL, NULL,
        "{event=\"released\"}", c->leases_released);
    views_metric(b, "ratelimit_leases_total", NULL, NULL,
        "{event=\"extended\"}", c->leases_extended);
    views_metric(b, "ratelimit_leases_total", NULL, NULL,
        "{event=\"refused\"}", c->leases_refused);
    views_metric(b, "ratelimit_leases_total", NULL, NULL,
        "{event=\"expired\"}", c->leases_expired);
    views_metric(b, "ratelimit_lease_settlements_total", "Releases that "
        "settled a cost other than the one reserved: refunded or charged "
        "more.", "counter", "{direction=\"refund\"}", c->lease_refunds);
    views_metric(b, "ratelimit_lease_settlements_total", NULL, NULL,
        "{direction=\"charge\"}", c->lease_charges);
    views_metric(b, "ratelimit_lease_settled_cost_total", "The cost those "
        "settlements gave back or charged more.", "counter",
        "{direction=\"refund\"}", c->lease_refunded_cost);
    views_metric(b, "ratelimit_lease_settled_cost_total", NULL, NULL,
        "{direction=\"charge\"}", c->lease_charged_cost);
    views_metric(b, "ratelimit_fcgi_refused_total", "FastCGI connections "
        "dropped for malformed or refused records.", "counter", "",
        c->fcgi_refused);
    views_metric(b, "ratelimit_fcgi_evicted_total", "FastCGI connections "
        "closed to make room for a new one (an idle kept one, else the "
        "oldest incomplete one): every worker's worker_connections were "
        "taken.", "counter", "", c->fcgi_evicted);
    views_metric(b, "ratelimit_fcgi_closed_leaving_total", "Kept FastCGI "
        "connections that a worker on its way out (a stop, a reload, "
        "max_requests, max_worker_rss_mb) closed because no other worker "
        "took them: the pool was stopping, or the hand-off queue stayed "
        "full.", "counter", "", c->fcgi_unpassed);
    views_metric(b, "ratelimit_worker_starts_total", "Worker processes "
        "started.", "counter", "", (unsigned long)st->worker_starts);
    for (i = 0; i < EXIT_N; i++) {
        snprintf(label, sizeof(label), "{cause=\"%s\"}", stats_exit_name[i]);
        views_metric(b, "ratelimit_worker_exits_total", i == 0 ? "Worker "
            "processes that ended, by cause." : NULL, i == 0 ? "counter" :
            NULL, label, (unsigned long)st->exits[i]);
    }
    views_metric(b, "ratelimit_worker_crashes_total", "Workers that died "
        "abnormally (signal or non-zero status).", "counter", "",
        c->worker_crashes);
    views_metric(b, "ratelimit_worker_rss_exits_total", "Workers replaced "
        "because their memory passed max_worker_rss_mb.", "counter", "",
        c->worker_rss_exits);
    views_metric(b, "ratelimit_key_lookups_total", "API key lookups in "
        "PostgreSQL.", "counter", "", c->key_lookups);
    views_metric(b, "ratelimit_key_lookups_limited_total", "API keys the "
        "pool did not know, refused without a lookup (key_lookup_rate): 401 "
        "when the key filter is complete, else 503.", "counter", "",
        c->key_lookups_limited);
    views_metric(b, "ratelimit_key_lookups_deferred_total", "Of those, the "
        "ones answered 503 key_lookup_deferred (the key filter was not "
        "complete).", "counter", "", c->key_lookups_deferred);
    views_metric(b, "ratelimit_postgresql_statement_timeouts_total",
        "PostgreSQL statements given up by PostgreSQL at the connection's "
        "statement_timeout (half pg_query_timeout_ms), the connection kept: "
        "lookups answered from what the pool knew, last_used_at writes "
        "tried again.", "counter", "", c->pg_statement_timeouts);
    keyfilter_stats(svc->shm->keyfilter, &kst);
    views_metric(b, "ratelimit_key_filter_complete", "1 when the filter of "
        "active keys holds every active key (key_filter_mb).", "gauge", "",
        (unsigned long)kst.complete);
    views_metric(b, "ratelimit_key_filter_keys_total", "Key hashes added to "
        "the filter of active keys (by its builds and by notifications).",
        "counter", "", (unsigned long)kst.keys);
    views_metric(b, "ratelimit_key_filter_builds_total", "Complete reads of "
        "the active keys into the filter.", "counter", "",
        (unsigned long)kst.builds);
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
        response_refuse(resp, RL_REFUSE_NOT_FOUND, "no such endpoint; "
            "/v1/config/tenants/TENANT_ID/rules reads a tenant's rules");
        return;
    }
    if (memcmp(rest + 1, ki.tenant_id, RL_UUID_LEN) != 0) {
        response_refuse(resp, RL_REFUSE_OWN_TENANT_ONLY, NULL);
        return;
    }
    if ((tr = decide_rules(&svc->decider, ki.tenant_id)) == NULL) {
        decide_unavailable(&svc->decider, resp, RL_REFUSE_RULE_STORE);
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

