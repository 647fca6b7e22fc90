/*
 * lease_api.c -- POST /v1/release and POST /v1/extend: a client gives
 * back the lease a check gave it, or makes it last longer.
 *
 * Both take the check API's authentication (the same keys, the same
 * refusals) and a JSON body naming the lease, {"lease": ID}, with for a
 * release an optional "cost" (the actual cost, 0 to 1000000, settled
 * against what the check charged) and for an extension an optional
 * "ttl_ms" (1000 to 3600000; without it the lease's own ttl).  A lease
 * is its own tenant's only: any other tenant is told it does not exist.
 * The answers are in doc/api.md; the work is lease_call.c's.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "service.h"
#include "lease.h"

/* What the body names: the lease, and the value (-1: none). */
struct lease_body {
    char id[LEASE_ID_LEN + 1];
    size_t len;
    long long value;
};

/* Reads body into b: "lease" (a string), and field (an integer from min
 * to max, or null or absent).  Returns 0, or -1 with err. */
static int
lease_body_parse(const struct http_request *req, const char *field,
    long long min, long long max, struct lease_body *b, char *err,
    size_t errlen)
{
    struct json_tokener *tok;
    struct json_object *root, *v;
    const char *s;
    double x;
    int rc = -1;

    memset(b, 0, sizeof(*b));
    b->value = -1;
    if (req->body_len == 0 || memchr(req->body, '\0', req->body_len)) {
        snprintf(err, errlen, "the body must be a JSON object with "
            "\"lease\"");
        return -1;
    }
    if ((tok = json_tokener_new()) == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    root = json_tokener_parse_ex(tok, req->body, (int)req->body_len);
    if (root != NULL && (json_tokener_get_error(tok) != json_tokener_success ||
        json_tokener_get_parse_end(tok) != req->body_len)) {
        json_object_put(root);
        root = NULL;
    }
    json_tokener_free(tok);
    if (root == NULL || !json_object_is_type(root, json_type_object)) {
        snprintf(err, errlen, "the body must be a JSON object with "
            "\"lease\"");
        goto out;
    }
    if (!json_object_object_get_ex(root, "lease", &v) ||
        !json_object_is_type(v, json_type_string)) {
        snprintf(err, errlen, "\"lease\" must be the lease id a check "
            "answered");
        goto out;
    }
    s = json_object_get_string(v);
    b->len = (size_t)json_object_get_string_len(v);
    if (b->len != LEASE_ID_LEN) {
        snprintf(err, errlen, "\"lease\" is not a lease id");
        goto out;
    }
    memcpy(b->id, s, b->len + 1);
    if (json_object_object_get_ex(root, field, &v) &&
        !json_object_is_type(v, json_type_null)) {
        if (json_object_is_type(v, json_type_int))
            x = (double)json_object_get_int64(v);
        else if (json_object_is_type(v, json_type_double))
            x = json_object_get_double(v);
        else
            x = NAN;
        if (!isfinite(x) || x != floor(x) || x < (double)min ||
            x > (double)max) {
            snprintf(err, errlen, "\"%s\" must be a whole number from %lld "
                "to %lld", field, min, max);
            goto out;
        }
        b->value = (long long)x;
    }
    rc = 0;
out:
    json_object_put(root);
    return rc;
}

/* The answer to a call that did not succeed. */
static void
lease_refuse(struct decider *dc, enum lease_result r,
    struct rl_response *resp)
{
    switch (r) {
    case LEASE_UNKNOWN:
        response_refuse(resp, RL_REFUSE_LEASE_UNKNOWN, NULL);
        break;
    case LEASE_RELEASED:
        response_refuse(resp, RL_REFUSE_LEASE_RELEASED, NULL);
        break;
    case LEASE_EXPIRED:
        response_refuse(resp, RL_REFUSE_LEASE_EXPIRED, NULL);
        break;
    case LEASE_BAD_ID:
        response_refuse(resp, RL_REFUSE_INVALID_REQUEST,
            "\"lease\" is not a lease id");
        break;
    case LEASE_UNAVAILABLE:
        COUNT(dc, redis_errors);
        decide_unavailable(dc, resp, RL_REFUSE_LIMIT_STORE);
        break;
    default:
        COUNT(dc, script_errors);
        decide_unavailable(dc, resp, RL_REFUSE_SCRIPT_ERROR);
        break;
    }
}

/* A release (op 'r') or an extension (op 'e'). */
static void
lease_api(struct service *svc, const struct http_request *req, int op,
    struct rl_response *resp)
{
    struct decider *dc = &svc->decider;
    struct lease_outcome out;
    struct lease_body b;
    struct key_info ki;
    struct json_object *o;
    enum lease_result r;
    char err[128];

    if (req->body_too_large) {
        snprintf(err, sizeof(err), "request body is larger than %ld bytes",
            svc->cfg->max_body_size);
        response_refuse(resp, RL_REFUSE_BODY_TOO_LARGE, err);
        return;
    }
    if (decide_identify(dc, req, DECIDE_CHECKING, &ki, resp) == -1)
        return;
    if (lease_body_parse(req, op == 'e' ? "ttl_ms" : "cost",
        op == 'e' ? LEASE_TTL_MIN_MS : 0,
        op == 'e' ? LEASE_TTL_MAX_MS : RL_COST_MAX, &b, err,
        sizeof(err)) == -1) {
        response_refuse(resp, RL_REFUSE_INVALID_REQUEST, err);
        return;
    }
    r = op == 'e' ?
        lease_extend(&svc->redis, b.id, b.len, b.value, ki.tenant_id, &out) :
        lease_release(&svc->redis, b.id, b.len, b.value, ki.tenant_id,
        &out);
    if (r != LEASE_DONE) {
        if (r == LEASE_UNKNOWN || r == LEASE_RELEASED || r == LEASE_EXPIRED)
            COUNT(dc, leases_refused);
        lease_refuse(dc, r, resp);
        return;
    }
    if (op == 'e')
        COUNT(dc, leases_extended);
    else {
        COUNT(dc, leases_released);
        if (out.settled < 0) {
            COUNT(dc, lease_refunds);
            __atomic_add_fetch(&dc->counters->lease_refunded_cost,
                (unsigned long)-out.settled, __ATOMIC_RELAXED);
        } else if (out.settled > 0) {
            COUNT(dc, lease_charges);
            __atomic_add_fetch(&dc->counters->lease_charged_cost,
                (unsigned long)out.settled, __ATOMIC_RELAXED);
        }
    }
    o = json_object_new_object();
    json_object_object_add(o, "lease", json_object_new_string(b.id));
    if (op == 'e') {
        json_object_object_add(o, "extended", json_object_new_boolean(1));
        json_object_object_add(o, "lease_ttl_ms",
            json_object_new_int64(out.ttl_ms));
    } else {
        json_object_object_add(o, "released", json_object_new_boolean(1));
        json_object_object_add(o, "slots_freed",
            json_object_new_int64(out.freed));
        json_object_object_add(o, "settled",
            json_object_new_int64(out.settled));
    }
    response_json(resp, o);
}

void
lease_api_release(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    lease_api(svc, req, 'r', resp);
}

void
lease_api_extend(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    lease_api(svc, req, 'e', resp);
}
