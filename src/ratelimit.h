/*
 * ratelimit.h -- the structures and functions that cross file boundaries.
 *
 * ratelimit-fcgi is a FastCGI rate limiter: a master process binds (or
 * inherits) a listening socket and pre-forks workers; each worker accepts
 * FastCGI requests, authenticates the caller's API key against PostgreSQL
 * through a per-process cache, picks the tenant's matching rule and asks
 * Redis, in one EVALSHA, whether every limit of that rule allows the
 * request.  The pure parts (configuration, request parsing, rule matching,
 * caches, reply decoding, response formatting) take plain structs and
 * strings so that they are unit tested without a network.
 *
 * Conventions: functions return 0 on success and -1 (or a negative errno
 * for system-facing helpers) on failure; error text goes into a caller
 * supplied buffer or the log.  Names are prefixed by the file they live in.
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define RL_VERSION "0.1.0"

/* Bounds of the check API (compatible with the original Go service). */
#define RL_ROUTE_MAX 512
#define RL_SUBJECT_MAX 256
#define RL_COST_MAX 1000000
#define RL_KEY_MAX 256          /* longest API key we will even hash */
#define RL_MAX_LIMITS 8         /* limits per rule */
#define RL_MAX_RULES 10000      /* rules per tenant: the schema refuses more
                                   (schema/004_rule_bound.sql), the service
                                   answers 503 past it */
#define RL_NAME_MAX 64
#define RL_UUID_LEN 36

/* ------------------------------------------------------------------ */
/* config.c */

enum rl_log_level { RL_LOG_ERROR = 0, RL_LOG_WARN, RL_LOG_INFO, RL_LOG_DEBUG };

struct rl_config {
    char path[512];             /* the file it was read from, or "" */
    char listen[256];           /* "" = fd 0, "unix:/path", "host:port" */
    unsigned listen_mode;       /* Unix socket mode */
    char listen_owner[64];
    char listen_group[64];
    long listen_backlog;
    char user[64];              /* run as this user after binding; "" = as is */
    char group[64];             /* "" = the user's primary group */
    char allow_root[4];         /* "off" or "on": workers may run as root */
    char pid_file[256];         /* the master's pid; "" = none */
    char loaded_from[512];      /* the file last read, valid or not */
    unsigned line_listen, line_user, line_group, line_pid_file; /* 0: unset */
    long workers;               /* 0 = serve in the master's process */
    long max_requests;          /* 0 = never recycle */
    long request_timeout;       /* seconds; 0 = off */
    long fcgi_read_timeout_ms;  /* accept (or first byte) to end of input */
    long fcgi_keepalive_timeout_ms; /* idle kept-alive connection */
    long worker_connections;    /* connections a worker holds at once */
    long max_worker_rss_mb;     /* 0 = off */
    char pg_conninfo[1024];
    long pg_connect_timeout_ms;
    long pg_query_timeout_ms;   /* a whole lookup, connect included */
    char redis_type[16];        /* "single", "cluster" or "sentinel" */
    char redis[1024];           /* "host:port" or "unix:/path"; a list for
                                   cluster (seeds) and sentinel */
    char redis_sentinel_master[128];
    char redis_username[128];
    char redis_password[256];
    char redis_sentinel_username[128];
    char redis_sentinel_password[256];
    long redis_db;
    long redis_connect_timeout_ms;
    long redis_command_timeout_ms;
    long redis_backoff_ms;
    char redis_tls[4];          /* "off" or "on": TLS to the data nodes */
    char redis_tls_ca_file[256];  /* "" = the system's CA store */
    char redis_tls_cert_file[256]; /* client certificate (mutual TLS) */
    char redis_tls_key_file[256];
    char redis_tls_server_name[256]; /* "" = the host of the address */
    char redis_tls_verify[4];   /* "on" or "off" */
    char redis_sentinel_tls[8]; /* "same" (as redis_tls), "on" or "off" */
    long key_cache_ttl;         /* seconds */
    long key_cache_negative_ttl;
    long key_cache_size;
    long key_cache_negative_size;
    long key_lookup_rate;       /* per second and worker; 0 = unlimited */
    long key_filter_mb;         /* the filter of active keys; 0 = none */
    long rule_cache_ttl;
    long rule_cache_size;       /* tenants */
    long rule_cache_worker_mb;  /* a worker's rules, in MiB */
    long rule_cache_shared_mb;  /* the pool's ring of large rule sets */
    long overlimit_cache_size;  /* denials remembered; 0 = off */
    long overlimit_cache_min_ms;
    long tenant_counter_budget; /* new counters a tenant may make per
                                   RL_BUDGET_WINDOW_S; 0 = unlimited */
    long max_body_size;         /* bytes */
    long retry_after_unavailable; /* seconds, Retry-After on 503 */
    int log_level;              /* enum rl_log_level */
    char log_target[256];       /* "stderr", "syslog" or a file */
    char access_log[256];       /* "off", "stderr", "syslog" or a file */
    char access_log_format[8];  /* "logfmt" or "json" */
    long slowlog_ms;            /* 0 = off */
    long denial_log_rate;       /* denial lines a second, pool-wide */
    char metrics_tenants[16];   /* "off", "top:N" or "all" */
    long metrics_top;           /* from it: 0 off, -1 all, else N */
    char authorizer_path[256];  /* Responder path answering as authorizer */
    char authorizer_route[16];  /* "path" or "method_path" */
    char ready_requires_postgresql[4]; /* "off" or "on" */
    char anonymous_tenant[129]; /* tenant of requests without a key */
    char trusted_proxies[1024]; /* as written; parsed into trusted[] */
    int ntrusted;
    struct addr_net {
        int family;             /* AF_INET or AF_INET6 */
        unsigned char addr[16];
        int prefix;
    } trusted[32];
    char status_allow[1024];    /* who may read /status (and /metrics) */
    struct addr_net status_nets[32];
    int nstatus;
    char metrics_allow[1024];
    struct addr_net metrics_nets[32];
    int nmetrics;
};

/* Fills cfg with the default of every key. */
void config_defaults(struct rl_config *cfg);

/* Reads a "key = value" file over the defaults.  Returns 0, or -1 with a
 * message of the form "FILE:LINE: ..." in err. */
int config_load(struct rl_config *cfg, const char *path, char *err,
    size_t errlen);

/* Sets one key from its text value.  Returns 0, or -1 with a message
 * (without file:line) in err. */
int config_set(struct rl_config *cfg, const char *key, const char *value,
    char *err, size_t errlen);

/* What only the service checks, for its start and -t (ratelimitctl reads
 * the same file on hosts where these need not hold): user and group
 * exist, the directories of pid_file and of a Unix listen socket exist.
 * Returns 0, or -1 with one "FILE:LINE: ..." line per error appended to
 * err (after a newline when err is not empty). */
int config_check_process(const struct rl_config *cfg, char *err,
    size_t errlen);

/* Writes every key with its current value, as a loadable file; a
 * password is written "(set)", alone or inside pg_conninfo. */
void config_dump(const struct rl_config *cfg, FILE *fp);

/* Copies the libpq connection string conninfo (keyword/value or URI form)
 * to out as it is written, except that the value of every password in it
 * (password, sslpassword; in a URI user:PASSWORD@ and ?password=) is
 * replaced by "(set)", as is everything from a pair libpq could not read
 * on.  When the result does not fit, or libpq still reads a password from
 * it, out is "(set)" alone.  Returns the number of passwords hidden, 0
 * when conninfo holds none. */
int config_conninfo_mask(const char *conninfo, char *out, size_t outlen);

/* Whether the file cfg was loaded from (cfg->path) holds a password (a
 * non-empty redis_password or redis_sentinel_password, or one in
 * pg_conninfo) and users other than the service's may read it: mode o+r,
 * or g+r for a group that is neither root's nor the service's (of "group",
 * else of "user"; not checked when neither is set).  Returns 1 with a
 * one-line warning naming the file and its mode in msg, else 0. */
int config_check_secrets(const struct rl_config *cfg, char *msg,
    size_t msglen);

/* Whether connections to the data nodes (sentinels 0) or to the sentinels
 * (sentinels 1) are TLS: redis_tls, or redis_sentinel_tls unless it is
 * "same".  Returns 1 or 0. */
int config_redis_tls(const struct rl_config *cfg, int sentinels);

/* Whether TLS to Redis is on without verifying Redis's certificate
 * (redis_tls_verify = off).  Returns 1 with a one-line warning naming the
 * file in msg, else 0; -t prints it, the service logs it at start. */
int config_check_insecure(const struct rl_config *cfg, char *msg,
    size_t msglen);

/* Writes the key table (name, default, bounds, meaning). */
void config_help(FILE *fp);

