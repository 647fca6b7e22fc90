/*
 * ctl.c -- ratelimitctl, the admin tool: its commands, its global options,
 * its messages and main.
 *
 * Each run does one command, named by one or two words ("migrate", "rule
 * add") and found in ctl_commands, the one list of what the tool can do:
 * the usage lines, "--help" and the check that the manual page
 * (ratelimitctl.8) names every command are made from it.  Global options
 * (-c FILE, --help, --version) come before the command.  The exit status
 * is CTL_EXIT_OK, CTL_EXIT_FAIL (the command failed) or CTL_EXIT_USAGE
 * (a bad command line, or a change the plan guard refused).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ctl.h"

/* ------------------------------------------------------------------ */
/* Messages */

static void ctl_vwarn(const char *fmt, va_list ap)
    __attribute__((format(printf, 1, 0)));

static void
ctl_vwarn(const char *fmt, va_list ap)
{
    fputs(CTL_NAME ": ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void
ctl_warn(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ctl_vwarn(fmt, ap);
    va_end(ap);
}

/* Prints "ratelimitctl: message" and returns CTL_EXIT_FAIL. */
int
ctl_fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    ctl_vwarn(fmt, ap);
    va_end(ap);
    return CTL_EXIT_FAIL;
}

/* Prints "noun verb synopsis" and a newline. */
void
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
int
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
/* The command table and main */

static const struct ctl_option ctl_no_options[] = { { NULL, 0 } };

/* The list and show commands: --json writes JSON instead of a table. */
static const struct ctl_option ctl_json_options[] = {
    { "json", 0 },
    { NULL, 0 },
};

static const struct ctl_option ctl_counter_options[] = {
    { "subject", 1 },
    { "key", 1 },
    { "address", 1 },
    { "json", 0 },
    { NULL, 0 },
};

static const struct ctl_option ctl_apply_options[] = {
    { "dry-run", 0 },
    { NULL, 0 },
};

static const struct ctl_option ctl_force_options[] = {
    { "force", 0 },
    { NULL, 0 },
};

static const struct ctl_option ctl_key_create_options[] = {
    { "role", 1 },
    { NULL, 0 },
};

/*
 * rule add and limit add take their own options and the parameter options
 * of every algorithm, which algo.c's table names (ctl_limit.c refuses those
 * of another algorithm than the one chosen); ctl_derive_options() fills
 * these at start, and the part of their synopsis that describes a limit.
 */
static const struct ctl_option ctl_rule_add_own[] = {
    { "route", 1 },
    { "algorithm", 1 },
    { "count", 1 },
    { "priority", 1 },
    { "name", 1 },
    { "shadow", 0 },
    { "always", 0 },
    { "failure-mode", 1 },
    { "per", 1 },
    { "force", 0 },
    { NULL, 0 },
};

static const struct ctl_option ctl_limit_add_own[] = {
    { "name", 1 },
    { "algorithm", 1 },
    { "count", 1 },
    { NULL, 0 },
};

/* One more than a command may have, and the terminator: main() refuses
 * a table that fills them. */
static struct ctl_option ctl_rule_add_options[CTL_MAX_OPTIONS + 2];
static struct ctl_option ctl_limit_add_options[CTL_MAX_OPTIONS + 2];

static const struct ctl_option ctl_rule_set_options[] = {
    { "route", 1 },
    { "enabled", 1 },
    { "always", 1 },
    { "shadow", 1 },
    { "failure-mode", 1 },
    { "per", 1 },
    { "priority", 1 },
    { NULL, 0 },
};

/* "--algorithm ALGORITHM (--capacity N --refill-rate R | ...)
 * [--count subject|key|tenant]", from algo.c's table, in the synopses of
 * rule add and limit add. */
static char ctl_rule_add_synopsis[512];
static char ctl_limit_add_synopsis[512];

/* out (CTL_MAX_OPTIONS + 2 entries): own's options, then every algorithm's
 * parameter options (each once), cut after CTL_MAX_OPTIONS + 1, which
 * main() refuses. */
static void
ctl_options_with_params(struct ctl_option *out, const struct ctl_option *own)
{
    const struct algo *alg;
    int i, j, k, n = 0;

    for (i = 0; own[i].name != NULL && n <= CTL_MAX_OPTIONS; i++)
        out[n++] = own[i];
    for (i = 0; (alg = algo_at(i)) != NULL; i++)
        for (j = 0; j < alg->nparams; j++) {
            for (k = 0; k < n && strcmp(out[k].name,
                alg->param[j].option) != 0; k++)
                ;
            if (k == n && n <= CTL_MAX_OPTIONS) {
                out[n].name = alg->param[j].option;
                out[n++].has_value = 1;
            }
        }
    out[n].name = NULL;
}

/* "--algorithm ALGORITHM (--capacity N --refill-rate R | --limit N
 * --window DURATION | ...) [--count subject|key|tenant]" into buf. */
static void
ctl_limit_synopsis(char *buf, size_t len)
{
    const struct algo *alg;
    const struct algo_param *p;
    size_t used;
    int i, j, c;

    snprintf(buf, len, "--algorithm ALGORITHM (");
    for (i = 0; (alg = algo_at(i)) != NULL; i++)
        for (j = 0; j < alg->nparams; j++) {
            p = &alg->param[j];
            used = strlen(buf);
            snprintf(buf + used, len - used, "%s%s--%s ",
                i > 0 && j == 0 ? " | " : j > 0 ? " " : "",
                p->optional ? "[" : "", p->option);
            if (p->metavar != NULL)
                snprintf(buf + strlen(buf), len - strlen(buf), "%s",
                    p->metavar);
            else
                for (c = 1; strcmp(algo_calendar_name(c), "unknown") != 0;
                    c++)
                    snprintf(buf + strlen(buf), len - strlen(buf), "%s%s",
                        c == 1 ? "" : "|", algo_calendar_name(c));
            if (p->optional)
                snprintf(buf + strlen(buf), len - strlen(buf), "]");
        }
    used = strlen(buf);
    snprintf(buf + used, len - used, ") [--count subject|key|tenant]");
}

/* Fills what rule add and limit add take from algo.c's table. */
static void
ctl_derive_options(void)
{
    char limit[384];

    ctl_options_with_params(ctl_rule_add_options, ctl_rule_add_own);
    ctl_options_with_params(ctl_limit_add_options, ctl_limit_add_own);
    ctl_limit_synopsis(limit, sizeof(limit));
    snprintf(ctl_rule_add_synopsis, sizeof(ctl_rule_add_synopsis),
        "TENANT --route PATTERN %s [--name LIMITNAME] [--priority N] "
        "[--always] [--shadow] [--failure-mode closed|open] "
        "[--per rule|route] [--force]", limit);
    snprintf(ctl_limit_add_synopsis, sizeof(ctl_limit_add_synopsis),
        "RULE_ID --name LIMITNAME %s", limit);
}

static const struct ctl_command ctl_commands[] = {
    { "migrate", NULL, "", { NULL }, ctl_no_options, ctl_migrate_run },
    { "tenant", "add", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_tenant_add },
    { "tenant", "list", "[--json]", { NULL }, ctl_json_options,
      ctl_tenant_list },
    { "tenant", "show", "NAME [--json]", { "NAME", NULL }, ctl_json_options,
      ctl_tenant_show },
    { "tenant", "remove", "NAME [--force]", { "NAME", NULL },
      ctl_force_options, ctl_tenant_remove },
    { "tenant", "export", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_tenant_export },
    { "tenant", "apply", "FILE [--dry-run]", { "FILE", NULL },
      ctl_apply_options, ctl_tenant_apply },
    { "tenant", "suspend", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_tenant_status },
    { "tenant", "resume", "NAME", { "NAME", NULL }, ctl_no_options,
      ctl_tenant_status },
    { "tenant", "budget", "NAME COUNT|default", { "NAME", "COUNT", NULL },
      ctl_no_options, ctl_tenant_budget },
    { "key", "create", "TENANT [--role check|admin]", { "TENANT", NULL },
      ctl_key_create_options, ctl_tenant_key_create },
    { "key", "list", "TENANT [--json]", { "TENANT", NULL },
      ctl_json_options, ctl_tenant_key_list },
    { "key", "revoke", "KEY_ID|KEY|PREFIX", { "KEY_ID|KEY|PREFIX", NULL },
      ctl_no_options, ctl_tenant_key_revoke },
    { "rule", "add", ctl_rule_add_synopsis,
      { "TENANT", NULL }, ctl_rule_add_options, ctl_rule_add },
    { "rule", "list", "TENANT [--json]", { "TENANT", NULL },
      ctl_json_options, ctl_rule_list },
    { "rule", "match", "TENANT ROUTE [--json]", { "TENANT", "ROUTE", NULL },
      ctl_json_options, ctl_rule_match },
    { "rule", "set", "RULE_ID [--route PATTERN] [--enabled on|off] "
      "[--always on|off] "
      "[--shadow on|off] [--failure-mode closed|open] [--per rule|route] "
      "[--priority N]", { "RULE_ID", NULL }, ctl_rule_set_options,
      ctl_rule_set },
    { "rule", "remove", "RULE_ID", { "RULE_ID", NULL }, ctl_no_options,
      ctl_rule_remove },
    { "limit", "add", ctl_limit_add_synopsis,
      { "RULE_ID", NULL }, ctl_limit_add_options, ctl_limit_add },
    { "limit", "set", "LIMIT_ID [--name LIMITNAME] [--algorithm ALGORITHM] "
      "[its parameters] [--count subject|key|tenant]", { "LIMIT_ID", NULL },
      ctl_limit_add_options, ctl_limit_set },
    { "limit", "remove", "LIMIT_ID", { "LIMIT_ID", NULL }, ctl_no_options,
      ctl_limit_remove },
    { "counter", "show", "TENANT ROUTE [--subject S] [--key KEY_ID | "
      "--address IP] [--json]", { "TENANT", "ROUTE", NULL },
      ctl_counter_options, ctl_counter_show },
    { "counter", "reset", "TENANT ROUTE [--subject S] [--key KEY_ID | "
      "--address IP]", { "TENANT", "ROUTE", NULL }, ctl_counter_options,
      ctl_counter_reset },
    { "usage", NULL, "TENANT [--json]", { "TENANT", NULL }, ctl_json_options,
      ctl_usage_run },
};

#define CTL_NCOMMANDS (sizeof(ctl_commands) / sizeof(ctl_commands[0]))

/*
 * "--help": the commands with their positional arguments, the exit
 * statuses and where the rest is.  Made from ctl_commands, so that it
 * cannot leave a command out; the options are in each command's usage
 * ("COMMAND --help") and in the manual page.
 */
static void
ctl_help(FILE *fp)
{
    const struct ctl_command *cmd;
    size_t i;
    int k;

    fputs("usage: " CTL_NAME " [-c FILE] COMMAND [ARGUMENT ...]\n"
        "       " CTL_NAME " -h | --help | --version\n"
        "\n"
        "SYNOPSIS\n", fp);
    for (i = 0; i < CTL_NCOMMANDS; i++) {
        cmd = &ctl_commands[i];
        fprintf(fp, "    " CTL_NAME " [-c FILE] %s", cmd->noun);
        if (cmd->verb != NULL)
            fprintf(fp, " %s", cmd->verb);
        for (k = 0; cmd->positional[k] != NULL; k++)
            fprintf(fp, " %s", cmd->positional[k]);
        if (cmd->options[0].name != NULL)
            fputs(" [OPTION ...]", fp);
        fputc('\n', fp);
    }
    fputs("\n"
        "    -c FILE, --config FILE  the configuration file (default\n"
        "                            " CTL_DEFAULT_CONFIG ")\n"
        "    COMMAND --help          the command's options\n"
        "\n"
        "EXIT STATUS\n"
        "    0  success\n"
        "    1  the command failed (database, unknown name or id)\n"
        "    2  bad command line, or a change refused because a check\n"
        "       would need too many limits; nothing was changed\n"
        "\n"
        "Every command and option is described in the manual page\n"
        "ratelimitctl(8): man ratelimitctl\n", fp);
}

/* "commands: migrate, tenant add|list|..., ..." from the table. */
static void
ctl_command_list(FILE *fp)
{
    size_t i;

    fputs("commands:", fp);
    for (i = 0; i < CTL_NCOMMANDS; i++) {
        if (i > 0 && strcmp(ctl_commands[i].noun,
            ctl_commands[i - 1].noun) == 0)
            fprintf(fp, "|%s", ctl_commands[i].verb);
        else
            fprintf(fp, "%s %s%s%s", i > 0 ? "," : "",
                ctl_commands[i].noun, ctl_commands[i].verb != NULL ? " " : "",
                ctl_commands[i].verb != NULL ? ctl_commands[i].verb : "");
    }
    fputc('\n', fp);
}

static int
ctl_short_usage(FILE *fp)
{
    fputs("usage: " CTL_NAME " [-c FILE] COMMAND ...\n", fp);
    ctl_command_list(fp);
    fputs("Try '" CTL_NAME " --help' for more information.\n", fp);
    return CTL_EXIT_USAGE;
}

/* "NOUN --help": the commands of that noun with their usage. */
static int
ctl_noun_help(const char *noun)
{
    size_t i;
    int n = 0;

    for (i = 0; i < CTL_NCOMMANDS; i++)
        if (strcmp(ctl_commands[i].noun, noun) == 0) {
            if (n++ == 0)
                printf("usage:\n");
            fputs("    " CTL_NAME " [-c FILE] ", stdout);
            ctl_print_command(&ctl_commands[i], stdout);
        }
    if (n == 0)
        return 0;
    if (n > 1)
        printf("'" CTL_NAME " %s COMMAND --help' shows one of them; "
            "man ratelimitctl describes every option.\n", noun);
    else
        printf("man ratelimitctl describes every option.\n");
    return 1;
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
    char secrets[2048];
    int i, words, rc;

    memset(&ctl, 0, sizeof(ctl));
    ctl.config_path = CTL_DEFAULT_CONFIG;
    ctl_derive_options();
    /* A command with more options than struct ctl_args holds would read
     * past it: refuse to run at all, so that any test shows it. */
    for (i = 0; i < (int)CTL_NCOMMANDS; i++) {
        for (words = 0; ctl_commands[i].options[words].name != NULL; words++)
            ;
        if (words > CTL_MAX_OPTIONS) {
            ctl_warn("internal error: '%s %s' has %d options, more than "
                "CTL_MAX_OPTIONS (%d)", ctl_commands[i].noun,
                ctl_commands[i].verb != NULL ? ctl_commands[i].verb : "",
                words, CTL_MAX_OPTIONS);
            return CTL_EXIT_FAIL;
        }
    }

    /* Global options come before the command. */
    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            ctl_help(stdout);
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
        ctl_help(stdout);
        return CTL_EXIT_OK;
    }
    if (i + 1 < argc && (strcmp(argv[i + 1], "--help") == 0 ||
        strcmp(argv[i + 1], "-h") == 0) && ctl_noun_help(argv[i]))
        return CTL_EXIT_OK;
    if ((cmd = ctl_find_command(argc - i, argv + i, &words)) == NULL)
        return CTL_EXIT_USAGE;
    rc = ctl_args_parse(cmd, argc - i - words, argv + i + words, &args);
    if (rc == -1)
        return CTL_EXIT_OK;
    if (rc != 0)
        return rc;
    ctl_db_set_json(ctl_args_flag(cmd, &args, "json"));

    rc = cmd->run(&ctl, cmd, &args);
    if (ctl.conn != NULL)
        PQfinish(ctl.conn);
    /* The command has read the file (ctl.cfg.path is set once it loaded):
     * a password in it that others may read is worth a word. */
    if (config_check_secrets(&ctl.cfg, secrets, sizeof(secrets)))
        ctl_warn("warning: %s", secrets);
    if (fflush(stdout) == EOF || ferror(stdout)) {
        ctl_warn("cannot write the output: %s", strerror(errno));
        return CTL_EXIT_FAIL;
    }
    return rc;
}
