/*
 * validate.c -- checks of the values people type: tenant names, route
 * patterns, limit names, numbers, durations and the few words the rules
 * take (on/off, closed/open, rule/route).
 *
 * Every function here is pure: it looks at a string and either fills in
 * the parsed value or writes one line saying what is wrong into a buffer
 * of the caller's.  Nothing here talks to a database, so the admin tool
 * checks a whole command line before it connects, the service can apply
 * the same rules to what it reads, and the unit tests try every boundary.
 * The bounds of the limit parameters are the CHECKs of
 * schema/002_limits.sql, so that whatever passes here the database takes.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

/* Duration units, largest first (validate_duration_format relies on it). */
static const struct {
    const char *unit;
    long long us;
} validate_units[] = {
    { "d", 86400000000LL },
    { "h", 3600000000LL },
    { "m", 60000000LL },
    { "s", 1000000LL },
    { "ms", 1000LL },
    { "us", 1LL },
};

#define VALIDATE_NUNITS (sizeof(validate_units) / sizeof(validate_units[0]))

/* The spaces isspace() knows in the C locale; a name is checked the same
 * way whatever locale the program runs in. */
static int
validate_is_space(int c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

long
validate_utf8_length(const char *s)
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
        /* A NUL ends the loop here too: it is not a continuation byte. */
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

size_t
validate_display_width(const char *s)
{
    size_t n = 0;

    for (; *s != '\0'; s++)
        if (((unsigned char)*s & 0xc0) != 0x80)
            n++;
    return n;
}

int
validate_tenant_name(const char *what, const char *s, char *err,
    size_t errlen)
{
    long n = validate_utf8_length(s);
    size_t len = strlen(s);

    if (n < 0) {
        snprintf(err, errlen, "%s: not UTF-8 text, or contains control "
            "characters", what);
        return -1;
    }
    if (n == 0 || n > VALIDATE_TENANT_NAME_MAX) {
        snprintf(err, errlen, "%s: must be 1 to %d characters (got %ld)",
            what, VALIDATE_TENANT_NAME_MAX, n);
        return -1;
    }
    if (validate_is_space((unsigned char)s[0]) ||
        validate_is_space((unsigned char)s[len - 1])) {
        snprintf(err, errlen, "%s: must not begin or end with a space", what);
        return -1;
    }
    return 0;
}

int
validate_route(const char *what, const char *s, char *err, size_t errlen)
{
    size_t len = strlen(s);
    const char *star;

    if (len == 0 || len > RL_ROUTE_MAX) {
        snprintf(err, errlen, "%s: must be 1 to %d bytes (got %zu)", what,
            RL_ROUTE_MAX, len);
        return -1;
    }
    if (validate_utf8_length(s) < 0) {
        snprintf(err, errlen, "%s: not UTF-8 text, or contains control "
            "characters", what);
        return -1;
    }
    if (validate_is_space((unsigned char)s[0]) ||
        validate_is_space((unsigned char)s[len - 1])) {
        snprintf(err, errlen, "%s: must not begin or end with a space "
            "(routes are trimmed before they are matched)", what);
        return -1;
    }
    star = strchr(s, '*');
    if (star != NULL && star[1] != '\0') {
        snprintf(err, errlen, "%s: \"*\" may only be the last character "
            "(\"*\" alone matches every route, \"/a*\" every route "
            "beginning with \"/a\")", what);
        return -1;
    }
    return 0;
}

int
validate_limit_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
        (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

int
validate_limit_name(const char *what, const char *s, char *err,
    size_t errlen)
{
    size_t len = strlen(s), i;

    if (len == 0 || len > RL_NAME_MAX) {
        snprintf(err, errlen, "%s: must be 1 to %d characters", what,
            RL_NAME_MAX);
        return -1;
    }
    for (i = 0; i < len; i++)
        if (!validate_limit_name_char((unsigned char)s[i])) {
            snprintf(err, errlen, "%s: only letters, digits, \"_\", \".\" "
                "and \"-\" are allowed", what);
            return -1;
        }
    return 0;
}

int
validate_integer(const char *what, const char *s, long long min,
    long long max, long long *out, char *err, size_t errlen)
{
    const char *p = s;
    long long v;

    if (*p == '-')
        p++;
    if (*p == '\0' || strspn(p, "0123456789") != strlen(p)) {
        snprintf(err, errlen, "%s: \"%s\" is not a whole number", what, s);
        return -1;
    }
    errno = 0;
    v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < min || v > max) {
        snprintf(err, errlen, "%s: %s is out of range (%lld to %lld)", what,
            s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int
validate_id(const char *what, const char *s, long long *out, char *err,
    size_t errlen)
{
    return validate_integer(what, s, 1, LLONG_MAX, out, err, errlen);
}

int
validate_decimal(const char *what, const char *s, double min, double max,
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

int
validate_duration(const char *what, const char *s, long long *out_us,
    char *err, size_t errlen)
{
    size_t digits = strspn(s, "0123456789");
    long long v, unit = validate_duration_unit(s + digits);

    /* A unit is needed here: a bare number is no duration. */
    if (digits == 0 || s[digits] == '\0' || unit < 0) {
        snprintf(err, errlen, "%s: \"%s\" is not a duration (a whole number "
            "with one of the units us, ms, s, m, h, d, as in 500us, 2ms, 1s "
            "or 1m)", what, s);
        return -1;
    }
    errno = 0;
    v = strtoll(s, NULL, 10);
    if (errno == ERANGE || v < 1 ||
        v > VALIDATE_PERIOD_MAX / unit) {
        snprintf(err, errlen, "%s: %s is out of range (1us to 366d)", what, s);
        return -1;
    }
    *out_us = v * unit;
    return 0;
}

long long
validate_duration_unit(const char *unit)
{
    size_t i;

    if (unit[0] == '\0')
        return 1000000LL;
    for (i = 0; i < VALIDATE_NUNITS; i++)
        if (strcmp(unit, validate_units[i].unit) == 0)
            return validate_units[i].us;
    return -1;
}

void
validate_duration_format(long long us, char *buf, size_t len)
{
    size_t i;

    for (i = 0; i < VALIDATE_NUNITS - 1; i++)
        if (us % validate_units[i].us == 0)
            break;
    snprintf(buf, len, "%lld%s", us / validate_units[i].us,
        validate_units[i].unit);
}

int
validate_gcra(const char *period_text, long long count, long long period_us,
    long long burst, char *err, size_t errlen)
{
    long long spacing;

    /*
     * GCRA spaces requests ceil(period / limit) microseconds apart, so more
     * than one request per microsecond would silently become one.  It
     * refuses (burst + 1) spacings beyond VALIDATE_GCRA_SPAN_MAX
     * (lua/gcra.lua, and the CHECK limits_parameters), so such a rule could
     * never be used.  Dividing instead of multiplying cannot overflow.
     */
    if (count > period_us) {
        snprintf(err, errlen, "--limit %lld per --period %s is more than one "
            "request per microsecond, which gcra cannot space out; use a "
            "longer --period or sliding_window", count, period_text);
        return -1;
    }
    spacing = (period_us + count - 1) / count;
    if (spacing > VALIDATE_GCRA_SPAN_MAX / (burst + 1)) {
        snprintf(err, errlen, "--burst %lld: %lld requests spaced %lldus "
            "apart take longer than gcra's limit of 10^15us (about 31 "
            "years); use a smaller --burst or a shorter --period", burst,
            burst + 1, spacing);
        return -1;
    }
    return 0;
}

int
validate_on_off(const char *what, const char *s, int *on, char *err,
    size_t errlen)
{
    if (strcmp(s, "on") == 0 || strcmp(s, "off") == 0) {
        *on = s[1] == 'n';
        return 0;
    }
    snprintf(err, errlen, "%s: \"%s\" is not on or off", what, s);
    return -1;
}

int
validate_failure_mode(const char *what, const char *s, char *err,
    size_t errlen)
{
    if (strcmp(s, "closed") == 0 || strcmp(s, "open") == 0)
        return 0;
    snprintf(err, errlen, "%s: \"%s\" is not closed or open", what, s);
    return -1;
}

int
validate_count(const char *what, const char *s, char *err, size_t errlen)
{
    if (algo_count_parse(s) >= 0)
        return 0;
    snprintf(err, errlen, "%s: \"%s\" is not subject, key or tenant", what,
        s);
    return -1;
}

int
validate_per(const char *what, const char *s, char *err, size_t errlen)
{
    if (strcmp(s, "rule") == 0 || strcmp(s, "route") == 0)
        return 0;
    snprintf(err, errlen, "%s: \"%s\" is not rule or route", what, s);
    return -1;
}
