/*
 * redis_call.c -- the Redis client's calls: the check, any embedded script
 * and ratelimitctl's commands, each sent where the topology says
 * (redis_topology.c) on a node's connection (redis_node.c).
 *
 * A script is run with EVALSHA.  Redis forgets scripts on restart,
 * failover and SCRIPT FLUSH; a NOSCRIPT reply is answered by one EVAL of
 * the full text (which also puts it back in the script cache).
 *
 * A check's script call charges; when its connection dies before the reply
 * came (the server closed it: a restart, a failover, CLIENT KILL, the idle
 * timeout), it may or may not have run.  Every call carries the process's
 * reply slot (limiter_request_key: a key named by 64 random bits drawn
 * when the process starts) and an id (a counter, no system call); in the
 * slot lua/check.lua keeps the id and reply of the process's last call
 * that charged, for three seconds.  So the call is sent once more on a
 * new connection, marked as sent again (limiter_resend), and the script
 * replays the stored reply if the slot holds the call's id: a check is
 * never charged twice.  One slot per process and tenant is enough, since
 * a worker sends nothing else between a call and its resend.  A timeout
 * is not retried: the budget of a check is one command timeout, and a
 * Redis too slow to answer is not helped by more load.
 *
 * What a check does with a reply is decided by its kind (redis_reply.c):
 * the answer is decoded; MOVED and ASK are followed (a few times); the
 * target of an ASK gets the call without its reply slot and its counter
 * budget's keys (limiter_unkey): an importing node answers TRYAGAIN to a
 * call whose keys it does not all have, and those may well not be among
 * them.  TRYAGAIN (a slot half moved) is retried a few milliseconds later
 * within the command timeout; READONLY, LOADING, MASTERDOWN and
 * CLUSTERDOWN give the node up and have the topology read again.
 */
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "redis_client.h"

/* A call whose connection died is sent again only this soon after it was
 * first sent (the resend itself, after the reconnect, is what must be
 * this soon): lua/check.lua keeps a reply for 3 s (REPLAY_TTL_MS). */
#define REDIS_RESEND_MS 1000

/* Redirections (MOVED, ASK) one call follows. */
#define REDIS_MAX_REDIRECTS 5

/* A TRYAGAIN is retried after this long, while the command timeout
 * lasts. */
#define REDIS_TRYAGAIN_MS 5

/* A step of the check's loop says: go round once more. */
#define REDIS_AGAIN 1

/* A check on its way: where it goes and what it went through. */
struct redis_attempt {
    struct limiter_call *call;
    unsigned slot;
    struct redis_node *n;       /* NULL: to be routed (again) */
    int64_t first_ms;           /* its first connection made; 0: not yet */
    int64_t deadline_ms;        /* no TRYAGAIN wait past this */
    int tries;                  /* connections closed under it */
    int redirects;              /* MOVED and ASK followed */
    int asking;                 /* send ASKING before it */
    int keyed;                  /* it carries the reply slot */
    int resent;                 /* marked as sent again */
    int rerouted;               /* the topology was read again for it */
};

void
redis_script_init(struct redis_script *s, const char *text)
{
    unsigned char md[SHA_DIGEST_LENGTH];

    s->text = text;
    SHA1((const unsigned char *)text, strlen(text), md);
    util_hex(md, sizeof(md), s->sha);
}

void
redis_store_init(struct redis_store *rs, const struct rl_config *cfg,
    struct rl_counters *counters)
{
    unsigned char seed[8];
    size_t i;

    memset(rs, 0, sizeof(*rs));
    rs->cfg = cfg;
    rs->counters = counters;
    redis_topology_init(rs);
    redis_script_init(&rs->check, embedded_check_lua);
    /* The reply slot: 64 random bits per process (the calls' ids are a
     * counter).  Should the random source fail, the pid and the clock
     * still tell processes apart on one host. */
    if (util_random(seed, sizeof(seed)) == -1) {
        uint64_t v = ((uint64_t)getpid() << 40) ^ (uint64_t)util_now_ms();

        log_warn("redis: no random bytes for the reply slot; using the pid");
        for (i = 0; i < sizeof(seed); i++)
            seed[i] = (unsigned char)(v >> (8 * i));
    }
    util_hex(seed, sizeof(seed), rs->id_prefix);
}

