/*
 * redis_topology.c -- the Redis client's middle layer: which nodes there
 * are, and which one a call goes to.
 *
 * redis_type says where the script runs.  single: one server.  sentinel:
 * the master that Redis Sentinel names; the worker asks one sentinel at a
 * time (SENTINEL get-master-addr-by-name), checks the answer with ROLE on
 * connect (redis_node.c), and asks again when the master fails, answers
 * READONLY or LOADING, or turns out to be a replica.  cluster: each worker
 * reads the slot map (CLUSTER SLOTS) from a node it knows, sends a check
 * to the primary owning the slot of the check's keys (they all carry the
 * tenant's hash tag), and keeps one connection per primary it has needed,
 * opened when first needed.  MOVED updates the slot and goes to the named
 * node (and the map is read again before the next check); ASK goes there
 * once, after ASKING (redis_call.c says what a check does with each
 * reply).  Topology lookups are at most one per REDIS_LOOKUP_MS per
 * worker, so a failover costs 503s, not a storm of lookups.
 *
 * Readiness is here too, since what "ready" means depends on the
 * topology: the master the sentinels name still a master, every slot of
 * the cluster served and every primary the checks needed reachable, or
 * the one server; and on each, the check script loaded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "redis_client.h"

/* At most one topology lookup (slot map, sentinel) per this long. */
#define REDIS_LOOKUP_MS 100

static void redis_sentinel_close(struct redis_store *);

void
redis_topology_init(struct redis_store *rs)
{
    const struct rl_config *cfg = rs->cfg;
    size_t i;

    if (strcmp(cfg->redis_type, "cluster") == 0)
        rs->type = REDIS_CLUSTER;
    else if (strcmp(cfg->redis_type, "sentinel") == 0)
        rs->type = REDIS_SENTINEL;
    else
        rs->type = REDIS_SINGLE;
    for (i = 0; i < REDIS_MAX_NODES; i++)
        rs->node[i].probe_fd = -1;
    rs->naddrs = util_split_list(cfg->redis, rs->addrs, RL_REDIS_MAX_ADDRS);
    if (rs->naddrs < 0)         /* config.c refuses such a list */
        rs->naddrs = 0;
    /* single: the server; cluster: the seeds, as the first nodes. */
    if (rs->type == REDIS_SINGLE && rs->naddrs > 0)
        redis_node_set(&rs->node[0], rs->addrs[0]);
    if (rs->type == REDIS_CLUSTER)
        for (i = 0; i < (size_t)rs->naddrs; i++)
            redis_node_set(&rs->node[i], rs->addrs[i]);
}

void
redis_topology_close(struct redis_store *rs)
{
    int i;

    for (i = 0; i < REDIS_MAX_NODES; i++)
        redis_node_close(&rs->node[i]);
    redis_sentinel_close(rs);
    if (rs->tls_ctx != NULL)
        redis_tls_context_free(rs->tls_ctx);
    rs->tls_ctx = NULL;
}

/* ------------------------------------------------------------ sentinel */

static void
redis_sentinel_close(struct redis_store *rs)
{
    redis_tls_free(rs->sentinel_tls);
    rs->sentinel_tls = NULL;
    if (rs->sentinel != NULL)
        redisFree(rs->sentinel);
    rs->sentinel = NULL;
}

/* Drops the sentinel connection after a failure; a TLS failure is kept
 * as the reason (rs->error) for when no sentinel answers.  Returns -2
 * after a TLS failure, else -1. */
static int
redis_sentinel_fail(struct redis_store *rs)
{
    const char *tls = redis_tls_error(rs->sentinel_tls);
    int rc = -1;

    if (tls[0] != '\0') {
        snprintf(rs->error, sizeof(rs->error), "redis sentinel tls: %s",
            tls);
        rc = -2;
    }
    redis_sentinel_close(rs);
    return rc;
}

/* Opens a connection to the sentinel at addrs[i], authenticated when
 * redis_sentinel_password is set.  Returns 0, or -1 (logged; -2 when TLS
 * failed). */
