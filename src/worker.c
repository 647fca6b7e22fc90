/*
 * worker.c -- one worker: the libfcgi accept loop.
 *
 * The worker opens its own Redis and PostgreSQL connections (lazily, after
 * fork; nothing is inherited from the master), then accepts one FastCGI
 * request at a time, turns it into a struct http_request, lets api.c
 * answer it and writes the answer with FCGX_PutStr.
 *
 * Signals: SIGTERM, SIGINT and SIGQUIT ask for a graceful stop.  Their
 * handler is installed without SA_RESTART so that it interrupts accept(),
 * and the signals are blocked while a request is in hand, because libfcgi
 * does not retry a read or write interrupted by a signal: the request in
 * hand completes, then the worker leaves.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fcgiapp.h>

#include "service.h"

/* Bytes of an oversized body we read and drop before giving up on it. */
#define WORKER_DRAIN_MAX (16L * 1024 * 1024)

static volatile sig_atomic_t worker_stop;

static void
worker_on_stop(int sig)
{
    (void)sig;
    worker_stop = 1;
    FCGX_ShutdownPending();
}

static void
worker_signals(sigset_t *stopset)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = worker_on_stop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;            /* no SA_RESTART: interrupt accept() */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    sa.sa_handler = SIG_IGN;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPIPE, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGUSR2, &sa, NULL);
    sigemptyset(stopset);
    sigaddset(stopset, SIGTERM);
    sigaddset(stopset, SIGINT);
    sigaddset(stopset, SIGQUIT);
}

/*
 * Reads the request body into buf (of max + 1 bytes).  Returns the length;
 * sets *too_large when the body is longer than max, after reading and
 * dropping a bounded amount of it so the web server is not cut off.
 */
static size_t
worker_read_body(FCGX_Stream *in, const char *content_length, char *buf,
    long max, int *too_large)
{
    char sink[4096];
    long declared = -1, total = 0;
    int n;

    *too_large = 0;
    if (content_length != NULL && *content_length != '\0')
        declared = strtol(content_length, NULL, 10);
    if (declared > max) {
        *too_large = 1;
    } else {
        n = FCGX_GetStr(buf, (int)max + 1, in);
        if (n < 0)
            n = 0;
        if (n > max)
            *too_large = 1;
        else {
            buf[n] = '\0';
            return (size_t)n;
        }
        total = n;
    }
    while (total < WORKER_DRAIN_MAX &&
        (n = FCGX_GetStr(sink, sizeof(sink), in)) > 0)
        total += n;
    buf[0] = '\0';
    return 0;
}

static void
worker_write(FCGX_Request *fr, const struct rl_response *resp, int head)
{
    char line[128];
    int n;

    n = snprintf(line, sizeof(line), "Status: %d %s\r\nContent-Type: %s\r\n"
        "%s", resp->status, response_reason(resp->status), resp->content_type,
        resp->no_store ? "Cache-Control: no-store\r\n" : "");
    FCGX_PutStr(line, n, fr->out);
    if (resp->headers.len > 0)
        FCGX_PutStr(resp->headers.data, (int)resp->headers.len, fr->out);
    FCGX_PutStr("\r\n", 2, fr->out);
    if (!head && resp->body.len > 0)
        FCGX_PutStr(resp->body.data, (int)resp->body.len, fr->out);
}

/* Fills req from the FastCGI parameters. */
static void
worker_request(const struct rl_config *cfg, FCGX_Request *fr,
    struct http_request *req)
{
    const char *uri, *q, *role, *doc;

    memset(req, 0, sizeof(*req));
    role = FCGX_GetParam("FCGI_ROLE", fr->envp);
    req->authorizer = role != NULL && strcmp(role, "AUTHORIZER") == 0;
    req->method = FCGX_GetParam("REQUEST_METHOD", fr->envp);
    if (req->method == NULL)
        req->method = "GET";
    uri = FCGX_GetParam("REQUEST_URI", fr->envp);
    if (uri == NULL || *uri == '\0')
        uri = FCGX_GetParam("SCRIPT_NAME", fr->envp);
    if (uri == NULL)
        uri = "/";
    q = strchr(uri, '?');
    req->path = uri;
    req->path_len = q ? (size_t)(q - uri) : strlen(uri);
    req->query = q ? q + 1 : "";
    req->x_api_key = FCGX_GetParam("HTTP_X_API_KEY", fr->envp);
    req->authorization = FCGX_GetParam("HTTP_AUTHORIZATION", fr->envp);
    req->remote_addr = FCGX_GetParam("REMOTE_ADDR", fr->envp);
    req->x_forwarded_for = FCGX_GetParam("HTTP_X_FORWARDED_FOR", fr->envp);
    /* An nginx auth_request subrequest: REQUEST_URI is the original
     * request's, while the subrequest's own location is DOCUMENT_URI. */
    if (!req->authorizer && cfg->authorizer_path[0] != '\0') {
        doc = FCGX_GetParam("DOCUMENT_URI", fr->envp);
        if (doc == NULL)
            doc = FCGX_GetParam("SCRIPT_NAME", fr->envp);
        req->auth_subrequest = doc != NULL &&
            strcmp(doc, cfg->authorizer_path) == 0;
    }
}

