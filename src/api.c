/*
 * api.c -- the HTTP surface: which path does what, and every answer.
 *
 *   POST /v1/check        the check API (README "The check API")
 *   GET  /health/live     the process answers
 *   GET  /health/ready    PostgreSQL, Redis and the script are usable
 *   GET  /metrics         Prometheus counters of the whole pool
 *   GET  /status          php-fpm style pool status (?json)
 *   GET  /v1/config/...   the caller's own tenant and rules
 *   any  authorizer_path  an authorizer decision as a Responder (nginx)
 *   FCGI_ROLE=AUTHORIZER  an authorizer decision (lighttpd, Apache)
 *
 * The request arrives as a plain struct (see worker.c for the libfcgi
 * side), so this file has no idea it is behind FastCGI.  Both the check
 * API and the authorizer go through api_decide(): rules of the tenant,
 * the plan for the route, one Redis call.
 */
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "service.h"

enum decide_result {
    DECIDE_OK,                  /* d holds the decision */
    DECIDE_NO_RULE,             /* nothing applies: allowed, no Redis call */
    DECIDE_UNAVAILABLE,         /* a store is down and the rules fail closed */
    DECIDE_FAIL_OPEN,           /* Redis is down, every rule fails open */
    DECIDE_MISCONFIGURED,       /* more limits apply than one check holds */
};

static int
path_is(const struct http_request *req, const char *path)
{
    size_t n = strlen(path);

    return req->path_len == n && memcmp(req->path, path, n) == 0;
}

static int
method_is(const struct http_request *req, const char *m)
{
    return strcmp(req->method, m) == 0;
}

static void
api_unavailable(struct service *svc, struct rl_response *resp,
    const char *what)
{
    COUNT(svc, unavailable);
    response_error(resp, 503, "service_unavailable", what);
    response_header(resp, "Retry-After", "%ld",
        svc->cfg->retry_after_unavailable);
}

static void
api_method_not_allowed(struct rl_response *resp, const char *allow)
{
    response_error(resp, 405, "method_not_allowed", NULL);
    response_header(resp, "Allow", "%s", allow);
}

/*
 * Answers a failed authentication: 401 for a missing, unknown or revoked
 * key, 403 for a suspended tenant, 503 when the key store is down.
 * Returns 0 for AUTH_OK (nothing written), else -1.
 */
static int
api_auth_answer(struct service *svc, struct rl_response *resp, int rc)
{
    switch (rc) {
    case AUTH_OK:
        return 0;
    case AUTH_NO_KEY:
        response_error(resp, 401, "unauthorized", "missing API key");
        return -1;
    case AUTH_UNKNOWN:
    case AUTH_REVOKED:
        response_error(resp, 401, "unauthorized", "invalid API key");
        return -1;
    case AUTH_SUSPENDED:
        response_error(resp, 403, "tenant_suspended", "tenant is suspended");
        return -1;
    default:
        api_unavailable(svc, resp, "key store unavailable");
        return -1;
    }
}

/*
 * Decides creq for the tenant.  On DECIDE_OK, plan and d describe the
 * decision (shadow limits marked).  *what says which store failed.
 */
static int
api_decide(struct service *svc, const char *tenant_id,
    const struct check_request *creq, struct rl_plan *plan,
    struct rl_decision *d, const char **what)
{
    const struct tenant_rules *tr;
    struct limiter_call call;
    int i, fail_open;