static int
redis_sentinel_open(struct redis_store *rs, int i)
{
    const struct rl_config *cfg = rs->cfg;
    struct redis_tls *tls;
    redisContext *c;
    redisReply *r;
    int at = rs->sentinel_at;

    if (rs->sentinel != NULL && rs->sentinel_at == i)
        return 0;
    redis_sentinel_close(rs);
    if ((c = redis_open(rs, rs->addrs[i], 1, &tls)) == NULL)
        return -1;
    /* Kept even when it fails, for redis_sentinel_fail() to say why. */
    rs->sentinel = c;
    rs->sentinel_tls = tls;
    rs->sentinel_at = i;
    if (c->err) {
        log_warn("redis sentinel %s: %s%s", rs->addrs[i],
            redis_tls_error(tls)[0] ? "TLS: " : "", c->errstr);
        goto fail;
    }
    if (redis_append_auth(c, cfg->redis_sentinel_username,
        cfg->redis_sentinel_password)) {
        if (redis_get_reply(c, tls, &r) != REDIS_OK) {
            log_warn("redis sentinel %s AUTH: %s%s", rs->addrs[i],
                redis_tls_error(tls)[0] ? "TLS: " : "", c->errstr);
            goto fail;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            log_error("redis sentinel %s AUTH: %s", rs->addrs[i], r->str);
            freeReplyObject(r);
            goto fail;
        }
        freeReplyObject(r);
    }
    return 0;
fail:
    /* The next sentinel to ask is still the one after the last that
     * answered (the lookup's loop counts from it). */
    rs->sentinel_at = at;
    return redis_sentinel_fail(rs);
}

/*
 * Asks the sentinels, one at a time starting with the last that answered,
 * for the address of the master named redis_sentinel_master, and makes
 * node[0] that address (a new address: a new connection, no back-off).
 * Returns STORE_OK or STORE_UNAVAILABLE with the reason.
 */
static int
redis_sentinel_lookup(struct redis_store *rs)
{
    const char *name = rs->cfg->redis_sentinel_master;
    struct redis_node *n = &rs->node[0];
    char addr[RL_REDIS_ADDR_MAX];
    int64_t now_ms = util_now_ms();
    int k, i, rc, unknown = 0, got = 0, tls_failed = 0;
    redisReply *r;

    if (now_ms < rs->lookup_at_ms) {
        if (rs->error[0] == '\0')
            snprintf(rs->error, sizeof(rs->error), "no master for %s", name);
        return STORE_UNAVAILABLE;
    }
    rs->lookup_at_ms = now_ms + REDIS_LOOKUP_MS;
    __atomic_add_fetch(&rs->counters->redis_lookups, 1, __ATOMIC_RELAXED);
    for (k = 0; k < rs->naddrs && !got; k++) {
        i = (rs->sentinel_at + k) % rs->naddrs;
        if ((rc = redis_sentinel_open(rs, i)) < 0) {
            tls_failed |= rc == -2;
            continue;
        }
        r = redis_command(rs->sentinel, rs->sentinel_tls,
            "SENTINEL get-master-addr-by-name %s", name);
        if (r == NULL) {
            log_warn("redis sentinel %s: %s", rs->addrs[i],
                ((redisContext *)rs->sentinel)->errstr);
            tls_failed |= redis_sentinel_fail(rs) == -2;
            continue;
        }
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            snprintf(addr, sizeof(addr),
                strchr(r->element[0]->str, ':') != NULL ? "[%s]:%s" :
                "%s:%s", r->element[0]->str, r->element[1]->str);
            got = 1;
        } else if (r->type == REDIS_REPLY_NIL) {
            unknown = 1;
            log_error("redis sentinel %s does not know a master named %s",
                rs->addrs[i], name);
        } else
            log_error("redis sentinel %s: %s", rs->addrs[i],
                r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
    }
    if (!got) {
        if (unknown)
            snprintf(rs->error, sizeof(rs->error), "no master for %s", name);
        else if (!tls_failed)
            snprintf(rs->error, sizeof(rs->error), "redis sentinels "
                "unreachable");
        return STORE_UNAVAILABLE;
    }
    if (strcmp(addr, n->addr) != 0) {
        if (n->addr[0] != '\0')
            log_info("redis: the sentinels name %s as master %s (was %s)",
                addr, name, n->addr);
        redis_node_set(n, addr);
    }
    rs->master_known = 1;
    return STORE_OK;
}

/* ------------------------------------------------------------- cluster */

/* The node at addr, added when it is new (a free entry, else one that no
 * slot points to).  NULL when the table is full of nodes in use. */
