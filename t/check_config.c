/*
 * check_config.c -- tests of src/config.c: defaults, loading a file (with
 * its error messages naming file and line), setting single keys, and the
 * dump, which must load back to the same values.
 *
 * Files are written with mkstemp under /tmp and removed by the test that
 * made them.  Passwords: the masking of pg_conninfo in its forms, and the
 * warning about a file holding one that others may read.
 */
#define _GNU_SOURCE             /* open_memstream */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <grp.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <check.h>              /* t/check.h: the suites, then Check */

#include "ratelimit.h"

#define TEMPLATE "/tmp/rl_check_config_XXXXXX"

/* Writes text to a new temporary file whose name is put in path. */
static void
write_temp(char path[sizeof(TEMPLATE)], const char *text)
{
    size_t len = strlen(text);
    int fd;

    memcpy(path, TEMPLATE, sizeof(TEMPLATE));
    fd = mkstemp(path);
    ck_assert_int_ne(fd, -1);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    ck_assert_int_eq(close(fd), 0);
}

/* Loads text over the defaults; the file is gone afterwards but its name
 * stays in path for the error messages. */
static int
load_text(struct rl_config *cfg, const char *text, char path[sizeof(TEMPLATE)],
    char *err, size_t errlen)
{
    int rc;

    config_defaults(cfg);
    write_temp(path, text);
    err[0] = '\0';
    rc = config_load(cfg, path, err, errlen);
    unlink(path);
    return rc;
}

/* The dump of cfg, as a string to free. */
static char *
dump_string(const struct rl_config *cfg)
{
    char *s = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&s, &n);

    ck_assert_ptr_nonnull(fp);
    config_dump(cfg, fp);
    ck_assert_int_eq(fclose(fp), 0);
    return s;
}

/* Every field but path. */
static void
assert_same_config(const struct rl_config *a, const struct rl_config *b)
{
    ck_assert_str_eq(a->listen, b->listen);
    ck_assert_uint_eq(a->listen_mode, b->listen_mode);
    ck_assert_str_eq(a->listen_owner, b->listen_owner);
    ck_assert_str_eq(a->listen_group, b->listen_group);
    ck_assert_int_eq(a->listen_backlog, b->listen_backlog);
    ck_assert_int_eq(a->workers, b->workers);
    ck_assert_int_eq(a->max_requests, b->max_requests);
    ck_assert_int_eq(a->request_timeout, b->request_timeout);
    ck_assert_str_eq(a->pg_conninfo, b->pg_conninfo);
    ck_assert_int_eq(a->pg_connect_timeout_ms, b->pg_connect_timeout_ms);
    ck_assert_str_eq(a->redis, b->redis);
    ck_assert_int_eq(a->redis_connect_timeout_ms, b->redis_connect_timeout_ms);
    ck_assert_int_eq(a->redis_command_timeout_ms, b->redis_command_timeout_ms);
    ck_assert_int_eq(a->redis_backoff_ms, b->redis_backoff_ms);
    ck_assert_int_eq(a->key_cache_ttl, b->key_cache_ttl);
    ck_assert_int_eq(a->key_cache_negative_ttl, b->key_cache_negative_ttl);
    ck_assert_int_eq(a->key_cache_size, b->key_cache_size);
    ck_assert_int_eq(a->rule_cache_ttl, b->rule_cache_ttl);
    ck_assert_int_eq(a->max_body_size, b->max_body_size);
    ck_assert_int_eq(a->retry_after_unavailable, b->retry_after_unavailable);
    ck_assert_int_eq(a->log_level, b->log_level);
    ck_assert_str_eq(a->log_target, b->log_target);
    ck_assert_str_eq(a->authorizer_path, b->authorizer_path);
    ck_assert_str_eq(a->authorizer_route, b->authorizer_route);
    ck_assert_str_eq(a->anonymous_tenant, b->anonymous_tenant);
    ck_assert_str_eq(a->trusted_proxies, b->trusted_proxies);
    ck_assert_int_eq(a->ntrusted, b->ntrusted);
    ck_assert_int_eq(memcmp(a->trusted, b->trusted,
        (size_t)a->ntrusted * sizeof(a->trusted[0])), 0);
}

static void
set_ok(struct rl_config *cfg, const char *key, const char *value)
{
    char err[512] = "";

    ck_assert_msg(config_set(cfg, key, value, err, sizeof(err)) == 0,
        "config_set(%s, %s): %s", key, value, err);
}

START_TEST(test_defaults)
{
    struct rl_config cfg;

    memset(&cfg, 0xa5, sizeof(cfg));
    config_defaults(&cfg);
    ck_assert_str_eq(cfg.path, "");
    ck_assert_str_eq(cfg.listen, "");
    ck_assert_uint_eq(cfg.listen_mode, 0660);
    ck_assert_str_eq(cfg.listen_owner, "");
    ck_assert_str_eq(cfg.listen_group, "");
    ck_assert_int_eq(cfg.listen_backlog, 1024);
    ck_assert_int_eq(cfg.workers, 4);
    ck_assert_int_eq(cfg.max_requests, 10000);
    ck_assert_int_eq(cfg.request_timeout, 30);
    ck_assert_str_eq(cfg.pg_conninfo, "dbname=ratelimit");
    ck_assert_int_eq(cfg.pg_connect_timeout_ms, 2000);
    ck_assert_str_eq(cfg.redis, "127.0.0.1:6379");
    ck_assert_int_eq(cfg.redis_connect_timeout_ms, 50);
    ck_assert_int_eq(cfg.redis_command_timeout_ms, 50);
    ck_assert_int_eq(cfg.redis_backoff_ms, 250);
    ck_assert_int_eq(cfg.key_cache_ttl, 60);
    ck_assert_int_eq(cfg.key_cache_negative_ttl, 5);
    ck_assert_int_eq(cfg.key_cache_size, 10000);
    ck_assert_int_eq(cfg.rule_cache_ttl, 30);
    ck_assert_int_eq(cfg.max_body_size, 8192);
    ck_assert_int_eq(cfg.retry_after_unavailable, 1);
    ck_assert_int_eq(cfg.log_level, RL_LOG_INFO);
    ck_assert_str_eq(cfg.log_target, "stderr");
    ck_assert_str_eq(cfg.authorizer_path, "/_ratelimit/auth");
    ck_assert_str_eq(cfg.authorizer_route, "path");
    ck_assert_str_eq(cfg.anonymous_tenant, "");
    ck_assert_str_eq(cfg.trusted_proxies, "");
    ck_assert_int_eq(cfg.ntrusted, 0);
}
END_TEST

