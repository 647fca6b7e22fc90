/*
 * redis_reply.c -- what a reply of Redis says, as the Redis client acts
 * on it: no I/O, so that it is unit tested with replies made by hand
 * (t/check_redis_reply.c).
 *
 * An error reply starts with a word that says what went wrong: MOVED and
 * ASK (a cluster's slot lives, or is moving, elsewhere: the slot and the
 * node are read with cluster.c), TRYAGAIN (a slot half moved), NOSCRIPT
 * (the script cache was emptied), READONLY, LOADING, MASTERDOWN and
 * CLUSTERDOWN (the node cannot take writes now, however healthy the
 * connection), BUSY and OOM; any other is an error of no kind.  The calls
 * of redis_call.c loop over these kinds, and the check's short reasons
 * for /health/ready are here too, one per kind.  The check script's reply
 * is decoded here into a decision, for the service and ratelimitctl alike.
 */
#include <string.h>

#include <hiredis/hiredis.h>

#include "redis.h"

/* The error words, matched as the start of the reply's text.  MOVED and
 * ASK carry their space: only "MOVED <slot> <node>" is a redirection. */
static const struct {
    const char *word;
    enum redis_reply_kind kind;
} redis_reply_words[] = {
    { "TRYAGAIN", REPLY_TRYAGAIN },
    { "NOSCRIPT", REPLY_NOSCRIPT },
    { "READONLY", REPLY_READONLY },
    { "LOADING", REPLY_LOADING },
    { "MASTERDOWN", REPLY_MASTERDOWN },
    { "CLUSTERDOWN", REPLY_CLUSTERDOWN },
    { "BUSY ", REPLY_BUSY },
    { "OOM ", REPLY_OOM },
};

enum redis_reply_kind
redis_reply_classify(const redisReply *r, struct redis_redirect *to)
{
    struct redis_redirect ignored;
    size_t i;
    int kind;

    if (r == NULL)
        return REPLY_ERROR;
    if (r->type == REDIS_REPLY_NIL)
        return REPLY_NIL;
    if (r->type != REDIS_REPLY_ERROR)
        return REPLY_ANSWER;
    if (r->str == NULL)
        return REPLY_ERROR;
    if (to == NULL)
        to = &ignored;
    kind = cluster_redirect(r->str, &to->slot, to->addr, sizeof(to->addr));
    if (kind == CLUSTER_MOVED)
        return REPLY_MOVED;
    if (kind == CLUSTER_ASK)
        return REPLY_ASK;
    if (kind == -1)
        return REPLY_BAD_REDIRECT;
    for (i = 0; i < sizeof(redis_reply_words) / sizeof(redis_reply_words[0]);
        i++)
        if (strncmp(r->str, redis_reply_words[i].word,
            strlen(redis_reply_words[i].word)) == 0)
            return redis_reply_words[i].kind;
    return REPLY_ERROR;
}

int
redis_reply_not_serving(enum redis_reply_kind kind)
{
    return kind == REPLY_READONLY || kind == REPLY_LOADING ||
        kind == REPLY_MASTERDOWN || kind == REPLY_CLUSTERDOWN;
}

const char *
redis_reply_reason(enum redis_reply_kind kind)
{
    switch (kind) {
    case REPLY_TRYAGAIN:
        return "redis slot moving";
    case REPLY_LOADING:
        return "redis loading";
    case REPLY_CLUSTERDOWN:
        return "redis cluster down";
    case REPLY_READONLY:
    case REPLY_MASTERDOWN:
        return "redis not a master";
    default:
        return NULL;
    }
}

/*
 * The check script answers a string of whole numbers, each a big-endian
 * IEEE double of 8 bytes (struct.pack('>d'): see "Why the reply is packed"
 * in lua/check.lua).  Each is read as Redis itself would turn a number into
 * an integer, truncated toward zero; one that is not finite or not within
 * 2^53 of zero (no value of the script is) makes the reply unreadable.
 */
int
redis_reply_decision(const redisReply *r, int nlimits, struct rl_decision *d)
{
    long long v[LIMITER_REPLY_MAX];
    double x;
    size_t i, n;

    if (r == NULL || r->type != REDIS_REPLY_STRING || r->len % 8 != 0 ||
        r->len / 8 > LIMITER_REPLY_MAX)
        return -1;
    n = r->len / 8;
    for (i = 0; i < n; i++) {
        x = util_be_double((const unsigned char *)r->str + 8 * i);
        if (!(x > -9007199254740992.0 && x < 9007199254740992.0))
            return -1;
        v[i] = (long long)x;
    }
    return limiter_decode(v, n, nlimits, d);
}