/*
 * FCGI_WEB_SERVER_ADDRS names the web servers allowed to connect.  libfcgi
 * checks it itself, but only for IPv4 peers; this covers IPv6 peers (an
 * IPv4-mapped peer is matched as IPv4).  Returns 1 when the peer of fd may
 * talk to us.
 */
static int
worker_peer_allowed(const struct addr_net *nets, int n, int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN];

    if (n <= 0 || getpeername(fd, (struct sockaddr *)&ss, &len) == -1 ||
        ss.ss_family != AF_INET6)
        return 1;
    if (inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip,
        sizeof(ip)) == NULL)
        return 0;
    if (addr_match(nets, n, ip))
        return 1;
    log_warn("connection from %s refused: not in FCGI_WEB_SERVER_ADDRS", ip);
    return 0;
}

int
worker_run(const struct rl_config *cfg, int listen_fd,
    struct scoreboard_slot *slot, struct scoreboard *board)
{
    struct service svc;
    struct http_request req;
    struct rl_response resp;
    FCGX_Request fr;
    sigset_t stopset;
    unsigned long served = 0;
    struct addr_net web_servers[32];
    const char *allowed = getenv("FCGI_WEB_SERVER_ADDRS");
    char err[160];
    char *body;
    int too_large, nweb = 0;

    if (FCGX_Init() != 0) {
        log_error("FCGX_Init failed");
        return 1;
    }
    worker_signals(&stopset);
    if (allowed != NULL && *allowed != '\0' &&
        (nweb = addr_parse_list(allowed, web_servers, 32, err,
        sizeof(err))) == -1) {
        log_error("FCGI_WEB_SERVER_ADDRS: %s", err);
        return 1;
    }
    if (board == NULL) {
        /* No master (workers = 0): this process is the whole pool. */
        static struct scoreboard solo;

        board = &solo;
    }
    if (service_init(&svc, cfg) == -1 ||
        (body = malloc((size_t)cfg->max_body_size + 1)) == NULL) {
        log_error("worker: out of memory");
        return 1;
    }
    svc.board = board;
    svc.counters = &board->counters;
    response_init(&resp);
    FCGX_InitRequest(&fr, listen_fd, 0);
    log_debug("worker %ld ready", (long)getpid());
    while (!worker_stop) {
        if (FCGX_Accept_r(&fr) < 0)
            break;
        sigprocmask(SIG_BLOCK, &stopset, NULL);
        if (slot != NULL) {
            slot->request_start_ms = util_now_ms();
            slot->busy = 1;
        }
        __atomic_add_fetch(&board->accepted, 1, __ATOMIC_RELAXED);
        if (!worker_peer_allowed(web_servers, nweb, fr.ipcFd)) {
            response_reset(&resp);
            response_error(&resp, 403, "forbidden", NULL);
            worker_write(&fr, &resp, 0);
            FCGX_Finish_r(&fr);
            if (slot != NULL)
                slot->busy = 0;
            sigprocmask(SIG_UNBLOCK, &stopset, NULL);
            continue;
        }
        worker_request(cfg, &fr, &req);
        /* An authorizer gets no request body. */
        req.body_len = req.authorizer ? 0 : worker_read_body(fr.in,
            FCGX_GetParam("CONTENT_LENGTH", fr.envp), body,
            cfg->max_body_size, &too_large);
        if (req.authorizer)
            too_large = 0;
        req.body = body;
        req.body_too_large = too_large;
        response_reset(&resp);
        api_handle(&svc, &req, &resp);
        worker_write(&fr, &resp, strcmp(req.method, "HEAD") == 0);
        FCGX_Finish_r(&fr);
        served++;
        if (slot != NULL) {
            slot->busy = 0;
            slot->requests = served;
        }
        sigprocmask(SIG_UNBLOCK, &stopset, NULL);
        if (cfg->max_requests > 0 && served >= (unsigned long)cfg->max_requests) {
            log_info("worker %ld: served max_requests (%ld); exiting to be "
                "replaced", (long)getpid(), cfg->max_requests);
            break;
        }
    }
    FCGX_Free(&fr, 0);
    response_free(&resp);
    service_free(&svc);
    free(body);
    return 0;
}