void
redis_store_close(struct redis_store *rs)
{
    redis_topology_close(rs);
}

/* Sends script once to n with argv ("numkeys key... arg..."): EVALSHA,
 * and on NOSCRIPT one EVAL of its text.  Returns the reply, or NULL with
 * *err set to errno after the failed call. */
static redisReply *
redis_run(struct redis_node *n, const struct redis_script *script, int argc,
    const char **argv, const size_t *argvlen, int asking, int *err)
{
    const char *a[REDIS_SCRIPT_MAX_ARGS + 2];
    size_t alen[REDIS_SCRIPT_MAX_ARGS + 2];
    redisReply *r;

    a[0] = "EVALSHA";
    alen[0] = 7;
    a[1] = script->sha;
    alen[1] = 40;
    memcpy(a + 2, argv, (size_t)argc * sizeof(a[0]));
    memcpy(alen + 2, argvlen, (size_t)argc * sizeof(alen[0]));
    r = redis_node_send(n, argc + 2, a, alen, asking, err);
    if (redis_reply_classify(r, NULL) != REPLY_NOSCRIPT)
        return r;
    freeReplyObject(r);
    log_info("redis (%s): script cache was emptied; loading it again",
        n->addr);
    a[0] = "EVAL";
    alen[0] = 4;
    a[1] = script->text;
    alen[1] = strlen(script->text);
    return redis_node_send(n, argc + 2, a, alen, asking, err);
}

/* The next call id of this process, its counter in hex, into id[size]
 * (no printf: one per check). */
static void
redis_request_id(struct redis_store *rs, char *id, size_t size)
{
    static const char hex[] = "0123456789abcdef";
    char digits[16];
    unsigned long long v = rs->id_next++;
    size_t n = 0, k = 0;

    do {
        digits[k++] = hex[v & 15];
        v >>= 4;
    } while (v != 0);
    if (k >= size)
        k = 0;
    while (k > 0)
        id[n++] = digits[--k];
    id[n] = '\0';
}

/* ------------------------------------------------------------ the check */

/* Routes the check and connects.  Returns STORE_OK (a->n is connected),
 * REDIS_AGAIN or STORE_UNAVAILABLE. */
static int
redis_check_node(struct redis_store *rs, struct redis_attempt *a)
{
    int rc;

    if (a->n == NULL && (a->n = redis_route(rs, a->slot)) == NULL)
        return STORE_UNAVAILABLE;
    rc = redis_node_connect(rs, a->n);
    if (rc == STORE_UNAVAILABLE && rs->type != REDIS_SINGLE &&
        !a->rerouted && redis_reroute(rs)) {
        /* The node is gone: it may have been replaced already (a pool
         * idle through a failover finds out only now). */
        a->rerouted = 1;
        a->n = NULL;
        return REDIS_AGAIN;
    }
    if (rc == REDIS_CLOSED)
        return ++a->tries == REDIS_MAX_TRIES ? STORE_UNAVAILABLE :
            REDIS_AGAIN;
    if (rc != STORE_OK)
        return rc;
    if (a->first_ms == 0)
        a->first_ms = util_now_ms();
    else if (a->resent && util_now_ms() - a->first_ms > REDIS_RESEND_MS) {
        /* The script may have forgotten the first reply by now (a
         * connect slower than a second, say). */
        log_warn("redis: a check could not be sent again within %d ms",
            REDIS_RESEND_MS);
        snprintf(rs->error, sizeof(rs->error), "redis unreachable");
        return STORE_UNAVAILABLE;
    }
    return STORE_OK;
}

/* Sends the check on a->n.  Returns STORE_OK with *r the reply,
 * REDIS_AGAIN when the connection was closed with it in flight and it is
 * to be sent again, or STORE_UNAVAILABLE. */