START_TEST(test_load_good_file)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512];

    ck_assert_msg(load_text(&cfg,
        "# ratelimit-fcgi test configuration\n"
        "   # an indented comment\n"
        "\n"
        "   \t  \n"
        "workers=8\n"
        "  redis_connect_timeout_ms   =   75  \n"
        "listen = \"unix:/run/rl.sock\"\n"
        "listen_mode = 0600\n"
        "log_level = debug\n"
        "log = syslog\n"
        "pg_conninfo = \"host=db dbname=rl password=a#b=c\"\n"
        "listen_owner = \"  spaced  \"\n"
        "listen_group = \"\"\n"
        "\tmax_body_size\t=\t65536\t\n"
        "redis = [::1]:6380\r\n"
        "key_cache_size = 7",
        path, err, sizeof(err)) == 0, "load: %s", err);
    ck_assert_str_eq(cfg.path, path);
    ck_assert_int_eq(cfg.workers, 8);
    ck_assert_int_eq(cfg.redis_connect_timeout_ms, 75);
    ck_assert_str_eq(cfg.listen, "unix:/run/rl.sock");
    ck_assert_uint_eq(cfg.listen_mode, 0600);
    ck_assert_int_eq(cfg.log_level, RL_LOG_DEBUG);
    ck_assert_str_eq(cfg.log_target, "syslog");
    ck_assert_str_eq(cfg.pg_conninfo, "host=db dbname=rl password=a#b=c");
    ck_assert_str_eq(cfg.listen_owner, "  spaced  ");
    ck_assert_str_eq(cfg.listen_group, "");
    ck_assert_int_eq(cfg.max_body_size, 65536);
    ck_assert_str_eq(cfg.redis, "[::1]:6380");
    ck_assert_int_eq(cfg.key_cache_size, 7);
    /* Keys the file does not name keep their defaults. */
    ck_assert_int_eq(cfg.key_cache_ttl, 60);
    ck_assert_int_eq(cfg.redis_command_timeout_ms, 50);
    ck_assert_int_eq(cfg.listen_backlog, 1024);
}
END_TEST

START_TEST(test_load_empty_file)
{
    struct rl_config cfg, def;
    char path[sizeof(TEMPLATE)], err[512];

    ck_assert_int_eq(load_text(&cfg, "", path, err, sizeof(err)), 0);
    ck_assert_str_eq(cfg.path, path);
    config_defaults(&def);
    assert_same_config(&cfg, &def);
}
END_TEST

START_TEST(test_load_unknown_key_hint)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], want[600];

    ck_assert_int_eq(load_text(&cfg, "workers = 2\n\n  wokers = 4\n", path,
        err, sizeof(err)), -1);
    snprintf(want, sizeof(want),
        "%s:3: unknown key \"wokers\" (did you mean \"workers\"?)", path);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(load_text(&cfg, "redis_conect_timeout_ms = 5\n", path,
        err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:1: unknown key \"redis_conect_timeout_ms\" "
        "(did you mean \"redis_connect_timeout_ms\"?)", path);
    ck_assert_str_eq(err, want);
}
END_TEST

START_TEST(test_load_unknown_key_no_hint)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], want[600];

    ck_assert_int_eq(load_text(&cfg, "# x\ncompletely_unrelated_option = 1\n",
        path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want),
        "%s:2: unknown key \"completely_unrelated_option\"", path);
    ck_assert_str_eq(err, want);
}
END_TEST

/* A bad line, put on line 3 of a file, and what the message must say. */
static const struct {
    const char *line;
    const char *want;
} bad_values[] = {
    { "workers = many", "workers: \"many\" is not a whole number" },
    { "workers = 4x", "workers: \"4x\" is not a whole number" },
    { "workers =", "workers: \"\" is not a whole number" },
    { "workers = 4.0", "is not a whole number" },
    { "workers = 99999999999999999999", "is not a whole number" },
    { "workers = 257", "workers: 257 is out of range (0 to 256)" },
    { "workers = -1", "workers: -1 is out of range (0 to 256)" },
    { "max_body_size = 63", "max_body_size: 63 is out of range (64 to 1048576)" },
    { "max_body_size = 1048577", "(64 to 1048576)" },
    { "redis_connect_timeout_ms = 0", "(1 to 10000)" },
    { "listen_backlog = 65536", "(1 to 65535)" },
    { "listen_mode = 0999", "listen_mode: \"0999\" is not an octal mode" },
    { "listen_mode = 1000", "listen_mode: \"1000\" is not an octal mode" },
    { "listen_mode = -1", "is not an octal mode" },
    { "listen_mode = rw-rw----", "is not an octal mode" },
    { "listen_mode =", "is not an octal mode" },
    { "log_level = verbose",
      "log_level: \"verbose\" is not one of error, warn, info, debug" },
    { "log = file", "log: \"file\" is not stderr, syslog or an absolute "
      "file path" },
    { "log = /nonexistent-dir/x.log", "log: directory /nonexistent-dir "
      "does not exist" },
    { "access_log = on", "access_log: \"on\" is not off, stderr, syslog" },
    { "access_log = /tmp/", "names a directory, not a file" },
    { "access_log_format = xml", "is not one of logfmt|json" },
    { "slowlog_ms = -1", "slowlog_ms" },
    { "metrics_tenants = top:0", "is not off, all or top:N" },
    { "metrics_tenants = top:5x", "is not off, all or top:N" },
    { "metrics_tenants = some", "is not off, all or top:N" },
    { "redis = localhost", "redis: \"localhost\" is not \"host:port\"" },
    { "redis = unix:relative",
      "redis: \"unix:relative\": a Unix socket path must be absolute" },
    { "redis = localhost:0", "is not \"host:port\"" },
    { "redis = localhost:65536", "is not \"host:port\"" },
    { "redis = localhost:redis", "is not \"host:port\"" },
    { "redis = :6379", "is not \"host:port\"" },
    { "redis = \"\"", "redis: value must not be empty" },
    { "listen = [::1:9000", "an IPv6 address is written \"[::1]:port\"" },
    { "listen = unix:", "a Unix socket path must be absolute" },
    { "listen = 9000", "is not \"host:port\"" },
    { "pg_conninfo = \"\"", "pg_conninfo: value must not be empty" },
    { "listen_owner = "
      "\"0123456789012345678901234567890123456789012345678901234567890123\"",
      "listen_owner: value is longer than 63 bytes" },
    { "authorizer_path = auth", "authorizer_path: \"auth\" must start with '/'" },
    { "authorizer_route = query",
      "authorizer_route: \"query\" is not one of path|method_path" },
    { "trusted_proxies = 10.0.0.0/33",
      "trusted_proxies: \"10.0.0.0/33\" is not an address or network" },
    { "trusted_proxies = \"127.0.0.1, localhost\"",
      "trusted_proxies: \"localhost\" is not an address or network" },
    { "workers 4", "expected \"key = value\"" },
    { "pg_conninfo = \"dbname=x", "unbalanced quotes" },
    { "pg_conninfo = \"", "unbalanced quotes" },
};

