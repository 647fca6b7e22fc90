/*
 * config.c -- the configuration file.
 *
 * The file is a list of "key = value" lines; '#' starts a comment, blank
 * lines are ignored and a value may be wrapped in double quotes.  Every key
 * is declared once in the table below with its type, default, bounds and
 * unit, so the loader, the defaults, the config dump and the key listing
 * of "ratelimit-fcgi -K" all read the same source; the documentation test
 * (t/integration/test_configdoc.sh) holds the manual page, the example
 * file and the docs to that listing.  Errors name the file and line, and an unknown key gets the
 * closest known key as a hint.
 *
 * Passwords are never shown: the dump writes "(set)" for redis_password
 * and in place of every password inside pg_conninfo, and a file that holds
 * one while other users may read it gets a warning (config_check_secrets)
 * from -t and from ratelimitctl.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "ratelimit.h"

enum config_type { CT_LONG, CT_STRING, CT_MODE, CT_LEVEL, CT_ENUM };

struct config_key {
    const char *name;
    enum config_type type;
    size_t offset;
    size_t size;                /* strings: buffer size */
    long min, max;              /* longs, modes: bounds; strings: min length */
    const char *def;            /* default, as text */
    const char *unit;           /* longs: what the number counts, or NULL */
    const char *choices;        /* CT_ENUM: "a|b" */
    const char *help;
};

#define OFF(f) offsetof(struct rl_config, f)
#define SZ(f) sizeof(((struct rl_config *)0)->f)