static int
redis_check_send(struct redis_store *rs, struct redis_attempt *a,
    redisReply **r)
{
    struct redis_node *n = a->n;
    int err = 0;

    *r = redis_run(n, &rs->check, a->call->argc, a->call->argv,
        a->call->argvlen, a->asking, &err);
    if (*r != NULL)
        return STORE_OK;
    if (!redis_closed(n->ctx, err))
        return redis_node_fail(rs, n, "EVALSHA", err, 0, 0);
    /* Closed with the call in flight: it may have run. */
    if (++a->tries == REDIS_MAX_TRIES || !a->keyed)
        return redis_node_fail(rs, n, "EVALSHA", err, 0, 0);
    log_warn("redis (%s): the connection was closed with a check in flight "
        "(%s); sending it again on a new connection", n->addr,
        ((redisContext *)n->ctx)->errstr);
    redis_node_close(n);
    limiter_resend(a->call);
    a->resent = 1;
    /* Where the keys live now: the same node, or the replica that took
     * its place (its copy of the reply slot, if the first send ran and
     * was replicated, keeps the resend exact). */
    if (rs->type != REDIS_SINGLE && !a->rerouted && redis_reroute(rs)) {
        a->rerouted = 1;
        a->n = NULL;
    }
    return REDIS_AGAIN;
}

/*
 * What the check does with reply r from a->n, by its kind.  Returns
 * STORE_OK when r is for the caller to decode (the script's answer, or an
 * error of no kind acted on here), else frees r and returns REDIS_AGAIN
 * (sent elsewhere, or later) or STORE_UNAVAILABLE.
 */
static int
redis_check_reply(struct redis_store *rs, struct redis_attempt *a,
    redisReply *r)
{
    struct redis_redirect to;
    struct redis_node *next;
    enum redis_reply_kind kind = redis_reply_classify(r, &to);

    switch (kind) {
    case REPLY_MOVED:
    case REPLY_ASK:
        next = redis_follow(rs, a->n, r, kind, &to, &a->asking);
        if (next != NULL && a->redirects < REDIS_MAX_REDIRECTS) {
            a->redirects++;
            /* Sent back and forth: the nodes do not agree yet on who has
             * the slot (a resharding half told); give them a moment. */
            if (a->redirects >= 2 &&
                util_now_ms() + REDIS_TRYAGAIN_MS < a->deadline_ms)
                poll(NULL, 0, REDIS_TRYAGAIN_MS);
            /* The target of an ASK is importing the slot: it runs a call
             * only if it has every key, and the reply slot may not be
             * there. */
            if (a->asking && a->keyed && !a->resent &&
                limiter_unkey(a->call) == 0)
                a->keyed = 0;
            freeReplyObject(r);
            a->n = next;
            return REDIS_AGAIN;
        }
        if (next != NULL) {
            log_warn("redis: a check was redirected %d times", a->redirects);
            snprintf(rs->error, sizeof(rs->error), "redis cluster "
                "redirects");
        }
        freeReplyObject(r);
        return STORE_UNAVAILABLE;
    case REPLY_BAD_REDIRECT:
        freeReplyObject(r);
        return STORE_UNAVAILABLE;
    case REPLY_TRYAGAIN:
        if (a->keyed && !a->resent && limiter_unkey(a->call) == 0) {
            /* A slot being migrated: a node runs a call only with all its
             * keys, and the reply slot may not be here; without it the
             * counters may all be (no replay for this call then). */
            a->keyed = 0;
            a->asking = 0;
            freeReplyObject(r);
            return REDIS_AGAIN;
        }
        if (util_now_ms() + REDIS_TRYAGAIN_MS < a->deadline_ms) {
            /* A slot half moved: the migration goes on meanwhile. */
            freeReplyObject(r);
            poll(NULL, 0, REDIS_TRYAGAIN_MS);
            a->asking = 0;
            a->n = NULL;
            return REDIS_AGAIN;
        }
        break;                  /* the slot still moving: give up */
    default:
        if (!redis_reply_not_serving(kind))
            return STORE_OK;
        break;
    }
    log_warn("redis (%s): %s", a->n->addr, r->str);
    snprintf(rs->error, sizeof(rs->error), "%s", redis_reply_reason(kind));
    if (kind != REPLY_TRYAGAIN) {
        redis_node_close(a->n);
        redis_topology_stale(rs);
    }
    freeReplyObject(r);
    return STORE_UNAVAILABLE;
}

