/*
 * api.c -- the router: which method and path get which answer.
 *
 * The request arrives as a plain struct (see worker.c for the libfcgi
 * side), so this file has no idea it is behind FastCGI.  An authorizer
 * request (FCGI_ROLE=AUTHORIZER, or nginx's subrequest for
 * authorizer_path) goes to authorizer.c whatever its path; anything else
 * is looked up in the table below, and a path that is there with another
 * method gets 405 with Allow.  What each answer is lives elsewhere:
 * decide.c (the check API), lease_api.c (releases and extensions of
 * leases), authorizer.c, views.c.
 */
#include <string.h>

#include "service.h"

enum api_method { API_GET = 1, API_POST = 2 };

struct api_route {
    const char *path;
    int prefix;                 /* the path and anything below it */
    int methods;                /* API_GET also allows HEAD */
    void (*handle)(struct service *, const struct http_request *,
        struct rl_response *);
};

static void
api_check(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    svc->decider.trace.check = 1;
    decide_check(&svc->decider, req, resp);
}

static void
api_live(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    (void)svc;
    (void)req;
    views_live(resp);
}

static void
api_ready(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    (void)req;
    views_ready(svc, resp);
}

/*
 * Who reads a pool's inner state (/status, /metrics, /dashboard):
 *
 *   no key shown, the client's address in nets (status_allow,
 *   metrics_allow)
 *       the operator: the whole pool; *viewer is NULL
 *   a key shown (X-API-Key, Authorization: Bearer), whatever the address
 *       an admin key: its own tenant only; *viewer is ki, filled
 *       a check key: 403; a key unknown or revoked: 401
 *   no key, another address, or a client whose address is unknown
 *       403
 *
 * The client's address is the one the limiter counts by (addr_client):
 * behind a proxy in trusted_proxies, what it says in X-Forwarded-For, not
 * its own address.  A request with X-Forwarded-For from a peer that is
 * not trusted has no known client: a proxy on the same host would
 * otherwise open the operator's view to everyone it forwards.
 *
 * A key decides even from an address of the list, so that a tenant's key
 * reads as that tenant wherever it is used.  Returns 0, or -1 with the
 * answer written.
 */
static int
api_viewer(struct service *svc, const struct http_request *req,
    const struct addr_net *nets, int n, const char *list,
    struct key_info *ki, const struct key_info **viewer,
    struct rl_response *resp)
{
    const char *key;
    char client[64], msg[160];
    int known;

    *viewer = NULL;
    if (request_api_key(req->x_api_key, req->authorization, &key) == 0 &&
        !req->nul_in_key) {
        known = addr_client(req->remote_addr, req->x_forwarded_for,
            svc->cfg->trusted, svc->cfg->ntrusted, client,
            sizeof(client)) == 0;
        if (known && n > 0 && addr_match(nets, n, client))
            return 0;
        if (!known)
            response_refuse(resp, RL_REFUSE_CLIENT_UNKNOWN, NULL);
        else {
            snprintf(msg, sizeof(msg), "this address is not in %s; an admin "
                "key reads its own tenant from anywhere", list);
            response_refuse(resp, RL_REFUSE_ADDRESS_NOT_LISTED, msg);
        }
        return -1;
    }
    if (decide_identify(&svc->decider, req, 0, ki, resp) == -1)
        return -1;
    if (!ki->admin) {
        response_refuse(resp, RL_REFUSE_ADMIN_NEEDED, NULL);
        return -1;
    }
    *viewer = ki;
    return 0;
}

static void
api_metrics(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct key_info *viewer;
    struct key_info ki;

    if (api_viewer(svc, req, svc->cfg->metrics_nets, svc->cfg->nmetrics,
        "metrics_allow", &ki, &viewer, resp) == 0)
        views_metrics(svc, viewer, resp);
}

static void
api_status(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct key_info *viewer;
    struct key_info ki;

    if (api_viewer(svc, req, svc->cfg->status_nets, svc->cfg->nstatus,
        "status_allow", &ki, &viewer, resp) == 0)
        views_status(svc, req, viewer, resp);
}

/* The page holds no data: it reads /status?json&history&full, which
 * answers each viewer with its share. */
static void
api_dashboard(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct key_info *viewer;
    struct key_info ki;

    if (api_viewer(svc, req, svc->cfg->status_nets, svc->cfg->nstatus,
        "status_allow", &ki, &viewer, resp) == 0)
        views_dashboard(resp);
}

static const struct api_route api_routes[] = {
    { "/v1/check", 0, API_POST, api_check },
    { "/v1/release", 0, API_POST, lease_api_release },
    { "/v1/extend", 0, API_POST, lease_api_extend },
    { "/health/live", 0, API_GET, api_live },
    { "/health/ready", 0, API_GET, api_ready },
    { "/metrics", 0, API_GET, api_metrics },
    { "/status", 0, API_GET, api_status },
    { "/dashboard", 0, API_GET, api_dashboard },
    { "/v1/config/tenants", 1, API_GET, views_config },
};

static int
api_method(const char *m)
{
    if (strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0)
        return API_GET;
    if (strcmp(m, "POST") == 0)
        return API_POST;
    return 0;
}

static int
api_path_matches(const struct api_route *r, const struct http_request *req)
{
    size_t n = strlen(r->path);

    if (req->path_len < n || memcmp(req->path, r->path, n) != 0)
        return 0;
    return req->path_len == n || r->prefix;
}

void
api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct api_route *r;
    char msg[128];
    size_t i;

    COUNT(svc, requests);
    if (req->nul_in_param) {
        response_refuse(resp, RL_REFUSE_NUL_PARAMETER, NULL);
        if (req->auth_subrequest)
            authorizer_nginx(resp);
        return;
    }
    if (req->authorizer || req->auth_subrequest) {
        svc->decider.trace.check = 1;
        authorizer_decide(&svc->decider, req, resp);
        if (req->auth_subrequest)
            authorizer_nginx(resp);
        return;
    }
    for (i = 0; i < sizeof(api_routes) / sizeof(api_routes[0]); i++) {
        r = &api_routes[i];
        if (!api_path_matches(r, req))
            continue;
        if ((api_method(req->method) & r->methods) == 0) {
            snprintf(msg, sizeof(msg), "%.32s is not allowed on %s; use %s",
                req->method, r->path,
                r->methods == API_POST ? "POST" : "GET or HEAD");
            response_refuse(resp, RL_REFUSE_METHOD, msg);
            response_header(resp, "Allow", "%s",
                r->methods == API_POST ? "POST" : "GET, HEAD");
            return;
        }
        r->handle(svc, req, resp);
        return;
    }
    response_refuse(resp, RL_REFUSE_NOT_FOUND, NULL);
}
