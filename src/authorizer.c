/*
 * authorizer.c -- the authorizer role: the web server asks before serving
 * a request.
 *
 * lighttpd ("mode" => "authorizer"), Apache mod_authnz_fcgi and mod_fcgid
 * send FCGI_ROLE=AUTHORIZER; nginx's auth_request sends an ordinary
 * Responder request for authorizer_path.  Either way the decision is made
 * on the original request: the key it carries (or, without one, the
 * anonymous tenant counted per client address), its path normalized as
 * the web server will serve it, and a cost of one.  Allowed: 200 with
 * Variable-RateLimit-* for the protected application; otherwise the
 * answer decide.c gives, which nginx needs mapped to 401/403 (below).
 * A denial's body is the check API's (error "rate_limited", message,
 * retry_after, retry_after_ms): lighttpd and mod_authnz_fcgi pass it on,
 * nginx's configuration rebuilds it from X-RateLimit-Retry-After-Ms and
 * Retry-After, and mod_fcgid answers 401 with a page of Apache's.
 */
#include <string.h>

#include "decide.h"

void
authorizer_decide(struct decider *dc, const struct http_request *req,
    struct rl_response *resp)
{
    const struct rl_limit_state *st;
    struct check_request creq;
    struct rl_decision d;
    struct rl_plan plan;
    struct key_info ki;
    char client[64], path[RL_ROUTE_MAX + 1];
    int rc, plen;
    size_t n;

    memset(&creq, 0, sizeof(creq));
    creq.cost = 1;
    if (decide_identify(dc, req, DECIDE_CHECKING | DECIDE_ANONYMOUS, &ki,
        resp) == -1)
        return;

    /* Route: the path (or "METHOD path") of the original request, as the
     * web server will serve it, so that "/%70rotected" or "//protected"
     * cannot slip past a "/protected*" rule. */
    n = 0;
    if (strcmp(dc->cfg->authorizer_route, "method_path") == 0)
        n = (size_t)snprintf(creq.route, sizeof(creq.route), "%.32s ",
            req->method);
    plen = request_normalize_path(req->path, req->path_len, path,
        sizeof(path));
    if (plen == -1 || n + (size_t)plen > RL_ROUTE_MAX) {
        response_refuse(resp, RL_REFUSE_BAD_PATH, NULL);
        return;
    }
    memcpy(creq.route + n, path, (size_t)plen + 1);

    /* No subject: who asks is the key when there is one, else the
     * client's address. */
    if (!ki.anonymous)
        snprintf(creq.identity, sizeof(creq.identity), "key:%lld",
            ki.key_id);
    else {
        /* An unknown client is counted as the peer that sent it. */
        (void)addr_client(req->remote_addr, req->x_forwarded_for,
            dc->cfg->trusted, dc->cfg->ntrusted, client, sizeof(client));
        snprintf(creq.identity, sizeof(creq.identity), "addr:%s", client);
    }

    rc = decide_limits(dc, ki.tenant_id, &creq, &plan, &d);
    if (decide_answer_failure(dc, rc, resp))
        return;
    switch (rc) {
    case DECIDE_NO_RULE:
        return;
    case DECIDE_FAIL_OPEN:
        response_header(resp, req->auth_subrequest ? "X-RateLimit-Status" :
            "Variable-RateLimit-Status", "fail-open");
        return;
    }
    response_decision(resp, &plan, &d);
    st = &d.st[limiter_primary(&d)];
    if (!d.allowed) {
        /* nginx drops a subrequest's body: its configuration builds the
         * client's JSON from headers, and Retry-After has only seconds. */
        if (req->auth_subrequest && st->retry_after_ms != -1)
            response_header(resp, "X-RateLimit-Retry-After-Ms", "%lld",
                st->retry_after_ms < 1 ? 1 : st->retry_after_ms);
        return;
    }
    /* Variable-* reach the protected application (lighttpd, Apache);
     * nginx reads the X-RateLimit-* of the subrequest instead. */
    response_header(resp, "Variable-RateLimit-Limit", "%lld", st->limit);
    response_header(resp, "Variable-RateLimit-Remaining", "%lld",
        st->remaining);
    response_header(resp, "Variable-RateLimit-Reset", "%lld",
        response_reset_at(d.now_ms / 1000, st));
    /* A rule with a concurrency limit took a lease: the web server's
     * end-of-request hook releases it (nginx reads X-RateLimit-Lease). */
    if (d.lease[0] != '\0')
        response_header(resp, "Variable-RateLimit-Lease", "%s", d.lease);
    buf_reset(&resp->body);
    /* Apache copies an authorizer's headers into the response it serves:
     * the protected content decides its own caching. */
    resp->no_store = 0;
}

/*
 * nginx's auth_request accepts only 2xx, 401 and 403 from a subrequest and
 * turns anything else into 500.  Every other answer becomes 403 with
 * X-RateLimit-Status naming it (limited, unavailable, invalid, suspended,
 * forbidden, error), which the shipped nginx configuration turns back into
 * 429, 503, 400 or 403.
 */
void
authorizer_nginx(struct rl_response *resp)
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