static struct redis_node *
redis_cluster_node(struct redis_store *rs, const char *addr,
    const unsigned char *map)
{
    unsigned char used[REDIS_MAX_NODES];
    int i, free_at = -1;

    for (i = 0; i < REDIS_MAX_NODES; i++) {
        if (strcmp(rs->node[i].addr, addr) == 0)
            return &rs->node[i];
        if (rs->node[i].addr[0] == '\0' && free_at < 0)
            free_at = i;
    }
    if (free_at < 0) {
        memset(used, 0, sizeof(used));
        for (i = 0; i < CLUSTER_SLOTS; i++) {
            if (map[i] != 0)
                used[map[i] - 1] = 1;
            if (rs->slots[i] != 0)
                used[rs->slots[i] - 1] = 1;
        }
        for (i = 0; i < REDIS_MAX_NODES && free_at < 0; i++)
            if (!used[i])
                free_at = i;
        if (free_at < 0)
            return NULL;
    }
    redis_node_set(&rs->node[free_at], addr);
    return &rs->node[free_at];
}

/* "host:port" of a node as CLUSTER SLOTS or a redirection names it; an
 * empty host means the node that was asked (host of asked). */
static void
redis_cluster_addr(char *out, size_t outlen, const char *host, long port,
    const char *asked)
{
    char ahost[256];
    int aport;

    if (host[0] == '\0' || strcmp(host, "?") == 0) {
        if (util_split_hostport(asked, ahost, sizeof(ahost), &aport) == -1)
            util_copy(ahost, sizeof(ahost), "127.0.0.1");
        host = ahost;
    }
    snprintf(out, outlen, strchr(host, ':') != NULL ? "[%s]:%ld" : "%s:%ld",
        host, port);
}

/* Reads a CLUSTER SLOTS reply from node `from` into the slot map.  Returns
 * 0, or -1 when the reply has another shape. */
static int
redis_cluster_parse(struct redis_store *rs, const redisReply *r,
    const struct redis_node *from)
{
    unsigned char map[CLUSTER_SLOTS];
    char addr[RL_REDIS_ADDR_MAX], asked[RL_REDIS_ADDR_MAX];
    const redisReply *e, *m;
    struct redis_node *n;
    long long lo, hi, s;
    size_t i;
    int covered = 0, k;

    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    /* from may be reused for another node below, when the table is full */
    util_copy(asked, sizeof(asked), from->addr);
    memset(map, 0, sizeof(map));
    for (i = 0; i < r->elements; i++) {
        e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        m = e->element[2];
        if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
            m->element[0]->type != REDIS_REPLY_STRING ||
            m->element[1]->type != REDIS_REPLY_INTEGER)
            return -1;
        lo = e->element[0]->integer;
        hi = e->element[1]->integer;
        if (lo < 0 || hi >= CLUSTER_SLOTS || lo > hi)
            return -1;
        redis_cluster_addr(addr, sizeof(addr), m->element[0]->str,
            (long)m->element[1]->integer, asked);
        if ((n = redis_cluster_node(rs, addr, map)) == NULL) {
            log_error("redis cluster: more than %d nodes", REDIS_MAX_NODES);
            return -1;
        }
        k = (int)(n - rs->node) + 1;
        for (s = lo; s <= hi; s++) {
            if (map[s] == 0)
                covered++;
            map[s] = (unsigned char)k;
        }
    }
    memcpy(rs->slots, map, sizeof(map));
    rs->covered = covered;
    return 0;
}

/* Closes the connections to nodes that no slot points to any more
 * (replicas now, or gone): one connection per primary. */
static void
redis_cluster_prune(struct redis_store *rs)
{
    unsigned char used[REDIS_MAX_NODES];
    int i;

    memset(used, 0, sizeof(used));
    for (i = 0; i < CLUSTER_SLOTS; i++)
        if (rs->slots[i] != 0)
            used[rs->slots[i] - 1] = 1;
    for (i = 0; i < REDIS_MAX_NODES; i++)
        if (!used[i] && rs->node[i].ctx != NULL) {
            redis_node_close(&rs->node[i]);
            rs->node[i].needed = 0;
        }
}

/* Asks node n for the slot map.  Returns 0, or -1 (logged). */
static int
redis_cluster_ask(struct redis_store *rs, struct redis_node *n)
{
    redisReply *r;
    int rc;

    if (redis_node_connect(rs, n) != STORE_OK)
        return -1;
    if ((r = redis_command(n->ctx, n->tls, "CLUSTER SLOTS")) == NULL) {
        redis_node_fail(rs, n, "CLUSTER SLOTS", errno, 0, 0);
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        log_error("redis CLUSTER SLOTS (%s): %s%s", n->addr, r->str,
            strstr(r->str, "cluster support disabled") != NULL ?
            " (redis_type = cluster, but it is not a cluster node)" : "");
        snprintf(rs->error, sizeof(rs->error), "redis is not a cluster");
        freeReplyObject(r);
        return -1;
    }
    rc = redis_cluster_parse(rs, r, n);
    freeReplyObject(r);
    if (rc == -1)
        log_error("redis CLUSTER SLOTS (%s): a reply of unexpected shape",
            n->addr);
    return rc;
}

