/*
 * bench_probe.c -- the yardsticks of `make bench` (bench/bench.sh).
 *
 * A minimal libfcgi Responder that does as little as a FastCGI application
 * can, so that bench/bench.sh can put ratelimit-fcgi next to the ceiling
 * of its design in the same run (doc/design.md, "Performance yardsticks"):
 *
 *   bench_probe noop [WORKERS]
 *       reads the request body and answers a fixed, tiny JSON 200;
 *   bench_probe evalsha HOST PORT [WORKERS [KEY]]
 *       the same, plus exactly one Redis round trip per request: an EVALSHA
 *       of a one-line script (INCR of one key), SCRIPT LOADed at start.
 *       A Redis error answers 503, so the benchmark counts it.
 *
 * Like ratelimit-fcgi it serves the listening socket it inherits on fd 0
 * (lighttpd's bin-path) with WORKERS (default 4) pre-forked processes, each
 * with its own Redis connection opened after fork().  The parent only
 * waits; SIGTERM or SIGINT to it (lighttpd stopping) ends every worker, and
 * a worker whose parent dies gets SIGTERM from the kernel.
 *
 * It is a measuring stick, not a service: no respawn, no configuration.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcgiapp.h>
#include <hiredis.h>

#define PROBE_MAX_WORKERS 64
#define PROBE_SCRIPT "return redis.call('INCR', KEYS[1])"
#define PROBE_KEY "bench:probe"
#define PROBE_TIMEOUT_MS 500

static const char probe_ok[] =
    "Status: 200 OK\r\n"
    "Content-Type: application/json\r\n"
    "Content-Length: 16\r\n"
    "\r\n"
    "{\"allowed\":true}";

static const char probe_unavailable[] =
    "Status: 503 Service Unavailable\r\n"
    "Content-Type: application/json\r\n"
    "Content-Length: 31\r\n"
    "\r\n"
    "{\"error\":\"service_unavailable\"}";

struct probe {
    int evalsha;                /* 0: noop mode */
    const char *host;
    int port;
    const char *key;            /* the key it increments */
    redisContext *redis;        /* NULL until connected, and after errors */
    char sha[41];
};

static pid_t probe_children[PROBE_MAX_WORKERS];
static int probe_nchildren;

static void
usage(void)
{
    fprintf(stderr, "usage: bench_probe noop [WORKERS]\n"
        "       bench_probe evalsha HOST PORT [WORKERS [KEY]]\n");
    exit(2);
}

/* Parses a decimal in [lo, hi]; exits with the usage on anything else. */
static int
parse_int(const char *s, int lo, int hi)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        usage();
    return (int)v;
}

static void
probe_disconnect(struct probe *p)
{
    if (p->redis != NULL)
        redisFree(p->redis);
    p->redis = NULL;
}

/*
 * Connects to Redis and loads the script.  Returns 0 on success, -1 (with a
 * message on stderr, which lighttpd logs) on failure.
 */
static int
probe_connect(struct probe *p)
{
    struct timeval tv = { 0, PROBE_TIMEOUT_MS * 1000 };
    redisReply *r;

    /* "unix:/path": Redis over a Unix socket (the port is not used). */
    if (strncmp(p->host, "unix:", 5) == 0)
        p->redis = redisConnectUnixWithTimeout(p->host + 5, tv);
    else
        p->redis = redisConnectWithTimeout(p->host, p->port, tv);
    if (p->redis == NULL || p->redis->err != 0) {
        fprintf(stderr, "bench_probe: connect %s:%d: %s\n", p->host, p->port,
            p->redis != NULL ? p->redis->errstr : "out of memory");
        probe_disconnect(p);
        return -1;
    }
    redisSetTimeout(p->redis, tv);
    r = redisCommand(p->redis, "SCRIPT LOAD %s", PROBE_SCRIPT);
    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "bench_probe: SCRIPT LOAD failed: %s\n",
            r == NULL ? p->redis->errstr :
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        if (r != NULL)
            freeReplyObject(r);
        probe_disconnect(p);
        return -1;
    }
    memcpy(p->sha, r->str, 40);
    p->sha[40] = '\0';
    freeReplyObject(r);
    return 0;
}