static const struct config_key config_keys[] = {
    { "listen", CT_STRING, OFF(listen), SZ(listen), 0, 0, "", NULL, NULL,
      "where to accept FastCGI connections: empty = the listening socket on "
      "fd 0 (lighttpd bin-path, spawn-fcgi, systemd, mod_fcgid), "
      "\"unix:/path\", \"127.0.0.1:9000\" or \"[::1]:9000\"" },
    { "listen_mode", CT_MODE, OFF(listen_mode), 0, 0, 0777, "0660", NULL, NULL,
      "permissions of a Unix listen socket (octal)" },
    { "listen_owner", CT_STRING, OFF(listen_owner), SZ(listen_owner), 0, 0, "",
      NULL, NULL, "owner of a Unix listen socket (user name; empty = ours)" },
    { "listen_group", CT_STRING, OFF(listen_group), SZ(listen_group), 0, 0, "",
      NULL, NULL, "group of a Unix listen socket (empty = ours)" },
    { "listen_backlog", CT_LONG, OFF(listen_backlog), 0, 1, 65535, "1024",
      "connections", NULL, "listen(2) backlog of a socket we bind" },
    { "user", CT_STRING, OFF(user), SZ(user), 0, 0, "", NULL, NULL,
      "started as root: the user the master and the workers run as, once the "
      "socket is bound and the pid and log files are opened; empty = stay who "
      "started us" },
    { "group", CT_STRING, OFF(group), SZ(group), 0, 0, "", NULL, NULL,
      "the group to run as (empty = the primary group of user)" },
    { "allow_root", CT_ENUM, OFF(allow_root), SZ(allow_root), 0, 0, "off",
      NULL, "off|on", "off: started as root without user, refuse to start; "
      "on: let the workers run as root" },
    { "pid_file", CT_STRING, OFF(pid_file), SZ(pid_file), 0, 0, "", NULL, NULL,
      "absolute path where the master writes its pid (removed at exit; a "
      "start is refused while it names a running master); empty = none" },
    { "workers", CT_LONG, OFF(workers), 0, 0, 256, "4", "processes", NULL,
      "worker processes; 0 = serve in one process without forking (Apache "
      "mod_fcgid)" },
    { "max_requests", CT_LONG, OFF(max_requests), 0, 0, 100000000, "10000",
      "requests", NULL, "requests a worker serves before it is replaced; 0 = "
      "never" },
    { "request_timeout", CT_LONG, OFF(request_timeout), 0, 0, 3600, "30", "s",
      NULL, "seconds after which the master kills a worker stuck on one "
      "request; 0 = never" },
    { "fcgi_read_timeout_ms", CT_LONG, OFF(fcgi_read_timeout_ms), 0, 100,
      600000, "3000", "ms", NULL, "deadline from accepting a FastCGI "
      "connection (or from the first byte of a kept-alive one) to the end of "
      "the request's input, and for each write of an answer; a slower peer is "
      "disconnected (milliseconds)" },
    { "fcgi_keepalive_timeout_ms", CT_LONG, OFF(fcgi_keepalive_timeout_ms), 0,
      100, 3600000, "5000", "ms", NULL, "an idle kept-alive FastCGI "
      "connection (FCGI_KEEP_CONN) is closed after this long (milliseconds)" },
    { "worker_connections", CT_LONG, OFF(worker_connections), 0, 1, 512, "64",
      "connections", NULL, "FastCGI connections a worker holds at once: "
      "kept-alive ones between requests and ones whose request is still "
      "arriving; when all are taken a new connection closes an idle kept "
      "one (the one that has carried the fewest requests), else the oldest "
      "incomplete one" },
    { "max_worker_rss_mb", CT_LONG, OFF(max_worker_rss_mb), 0, 0, 65536, "256",
      "MiB", NULL, "a worker whose resident memory passes this is replaced "
      "after its request (megabytes); 0 = never" },
    { "pg_conninfo", CT_STRING, OFF(pg_conninfo), SZ(pg_conninfo), 1, 0,
      "dbname=ratelimit", NULL, NULL, "libpq connection string of the key and "
      "rule database" },
    { "pg_connect_timeout_ms", CT_LONG, OFF(pg_connect_timeout_ms), 0, 10,
      60000, "2000", "ms", NULL, "PostgreSQL connect timeout (milliseconds)" },
    { "pg_query_timeout_ms", CT_LONG, OFF(pg_query_timeout_ms), 0, 10, 60000,
      "1000", "ms", NULL, "longest a request waits for PostgreSQL, connect "
      "included (milliseconds); then it is treated as unreachable" },
    { "redis_type", CT_ENUM, OFF(redis_type), SZ(redis_type), 0, 0, "single",
      NULL, "single|cluster|sentinel", "single: one Redis server; cluster: a "
      "Redis Cluster (redis lists seed nodes); sentinel: the master that "
      "Redis Sentinel names (redis lists the sentinels)" },
    { "redis", CT_STRING, OFF(redis), SZ(redis), 1, 0, "127.0.0.1:6379", NULL,
      NULL, "Redis address: \"host:port\" or \"unix:/path\"; with redis_type "
      "cluster or sentinel a comma-separated list (at most 16) of seed nodes "
      "or sentinels" },
    { "redis_sentinel_master", CT_STRING, OFF(redis_sentinel_master),
      SZ(redis_sentinel_master), 0, 0, "", NULL, NULL, "the master name the "
      "sentinels monitor (redis_type = sentinel only)" },
    { "redis_username", CT_STRING, OFF(redis_username), SZ(redis_username), 0,
      0, "", NULL, NULL, "Redis ACL user (Redis 6 and later; needs "
      "redis_password); empty = the default user" },
    { "redis_password", CT_STRING, OFF(redis_password), SZ(redis_password), 0,
      0, "", NULL, NULL, "password sent with AUTH on every Redis connection; "
      "empty = none" },
    { "redis_sentinel_username", CT_STRING, OFF(redis_sentinel_username),
      SZ(redis_sentinel_username), 0, 0, "", NULL, NULL,
      "ACL user for the sentinels (needs redis_sentinel_password)" },
    { "redis_sentinel_password", CT_STRING, OFF(redis_sentinel_password),
      SZ(redis_sentinel_password), 0, 0, "", NULL, NULL,
      "password sent with AUTH to the sentinels; empty = none" },
    { "redis_db", CT_LONG, OFF(redis_db), 0, 0, 65535, "0", NULL, NULL,
      "Redis database number (SELECT); a Redis Cluster has only 0" },
    { "redis_connect_timeout_ms", CT_LONG, OFF(redis_connect_timeout_ms), 0, 1,
      10000, "50", "ms", NULL, "Redis connect timeout (milliseconds)" },
    { "redis_command_timeout_ms", CT_LONG, OFF(redis_command_timeout_ms), 0, 1,
      10000, "50", "ms", NULL, "Redis command timeout (milliseconds)" },
    { "redis_backoff_ms", CT_LONG, OFF(redis_backoff_ms), 0, 0, 60000, "250",
      "ms", NULL, "after a failed Redis connect, how long a worker waits "
      "before its next blocking connect, answering 503 at once meanwhile; if "
      "Redis refused the connection, it connects as soon as Redis accepts "
      "connections again (milliseconds)" },
    { "redis_tls", CT_ENUM, OFF(redis_tls), SZ(redis_tls), 0, 0, "off", NULL,
      "off|on", "on: every connection to Redis (the server, the cluster's "
      "nodes, the master the sentinels name) is TLS; needs TCP addresses" },
    { "redis_tls_ca_file", CT_STRING, OFF(redis_tls_ca_file),
      SZ(redis_tls_ca_file), 0, 0, "", NULL, NULL, "PEM file of the CA "
      "certificates that Redis's certificate is verified against; empty = "
      "the system's store" },
    { "redis_tls_cert_file", CT_STRING, OFF(redis_tls_cert_file),
      SZ(redis_tls_cert_file), 0, 0, "", NULL, NULL, "PEM file of the client "
      "certificate (mutual TLS: tls-auth-clients yes); needs "
      "redis_tls_key_file; empty = none" },
    { "redis_tls_key_file", CT_STRING, OFF(redis_tls_key_file),
      SZ(redis_tls_key_file), 0, 0, "", NULL, NULL, "PEM file of the client "
      "certificate's private key (unencrypted); empty = none" },
    { "redis_tls_server_name", CT_STRING, OFF(redis_tls_server_name),
      SZ(redis_tls_server_name), 0, 0, "", NULL, NULL, "the name sent as SNI "
      "and that the certificate of each data node must carry; empty = the "
      "host of the node's address (an IP address is matched as one)" },
    { "redis_tls_verify", CT_ENUM, OFF(redis_tls_verify),
      SZ(redis_tls_verify), 0, 0, "on", NULL, "on|off", "off: Redis's "
      "certificate is not verified (anyone on the path can read and change "
      "what goes to Redis; warned at start and by -t)" },
    { "redis_sentinel_tls", CT_ENUM, OFF(redis_sentinel_tls),
      SZ(redis_sentinel_tls), 0, 0, "same", NULL, "same|on|off", "TLS to "
      "the sentinels (redis_type = sentinel): same as redis_tls, on or off; "
      "with the same CA, client certificate and verification, each sentinel "
      "checked against the host of its address" },
    { "key_cache_ttl", CT_LONG, OFF(key_cache_ttl), 0, 0, 86400, "60", "s",
      NULL, "seconds a known API key is trusted without asking PostgreSQL" },
    { "key_cache_negative_ttl", CT_LONG, OFF(key_cache_negative_ttl), 0, 0,
      3600, "5", "s", NULL, "seconds an unknown API key is remembered as "
      "unknown" },
    { "key_cache_size", CT_LONG, OFF(key_cache_size), 0, 1, 10000000, "10000",
      "keys", NULL, "known API keys remembered by the pool (shared by all "
      "workers; the least recently fetched go)" },
    { "key_cache_negative_size", CT_LONG, OFF(key_cache_negative_size), 0, 1,
      10000000, "10000", "keys", NULL, "unknown API keys remembered by the "
      "pool (kept apart from known keys, so they can never evict them)" },
    { "key_lookup_rate", CT_LONG, OFF(key_lookup_rate), 0, 0, 1000000, "50",
      "lookups/s", NULL, "PostgreSQL lookups per second and worker for API "
      "keys the pool does not know and key_filter_mb does not vouch for; past "
      "it such a key gets 401 when the key filter is complete, else 503 "
      "key_lookup_deferred with Retry-After: 1; 0 = unlimited" },
    { "key_filter_mb", CT_LONG, OFF(key_filter_mb), 0, 0, 1024, "4", "MiB",
      NULL, "MiB of shared memory for the filter of active API keys (a Bloom "
      "filter, 4 bits a key: 4 MiB hold 1,000,000 keys with about 1 false "
      "positive in 500); keys in it are looked up whatever key_lookup_rate; 0 "
      "= no filter" },
    { "rule_cache_ttl", CT_LONG, OFF(rule_cache_ttl), 0, 0, 86400, "30", "s",
      NULL, "seconds a tenant's rules are used without asking PostgreSQL" },
    { "rule_cache_size", CT_LONG, OFF(rule_cache_size), 0, 1, 1000000, "1000",
      "tenants", NULL, "tenants whose rules the pool keeps in shared memory" },
    { "rule_cache_shared_mb", CT_LONG, OFF(rule_cache_shared_mb), 0, 0, 65536,
      "64", "MiB", NULL, "MiB of shared memory for the rules of tenants too "
      "large for an entry of the shared tenants table (more than about 135 "
      "rules): a ring the newest sets push the oldest out of; 0 = such "
      "tenants' rules are not shared" },
    { "rule_cache_worker_mb", CT_LONG, OFF(rule_cache_worker_mb), 0, 1, 4096,
      "32", "MiB", NULL, "MiB of tenants' rules each worker keeps ready to "
      "match (the least recently used go first; a tenant larger than this is "
      "kept alone): with the rest of a worker, its memory bound" },
    { "overlimit_cache_size", CT_LONG, OFF(overlimit_cache_size), 0, 0,
      10000000, "10000", "denials", NULL, "denials the pool remembers (shared "
      "by all workers): a check of a counter known to be over its limit gets "
      "429 without a Redis call until the time Redis gave; 0 = off" },
    { "overlimit_cache_min_ms", CT_LONG, OFF(overlimit_cache_min_ms), 0, 1,
      3600000, "50", "ms", NULL, "a denial is remembered only when its "
      "Retry-After is at least this long (milliseconds)" },
    { "tenant_counter_budget", CT_LONG, OFF(tenant_counter_budget), 0, 0,
      1000000000, "100000", "counters/h", NULL, "counters (Redis keys) named "
      "after what callers send -- subjects, keys, addresses, routes -- that "
      "one tenant may create an hour; past it a check that would create one "
      "gets 429 counter_budget_exceeded until the hour ends, and the tenant's "
      "existing counters go on; a tenant's own budget (ratelimitctl tenant "
      "budget) overrides this; 0 = unlimited" },
    { "max_body_size", CT_LONG, OFF(max_body_size), 0, 64, 1048576, "8192",
      "bytes", NULL, "largest accepted request body (bytes); larger gets "
      "413" },
    { "retry_after_unavailable", CT_LONG, OFF(retry_after_unavailable), 0, 1,
      3600, "1", "s", NULL, "Retry-After seconds sent with a 503" },
    { "log_level", CT_LEVEL, OFF(log_level), 0, 0, 0, "info", NULL, NULL,
      "error, warn, info or debug" },
    { "ready_requires_postgresql", CT_ENUM, OFF(ready_requires_postgresql),
      SZ(ready_requires_postgresql), 0, 0, "off", NULL, "off|on",
      "on: /health/ready answers 503 while PostgreSQL is unreachable; off: "
      "200 with status \"degraded\", since known keys are still served" },
    { "log", CT_STRING, OFF(log_target), SZ(log_target), 1, 0, "stderr", NULL,
      NULL, "where log lines go: stderr (the web server's error log), syslog "
      "(facility daemon) or an absolute file path (appended to, reopened on "
      "SIGUSR1)" },
    { "access_log", CT_STRING, OFF(access_log), SZ(access_log), 1, 0, "off",
      NULL, NULL, "one line per check and authorizer request: off, stderr, "
      "syslog or an absolute file path (reopened on SIGUSR1)" },
    { "access_log_format", CT_ENUM, OFF(access_log_format),
      SZ(access_log_format), 0, 0, "logfmt", NULL, "logfmt|json",
      "the access log's lines: logfmt (key=value) or json (one object a "
      "line)" },
    { "slowlog_ms", CT_LONG, OFF(slowlog_ms), 0, 0, 600000, "0", "ms", NULL,
      "log (at warn) every check slower than this, with where its time went, "
      "and count it in /status \"slow requests\"; 0 = off" },
    { "denial_log_rate", CT_LONG, OFF(denial_log_rate), 0, 0, 100000, "10",
      "denials/s", NULL, "denials logged at info a second, across the pool; "
      "beyond it they are counted and a \"suppressed N\" line follows; 0 = "
      "none" },
    { "metrics_tenants", CT_STRING, OFF(metrics_tenants), SZ(metrics_tenants),
      1, 0, "top:10", NULL, NULL, "per-tenant and per-rule series in "
      "/metrics: off, top:N (the N tenants with the most checks, N 1-1000) or "
      "all (every pair the pool counts, at most 1024)" },
    { "authorizer_path", CT_STRING, OFF(authorizer_path), SZ(authorizer_path),
      0, 0, "/_ratelimit/auth", NULL, NULL, "a Responder request for this "
      "path is answered as an authorizer decision on the original request "
      "(REQUEST_URI): for nginx auth_request; empty = off" },
    { "authorizer_route", CT_ENUM, OFF(authorizer_route), SZ(authorizer_route),
      0, 0, "path", NULL, "path|method_path", "the route an authorizer "
      "decision matches rules against: the path without the query string, or "
      "\"METHOD path\"" },
    { "anonymous_tenant", CT_STRING, OFF(anonymous_tenant),
      SZ(anonymous_tenant), 0, 0, "", NULL, NULL, "tenant whose rules apply "
      "to authorizer requests without an API key, counted per client address; "
      "empty = such requests get 401" },
    { "status_allow", CT_STRING, OFF(status_allow), SZ(status_allow), 0, 0,
      "127.0.0.0/8, ::1", NULL, NULL, "client addresses or networks that may "
      "read /status and /dashboard without a key, for the whole pool (an "
      "admin key may from anywhere, for its own tenant only; a check key gets "
      "403); empty = admin keys only" },
    { "metrics_allow", CT_STRING, OFF(metrics_allow), SZ(metrics_allow), 0, 0,
      "127.0.0.0/8, ::1", NULL, NULL, "client addresses or networks that may "
      "read /metrics without a key, for the whole pool (an admin key may from "
      "anywhere, for its own tenant only); empty = admin keys only" },
    { "trusted_proxies", CT_STRING, OFF(trusted_proxies), SZ(trusted_proxies),
      0, 0, "", NULL, NULL, "addresses or networks (\"127.0.0.1, 10.0.0.0/8, "
      "::1\") whose X-Forwarded-For names the client; others' is ignored" },
};