START_TEST(test_load_bad_value)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], text[512], prefix[64];

    snprintf(text, sizeof(text), "# bad value on line 3\nkey_cache_ttl = 61\n"
        "%s\nrule_cache_ttl = 9\n", bad_values[_i].line);
    ck_assert_int_eq(load_text(&cfg, text, path, err, sizeof(err)), -1);
    snprintf(prefix, sizeof(prefix), "%s:3: ", path);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0,
        "\"%s\": message \"%s\" does not start with \"%s\"",
        bad_values[_i].line, err, prefix);
    ck_assert_msg(strstr(err, bad_values[_i].want) != NULL,
        "\"%s\": message \"%s\" lacks \"%s\"", bad_values[_i].line, err,
        bad_values[_i].want);
}
END_TEST

/* A pg_conninfo that libpq cannot read is refused, and libpq's message is
 * passed on without the pieces of the string that hold a password. */
START_TEST(test_load_conninfo_unreadable)
{
    static const char *const unreadable[] = {
        "postgresql://rl:hunter%zz2@db/rl",
        "postgresql://rl:hunter2@[::1/rl",
        "host=db user=rl hunter2",
        "host=db password='hunter2",
    };
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], text[256];
    size_t i;

    for (i = 0; i < sizeof(unreadable) / sizeof(unreadable[0]); i++) {
        snprintf(text, sizeof(text), "pg_conninfo = \"%s\"\n",
            unreadable[i]);
        ck_assert_int_eq(load_text(&cfg, text, path, err, sizeof(err)), -1);
        ck_assert_msg(strstr(err, ":1: pg_conninfo: libpq cannot read it: ")
            != NULL, "%s: %s", unreadable[i], err);
        ck_assert_msg(strstr(err, "hunter") == NULL, "%s", err);
    }
    /* What is no secret is shown. */
    ck_assert_int_eq(load_text(&cfg, "pg_conninfo = \"host=db bogus=1\"\n",
        path, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "\"bogus\"") != NULL, "%s", err);
    /* A database name alone is libpq's to take as it is. */
    ck_assert_int_eq(load_text(&cfg, "pg_conninfo = ratelimit\n", path, err,
        sizeof(err)), 0);
}
END_TEST

START_TEST(test_load_duplicate_key)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], want[600];

    ck_assert_int_eq(load_text(&cfg, "workers = 2\n# again\nworkers = 3\n",
        path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:3: \"workers\" is already set on line 1",
        path);
    ck_assert_str_eq(err, want);

    /* Spelling and quoting of the value do not matter. */
    ck_assert_int_eq(load_text(&cfg, "\n\nlog=stderr\n\n  log = \"syslog\"\n",
        path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:5: \"log\" is already set on line 3",
        path);
    ck_assert_str_eq(err, want);
}
END_TEST

/* Every error of a file is reported, one line each, not only the first. */
START_TEST(test_load_every_error)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[2048], want[600];

    ck_assert_int_eq(load_text(&cfg, "wrokers = 4\nworkers = x\n"
        "listen = tcp://127.0.0.1:9000\nworkers = 2\n", path, err,
        sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s:1: unknown key \"wrokers\"", path);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "got \"%s\"", err);
    snprintf(want, sizeof(want), "\n%s:2: workers: \"x\" is not a whole "
        "number", path);
    ck_assert_msg(strstr(err, want) != NULL, "got \"%s\"", err);
    snprintf(want, sizeof(want), "\n%s:3: listen: \"tcp://127.0.0.1:9000\": "
        "write the address without a scheme", path);
    ck_assert_msg(strstr(err, want) != NULL, "got \"%s\"", err);
    /* Line 4 is fine: three lines, no more. */
    ck_assert_ptr_null(strstr(err, ":4:"));
    /* A small buffer is filled as far as it goes, never past it. */
    ck_assert_int_eq(load_text(&cfg, "a = 1\nb = 2\nc = 3\n", path, err, 40),
        -1);
    ck_assert_int_lt((int)strlen(err), 40);
}
END_TEST

/* The redis_* keys that cannot go together are refused, each at its
 * line, and the modes that fit load. */