/*
 * Reads the slot map anew, at most once per REDIS_LOOKUP_MS: from a node
 * already connected if there is one, else from the known nodes and the
 * seeds in turn.  Returns 0 when the map was read, -1 when no node gave
 * it, -2 when it is too soon to ask.
 */
static int
redis_cluster_lookup(struct redis_store *rs)
{
    int64_t now_ms = util_now_ms();
    struct redis_node *n;
    int i, pass;

    if (now_ms < rs->lookup_at_ms)
        return -2;
    rs->lookup_at_ms = now_ms + REDIS_LOOKUP_MS;
    __atomic_add_fetch(&rs->counters->redis_lookups, 1, __ATOMIC_RELAXED);
    for (pass = 0; pass < 3; pass++)
        for (i = 0; i < REDIS_MAX_NODES + RL_REDIS_MAX_ADDRS; i++) {
            if (i < REDIS_MAX_NODES) {
                n = &rs->node[i];
                /* connected ones first, then the others */
                if (n->addr[0] == '\0' || pass == 2 ||
                    (pass == 0) != (n->ctx != NULL))
                    continue;
            } else {
                /* last, a seed the table has lost */
                if (pass != 2 || i - REDIS_MAX_NODES >= rs->naddrs)
                    continue;
                n = redis_cluster_node(rs, rs->addrs[i - REDIS_MAX_NODES],
                    rs->slots);
                if (n == NULL || n->ctx != NULL)
                    continue;
            }
            if (redis_cluster_ask(rs, n) == 0) {
                rs->map_loaded = 1;
                rs->map_stale = 0;
                redis_cluster_prune(rs);
                if (rs->covered < CLUSTER_SLOTS)
                    log_warn("redis cluster: %d of %d slots have no primary",
                        CLUSTER_SLOTS - rs->covered, CLUSTER_SLOTS);
                return 0;
            }
        }
    return -1;
}

/* ------------------------------------------------------------ routing */

int
redis_reroute(struct redis_store *rs)
{
    /* Not more than one lookup per 10 ms, whatever fails. */
    if (util_now_ms() < rs->lookup_at_ms - REDIS_LOOKUP_MS + 10)
        return 0;
    redis_topology_stale(rs);
    rs->lookup_at_ms = 0;
    if (rs->type == REDIS_SENTINEL)
        return redis_sentinel_lookup(rs) == STORE_OK;
    return redis_cluster_lookup(rs) == 0;
}

struct redis_node *
redis_route(struct redis_store *rs, unsigned slot)
{
    struct redis_node *n;

    /* A node in its back-off may have been replaced meanwhile (that is
     * what a failover does): while it is, the topology is looked up again
     * (at most once per REDIS_LOOKUP_MS), so the new one is used as soon
     * as the cluster or the sentinels name it. */
    switch (rs->type) {
    case REDIS_SENTINEL:
        n = &rs->node[0];
        if ((!rs->master_known || (n->ctx == NULL && n->retry_at_ms != 0)) &&
            redis_sentinel_lookup(rs) != STORE_OK && !rs->master_known)
            return NULL;
        return n;
    case REDIS_CLUSTER:
        if (!rs->map_loaded || rs->map_stale ||
            (rs->slots[slot] != 0 &&
            rs->node[rs->slots[slot] - 1].ctx == NULL &&
            rs->node[rs->slots[slot] - 1].retry_at_ms != 0))
            redis_cluster_lookup(rs);
        if (!rs->map_loaded) {
            if (rs->error[0] == '\0')
                snprintf(rs->error, sizeof(rs->error), "redis cluster "
                    "unreachable");
            return NULL;
        }
        if (rs->slots[slot] == 0) {
            snprintf(rs->error, sizeof(rs->error), "cluster slots "
                "uncovered");
            return NULL;
        }
        n = &rs->node[rs->slots[slot] - 1];
        n->needed = 1;
        return n;
    default:
        return &rs->node[0];
    }
}

