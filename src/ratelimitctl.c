/*
 * ratelimitctl.c -- the admin tool: applies the schema migrations and
 * manages tenants, their API keys and their rules in PostgreSQL.
 *
 * Each run does one command.  Every argument is checked before the database
 * is touched, so a typing mistake exits with status 2 and changes nothing;
 * every change that takes more than one statement runs in one transaction,
 * so a failure leaves nothing half-written.  A change of the rules after
 * which some route's check would need more limits than one check decides
 * (RL_MAX_LIMITS) is refused, also with status 2 and nothing changed (see
 * "The plan guard").  User-supplied values reach the
 * server only as query parameters, never inside SQL text.  API keys come
 * from the OS random generator, are shown once, and are stored only as
 * their SHA-256 (what the service looks up) and their first 8 characters
 * (so that people can tell keys apart in listings).  Workers pick up the
 * changes through the triggers of schema/001_init.sql, which NOTIFY them;
 * schema/002_limits.sql ties each algorithm to its parameters and keeps a
 * rule at 8 limits or fewer, whoever writes to the tables.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "ratelimit.h"

#define CTL_NAME "ratelimitctl"
#define CTL_DEFAULT_CONFIG "/etc/ratelimit-fcgi/ratelimit.conf"

#define CTL_EXIT_OK 0
#define CTL_EXIT_FAIL 1         /* runtime and database errors */
#define CTL_EXIT_USAGE 2        /* bad command line */

/* Bounds of what the tool accepts.  Those of the limit parameters are the
 * CHECKs of schema/002_limits.sql, so that a value the database would
 * refuse is a usage error (exit 2) and not a database error (exit 1). */
#define CTL_TENANT_NAME_MAX 128         /* characters */
#define CTL_COUNT_MAX 1000000000000LL   /* --limit, --capacity: 10^12 */
#define CTL_WINDOW_MAX 31622400LL       /* --window: 366 days, in seconds */
#define CTL_PERIOD_MAX (CTL_WINDOW_MAX * 1000000LL)  /* --period, in us */
#define CTL_BURST_MAX 1000000000LL      /* --burst: 10^9 */
#define CTL_GCRA_SPAN_MAX 1000000000000000LL  /* (burst + 1) spacings, us */
#define CTL_RATE_MIN 1e-6               /* --refill-rate, tokens/second */
#define CTL_RATE_MAX 1e8
#define CTL_PRIORITY_MAX 1000000        /* --priority: -10^6 .. 10^6 */
#define CTL_LIMIT_NAME_MAX 64

#define CTL_KEY_RANDOM_BYTES 24
#define CTL_KEY_PREFIX_LEN 8

/* Serializes concurrent "migrate" runs (pg_advisory_xact_lock key: "rlmg"). */
#define CTL_MIGRATE_LOCK "1919708519"

#define CTL_MAX_POSITIONAL 2
#define CTL_MAX_OPTIONS 16

/* ------------------------------------------------------------------ */
/* Command line */

struct ctl_option {
    const char *name;           /* without the leading "--" */
    int has_value;
};

struct ctl_args {
    const char *pos[CTL_MAX_POSITIONAL];
    int npos;
    const char *value[CTL_MAX_OPTIONS]; /* by index in the command's options */
    int given[CTL_MAX_OPTIONS];
};

struct ctl;
struct ctl_command;

typedef int (*ctl_run_fn)(struct ctl *, const struct ctl_command *,
    const struct ctl_args *);

struct ctl_command {
    const char *noun;
    const char *verb;           /* NULL for one-word commands */
    const char *synopsis;       /* the arguments after the command words */
    const char *positional[CTL_MAX_POSITIONAL + 1];  /* names, NULL ended */
    const struct ctl_option *options;                /* NULL-name ended */
    ctl_run_fn run;
};

/* The state of one run: where the configuration is and the connection. */
struct ctl {
    const char *config_path;
    int config_given;           /* -c was used: the file must exist */
    struct rl_config cfg;
    PGconn *conn;
    char err[512];              /* the last database error, one line */
    char sqlstate[6];
    char constraint[64];        /* the constraint it broke, or "" */
    int err_line;               /* line of a failing migration, or 0 */
};

static const char ctl_help_text[] =
"NAME\n"
"    ratelimitctl - administer the tenants, API keys and rules of\n"
"    ratelimit-fcgi\n"
"\n"
"SYNOPSIS\n"
"    ratelimitctl [-c FILE] migrate\n"
"    ratelimitctl [-c FILE] tenant add NAME\n"
"    ratelimitctl [-c FILE] tenant list\n"
"    ratelimitctl [-c FILE] tenant suspend NAME\n"
"    ratelimitctl [-c FILE] tenant resume NAME\n"
"    ratelimitctl [-c FILE] key create TENANT [--role check|admin]\n"
"    ratelimitctl [-c FILE] key list TENANT\n"
"    ratelimitctl [-c FILE] key revoke KEY_ID\n"
"    ratelimitctl [-c FILE] rule add TENANT --route PATTERN LIMIT\n"
"                     [--name LIMITNAME] [--priority N] [--always]\n"
"                     [--shadow] [--failure-mode closed|open]\n"
"                     [--per rule|route]\n"
"    ratelimitctl [-c FILE] rule list TENANT\n"
"    ratelimitctl [-c FILE] rule set RULE_ID [--enabled on|off]\n"
"                     [--always on|off] [--shadow on|off]\n"
"                     [--failure-mode closed|open] [--per rule|route]\n"
"                     [--priority N]\n"
"    ratelimitctl [-c FILE] rule remove RULE_ID\n"
"    ratelimitctl [-c FILE] limit add RULE_ID --name LIMITNAME LIMIT\n"
"    ratelimitctl [-c FILE] limit remove LIMIT_ID\n"
"\n"
"    where LIMIT is one of\n"
"        --algorithm token_bucket --capacity N --refill-rate R\n"
"        --algorithm sliding_window --limit N --window SECONDS\n"
"        --algorithm gcra --limit N --period DURATION [--burst B]\n"
"        --algorithm fixed_window --limit N --calendar minute|hour|day|month\n"
"\n"
"    ratelimitctl -h | --help | --version\n"
"\n"
"DESCRIPTION\n"
"    ratelimitctl prepares the PostgreSQL database of ratelimit-fcgi and\n"
"    manages what is in it.  Running workers learn of every change within\n"
"    about a second (the tables NOTIFY the channel ratelimit_changes), so\n"
"    nothing needs to be restarted.\n"
"\n"
"    Every argument is checked before the database is contacted; a bad\n"
"    command line changes nothing.  A command that makes several changes\n"
"    makes all of them or none.\n"
"\n"
"    One check decides at most 8 limits together: those of the most\n"
"    specific rule that matches the route and those of every other\n"
"    matching --always rule.  A rule add, rule set, rule remove or limit\n"
"    add after which some route would need more than 8 (and more than\n"
"    before) is refused with exit status 2 and changes nothing; the\n"
"    message names the routes and the rules.  (The service answers a\n"
"    check that needs more than 8, from rules written some other way,\n"
"    503 misconfigured.)\n"
"\n"
"OPTIONS\n"
"    -c FILE, --config FILE\n"
"        Read the database settings from FILE instead of\n"
"        " CTL_DEFAULT_CONFIG ".  Of the configuration\n"
"        only pg_conninfo and pg_connect_timeout_ms are used.  Without -c\n"
"        a missing default file is not an error: the defaults apply\n"
"        (pg_conninfo \"dbname=ratelimit\", with libpq's PG* environment\n"
"        variables filling in the rest).\n"
"\n"
"    -h, --help\n"
"        Print this text and exit.  After a command, print that command's\n"
"        usage.\n"
"\n"
"    --version\n"
"        Print the version and exit.\n"
"\n"
"COMMANDS\n"
"    migrate\n"
"        Apply, in order, the schema migrations built into this program\n"
"        that the database does not have yet, each in its own\n"
"        transaction, and record each in the table schema_migrations.\n"
"        Prints the migrations it applied.  Running it again applies\n"
"        nothing.  Concurrent runs wait for each other.\n"
"\n"
"    tenant add NAME\n"
"        Create an active tenant.  NAME is 1 to 128 characters of UTF-8\n"
"        text without control characters or surrounding spaces.  Prints\n"
"        the tenant's id.\n"
"\n"
"    tenant list\n"
"        List the tenants with their status and their numbers of active\n"
"        keys and of rules.\n"
"\n"
"    tenant suspend NAME, tenant resume NAME\n"
"        Set the tenant's status.  Checks with the keys of a suspended\n"
"        tenant are answered 403 tenant_suspended.\n"
"\n"
"    key create TENANT [--role check|admin]\n"
"        Create an API key for TENANT (a tenant name).  The key is made of\n"
"        24 bytes from the operating system's random generator, written\n"
"        as \"rl_\" followed by 32 URL-safe base64 characters.  It is\n"
"        printed once, on standard output, and never stored: the database\n"
"        keeps its SHA-256 and its first 8 characters.  The role is\n"
"        \"check\" (the default: may call /v1/check) or \"admin\" (may read\n"
"        the configuration endpoints, may not check).\n"
"\n"
"    key list TENANT\n"
"        List TENANT's keys: id, prefix, role, status, creation and last\n"
"        use (UTC).  Never shows hashes.\n"
"\n"
"    key revoke KEY_ID\n"
"        Revoke the key with this id (see key list).  Revoking a revoked\n"
"        key changes nothing and is not an error.\n"
"\n"
"    rule add TENANT --route PATTERN LIMIT [options]\n"
"        Add a rule with one limit to TENANT, in one transaction, and\n"
"        print the rule's id.  More limits can be added to the rule with\n"
"        limit add.  Options:\n"
"\n"
"        --route PATTERN\n"
"            \"*\" matches every route, a pattern ending in \"*\" matches\n"
"            the routes that begin with the rest, any other pattern\n"
"            matches exactly that route.  1 to 512 bytes, no control\n"
"            characters, no surrounding spaces, \"*\" only at the end.\n"
"            The most specific matching rule applies: exact, then the\n"
"            longest prefix, then \"*\".\n"
"        --algorithm ALGORITHM and its parameters (LIMIT)\n"
"            See LIMITS below.\n"
"        --name LIMITNAME\n"
"            The limit's name, unique within the rule: 1 to 64 of\n"
"            A-Z a-z 0-9 _ . -; default \"default\".\n"
"        --priority N\n"
"            Breaks ties between equally specific rules; higher wins.\n"
"            -1000000 to 1000000, default 0.\n"
"        --always\n"
"            The rule applies whenever its pattern matches, in addition\n"
"            to the most specific matching rule; the limits of both are\n"
"            decided together, all or nothing.  For a quota that always\n"
"            counts, such as a tenant-wide daily quota on \"*\".\n"
"        --shadow\n"
"            Evaluate and count, but never deny (to try a rule out).\n"
"        --failure-mode closed | open\n"
"            When Redis is unreachable: answer 503 (closed, the default)\n"
"            or let the request through (open).\n"
"        --per rule | route\n"
"            Count all routes the rule matches together (rule, the\n"
"            default) or each route separately (route).\n"
"\n"
"    rule list TENANT\n"
"        List TENANT's rules, one line per limit: the rule's id, route,\n"
"        priority and switches (enabled, always, shadow, failure mode,\n"
"        per), then the limit's id, name, algorithm and parameters.\n"
"\n"
"    rule set RULE_ID [options]\n"
"        Change the rule's switches; what is not given stays as it is,\n"
"        and at least one option is required.  Prints the rule's\n"
"        settings afterwards.  Options:\n"
"\n"
"        --enabled on | off\n"
"            A disabled rule is ignored as if it did not exist.\n"
"        --always on | off, --shadow on | off\n"
"        --failure-mode closed | open, --per rule | route\n"
"        --priority N\n"
"            As for rule add.\n"
"\n"
"    rule remove RULE_ID\n"
"        Remove the rule with this id and its limits.\n"
"\n"
"    limit add RULE_ID --name LIMITNAME LIMIT\n"
"        Add a limit to an existing rule and print the limit's id.  All\n"
"        the limits of a rule are enforced together: a request is allowed\n"
"        only if every one of them allows it, and a denied request counts\n"
"        against none.  LIMITNAME (required) must differ from the names\n"
"        of the rule's other limits.  A rule has at most 8 limits; the\n"
"        database refuses a ninth.\n"
"\n"
"    limit remove LIMIT_ID\n"
"        Remove the limit with this id (see rule list).  A rule keeps at\n"
"        least one limit: to remove the last one, remove the rule.\n"
"\n"
"LIMITS\n"
"    Every limit has an algorithm and exactly that algorithm's\n"
"    parameters; any other parameter option is an error.\n"
"\n"
"    --algorithm token_bucket --capacity N --refill-rate R\n"
"        The bucket holds up to N tokens (1 to 10^12) and gains R tokens\n"
"        per second (a decimal number, 0.000001 to 10^8); each request\n"
"        takes one.\n"
"\n"
"    --algorithm sliding_window --limit N --window SECONDS\n"
"        At most N requests (1 to 10^12) in any SECONDS seconds (1 to\n"
"        31622400, 366 days).\n"
"\n"
"    --algorithm gcra --limit N --period DURATION [--burst B]\n"
"        The generic cell rate algorithm: N requests (1 to 10^12) per\n"
"        DURATION, spaced DURATION/N apart (rounded up to whole\n"
"        microseconds), plus up to B requests (0 to 10^9, default 0) at\n"
"        once beyond that pace.  DURATION is a whole number with a unit:\n"
"        us (microseconds), ms, s, m (minutes), h or d, from 1us to 366d,\n"
"        as in 500us, 2ms, 1s or 1m.  N may not exceed DURATION in\n"
"        microseconds (at most one request per microsecond), and B + 1\n"
"        spacings may take at most 10^15us (about 31 years).\n"
"\n"
"    --algorithm fixed_window --limit N --calendar minute|hour|day|month\n"
"        At most N requests (1 to 10^12) per calendar minute, hour, day\n"
"        or month, in UTC; the count starts again when the next one\n"
"        begins.  For quotas, such as 10000 a day.\n"
"\n"
"    Options may be written \"--name VALUE\" or \"--name=VALUE\";\n"
"    \"--\" ends the options (for a tenant whose name begins with \"-\").\n"
"\n"
"EXIT STATUS\n"
"    0   success\n"
"    1   the command failed: database unreachable or in error, unknown\n"
"        tenant, key, rule or limit, duplicate tenant or limit name, a\n"
"        ninth limit for a rule, removing a rule's last limit, unreadable\n"
"        configuration\n"
"    2   bad command line (unknown command or option, missing or invalid\n"
"        argument), or a change refused because a check would then need\n"
"        more than 8 limits; nothing was changed\n"
"\n"
"ENVIRONMENT\n"
"    libpq's PGHOST, PGPORT, PGUSER, PGPASSWORD, PGSSLMODE and the other\n"
"    PG* variables supply what pg_conninfo leaves out.\n"
"\n"
"FILES\n"
"    " CTL_DEFAULT_CONFIG "\n"
"        The default configuration file.\n"
"\n"
"EXAMPLES\n"
"    ratelimitctl migrate\n"
"    ratelimitctl tenant add acme\n"
"    ratelimitctl key create acme\n"
"    ratelimitctl rule add acme --route '/api/payments*' \\\n"
"        --algorithm token_bucket --capacity 10 --refill-rate 2\n"
"    ratelimitctl rule add acme --route /api/search --algorithm gcra \\\n"
"        --limit 20 --period 1s --burst 5\n"
"    ratelimitctl rule add acme --route '*' --algorithm sliding_window \\\n"
"        --limit 1000 --window 3600\n"
"\n"
"    A daily quota of 100000 requests that counts on every route, on top\n"
"    of the rule that matches the route best:\n"
"    ratelimitctl rule add acme --route '*' --always --name daily \\\n"
"        --algorithm fixed_window --limit 100000 --calendar day\n"
"\n"
"    A second limit on rule 12 (10 a second and 10000 a day), then\n"
"    trying the rule out without denying anything:\n"
"    ratelimitctl limit add 12 --name per-day --algorithm fixed_window \\\n"
"        --limit 10000 --calendar day\n"
"    ratelimitctl rule set 12 --shadow on\n"
"    ratelimitctl rule list acme\n"
"    ratelimitctl limit remove 31\n";