static const struct {
    const char *text;
    const char *want;           /* ":LINE: ..." in the error, or NULL */
} redis_combos[] = {
    { "redis = a:1, b:2\n", ":1: redis lists 2 addresses, but redis_type "
      "is single by default" },
    { "redis_type = single\nredis = a:1,b:2\n", ":2: redis lists 2 "
      "addresses, but redis_type = single on line 1" },
    { "redis_type = cluster\nredis = a:1, unix:/run/r.sock\n",
      ":2: redis: \"unix:/run/r.sock\": the nodes of a Redis Cluster" },
    { "redis_type = cluster\nredis = a:1\nredis_db = 3\n", ":3: redis_db "
      "= 3, but redis_type = cluster on line 1: a Redis Cluster has only "
      "database 0" },
    { "redis_type = sentinel\nredis = a:26379\n", ":1: redis_type = "
      "sentinel needs redis_sentinel_master" },
    { "redis_sentinel_master = m\n", ":1: redis_sentinel_master applies "
      "only to redis_type = sentinel" },
    { "redis_type = cluster\nredis_sentinel_password = x\n", ":2: "
      "redis_sentinel_password applies only to redis_type = sentinel" },
    { "redis_username = u\n", ":1: redis_username needs redis_password" },
    { "redis_type = sentinel\nredis_sentinel_master = m\n"
      "redis_sentinel_username = u\n", ":3: redis_sentinel_username needs "
      "redis_sentinel_password" },
    { "redis = a:1,,b\n", ":1: redis: \"b\" is not \"host:port\"" },
    { "redis_type = replicated\n", ":1: redis_type: \"replicated\" is not "
      "one of single|cluster|sentinel" },
    { "redis_db = 65536\n", ":1: redis_db: 65536 is out of range" },
    /* These load. */
    { "redis_type = cluster\nredis = 10.0.0.1:7000, 10.0.0.2:7000 ,"
      "[::1]:7000\nredis_password = p\nredis_username = u\n", NULL },
    { "redis_type = sentinel\nredis = a:26379,b:26379,unix:/run/s.sock\n"
      "redis_sentinel_master = mymaster\nredis_db = 2\n"
      "redis_sentinel_username = su\nredis_sentinel_password = sp\n", NULL },
    { "redis = unix:/run/redis.sock\nredis_db = 15\n", NULL },
    /* TLS (redis_tls*) */
    { "redis_tls = on\nredis = unix:/run/redis.sock\n", ":2: redis: "
      "\"unix:/run/redis.sock\": redis_tls = on (line 1) needs TCP "
      "addresses" },
    { "redis_type = cluster\nredis_tls = on\nredis = a:1, b:2, unix:/r\n",
      ":3: redis: \"unix:/r\": redis_tls = on (line 2)" },
    { "redis_type = sentinel\nredis_sentinel_master = m\n"
      "redis_sentinel_tls = on\nredis = unix:/s.sock\n", ":4: redis: "
      "\"unix:/s.sock\": redis_sentinel_tls = on (line 3)" },
    { "redis_tls = on\nredis_tls_cert_file = /dev/null\n", ":2: "
      "redis_tls_cert_file needs redis_tls_key_file" },
    { "redis_tls = on\nredis_tls_key_file = /dev/null\n", ":2: "
      "redis_tls_key_file needs redis_tls_cert_file" },
    { "redis_tls = on\nredis_tls_ca_file = /nonexistent/ca.pem\n", ":2: "
      "redis_tls_ca_file: /nonexistent/ca.pem: No such file or directory" },
    { "redis_tls_server_name = r.example\n", ":1: redis_tls_server_name "
      "applies only with redis_tls = on" },
    { "redis_tls_verify = off\n", ":1: redis_tls_verify applies only with "
      "redis_tls = on" },
    { "redis_sentinel_tls = on\n", ":1: redis_sentinel_tls applies only to "
      "redis_type = sentinel" },
    { "redis_tls = yes\n", ":1: redis_tls: \"yes\" is not one of off|on" },
    /* These load: the sentinels without TLS at a unix: address, the data
     * nodes (named by the sentinels) with it. */
    { "redis_type = sentinel\nredis_sentinel_master = m\nredis_tls = on\n"
      "redis_sentinel_tls = off\nredis = unix:/s.sock\n"
      "redis_tls_ca_file = /dev/null\n", NULL },
    { "redis_tls = on\nredis = r.example:6380\nredis_tls_cert_file = "
      "/dev/null\nredis_tls_key_file = /dev/null\nredis_tls_verify = off\n"
      "redis_tls_server_name = r.example\n", NULL },
};

START_TEST(test_load_redis_combinations)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[2048], want[300];
    int rc = load_text(&cfg, redis_combos[_i].text, path, err, sizeof(err));

    if (redis_combos[_i].want == NULL) {
        ck_assert_msg(rc == 0, "\"%s\" refused: %s", redis_combos[_i].text,
            err);
        return;
    }
    ck_assert_msg(rc == -1, "\"%s\" accepted", redis_combos[_i].text);
    snprintf(want, sizeof(want), "%s%s", path, redis_combos[_i].want);
    ck_assert_msg(strstr(err, want) != NULL, "\"%s\": got \"%s\"",
        redis_combos[_i].text, err);
}
END_TEST

/* Which connections are TLS, and the warning of redis_tls_verify = off. */
START_TEST(test_redis_tls_insecure)
{
    struct rl_config cfg;
    char msg[512];

    config_defaults(&cfg);
    ck_assert_int_eq(config_redis_tls(&cfg, 0), 0);
    ck_assert_int_eq(config_redis_tls(&cfg, 1), 0);
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 0);
    set_ok(&cfg, "redis_tls", "on");
    ck_assert_int_eq(config_redis_tls(&cfg, 0), 1);
    ck_assert_int_eq(config_redis_tls(&cfg, 1), 1);
    set_ok(&cfg, "redis_sentinel_tls", "off");
    ck_assert_int_eq(config_redis_tls(&cfg, 1), 0);
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 0);
    set_ok(&cfg, "redis_tls_verify", "off");
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 1);
    ck_assert_ptr_nonnull(strstr(msg, "redis_tls_verify = off"));
    set_ok(&cfg, "redis_tls", "off");
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 0);
    /* Only the sentinels over TLS, unverified: warned in sentinel mode. */
    set_ok(&cfg, "redis_sentinel_tls", "on");
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 0);
    set_ok(&cfg, "redis_type", "sentinel");
    ck_assert_int_eq(config_check_insecure(&cfg, msg, sizeof(msg)), 1);
}
END_TEST