struct redis_node *
redis_follow(struct redis_store *rs, const struct redis_node *n,
    const redisReply *r, enum redis_reply_kind kind,
    const struct redis_redirect *to, int *asking)
{
    char where[RL_REDIS_ADDR_MAX], addr[RL_REDIS_ADDR_MAX];
    struct redis_node *next;
    char *colon;

    if (kind != REPLY_MOVED && kind != REPLY_ASK)
        return NULL;
    if (rs->type != REDIS_CLUSTER) {
        /* A cluster node configured as a single server. */
        log_error("redis (%s) answered \"%s\": it is a Redis Cluster node; "
            "set redis_type = cluster", n->addr, r->str);
        snprintf(rs->error, sizeof(rs->error), "redis is a cluster; set "
            "redis_type = cluster");
        rs->moved_seen = 1;
        return NULL;
    }
    util_copy(where, sizeof(where), to->addr);
    colon = strrchr(where, ':');
    *colon = '\0';
    redis_cluster_addr(addr, sizeof(addr), where, atol(colon + 1), n->addr);
    if ((next = redis_cluster_node(rs, addr, rs->slots)) == NULL) {
        snprintf(rs->error, sizeof(rs->error), "redis cluster too large");
        return NULL;
    }
    __atomic_add_fetch(&rs->counters->redis_redirects, 1, __ATOMIC_RELAXED);
    if (kind == REPLY_MOVED) {
        rs->slots[to->slot] = (unsigned char)(next - rs->node + 1);
        rs->map_stale = 1;
        *asking = 0;
    } else
        *asking = 1;
    next->needed = 1;
    return next;
}

void
redis_store_tick(struct redis_store *rs)
{
    /* Sentinel: the sentinels may have named another master while the
     * old one still takes writes (a planned failover demotes it only
     * seconds later, and what it took then is lost): ask again, at most
     * every REDIS_LOOKUP_MS, on the sentinel connection already open. */
    if (rs->type == REDIS_SENTINEL && rs->master_known &&
        rs->sentinel != NULL && util_now_ms() >= rs->lookup_at_ms)
        redis_sentinel_lookup(rs);
}

/* ------------------------------------------------------------ readiness */

int
redis_store_ready(struct redis_store *rs)
{
    struct redis_node *n;
    unsigned char used[REDIS_MAX_NODES];
    redisReply *r;
    int i, master, rc;

    switch (rs->type) {
    case REDIS_SENTINEL:
        if ((n = redis_route(rs, 0)) == NULL)
            return STORE_UNAVAILABLE;
        /* The master may have been demoted since the connect. */
        if ((r = redis_node_ask(rs, n, "ROLE")) == NULL)
            return STORE_UNAVAILABLE;
        master = r->type == REDIS_REPLY_ARRAY && r->elements >= 1 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            strcmp(r->element[0]->str, "master") == 0;
        freeReplyObject(r);
        if (!master) {
            log_warn("redis (%s): ROLE is not master any more", n->addr);
            redis_node_close(n);
            rs->master_known = 0;
            snprintf(rs->error, sizeof(rs->error), "redis master %s is a "
                "replica", rs->cfg->redis_sentinel_master);
            return STORE_UNAVAILABLE;
        }
        return redis_node_ready(rs, n);
    case REDIS_CLUSTER:
        /* The map as the cluster has it now (at most one lookup per
         * REDIS_LOOKUP_MS), all slots served, every primary that checks
         * needed reachable. */
        /* No node gave the map just now (all down, say): not ready,
         * whatever the map learnt before says. */
        rc = redis_cluster_lookup(rs);
        if (rc == -1 || (rc == -2 && !rs->map_loaded)) {
            if (rc == -2 || rs->error[0] == '\0')
                snprintf(rs->error, sizeof(rs->error), "redis cluster "
                    "unreachable");
            return STORE_UNAVAILABLE;
        }
        if (rs->covered < CLUSTER_SLOTS) {
            snprintf(rs->error, sizeof(rs->error), "cluster slots "
                "uncovered (%d of %d)", CLUSTER_SLOTS - rs->covered,
                CLUSTER_SLOTS);
            return STORE_UNAVAILABLE;
        }
        memset(used, 0, sizeof(used));
        for (i = 0; i < CLUSTER_SLOTS; i++)
            used[rs->slots[i] - 1] = 1;
        for (i = 0; i < REDIS_MAX_NODES; i++)
            if (used[i] && rs->node[i].needed &&
                redis_node_ready(rs, &rs->node[i]) != STORE_OK)
                return STORE_UNAVAILABLE;
        return STORE_OK;
    default:
        if (rs->moved_seen) {
            snprintf(rs->error, sizeof(rs->error), "redis is a cluster; "
                "set redis_type = cluster");
            return STORE_UNAVAILABLE;
        }
        return redis_node_ready(rs, &rs->node[0]);
    }
}