/* The script's answer r into d: STORE_OK or STORE_BAD_REPLY. */
static int
redis_check_decode(struct redis_store *rs, const redisReply *r, int nlimits,
    struct rl_decision *d)
{
    if (r->type == REDIS_REPLY_ERROR) {
        snprintf(rs->error, sizeof(rs->error), "redis error reply");
        log_error("redis script: %s", r->str);
        return STORE_BAD_REPLY;
    }
    if (redis_reply_decision(r, nlimits, d) == 0)
        return STORE_OK;
    snprintf(rs->error, sizeof(rs->error), "redis bad reply");
    log_error("redis script: reply of unexpected shape");
    return STORE_BAD_REPLY;
}

int
redis_store_check(struct redis_store *rs, struct limiter_call *call,
    int nlimits, struct rl_decision *d)
{
    char id[LIMITER_ID_MAX + 1];
    struct redis_attempt a;
    redisReply *r = NULL;
    int rc;

    memset(&a, 0, sizeof(a));
    a.call = call;
    redis_request_id(rs, id, sizeof(id));
    a.keyed = limiter_request_key(call, rs->id_prefix, id) == 0;
    if (!a.keyed)
        log_error("redis: cannot add the reply slot to the call; a lost "
            "reply will not be sent again");
    if (rs->type == REDIS_CLUSTER && call->argc > 1)
        a.slot = cluster_keyslot(call->argv[1], call->argvlen[1]);
    a.deadline_ms = util_now_ms() + rs->cfg->redis_command_timeout_ms;
    do {
        if ((rc = redis_check_node(rs, &a)) == STORE_OK &&
            (rc = redis_check_send(rs, &a, &r)) == STORE_OK)
            rc = redis_check_reply(rs, &a, r);
    } while (rc == REDIS_AGAIN);
    if (rc != STORE_OK)
        return rc;
    rs->moved_seen = 0;
    rc = redis_check_decode(rs, r, nlimits, d);
    freeReplyObject(r);
    return rc;
}

/* ------------------------------------------- scripts and commands */

/* Sends argv to the node of slot, MOVED and ASK followed: the command
 * argv, or with script, the script's keys and arguments in argv. */
static redisReply *
redis_call(struct redis_store *rs, unsigned slot,
    const struct redis_script *script, int argc, const char **argv,
    const size_t *argvlen)
{
    struct redis_redirect to;
    struct redis_node *n, *next;
    enum redis_reply_kind kind;
    redisReply *r;
    int redirects, asking = 0, err;

    n = redis_route(rs, slot);
    for (redirects = 0; n != NULL; redirects++) {
        if (redis_node_connect(rs, n) != STORE_OK)
            return NULL;
        r = script != NULL ? redis_run(n, script, argc, argv, argvlen,
            asking, &err) : redis_node_send(n, argc, argv, argvlen, asking,
            &err);
        if (r == NULL) {
            redis_node_fail(rs, n, script != NULL ? "EVALSHA" : argv[0], err,
                0, 0);
            return NULL;
        }
        kind = redis_reply_classify(r, &to);
        if ((kind != REPLY_MOVED && kind != REPLY_ASK) ||
            redirects == REDIS_MAX_REDIRECTS ||
            (next = redis_follow(rs, n, r, kind, &to, &asking)) == NULL)
            return r;
        freeReplyObject(r);
        n = next;
    }
    return NULL;
}

redisReply *
redis_store_script(struct redis_store *rs, const struct redis_script *script,
    int argc, const char **argv, const size_t *argvlen)
{
    if (argc < 1 || argc > REDIS_SCRIPT_MAX_ARGS) {
        snprintf(rs->error, sizeof(rs->error), "redis script call of %d "
            "arguments", argc);
        return NULL;
    }
    return redis_call(rs, rs->type == REDIS_CLUSTER && argc > 1 ?
        cluster_keyslot(argv[1], argvlen[1]) : 0, script, argc, argv,
        argvlen);
}

redisReply *
redis_store_command(struct redis_store *rs, const char *key, int argc,
    const char **argv, const size_t *argvlen)
{
    return redis_call(rs, rs->type == REDIS_CLUSTER ?
        cluster_keyslot(key, strlen(key)) : 0, NULL, argc, argv, argvlen);
}