/* One EVALSHA.  Returns 0 when Redis answered with an integer. */
static int
probe_evalsha(struct probe *p)
{
    redisReply *r;
    int ok;

    if (p->redis == NULL && probe_connect(p) != 0)
        return -1;
    r = redisCommand(p->redis, "EVALSHA %s 1 %s", p->sha, p->key);
    if (r == NULL) {
        fprintf(stderr, "bench_probe: EVALSHA: %s\n", p->redis->errstr);
        probe_disconnect(p);
        return -1;
    }
    ok = r->type == REDIS_REPLY_INTEGER;
    if (!ok)
        fprintf(stderr, "bench_probe: EVALSHA: %s\n",
            r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Reads and drops the request body, as a real application must. */
static void
probe_drain(FCGX_Stream *in)
{
    char buf[4096];

    while (FCGX_GetStr(buf, (int)sizeof(buf), in) > 0)
        ;
}

/* The accept loop of one worker; never returns. */
static void
probe_serve(struct probe *p)
{
    FCGX_Request fr;
    int ok;

    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1)
        _exit(0);
    if (FCGX_Init() != 0) {
        fprintf(stderr, "bench_probe: FCGX_Init failed\n");
        _exit(1);
    }
    if (p->evalsha)
        (void)probe_connect(p);
    FCGX_InitRequest(&fr, 0, 0);
    while (FCGX_Accept_r(&fr) >= 0) {
        probe_drain(fr.in);
        ok = !p->evalsha || probe_evalsha(p) == 0;
        if (ok)
            FCGX_PutStr(probe_ok, (int)sizeof(probe_ok) - 1, fr.out);
        else
            FCGX_PutStr(probe_unavailable, (int)sizeof(probe_unavailable) - 1,
                fr.out);
        FCGX_Finish_r(&fr);
    }
    _exit(0);
}

static void
probe_on_stop(int sig)
{
    int i;

    for (i = 0; i < probe_nchildren; i++)
        kill(probe_children[i], SIGTERM);
    signal(sig, SIG_DFL);
    raise(sig);
}

int
main(int argc, char **argv)
{
    struct probe p;
    struct sigaction sa;
    int workers = 4, i, status;
    pid_t pid;

    memset(&p, 0, sizeof(p));
    if (argc < 2)
        usage();
    if (strcmp(argv[1], "noop") == 0) {
        if (argc > 3)
            usage();
        if (argc == 3)
            workers = parse_int(argv[2], 1, PROBE_MAX_WORKERS);
    } else if (strcmp(argv[1], "evalsha") == 0) {
        if (argc < 4 || argc > 6)
            usage();
        p.evalsha = 1;
        p.host = argv[2];
        p.port = parse_int(argv[3], 1, 65535);
        if (argc >= 5)
            workers = parse_int(argv[4], 1, PROBE_MAX_WORKERS);
        /* A key of our own: in a Redis Cluster, one that node owns. */
        p.key = argc == 6 ? argv[5] : PROBE_KEY;
    } else {
        usage();
    }

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = probe_on_stop;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    for (i = 0; i < workers; i++) {
        pid = fork();
        if (pid < 0) {
            perror("bench_probe: fork");
            probe_on_stop(SIGTERM);
        }
        if (pid == 0)
            probe_serve(&p);
        probe_children[probe_nchildren++] = pid;
    }
    /* Wait for the workers; when one ends on its own, end all. */
    while ((pid = wait(&status)) < 0 && errno == EINTR)
        ;
    if (pid > 0)
        fprintf(stderr, "bench_probe: worker %ld ended; stopping\n",
            (long)pid);
    probe_on_stop(SIGTERM);
    return 1;
}