#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))

static const char *const level_names[] = { "error", "warn", "info", "debug" };

static void
errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Adds one more error line to err (after a newline when there is one
 * already), as far as it fits, and counts it in *nerr. */
static void
config_error(char *err, size_t errlen, int *nerr, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void
config_error(char *err, size_t errlen, int *nerr, const char *fmt, ...)
{
    size_t used = strlen(err);
    va_list ap;

    if (*nerr > 0 && used + 1 < errlen) {
        err[used++] = '\n';
        err[used] = '\0';
    }
    (*nerr)++;
    if (used + 1 >= errlen)
        return;
    va_start(ap, fmt);
    vsnprintf(err + used, errlen - used, fmt, ap);
    va_end(ap);
}

static const struct config_key *
config_find(const char *name)
{
    size_t i;

    for (i = 0; i < NKEYS; i++)
        if (strcmp(config_keys[i].name, name) == 0)
            return &config_keys[i];
    return NULL;
}

static int
parse_long(const char *s, long *out)
{
    char *end;
    long v;

    if (*s == '\0')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int
config_apply(struct rl_config *cfg, const struct config_key *k,
    const char *value, char *err, size_t errlen)
{
    char *field = (char *)cfg + k->offset;
    char *end;
    long v;
    size_t i;

    switch (k->type) {
    case CT_LONG:
        if (parse_long(value, &v) == -1) {
            errf(err, errlen, "%s: \"%s\" is not a whole number", k->name,
                value);
            return -1;
        }
        if (v < k->min || v > k->max) {
            errf(err, errlen, "%s: %ld is out of range (%ld to %ld)",
                k->name, v, k->min, k->max);
            return -1;
        }
        *(long *)field = v;
        return 0;
    case CT_MODE:
        errno = 0;
        v = strtol(value, &end, 8);
        if (*value == '\0' || errno != 0 || *end != '\0' || v < k->min ||
            v > k->max) {
            errf(err, errlen, "%s: \"%s\" is not an octal mode (0000 to "
                "0777)", k->name, value);
            return -1;
        }
        *(unsigned *)field = (unsigned)v;
        return 0;
    case CT_LEVEL:
        for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
            if (strcmp(value, level_names[i]) == 0) {
                *(int *)field = (int)i;
                return 0;
            }
        errf(err, errlen, "%s: \"%s\" is not one of error, warn, info, debug",
            k->name, value);
        return -1;
    case CT_ENUM: {
        const char *p = k->choices;
        size_t n = strlen(value);

        while (p != NULL && *p != '\0') {
            const char *bar = strchr(p, '|');
            size_t len = bar ? (size_t)(bar - p) : strlen(p);

            if (len == n && strncmp(p, value, n) == 0) {
                memcpy(field, value, n + 1);
                return 0;
            }
            p = bar ? bar + 1 : NULL;
        }
        errf(err, errlen, "%s: \"%s\" is not one of %s", k->name, value,
            k->choices);
        return -1;
    }
    case CT_STRING:
        if (strlen(value) >= k->size) {
            errf(err, errlen, "%s: value is longer than %zu bytes", k->name,
                k->size - 1);
            return -1;
        }
        if ((long)strlen(value) < k->min) {
            errf(err, errlen, "%s: value must not be empty", k->name);
            return -1;
        }
        memcpy(field, value, strlen(value) + 1);
        return 0;
    }
    return -1;
}

void
config_defaults(struct rl_config *cfg)
{
    char err[256];
    size_t i;

    memset(cfg, 0, sizeof(*cfg));
    for (i = 0; i < NKEYS; i++)
        (void)config_apply(cfg, &config_keys[i], config_keys[i].def, err,
            sizeof(err));
    /* Defaults that are parsed further (lists of networks). */
    for (i = 0; i < NKEYS; i++)
        if (config_keys[i].def[0] != '\0' &&
            (strcmp(config_keys[i].name, "status_allow") == 0 ||
            strcmp(config_keys[i].name, "metrics_allow") == 0 ||
            strcmp(config_keys[i].name, "metrics_tenants") == 0))
            (void)config_set(cfg, config_keys[i].name, config_keys[i].def,
                err, sizeof(err));
}

/*
 * Cross-key checks that a single key cannot make, such as the shape of an
 * address.  Returns 0 or -1 with a message.
 */
static int
config_check_address(const char *key, const char *v, int allow_empty,
    char *err, size_t errlen)
{
    char host[256];
    int port;

    if (*v == '\0') {
        if (allow_empty)
            return 0;
        errf(err, errlen, "%s: an address is required", key);
        return -1;
    }
    if (strncmp(v, "unix:", 5) == 0) {
        if (v[5] != '/') {
            errf(err, errlen, "%s: \"%s\": a Unix socket path must be "
                "absolute", key, v);
            return -1;
        }
        if (strlen(v + 5) >= 108) {
            errf(err, errlen, "%s: Unix socket path is longer than 107 bytes",
                key);
            return -1;
        }
        return 0;
    }
    if (util_split_hostport(v, host, sizeof(host), &port) == -1) {
        if (strstr(v, "://") != NULL)
            errf(err, errlen, "%s: \"%s\": write the address without a "
                "scheme, as \"127.0.0.1:9000\" or \"unix:/path\"", key, v);
        else if (v[0] == '[' || (strchr(v, ':') != strrchr(v, ':')))
            errf(err, errlen, "%s: \"%s\": an IPv6 address is written "
                "\"[::1]:port\"", key, v);
        else
            errf(err, errlen, "%s: \"%s\" is not \"host:port\" (port "
                "1-65535) or \"unix:/path\"", key, v);
        return -1;
    }
    return 0;
}

/* The "redis" key: one address or a comma-separated list of them (blanks
 * around the commas are allowed), each as config_check_address wants. */
static int
config_check_redis_list(const char *v, char *err, size_t errlen)
{
    char addrs[RL_REDIS_MAX_ADDRS][RL_REDIS_ADDR_MAX];
    int i, n;

    n = util_split_list(v, addrs, RL_REDIS_MAX_ADDRS);
    if (n == -1) {
        errf(err, errlen, "redis: more than %d addresses, or one longer "
            "than %d bytes", RL_REDIS_MAX_ADDRS, RL_REDIS_ADDR_MAX - 1);
        return -1;
    }
    if (n == 0)
        return config_check_address("redis", "", 0, err, errlen);
    for (i = 0; i < n; i++)
        if (config_check_address("redis", addrs[i], 0, err, errlen) == -1)
            return -1;
    return 0;
}

/* "log" and "access_log": stderr, syslog, an absolute path whose directory
 * exists, or (access_log only) off. */
static int
config_check_log(const char *key, const char *v, char *err, size_t errlen)
{
    char dir[256];
    const char *slash;

    if (strcmp(v, "stderr") == 0 || strcmp(v, "syslog") == 0 ||
        (key[0] == 'a' && strcmp(v, "off") == 0))
        return 0;
    if (v[0] != '/') {
        errf(err, errlen, "%s: \"%s\" is not %sstderr, syslog or an "
            "absolute file path", key, v, key[0] == 'a' ? "off, " : "");
        return -1;
    }
    slash = strrchr(v, '/');
    if (slash[1] == '\0') {
        errf(err, errlen, "%s: \"%s\" names a directory, not a file", key, v);
        return -1;
    }
    snprintf(dir, sizeof(dir), "%.*s", slash == v ? 1 : (int)(slash - v), v);
    if (!util_is_dir(dir)) {
        errf(err, errlen, "%s: directory %s does not exist", key, dir);
        return -1;
    }
    return 0;
}

/* "metrics_tenants": off, all or top:N (1-1000). */
static int
config_check_top(struct rl_config *cfg, const char *v, char *err,
    size_t errlen)
{
    char *end;
    long n;

    if (strcmp(v, "off") == 0) {
        cfg->metrics_top = 0;
        return 0;
    }
    if (strcmp(v, "all") == 0) {
        cfg->metrics_top = -1;
        return 0;
    }
    if (strncmp(v, "top:", 4) == 0 && v[4] >= '0' && v[4] <= '9') {
        errno = 0;
        n = strtol(v + 4, &end, 10);
        if (errno == 0 && *end == '\0' && n >= 1 && n <= 1000) {
            cfg->metrics_top = n;
            return 0;
        }
    }
    errf(err, errlen, "metrics_tenants: \"%s\" is not off, all or top:N "
        "with N from 1 to 1000", v);
    return -1;
}

/* The directory part of an absolute path must exist: "what" names the
 * key.  Returns 0 or -1 with a message. */
static int
config_check_dir_of(const char *what, const char *path, char *err,
    size_t errlen)
{
    char dir[256];
    const char *slash = strrchr(path, '/');

    if (path[0] != '/' || slash == NULL) {
        errf(err, errlen, "%s: \"%s\" is not an absolute path", what, path);
        return -1;
    }
    if (slash[1] == '\0') {
        errf(err, errlen, "%s: \"%s\" names a directory, not a file", what,
            path);
        return -1;
    }
    snprintf(dir, sizeof(dir), "%.*s", slash == path ? 1 :
        (int)(slash - path), path);
    if (!util_is_dir(dir)) {
        errf(err, errlen, "%s: directory %s does not exist", what, dir);
        return -1;
    }
    return 0;
}

/* One process key: a user and a group must exist, and so must the
 * directory of pid_file and of a Unix listen socket. */
static int
config_check_process_key(const char *key, const char *v, char *err,
    size_t errlen)
{
    if (v[0] == '\0')
        return 0;
    if (strcmp(key, "user") == 0 && getpwnam(v) == NULL) {
        errf(err, errlen, "user: no user \"%s\" on this system", v);
        return -1;
    }
    if (strcmp(key, "group") == 0 && getgrnam(v) == NULL) {
        errf(err, errlen, "group: no group \"%s\" on this system", v);
        return -1;
    }
    if (strcmp(key, "pid_file") == 0)
        return config_check_dir_of(key, v, err, errlen);
    if (strcmp(key, "listen") == 0 && strncmp(v, "unix:", 5) == 0)
        return config_check_dir_of(key, v + 5, err, errlen);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Secrets */

/* What is shown in place of a password. */
#define CONFIG_MASK "(set)"

/* Text appended to a buffer as far as it fits. */
struct config_out {
    char *buf;
    size_t size, len;
    int overflow;
};

static void
config_put(struct config_out *o, const char *s, size_t n)
{
    if (o->overflow || o->len + n >= o->size) {
        o->overflow = 1;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

/* Whether the n bytes at s contain word, in any case. */
static int
config_has_word(const char *s, size_t n, const char *word)
{
    size_t w = strlen(word), i;

    for (i = 0; i + w <= n; i++)
        if (strncasecmp(s + i, word, w) == 0)
            return 1;
    return 0;
}

/*
 * The keyword/value form, read as libpq reads it: "keyword = value"
 * pairs apart by blanks, a value either bare (up to a blank; a backslash
 * escapes the next character) or in single quotes (with \' and \\).  Copies
 * s to o with the value of every keyword that contains "password"
 * (password, sslpassword) replaced by the mask, and the rest of the string
 * from a pair it cannot read (a keyword without '=', an unterminated
 * quote) replaced as well.  Returns how many passwords it replaced; a rest
 * counts when it mentions "pass".
 */
static int
config_mask_pairs(const char *s, struct config_out *o)
{
    const char *p = s, *key, *keyend, *val;
    int n = 0;

    while (*p != '\0') {
        if (isspace((unsigned char)*p)) {
            config_put(o, p++, 1);
            continue;
        }
        key = p;
        while (*p != '\0' && *p != '=' && !isspace((unsigned char)*p))
            p++;
        keyend = p;
        while (isspace((unsigned char)*p))
            p++;
        if (*p != '=')
            goto unreadable;
        p++;
        while (isspace((unsigned char)*p))
            p++;
        val = p;
        if (*p == '\'') {
            for (p++; *p != '\''; p++) {
                if (*p == '\0')
                    goto unreadable;
                if (*p == '\\' && p[1] != '\0')
                    p++;
            }
            p++;
        } else {
            for (; *p != '\0' && !isspace((unsigned char)*p); p++)
                if (*p == '\\' && p[1] != '\0')
                    p++;
        }
        config_put(o, key, (size_t)(val - key));
        if (config_has_word(key, (size_t)(keyend - key), "password") &&
            p - val > (*val == '\'' ? 2 : 0)) {
            config_put(o, CONFIG_MASK, strlen(CONFIG_MASK));
            n++;
        } else {
            config_put(o, val, (size_t)(p - val));
        }
    }
    return n;
unreadable:
    config_put(o, CONFIG_MASK, strlen(CONFIG_MASK));
    return n + config_has_word(key, strlen(key), "pass");
}

/* The length of the scheme of a connection URI at s ("postgresql://" or
 * "postgres://"), or 0 when s is not one. */
static size_t
config_uri_prefix(const char *s)
{
    if (strncmp(s, "postgresql://", 13) == 0)
        return 13;
    if (strncmp(s, "postgres://", 11) == 0)
        return 11;
    return 0;
}

/* Whether the n bytes at s, a URI query parameter's name, name a password
 * once percent-decoded. */
static int
config_uri_password_name(const char *s, size_t n)
{
    char name[64], hex[3] = "";
    size_t i, len = 0;

    for (i = 0; i < n && len < sizeof(name) - 1; i++) {
        if (s[i] == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) &&
            isxdigit((unsigned char)s[i + 2])) {
            memcpy(hex, s + i + 1, 2);
            name[len++] = (char)strtol(hex, NULL, 16);
            i += 2;
        } else {
            name[len++] = s[i];
        }
    }
    return config_has_word(name, len, "password");
}

/*
 * The URI form, "postgresql://[user[:password]@][host][/dbname]
 * [?param=value&...]": copies s (whose scheme is prefix bytes long) to o
 * with the password of user:password@ and the value of every query
 * parameter whose name contains "password" replaced by the mask.  libpq
 * ends the user part at the first '@' or '/'; a password with a '/' in it
 * (libpq would take it for a path) is masked too when an '@' follows
 * before the query.  Returns how many passwords it replaced.
 */
static int
config_mask_uri(const char *s, size_t prefix, struct config_out *o)
{
    const char *p = s + prefix, *from = s, *at, *colon, *end, *eq;
    int n = 0;

    at = p + strcspn(p, "@/");
    if (*at != '@')
        at = memchr(p, '@', strcspn(p, "?"));
    if (at != NULL && (colon = memchr(p, ':', (size_t)(at - p))) != NULL &&
        at > colon + 1) {
        config_put(o, s, (size_t)(colon + 1 - s));
        config_put(o, CONFIG_MASK, strlen(CONFIG_MASK));
        n++;
        from = at;
    }
    if (at != NULL)
        p = at;
    if ((p = strchr(p, '?')) == NULL) {
        config_put(o, from, strlen(from));
        return n;
    }
    config_put(o, from, (size_t)(++p - from));
    while (*p != '\0') {
        end = p + strcspn(p, "&");
        eq = memchr(p, '=', (size_t)(end - p));
        if (eq != NULL && end > eq + 1 &&
            config_uri_password_name(p, (size_t)(eq - p))) {
            config_put(o, p, (size_t)(eq + 1 - p));
            config_put(o, CONFIG_MASK, strlen(CONFIG_MASK));
            n++;
        } else {
            config_put(o, p, (size_t)(end - p));
        }
        if (*end == '&')
            config_put(o, end++, 1);
        p = end;
    }
    return n;
}

/* How many passwords libpq reads from conninfo that are not the mask, or
 * -1 when libpq cannot read conninfo at all. */
static int
config_libpq_passwords(const char *conninfo)
{
    PQconninfoOption *opts, *opt;
    char *msg = NULL;
    int n = 0;

    if ((opts = PQconninfoParse(conninfo, &msg)) == NULL) {
        PQfreemem(msg);
        return -1;
    }
    for (opt = opts; opt->keyword != NULL; opt++)
        if (opt->val != NULL && opt->val[0] != '\0' &&
            strcmp(opt->val, CONFIG_MASK) != 0 &&
            ((opt->dispchar != NULL && strchr(opt->dispchar, '*') != NULL) ||
            strstr(opt->keyword, "password") != NULL))
            n++;
    PQconninfoFree(opts);
    return n;
}

/*
 * The masking is done on the text, so that -T shows pg_conninfo as it was
 * written, and the dump still loads and dumps again to the same text;
 * libpq then reads the result, and when it finds a password there all the
 * same (a form the scan above misread), the whole string is hidden.
 */
int
config_conninfo_mask(const char *conninfo, char *out, size_t outlen)
{
    struct config_out o = { out, outlen, 0, 0 };
    size_t prefix;
    int n, before, after;

    if (outlen == 0)
        return 0;
    out[0] = '\0';
    if ((prefix = config_uri_prefix(conninfo)) > 0)
        n = config_mask_uri(conninfo, prefix, &o);
    else if (strchr(conninfo, '=') == NULL) {
        /* A database name alone, as libpq takes it. */
        config_put(&o, conninfo, strlen(conninfo));
        n = 0;
    } else
        n = config_mask_pairs(conninfo, &o);
    before = config_libpq_passwords(conninfo);
    after = o.overflow ? -1 : config_libpq_passwords(out);
    if (o.overflow || after > 0 || (after == -1 && before >= 0)) {
        snprintf(out, outlen, "%s", CONFIG_MASK);
        return n > 0 ? n : 1;
    }
    return n > before ? n : before;
}

/*
 * "pg_conninfo": libpq must be able to read it (a database name alone is
 * taken as it is, not read).  libpq's message quotes pieces of the
 * string, which may hold a password: a quoted piece of it is shown only
 * when the string with its passwords masked holds it too.
 */
static int
config_check_conninfo(const char *v, char *err, size_t errlen)
{
    PQconninfoOption *opts;
    char *msg = NULL, masked[1024], piece[1024], text[512];
    const char *p, *quote;
    size_t len = 0, n;

    if (config_uri_prefix(v) == 0 && strchr(v, '=') == NULL)
        return 0;
    if ((opts = PQconninfoParse(v, &msg)) != NULL) {
        PQconninfoFree(opts);
        return 0;
    }
    config_conninfo_mask(v, masked, sizeof(masked));
    for (p = msg != NULL ? msg : "out of memory"; *p != '\0' &&
        *p != '\n' && len + 1 < sizeof(text); p++) {
        if (*p != '"' || (quote = strchr(p + 1, '"')) == NULL) {
            text[len++] = *p;
            continue;
        }
        n = (size_t)(quote - p - 1);
        snprintf(piece, sizeof(piece), "%.*s", (int)n, p + 1);
        len += (size_t)snprintf(text + len, sizeof(text) - len, "\"%s\"",
            n < sizeof(piece) && (strstr(v, piece) == NULL ||
            strstr(masked, piece) != NULL) ? piece : "(hidden)");
        if (len >= sizeof(text))
            len = sizeof(text) - 1;
        p = quote;
    }
    text[len] = '\0';
    PQfreemem(msg);
    errf(err, errlen, "pg_conninfo: libpq cannot read it: %s", text);
    return -1;
}

/* The gid the service runs as, from "group" or else "user": 0 and *gid,
 * or -1 when the file names neither (or they do not exist here). */
static int
config_service_gid(const struct rl_config *cfg, gid_t *gid)
{
    struct passwd *pw;
    struct group *gr;

    if (cfg->group[0] != '\0' && (gr = getgrnam(cfg->group)) != NULL) {
        *gid = gr->gr_gid;
        return 0;
    }
    if (cfg->group[0] == '\0' && cfg->user[0] != '\0' &&
        (pw = getpwnam(cfg->user)) != NULL) {
        *gid = pw->pw_gid;
        return 0;
    }
    return -1;
}

/* The name of group gid, or its number. */
static void
config_group_name(gid_t gid, char *out, size_t outlen)
{
    struct group *gr = getgrgid(gid);

    if (gr != NULL)
        snprintf(out, outlen, "%s", gr->gr_name);
    else
        snprintf(out, outlen, "%ld", (long)gid);
}

int
config_redis_tls(const struct rl_config *cfg, int sentinels)
{
    if (sentinels && strcmp(cfg->redis_sentinel_tls, "same") != 0)
        return strcmp(cfg->redis_sentinel_tls, "on") == 0;
    return strcmp(cfg->redis_tls, "on") == 0;
}

int
config_check_insecure(const struct rl_config *cfg, char *msg, size_t msglen)
{
    if (!config_redis_tls(cfg, 0) && !(config_redis_tls(cfg, 1) &&
        strcmp(cfg->redis_type, "sentinel") == 0))
        return 0;
    if (strcmp(cfg->redis_tls_verify, "off") != 0)
        return 0;
    snprintf(msg, msglen, "%s: redis_tls_verify = off: Redis's certificate "
        "is not verified, so whoever can reach the path to Redis can read "
        "and change the counters; set redis_tls_ca_file instead", cfg->path);
    return 1;
}

int
config_check_secrets(const struct rl_config *cfg, char *msg, size_t msglen)
{
    char keys[128] = "", masked[sizeof(cfg->pg_conninfo)];
    char gname[64], sname[64];
    const char *path = cfg->path;
    struct stat st;
    gid_t gid;

    if (config_conninfo_mask(cfg->pg_conninfo, masked, sizeof(masked)) > 0)
        strcat(keys, ", pg_conninfo");
    if (cfg->redis_password[0] != '\0')
        strcat(keys, ", redis_password");
    if (cfg->redis_sentinel_password[0] != '\0')
        strcat(keys, ", redis_sentinel_password");
    if (keys[0] == '\0' || path[0] == '\0' || stat(path, &st) == -1)
        return 0;
    if (st.st_mode & S_IROTH) {
        snprintf(msg, msglen, "%s holds a password (%s) and every user may "
            "read it (mode %04o): chmod 640 %s (or 600)", path, keys + 2,
            (unsigned)(st.st_mode & 07777), path);
        return 1;
    }
    /* Readable by a group that is neither root's nor the service's. */
    if ((st.st_mode & S_IRGRP) && st.st_gid != 0 &&
        config_service_gid(cfg, &gid) == 0 && st.st_gid != gid) {
        config_group_name(st.st_gid, gname, sizeof(gname));
        config_group_name(gid, sname, sizeof(sname));
        snprintf(msg, msglen, "%s holds a password (%s) and group %s may "
            "read it (mode %04o), not only the service's group %s: chgrp "
            "%s %s (or chmod 600)", path, keys + 2, gname,
            (unsigned)(st.st_mode & 07777), sname, sname, path);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */

/* Applies one key to cfg and runs its cross checks. */
static int
config_set_one(struct rl_config *cfg, const struct config_key *k,
    const char *key, const char *value, char *err, size_t errlen)
{
    if (config_apply(cfg, k, value, err, errlen) == -1)
        return -1;
    if (strcmp(key, "listen") == 0)
        return config_check_address(key, value, 1, err, errlen);
    if (strcmp(key, "redis") == 0)
        return config_check_redis_list(value, err, errlen);
    if (strcmp(key, "pg_conninfo") == 0)
        return config_check_conninfo(value, err, errlen);
    if (strcmp(key, "trusted_proxies") == 0 ||
        strcmp(key, "status_allow") == 0 ||
        strcmp(key, "metrics_allow") == 0) {
        struct addr_net *nets = key[0] == 't' ? cfg->trusted :
            key[0] == 's' ? cfg->status_nets : cfg->metrics_nets;
        int *count = key[0] == 't' ? &cfg->ntrusted :
            key[0] == 's' ? &cfg->nstatus : &cfg->nmetrics;
        char msg[128];
        int n = addr_parse_list(value, nets, 32, msg, sizeof(msg));

        if (n == -1) {
            errf(err, errlen, "%s: %s", key, msg);
            return -1;
        }
        *count = n;
    }
    if (strcmp(key, "log") == 0 || strcmp(key, "access_log") == 0)
        return config_check_log(key, value, err, errlen);
    if (strcmp(key, "metrics_tenants") == 0)
        return config_check_top(cfg, value, err, errlen);
    if (strcmp(key, "anonymous_tenant") == 0 && value[0] != '\0' &&
        validate_tenant_name(key, value, err, errlen) == -1)
        return -1;
    if (strcmp(key, "authorizer_path") == 0 && value[0] != '\0' &&
        value[0] != '/') {
        errf(err, errlen, "authorizer_path: \"%s\" must start with '/'",
            value);
        return -1;
    }
    return 0;
}

int
config_set(struct rl_config *cfg, const char *key, const char *value,
    char *err, size_t errlen)
{
    const struct config_key *k = config_find(key);
    static struct rl_config tmp;
    size_t i, best = SIZE_MAX, d;
    const char *hint = NULL;

    if (k == NULL) {
        for (i = 0; i < NKEYS; i++) {
            d = util_edit_distance(key, config_keys[i].name);
            if (d < best) {
                best = d;
                hint = config_keys[i].name;
            }
        }
        if (hint != NULL && best <= 3)
            errf(err, errlen, "unknown key \"%s\" (did you mean \"%s\"?)",
                key, hint);
        else
            errf(err, errlen, "unknown key \"%s\"", key);
        return -1;
    }
    /* Work on a copy so that a rejected value leaves cfg as it was. */
    tmp = *cfg;
    if (config_set_one(&tmp, k, key, value, err, errlen) == -1)
        return -1;
    *cfg = tmp;
    return 0;
}

/* The line that set key name (0: it has its default). */
static unsigned
config_line(const unsigned *seen, const char *name)
{
    size_t i;

    for (i = 0; i < NKEYS; i++)
        if (strcmp(config_keys[i].name, name) == 0)
            return seen[i];
    return 0;
}

/*
 * The redis_tls* keys that cannot work: TLS to a unix: address, a client
 * certificate without its key (or a key without its certificate), a file
 * this user cannot read, a TLS setting with TLS off everywhere.
 */
static void
config_check_redis_tls(const struct rl_config *cfg, const unsigned *seen,
    const char *path, char *err, size_t errlen, int *nerr)
{
    static const char *const files[] = { "redis_tls_ca_file",
        "redis_tls_cert_file", "redis_tls_key_file" };
    const char *const fval[] = { cfg->redis_tls_ca_file,
        cfg->redis_tls_cert_file, cfg->redis_tls_key_file };
    char addrs[RL_REDIS_MAX_ADDRS][RL_REDIS_ADDR_MAX];
    int sentinel = strcmp(cfg->redis_type, "sentinel") == 0;
    int tls = config_redis_tls(cfg, 0), stls = config_redis_tls(cfg, 1);
    int i, n;

    if (!sentinel && config_line(seen, "redis_sentinel_tls") != 0 &&
        strcmp(cfg->redis_sentinel_tls, "same") != 0)
        config_error(err, errlen, nerr, "%s:%u: redis_sentinel_tls applies "
            "only to redis_type = sentinel", path,
            config_line(seen, "redis_sentinel_tls"));
    /* The addresses in "redis" are the data nodes', or the sentinels'. */
    if (sentinel ? stls : tls) {
        const char *key = sentinel && strcmp(cfg->redis_sentinel_tls,
            "same") != 0 ? "redis_sentinel_tls" : "redis_tls";

        n = util_split_list(cfg->redis, addrs, RL_REDIS_MAX_ADDRS);
        for (i = 0; i < n; i++)
            if (strncmp(addrs[i], "unix:", 5) == 0) {
                config_error(err, errlen, nerr, "%s:%u: redis: \"%s\": "
                    "%s = on (line %u) needs TCP addresses (host:port)",
                    path, config_line(seen, "redis"), addrs[i], key,
                    config_line(seen, key));
                break;
            }
    }
    if (!tls && !stls) {
        /* (Set to what is not the default: the shipped file sets every
         * key to its default.) */
        static const char *const keys[] = { "redis_tls_ca_file",
            "redis_tls_cert_file", "redis_tls_key_file",
            "redis_tls_server_name", "redis_tls_verify" };
        const int set[] = { fval[0][0] != '\0', fval[1][0] != '\0',
            fval[2][0] != '\0', cfg->redis_tls_server_name[0] != '\0',
            strcmp(cfg->redis_tls_verify, "on") != 0 };

        for (i = 0; i < 5; i++)
            if (set[i])
                config_error(err, errlen, nerr, "%s:%u: %s applies only "
                    "with redis_tls = on%s", path, config_line(seen,
                    keys[i]), keys[i], sentinel ? " (or redis_sentinel_tls "
                    "= on)" : "");
        return;
    }
    if (cfg->redis_tls_cert_file[0] != '\0' &&
        cfg->redis_tls_key_file[0] == '\0')
        config_error(err, errlen, nerr, "%s:%u: redis_tls_cert_file needs "
            "redis_tls_key_file (the certificate's private key)", path,
            config_line(seen, "redis_tls_cert_file"));
    if (cfg->redis_tls_key_file[0] != '\0' &&
        cfg->redis_tls_cert_file[0] == '\0')
        config_error(err, errlen, nerr, "%s:%u: redis_tls_key_file needs "
            "redis_tls_cert_file (the client certificate)", path,
            config_line(seen, "redis_tls_key_file"));
    for (i = 0; i < 3; i++)
        if (fval[i][0] != '\0' && access(fval[i], R_OK) != 0)
            config_error(err, errlen, nerr, "%s:%u: %s: %s: %s", path,
                config_line(seen, files[i]), files[i], fval[i],
                strerror(errno));
}

/*
 * The combinations of the redis_* keys that cannot work, each reported at
 * the line of the key that is out of place.
 */
static void
config_check_redis(const struct rl_config *cfg, const unsigned *seen,
    const char *path, char *err, size_t errlen, int *nerr)
{
    char addrs[RL_REDIS_MAX_ADDRS][RL_REDIS_ADDR_MAX];
    const char *type = cfg->redis_type;
    unsigned tline = config_line(seen, "redis_type");
    char how[64];
    int i, n;

    if (tline)
        snprintf(how, sizeof(how), "redis_type = %s on line %u", type,
            tline);
    else
        snprintf(how, sizeof(how), "redis_type is %s by default", type);
    n = util_split_list(cfg->redis, addrs, RL_REDIS_MAX_ADDRS);
    if (strcmp(type, "single") == 0 && n > 1)
        config_error(err, errlen, nerr, "%s:%u: redis lists %d addresses, "
            "but %s: a list is for redis_type = cluster (seed nodes) or "
            "sentinel (the sentinels)", path, config_line(seen, "redis"), n,
            how);
    if (strcmp(type, "cluster") == 0) {
        for (i = 0; i < n; i++)
            if (strncmp(addrs[i], "unix:", 5) == 0) {
                config_error(err, errlen, nerr, "%s:%u: redis: \"%s\": "
                    "the nodes of a Redis Cluster name each other by TCP "
                    "address; list seed nodes as host:port", path,
                    config_line(seen, "redis"), addrs[i]);
                break;
            }
        if (cfg->redis_db != 0)
            config_error(err, errlen, nerr, "%s:%u: redis_db = %ld, but %s: "
                "a Redis Cluster has only database 0", path,
                config_line(seen, "redis_db"), cfg->redis_db, how);
    }
    if (strcmp(type, "sentinel") == 0) {
        if (cfg->redis_sentinel_master[0] == '\0')
            config_error(err, errlen, nerr, "%s:%u: redis_type = sentinel "
                "needs redis_sentinel_master (the name the sentinels "
                "monitor)", path, tline);
    } else {
        static const char *const only[] = { "redis_sentinel_master",
            "redis_sentinel_username", "redis_sentinel_password" };
        const char *const val[] = { cfg->redis_sentinel_master,
            cfg->redis_sentinel_username, cfg->redis_sentinel_password };

        for (i = 0; i < 3; i++)
            if (val[i][0] != '\0')
                config_error(err, errlen, nerr, "%s:%u: %s applies only to "
                    "redis_type = sentinel, but %s", path,
                    config_line(seen, only[i]), only[i], how);
    }
    config_check_redis_tls(cfg, seen, path, err, errlen, nerr);
    if (cfg->redis_username[0] != '\0' && cfg->redis_password[0] == '\0')
        config_error(err, errlen, nerr, "%s:%u: redis_username needs "
            "redis_password", path, config_line(seen, "redis_username"));
    if (cfg->redis_sentinel_username[0] != '\0' &&
        cfg->redis_sentinel_password[0] == '\0')
        config_error(err, errlen, nerr, "%s:%u: redis_sentinel_username "
            "needs redis_sentinel_password", path,
            config_line(seen, "redis_sentinel_username"));
}

int
config_check_process(const struct rl_config *cfg, char *err, size_t errlen)
{
    const char *const keys[] = { "listen", "user", "group", "pid_file" };
    const char *const vals[] = { cfg->listen, cfg->user, cfg->group,
        cfg->pid_file };
    const unsigned lines[] = { cfg->line_listen, cfg->line_user,
        cfg->line_group, cfg->line_pid_file };
    char msg[512];
    int i, nerr = err[0] != '\0', before = nerr;

    for (i = 0; i < 4; i++)
        if (config_check_process_key(keys[i], vals[i], msg, sizeof(msg)) ==
            -1)
            config_error(err, errlen, &nerr, "%s:%u: %s", cfg->loaded_from,
                lines[i], msg);
    return nerr > before ? -1 : 0;
}

static char *
trim(char *s)
{
    char *e;

    while (isspace((unsigned char)*s))
        s++;
    e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

int
config_load(struct rl_config *cfg, const char *path, char *err, size_t errlen)
{
    FILE *fp;
    char line[2048], msg[512];
    char *p, *eq, *key, *value;
    unsigned seen[NKEYS];
    int lineno = 0, nerr = 0, c;
    size_t i, len;

    memset(seen, 0, sizeof(seen));
    if (errlen > 0)
        err[0] = '\0';
    if ((fp = fopen(path, "r")) == NULL) {
        errf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    /* Every error of the file is reported, one line each, not only the
     * first; the file is refused when there is any. */
    while (fgets(line, sizeof(line), fp) != NULL) {
        lineno++;
        len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(fp)) {
            config_error(err, errlen, &nerr, "%s:%d: line is longer than "
                "%zu bytes", path, lineno, sizeof(line) - 2);
            while ((c = getc(fp)) != EOF && c != '\n')
                ;
            continue;
        }
        p = trim(line);
        if (*p == '\0' || *p == '#')
            continue;
        if ((eq = strchr(p, '=')) == NULL) {
            config_error(err, errlen, &nerr, "%s:%d: expected \"key = "
                "value\"", path, lineno);
            continue;
        }
        *eq = '\0';
        key = trim(p);
        value = trim(eq + 1);
        len = strlen(value);
        if (len > 0 && value[0] == '"') {
            if (len < 2 || value[len - 1] != '"') {
                config_error(err, errlen, &nerr, "%s:%d: unbalanced quotes",
                    path, lineno);
                continue;
            }
            value[len - 1] = '\0';
            value++;
        }
        if (config_set(cfg, key, value, msg, sizeof(msg)) == -1) {
            config_error(err, errlen, &nerr, "%s:%d: %s", path, lineno, msg);
            continue;
        }
        for (i = 0; i < NKEYS; i++)
            if (strcmp(config_keys[i].name, key) == 0) {
                if (seen[i])
                    config_error(err, errlen, &nerr, "%s:%d: \"%s\" is "
                        "already set on line %u", path, lineno, key, seen[i]);
                else
                    seen[i] = (unsigned)lineno;
            }
    }
    if (ferror(fp))
        config_error(err, errlen, &nerr, "%s: %s", path, strerror(errno));
    fclose(fp);
    cfg->line_listen = config_line(seen, "listen");
    cfg->line_user = config_line(seen, "user");
    cfg->line_group = config_line(seen, "group");
    cfg->line_pid_file = config_line(seen, "pid_file");
    util_copy(cfg->loaded_from, sizeof(cfg->loaded_from), path);
    if (nerr == 0)
        config_check_redis(cfg, seen, path, err, errlen, &nerr);
    if (nerr > 0)
        return -1;
    util_copy(cfg->path, sizeof(cfg->path), path);
    return 0;
}

static void
config_value(const struct rl_config *cfg, const struct config_key *k,
    char *out, size_t outlen)
{
    const char *field = (const char *)cfg + k->offset;
    char masked[sizeof(cfg->pg_conninfo)];

    switch (k->type) {
    case CT_LONG:
        snprintf(out, outlen, "%ld", *(const long *)field);
        break;
    case CT_MODE:
        snprintf(out, outlen, "%04o", *(const unsigned *)field);
        break;
    case CT_LEVEL:
        snprintf(out, outlen, "%s", level_names[*(const int *)field]);
        break;
    case CT_ENUM:
    case CT_STRING:
        /* Secrets are not shown, only whether there is one. */
        if (strstr(k->name, "password") != NULL && field[0] != '\0')
            snprintf(out, outlen, "\"" CONFIG_MASK "\"");
        else if (k->offset == OFF(pg_conninfo)) {
            config_conninfo_mask(field, masked, sizeof(masked));
            snprintf(out, outlen, "\"%s\"", masked);
        } else
            snprintf(out, outlen, "\"%s\"", field);
        break;
    }
}

void
config_dump(const struct rl_config *cfg, FILE *fp)
{
    char v[1100];
    size_t i;

    for (i = 0; i < NKEYS; i++) {
        config_value(cfg, &config_keys[i], v, sizeof(v));
        fprintf(fp, "%s = %s\n", config_keys[i].name, v);
    }
}

/* Writes text word-wrapped at width, each line indented. */
static void
config_wrap(FILE *fp, const char *text, int indent, int width)
{
    const char *p = text, *space, *end;
    int col = 0, n;

    while (*p != '\0') {
        space = strchr(p, ' ');
        end = space ? space : p + strlen(p);
        n = (int)(end - p);
        if (col > 0 && col + 1 + n > width) {
            fputc('\n', fp);
            col = 0;
        }
        if (col == 0)
            col = fprintf(fp, "%*s%.*s", indent, "", n, p);
        else
            col += fprintf(fp, " %.*s", n, p);
        p = space ? space + 1 : end;
    }
    fputc('\n', fp);
}

void
config_help(FILE *fp)
{
    const struct config_key *k;
    size_t i;

    for (i = 0; i < NKEYS; i++) {
        k = &config_keys[i];
        fprintf(fp, "  %-26s default \"%s\"", k->name, k->def);
        if (k->type == CT_LONG)
            fprintf(fp, ", %ld to %ld", k->min, k->max);
        fputc('\n', fp);
        config_wrap(fp, k->help, 6, 72);
    }
}

/* The name of a key's type in the listing of config_keys_print. */
static const char *
config_type_name(enum config_type type)
{
    switch (type) {
    case CT_LONG:
        return "integer";
    case CT_MODE:
        return "mode";
    case CT_STRING:
        return "string";
    case CT_LEVEL:
    case CT_ENUM:
        return "enum";
    }
    return "-";
}

void
config_keys_print(FILE *fp)
{
    const struct config_key *k;
    char min[32], max[32];
    size_t i, j;

    for (i = 0; i < NKEYS; i++) {
        k = &config_keys[i];
        if (k->type == CT_LONG) {
            snprintf(min, sizeof(min), "%ld", k->min);
            snprintf(max, sizeof(max), "%ld", k->max);
        } else if (k->type == CT_MODE) {
            snprintf(min, sizeof(min), "%04lo", (unsigned long)k->min);
            snprintf(max, sizeof(max), "%04lo", (unsigned long)k->max);
        } else {
            snprintf(min, sizeof(min), "-");
            snprintf(max, sizeof(max), "-");
        }
        /* An empty default is written "" so that no field is empty. */
        fprintf(fp, "%s\t%s\t%s\t%s\t%s\t%s\t", k->name,
            config_type_name(k->type), k->def[0] != '\0' ? k->def : "\"\"",
            min, max, k->unit != NULL ? k->unit : "-");
        if (k->type == CT_LEVEL)
            for (j = 0; j < sizeof(level_names) / sizeof(level_names[0]);
                j++)
                fprintf(fp, "%s%s", j > 0 ? "|" : "", level_names[j]);
        else
            fputs(k->choices != NULL ? k->choices : "-", fp);
        fputc('\n', fp);
    }
}