    if ((tr = auth_tenant_rules(svc, tenant_id)) == NULL) {
        *what = "rule store unavailable";
        return DECIDE_UNAVAILABLE;
    }
    switch (rules_plan(tr->rules, tr->n, creq->route, plan)) {
    case 0:
        COUNT(svc, no_rule);
        return DECIDE_NO_RULE;
    case -1:
        /* Deciding on some of the limits would let through what the rest
         * forbid: refuse, and say so once per rule and generation. */
        COUNT(svc, misconfigured);
        if (svc->misconfigured_rule != plan->rule[0]->id ||
            svc->misconfigured_gen != tr->generation) {
            svc->misconfigured_rule = plan->rule[0]->id;
            svc->misconfigured_gen = tr->generation;
            log_error("tenant %s route %s: rule %lld and the always rules "
                "that match have %d limits, more than the %d one check can "
                "decide; answering 503", tenant_id, creq->route,
                plan->rule[0]->id, plan->needed, RL_MAX_LIMITS);
        }
        *what = "misconfigured";
        return DECIDE_MISCONFIGURED;
    }
    if (limiter_build(svc->redis.sha, tenant_id, plan, creq, &call) == -1) {
        log_error("rule %lld: cannot build the script call", plan->rule[0]->id);
        *what = "rule has an unusable limit";
        return DECIDE_UNAVAILABLE;
    }
    if (redis_store_check(&svc->redis, &call, plan->n, d) != STORE_OK) {
        COUNT(svc, redis_errors);
        /* Open only when every rule involved says so: one closed rule
         * is enough to keep the door shut. */
        for (fail_open = 1, i = 0; i < plan->n; i++)
            fail_open = fail_open && plan->rule[i]->fail_open;
        if (fail_open) {
            COUNT(svc, fail_open);
            log_warn("redis unavailable: rule %lld fails open",
                plan->rule[0]->id);
            return DECIDE_FAIL_OPEN;
        }
        *what = "limit store unavailable";
        return DECIDE_UNAVAILABLE;
    }
    if (limiter_apply_shadow(plan, d)) {
        COUNT(svc, shadow_denied);
        for (i = 0; i < plan->n; i++)
            if (d->st[i].shadow && !d->st[i].allowed)
                log_info("shadow: tenant %s rule %lld limit \"%s\" would "
                    "have denied", tenant_id, plan->rule[i]->id,
                    plan->name[i]);
    }
    if (d->allowed)
        COUNT(svc, allowed);
    else
        COUNT(svc, denied);
    return DECIDE_OK;
}

static void
api_fail_open(struct rl_response *resp)
{
    buf_puts(&resp->body, "{\"allowed\":true,\"fail_open\":true}\n");
    response_header(resp, "X-RateLimit-Status", "fail-open");
}

/* 503 for a plan that cannot be decided (see api_decide). */
static void
api_misconfigured(struct service *svc, struct rl_response *resp)
{
    COUNT(svc, unavailable);
    response_error(resp, 503, "misconfigured", "more limits apply to this "
        "route than one check can decide; the operator must fix the rules");
    response_header(resp, "Retry-After", "%ld",
        svc->cfg->retry_after_unavailable);
}

static void
api_check(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    struct check_request creq;
    struct rl_decision d;
    struct rl_plan plan;
    struct key_info ki;
    const char *key = NULL, *what = NULL;
    char err[128];
    int keylen;

    if (req->body_too_large) {
        snprintf(err, sizeof(err), "request body is larger than %ld bytes",
            svc->cfg->max_body_size);
        response_error(resp, 413, "invalid_request", err);
        return;
    }
    keylen = request_api_key(req->x_api_key, req->authorization, &key);
    if (keylen == -1) {
        response_error(resp, 401, "unauthorized", "API key is too long");
        return;
    }
    if (req->nul_in_key) {
        /* libfcgi cut the key at the NUL: what is left is not the key. */
        response_error(resp, 401, "unauthorized", "invalid API key");
        return;
    }
    if (api_auth_answer(svc, resp,
        auth_check_key(svc, key, (size_t)keylen, &ki)) == -1)
        return;
    if (ki.admin) {
        response_error(resp, 403, "admin_key_cannot_check",
            "admin keys cannot be used for checks");
        return;
    }
    if (request_parse_check(req->body, req->body_len, &creq, err,
        sizeof(err)) == -1) {
        response_error(resp, 400, "invalid_request", err);
        return;
    }
    switch (api_decide(svc, ki.tenant_id, &creq, &plan, &d, &what)) {
    case DECIDE_NO_RULE:
        /* Limiting is opt-in: no rule, no Redis call. */
        buf_puts(&resp->body, "{\"allowed\":true}\n");
        return;
    case DECIDE_FAIL_OPEN:
        api_fail_open(resp);
        return;
    case DECIDE_UNAVAILABLE:
        api_unavailable(svc, resp, what);
        return;
    case DECIDE_MISCONFIGURED:
        api_misconfigured(svc, resp);
        return;
    }
    response_decision(resp, &plan, &d);
}

/*
 * The authorizer decision on the original request.  Under the AUTHORIZER
 * role a denial is answered with its real status (lighttpd and
 * mod_authnz_fcgi pass it to the client; mod_fcgid turns it into 401).
 * The route is the path the web server will serve, normalized, so that
 * "/%70rotected" or "//protected" cannot slip past a "/protected*" rule.
 */