/* status_allow and metrics_allow: loopback by default, parsed. */
START_TEST(test_allow_defaults)
{
    struct rl_config cfg;

    config_defaults(&cfg);
    ck_assert_int_eq(cfg.nstatus, 2);
    ck_assert_int_eq(addr_match(cfg.status_nets, cfg.nstatus, "127.0.0.1"),
        1);
    ck_assert_int_eq(addr_match(cfg.metrics_nets, cfg.nmetrics, "::1"), 1);
    ck_assert_int_eq(addr_match(cfg.status_nets, cfg.nstatus, "10.1.2.3"),
        0);
    set_ok(&cfg, "status_allow", "");
    ck_assert_int_eq(cfg.nstatus, 0);
    set_ok(&cfg, "metrics_allow", "10.0.0.0/8");
    ck_assert_int_eq(addr_match(cfg.metrics_nets, cfg.nmetrics, "10.1.2.3"),
        1);
}
END_TEST

/* A password is never written out, only that there is one. */
START_TEST(test_dump_hides_passwords)
{
    struct rl_config cfg;
    char *s;

    config_defaults(&cfg);
    set_ok(&cfg, "redis_password", "hunter2");
    s = dump_string(&cfg);
    ck_assert_ptr_null(strstr(s, "hunter2"));
    ck_assert_ptr_nonnull(strstr(s, "redis_password = \"(set)\"\n"));
    ck_assert_ptr_nonnull(strstr(s, "redis_sentinel_password = \"\"\n"));
    free(s);
}
END_TEST

/* pg_conninfo as written, and as -T shows it: each form of a password,
 * and strings without one, which are shown unchanged. */
static const struct {
    const char *conninfo, *shown;
    int passwords;
} conninfo_masks[] = {
    { "host=db dbname=rl password=hunter2",
      "host=db dbname=rl password=(set)", 1 },
    { "host=db  password = 'hunter 2'\tuser=rl",
      "host=db  password = (set)\tuser=rl", 1 },
    { "password='it\\'s hunter2' host=db", "password=(set) host=db", 1 },
    { "password=hunter\\ 2 host=db", "password=(set) host=db", 1 },
    { "host=db sslpassword=hunter2 password=x",
      "host=db sslpassword=(set) password=(set)", 2 },
    { "postgresql://rl:hunter2@db.example:5433/rl?sslmode=require",
      "postgresql://rl:(set)@db.example:5433/rl?sslmode=require", 1 },
    { "postgres://rl@db/rl?password=hunter2&connect_timeout=5",
      "postgres://rl@db/rl?password=(set)&connect_timeout=5", 1 },
    { "postgresql://rl:hunter2@db/rl?password=hunter2",
      "postgresql://rl:(set)@db/rl?password=(set)", 2 },
    { "postgresql://rl:hun?ter2@db/rl", "postgresql://rl:(set)@db/rl", 1 },
    { "postgresql://rl:hun/ter2@db/rl", "postgresql://rl:(set)@db/rl", 1 },
    { "postgresql:///rl?host=/run/postgresql&pass%77ord=hunter2",
      "postgresql:///rl?host=/run/postgresql&pass%77ord=(set)", 1 },
    /* What libpq cannot read is hidden from where it stops. */
    { "host=db password 'hunter2'", "host=db (set)", 1 },
    { "host=db password='hunter2", "host=db (set)", 1 },
    /* No password. */
    { "dbname=ratelimit", "dbname=ratelimit", 0 },
    { "ratelimit", "ratelimit", 0 },
    { "host=db password='' user=rl", "host=db password='' user=rl", 0 },
    { "host=db application_name='password=x'",
      "host=db application_name='password=x'", 0 },
    { "postgresql://rl@db:5433/rl?sslmode=disable",
      "postgresql://rl@db:5433/rl?sslmode=disable", 0 },
    { "postgresql://[::1]:5433/rl", "postgresql://[::1]:5433/rl", 0 },
};

START_TEST(test_conninfo_mask)
{
    const char *in = conninfo_masks[_i].conninfo;
    char out[1024], again[1024];
    int n;

    n = config_conninfo_mask(in, out, sizeof(out));
    ck_assert_str_eq(out, conninfo_masks[_i].shown);
    ck_assert_int_eq(n, conninfo_masks[_i].passwords);
    ck_assert_ptr_null(strstr(out, "hunter"));
    /* Masking what was masked changes nothing: the dump loads and dumps
     * again to the same text. */
    config_conninfo_mask(out, again, sizeof(again));
    ck_assert_str_eq(again, out);
}
END_TEST

/* A result that would not fit is the mask alone, never a cut string. */
START_TEST(test_conninfo_mask_too_long)
{
    char out[24];

    ck_assert_int_eq(config_conninfo_mask("host=db password=x user=rl", out,
        sizeof(out)), 1);
    ck_assert_str_eq(out, "(set)");
    ck_assert_int_eq(config_conninfo_mask("host=db password=x", out,
        sizeof(out)), 1);
    ck_assert_str_eq(out, "host=db password=(set)");
}
END_TEST

