/*
 * pg_store.h -- the PostgreSQL store: API keys, tenants and rules, the
 * change notifications, the keys served, and the schema self-test
 * (pg_store.c).
 */
#ifndef PG_STORE_H
#define PG_STORE_H

#include "ratelimit.h"
#include "store.h"

/* Keys served, for api_keys.last_used_at: written in batches between
 * requests, at most once per key and PG_USED_EVERY_MS. */
#define PG_USED_PENDING 512     /* ids waiting for the next write */
#define PG_USED_SEEN 2048       /* ids written lately (a hash table) */

struct pg_used_seen {
    long long id;               /* 0 = free */
    int64_t at_ms;              /* when it was last queued */
};

struct pg_store {
    void *conn;                 /* PGconn, NULL when disconnected */
    const struct rl_config *cfg;
    int state;                  /* PGS_* in pg_store.c */
    int polling;                /* libpq's connect polling status */
    int result_ok;              /* LISTEN answered OK */
    int was_ready;              /* it has been connected before */
    int64_t started_ms;         /* when the connect began */
    int64_t retry_at_ms;        /* no connect attempt before (monotonic) */
    int failing;                /* the last attempt to use it failed */
    int notified;               /* a change notification arrived */
    unsigned serial;            /* counts connections made */
    unsigned watched;           /* serial of the connection watched */
    int readable;               /* the watcher saw its socket readable */
    struct keyfilter *filter;   /* the pool's filter of active keys, or
                                   NULL */
    struct rl_counters *counters; /* the pool's counters, or NULL */
    char error[160];            /* short reason, for /health/ready */
    int misconfigured;          /* the last failure was a misconfiguration
                                   (error says which): /health/ready 503 */
    int check_step;             /* the connect's schema check: 0 the
                                   catalog's answer awaited, 1 the version
                                   to ask, 2 asked */
    char logged[160];           /* the misconfiguration logged last: each
                                   is logged once, with its fix */
    long long used[PG_USED_PENDING];
    int nused;
    int64_t used_write_at_ms;   /* no batch write before this */
    int64_t slow_logged_ms;     /* when a statement PostgreSQL gave up was
                                   last logged */
    unsigned long slow_quiet;   /* such statements not logged since */
    struct pg_used_seen seen[PG_USED_SEEN];
};

void pg_store_init(struct pg_store *ps, const struct rl_config *cfg);
void pg_store_close(struct pg_store *ps);

/* 1 while PostgreSQL is known to be unreachable (the last attempt to
 * reach it failed), else 0. */
int pg_store_down(const struct pg_store *ps);

/* Between requests: takes a lost connection a step further towards being
 * connected and LISTENing again, waiting a little only when idle is set;
 * on a ready connection, writes the batch of keys served (at most once a
 * second).  Never called with a request in hand. */
void pg_store_tick(struct pg_store *ps, int idle);

/* A key was served: queues its id for last_used_at, unless it was queued
 * in the last minute.  No I/O. */
void pg_store_used(struct pg_store *ps, long long key_id);

/* Looks up a key by its SHA-256 hex.  Returns STORE_OK (out->found says
 * whether it exists) or STORE_UNAVAILABLE. */
int pg_store_key(struct pg_store *ps, const char *hash, struct key_info *out);

/* Looks up a tenant by name (for the anonymous tenant).  STORE_OK (with
 * out->found, tenant_id and suspended set) or STORE_UNAVAILABLE. */
int pg_store_tenant(struct pg_store *ps, const char *name,
    struct key_info *out);

/* Loads the enabled rules of a tenant, with their limits.  On STORE_OK
 * *out is a new allocation the caller frees with decide_rules_free. */
int pg_store_rules(struct pg_store *ps, const char *tenant_id,
    struct tenant_rules **out);

/* Reads change notifications that have arrived, without a round trip,
 * into out (at most max): returns how many, or -1 when what changed is
 * not known (a new connection, a notification that names nothing, more
 * than max).  While a watcher keeps the socket in its poll set
 * (pg_store_socket, pg_store_watch), the socket is read only after the
 * watcher has seen it readable. */
int pg_store_poll(struct pg_store *ps, struct store_change *out, int max);

/* The socket of a connection that is LISTENing, with the connection's
 * serial number in *serial (a new connection may reuse the number), or -1
 * while there is none. */
int pg_store_socket(const struct pg_store *ps, unsigned *serial);

/* The watcher now has the connection of this serial in its poll set; 0
 * says it has none. */
void pg_store_watch(struct pg_store *ps, unsigned serial);

/* The watcher saw the socket readable: the next pg_store_poll reads it. */
void pg_store_readable(struct pg_store *ps);

/* Readiness: one "SELECT 1".  STORE_OK or STORE_UNAVAILABLE; then
 * ps->misconfigured says whether PostgreSQL answered but refuses what the
 * service needs (authentication, database, role, schema, grants). */
int pg_store_ready(struct pg_store *ps);

/* ratelimit-fcgi -C: connects as the service would and checks the schema
 * version and the grants, printing one line per failure (with its fix) on
 * out, each after prefix.  Returns the number of failures. */
int pg_store_selftest(const struct rl_config *cfg, FILE *out,
    const char *prefix);

/* Every call above that needs PostgreSQL is bounded by pg_query_timeout_ms
 * in all (connect included); past it the connection is dropped and the
 * call answers STORE_UNAVAILABLE. */

#endif /* PG_STORE_H */
