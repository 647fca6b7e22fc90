/*
 * ctl_args.c -- the arguments of one ratelimitctl command.
 *
 * After the command words come positional arguments and the command's
 * options, in any order.  Options are written "--name VALUE" or
 * "--name=VALUE"; "--" ends them (for a tenant whose name begins with
 * "-"); "-h" or "--help" prints the command's usage.  An unknown option,
 * an option given twice, a missing value or a missing or extra positional
 * argument is a usage error (exit 2).  Only the shape is checked here: what
 * the values mean is the command's business (validate.c), but for the
 * durations (--window, --period), which every command reads alike.
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"
/* The index of option name (namelen bytes) among cmd's, or -1. */
static int
ctl_args_option_index(const struct ctl_command *cmd, const char *name,
    size_t namelen)
{
    int i;

    /* (the table is checked at start: at most CTL_MAX_OPTIONS a command) */
    for (i = 0; cmd->options != NULL && cmd->options[i].name != NULL &&
        i < CTL_MAX_OPTIONS; i++)
        if (strlen(cmd->options[i].name) == namelen &&
            strncmp(cmd->options[i].name, name, namelen) == 0)
            return i;
    return -1;
}

const char *
ctl_args_value(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *name)
{
    int i = ctl_args_option_index(cmd, name, strlen(name));

    return i >= 0 && a->given[i] ? a->value[i] : NULL;
}

int
ctl_args_flag(const struct ctl_command *cmd, const struct ctl_args *a,
    const char *name)
{
    int i = ctl_args_option_index(cmd, name, strlen(name));

    return i >= 0 && a->given[i];
}

/* The usage of one command, for "COMMAND --help". */
static void
ctl_args_print_usage(const struct ctl_command *cmd, FILE *fp)
{
    fputs("usage: " CTL_NAME " [-c FILE] ", fp);
    ctl_print_command(cmd, fp);
    fputs("See '" CTL_NAME " --help' for the details.\n", fp);
}

/* ctl.h: splits argv into positional arguments and cmd's options. */
int
ctl_args_parse(const struct ctl_command *cmd, int argc, char **argv,
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
            ctl_args_print_usage(cmd, stdout);
            return -1;
        }
        if (!options_done && arg[0] == '-' && arg[1] == '-') {
            eq = strchr(arg + 2, '=');
            namelen = eq ? (size_t)(eq - (arg + 2)) : strlen(arg + 2);
            k = ctl_args_option_index(cmd, arg + 2, namelen);
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
/* Durations */

/* Whether p is a duration counted in whole seconds (--window): a count
 * that algo.c's table shows as a DURATION. */
static int
ctl_args_in_seconds(const struct algo_param *p)
{
    return p->kind == ALGO_KIND_COUNT && p->metavar != NULL &&
        strcmp(p->metavar, "DURATION") == 0;
}

const char *
ctl_args_param_text(const struct algo_param *p, const char *value,
    char *buf, size_t len, char *err, size_t errlen)
{
    int seconds = ctl_args_in_seconds(p);
    size_t digits = strspn(value, "0123456789");
    const char *accepted, *typed = value;
    char low[24], high[24];
    long long v = 0, lo, hi, unit;

    if (!seconds && p->kind != ALGO_KIND_DURATION)
        return value;
    accepted = seconds ? "whole seconds: a number of seconds (\"60\") or a "
        "whole number with the unit s, m, h or d (\"90s\", \"5m\", \"1h\", "
        "\"1d\")" : "a number of seconds (\"60\") or a whole number with "
        "the unit us, ms, s, m, h or d (\"500ms\", \"1s\", \"5m\", \"1h\", "
        "\"1d\")";
    unit = validate_duration_unit(value + digits);
    if (digits == 0 || unit < 0 || (seconds && unit < 1000000LL)) {
        snprintf(err, errlen, "--%s: \"%.40s\" is not a duration; it takes "
            "%s", p->option, value, accepted);
        return NULL;
    }
    for (; digits > 0 && *value == '0'; value++, digits--)
        ;
    /* More than 15 digits is more than 366 days, whatever the unit. */
    for (; digits > 0 && digits <= 15; value++, digits--)
        v = v * 10 + (*value - '0');
    v = digits > 0 ? -1 : v * unit;
    lo = (long long)p->min * (seconds ? 1000000LL : 1);
    hi = (long long)p->max * (seconds ? 1000000LL : 1);
    if (v < lo || v > hi) {
        validate_duration_format(lo, low, sizeof(low));
        validate_duration_format(hi, high, sizeof(high));
        snprintf(err, errlen, "--%s: %s is out of range (%s to %s)",
            p->option, typed, low, high);
        return NULL;
    }
    if (seconds)
        snprintf(buf, len, "%lld", v / 1000000LL);
    else
        snprintf(buf, len, "%lldus", v);
    return buf;
}