static void
api_authorize(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    struct check_request creq;
    struct rl_decision d;
    struct rl_plan plan;
    struct key_info ki;
    const char *key = NULL, *what = NULL, *subject;
    char client[64], path[RL_ROUTE_MAX + 1];
    int keylen, rc, plen;
    size_t n;

    memset(&creq, 0, sizeof(creq));
    creq.cost = 1;
    keylen = request_api_key(req->x_api_key, req->authorization, &key);
    if (req->nul_in_key)
        rc = AUTH_UNKNOWN;
    else if (keylen > 0)
        rc = auth_check_key(svc, key, (size_t)keylen, &ki);
    else if (keylen == 0 && svc->cfg->anonymous_tenant[0] != '\0')
        rc = auth_tenant_by_name(svc, svc->cfg->anonymous_tenant, &ki);
    else
        rc = keylen == 0 ? AUTH_NO_KEY : AUTH_UNKNOWN;
    if (rc == AUTH_UNKNOWN && keylen == 0) {
        log_error("anonymous_tenant \"%s\" does not exist",
            svc->cfg->anonymous_tenant);
        rc = AUTH_UNAVAILABLE;
    }
    if (api_auth_answer(svc, resp, rc) == -1)
        return;
    if (ki.admin) {
        response_error(resp, 403, "admin_key_cannot_check",
            "admin keys cannot be used for checks");
        return;
    }

    /* Route: the path (or "METHOD path") of the original request. */
    n = 0;
    if (strcmp(svc->cfg->authorizer_route, "method_path") == 0)
        n = (size_t)snprintf(creq.route, sizeof(creq.route), "%.32s ",
            req->method);
    plen = request_normalize_path(req->path, req->path_len, path,
        sizeof(path));
    if (plen == -1 || n + (size_t)plen > RL_ROUTE_MAX) {
        response_error(resp, 400, "invalid_request", "request path is not "
            "absolute, badly escaped or longer than 512 bytes");
        return;
    }
    memcpy(creq.route + n, path, (size_t)plen + 1);

    /* Subject: the key when there is one, else the client's address. */
    if (keylen > 0)
        snprintf(creq.subject, sizeof(creq.subject), "key:%lld", ki.key_id);
    else {
        subject = addr_client(req->remote_addr, req->x_forwarded_for,
            svc->cfg->trusted, svc->cfg->ntrusted, client, sizeof(client));
        snprintf(creq.subject, sizeof(creq.subject), "addr:%s", subject);
    }
    creq.has_subject = 1;

    switch (api_decide(svc, ki.tenant_id, &creq, &plan, &d, &what)) {
    case DECIDE_NO_RULE:
        return;
    case DECIDE_FAIL_OPEN:
        response_header(resp, req->auth_subrequest ? "X-RateLimit-Status" :
            "Variable-RateLimit-Status", "fail-open");
        return;
    case DECIDE_UNAVAILABLE:
        api_unavailable(svc, resp, what);
        return;
    case DECIDE_MISCONFIGURED:
        api_misconfigured(svc, resp);
        return;
    }
    response_decision(resp, &plan, &d);
    if (d.allowed) {
        const struct rl_limit_state *st = &d.st[limiter_primary(&d)];

        /* Variable-* reach the protected application (lighttpd, Apache);
         * nginx reads the X-RateLimit-* of the subrequest instead. */
        response_header(resp, "Variable-RateLimit-Limit", "%lld", st->limit);
        response_header(resp, "Variable-RateLimit-Remaining", "%lld",
            st->remaining);
        response_header(resp, "Variable-RateLimit-Reset", "%lld",
            response_reset_at(d.now_ms / 1000, st));
        buf_reset(&resp->body);
        /* Apache copies an authorizer's headers into the response it
         * serves: the protected content decides its own caching. */
        resp->no_store = 0;
    }
}

/*
 * nginx's auth_request accepts only 2xx, 401 and 403 from a subrequest and
 * turns anything else into 500.  Every other answer becomes 403 with
 * X-RateLimit-Status naming it (limited, unavailable, invalid, suspended,
 * forbidden, error), which the shipped nginx configuration turns back into
 * 429, 503, 400 or 403.
 */