/* ------------------------------------------------------------------ */
/* Messages */

static void ctl_vwarn(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));
static void ctl_warn(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
static int ctl_usage_error(const struct ctl_command *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int ctl_fail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

static void
ctl_vwarn(const char *fmt, va_list ap)
{
    fputs(CTL_NAME ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void
ctl_warn(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ctl_vwarn(fmt, ap);
    va_end(ap);
}

/* Prints "ratelimitctl: message" and returns CTL_EXIT_FAIL. */
static int
ctl_fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ctl_vwarn(fmt, ap);
    va_end(ap);
    return CTL_EXIT_FAIL;
}

/* Prints "noun verb synopsis" and a newline. */
static void
ctl_print_command(const struct ctl_command *cmd, FILE *fp)
{
    fputs(cmd->noun, fp);
    if (cmd->verb != NULL)
        fprintf(fp, " %s", cmd->verb);
    if (cmd->synopsis[0] != '\0')
        fprintf(fp, " %s", cmd->synopsis);
    fputc('\n', fp);
}

/* Prints the message, the command's usage line (cmd may be NULL) and a
 * pointer to --help; returns CTL_EXIT_USAGE. */
static int
ctl_usage_error(const struct ctl_command *cmd, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ctl_vwarn(fmt, ap);
    va_end(ap);
    if (cmd != NULL) {
        fputs("usage: " CTL_NAME " [-c FILE] ", stderr);
        ctl_print_command(cmd, stderr);
    }
    fputs("Try '" CTL_NAME " --help' for more information.\n", stderr);
    return CTL_EXIT_USAGE;
}

/* ------------------------------------------------------------------ */
/* Argument checks: all return 0, or -1 with a reason in err. */

/*
 * Returns the number of code points of s if it is well-formed UTF-8 without
 * control characters (C0, DEL, C1), or -1.
 */
static long
ctl_utf8_text_length(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned long cp;
    long n = 0;
    int more, i;

    while (*p != '\0') {
        if (*p < 0x80) {
            if (*p < 0x20 || *p == 0x7f)
                return -1;
            p++;
            n++;
            continue;
        }
        if (*p >= 0xc2 && *p <= 0xdf) {
            cp = *p & 0x1f;
            more = 1;
        } else if (*p >= 0xe0 && *p <= 0xef) {
            cp = *p & 0x0f;
            more = 2;
        } else if (*p >= 0xf0 && *p <= 0xf4) {
            cp = *p & 0x07;
            more = 3;
        } else {
            return -1;
        }
        for (i = 1; i <= more; i++) {
            if ((p[i] & 0xc0) != 0x80)
                return -1;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if ((more == 2 && cp < 0x800) || (more == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
            (cp >= 0x80 && cp <= 0x9f))
            return -1;
        p += more + 1;
        n++;
    }
    return n;
}

/* Display width of a database value in a table: its code points. */
static size_t
ctl_display_width(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

static int
ctl_check_tenant_name(const char *s, char *err, size_t errlen)
{
    long n = ctl_utf8_text_length(s);
    size_t len = strlen(s);

    if (n < 0) {
        snprintf(err, errlen, "tenant name: not UTF-8 text, or contains "
            "control characters");
        return -1;
    }
    if (n == 0 || n > CTL_TENANT_NAME_MAX) {
        snprintf(err, errlen, "tenant name: must be 1 to %d characters "
            "(got %ld)", CTL_TENANT_NAME_MAX, n);
        return -1;
    }
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1])) {
        snprintf(err, errlen, "tenant name: must not begin or end with a "
            "space");
        return -1;
    }
    return 0;
}

static int
ctl_check_route(const char *s, char *err, size_t errlen)
{
    size_t len = strlen(s);
    const char *star;

    if (len == 0 || len > RL_ROUTE_MAX) {
        snprintf(err, errlen, "--route: must be 1 to %d bytes (got %zu)",
            RL_ROUTE_MAX, len);
        return -1;
    }
    if (ctl_utf8_text_length(s) < 0) {
        snprintf(err, errlen, "--route: not UTF-8 text, or contains control "
            "characters");
        return -1;
    }
    if (isspace((unsigned char)s[0]) || isspace((unsigned char)s[len - 1])) {
        snprintf(err, errlen, "--route: must not begin or end with a space "
            "(routes are trimmed before they are matched)");
        return -1;
    }
    star = strchr(s, '*');
    if (star != NULL && star[1] != '\0') {
        snprintf(err, errlen, "--route: \"*\" may only be the last "
            "character (\"*\" alone matches every route, \"/a*\" every "
            "route beginning with \"/a\")");
        return -1;
    }
    return 0;
}

static int
ctl_check_limit_name(const char *s, char *err, size_t errlen)
{
    size_t len = strlen(s), i;

    if (len == 0 || len > CTL_LIMIT_NAME_MAX) {
        snprintf(err, errlen, "--name: must be 1 to %d characters",
            CTL_LIMIT_NAME_MAX);
        return -1;
    }
    for (i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '.' &&
            s[i] != '-') {
            snprintf(err, errlen, "--name: only letters, digits, \"_\", "
                "\".\" and \"-\" are allowed");
            return -1;
        }
    return 0;
}

/*
 * Parses a decimal integer (optional leading '-', digits only, no spaces)
 * in [min, max].  what names the argument in the message.
 */
static int
ctl_parse_integer(const char *what, const char *s, long long min,
    long long max, long long *out, char *err, size_t errlen)
{
    const char *p = s;
    char *end;
    long long v;

    if (*p == '-')
        p++;
    if (*p == '\0' || strspn(p, "0123456789") != strlen(p)) {
        snprintf(err, errlen, "%s: \"%s\" is not a whole number", what, s);
        return -1;
    }
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno == ERANGE || v < min || v > max) {
        snprintf(err, errlen, "%s: %s is out of range (%lld to %lld)", what,
            s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses a finite decimal number in [min, max] ("2", "0.5", "1e3"). */
static int
ctl_parse_decimal(const char *what, const char *s, double min, double max,
    double *out, char *err, size_t errlen)
{
    char *end;
    double v;

    /* strtod would also take "inf", "nan", hex and leading spaces. */
    if (*s == '\0' || strspn(s, "0123456789.eE+-") != strlen(s)) {
        snprintf(err, errlen, "%s: \"%s\" is not a decimal number", what, s);
        return -1;
    }
    errno = 0;
    v = strtod(s, &end);
    if (*end != '\0' || end == s) {
        snprintf(err, errlen, "%s: \"%s\" is not a decimal number", what, s);
        return -1;
    }
    if (errno == ERANGE || !isfinite(v) || v < min || v > max) {
        snprintf(err, errlen, "%s: %s is out of range (%g to %g)", what, s,
            min, max);
        return -1;
    }
    *out = v;
    return 0;
}

static int
ctl_parse_id(const char *what, const char *s, long long *out, char *err,
    size_t errlen)
{
    return ctl_parse_integer(what, s, 1, LLONG_MAX, out, err, errlen);
}

/* ------------------------------------------------------------------ */
/* Command-line parsing of one command's arguments */

static int
ctl_option_index(const struct ctl_command *cmd, const char *name,
    size_t namelen)
{
    int i;

    for (i = 0; cmd->options != NULL && cmd->options[i].name != NULL; i++)
        if (strlen(cmd->options[i].name) == namelen &&
            strncmp(cmd->options[i].name, name, namelen) == 0)
            return i;
    return -1;
}

static const char *
ctl_arg(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *name)
{
    int i = ctl_option_index(cmd, name, strlen(name));

    return i >= 0 && a->given[i] ? a->value[i] : NULL;
}

static int
ctl_flag(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *name)
{
    int i = ctl_option_index(cmd, name, strlen(name));

    return i >= 0 && a->given[i];
}

static void
ctl_print_command_usage(const struct ctl_command *cmd, FILE *fp)
{
    fputs("usage: " CTL_NAME " [-c FILE] ", fp);
    ctl_print_command(cmd, fp);
    fputs("See '" CTL_NAME " --help' for the details.\n", fp);
}

/*
 * Splits argv (the words after the command) into positional arguments and
 * the command's options.  Returns 0, CTL_EXIT_USAGE after printing why, or
 * -1 when --help was asked for (the usage has then been printed).
 */
static int
ctl_parse_args(const struct ctl_command *cmd, int argc, char **argv,
    struct ctl_args *a)
{
    int i, k, npositional = 0, options_done = 0;
    const char *arg, *eq;
    size_t namelen;

    memset(a, 0, sizeof(*a));
    while (cmd->positional[npositional] != NULL)
        npositional++;
    for (i = 0; i < argc; i++) {
        arg = argv[i];
        if (!options_done && strcmp(arg, "--") == 0) {
            options_done = 1;
            continue;
        }
        if (!options_done && (strcmp(arg, "--help") == 0 ||
            strcmp(arg, "-h") == 0)) {
            ctl_print_command_usage(cmd, stdout);
            return -1;
        }
        if (!options_done && arg[0] == '-' && arg[1] == '-') {
            eq = strchr(arg + 2, '=');
            namelen = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
            k = ctl_option_index(cmd, arg + 2, namelen);
            if (k < 0)
                return ctl_usage_error(cmd, "%s%s%s: unknown option '--%.*s'",
                    cmd->noun, cmd->verb ? " " : "",
                    cmd->verb ? cmd->verb : "", (int)namelen, arg + 2);
            if (a->given[k])
                return ctl_usage_error(cmd, "option '--%s' is given twice",
                    cmd->options[k].name);
            a->given[k] = 1;
            if (!cmd->options[k].has_value) {
                if (eq != NULL)
                    return ctl_usage_error(cmd, "option '--%s' takes no "
                        "value", cmd->options[k].name);
                continue;
            }
            if (eq != NULL) {
                a->value[k] = eq + 1;
            } else {
                if (i + 1 >= argc)
                    return ctl_usage_error(cmd, "option '--%s' needs a "
                        "value", cmd->options[k].name);
                a->value[k] = argv[++i];
            }
            continue;
        }
        if (!options_done && arg[0] == '-' && arg[1] != '\0')
            return ctl_usage_error(cmd, "%s%s%s: unknown option '%s'",
                cmd->noun, cmd->verb ? " " : "", cmd->verb ? cmd->verb : "",
                arg);
        if (a->npos >= npositional)
            return ctl_usage_error(cmd, "unexpected argument '%s'", arg);
        a->pos[a->npos++] = arg;
    }
    if (a->npos < npositional)
        return ctl_usage_error(cmd, "missing %s", cmd->positional[a->npos]);
    return 0;
}

/* ------------------------------------------------------------------ */
/* Database */

static void
ctl_ignore_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* Keeps the first line of msg as the current error. */
static void
ctl_set_error(struct ctl *ctl, const char *msg)
{
    size_t n;

    if (msg == NULL || *msg == '\0')
        msg = "unknown database error";
    if (strncmp(msg, "ERROR:  ", 8) == 0)
        msg += 8;
    n = strcspn(msg, "\n");
    if (n >= sizeof(ctl->err))
        n = sizeof(ctl->err) - 1;
    memcpy(ctl->err, msg, n);
    ctl->err[n] = '\0';
}

static void
ctl_set_result_error(struct ctl *ctl, const PGresult *res, const char *sql)
{
    const char *primary = NULL, *state = NULL, *pos = NULL, *constraint = NULL;
    long offset, line;
    const char *p;

    if (res != NULL) {
        primary = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        pos = PQresultErrorField(res, PG_DIAG_STATEMENT_POSITION);
        constraint = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
    }
    ctl_set_error(ctl, primary != NULL ? primary : PQerrorMessage(ctl->conn));
    snprintf(ctl->sqlstate, sizeof(ctl->sqlstate), "%s", state ? state : "");
    snprintf(ctl->constraint, sizeof(ctl->constraint), "%s",
        constraint ? constraint : "");
    ctl->err_line = 0;
    if (pos != NULL && sql != NULL) {
        /* The position counts characters; the migrations are ASCII. */
        offset = strtol(pos, NULL, 10);
        line = 1;
        for (p = sql; *p != '\0' && p - sql < offset - 1; p++)
            if (*p == '\n')
                line++;
        ctl->err_line = (int)line;
    }
}

/* Prints the current database error; returns CTL_EXIT_FAIL. */
static int
ctl_db_fail(const struct ctl *ctl)
{
    return ctl_fail("%s", ctl->err);
}

/*
 * Loads the configuration and connects.  Returns 0, or CTL_EXIT_FAIL after
 * printing why.
 */
static int
ctl_connect(struct ctl *ctl)
{
    const char *keywords[5], *values[5];
    char err[600], timeout[32];
    long seconds;

    config_defaults(&ctl->cfg);
    if (ctl->config_given || access(ctl->config_path, F_OK) == 0) {
        if (config_load(&ctl->cfg, ctl->config_path, err, sizeof(err)) == -1)
            return ctl_fail("%s", err);
    }
    seconds = (ctl->cfg.pg_connect_timeout_ms + 999) / 1000;
    snprintf(timeout, sizeof(timeout), "%ld", seconds < 1 ? 1 : seconds);

    /* Later keywords win: a connect_timeout inside pg_conninfo overrides
     * the one derived from pg_connect_timeout_ms. */
    keywords[0] = "connect_timeout";
    values[0] = timeout;
    keywords[1] = "fallback_application_name";
    values[1] = CTL_NAME;
    keywords[2] = "dbname";
    values[2] = ctl->cfg.pg_conninfo;
    keywords[3] = NULL;
    values[3] = NULL;
    ctl->conn = PQconnectdbParams(keywords, values, 1);
    if (ctl->conn == NULL)
        return ctl_fail("out of memory");
    if (PQstatus(ctl->conn) != CONNECTION_OK) {
        ctl_set_error(ctl, PQerrorMessage(ctl->conn));
        return ctl_db_fail(ctl);
    }
    /* "relation already exists, skipping" and the like are not news. */
    PQsetNoticeProcessor(ctl->conn, ctl_ignore_notice, NULL);
    return 0;
}

/*
 * Runs one parameterized statement.  Returns its result (tuples or command
 * OK; the caller PQclear()s it), or NULL with the error kept in ctl.
 */
static PGresult *
ctl_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res;
    ExecStatusType st;

    res = PQexecParams(ctl->conn, sql, nparams, NULL, params, NULL, NULL, 0);
    st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return res;
    ctl_set_result_error(ctl, res, NULL);
    PQclear(res);
    return NULL;
}

/* Runs a statement whose result is of no interest.  Returns 0 or -1. */
static int
ctl_command(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res = ctl_query(ctl, sql, nparams, params);

    if (res == NULL)
        return -1;
    PQclear(res);
    return 0;
}

static int
ctl_begin(struct ctl *ctl)
{
    return ctl_command(ctl, "BEGIN", 0, NULL);
}

static int
ctl_commit(struct ctl *ctl)
{
    return ctl_command(ctl, "COMMIT", 0, NULL);
}

/* Abandons the open transaction, keeping the error that caused it. */
static void
ctl_rollback(struct ctl *ctl)
{
    PGresult *res = PQexec(ctl->conn, "ROLLBACK");

    PQclear(res);
}

/*
 * Looks up a tenant by name into id (a UUID).  Returns 0, or CTL_EXIT_FAIL
 * after printing why (unknown tenant or database error).
 */
static int
ctl_tenant_id(struct ctl *ctl, const char *name, char id[RL_UUID_LEN + 1])
{
    const char *params[1] = { name };
    PGresult *res;

    res = ctl_query(ctl, "SELECT id FROM tenants WHERE name = $1", 1, params);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (PQntuples(res) == 0) {
        PQclear(res);
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    }
    snprintf(id, RL_UUID_LEN + 1, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

/*
 * The start of the commands that take a row id: parses s into id (what
 * names the argument in messages), then connects.  Returns 0, or an exit
 * status after printing why.
 */
static int
ctl_parse_id_connect(struct ctl *ctl, const struct ctl_command *cmd,
    const char *what, const char *s, long long *id)
{
    char err[256];

    if (ctl_parse_id(what, s, id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    return ctl_connect(ctl);
}

/*
 * Runs a statement for the number of rows it returns (or changes, with
 * RETURNING).  Returns that number, or -1 with the error kept in ctl.
 */
static int
ctl_query_rows(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params)
{
    PGresult *res = ctl_query(ctl, sql, nparams, params);
    int n;

    if (res == NULL)
        return -1;
    n = PQntuples(res);
    PQclear(res);
    return n;
}

/* ------------------------------------------------------------------ */
/* Output */

/*
 * Prints a result as a table under the given headers (one per column):
 * columns separated by two spaces, NULL shown as "-".
 */
static void
ctl_print_table(const PGresult *res, const char *const *headers)
{
    int ncols = PQnfields(res), nrows = PQntuples(res), r, c;
    size_t width[16], w;
    const char *v;

    if (ncols > 16)
        ncols = 16;
    for (c = 0; c < ncols; c++)
        width[c] = ctl_display_width(headers[c]);
    for (r = 0; r < nrows; r++)
        for (c = 0; c < ncols; c++) {
            v = PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
            if ((w = ctl_display_width(v)) > width[c])
                width[c] = w;
        }
    for (r = -1; r < nrows; r++) {
        for (c = 0; c < ncols; c++) {
            if (r < 0)
                v = headers[c];
            else
                v = PQgetisnull(res, r, c) ? "-" : PQgetvalue(res, r, c);
            fputs(v, stdout);
            if (c < ncols - 1)
                printf("%*s", (int)(width[c] - ctl_display_width(v) + 2), "");
        }
        putchar('\n');
    }
}

/* Prints "name  value" lines with the values aligned. */
static void
ctl_print_fields(const char *const *names, const char *const *values, int n)
{
    size_t width = 0;
    int i;

    for (i = 0; i < n; i++)
        if (strlen(names[i]) > width)
            width = strlen(names[i]);
    for (i = 0; i < n; i++)
        printf("%-*s  %s\n", (int)width, names[i], values[i]);
}

/*
 * Runs a query and prints its rows as a table under headers (the "list"
 * commands).  Returns CTL_EXIT_OK, or CTL_EXIT_FAIL after printing the
 * database error.
 */
static int
ctl_print_query(struct ctl *ctl, const char *sql, int nparams,
    const char *const *params, const char *const *headers)
{
    PGresult *res = ctl_query(ctl, sql, nparams, params);

    if (res == NULL)
        return ctl_db_fail(ctl);
    ctl_print_table(res, headers);
    PQclear(res);
    return CTL_EXIT_OK;
}

/*
 * "key list TENANT" and "rule list TENANT": checks the name, connects,
 * looks the tenant up and prints the rows of sql, whose $1 is the tenant's
 * id, under headers.  Returns an exit status, having printed why on
 * failure.
 */
static int
ctl_print_tenant_query(struct ctl *ctl, const struct ctl_command *cmd,
    const char *tenant, const char *sql, const char *const *headers)
{
    char id[RL_UUID_LEN + 1], err[256];
    const char *params[1] = { id };
    int rc;

    if (ctl_check_tenant_name(tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_tenant_id(ctl, tenant, id)) != 0)
        return rc;
    return ctl_print_query(ctl, sql, 1, params, headers);
}

/* ------------------------------------------------------------------ */
/* migrate */

static int
ctl_cmd_migrate(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const struct embedded_migration *m;
    const char *params[2];
    char version[16];
    PGresult *res;
    int applied = 0, latest = 0, rc;

    (void)cmd;
    (void)a;
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;

    if (ctl_begin(ctl) == -1 ||
        ctl_command(ctl, "SELECT pg_advisory_xact_lock(" CTL_MIGRATE_LOCK ")",
            0, NULL) == -1 ||
        ctl_command(ctl, "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version integer PRIMARY KEY, "
            "name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())", 0, NULL) == -1 ||
        ctl_commit(ctl) == -1) {
        ctl_rollback(ctl);
        return ctl_db_fail(ctl);
    }

    for (m = embedded_migrations; m->name != NULL; m++) {
        snprintf(version, sizeof(version), "%d", m->version);
        latest = m->version;
        params[0] = version;
        params[1] = m->name;
        if (ctl_begin(ctl) == -1 ||
            ctl_command(ctl, "SELECT pg_advisory_xact_lock(" CTL_MIGRATE_LOCK
                ")", 0, NULL) == -1 ||
            (res = ctl_query(ctl, "SELECT 1 FROM schema_migrations "
                "WHERE version = $1::integer", 1, params)) == NULL) {
            ctl_rollback(ctl);
            return ctl_db_fail(ctl);
        }
        if (PQntuples(res) > 0) {
            PQclear(res);
            ctl_rollback(ctl);
            continue;
        }
        PQclear(res);

        /* The simple query protocol runs the file's statements one after
         * the other, inside our transaction. */
        res = PQexec(ctl->conn, m->sql);
        if (res == NULL || (PQresultStatus(res) != PGRES_COMMAND_OK &&
            PQresultStatus(res) != PGRES_TUPLES_OK)) {
            ctl_set_result_error(ctl, res, m->sql);
            PQclear(res);
            ctl_rollback(ctl);
            if (ctl->err_line > 0)
                return ctl_fail("migration %s, line %d: %s (nothing of it "
                    "was applied)", m->name, ctl->err_line, ctl->err);
            return ctl_fail("migration %s: %s (nothing of it was applied)",
                m->name, ctl->err);
        }
        PQclear(res);
        if (ctl_command(ctl, "INSERT INTO schema_migrations (version, name) "
            "VALUES ($1::integer, $2)", 2, params) == -1 ||
            ctl_commit(ctl) == -1) {
            ctl_rollback(ctl);
            return ctl_fail("migration %s: %s (nothing of it was applied)",
                m->name, ctl->err);
        }
        printf("applied  %s\n", m->name);
        fflush(stdout);
        applied++;
    }

    res = ctl_query(ctl, "SELECT coalesce(max(version), 0) "
        "FROM schema_migrations", 0, NULL);
    if (res == NULL)
        return ctl_db_fail(ctl);
    if (atoi(PQgetvalue(res, 0, 0)) > latest)
        ctl_warn("the database has migration %s, newer than this program's "
            "newest (%d): is this " CTL_NAME " out of date?",
            PQgetvalue(res, 0, 0), latest);
    if (applied == 0)
        printf("schema is up to date (version %s)\n", PQgetvalue(res, 0, 0));
    else
        printf("%d migration%s applied; schema at version %s\n", applied,
            applied == 1 ? "" : "s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* tenant */

static int
ctl_cmd_tenant_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *name = a->pos[0];
    const char *params[1] = { name };
    const char *names[2] = { "id", "name" }, *values[2];
    char err[256];
    PGresult *res;
    int rc;

    if (ctl_check_tenant_name(name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;
    res = ctl_query(ctl, "INSERT INTO tenants (name) VALUES ($1) "
        "RETURNING id", 1, params);
    if (res == NULL) {
        if (strcmp(ctl->sqlstate, "23505") == 0)
            return ctl_fail("tenant \"%s\" already exists", name);
        return ctl_db_fail(ctl);
    }
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = name;
    ctl_print_fields(names, values, 2);
    PQclear(res);
    return CTL_EXIT_OK;
}

static int
ctl_cmd_tenant_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "NAME", "STATUS", "KEYS",
        "RULES", "CREATED" };
    int rc;

    (void)cmd;
    (void)a;
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;
    return ctl_print_query(ctl,
        "SELECT t.id, t.name, t.status, "
        "  (SELECT count(*) FROM api_keys k "
        "   WHERE k.tenant_id = t.id AND k.status = 'active'), "
        "  (SELECT count(*) FROM rules r WHERE r.tenant_id = t.id), "
        "  to_char(t.created_at AT TIME ZONE 'UTC', "
        "          'YYYY-MM-DD HH24:MI:SS') "
        "FROM tenants t ORDER BY t.name", 0, NULL, headers);
}

/* tenant suspend / tenant resume: the status is the command's verb. */
static int
ctl_cmd_tenant_status(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *name = a->pos[0];
    const char *status = strcmp(cmd->verb, "suspend") == 0 ? "suspended" :
        "active";
    const char *params[2] = { name, status };
    char err[256];
    int rc, n;

    if (ctl_check_tenant_name(name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;
    n = ctl_query_rows(ctl, "UPDATE tenants SET status = $2 WHERE name = $1 "
        "RETURNING id", 2, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n == 0)
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    printf("tenant %s is %s\n", name, status);
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* key */

/* URL-safe base64 without padding; out must hold 4 * ceil(n / 3) + 1. */
static void
ctl_base64url(const unsigned char *in, size_t n, char *out)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned long v;
    size_t i, rest;

    for (i = 0; i + 2 < n; i += 3) {
        v = (unsigned long)in[i] << 16 | (unsigned long)in[i + 1] << 8 |
            in[i + 2];
        *out++ = alphabet[(v >> 18) & 63];
        *out++ = alphabet[(v >> 12) & 63];
        *out++ = alphabet[(v >> 6) & 63];
        *out++ = alphabet[v & 63];
    }
    rest = n - i;
    if (rest > 0) {
        v = (unsigned long)in[i] << 16;
        if (rest == 2)
            v |= (unsigned long)in[i + 1] << 8;
        *out++ = alphabet[(v >> 18) & 63];
        *out++ = alphabet[(v >> 12) & 63];
        if (rest == 2)
            *out++ = alphabet[(v >> 6) & 63];
    }
    *out = '\0';
}

static int
ctl_cmd_key_create(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *tenant = a->pos[0];
    const char *role = ctl_arg(cmd, a, "role");
    unsigned char random[CTL_KEY_RANDOM_BYTES];
    char key[4 + (CTL_KEY_RANDOM_BYTES + 2) / 3 * 4 + 1];
    char hash[65], prefix[CTL_KEY_PREFIX_LEN + 1], err[256];
    const char *params[4];
    const char *names[5] = { "id", "tenant", "role", "prefix", "key" };
    const char *values[5];
    PGresult *res;
    int rc;

    if (ctl_check_tenant_name(tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (role == NULL)
        role = "check";
    if (strcmp(role, "check") != 0 && strcmp(role, "admin") != 0)
        return ctl_usage_error(cmd, "--role: \"%s\" is not check or admin",
            role);
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;

    if (util_random(random, sizeof(random)) == -1)
        return ctl_fail("cannot read the random generator: %s",
            strerror(errno));
    memcpy(key, "rl_", 3);
    ctl_base64url(random, sizeof(random), key + 3);
    util_sha256_hex(key, strlen(key), hash);
    memcpy(prefix, key, CTL_KEY_PREFIX_LEN);
    prefix[CTL_KEY_PREFIX_LEN] = '\0';

    params[0] = tenant;
    params[1] = hash;
    params[2] = prefix;
    params[3] = role;
    res = ctl_query(ctl,
        "INSERT INTO api_keys (tenant_id, key_hash, key_prefix, role) "
        "SELECT id, $2, $3, $4 FROM tenants WHERE name = $1 "
        "RETURNING id", 4, params);
    memset(random, 0, sizeof(random));
    if (res == NULL) {
        memset(key, 0, sizeof(key));
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        memset(key, 0, sizeof(key));
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", tenant);
    }
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = tenant;
    values[2] = role;
    values[3] = prefix;
    values[4] = key;
    ctl_print_fields(names, values, 5);
    fflush(stdout);
    fputs(CTL_NAME ": store the key now: it is not kept and cannot be "
        "shown again\n", stderr);
    PQclear(res);
    memset(key, 0, sizeof(key));
    return CTL_EXIT_OK;
}

static int
ctl_cmd_key_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "PREFIX", "ROLE", "STATUS",
        "CREATED", "LAST_USED" };

    return ctl_print_tenant_query(ctl, cmd, a->pos[0],
        "SELECT id, key_prefix, role, status, "
        "  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), "
        "  coalesce(to_char(last_used_at AT TIME ZONE 'UTC', "
        "                   'YYYY-MM-DD HH24:MI:SS'), 'never') "
        "FROM api_keys WHERE tenant_id = $1::uuid ORDER BY id", headers);
}

static int
ctl_cmd_key_revoke(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[1] = { a->pos[0] };
    long long id;
    int rc, n;

    if ((rc = ctl_parse_id_connect(ctl, cmd, "KEY_ID", a->pos[0],
        &id)) != 0)
        return rc;
    n = ctl_query_rows(ctl, "UPDATE api_keys "
        "SET status = 'revoked', revoked_at = now() "
        "WHERE id = $1::bigint AND status = 'active' RETURNING id",
        1, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n > 0) {
        printf("key %lld revoked\n", id);
        return CTL_EXIT_OK;
    }
    n = ctl_query_rows(ctl,
        "SELECT status FROM api_keys WHERE id = $1::bigint", 1, params);
    if (n == -1)
        return ctl_db_fail(ctl);
    if (n == 0)
        return ctl_fail("no key with id %lld", id);
    printf("key %lld was already revoked\n", id);
    return CTL_EXIT_OK;
}

/* ------------------------------------------------------------------ */
/* The plan guard */

/*
 * One check decides the limits of the most specific matching rule and of
 * every other matching "always" rule together, at most RL_MAX_LIMITS of
 * them; the service answers a route that needs more 503 "misconfigured"
 * rather than drop one.  So every command that can give a route more
 * limits -- rule add, rule set (--enabled, --always, --priority: another
 * rule may win), rule remove (another rule of the same pattern may take
 * over) and limit add -- runs in one transaction that locks the tenant's
 * row (two such commands for one tenant take turns), reads the tenant's
 * rules the way the service does, makes the change, reads them again and
 * asks rules_overflow() whether some route now needs more than
 * RL_MAX_LIMITS, and more than before.  If so, nothing is committed and
 * the command exits 2, naming the routes and the rules.  A change that
 * leaves a plan too big but no bigger (a step towards repairing rules
 * written with psql) goes through.
 */
struct ctl_guard {
    char tenant_id[RL_UUID_LEN + 1];
    struct rl_rule *before;
    int nbefore;
};

/*
 * Reads the rules of tenant_id that the service would use -- enabled, with
 * at least one limit, the first RL_MAX_RULES by id, at most RL_MAX_LIMITS
 * limits each (store_pg.c) -- with what matching needs: id, pattern,
 * priority, always and the number of limits.  *out is calloc()ed (free it)
 * and may be NULL when *n is 0.  Returns 0, or -1 with the error in ctl.
 */
static int
ctl_guard_load(struct ctl *ctl, const char *tenant_id, struct rl_rule **out,
    int *n)
{
    char max_rules[16];
    const char *params[2] = { tenant_id, max_rules };
    struct rl_rule *rules;
    PGresult *res;
    long long nlimits;
    int i;

    *out = NULL;
    *n = 0;
    snprintf(max_rules, sizeof(max_rules), "%d", RL_MAX_RULES);
    res = ctl_query(ctl, "SELECT r.id, r.route_pattern, r.priority, "
        "  r.always, count(*) "
        "FROM rules r JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid AND r.enabled "
        "GROUP BY r.id ORDER BY r.id LIMIT $2::integer", 2, params);
    if (res == NULL)
        return -1;
    if (PQntuples(res) == 0) {
        PQclear(res);
        return 0;
    }
    if ((rules = calloc((size_t)PQntuples(res), sizeof(*rules))) == NULL) {
        PQclear(res);
        ctl_set_error(ctl, "out of memory");
        return -1;
    }
    for (i = 0; i < PQntuples(res); i++) {
        rules[i].id = strtoll(PQgetvalue(res, i, 0), NULL, 10);
        snprintf(rules[i].pattern, sizeof(rules[i].pattern), "%s",
            PQgetvalue(res, i, 1));
        rules[i].priority = atoi(PQgetvalue(res, i, 2));
        rules[i].always = PQgetvalue(res, i, 3)[0] == 't';
        nlimits = strtoll(PQgetvalue(res, i, 4), NULL, 10);
        rules[i].nlimits = nlimits > RL_MAX_LIMITS ? RL_MAX_LIMITS :
            (int)nlimits;
    }
    *out = rules;
    *n = PQntuples(res);
    PQclear(res);
    return 0;
}

/*
 * Opens the guarded transaction for the tenant with id tenant_id, which
 * the caller has looked up inside it: locks the tenant's row and reads
 * its rules.  Returns 0, or CTL_EXIT_FAIL after rolling back and printing
 * why.
 */
static int
ctl_guard_lock(struct ctl *ctl, struct ctl_guard *g, const char *tenant_id)
{
    const char *params[1] = { tenant_id };

    snprintf(g->tenant_id, sizeof(g->tenant_id), "%s", tenant_id);
    if (ctl_command(ctl, "SELECT 1 FROM tenants WHERE id = $1::uuid "
        "FOR NO KEY UPDATE", 1, params) == -1 ||
        ctl_guard_load(ctl, g->tenant_id, &g->before, &g->nbefore) == -1) {
        ctl_rollback(ctl);
        return ctl_db_fail(ctl);
    }
    return 0;
}

/*
 * Begins a guarded change of the tenant named name.  Returns 0, or
 * CTL_EXIT_FAIL after printing why (no such tenant, database error), with
 * nothing left open.
 */
static int
ctl_guard_begin_tenant(struct ctl *ctl, struct ctl_guard *g,
    const char *name)
{
    const char *params[1] = { name };
    char id[RL_UUID_LEN + 1];
    PGresult *res;

    memset(g, 0, sizeof(*g));
    if (ctl_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    res = ctl_query(ctl, "SELECT id FROM tenants WHERE name = $1", 1,
        params);
    if (res == NULL) {
        ctl_rollback(ctl);
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_rollback(ctl);
        return ctl_fail("no tenant named \"%s\" (see '" CTL_NAME
            " tenant list')", name);
    }
    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return ctl_guard_lock(ctl, g, id);
}

/*
 * Begins a guarded change of the rule with id rule_id and its tenant.  Returns 0, or CTL_EXIT_FAIL after printing why (no such rule,
 * database error), with nothing left open.
 */
static int
ctl_guard_begin_rule(struct ctl *ctl, struct ctl_guard *g, long long rule_id)
{
    char id[RL_UUID_LEN + 1], rule[24];
    const char *params[1] = { rule };
    PGresult *res;

    memset(g, 0, sizeof(*g));
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if (ctl_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    res = ctl_query(ctl, "SELECT tenant_id FROM rules WHERE id = $1::bigint",
        1, params);
    if (res == NULL) {
        ctl_rollback(ctl);
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_rollback(ctl);
        return ctl_fail("no rule with id %lld", rule_id);
    }
    snprintf(id, sizeof(id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return ctl_guard_lock(ctl, g, id);
}

/* Abandons a guarded change (after a failed statement, say). */
static void
ctl_guard_abort(struct ctl *ctl, struct ctl_guard *g)
{
    ctl_rollback(ctl);
    free(g->before);
    g->before = NULL;
}

/* Prints why a change was refused: the routes, the limits, the rules. */
static void
ctl_guard_explain(const struct rl_overflow *o, const struct rl_rule *rules)
{
    const struct rl_rule *r;
    int i;

    if (!o->prefix)
        ctl_warn("refused: after this change a check of the route \"%s\" "
            "would need %d limits, more than the %d one check decides "
            "(it needs %d now):", o->route, o->needed, RL_MAX_LIMITS,
            o->before);
    else if (o->route[0] == '\0')
        ctl_warn("refused: after this change a check of a route that only "
            "\"*\" rules match would need %d limits, more than the %d one "
            "check decides (it needs %d now):", o->needed, RL_MAX_LIMITS,
            o->before);
    else
        ctl_warn("refused: after this change a check of a route beginning "
            "with \"%s\" would need %d limits, more than the %d one check "
            "decides (it needs %d now):", o->route, o->needed,
            RL_MAX_LIMITS, o->before);
    for (i = 0; i < o->nrules; i++) {
        r = &rules[o->rule[i]];
        fprintf(stderr, "    rule %lld  %s  %d limit%s  (%s)\n", r->id,
            r->pattern, r->nlimits, r->nlimits == 1 ? "" : "s",
            i == 0 ? "the most specific rule" : "always");
    }
    fputs(CTL_NAME ": the service would answer such a check 503 "
        "\"misconfigured\"; nothing was changed (give the rules fewer "
        "limits, or fewer \"always\" rules that match the same routes)\n",
        stderr);
}

/*
 * Ends a guarded change: reads the tenant's rules again and commits, or,
 * when some route's check would now need too many limits, rolls back and
 * explains.  Returns 0, CTL_EXIT_USAGE (refused) or CTL_EXIT_FAIL
 * (database error), having printed why.
 */
static int
ctl_guard_end(struct ctl *ctl, struct ctl_guard *g)
{
    struct rl_overflow *o;
    struct rl_rule *after;
    int nafter, rc = 0;

    if (ctl_guard_load(ctl, g->tenant_id, &after, &nafter) == -1) {
        ctl_guard_abort(ctl, g);
        return ctl_db_fail(ctl);
    }
    if ((o = malloc(sizeof(*o))) == NULL) {
        free(after);
        ctl_guard_abort(ctl, g);
        return ctl_fail("out of memory");
    }
    if (rules_overflow(g->before, g->nbefore, after, nafter, o)) {
        ctl_guard_abort(ctl, g);
        ctl_guard_explain(o, after);
        rc = CTL_EXIT_USAGE;
    } else if (ctl_commit(ctl) == -1) {
        ctl_guard_abort(ctl, g);
        rc = ctl_db_fail(ctl);
    }
    free(o);
    free(after);
    free(g->before);
    g->before = NULL;
    return rc;
}

/* ------------------------------------------------------------------ */
/* rule and limit */

/*
 * The algorithms and the parameter options each takes.  Any other
 * parameter option is refused for it, so that a mistyped command never
 * stores something other than what was meant.
 */
struct ctl_algorithm {
    const char *name;                   /* as stored in limits.algorithm */
    const char *required[3];            /* option names, NULL ended */
    const char *optional[2];
    const char *takes;                  /* the options, for messages */
};

static const struct ctl_algorithm ctl_algorithms[] = {
    { "token_bucket", { "capacity", "refill-rate", NULL }, { NULL },
      "--capacity N and --refill-rate R" },
    { "sliding_window", { "limit", "window", NULL }, { NULL },
      "--limit N and --window SECONDS" },
    { "gcra", { "limit", "period", NULL }, { "burst", NULL },
      "--limit N and --period DURATION, optionally --burst B" },
    { "fixed_window", { "limit", "calendar", NULL }, { NULL },
      "--limit N and --calendar minute|hour|day|month" },
};

#define CTL_NALGORITHMS (sizeof(ctl_algorithms) / sizeof(ctl_algorithms[0]))

/* Every option that sets a limit parameter. */
static const char *const ctl_parameter_options[] = { "capacity",
    "refill-rate", "limit", "window", "period", "burst", "calendar", NULL };

static const char *const ctl_calendars[] = { "minute", "hour", "day",
    "month", NULL };

/* Duration units, largest first (ctl_format_duration relies on that). */
static const struct {
    const char *unit;
    long long us;
} ctl_duration_units[] = {
    { "d", 86400000000LL },
    { "h", 3600000000LL },
    { "m", 60000000LL },
    { "s", 1000000LL },
    { "ms", 1000LL },
    { "us", 1LL },
};

#define CTL_NUNITS (sizeof(ctl_duration_units) / sizeof(ctl_duration_units[0]))

/*
 * One limit's checked parameters, as text for query parameters.  An empty
 * string stands for NULL: each algorithm leaves the others' empty.
 */
struct ctl_limit_spec {
    const char *name;
    const struct ctl_algorithm *algorithm;
    char count[24], window[24], capacity[24], rate[40];
    char period[24], burst[24], calendar[8];
};

/* What "rule add" stores in rules, and its first limit. */
struct ctl_rule_spec {
    const char *tenant;
    const char *route;
    const char *failure_mode;
    const char *per;
    int shadow;
    int always;
    char priority[24];
    struct ctl_limit_spec limit;
};

static int
ctl_name_in(const char *const *list, const char *name)
{
    for (; *list != NULL; list++)
        if (strcmp(*list, name) == 0)
            return 1;
    return 0;
}

/* The value of a query parameter: s, or NULL (SQL NULL) when s is "". */
static const char *
ctl_text_or_null(const char *s)
{
    return s[0] != '\0' ? s : NULL;
}

/*
 * Parses a duration: a whole number directly followed by one of the units
 * us, ms, s, m, h, d ("500us", "2ms", "1m").  Stores it in microseconds,
 * 1 to CTL_PERIOD_MAX (366 days).
 */
static int
ctl_parse_duration(const char *what, const char *s, long long *out_us,
    char *err, size_t errlen)
{
    size_t digits = strspn(s, "0123456789"), i;
    long long v;

    for (i = 0; i < CTL_NUNITS; i++)
        if (digits > 0 && strcmp(s + digits, ctl_duration_units[i].unit) == 0)
            break;
    if (i == CTL_NUNITS) {
        snprintf(err, errlen, "%s: \"%s\" is not a duration (a whole number "
            "with one of the units us, ms, s, m, h, d, as in 500us, 2ms, 1s "
            "or 1m)", what, s);
        return -1;
    }
    errno = 0;
    v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < 1 ||
        v > CTL_PERIOD_MAX / ctl_duration_units[i].us) {
        snprintf(err, errlen, "%s: %s is out of range (1us to 366d)", what, s);
        return -1;
    }
    *out_us = v * ctl_duration_units[i].us;
    return 0;
}

/* Writes us (> 0) in the largest unit that divides it: "500us", "2ms". */
static void
ctl_format_duration(long long us, char *buf, size_t len)
{
    size_t i;

    for (i = 0; i < CTL_NUNITS - 1; i++)
        if (us % ctl_duration_units[i].us == 0)
            break;
    snprintf(buf, len, "%lld%s", us / ctl_duration_units[i].us,
        ctl_duration_units[i].unit);
}

/* "on" or "off" into "true" or "false" (query parameters of boolean). */
static int
ctl_parse_on_off(const char *what, const char *s, const char **out,
    char *err, size_t errlen)
{
    if (strcmp(s, "on") == 0) {
        *out = "true";
        return 0;
    }
    if (strcmp(s, "off") == 0) {
        *out = "false";
        return 0;
    }
    snprintf(err, errlen, "%s: \"%s\" is not on or off", what, s);
    return -1;
}

static int
ctl_check_failure_mode(const char *s, char *err, size_t errlen)
{
    if (strcmp(s, "closed") == 0 || strcmp(s, "open") == 0)
        return 0;
    snprintf(err, errlen, "--failure-mode: \"%s\" is not closed or open", s);
    return -1;
}

static int
ctl_check_per(const char *s, char *err, size_t errlen)
{
    if (strcmp(s, "rule") == 0 || strcmp(s, "route") == 0)
        return 0;
    snprintf(err, errlen, "--per: \"%s\" is not rule or route", s);
    return -1;
}

/*
 * Checks the options that describe one limit (--name, --algorithm and the
 * algorithm's parameters) into spec.  default_name stands in for a missing
 * --name; when it is NULL, --name is required.  Returns 0, or
 * CTL_EXIT_USAGE after printing why.
 */
static int
ctl_limit_spec(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *default_name, struct ctl_limit_spec *spec)
{
    const char *algorithm = ctl_arg(cmd, a, "algorithm");
    const struct ctl_algorithm *alg = NULL;
    const char *opt, *v;
    char err[256];
    long long n, period_us = 0, count = 0, burst = 0, spacing;
    double d;
    size_t i;

    memset(spec, 0, sizeof(*spec));
    spec->name = ctl_arg(cmd, a, "name");
    if (spec->name == NULL) {
        if (default_name == NULL)
            return ctl_usage_error(cmd, "missing --name LIMITNAME (the "
                "limits of a rule need names of their own)");
        spec->name = default_name;
    }
    if (ctl_check_limit_name(spec->name, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);

    if (algorithm == NULL)
        return ctl_usage_error(cmd, "missing --algorithm (token_bucket, "
            "sliding_window, gcra or fixed_window)");
    for (i = 0; i < CTL_NALGORITHMS; i++)
        if (strcmp(ctl_algorithms[i].name, algorithm) == 0)
            alg = &ctl_algorithms[i];
    if (alg == NULL)
        return ctl_usage_error(cmd, "--algorithm: \"%s\" is not "
            "token_bucket, sliding_window, gcra or fixed_window", algorithm);
    spec->algorithm = alg;

    for (i = 0; (opt = ctl_parameter_options[i]) != NULL; i++)
        if (ctl_arg(cmd, a, opt) != NULL && !ctl_name_in(alg->required, opt) &&
            !ctl_name_in(alg->optional, opt))
            return ctl_usage_error(cmd, "--%s: not an option of %s (it "
                "takes %s)", opt, alg->name, alg->takes);
    for (i = 0; (opt = alg->required[i]) != NULL; i++)
        if (ctl_arg(cmd, a, opt) == NULL)
            return ctl_usage_error(cmd, "%s needs %s (--%s is missing)",
                alg->name, alg->takes, opt);

    /* Only the algorithm's own options are left; parse those given. */
    if ((v = ctl_arg(cmd, a, "capacity")) != NULL) {
        if (ctl_parse_integer("--capacity", v, 1, CTL_COUNT_MAX, &n, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->capacity, sizeof(spec->capacity), "%lld", n);
    }
    if ((v = ctl_arg(cmd, a, "refill-rate")) != NULL) {
        if (ctl_parse_decimal("--refill-rate", v, CTL_RATE_MIN, CTL_RATE_MAX,
            &d, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->rate, sizeof(spec->rate), "%.17g", d);
    }
    if ((v = ctl_arg(cmd, a, "limit")) != NULL) {
        if (ctl_parse_integer("--limit", v, 1, CTL_COUNT_MAX, &count, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->count, sizeof(spec->count), "%lld", count);
    }
    if ((v = ctl_arg(cmd, a, "window")) != NULL) {
        if (ctl_parse_integer("--window", v, 1, CTL_WINDOW_MAX, &n, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->window, sizeof(spec->window), "%lld", n);
    }
    if ((v = ctl_arg(cmd, a, "period")) != NULL) {
        if (ctl_parse_duration("--period", v, &period_us, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->period, sizeof(spec->period), "%lld", period_us);
    }
    if ((v = ctl_arg(cmd, a, "burst")) != NULL) {
        if (ctl_parse_integer("--burst", v, 0, CTL_BURST_MAX, &burst, err,
            sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(spec->burst, sizeof(spec->burst), "%lld", burst);
    } else if (ctl_name_in(alg->optional, "burst")) {
        snprintf(spec->burst, sizeof(spec->burst), "0");
    }
    if ((v = ctl_arg(cmd, a, "calendar")) != NULL) {
        if (!ctl_name_in(ctl_calendars, v))
            return ctl_usage_error(cmd, "--calendar: \"%s\" is not minute, "
                "hour, day or month", v);
        snprintf(spec->calendar, sizeof(spec->calendar), "%s", v);
    }

    /*
     * GCRA spaces requests ceil(period / limit) microseconds apart, so more
     * than one request per microsecond would silently become one.  It
     * refuses (burst + 1) spacings beyond CTL_GCRA_SPAN_MAX (lua/gcra.lua,
     * and the CHECK limits_parameters), so such a rule could never be
     * used.  Dividing instead of multiplying cannot overflow.
     */
    if (period_us > 0) {
        if (count > period_us)
            return ctl_usage_error(cmd, "--limit %lld per --period %s is "
                "more than one request per microsecond, which gcra cannot "
                "space out; use a longer --period or sliding_window", count,
                ctl_arg(cmd, a, "period"));
        spacing = (period_us + count - 1) / count;
        if (spacing > CTL_GCRA_SPAN_MAX / (burst + 1))
            return ctl_usage_error(cmd, "--burst %lld: %lld requests spaced "
                "%lldus apart take longer than gcra's limit of 10^15us "
                "(about 31 years); use a smaller --burst or a shorter "
                "--period", burst, burst + 1, spacing);
    }
    return 0;
}

/* Describes a checked limit the way "rule list" shows it. */
static void
ctl_limit_describe(const struct ctl_limit_spec *s, char *buf, size_t len)
{
    char period[32];

    if (s->capacity[0] != '\0') {
        snprintf(buf, len, "%s: token_bucket capacity %s, refill %s/s",
            s->name, s->capacity, s->rate);
    } else if (s->window[0] != '\0') {
        snprintf(buf, len, "%s: sliding_window %s per %s s", s->name,
            s->count, s->window);
    } else if (s->period[0] != '\0') {
        ctl_format_duration(strtoll(s->period, NULL, 10), period,
            sizeof(period));
        snprintf(buf, len, "%s: gcra %s per %s, burst %s", s->name,
            s->count, period, s->burst);
    } else {
        snprintf(buf, len, "%s: fixed_window %s per calendar %s", s->name,
            s->count, s->calendar);
    }
}

/*
 * Inserts a checked limit into the rule with id rule_id (decimal).  Returns
 * the result, with one row holding the new limit's id, or none when there
 * is no such rule (the caller PQclear()s it); or NULL with the error in
 * ctl.
 */
static PGresult *
ctl_insert_limit(struct ctl *ctl, const char *rule_id,
    const struct ctl_limit_spec *s)
{
    const char *params[10];

    params[0] = rule_id;
    params[1] = s->name;
    params[2] = s->algorithm->name;
    params[3] = ctl_text_or_null(s->count);
    params[4] = ctl_text_or_null(s->window);
    params[5] = ctl_text_or_null(s->capacity);
    params[6] = ctl_text_or_null(s->rate);
    params[7] = ctl_text_or_null(s->period);
    params[8] = ctl_text_or_null(s->burst);
    params[9] = ctl_text_or_null(s->calendar);
    return ctl_query(ctl,
        "INSERT INTO limits (rule_id, name, algorithm, limit_count, "
        "                    window_seconds, bucket_capacity, refill_rate, "
        "                    period_us, burst, calendar) "
        "SELECT r.id, $2, $3, $4::bigint, $5::bigint, $6::bigint, "
        "       $7::double precision, $8::bigint, $9::bigint, $10 "
        "FROM rules r WHERE r.id = $1::bigint RETURNING id", 10, params);
}

/* Checks "rule add"'s arguments into spec.  Returns 0 or CTL_EXIT_USAGE
 * after printing why. */
static int
ctl_rule_spec(const struct ctl_command *cmd, const struct ctl_args *a,
    struct ctl_rule_spec *spec)
{
    const char *priority = ctl_arg(cmd, a, "priority");
    char err[256];
    long long v;
    int rc;

    memset(spec, 0, sizeof(*spec));
    spec->tenant = a->pos[0];
    spec->route = ctl_arg(cmd, a, "route");
    spec->failure_mode = ctl_arg(cmd, a, "failure-mode");
    spec->per = ctl_arg(cmd, a, "per");
    spec->shadow = ctl_flag(cmd, a, "shadow");
    spec->always = ctl_flag(cmd, a, "always");

    if (ctl_check_tenant_name(spec->tenant, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (spec->route == NULL)
        return ctl_usage_error(cmd, "missing --route PATTERN");
    if (ctl_check_route(spec->route, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if ((rc = ctl_limit_spec(cmd, a, "default", &spec->limit)) != 0)
        return rc;

    v = 0;
    if (priority != NULL && ctl_parse_integer("--priority", priority,
        -CTL_PRIORITY_MAX, CTL_PRIORITY_MAX, &v, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    snprintf(spec->priority, sizeof(spec->priority), "%lld", v);

    if (spec->failure_mode == NULL)
        spec->failure_mode = "closed";
    if (ctl_check_failure_mode(spec->failure_mode, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (spec->per == NULL)
        spec->per = "rule";
    if (ctl_check_per(spec->per, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    return 0;
}

static int
ctl_cmd_rule_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_rule_spec s;
    struct ctl_guard g;
    const char *params[7];
    const char *names[5] = { "id", "tenant", "route", "always", "limit" };
    const char *values[5];
    char rule_id[24], desc[160];
    PGresult *res;
    int rc;

    if ((rc = ctl_rule_spec(cmd, a, &s)) != 0)
        return rc;
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;

    if ((rc = ctl_guard_begin_tenant(ctl, &g, s.tenant)) != 0)
        return rc;
    params[0] = g.tenant_id;
    params[1] = s.route;
    params[2] = s.priority;
    params[3] = s.shadow ? "true" : "false";
    params[4] = s.failure_mode;
    params[5] = s.per;
    params[6] = s.always ? "true" : "false";
    res = ctl_query(ctl,
        "INSERT INTO rules (tenant_id, route_pattern, priority, shadow, "
        "                   failure_mode, per, always) "
        "VALUES ($1::uuid, $2, $3::integer, $4::boolean, $5, $6, "
        "        $7::boolean) RETURNING id", 7, params);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    res = ctl_insert_limit(ctl, rule_id, &s.limit);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    PQclear(res);
    if ((rc = ctl_guard_end(ctl, &g)) != 0)
        return rc;

    ctl_limit_describe(&s.limit, desc, sizeof(desc));
    values[0] = rule_id;
    values[1] = s.tenant;
    values[2] = s.route;
    values[3] = s.always ? "yes" : "no";
    values[4] = desc;
    ctl_print_fields(names, values, 5);
    return CTL_EXIT_OK;
}

/* rule set: only the options given change; there must be at least one. */
static int
ctl_cmd_rule_set(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const names[] = { "id", "enabled", "always", "shadow",
        "failure-mode", "per", "priority" };
    const char *enabled = ctl_arg(cmd, a, "enabled");
    const char *always = ctl_arg(cmd, a, "always");
    const char *shadow = ctl_arg(cmd, a, "shadow");
    const char *failure_mode = ctl_arg(cmd, a, "failure-mode");
    const char *per = ctl_arg(cmd, a, "per");
    const char *priority = ctl_arg(cmd, a, "priority");
    const char *params[7], *values[7];
    char err[256], prio[24];
    struct ctl_guard g;
    long long id, v;
    PGresult *res;
    int rc, i;

    if (ctl_parse_id("RULE_ID", a->pos[0], &id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (enabled == NULL && always == NULL && shadow == NULL &&
        failure_mode == NULL && per == NULL && priority == NULL)
        return ctl_usage_error(cmd, "nothing to set: give at least one of "
            "--enabled, --always, --shadow, --failure-mode, --per, "
            "--priority");
    params[0] = a->pos[0];
    for (i = 1; i < 7; i++)
        params[i] = NULL;
    if (enabled != NULL && ctl_parse_on_off("--enabled", enabled,
        &params[1], err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (always != NULL && ctl_parse_on_off("--always", always, &params[2],
        err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (shadow != NULL && ctl_parse_on_off("--shadow", shadow, &params[3],
        err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    if (failure_mode != NULL) {
        if (ctl_check_failure_mode(failure_mode, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        params[4] = failure_mode;
    }
    if (per != NULL) {
        if (ctl_check_per(per, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        params[5] = per;
    }
    if (priority != NULL) {
        if (ctl_parse_integer("--priority", priority, -CTL_PRIORITY_MAX,
            CTL_PRIORITY_MAX, &v, err, sizeof(err)) == -1)
            return ctl_usage_error(cmd, "%s", err);
        snprintf(prio, sizeof(prio), "%lld", v);
        params[6] = prio;
    }
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;
    if ((rc = ctl_guard_begin_rule(ctl, &g, id)) != 0)
        return rc;

    /* One statement: a NULL parameter keeps the column as it is.  A rule
     * left unchanged keeps its updated_at and notifies nobody. */
    res = ctl_query(ctl,
        "UPDATE rules SET "
        "  enabled = coalesce($2::boolean, enabled), "
        "  always = coalesce($3::boolean, always), "
        "  shadow = coalesce($4::boolean, shadow), "
        "  failure_mode = coalesce($5, failure_mode), "
        "  per = coalesce($6, per), "
        "  priority = coalesce($7::integer, priority) "
        "WHERE id = $1::bigint "
        "RETURNING id, "
        "  CASE WHEN enabled THEN 'on' ELSE 'off' END, "
        "  CASE WHEN always THEN 'on' ELSE 'off' END, "
        "  CASE WHEN shadow THEN 'on' ELSE 'off' END, "
        "  failure_mode, per, priority", 7, params);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        /* Removed by someone else since the first look. */
        PQclear(res);
        ctl_guard_abort(ctl, &g);
        return ctl_fail("no rule with id %lld", id);
    }
    if ((rc = ctl_guard_end(ctl, &g)) != 0) {
        PQclear(res);
        return rc;
    }
    for (i = 0; i < 7; i++)
        values[i] = PQgetvalue(res, 0, i);
    ctl_print_fields(names, values, 7);
    PQclear(res);
    return CTL_EXIT_OK;
}

static int
ctl_cmd_rule_list(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    static const char *const headers[] = { "ID", "ROUTE", "PRIORITY",
        "ENABLED", "ALWAYS", "SHADOW", "FAILURE", "PER", "LIMIT_ID", "LIMIT",
        "ALGORITHM", "PARAMETERS" };

    /* A GCRA period is shown in the largest unit that divides it, the way
     * --period takes it (ctl_format_duration does the same). */
    return ctl_print_tenant_query(ctl, cmd, a->pos[0],
        "SELECT r.id, r.route_pattern, r.priority, "
        "  CASE WHEN r.enabled THEN 'yes' ELSE 'no' END, "
        "  CASE WHEN r.always THEN 'yes' ELSE 'no' END, "
        "  CASE WHEN r.shadow THEN 'yes' ELSE 'no' END, "
        "  r.failure_mode, r.per, l.id, l.name, l.algorithm, "
        "  CASE l.algorithm "
        "    WHEN 'token_bucket' THEN 'capacity ' || l.bucket_capacity "
        "         || ', refill ' || l.refill_rate || '/s' "
        "    WHEN 'sliding_window' THEN l.limit_count || ' per ' "
        "         || l.window_seconds || ' s' "
        "    WHEN 'gcra' THEN l.limit_count || ' per ' || "
        "      CASE WHEN l.period_us % 86400000000 = 0 "
        "             THEN (l.period_us / 86400000000) || 'd' "
        "           WHEN l.period_us % 3600000000 = 0 "
        "             THEN (l.period_us / 3600000000) || 'h' "
        "           WHEN l.period_us % 60000000 = 0 "
        "             THEN (l.period_us / 60000000) || 'm' "
        "           WHEN l.period_us % 1000000 = 0 "
        "             THEN (l.period_us / 1000000) || 's' "
        "           WHEN l.period_us % 1000 = 0 "
        "             THEN (l.period_us / 1000) || 'ms' "
        "           ELSE l.period_us || 'us' END "
        "      || ', burst ' || l.burst "
        "    WHEN 'fixed_window' THEN l.limit_count || ' per calendar ' "
        "         || l.calendar "
        "  END "
        "FROM rules r LEFT JOIN limits l ON l.rule_id = r.id "
        "WHERE r.tenant_id = $1::uuid ORDER BY r.id, l.id", headers);
}

static int
ctl_cmd_rule_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[1] = { a->pos[0] };
    struct ctl_guard g;
    long long id;
    int rc, n;

    if ((rc = ctl_parse_id_connect(ctl, cmd, "RULE_ID", a->pos[0],
        &id)) != 0)
        return rc;
    /* Guarded too: when two rules tie for a route, removing the winner
     * hands the route to the other one, which may have more limits. */
    if ((rc = ctl_guard_begin_rule(ctl, &g, id)) != 0)
        return rc;
    /* The rule's limits go with it (ON DELETE CASCADE), atomically. */
    n = ctl_query_rows(ctl, "DELETE FROM rules WHERE id = $1::bigint "
        "RETURNING id", 1, params);
    if (n <= 0) {
        ctl_guard_abort(ctl, &g);
        if (n == -1)
            return ctl_db_fail(ctl);
        return ctl_fail("no rule with id %lld", id);
    }
    if ((rc = ctl_guard_end(ctl, &g)) != 0)
        return rc;
    printf("rule %lld removed\n", id);
    return CTL_EXIT_OK;
}

static int
ctl_cmd_limit_add(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    struct ctl_limit_spec s;
    struct ctl_guard g;
    const char *names[3] = { "id", "rule", "limit" };
    const char *values[3];
    char err[256], desc[160], rule[24];
    long long rule_id;
    PGresult *res;
    int rc;

    if (ctl_parse_id("RULE_ID", a->pos[0], &rule_id, err, sizeof(err)) == -1)
        return ctl_usage_error(cmd, "%s", err);
    snprintf(rule, sizeof(rule), "%lld", rule_id);
    if ((rc = ctl_limit_spec(cmd, a, NULL, &s)) != 0)
        return rc;
    if ((rc = ctl_connect(ctl)) != 0)
        return rc;

    /* The trigger limits_per_rule_max counts the rule's limits under a
     * lock on the rule; the guard looks at the checks the rule is in. */
    if ((rc = ctl_guard_begin_rule(ctl, &g, rule_id)) != 0)
        return rc;
    res = ctl_insert_limit(ctl, rule, &s);
    if (res == NULL) {
        ctl_guard_abort(ctl, &g);
        if (strcmp(ctl->constraint, "limits_name_unique") == 0)
            return ctl_fail("rule %lld already has a limit named \"%s\" "
                "(see '" CTL_NAME " rule list TENANT')", rule_id, s.name);
        if (strcmp(ctl->constraint, "limits_per_rule_max") == 0)
            return ctl_fail("%s: remove one first ('" CTL_NAME
                " limit remove LIMIT_ID')", ctl->err);
        return ctl_db_fail(ctl);
    }
    if (PQntuples(res) == 0) {
        /* Removed by someone else since the first look. */
        PQclear(res);
        ctl_guard_abort(ctl, &g);
        return ctl_fail("no rule with id %lld", rule_id);
    }
    if ((rc = ctl_guard_end(ctl, &g)) != 0) {
        PQclear(res);
        return rc;
    }
    ctl_limit_describe(&s, desc, sizeof(desc));
    values[0] = PQgetvalue(res, 0, 0);
    values[1] = rule;
    values[2] = desc;
    ctl_print_fields(names, values, 3);
    PQclear(res);
    return CTL_EXIT_OK;
}

/*
 * limit remove: a rule keeps at least one limit.  The rule's row is locked
 * before its limits are counted, so two removals of a rule's last two
 * limits cannot both succeed.
 */
static int
ctl_cmd_limit_remove(struct ctl *ctl, const struct ctl_command *cmd,
    const struct ctl_args *a)
{
    const char *params[2];
    char rule_id[24], name[CTL_LIMIT_NAME_MAX + 1];
    long long id, nlimits;
    PGresult *res;
    int rc;

    if ((rc = ctl_parse_id_connect(ctl, cmd, "LIMIT_ID", a->pos[0],
        &id)) != 0)
        return rc;

    params[0] = a->pos[0];
    if (ctl_begin(ctl) == -1)
        return ctl_db_fail(ctl);
    res = ctl_query(ctl, "SELECT rule_id FROM limits WHERE id = $1::bigint",
        1, params);
    if (res == NULL)
        goto db_err;
    if (PQntuples(res) == 0) {
        PQclear(res);
        ctl_rollback(ctl);
        return ctl_fail("no limit with id %lld", id);
    }
    snprintf(rule_id, sizeof(rule_id), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);

    params[1] = rule_id;
    if (ctl_command(ctl, "SELECT 1 FROM rules WHERE id = $1::bigint "
        "FOR NO KEY UPDATE", 1, &params[1]) == -1 ||
        (res = ctl_query(ctl, "SELECT count(*) FROM limits "
        "WHERE rule_id = $1::bigint", 1, &params[1])) == NULL)
        goto db_err;
    nlimits = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    if (nlimits <= 1) {
        ctl_rollback(ctl);
        return ctl_fail("limit %lld is the last limit of rule %s, and a rule "
            "needs at least one: remove the whole rule with '" CTL_NAME
            " rule remove %s'", id, rule_id, rule_id);
    }

    res = ctl_query(ctl, "DELETE FROM limits "
        "WHERE id = $1::bigint AND rule_id = $2::bigint RETURNING name",
        2, params);
    if (res == NULL)
        goto db_err;
    if (PQntuples(res) == 0) {
        /* Removed or moved by someone else since the first look. */
        PQclear(res);
        ctl_rollback(ctl);
        return ctl_fail("no limit with id %lld in rule %s", id, rule_id);
    }
    snprintf(name, sizeof(name), "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    if (ctl_commit(ctl) == -1)
        goto db_err;
    printf("limit %lld (%s) removed from rule %s\n", id, name, rule_id);
    return CTL_EXIT_OK;

db_err:
    ctl_rollback(ctl);
    return ctl_db_fail(ctl);
}

/* ------------------------------------------------------------------ */
/* The command table and main */

static const struct ctl_option ctl_no_options[] = { { NULL, 0 } };

static const struct ctl_option ctl_key_create_options[] = {
    { "role", 1 },
    { NULL, 0 },
};

static const struct ctl_option ctl_rule_add_options[] = {
    { "route", 1 },
    { "algorithm", 1 },
    { "capacity", 1 },
    { "refill-rate", 1 },
    { "limit", 1 },
    { "window", 1 },
    { "period", 1 },
    { "burst", 1 },
    { "calendar", 1 },
    { "priority", 1 },
    { "name", 1 },
    { "shadow", 0 },
    { "always", 0 },
    { "failure-mode", 1 },
    { "per", 1 },
    { NULL, 0 },
};

static const struct ctl_option ctl_rule_set_options[] = {
    { "enabled", 1 },
    { "always", 1 },
    { "shadow", 1 },
    { "failure-mode", 1 },
    { "per", 1 },
    { "priority", 1 },
    { NULL, 0 },
};

static const struct ctl_option ctl_limit_add_options[] = {
    { "name", 1 },
    { "algorithm", 1 },
    { "capacity", 1 },
    { "refill-rate", 1 },
    { "limit", 1 },
    { "window", 1 },
    { "period", 1 },
    { "burst", 1 },
    { "calendar", 1 },
    { NULL, 0 },
};

#define CTL_LIMIT_SYNOPSIS "--algorithm ALGORITHM (--capacity N " \
    "--refill-rate R | --limit N --window SECONDS | --limit N --period " \
    "DURATION [--burst B] | --limit N --calendar minute|hour|day|month)"

static const struct ctl_command ctl_commands[] = {
    { "migrate", NULL, "", { NULL }, ctl_no_options, ctl_cmd_migrate },
    { "tenant", "add", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_cmd_tenant_add },
    { "tenant", "list", "", { NULL }, ctl_no_options, ctl_cmd_tenant_list },
    { "tenant", "suspend", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_cmd_tenant_status },
    { "tenant", "resume", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_cmd_tenant_status },
    { "key", "create", "TENANT [--role check|admin]", { "TENANT", NULL },
      ctl_key_create_options, ctl_cmd_key_create },
    { "key", "list", "TENANT", { "TENANT", NULL }, ctl_no_options,
      ctl_cmd_key_list },
    { "key", "revoke", "KEY_ID", { "KEY_ID", NULL }, ctl_no_options,
      ctl_cmd_key_revoke },
    { "rule", "add", "TENANT --route PATTERN " CTL_LIMIT_SYNOPSIS
      " [--name LIMITNAME] [--priority N] [--always] [--shadow] "
      "[--failure-mode closed|open] [--per rule|route]",
      { "TENANT", NULL }, ctl_rule_add_options, ctl_cmd_rule_add },
    { "rule", "list", "TENANT", { "TENANT", NULL }, ctl_no_options,
      ctl_cmd_rule_list },
    { "rule", "set", "RULE_ID [--enabled on|off] [--always on|off] "
      "[--shadow on|off] [--failure-mode closed|open] [--per rule|route] "
      "[--priority N]", { "RULE_ID", NULL }, ctl_rule_set_options,
      ctl_cmd_rule_set },
    { "rule", "remove", "RULE_ID", { "RULE_ID", NULL }, ctl_no_options,
      ctl_cmd_rule_remove },
    { "limit", "add", "RULE_ID --name LIMITNAME " CTL_LIMIT_SYNOPSIS,
      { "RULE_ID", NULL }, ctl_limit_add_options, ctl_cmd_limit_add },
    { "limit", "remove", "LIMIT_ID", { "LIMIT_ID", NULL }, ctl_no_options,
      ctl_cmd_limit_remove },
};

#define CTL_NCOMMANDS (sizeof(ctl_commands) / sizeof(ctl_commands[0]))

static int
ctl_short_usage(FILE *fp)
{
    fputs("usage: " CTL_NAME " [-c FILE] COMMAND ...\n"
        "commands: migrate, tenant add|list|suspend|resume, "
        "key create|list|revoke, rule add|list|set|remove, "
        "limit add|remove\n"
        "Try '" CTL_NAME " --help' for more information.\n", fp);
    return CTL_EXIT_USAGE;
}

/* Finds the command named by argv[0] (and argv[1]).  Returns it, or NULL
 * after printing a usage error. */
static const struct ctl_command *
ctl_find_command(int argc, char **argv, int *words)
{
    const char *noun = argv[0], *verb = argc > 1 ? argv[1] : NULL;
    int noun_known = 0;
    size_t i;

    for (i = 0; i < CTL_NCOMMANDS; i++) {
        if (strcmp(ctl_commands[i].noun, noun) != 0)
            continue;
        noun_known = 1;
        if (ctl_commands[i].verb == NULL) {
            *words = 1;
            return &ctl_commands[i];
        }
        if (verb != NULL && strcmp(ctl_commands[i].verb, verb) == 0) {
            *words = 2;
            return &ctl_commands[i];
        }
    }
    if (!noun_known) {
        ctl_warn("unknown command '%s'", noun);
    } else {
        if (verb == NULL)
            ctl_warn("'%s' needs a subcommand:", noun);
        else
            ctl_warn("unknown command '%s %s'; one of:", noun, verb);
        for (i = 0; i < CTL_NCOMMANDS; i++)
            if (strcmp(ctl_commands[i].noun, noun) == 0) {
                fputs("    " CTL_NAME " ", stderr);
                ctl_print_command(&ctl_commands[i], stderr);
            }
    }
    ctl_short_usage(stderr);
    return NULL;
}

int
main(int argc, char **argv)
{
    struct ctl ctl;
    struct ctl_args args;
    const struct ctl_command *cmd;
    const char *arg;
    int i, words, rc;

    memset(&ctl, 0, sizeof(ctl));
    ctl.config_path = CTL_DEFAULT_CONFIG;

    /* Global options come before the command. */
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            fputs(ctl_help_text, stdout);
            return CTL_EXIT_OK;
        }
        if (strcmp(arg, "--version") == 0) {
            printf(CTL_NAME " %s (ratelimit-fcgi), libpq %d\n", RL_VERSION,
                PQlibVersion());
            return CTL_EXIT_OK;
        }
        if (strcmp(arg, "-c") == 0 || strcmp(arg, "--config") == 0) {
            if (i + 1 >= argc) {
                ctl_warn("option '%s' needs a file name", arg);
                return ctl_short_usage(stderr);
            }
            ctl.config_path = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            ctl.config_path = arg + 9;
        } else if (strncmp(arg, "-c", 2) == 0) {
            ctl.config_path = arg + 2;
        } else {
            ctl_warn("unknown option '%s'", arg);
            return ctl_short_usage(stderr);
        }
        if (*ctl.config_path == '\0') {
            ctl_warn("option '-c': empty file name");
            return ctl_short_usage(stderr);
        }
        ctl.config_given = 1;
    }
    if (i >= argc) {
        ctl_warn("no command given");
        return ctl_short_usage(stderr);
    }
    if (strcmp(argv[i], "help") == 0) {
        fputs(ctl_help_text, stdout);
        return CTL_EXIT_OK;
    }
    if ((cmd = ctl_find_command(argc - i, argv + i, &words)) == NULL)
        return CTL_EXIT_USAGE;
    rc = ctl_parse_args(cmd, argc - i - words, argv + i + words, &args);
    if (rc == -1)
        return CTL_EXIT_OK;
    if (rc != 0)
        return rc;

    rc = cmd->run(&ctl, cmd, &args);
    if (ctl.conn != NULL)
        PQfinish(ctl.conn);
    if (fflush(stdout) == EOF || ferror(stdout)) {
        ctl_warn("cannot write the output: %s", strerror(errno));
        return CTL_EXIT_FAIL;
    }
    return rc;
}
