/*
 * api.c -- the HTTP surface: which path does what, and every answer.
 *
 *   POST /v1/check      the check (README "The check API")
 *   GET  /health/live   the process answers
 *   GET  /health/ready  PostgreSQL, Redis and the script are usable
 *
 * The request arrives as a plain struct (see worker.c for the libfcgi
 * side), so this file has no idea it is behind FastCGI.  The order of a
 * check is: size, key, JSON, rules, one Redis call.  Every failure maps to
 * one row of the status table in the README.
 */
#include <string.h>

#include <json-c/json.h>

#include "service.h"

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

static void
api_check(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct tenant_rules *tr;
    const struct rl_rule *rule;
    struct check_request creq;
    struct limiter_call call;
    struct rl_decision d;
    struct key_info ki;
    const char *key = NULL;
    char err[128];
    int keylen, idx, rc;

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
    switch (auth_check_key(svc, key, (size_t)keylen, &ki)) {
    case AUTH_OK:
        break;
    case AUTH_NO_KEY:
        response_error(resp, 401, "unauthorized", "missing API key");
        return;
    case AUTH_UNKNOWN:
    case AUTH_REVOKED:
        response_error(resp, 401, "unauthorized", "invalid API key");
        return;
    case AUTH_SUSPENDED:
        response_error(resp, 403, "tenant_suspended", "tenant is suspended");
        return;
    default:
        api_unavailable(svc, resp, "key store unavailable");
        return;
    }
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
    if ((tr = auth_tenant_rules(svc, ki.tenant_id)) == NULL) {
        api_unavailable(svc, resp, "rule store unavailable");
        return;
    }
    if ((idx = rules_match(tr->rules, tr->n, creq.route)) == -1) {
        /* Limiting is opt-in: no rule, no Redis call. */
        buf_puts(&resp->body, "{\"allowed\":true}\n");
        return;
    }
    rule = &tr->rules[idx];
    if (limiter_build(svc->redis.sha, ki.tenant_id, rule, &creq, &call) ==
        -1) {
        log_error("rule %lld: cannot build the script call (no usable limit)",
            rule->id);
        api_unavailable(svc, resp, "rule has no usable limit");
        return;
    }
    rc = redis_store_check(&svc->redis, &call, rule->nlimits, &d);
    if (rc != STORE_OK) {
        api_unavailable(svc, resp, "limit store unavailable");
        return;
    }
    response_decision(resp, rule, &d);
}

static void
api_ready(struct service *svc, struct rl_response *resp)
{
    struct json_object *o;
    const char *reason = NULL;

    if (pg_store_ready(&svc->pg) != STORE_OK)
        reason = svc->pg.error;
    else if (redis_store_ready(&svc->redis) != STORE_OK)
        reason = svc->redis.error;
    o = json_object_new_object();
    json_object_object_add(o, "status",
        json_object_new_string(reason ? "unavailable" : "ready"));
    if (reason != NULL) {
        json_object_object_add(o, "reason", json_object_new_string(reason));
        resp->status = 503;
        response_header(resp, "Retry-After", "%ld",
            svc->cfg->retry_after_unavailable);
    }
    buf_puts(&resp->body, json_object_to_json_string_ext(o,
        JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    buf_puts(&resp->body, "\n");
    json_object_put(o);
}

void
api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    int get = method_is(req, "GET") || method_is(req, "HEAD");

    if (path_is(req, "/v1/check")) {
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
    } else
        response_error(resp, 404, "not_found", NULL);
}