static void
api_authorize_nginx(struct rl_response *resp)
{
    const char *marker;

    switch (resp->status) {
    case 200:
    case 401:
        return;
    case 403:
        marker = resp->error != NULL &&
            strcmp(resp->error, "tenant_suspended") == 0 ? "suspended" :
            "forbidden";
        break;
    case 429:
        marker = "limited";
        break;
    case 503:
        marker = "unavailable";
        break;
    case 400:
        marker = "invalid";
        break;
    default:
        marker = "error";
        break;
    }
    resp->status = 403;
    response_header(resp, "X-RateLimit-Status", "%s", marker);
}

static void
api_ready(struct service *svc, struct rl_response *resp)
{
    struct json_object *o;
    const char *reason = NULL;

    /* The reasons are short texts without host, port or server message:
     * anyone who reaches the listener may ask.  The log has the detail. */
    if (pg_store_ready(&svc->pg) != STORE_OK)
        reason = svc->pg.error[0] ? svc->pg.error : "postgresql unreachable";
    else if (redis_store_ready(&svc->redis) != STORE_OK)
        reason = svc->redis.error[0] ? svc->redis.error : "redis unreachable";
    o = json_object_new_object();
    json_object_object_add(o, "status",
        json_object_new_string(reason ? "unavailable" : "ready"));
    if (reason != NULL) {
        json_object_object_add(o, "reason", json_object_new_string(reason));
        resp->status = 503;
        response_header(resp, "Retry-After", "%ld",
            svc->cfg->retry_after_unavailable);
    }
    response_json(resp, o);
}

static void
api_metric(struct rl_buf *b, const char *name, const char *help,
    const char *type, const char *labels, unsigned long v)
{
    if (help != NULL)
        buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    buf_printf(b, "%s%s %lu\n", name, labels, v);
}

static void
api_metrics(struct service *svc, struct rl_response *resp)
{
    const struct rl_counters *c = svc->counters;
    struct rl_buf *b = &resp->body;
    unsigned long live, busy;

    scoreboard_count(svc->board, &live, &busy);
    resp->content_type = "text/plain; version=0.0.4";
    api_metric(b, "ratelimit_requests_total", "FastCGI requests accepted.",
        "counter", "", c->requests);
    api_metric(b, "ratelimit_checks_total", "Decisions, by result.",
        "counter", "{result=\"allowed\"}", c->allowed);
    api_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"denied\"}", c->denied);
    api_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"no_rule\"}", c->no_rule);
    api_metric(b, "ratelimit_checks_total", NULL, NULL,
        "{result=\"fail_open\"}", c->fail_open);
    api_metric(b, "ratelimit_unavailable_total",
        "Answers 503 because a store was unreachable.", "counter", "",
        c->unavailable);
    api_metric(b, "ratelimit_shadow_denied_total",
        "Requests a shadow rule would have denied.", "counter", "",
        c->shadow_denied);
    api_metric(b, "ratelimit_redis_errors_total",
        "Checks that could not reach Redis.", "counter", "", c->redis_errors);
    api_metric(b, "ratelimit_misconfigured_total", "Checks refused because "
        "more limits apply than one check can decide.", "counter", "",
        c->misconfigured);
    api_metric(b, "ratelimit_fcgi_refused_total", "FastCGI connections "
        "dropped for malformed or refused records.", "counter", "",
        c->fcgi_refused);
    api_metric(b, "ratelimit_worker_crashes_total", "Workers that died "
        "abnormally (signal or non-zero status).", "counter", "",
        c->worker_crashes);
    api_metric(b, "ratelimit_worker_rss_exits_total", "Workers replaced "
        "because their memory passed max_worker_rss_mb.", "counter", "",
        c->worker_rss_exits);
    api_metric(b, "ratelimit_key_lookups_total", "API key lookups in "
        "PostgreSQL.", "counter", "", c->key_lookups);
    api_metric(b, "ratelimit_key_lookups_limited_total", "Unknown API keys "
        "answered 401 without a lookup (key_lookup_rate).", "counter", "",
        c->key_lookups_limited);
    api_metric(b, "ratelimit_workers", "Worker processes alive.", "gauge",
        "", live);
    api_metric(b, "ratelimit_workers_busy", "Workers on a request.", "gauge",
        "", busy);
}