/* -T shows pg_conninfo without its password, and the dump loads back. */
START_TEST(test_dump_hides_conninfo_password)
{
    struct rl_config cfg, back;
    char path[sizeof(TEMPLATE)], err[512];
    char *s, *again;

    config_defaults(&cfg);
    set_ok(&cfg, "pg_conninfo",
        "postgresql://rl:hunter2@db/rl?sslpassword=hunter3");
    s = dump_string(&cfg);
    ck_assert_ptr_null(strstr(s, "hunter"));
    ck_assert_ptr_nonnull(strstr(s, "pg_conninfo = \"postgresql://rl:(set)"
        "@db/rl?sslpassword=(set)\"\n"));
    ck_assert_msg(load_text(&back, s, path, err, sizeof(err)) == 0,
        "reloading the dump: %s", err);
    again = dump_string(&back);
    ck_assert_str_eq(again, s);
    free(s);
    free(again);
}
END_TEST

/* Loads text from a file of the given mode, kept until the caller
 * unlinks path; returns config_check_secrets with the message in msg. */
static int
secrets_of(const char *text, mode_t mode, gid_t gid, const char *group,
    char path[sizeof(TEMPLATE)], char *msg, size_t msglen)
{
    struct rl_config cfg;
    char err[512] = "";

    write_temp(path, text);
    ck_assert_int_eq(chmod(path, mode), 0);
    if (gid != (gid_t)-1)
        ck_assert_int_eq(chown(path, (uid_t)-1, gid), 0);
    config_defaults(&cfg);
    ck_assert_msg(config_load(&cfg, path, err, sizeof(err)) == 0, "%s", err);
    if (group != NULL)
        set_ok(&cfg, "group", group);
    msg[0] = '\0';
    return config_check_secrets(&cfg, msg, msglen);
}

START_TEST(test_secrets_readable_by_all)
{
    char path[sizeof(TEMPLATE)], msg[1024], want[256];

    ck_assert_int_eq(secrets_of("redis_password = hunter2\n", 0644,
        (gid_t)-1, NULL, path, msg, sizeof(msg)), 1);
    snprintf(want, sizeof(want), "%s holds a password (redis_password) "
        "and every user may read it (mode 0644): chmod 640 %s (or 600)",
        path, path);
    ck_assert_str_eq(msg, want);
    unlink(path);

    ck_assert_int_eq(secrets_of("pg_conninfo = \"postgresql://rl:x@db/rl\""
        "\nredis_type = sentinel\nredis_sentinel_master = m\n"
        "redis_sentinel_password = y\n", 0604, (gid_t)-1, NULL, path, msg,
        sizeof(msg)), 1);
    ck_assert_ptr_nonnull(strstr(msg, "(pg_conninfo, "
        "redis_sentinel_password)"));
    ck_assert_ptr_nonnull(strstr(msg, "(mode 0604)"));
    ck_assert_ptr_null(strstr(msg, "rl:x"));
    unlink(path);
}
END_TEST

START_TEST(test_secrets_quiet)
{
    char path[sizeof(TEMPLATE)], msg[1024];

    /* A password, but only the owner and the group read the file. */
    ck_assert_int_eq(secrets_of("pg_conninfo = \"password=x\"\n", 0640,
        (gid_t)-1, NULL, path, msg, sizeof(msg)), 0);
    ck_assert_str_eq(msg, "");
    unlink(path);
    /* Anyone may read the file, but there is no password in it. */
    ck_assert_int_eq(secrets_of("pg_conninfo = \"host=db password=''\"\n"
        "redis_username = \"\"\n", 0644, (gid_t)-1, NULL, path, msg,
        sizeof(msg)), 0);
    unlink(path);
}
END_TEST

/* A file the group "daemon" (gid 1) may read, for a service whose group
 * is root: the warning names both.  Changing a file's group takes root;
 * as anyone else there is nothing to check. */
START_TEST(test_secrets_other_group)
{
    char path[sizeof(TEMPLATE)], msg[1024], want[256], name[64];
    struct group *gr = getgrgid(1);

    if (geteuid() != 0 || gr == NULL)
        return;
    /* (getgrgid's answer is overwritten by the next look-up) */
    snprintf(name, sizeof(name), "%s", gr->gr_name);
    snprintf(want, sizeof(want), "and group %s may read it (mode 0640), "
        "not only the service's group root: chgrp root ", name);
    ck_assert_int_eq(secrets_of("redis_password = hunter2\n", 0640, 1,
        "root", path, msg, sizeof(msg)), 1);
    ck_assert_ptr_nonnull(strstr(msg, want));
    unlink(path);
    /* The service's own group, or no group named: no warning. */
    ck_assert_msg(secrets_of("redis_password = hunter2\n", 0640, 1, name,
        path, msg, sizeof(msg)) == 0, "%s", msg);
    unlink(path);
    ck_assert_int_eq(secrets_of("redis_password = hunter2\n", 0640, 1,
        NULL, path, msg, sizeof(msg)), 0);
    unlink(path);
}
END_TEST

START_TEST(test_load_missing_file)
{
    struct rl_config cfg;
    char path[sizeof(TEMPLATE)], err[512], want[600];

    write_temp(path, "");
    ck_assert_int_eq(unlink(path), 0);
    config_defaults(&cfg);
    ck_assert_int_eq(config_load(&cfg, path, err, sizeof(err)), -1);
    snprintf(want, sizeof(want), "%s: %s", path, strerror(ENOENT));
    ck_assert_str_eq(err, want);
    ck_assert_str_eq(cfg.path, "");
}
END_TEST

START_TEST(test_load_directory)
{
    struct rl_config cfg;
    char err[512];

    config_defaults(&cfg);
    ck_assert_int_eq(config_load(&cfg, "/tmp", err, sizeof(err)), -1);
    ck_assert_msg(strncmp(err, "/tmp: ", 6) == 0, "message \"%s\"", err);
}
END_TEST