/* Writes the key table as data, one line a key and seven tab-separated
 * fields: name, type (integer, mode, string, enum), default ("" when
 * empty), min and max (integers and modes; else "-"), unit (or "-") and
 * the choices of an enum ("a|b"; else "-"). */
void config_keys_print(FILE *fp);

/* ------------------------------------------------------------------ */
/* log.c */

/* target: "stderr", "syslog" or a file (opened onto fd 2).  -1 when the
 * file cannot be opened (said on stderr). */
int log_init(const char *ident, const char *target, int level);

/* Reopens where log lines go, the access log too (SIGUSR1, after
 * logrotate). */
void log_reopen(void);

/* The access log: "off", "stderr", "syslog" or a file; 0 or -1 (logged).
 * log_access writes one whole line (with its newline). */
int log_access_open(const char *target);
int log_access_on(void);
void log_access(const char *line, size_t len);

/* Or'ed into a level: the line is not held back by the per-site limit
 * (the caller bounds it itself). */
#define RL_LOG_UNLIMITED 0x100
void log_set_level(int level);

/* Writes one line, unless the same call site (file:line) already wrote one
 * in the last LOG_LIMIT_MS: then the line is only counted, and the count is
 * reported as "repeated N times" with the site's next line written (or,
 * when the site falls silent, with the next line written by any site, and
 * by log_flush).  Debug lines are never held back. */