/* Authenticates a configuration read: any active key of the tenant. */
static int
api_config_auth(struct service *svc, const struct http_request *req,
    struct rl_response *resp, struct key_info *ki)
{
    const char *key = NULL;
    int keylen = request_api_key(req->x_api_key, req->authorization, &key);

    return api_auth_answer(svc, resp, keylen < 0 || req->nul_in_key ?
        AUTH_UNKNOWN : auth_check_key(svc, key, (size_t)keylen, ki));
}

static struct json_object *
api_limit_json(const struct rl_limit *l)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "id", json_object_new_int64(l->id));
    json_object_object_add(o, "name", json_object_new_string(l->name));
    json_object_object_add(o, "algorithm",
        json_object_new_string(rules_algorithm_name(l->algorithm)));
    switch (l->algorithm) {
    case RL_ALGO_TOKEN_BUCKET:
        json_object_object_add(o, "capacity",
            json_object_new_int64(l->bucket_capacity));
        json_object_object_add(o, "refill_rate",
            json_object_new_double(l->refill_rate));
        break;
    case RL_ALGO_SLIDING_WINDOW:
        json_object_object_add(o, "limit",
            json_object_new_int64(l->limit_count));
        json_object_object_add(o, "window_seconds",
            json_object_new_int64(l->window_seconds));
        break;
    case RL_ALGO_GCRA:
        json_object_object_add(o, "limit",
            json_object_new_int64(l->limit_count));
        json_object_object_add(o, "period_us",
            json_object_new_int64(l->period_us));
        json_object_object_add(o, "burst", json_object_new_int64(l->burst));
        break;
    case RL_ALGO_FIXED_WINDOW:
        json_object_object_add(o, "limit",
            json_object_new_int64(l->limit_count));
        json_object_object_add(o, "calendar",
            json_object_new_string(rules_calendar_name(l->calendar)));
        break;
    }
    return o;
}

/*
 * GET /v1/config/tenants and GET /v1/config/tenants/{id}/rules: what the
 * caller's key may see of the configuration, which is its own tenant only.
 * The rules come from the worker's cache, as a check would see them.
 */
static void
api_config(struct service *svc, const struct http_request *req,
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

    if (api_config_auth(svc, req, resp, &ki) == -1)
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
    if ((tr = auth_tenant_rules(svc, ki.tenant_id)) == NULL) {
        api_unavailable(svc, resp, "rule store unavailable");
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
            json_object_array_add(la, api_limit_json(&r->limits[j]));
        json_object_object_add(ro, "limits", la);
        json_object_array_add(arr, ro);
    }
    json_object_object_add(o, "rules", arr);
    response_json(resp, o);
}

/* php-fpm's pool status fields, as text or (?json) JSON. */
static void
api_status(struct service *svc, const struct http_request *req,
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

void
api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    int get = method_is(req, "GET") || method_is(req, "HEAD");

    COUNT(svc, requests);
    if (req->nul_in_param) {
        response_error(resp, 400, "invalid_request",
            "a request parameter holds a NUL byte");
        if (req->auth_subrequest)
            api_authorize_nginx(resp);
    } else if (req->authorizer || req->auth_subrequest) {
        api_authorize(svc, req, resp);
        if (req->auth_subrequest)
            api_authorize_nginx(resp);
    } else if (path_is(req, "/v1/check")) {
        if (!method_is(req, "POST"))
            api_method_not_allowed(resp, "POST");
        else
            api_check(svc, req, resp);
    } else if (path_is(req, "/health/live")) {
        if (!get)
            api_method_not_allowed(resp, "GET, HEAD");
        else
            buf_puts(&resp->body, "{\"status\":\"live\"}\n");
    } else if (path_is(req, "/health/ready")) {
        if (!get)
            api_method_not_allowed(resp, "GET, HEAD");
        else
            api_ready(svc, resp);
    } else if (path_is(req, "/metrics")) {
        if (!get)
            api_method_not_allowed(resp, "GET, HEAD");
        else
            api_metrics(svc, resp);
    } else if (path_is(req, "/status")) {
        if (!get)
            api_method_not_allowed(resp, "GET, HEAD");
        else
            api_status(svc, req, resp);
    } else if (req->path_len >= 18 &&
        memcmp(req->path, "/v1/config/tenants", 18) == 0) {
        if (!get)
            api_method_not_allowed(resp, "GET, HEAD");
        else
            api_config(svc, req, resp);
    } else
        response_error(resp, 404, "not_found", NULL);
}