START_TEST(test_set_each_type)
{
    struct rl_config cfg;
    char err[512];

    config_defaults(&cfg);
    set_ok(&cfg, "workers", "7");
    ck_assert_int_eq(cfg.workers, 7);
    set_ok(&cfg, "workers", "0");
    ck_assert_int_eq(cfg.workers, 0);
    set_ok(&cfg, "workers", "256");
    ck_assert_int_eq(cfg.workers, 256);
    set_ok(&cfg, "listen_mode", "0640");
    ck_assert_uint_eq(cfg.listen_mode, 0640);
    set_ok(&cfg, "listen_mode", "777");
    ck_assert_uint_eq(cfg.listen_mode, 0777);
    set_ok(&cfg, "listen_mode", "0");
    ck_assert_uint_eq(cfg.listen_mode, 0);
    set_ok(&cfg, "log_level", "warn");
    ck_assert_int_eq(cfg.log_level, RL_LOG_WARN);
    set_ok(&cfg, "log_level", "error");
    ck_assert_int_eq(cfg.log_level, RL_LOG_ERROR);
    set_ok(&cfg, "log", "syslog");
    ck_assert_str_eq(cfg.log_target, "syslog");
    set_ok(&cfg, "log", "stderr");
    ck_assert_str_eq(cfg.log_target, "stderr");
    set_ok(&cfg, "pg_conninfo", "host=x user=y");
    ck_assert_str_eq(cfg.pg_conninfo, "host=x user=y");
    set_ok(&cfg, "redis", "unix:/run/redis.sock");
    ck_assert_str_eq(cfg.redis, "unix:/run/redis.sock");
    set_ok(&cfg, "redis", "redis.internal:6380");
    ck_assert_str_eq(cfg.redis, "redis.internal:6380");
    set_ok(&cfg, "listen", "[::1]:9000");
    ck_assert_str_eq(cfg.listen, "[::1]:9000");
    set_ok(&cfg, "listen", "127.0.0.1:9000");
    ck_assert_str_eq(cfg.listen, "127.0.0.1:9000");
    set_ok(&cfg, "listen", "");
    ck_assert_str_eq(cfg.listen, "");
    set_ok(&cfg, "listen_owner",
        "012345678901234567890123456789012345678901234567890123456789012");
    ck_assert_uint_eq(strlen(cfg.listen_owner), 63);

    set_ok(&cfg, "authorizer_path", "");
    ck_assert_str_eq(cfg.authorizer_path, "");
    set_ok(&cfg, "authorizer_route", "method_path");
    ck_assert_str_eq(cfg.authorizer_route, "method_path");
    set_ok(&cfg, "trusted_proxies", "192.168.0.0/16,::1");
    ck_assert_str_eq(cfg.trusted_proxies, "192.168.0.0/16,::1");
    ck_assert_int_eq(cfg.ntrusted, 2);
    ck_assert_int_eq(cfg.trusted[0].prefix, 16);
    ck_assert_int_eq(cfg.trusted[1].prefix, 128);
    set_ok(&cfg, "trusted_proxies", "");
    ck_assert_int_eq(cfg.ntrusted, 0);

    /* Messages of config_set carry no file:line; they start with the key. */
    ck_assert_int_eq(config_set(&cfg, "max_requests", "-5", err, sizeof(err)),
        -1);
    ck_assert_str_eq(err, "max_requests: -5 is out of range (0 to 100000000)");
    ck_assert_int_eq(config_set(&cfg, "log_level", "Info", err, sizeof(err)),
        -1);
    ck_assert_str_eq(err,
        "log_level: \"Info\" is not one of error, warn, info, debug");
    ck_assert_int_eq(config_set(&cfg, "no_such_key", "1", err, sizeof(err)),
        -1);
    ck_assert_str_eq(err, "unknown key \"no_such_key\"");
    ck_assert_int_eq(config_set(&cfg, "worker", "1", err, sizeof(err)), -1);
    ck_assert_str_eq(err, "unknown key \"worker\" (did you mean \"workers\"?)");
}
END_TEST

START_TEST(test_set_unix_path_length)
{
    struct rl_config cfg;
    char err[512], v[256];

    /* sun_path holds 107 bytes and the NUL. */
    config_defaults(&cfg);
    memcpy(v, "unix:/", 6);
    memset(v + 6, 'p', 106);
    v[112] = '\0';
    ck_assert_uint_eq(strlen(v + 5), 107);
    set_ok(&cfg, "listen", v);
    v[112] = 'p';
    v[113] = '\0';
    ck_assert_int_eq(config_set(&cfg, "listen", v, err, sizeof(err)), -1);
    ck_assert_str_eq(err, "listen: Unix socket path is longer than 107 bytes");
}
END_TEST

START_TEST(test_dump_round_trip)
{
    struct rl_config cfg, back;
    char path[sizeof(TEMPLATE)], err[512];
    char *text, *again;

    config_defaults(&cfg);
    set_ok(&cfg, "listen", "unix:/run/rl/fcgi.sock");
    set_ok(&cfg, "listen_mode", "0600");
    set_ok(&cfg, "listen_owner", "www-data");
    set_ok(&cfg, "listen_group", "www data");
    set_ok(&cfg, "listen_backlog", "128");
    set_ok(&cfg, "workers", "0");
    set_ok(&cfg, "max_requests", "0");
    set_ok(&cfg, "request_timeout", "0");
    set_ok(&cfg, "pg_conninfo",
        "host=db port=5433 dbname=rl application_name='a#b=\"c\"'");
    set_ok(&cfg, "pg_connect_timeout_ms", "10");
    set_ok(&cfg, "redis", "[::1]:6380");
    set_ok(&cfg, "redis_connect_timeout_ms", "10000");
    set_ok(&cfg, "redis_command_timeout_ms", "1");
    set_ok(&cfg, "redis_backoff_ms", "0");
    set_ok(&cfg, "key_cache_ttl", "86400");
    set_ok(&cfg, "key_cache_negative_ttl", "3600");
    set_ok(&cfg, "key_cache_size", "1");
    set_ok(&cfg, "rule_cache_ttl", "0");
    set_ok(&cfg, "max_body_size", "1048576");
    set_ok(&cfg, "retry_after_unavailable", "3600");
    set_ok(&cfg, "log_level", "debug");
    set_ok(&cfg, "log", "syslog");
    set_ok(&cfg, "authorizer_path", "/auth/check");
    set_ok(&cfg, "authorizer_route", "method_path");
    set_ok(&cfg, "anonymous_tenant", "anon-tenant");
    set_ok(&cfg, "trusted_proxies", "127.0.0.1, 10.0.0.0/8 ::1");
    ck_assert_int_eq(cfg.ntrusted, 3);

    text = dump_string(&cfg);
    ck_assert_msg(load_text(&back, text, path, err, sizeof(err)) == 0,
        "reloading the dump: %s\n%s", err, text);
    assert_same_config(&cfg, &back);
    again = dump_string(&back);
    ck_assert_str_eq(again, text);
    free(text);
    free(again);
}
END_TEST