void log_emit(int level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Writes the "repeated N times" summaries still pending (at exit). */
void log_flush(void);

/*
 * The decision behind log_emit's limit, apart from the clock and the
 * output so that it is tested on its own.  One slot per call site seen;
 * when every slot is taken, the site written longest ago gives up its slot
 * (and a count it had not reported yet).
 */
#define LOG_LIMIT_MS 1000
#define LOG_LIMIT_SITES 64

struct log_site {
    const char *file;           /* NULL: a free slot */
    int line;
    int level;
    int64_t written_ms;         /* when its last line was written */
    unsigned long held;         /* lines held back since then */
    char text[200];             /* the last line written (for summaries) */
};

struct log_limit {
    struct log_site site[LOG_LIMIT_SITES];
};

/* An event of call site file:line at now_ms (any monotonic clock).
 * Returns the site's slot when the line is to be written, with *repeated
 * set to the number of lines held back since the site's last line (to be
 * reported with this one), or -1 when it is held back (and counted). */
int log_limit_event(struct log_limit *ll, const char *file, int line,
    int64_t now_ms, unsigned long *repeated);

/* A site whose lines were held back and that has written nothing for
 * LOG_LIMIT_MS before now_ms: returns its slot, moving the count to
 * *repeated (the caller writes the summary); -1 when there is none. */
int log_limit_overdue(struct log_limit *ll, int64_t now_ms,
    unsigned long *repeated);

#define log_error(...) log_emit(RL_LOG_ERROR, __FILE__, __LINE__, __VA_ARGS__)
#define log_warn(...) log_emit(RL_LOG_WARN, __FILE__, __LINE__, __VA_ARGS__)
#define log_info(...) log_emit(RL_LOG_INFO, __FILE__, __LINE__, __VA_ARGS__)
#define log_debug(...) log_emit(RL_LOG_DEBUG, __FILE__, __LINE__, __VA_ARGS__)

/* ------------------------------------------------------------------ */
/* addr.c: client addresses and trusted proxies */

/* Parses "127.0.0.1, 10.0.0.0/8 ::1" into nets.  Returns the count, or -1
 * with a message naming the bad entry. */
int addr_parse_list(const char *s, struct addr_net *nets, int max,
    char *err, size_t errlen);

/* 1 when ip (text) is inside one of the nets, else 0. */
int addr_match(const struct addr_net *nets, int n, const char *ip);

/* The client's address, for the limiter and for status_allow and
 * metrics_allow alike: the peer itself, or, when the peer is a trusted
 * proxy and X-Forwarded-For is given, the rightmost address in it that is
 * not a trusted proxy (the leftmost when all are).  Writes it to out.
 * Returns 0, or -1 when the client is unknown: X-Forwarded-For came from
 * a peer that is not a trusted proxy, or a trusted proxy named something
 * that is not an address.  out is the peer then, which the limiter counts
 * by; no address may grant access. */
int addr_client(const char *peer, const char *xff,
    const struct addr_net *nets, int n, char *out, size_t outlen);

/* ------------------------------------------------------------------ */
/* buf.c: a growable byte buffer */

/* A growable byte buffer; data is always NUL terminated. */
struct rl_buf {
    char *data;
    size_t len;
    size_t cap;
};

/* buf_init makes an empty buffer (data NULL); buf_free releases the memory
 * and leaves the buffer as buf_init does; buf_reset empties it and keeps
 * the memory.  The appending functions return 0, or -1 when out of memory
 * (the buffer is then unchanged). */
void buf_init(struct rl_buf *b);
void buf_free(struct rl_buf *b);
void buf_reset(struct rl_buf *b);
int buf_append(struct rl_buf *b, const char *s, size_t n);
int buf_puts(struct rl_buf *b, const char *s);
/* buf_put_ll: v in decimal; buf_json_str: s as a quoted JSON string. */
int buf_put_ll(struct rl_buf *b, long long v);
int buf_json_str(struct rl_buf *b, const char *s);
int buf_printf(struct rl_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ------------------------------------------------------------------ */
/* util.c */

/* The big-endian IEEE double at p[0..7], as Lua's struct.pack('>d') in
 * the check script writes the numbers it stores and answers. */
double util_be_double(const unsigned char *p);

/* SHA-256 of data into out[32]; util_sha256_hex: lowercase hex of it into
 * out[65]. */
void util_sha256(const void *data, size_t len, unsigned char out[32]);
void util_sha256_hex(const void *data, size_t len, char out[65]);

/* util_sha256 that remembers its last input (up to 256 bytes) and digest
 * in m (zeroed to start): the same input again costs a compare.  For what
 * repeats from check to check (a tenant's id, a subject, counter keys);
 * never for secrets, which would stay in memory. */
struct sha256_memo {
    int valid;
    size_t len;
    unsigned char in[256];
    unsigned char out[32];
};
void util_sha256_memo(struct sha256_memo *m, const void *data, size_t len,
    unsigned char out[32]);

/* v in decimal into out, NUL terminated (what "%lld" prints, without a
 * printf); returns its length. */
size_t util_lltoa(long long v, char out[21]);

/* Lowercase hex of n bytes into out[2 * n + 1], NUL terminated. */
void util_hex(const void *in, size_t n, char *out);

/* The value of hex digit c (either case), or -1. */
int util_hex_digit(int c);

/* The Levenshtein distance between a and b, for "did you mean" hints;
 * SIZE_MAX when either is longer than 63 bytes. */
size_t util_edit_distance(const char *a, const char *b);

/* The n bytes whose 2n hex digits (either case) are hex[0..hexlen): 0, or
 * -1 when hexlen is not 2n or a character is not a hex digit. */
int util_unhex(const char *hex, size_t hexlen, void *out, size_t n);

/* Copies src into dst[size], cut to fit and NUL terminated (size > 0).
 * Returns strlen(src): the copy was cut when that is >= size. */
size_t util_copy(char *dst, size_t size, const char *src);

/* Splits "host:port" or "[v6addr]:port" into host (without brackets) and
 * port (1-65535).  Returns 0, or -1 when addr has another shape or host
 * does not fit in hostlen. */
int util_split_hostport(const char *addr, char *host, size_t hostlen,
    int *port);

/* The "redis" key's list: at most RL_REDIS_MAX_ADDRS addresses, each
 * shorter than RL_REDIS_ADDR_MAX. */
#define RL_REDIS_MAX_ADDRS 16
#define RL_REDIS_ADDR_MAX 128

/* Splits a comma-separated list into out[max], blanks around the items
 * removed, empty items skipped.  Returns the number of items, or -1 when
 * there are more than max or one does not fit in RL_REDIS_ADDR_MAX. */
int util_split_list(const char *list, char (*out)[RL_REDIS_ADDR_MAX],
    int max);

/* Monotonic milliseconds and wall-clock seconds. */
int64_t util_now_ms(void);
int64_t util_now_us(void);     /* monotonic, microseconds */
int64_t util_wall_s(void);

/* Whether path names a directory (following links). */
int util_is_dir(const char *path);

/* Reads /dev/urandom (getrandom); returns 0 or -1. */
int util_random(void *out, size_t n);

/* The escape of byte c in a log line or a /status field: "\t", "\n",
 * "\r", "\\" for a backslash, "\xNN" for the other bytes below 0x20 and
 * 0x7f; written to out, NUL terminated.  Returns its length, or 0 (out
 * empty) when c stands for itself. */
size_t util_escape_char(unsigned char c, char out[5]);

/* s (len bytes) escaped so into out[size], NUL terminated.  What does not
 * fit is cut before an escape or a UTF-8 sequence, and "..." marks the cut
 * (when size >= 4).  Returns the length written. */
size_t util_escape(char *out, size_t size, const char *s, size_t len);

/* ------------------------------------------------------------------ */
/* fcgi.c: FastCGI records read ahead of libfcgi */

#define FCGI_PARAMS_MAX 65536   /* bytes of PARAMS content per request */

enum { FCGI_SCAN_BAD = -1, FCGI_SCAN_MORE = 0, FCGI_SCAN_DONE = 1 };

struct fcgi_scan {
    int request_id;
    int role;                   /* 1 Responder, 2 Authorizer */
    int keep_conn;              /* FCGI_KEEP_CONN was set */
    int nparams;
    int nul_in_key;             /* a NUL inside HTTP_X_API_KEY/AUTHORIZATION */
    int nul_in_value;           /* a NUL inside any other parameter */
    size_t skip;                /* leading bytes of an earlier request's
                                   input, to be read off first */
    size_t params_len;          /* PARAMS content bytes */
    size_t params_end;          /* offset after the empty PARAMS record */
    size_t stdin_len;           /* STDIN content bytes seen */
    size_t stdin_end;           /* offset after the empty STDIN record */
    const char *error;          /* why, on FCGI_SCAN_BAD */
};

/*
 * Walks the records in buf[0..len): BEGIN_REQUEST, then PARAMS up to the
 * empty PARAMS record and, when want_stdin is set and the role is
 * Responder, STDIN up to the empty STDIN record.  Returns FCGI_SCAN_DONE
 * when all of that is in buf, FCGI_SCAN_MORE when more bytes are needed
 * (or, with s->skip > 0, when the caller must first read off s->skip bytes
 * of an earlier request's input), and FCGI_SCAN_BAD with s->error when the
 * records are malformed, a management record, too large, or announce
 * lengths they do not hold.
 */
int fcgi_scan(const unsigned char *buf, size_t len, int want_stdin,
    struct fcgi_scan *s);

/* ------------------------------------------------------------------ */
/* request.c: the check API's input */

struct check_request {
    char route[RL_ROUTE_MAX + 1];
    char subject[RL_SUBJECT_MAX + 1];
    int has_subject;
    /* Who asks: "key:<id>" for an API key, "addr:<ip>" for a client
     * without one (authorizer); "" = unknown (counted as the tenant). */
    char identity[80];
    long long cost;
    int peek;
    int reserve;                /* take a lease for the cost */
};

/* Parses a JSON check body.  Returns 0, or -1 with a short reason for the
 * client in err (the body is never echoed).  A plain flat body is read
 * by a fast path of its own; any other goes to request_parse_check_json(),
 * which reads every body with json-c and gives the same answer (a unit
 * test compares the two over many random bodies). */
int request_parse_check(const char *body, size_t len,
    struct check_request *out, char *err, size_t errlen);
int request_parse_check_json(const char *body, size_t len,
    struct check_request *out, char *err, size_t errlen);

/* The path a web server serves for a raw request path (without the query
 * string): %XX decoded (except %2F, kept as "%2F", and %00, refused),
 * runs of '/' merged, "." and ".." segments resolved.  So "/%70rotected",
 * "//protected" and "/a/../protected" all give "/protected" and match the
 * same rules.  Returns the length written to out (NUL terminated), or -1
 * when the path is not absolute, holds a bad escape or NUL, or does not
 * fit in outlen. */
int request_normalize_path(const char *path, size_t len, char *out,
    size_t outlen);

/* Picks the API key from X-API-Key or "Authorization: Bearer".  Either
 * header may be NULL.  Returns the key's length, 0 when there is none and
 * -1 when it is longer than RL_KEY_MAX. */
int request_api_key(const char *x_api_key, const char *authorization,
    const char **key);

/* ------------------------------------------------------------------ */
/* algo.c: the rate-limit algorithms, one table of what each one is */

enum rl_algorithm {
    RL_ALGO_TOKEN_BUCKET = 1,
    RL_ALGO_SLIDING_WINDOW = 2,
    RL_ALGO_GCRA = 3,
    RL_ALGO_FIXED_WINDOW = 4,
    RL_ALGO_CONCURRENCY = 5,    /* in flight at once: leases (lease.c) */
};

enum rl_calendar {
    RL_CAL_MINUTE = 1,
    RL_CAL_HOUR,
    RL_CAL_DAY,
    RL_CAL_MONTH,
};

struct rl_limit;
struct json_object;

enum algo_kind {
    ALGO_KIND_COUNT = 1,        /* a whole number: long long */
    ALGO_KIND_RATE,             /* a decimal per second: double */
    ALGO_KIND_DURATION,         /* microseconds, typed as "1m": long long */
    ALGO_KIND_CALENDAR,         /* enum rl_calendar: int */
};

#define ALGO_MAX_PARAMS 3
#define ALGO_SCRIPT_ARGS 4      /* the name, then three parameters */
#define ALGO_TEXT_MAX 64

/* One parameter of an algorithm. */
struct algo_param {
    const char *option;         /* ratelimitctl's option, without "--" */
    const char *metavar;        /* its value in messages (NULL: the
                                   calendars, "minute|hour|...") */
    const char *column;         /* the column of the limits table */
    const char *json;           /* the field of a limit in /v1/config */
    enum algo_kind kind;
    double min, max;            /* bounds (validate.c's VALIDATE_*) */
    int optional;               /* may be left out; then 0 */
    size_t offset;              /* the field of struct rl_limit */
};

struct algo {
    int id;                     /* enum rl_algorithm */
    const char *name;
    int nparams;
    struct algo_param param[ALGO_MAX_PARAMS];  /* in the script's order */
    const char *describe;       /* printf format of "rule list" and
                                   ratelimitctl's answers: one %s per
                                   parameter, in order */
    /* RateLimit-Policy: the quota q and window w (seconds) announced for
     * a limit whose state reports limit. */
    void (*policy)(const struct rl_limit *l, long long limit, long long *q,
        long long *w);
    /* A check across the parameters (NULL: none); typed are the values as
     * typed.  Returns 0 or -1 with err, as validate.c does. */
    int (*check)(const struct rl_limit *l, const char *const *typed,
        char *err, size_t errlen);
};

/* The algorithms: algo_at(0) to algo_at(algo_count() - 1); NULL past
 * them. */
int algo_count(void);
const struct algo *algo_at(int i);

/* The algorithm with id (enum rl_algorithm) or name; NULL when none. */
const struct algo *algo_get(int id);
const struct algo *algo_find(const char *name);

/* The name of an algorithm, "unknown" for another id; the id of a name,
 * or -1. */
const char *algo_name(int id);
int algo_parse(const char *name);

/* The same for the calendars of fixed windows, and the longest length of
 * one in seconds (0 for an unknown calendar). */
const char *algo_calendar_name(int calendar);
int algo_calendar_parse(const char *name);
long long algo_calendar_seconds(int calendar);

/* The same for what a limit counts (enum rl_count): "subject", "key",
 * "tenant". */
const char *algo_count_name(int count);
int algo_count_parse(const char *name);

/* How algo_param_text() writes a value. */
enum {
    ALGO_TEXT_SCRIPT,           /* an argument of lua/check.lua */
    ALGO_TEXT_SQL,              /* a query parameter of its column */
    ALGO_TEXT_HUMAN,            /* for people: a period as "1m" */
};

/* Writes parameter p of l into buf.  Returns 0, or -1 when it does not
 * fit or cannot be written (for the script: a refill rate not in (0,
 * VALIDATE_RATE_MAX] or below a millionth; any unknown calendar). */
int algo_param_text(const struct algo_param *p, const struct rl_limit *l,
    int style, char *buf, size_t len);

/* Reads text typed for option --<p->option> into l within p's bounds.
 * Returns 0, or -1 with one line "--option: reason" in err. */
int algo_param_parse(const struct algo_param *p, const char *text,
    struct rl_limit *l, char *err, size_t errlen);

/* Writes the options a takes, for messages: "--limit N and --period
 * DURATION, optionally --burst B". */
void algo_takes(const struct algo *a, char *buf, size_t len);

/* The four script arguments of l: its algorithm's name and its
 * parameters, "0" for those it does not have.  Returns 0, or -1 when the
 * algorithm is unknown or a parameter cannot be written. */
int algo_script_args(const struct rl_limit *l,
    char args[ALGO_SCRIPT_ARGS][ALGO_TEXT_MAX]);

/* RateLimit-Policy's quota and window of l (an unknown algorithm: limit
 * per second).  The quota is what may pass at once, for every algorithm:
 * the capacity (token bucket), the limit (windows), burst + 1 (GCRA), the
 * same as the "limit" of an answer and X-RateLimit-Limit; the window is
 * how long it takes to be whole again (token bucket, GCRA: rounded up to
 * seconds) or the window's length. */
void algo_policy(const struct rl_limit *l, long long limit, long long *q,
    long long *w);

/* The quota of l: the largest cost a check can ever pass (0 for an
 * unknown algorithm). */
long long algo_quota(const struct rl_limit *l);

/* Adds the parameters of l to the JSON object o, under their names. */
void algo_json_add(struct json_object *o, const struct rl_limit *l);

/* 1 when l is a concurrency limit: it takes one slot of a lease per
 * check, whatever the cost, and no cost exceeds it. */
int algo_is_concurrency(const struct rl_limit *l);

/* 1 when l can be decided: a known algorithm and a known calendar when it
 * has one; else 0.  Bounds are the schema's to keep. */
int algo_limit_valid(const struct rl_limit *l);

/* ------------------------------------------------------------------ */
/* rules.c: tenants' rules and limits */


struct rl_limit {
    long long id;
    char name[RL_NAME_MAX + 1];
    int algorithm;              /* enum rl_algorithm */
    long long limit_count;      /* sliding window, GCRA, fixed window;
                                   concurrency: the leases at once */
    long long window_seconds;   /* sliding window */
    long long bucket_capacity;  /* token bucket */
    double refill_rate;         /* token bucket, tokens per second */
    long long period_us;        /* GCRA: limit_count per period_us;
                                   concurrency: the lease ttl */
    long long burst;            /* GCRA */
    int calendar;               /* fixed window: enum rl_calendar */
    int count;                  /* what it counts: enum rl_count */
};

/* What one counter of a limit stands for (limits.count_scope). */
enum rl_count {
    RL_COUNT_SUBJECT = 0,       /* the subject; without one, the identity */
    RL_COUNT_KEY,               /* the identity (API key or client) */
    RL_COUNT_TENANT             /* the whole tenant */
};

struct rl_rule {
    long long id;
    char pattern[RL_ROUTE_MAX + 1];
    int priority;
    int shadow;                 /* counted, never enforced */
    int fail_open;              /* allowed when Redis is unreachable */
    int per_route;              /* one counter per distinct route */
    int always;                 /* applies besides the most specific rule */
    int broken;                 /* a limit of it could not be loaded: no
                                   check it takes part in can be decided */
    int nlimits;
    struct rl_limit limits[RL_MAX_LIMITS];
};

/*
 * What one check decides: the limits of the most specific rule plus those
 * of every matching "always" rule, at most RL_MAX_LIMITS in all, decided
 * together in one script call.  Pointers point into the rule array given
 * to rules_plan().
 */
struct rl_plan {
    int n;
    int needed;                 /* the limits of those rules in all; -1
                                   when one of them is broken */
    int over;                   /* decide: the limit a cost can never pass */
    const struct rl_rule *rule[RL_MAX_LIMITS];
    const struct rl_limit *limit[RL_MAX_LIMITS];
    char name[RL_MAX_LIMITS][RL_NAME_MAX + 24];  /* unique policy names */
};

/* Returns the index of the rule that applies to route, or -1 when none
 * does.  Exact beats the longest prefix ("/a*"), which beats "*"; ties go
 * to the higher priority, then to the lower id. */
int rules_match(const struct rl_rule *rules, int n, const char *route);

/* The index of the rule that is chosen before rule i on every route i
 * matches (the same pattern, and a higher priority or, equal, a lower id),
 * so that i never applies; -1 when there is none or i is an "always" rule
 * (which applies whenever it matches). */
int rules_shadowed_by(const struct rl_rule *rules, int n, int i);

/* Whether pattern matches route (exact, "prefix*" or "*"). */
int rules_pattern_matches(const char *pattern, const char *route);

/*
 * Fills plan for route.  Returns the number of limits in it (0 when no
 * rule applies; then no Redis call is needed), or -1 when the most
 * specific rule and the other matching "always" rules have more than
 * RL_MAX_LIMITS limits together (plan->needed says how many) or one of
 * them is broken (plan->needed is -1): a plan never drops a limit, so such
 * a route cannot be decided at all and the caller must refuse it (503
 * "misconfigured").  On -1, plan->n is 0 and plan->rule[0] is the most
 * specific rule (or the broken one), for the log.
 */
int rules_plan(const struct rl_rule *rules, int n, const char *route,
    struct rl_plan *plan);

/*
 * An index of a rule array, so that a route is matched in a few binary
 * searches instead of a look at every rule.  It points into rules, which
 * must outlive it and stay unchanged.  Build returns NULL when out of
 * memory.
 */
struct rules_index;
struct rules_index *rules_index_build(const struct rl_rule *rules, int n);
void rules_index_free(struct rules_index *ix);

/* The bytes an index holds (for a cache's bound). */
size_t rules_index_bytes(const struct rules_index *ix);

/* rules_plan() of the indexed rules: the same answer, faster. */
int rules_index_plan(const struct rules_index *ix, const char *route,
    struct rl_plan *plan);

/* Where a change of a tenant's rules lets a check need too many limits. */
struct rl_overflow {
    char route[RL_ROUTE_MAX + 1];
    int prefix;                 /* 0: the route itself; 1: the routes that
                                   begin with it (and with no longer prefix
                                   pattern, and are no exact pattern) */
    int needed;                 /* limits their check needs after the change */
    int before;                 /* and needed before it */
    int nrules;
    int rule[RL_MAX_RULES];     /* indices into after, most specific first */
};

/*
 * Compares every route's plan under the rules before a change with its
 * plan under the rules after it (each the rules the service would load:
 * enabled, with their limits; before may be NULL with nbefore 0).  Returns
 * 1 when some route would need more than RL_MAX_LIMITS limits after the
 * change, and more than before it, with o describing the route that needs
 * the most; else 0.  Routes are considered by the classes that the
 * patterns of both sets cut them into, so nothing is missed; a class that
 * no real route can fall into is compared all the same.
 */
int rules_overflow(const struct rl_rule *before, int nbefore,
    const struct rl_rule *after, int nafter, struct rl_overflow *o);

/* ------------------------------------------------------------------ */
/* cache.c: bounded string-keyed cache with per-entry expiry */

struct cache;

/* Creates a cache of at most capacity entries.  free_value is called on
 * values that are evicted, replaced or cleared (may be NULL). */
struct cache *cache_create(size_t capacity, void (*free_value)(void *));
void cache_free(struct cache *c);

/* Stores value under key until now_ms + ttl_ms; the cache owns value.  When
 * full, the least recently used entry is evicted.  Returns 0 or -1 (out of
 * memory; value is then freed). */
int cache_put(struct cache *c, const char *key, void *value,
    int64_t now_ms, int64_t ttl_ms);

/* Returns the value for key or NULL.  With *stale set to NULL, an expired
 * entry is not returned; otherwise it is returned and *stale is set to 1
 * (used to keep serving when PostgreSQL is down). */
void *cache_get(struct cache *c, const char *key, int64_t now_ms, int *stale);
void cache_remove(struct cache *c, const char *key);
void cache_clear(struct cache *c);
size_t cache_count(const struct cache *c);

/* cache_put() of a value said to hold cost bytes; with a bound set (0:
 * none), the least recently used entries go until the costs fit it, and an
 * entry that alone exceeds it is kept alone.  cache_cost() is the sum. */
void cache_set_max_cost(struct cache *c, size_t max_cost);
int cache_put_cost(struct cache *c, const char *key, void *value, size_t cost,
    int64_t now_ms, int64_t ttl_ms);
size_t cache_cost(const struct cache *c);

/* ------------------------------------------------------------------ */
/* shm.c: the segment all workers of a pool share */

#define SHM_VERSION 6
#define SHM_WAYS 8                  /* entries per set: a set of a full
                                       table gives up its oldest */
#define SHM_KEY_VALUE_MAX 320       /* a struct key_info (store.h) */
#define SHM_TENANT_VALUE_MAX 16320  /* a tenant's rules, packed */

#define SHM_OVERLIMIT_VALUE_MAX 512 /* a denial (decide.c) */
enum shm_table { SHM_KEYS = 0, SHM_UNKNOWN = 1, SHM_TENANTS = 2,
    SHM_OVERLIMIT = 3, SHM_NTABLES = 4 };

struct shm {
    void *base;                 /* the mapped region */
    void *board;                /* the scoreboard (service.h) */
    unsigned char *table[SHM_NTABLES];
    size_t sets[SHM_NTABLES];
    /* Whether a pid still runs; entries a dead writer left half written
     * are taken over only when this says no.  NULL: never. */
    int (*pid_alive)(int32_t pid);
    struct keyfilter *keyfilter;    /* the pool's, or NULL */
    struct arena *arena;            /* large tenants' rules, or NULL */
};

struct shm_meta {
    int64_t stamp;              /* fetched at, or valid until (ms) */
    uint64_t generation;        /* change generation it was fetched under */
    size_t len;
};

/* Bytes needed for a scoreboard of board_size and counts[t] entries in
 * each table. */
size_t shm_size(size_t board_size, const size_t counts[SHM_NTABLES]);

/* Lays the segment out in base (size bytes, zero filled, as from mmap).
 * Returns 0, or -1 when size is too small. */
int shm_init(struct shm *m, void *base, size_t size, size_t board_size,
    const size_t counts[SHM_NTABLES]);

/* Finds the layout of a segment made by shm_init.  -1 when base holds no
 * segment of this version and size. */
int shm_attach(struct shm *m, void *base, size_t size);

/* The segment's size in bytes, as laid out. */
size_t shm_total(const struct shm *m);

/* The change generation, and its bump when PostgreSQL notified a change:
 * entries fetched under an older generation are stale. */
uint64_t shm_generation(const struct shm *m);
void shm_changed(struct shm *m);

/* The generation an entry of one key (by its id) or of one tenant's rules
 * depends on: the pool's plus its stripe's; and the bump of a stripe, when
 * a notification named the key or the tenant. */
#define SHM_STRIPES 1024
uint64_t shm_generation_key(const struct shm *m, const unsigned char id[32]);
uint64_t shm_generation_tenant(const struct shm *m, const char *tenant_id);
void shm_changed_key(struct shm *m, const unsigned char id[32]);
void shm_changed_tenant(struct shm *m, const char *tenant_id);

/* Copies the entry for id (at most cap bytes of its value) into value and
 * meta.  Returns 1 when found, 0 when absent or being written. */
int shm_get(const struct shm *m, int table, const unsigned char id[32],
    void *value, size_t cap, struct shm_meta *meta);

/* Stores value (len bytes, at most the table's value size) for id with a
 * non-zero stamp, replacing the id's entry, an empty one or the one with
 * the oldest stamp in its set.  Returns 0, 1 when that pushed out another
 * id's entry, or -1 when the entry is being written by someone else or the
 * value is too large. */
int shm_put(struct shm *m, int table, const unsigned char id[32],
    const void *value, size_t len, int64_t stamp, uint64_t generation,
    int32_t pid);
void shm_remove(struct shm *m, int table, const unsigned char id[32],
    int32_t pid);

/* A tenant's rules as bytes and back.  Pack returns the length, or -1 when
 * they do not fit in cap; unpack returns the number of rules, or -1 when
 * the bytes are not a packing of at most max rules. */
long shm_rules_pack(const struct rl_rule *rules, int n, void *out,
    size_t cap);
int shm_rules_unpack(const void *in, size_t len, struct rl_rule *rules,
    int max);

/* The number of rules a packing says it holds (to size the array for
 * unpack), or -1. */
int shm_rules_count(const void *in, size_t len);

/* The bytes shm_rules_pack() needs for rules. */
size_t shm_rules_packed_size(const struct rl_rule *rules, int n);

/* ------------------------------------------------------------------ */
/* arena.c: large values the pool shares, in a ring */

struct arena {
    void *base;                 /* arena_size() bytes, MAP_SHARED; NULL:
                                   none */
};

/* Bytes to map for a ring of about bytes bytes (0 for none). */
size_t arena_size(size_t bytes);

/* Lays a ring out in base (size bytes from arena_size(), zero filled).
 * Returns 0, or -1 (a->base NULL) when size is too small. */
int arena_init(struct arena *a, void *base, size_t size);

/* The largest value the ring takes: a quarter of it. */
size_t arena_max(const struct arena *a);

/* Appends value (len bytes).  Returns its position, or 0 when there is no
 * ring or the value is larger than arena_max(). */
uint64_t arena_put(struct arena *a, const void *value, size_t len);

/* Copies the value of len bytes at pos to out.  Returns 0, or -1 when it
 * is not there (overwritten by newer values since, or never written). */
int arena_get(const struct arena *a, uint64_t pos, void *out, size_t len);

/* ------------------------------------------------------------------ */
/* keyfilter.c: the hashes of every active API key, in a Bloom filter */

struct keyfilter {
    void *base;                 /* keyfilter_size() bytes, MAP_SHARED;
                                   NULL: no filter */
};

/* What keyfilter_test() says of a key's hash. */
enum { KEYFILTER_ABSENT = 0,    /* no active key has it */
    KEYFILTER_MAYBE,            /* an active key may have it */
    KEYFILTER_UNKNOWN };        /* not in it, but the filter is incomplete */

struct keyfilter_stats {
    uint64_t bits, keys, builds;
    int complete;
};

/* Bytes to map for a filter of bytes bytes of bits (0 for none). */
size_t keyfilter_size(size_t bytes);

/* Lays a filter out in base (size bytes from keyfilter_size(), zero
 * filled).  Returns 0, or -1 (f->base NULL) when size is too small. */
int keyfilter_init(struct keyfilter *f, void *base, size_t size);

/* Adds a key's SHA-256 (md, or its 64 lowercase or uppercase hex digits:
 * -1 when hex is not that). */
void keyfilter_add(struct keyfilter *f, const unsigned char md[32]);
int keyfilter_add_hex(struct keyfilter *f, const char *hex);

/* KEYFILTER_* for a key's SHA-256; KEYFILTER_UNKNOWN without a filter. */
int keyfilter_test(const struct keyfilter *f, const unsigned char md[32]);
int keyfilter_complete(const struct keyfilter *f);

/* Notifications may have been missed: not complete until built again. */
void keyfilter_incomplete(struct keyfilter *f);

/* Whether pid is to build the filter now: it is not complete, no live
 * builder has it (alive tells; NULL: every pid is alive) and no failed
 * build asked to wait.  Release after the build: built 1 marks the filter
 * complete, 0 makes the next build wait a second. */
int keyfilter_claim(struct keyfilter *f, int32_t pid, int64_t now_ms,
    int (*alive)(int32_t));
void keyfilter_release(struct keyfilter *f, int32_t pid, int built,
    int64_t now_ms);

void keyfilter_stats(const struct keyfilter *f, struct keyfilter_stats *st);

/* ------------------------------------------------------------------ */
/* stats.c: what the pool has done, in the shared segment */

/* Pool-wide counters, in the shared scoreboard (see /metrics). */
struct rl_counters {
    unsigned long requests;
    unsigned long allowed;
    unsigned long denied;
    unsigned long no_rule;
    unsigned long unavailable;
    unsigned long fail_open;
    unsigned long shadow_denied;
    unsigned long redis_errors;
    unsigned long script_errors;    /* Redis answered the script wrongly */
    unsigned long misconfigured;    /* plans refused: too many limits */
    unsigned long fcgi_refused;     /* connections dropped: bad records */
    unsigned long fcgi_evicted;     /* closed to make room for one */
    unsigned long fcgi_unpassed;    /* kept ones a leaving worker closed */
    unsigned long worker_crashes;   /* workers that died abnormally */
    unsigned long worker_rss_exits; /* workers replaced for their memory */
    unsigned long key_lookups;      /* key store lookups */
    unsigned long key_lookups_limited; /* unknown keys refused unasked */
    unsigned long key_lookups_deferred; /* of those, answered 503: the key
                                           filter could not vouch either
                                           way */
    unsigned long pg_statement_timeouts; /* statements PostgreSQL gave up
                                            (statement_timeout) */
    unsigned long redis_redirects;  /* MOVED and ASK followed */
    unsigned long redis_lookups;    /* slot maps read, sentinels asked */
    unsigned long overlimit_hits;   /* denials answered from the cache */
    unsigned long overlimit_inserts;
    unsigned long overlimit_evictions;
    unsigned long over_budget;      /* checks refused by a counter budget */
    /* Leases (lease.h): taken by checks, released, extended, refused
     * (a release or extension answered 4xx), expired unreleased (as the
     * script found them), and the costs settled each way. */
    unsigned long leases_taken;
    unsigned long leases_released;
    unsigned long leases_extended;
    unsigned long leases_refused;
    unsigned long leases_expired;
    unsigned long lease_refunds;
    unsigned long lease_refunded_cost;
    unsigned long lease_charges;
    unsigned long lease_charged_cost;
};

#define COUNT(x, field) \
    __atomic_add_fetch(&(x)->counters->field, 1, __ATOMIC_RELAXED)

/* Latency buckets: upper bounds in microseconds; the last is +Inf. */
#define STATS_BUCKETS 20
extern const uint32_t stats_bucket_us[STATS_BUCKETS - 1];

#define STATS_HISTORY 900           /* seconds of per-second history */
#define STATS_WINDOW 60             /* seconds of the top-N window */
#define STATS_PAIRS 1024            /* (tenant, rule) pairs counted */
#define STATS_PROBE 16              /* slots a pair may be placed in */

/* The outcomes of a check, as the history counts them. */
enum stats_outcome { OUT_ALLOWED = 0, OUT_DENIED, OUT_NO_RULE, OUT_FAIL_OPEN,
    OUT_UNAVAILABLE, OUT_OTHER_4XX, OUT_N };
extern const char *const stats_outcome_name[OUT_N];

/* HTTP statuses counted one by one; anything else is "other". */
#define STATS_STATUSES 14
extern const int stats_status_code[STATS_STATUSES - 1];

/* Why a worker left (the master counts exits by cause). */
enum stats_exit { EXIT_STOPPED = 0, EXIT_MAX_REQUESTS, EXIT_MEMORY,
    EXIT_TIMEOUT, EXIT_CRASH, EXIT_N };
extern const char *const stats_exit_name[EXIT_N];

struct stats_hist {
    uint64_t count;
    uint64_t sum_us;
    uint64_t bucket[STATS_BUCKETS];     /* not cumulative */
};

struct stats_second {
    uint64_t second;                    /* wall clock; 0 = never used */
    uint32_t outcome[OUT_N];
    uint32_t bucket[STATS_BUCKETS];     /* check latency */
    uint32_t redis[STATS_BUCKETS];      /* checks' script calls */
    uint32_t pg[STATS_BUCKETS];         /* checks' lookups, when any */
};

struct stats_pair {
    uint64_t hash;                      /* 0 = free; set once */
    uint32_t ready;                     /* the names below are written */
    uint32_t pad;
    long long rule;
    char tenant_id[RL_UUID_LEN + 1];
    char tenant[129];
    uint64_t allowed;
    uint64_t denied;
    int64_t remaining;                  /* after the last decision */
    uint32_t win_second[STATS_WINDOW];  /* which second a count is of */
    uint32_t win_denied[STATS_WINDOW];
    uint32_t win_checks[STATS_WINDOW];  /* decisions, denials included */
};

/*
 * Everything here is written with atomic adds or compare-and-swap, never
 * under a lock, so a worker killed at any instruction leaves it usable.
 */
struct rl_stats {
    uint64_t status[STATS_STATUSES];
    struct stats_hist check, redis, pg;
    uint64_t key_hits, key_misses, rule_hits, rule_misses;
    uint64_t slow;                      /* checks over slowlog_ms */
    uint64_t worker_starts;
    uint64_t exits[EXIT_N];
    uint64_t pairs_full;                /* checks no pair slot was left for */
    /* Sampled by the master once a second (php-fpm's pool fields). */
    uint64_t listen_queue, listen_queue_len, max_listen_queue;
    uint64_t max_active, max_children_reached;
    /* The pool-wide bound on denial log lines. */
    uint64_t deny_second;
    uint32_t deny_lines, deny_suppressed;
    struct stats_second history[STATS_HISTORY];
    struct stats_pair pairs[STATS_PAIRS];
};

/* Index of status in rl_stats.status. */
int stats_status_index(int status);

/* Adds one observation of us microseconds. */
void stats_hist_add(struct stats_hist *h, uint64_t us);

/* Counts one check of outcome at wall second now_s taking us. */
void stats_record(struct rl_stats *st, int64_t now_s, int outcome,
    uint64_t us);

/* Counts a check's time in the Redis script call and in PostgreSQL
 * lookups (0: it made none) at wall second now_s. */
void stats_record_stores(struct rl_stats *st, int64_t now_s,
    uint64_t redis_us, uint64_t pg_us);

/* The history row of second s, or NULL when nothing was counted then. */
const struct stats_second *stats_second_at(const struct rl_stats *st,
    int64_t s);

/* The q-quantile (0..1) of bucket counts, in microseconds, interpolated
 * within its bucket; -1 when there are no observations. */
double stats_quantile(const uint32_t bucket[STATS_BUCKETS], double q);

/* Counts a decision for (tenant, rule) at wall second now_s, and keeps
 * remaining as the pair's.  Returns 0, or -1 when the table is full. */
int stats_pair_count(struct rl_stats *st, const char *tenant_id,
    const char *tenant, long long rule, int denied, long long remaining,
    int64_t now_s);

/* Denials of a pair over the STATS_WINDOW seconds up to now_s. */
uint64_t stats_pair_recent(const struct stats_pair *p, int64_t now_s);

/* Adds a pair's decisions and denials in each of the STATS_WINDOW seconds
 * up to now_s to checks[] and denied[] (index 0: the oldest second). */
void stats_pair_window(const struct stats_pair *p, int64_t now_s,
    uint64_t checks[STATS_WINDOW], uint64_t denied[STATS_WINDOW]);

/* Retires slot (of pairs[]) if it still holds the pair of hash: the pair
 * is no longer shown, and the slot may be taken by another. */
void stats_pair_retire(struct rl_stats *st, int slot, uint64_t hash);

/* A pair as /metrics shows it, copied out of the table. */
struct stats_pair_row {
    int slot;                           /* in rl_stats.pairs */
    uint64_t hash;                      /* the slot's, when copied */
    long long rule;
    char tenant_id[RL_UUID_LEN + 1];
    char tenant[129];
    uint64_t allowed;
    uint64_t denied;
};

/* Copies the ready pairs (of tenant_id only, unless NULL) to out, which
 * has room for STATS_PAIRS, by tenant name, id and rule.  Returns how
 * many. */
int stats_pairs_copy(const struct rl_stats *st, const char *tenant_id,
    struct stats_pair_row *out);

/* Who has the tenant name now: writes its id and returns 1; 0 when no
 * tenant has it; 2 when the name cannot be asked about (its rows are
 * kept); -1 when nothing can be known now (nothing more is asked). */
typedef int (*stats_owner_fn)(void *arg, const char *tenant,
    char id[RL_UUID_LEN + 1]);

/* A tenant as /metrics shows it: its rows, one a rule, and their sums. */
struct stats_tenant {
    const struct stats_pair_row *rows;
    int n;
    uint64_t allowed;
    uint64_t denied;
};

/*
 * The tenants of rows (n of them, from stats_pairs_copy), most checks
 * first, at most top of them (-1: all; 0: none), into out (room for n).
 * Each name is shown once with its rules once each: owner is asked who
 * has a name now (at most once a name, in the order shown, until it
 * answers -1), the rows of any other tenant are dropped and their slots
 * retired, and rows left with the same name and rule are added up.
 * Reorders and merges rows in place; returns how many tenants.
 */
int stats_tenants(struct rl_stats *st, struct stats_pair_row *rows, int n,
    long top, stats_owner_fn owner, void *arg, struct stats_tenant *out);

/* Whether a denial may be logged in second now_s, at most per_second lines
 * a second across the pool.  *suppressed gets the lines held back in the
 * second before, reported once (then reset). */
int stats_deny_log(struct rl_stats *st, int64_t now_s, long per_second,
    unsigned long *suppressed);

/* ------------------------------------------------------------------ */
/* limiter.c: the decision, as Redis reported it */

struct rl_limit_state {
    int allowed;
    int shadow;                 /* from the plan: never enforced */
    long long limit;
    long long remaining;
    long long reset_ms;         /* until the limit is fully reset */
    long long retry_after_ms;   /* 0 when allowed, -1 = never at this cost */
};

struct rl_decision {
    int allowed;
    long long now_ms;           /* Redis time */
    int nlimits;
    struct rl_limit_state st[RL_MAX_LIMITS];
    int over_budget;            /* refused by the tenant's counter budget:
                                   nothing else is set but now_ms */
    long long budget_retry_ms;  /* then: until the budget window ends */
    /* A call with a lease (limiter_lease): the expired leases it dropped;
     * and, set by the caller when the check was allowed, the lease's id
     * (lease.h) and time to live; "" when it took none. */
    long long lease_dropped;
    long long lease_ttl_ms;
    char lease[RL_UUID_LEN + 1 + 32 + 1];
};

/* The most integers a reply of the script has: 2 + 5 per limit, and one
 * more for a call with a lease. */
#define LIMITER_REPLY_MAX (3 + 5 * RL_MAX_LIMITS)

/* Decodes the script's numbers (redis_reply_decision() unpacks them from
 * the reply's doubles into v[n]): a decision, or the counter
 * budget's refusal (-1, now_ms, retry_after_ms; d->over_budget set).  A
 * decision of a call with a lease has one number more, last, the expired
 * leases dropped (d->lease_dropped).  Returns 0, or -1 when it has
 * neither shape for nlimits limits.  Sets no shadow flags: the caller
 * copies them from the plan. */
int limiter_decode(const long long *v, size_t n, int nlimits,
    struct rl_decision *d);

/* Marks the shadow limits of d from plan.  Returns 1 when a shadow limit
 * would have denied, else 0. */
int limiter_apply_shadow(const struct rl_plan *plan, struct rl_decision *d);

/*
 * The script's keys and arguments for one check, as EVALSHA takes them
 * after the script: "n key... cost peek n (algorithm p1 p2 p3 shadow)...";
 * once limiter_budget() has added them, the tenant's two counter budget
 * keys after the limits' keys and "budget window mask" after the limits'
 * arguments; once limiter_request_key() has added them, the caller's reply
 * slot after all other keys and the call's id last.  The store puts the
 * command and the script in front.  See lua/check.lua for the contract.
 * Pointers in argv point into store.
 */
#define LIMITER_MAX_ARGS (1 + RL_MAX_LIMITS + 2 + 1 + 1 + 3 + \
    5 * RL_MAX_LIMITS + 3 + 2 + 1)
struct limiter_call {
    int argc;
    const char *argv[LIMITER_MAX_ARGS];
    size_t argvlen[LIMITER_MAX_ARGS];
    int nlimits;                /* keys and arguments of limits */
    int budgeted;               /* has the counter budget's */
    int keyed;                  /* has the reply slot and the id */
    int leased;                 /* has a lease's record, id and ttl */
    char store[RL_MAX_LIMITS * 256 + 1280];
};

/* The counter budget's window: a tenant creates at most its budget of
 * counters (tenant_counter_budget, or its own) in each such span of
 * seconds, aligned on the epoch. */
#define RL_BUDGET_WINDOW_S 3600

/* Builds the call for one check of plan on behalf of tenant_id.  Keys are
 * rl:{tenant}:rule:limit, then :r<hash of route> when the limit's rule
 * counts per route and :s<hash of subject> when a subject is given.
 * Returns 0, or -1 when the plan is empty or a limit is unusable. */
int limiter_build(const char *tenant_id, const struct rl_plan *plan,
    const struct check_request *req, struct limiter_call *call);

/* The Redis key of one limit's counter for req, as limiter_build() names
 * it (for ratelimitctl's counter commands).  Returns 0, or -1 when it does
 * not fit in outlen or the limit is unusable. */
int limiter_key(const char *tenant_id, const struct rl_rule *rule,
    const struct rl_limit *limit, const struct check_request *req,
    char *out, size_t outlen);

/* The call of a peek of cost 1 at limit, whose counter is key: what
 * ratelimitctl's usage command asks (the reply is one limit's).  Returns
 * 0, or -1 when the key does not fit or the limit is unusable. */
int limiter_peek(const char *key, const struct rl_limit *limit,
    struct limiter_call *call);

/* Adds the tenant's counter budget to a call made by limiter_build(),
 * before its reply slot: the keys rl:{tenant}:budget:names and
 * rl:{tenant}:budget:made, and the arguments budget, RL_BUDGET_WINDOW_S and
 * the mask, "1" for each limit whose counter is named after what callers
 * send (a subject, a key or address, a route), "0" for one counter for the
 * whole tenant.  Nothing is added when budget is 0 (unlimited) or no limit
 * has a "1".  Returns 0, or -1 when the call already has a budget or a
 * reply slot, or is not one of limiter_build's for plan. */
int limiter_budget(struct limiter_call *call, const struct rl_plan *plan,
    long long budget);

/* Adds a lease to a call made by limiter_build() (and perhaps
 * limiter_budget()), before limiter_request_key(): the key of its record
 * (lease.h: rl:{tenant}:lease:<random>) after the other keys, and its
 * random part and time to live in milliseconds (1000..3600000) after the
 * other arguments; the call then asks the script to take it if allowed
 * (the peek argument "3"), and its reply has one more number, the expired
 * leases it dropped.  Returns 0, or -1 when the call is a peek, already
 * has a lease or a reply slot, or has no room. */
int limiter_lease(struct limiter_call *call, const char *key,
    const char *random, long long ttl_ms);

/* Longest reply slot name and call id limiter_request_key() takes. */
#define LIMITER_ID_MAX 40

/* Adds the caller's reply slot, rl:{tenant}:req:<slot>, after the other
 * keys of a call made by limiter_build(), and the call's id as its last
 * argument: the script keeps the id and reply of a call that charged in
 * the slot and replays that reply when the same call is sent again, so a
 * resend is never charged twice.  slot is unique to the calling process
 * (one slot per process and tenant holds its last call that charged), id
 * unique to this check within the process; both are [0-9a-zA-Z.-]{1,40}.
 * Returns 0, or -1 when the call already has a slot, is not one of
 * limiter_build's, or slot or id is unusable. */
int limiter_request_key(struct limiter_call *call, const char *slot,
    const char *id);

/* Marks a call that has its reply slot as sent again (the peek argument
 * "0" becomes "2"): the script then replays the reply it stored if the
 * first send charged.  A peek is left as it is.  Returns 0, or -1 when the
 * call has no reply slot. */
int limiter_resend(struct limiter_call *call);

/* Takes the reply slot and the id out of a call again, and the counter
 * budget's keys and arguments with them (for a node that cannot take a
 * key the call may create, as the target of a Redis Cluster ASK with the
 * limits' keys already there, or one whose slot is half moved): the call
 * then has no replay and no budget, as limiter_build() made it.  Returns
 * 0, or -1 when it has no reply slot or was marked as sent again. */
int limiter_unkey(struct limiter_call *call);

/* Index of the most restrictive limit (the one the X-RateLimit-* headers
 * describe): enforced limits before shadow ones, a denying one first, else
 * the one with the least remaining. */
int limiter_primary(const struct rl_decision *d);

/* ------------------------------------------------------------------ */
/* cluster.c: Redis Cluster's hash slots and redirections */

#define CLUSTER_SLOTS 16384

/* The hash slot of a key (CRC16 of its {hash tag}, or of all of it). */
unsigned cluster_keyslot(const char *key, size_t len);

enum { CLUSTER_MOVED = 1, CLUSTER_ASK = 2 };

/* Reads an error reply "MOVED <slot> <host:port>" or "ASK <slot>
 * <host:port>".  Returns CLUSTER_MOVED or CLUSTER_ASK with *slot and addr
 * (the address as sent; it may be ":port", the node asked) filled in, 0
 * when msg is no redirection, -1 when it is one of another shape. */
int cluster_redirect(const char *msg, int *slot, char *addr, size_t addrlen);

/* ------------------------------------------------------------------ */
/* response.c: what goes back to the web server */

struct rl_response {
    int status;
    struct rl_buf headers;      /* "Name: value\r\n" lines */
    struct rl_buf body;
    const char *content_type;
    int no_store;               /* send Cache-Control: no-store */
    const char *error;          /* the "error" code of an error answer */
};

void response_init(struct rl_response *r);
void response_free(struct rl_response *r);
void response_reset(struct rl_response *r);
const char *response_reason(int status);

/* Adds one header line.  name is a fixed string of the caller's; CR and
 * LF in the formatted value are replaced by spaces. */
void response_header(struct rl_response *r, const char *name,
    const char *fmt, ...) __attribute__((format(printf, 3, 4)));

struct json_object;

/* Makes obj (a json-c value, which this call releases) the body, plain
 * JSON followed by a newline. */
void response_json(struct rl_response *r, struct json_object *obj);

/* 400 cost_exceeds_limit: a cost no wait can make pass, naming the limit:
 * {"error":"cost_exceeds_limit","message":...,"limit":NAME,
 *  "max_cost":N,"cost":C} -- so that no client retries it. */
void response_cost_exceeds(struct rl_response *r, const char *limit,
    long long max_cost, long long cost);

/* A JSON error: {"error": code, "message": message}. */
void response_error(struct rl_response *r, int status, const char *code,
    const char *message);

/* The refusals the service answers, each written once in response.c's
 * table with its status, its code (the body's "error") and its message;
 * doc/api.md lists them for clients.  A 401 carries WWW-Authenticate. */
enum rl_refusal {
    RL_REFUSE_KEY_MISSING,          /* 401 unauthorized */
    RL_REFUSE_KEY_TOO_LONG,         /* 401 unauthorized */
    RL_REFUSE_KEY_INVALID,          /* 401 unauthorized */
    RL_REFUSE_TENANT_SUSPENDED,     /* 403 tenant_suspended */
    RL_REFUSE_ADMIN_KEY_CHECKS,     /* 403 admin_key_cannot_check */
    RL_REFUSE_ADMIN_NEEDED,         /* 403 forbidden */
    RL_REFUSE_OWN_TENANT_ONLY,      /* 403 forbidden */
    RL_REFUSE_CLIENT_UNKNOWN,       /* 403 forbidden */
    RL_REFUSE_ADDRESS_NOT_LISTED,   /* 403 forbidden */
    RL_REFUSE_INVALID_REQUEST,      /* 400 invalid_request */
    RL_REFUSE_NUL_PARAMETER,        /* 400 invalid_request */
    RL_REFUSE_BAD_PATH,             /* 400 invalid_request */
    RL_REFUSE_COST_EXCEEDS,         /* 400 cost_exceeds_limit */
    RL_REFUSE_BODY_TOO_LARGE,       /* 413 invalid_request */
    RL_REFUSE_OVER_BUDGET,          /* 429 counter_budget_exceeded, with the
                                       wait: response_over_budget() */
    RL_REFUSE_NOT_FOUND,            /* 404 not_found */
    RL_REFUSE_METHOD,               /* 405 method_not_allowed */
    RL_REFUSE_KEY_DEFERRED,         /* 503 key_lookup_deferred */
    RL_REFUSE_KEY_STORE,            /* 503 service_unavailable */
    RL_REFUSE_RULE_STORE,           /* 503 service_unavailable */
    RL_REFUSE_LIMIT_STORE,          /* 503 service_unavailable */
    RL_REFUSE_MISCONFIGURED,        /* 503 misconfigured */
    RL_REFUSE_SCRIPT_ERROR,         /* 503 script_error */
    RL_REFUSE_LEASE_UNKNOWN,        /* 404 lease_unknown */
    RL_REFUSE_LEASE_RELEASED,       /* 409 lease_released */
    RL_REFUSE_LEASE_EXPIRED,        /* 410 lease_expired */
    RL_REFUSAL_COUNT
};

/* Answers the refusal with the table's message, or with message when it
 * is not NULL (a message of the moment: the method, the bound); returns
 * the status. */
int response_refuse(struct rl_response *r, enum rl_refusal which,
    const char *message);
/* The table's row, for the tests: its status, code and message. */
int response_refusal(enum rl_refusal which, const char **code,
    const char **message);

/* 429 counter_budget_exceeded, with the wait as every denial has it:
 * retry_after (whole seconds, rounded up; also Retry-After) and
 * retry_after_ms. */
void response_over_budget(struct rl_response *r, long long retry_after_ms);

/* 200 or 429 for a decision on plan, with the X-RateLimit-*, RateLimit,
 * RateLimit-Policy and (on 429) Retry-After headers and the JSON body. */
void response_decision(struct rl_response *r, const struct rl_plan *plan,
    const struct rl_decision *d);

/* Unix seconds (Redis time) when the limit of st is fully reset. */
long long response_reset_at(long long now_s, const struct rl_limit_state *st);

/* Seconds a client is told to wait for limit state st: at least 1, or -1
 * when the cost can never pass (then no Retry-After is sent). */
long long response_retry_after_s(const struct rl_limit_state *st);

/* ------------------------------------------------------------------ */
/* validate.c: checks of typed values, shared by the admin tool and the
 * service.  Each check returns 0 (storing the value, if any), or -1 with
 * one line "WHAT: reason" in err; "what" names the value in that line. */

/* Bounds of what may be stored: those of the limit parameters are the
 * CHECKs of schema/002_limits.sql.  Limit names: RL_NAME_MAX. */
#define VALIDATE_TENANT_NAME_MAX 128            /* characters */
#define VALIDATE_COUNT_MAX 1000000000000LL      /* limit, capacity: 10^12 */
#define VALIDATE_WINDOW_MAX 31622400LL          /* 366 days, in seconds */
#define VALIDATE_PERIOD_MAX (VALIDATE_WINDOW_MAX * 1000000LL) /* in us */
#define VALIDATE_BURST_MAX 1000000000LL         /* 10^9 */
#define VALIDATE_GCRA_SPAN_MAX 1000000000000000LL /* (burst + 1) spacings */
#define VALIDATE_RATE_MIN 1e-6                  /* refill, tokens/second */
#define VALIDATE_CONCURRENCY_MAX 100000LL       /* leases at once */
#define VALIDATE_LEASE_TTL_MIN 1000000LL        /* 1 s, in us */
#define VALIDATE_LEASE_TTL_MAX 3600000000LL     /* 1 h, in us */
#define VALIDATE_RATE_MAX 1e8
#define VALIDATE_PRIORITY_MAX 1000000           /* -10^6 .. 10^6 */

/* The number of code points of s when it is well-formed UTF-8 without
 * control characters (C0, DEL, C1); else -1. */
long validate_utf8_length(const char *s);

/* The columns s takes in a table: its code points (any byte that is not a
 * UTF-8 continuation byte counts one). */
size_t validate_display_width(const char *s);

/* A tenant name: 1 to VALIDATE_TENANT_NAME_MAX characters of UTF-8 text
 * without control characters, not beginning or ending with a space. */
int validate_tenant_name(const char *what, const char *s, char *err,
    size_t errlen);

/* A route pattern: 1 to RL_ROUTE_MAX bytes of UTF-8 text without control
 * characters or surrounding spaces, '*' at most as the last byte. */
int validate_route(const char *what, const char *s, char *err,
    size_t errlen);

/* 1 when c may be part of a limit name: A-Z a-z 0-9 _ . - */
int validate_limit_name_char(int c);

/* A limit name: 1 to RL_NAME_MAX of validate_limit_name_char(). */
int validate_limit_name(const char *what, const char *s, char *err,
    size_t errlen);

/* A decimal integer (an optional '-', then digits only) in [min, max]. */
int validate_integer(const char *what, const char *s, long long min,
    long long max, long long *out, char *err, size_t errlen);

/* A row id: validate_integer() from 1 to LLONG_MAX. */
int validate_id(const char *what, const char *s, long long *out, char *err,
    size_t errlen);

/* A finite decimal number in [min, max] ("2", "0.5", "1e3"); no "inf",
 * "nan", hexadecimal or spaces. */
int validate_decimal(const char *what, const char *s, double min,
    double max, double *out, char *err, size_t errlen);

/* A duration: a whole number directly followed by one of the units us,
 * ms, s, m, h, d ("500us", "2ms", "1m"), 1us to VALIDATE_PERIOD_MAX (366
 * days); *out_us in microseconds. */
int validate_duration(const char *what, const char *s, long long *out_us,
    char *err, size_t errlen);

/* Writes us (> 0) in the largest unit that divides it: "500us", "2ms",
 * "1m"; what validate_duration() reads back as us. */
void validate_duration_format(long long us, char *buf, size_t len);

/* The microseconds of a duration's unit: "d", "h", "m", "s", "ms", "us",
 * and "" (a bare number) for seconds; -1 for anything else. */
long long validate_duration_unit(const char *unit);

/* Whether GCRA can enforce count (>= 1) requests per period_us (>= 1)
 * with burst (>= 0): at most one request per microsecond, and (burst + 1)
 * spacings within VALIDATE_GCRA_SPAN_MAX.  period_text is the period as
 * typed, for the message. */
int validate_gcra(const char *period_text, long long count,
    long long period_us, long long burst, char *err, size_t errlen);

/* "on" (*on = 1) or "off" (*on = 0). */
int validate_on_off(const char *what, const char *s, int *on, char *err,
    size_t errlen);

/* A rule's failure mode: "closed" or "open". */
int validate_failure_mode(const char *what, const char *s, char *err,
    size_t errlen);

/* What a limit counts: "subject", "key" or "tenant". */
int validate_count(const char *what, const char *s, char *err,
    size_t errlen);

/* What a rule counts by: "rule" or "route". */
int validate_per(const char *what, const char *s, char *err, size_t errlen);

/* ------------------------------------------------------------------ */
/* embedded.c (generated by scripts/embed.sh from lua/ and schema/) */

/* $(BUILD)/check.lua, the Makefile's LUA files concatenated (the
 * algorithms, lua/clock.lua, lua/check.lua): the one script every check
 * runs. */
extern const char embedded_check_lua[];
extern const char embedded_dashboard_html[];

struct embedded_migration {
    int version;                /* from the file name: 001_init.sql -> 1 */
    const char *name;           /* file name without .sql */
    const char *sql;
};

/* Ordered by version; the last entry has name == NULL. */
extern const struct embedded_migration embedded_migrations[];

#endif /* RATELIMIT_H */
