/*
 * service.h -- the server: a worker's stores plugged into the decision
 * (service.c), the API router, the views, what is noted after each
 * request, the listening socket, the scoreboard, the worker loop and the
 * master.  It sits above what it assembles: the decision (decide.h), the
 * Redis client (redis.h) and the PostgreSQL store (pg_store.h), which
 * know nothing of it.  The pure parts they all build on are declared in
 * ratelimit.h.
 */
#ifndef SERVICE_H
#define SERVICE_H

#include <signal.h>
#include <sys/types.h>

#include "ratelimit.h"
#include "decide.h"
#include "pg_store.h"
#include "redis.h"

/* ------------------------------------------------------------------ */
/* service.c: a worker's stores plugged into the decision */

struct scoreboard;
struct scoreboard_slot;

struct service {
    const struct rl_config *cfg;
    struct rl_counters *counters;
    struct scoreboard *board;
    struct shm *shm;
    struct redis_store redis;
    struct pg_store pg;
    struct decider decider;
};

int service_init(struct service *svc, const struct rl_config *cfg,
    struct shm *shm);
void service_free(struct service *svc);

/* Housekeeping between requests (PostgreSQL reconnect, notifications);
 * idle says no request is waiting. */
void service_tick(struct service *svc, int idle);

/* ------------------------------------------------------------------ */
/* api.c: the HTTP surface, independent of libfcgi */

void api_handle(struct service *svc, const struct http_request *req,
    struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* lease_api.c: POST /v1/release and POST /v1/extend (doc/api.md) */

void lease_api_release(struct service *svc, const struct http_request *req,
    struct rl_response *resp);
void lease_api_extend(struct service *svc, const struct http_request *req,
    struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* views.c: health, metrics, status, configuration reads */

void views_live(struct rl_response *resp);
void views_ready(struct service *svc, struct rl_response *resp);
/* /metrics and /status for viewer: NULL for the operator (the whole
 * pool), else an admin key's tenant, which sees the pool's totals and its
 * own tenant, and nothing that names or describes another. */
void views_metrics(struct service *svc, const struct key_info *viewer,
    struct rl_response *resp);
void views_status(struct service *svc, const struct http_request *req,
    const struct key_info *viewer, struct rl_response *resp);
void views_config(struct service *svc, const struct http_request *req,
    struct rl_response *resp);
void views_dashboard(struct rl_response *resp);

/* ------------------------------------------------------------------ */
/* observe.c: after each request, the counters, history and logs */

/* Counts what req came to (resp, the decider's trace) in the pool's
 * statistics, writes its access log line, its denial and slow log lines,
 * and notes it in slot (may be NULL).  total_us: from its first byte read
 * to its answer made. */
void observe_request(struct service *svc, const struct http_request *req,
    const struct rl_response *resp, int64_t total_us,
    struct scoreboard_slot *slot);

/* Clears the trace before a request. */
void observe_begin(struct service *svc);

/* ------------------------------------------------------------------ */
/* listen.c */

/* Returns a listening socket for cfg->listen (fd 0 when it is empty), or
 * -1 with a message in err. */
int listen_open(const struct rl_config *cfg, char *err, size_t errlen);
void listen_cleanup(const struct rl_config *cfg);

/* ------------------------------------------------------------------ */
/* worker.c and master.c */

#define RL_MAX_WORKERS 256

enum slot_state {
    SLOT_IDLE = 0,              /* waiting for a connection */
    SLOT_READING,               /* reading a request, within its deadline */
    SLOT_BUSY,                  /* deciding and answering */
    SLOT_KEEPALIVE,             /* idle on a kept connection */
};

struct scoreboard_slot {
    pid_t pid;
    int state;                  /* enum slot_state */
    int64_t state_since_ms;     /* monotonic */
    unsigned long requests;
    int64_t start_s;            /* when the worker started (wall clock) */
    int leaving;                /* enum stats_exit: why it is leaving */
    int room;                   /* it takes connections handed off: not
                                   leaving, an entry free (worker.c) */
    /* The request in hand, or else the last one (/status?full).  Read
     * without a lock: a reader may see a mix of two requests' texts. */
    int64_t request_us;         /* how long the last one took */
    long content_length;
    char method[8];
    char uri[64];
    char tenant[64];
};

struct scoreboard {
    int64_t start_s;
    unsigned long accepted;
    int workers;                /* configured pool size; 0 = no master */
    pid_t master;               /* the master; a worker that takes over
                                   from a dead one swaps in its own pid */
    pid_t master_parent;        /* who started the master (its parent) */
    struct rl_counters counters;
    struct scoreboard_slot slots[RL_MAX_WORKERS];
    struct rl_stats stats;
};

/* Counts the live workers and those on a request (reading or busy). */
void scoreboard_count(const struct scoreboard *b, unsigned long *live,
    unsigned long *active);

/* The master's bookkeeping: a worker in slot s exited with status (a
 * waitpid status), counted by cause; and, at most once a second, the
 * samples of php-fpm's pool fields (active processes, the listen queue of
 * listen_fd) at monotonic time now_ms. */
void scoreboard_exited(struct scoreboard *b, const struct scoreboard_slot *s,
    int status);
void scoreboard_sample(struct scoreboard *b, int listen_fd, int64_t now_ms);

/* The listen queue of listen_fd now and its backlog: 0 and -1 when the
 * socket's kind does not tell. */
int scoreboard_listen_queue(int listen_fd, unsigned long *queue,
    unsigned long *backlog);

/* Maps the pool's shared segment for cfg (scoreboard and tables) into m.
 * Returns 0, or -1 with a message logged. */
int scoreboard_map(struct shm *m, const struct rl_config *cfg);
void scoreboard_unmap(struct shm *m);

/* The signal a worker gets when its master dies (PR_SET_PDEATHSIG). */
#define RL_SIG_MASTER_GONE (SIGRTMIN + 1)

/* worker_run's answer when its master died and this worker was chosen to
 * start a new master in its place (see master.c). */
#define WORKER_TAKEOVER 100

/* Serves requests on listen_fd until told to stop, max_requests is
 * reached or its memory passes max_worker_rss_mb.  slot may be NULL (no
 * master); handoff, the pool's hand-off socket pair (read end, write
 * end), may be NULL too.  Returns the exit status, or WORKER_TAKEOVER. */
int worker_run(const struct rl_config *cfg, int listen_fd,
    struct scoreboard_slot *slot, struct shm *shm, const int *handoff);

/* The command line, for a worker that starts a new master (main.c). */
void master_set_argv(char **argv);

/* Runs the pool (or, with workers = 0, a worker in this process).  *cfg
 * may be replaced on SIGHUP.  Returns the exit status. */
int master_run(struct rl_config *cfg, int listen_fd);

#endif /* SERVICE_H */