START_TEST(test_dump_defaults_round_trip)
{
    struct rl_config def, back;
    char path[sizeof(TEMPLATE)], err[512];
    char *text;

    config_defaults(&def);
    text = dump_string(&def);
    ck_assert_ptr_nonnull(strstr(text, "workers = 4\n"));
    ck_assert_ptr_nonnull(strstr(text, "listen_mode = 0660\n"));
    ck_assert_ptr_nonnull(strstr(text, "listen = \"\"\n"));
    ck_assert_ptr_nonnull(strstr(text, "log_level = info\n"));
    ck_assert_msg(load_text(&back, text, path, err, sizeof(err)) == 0,
        "reloading the dump: %s", err);
    assert_same_config(&def, &back);
    free(text);
}
END_TEST

/* conf/ratelimit.conf says "the value shown is the default"; hold it to it.
 * The path is relative: the tests run from the top of the tree. */
START_TEST(test_shipped_config_is_defaults)
{
    struct rl_config cfg, def;
    char err[512];

    config_defaults(&cfg);
    ck_assert_msg(config_load(&cfg, "conf/ratelimit.conf", err,
        sizeof(err)) == 0, "%s (run from the top of the tree)", err);
    config_defaults(&def);
    assert_same_config(&cfg, &def);
}
END_TEST

START_TEST(test_help_lists_keys)
{
    char *s = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&s, &n);

    ck_assert_ptr_nonnull(fp);
    config_help(fp);
    ck_assert_int_eq(fclose(fp), 0);
    ck_assert_ptr_nonnull(strstr(s, "workers"));
    ck_assert_ptr_nonnull(strstr(s, "default \"4\", 0 to 256"));
    ck_assert_ptr_nonnull(strstr(s, "max_body_size"));
    ck_assert_ptr_nonnull(strstr(s, "default \"8192\", 64 to 1048576"));
    ck_assert_ptr_nonnull(strstr(s, "log_level"));
    free(s);
}
END_TEST

/* -K's listing: seven tab-separated fields a key, from the same table. */
START_TEST(test_keys_print)
{
    char *s = NULL;
    size_t n = 0;
    FILE *fp = open_memstream(&s, &n);

    ck_assert_ptr_nonnull(fp);
    config_keys_print(fp);
    ck_assert_int_eq(fclose(fp), 0);
    ck_assert_ptr_nonnull(strstr(s,
        "workers\tinteger\t4\t0\t256\tprocesses\t-\n"));
    ck_assert_ptr_nonnull(strstr(s,
        "listen_mode\tmode\t0660\t0000\t0777\t-\t-\n"));
    ck_assert_ptr_nonnull(strstr(s,
        "\nlisten_owner\tstring\t\"\"\t-\t-\t-\t-\n"));
    ck_assert_ptr_nonnull(strstr(s,
        "\nlog_level\tenum\tinfo\t-\t-\t-\terror|warn|info|debug\n"));
    ck_assert_ptr_nonnull(strstr(s,
        "\nfcgi_read_timeout_ms\tinteger\t3000\t100\t600000\tms\t-\n"));
    free(s);
}
END_TEST

Suite *
config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc;

    tc = tcase_create("defaults");
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_help_lists_keys);
    tcase_add_test(tc, test_keys_print);
    suite_add_tcase(s, tc);

    tc = tcase_create("load");
    tcase_add_test(tc, test_load_good_file);
    tcase_add_test(tc, test_load_empty_file);
    tcase_add_test(tc, test_load_unknown_key_hint);
    tcase_add_test(tc, test_load_unknown_key_no_hint);
    tcase_add_loop_test(tc, test_load_bad_value, 0,
        (int)(sizeof(bad_values) / sizeof(bad_values[0])));
    tcase_add_test(tc, test_load_duplicate_key);
    tcase_add_test(tc, test_load_conninfo_unreadable);
    tcase_add_test(tc, test_load_every_error);
    tcase_add_loop_test(tc, test_load_redis_combinations, 0,
        (int)(sizeof(redis_combos) / sizeof(redis_combos[0])));
    tcase_add_test(tc, test_load_missing_file);
    tcase_add_test(tc, test_load_directory);
    tcase_add_test(tc, test_shipped_config_is_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("set");
    tcase_add_test(tc, test_set_each_type);
    tcase_add_test(tc, test_set_unix_path_length);
    suite_add_tcase(s, tc);

    tc = tcase_create("dump");
    tcase_add_test(tc, test_dump_round_trip);
    tcase_add_test(tc, test_dump_defaults_round_trip);
    tcase_add_test(tc, test_dump_hides_passwords);
    tcase_add_test(tc, test_dump_hides_conninfo_password);
    tcase_add_loop_test(tc, test_conninfo_mask, 0,
        (int)(sizeof(conninfo_masks) / sizeof(conninfo_masks[0])));
    tcase_add_test(tc, test_conninfo_mask_too_long);
    tcase_add_test(tc, test_allow_defaults);
    tcase_add_test(tc, test_redis_tls_insecure);
    suite_add_tcase(s, tc);

    tc = tcase_create("secrets");
    tcase_add_test(tc, test_secrets_readable_by_all);
    tcase_add_test(tc, test_secrets_quiet);
    tcase_add_test(tc, test_secrets_other_group);
    suite_add_tcase(s, tc);
    return s;
}
