/*
 * release_line.c -- the parser of the lines ratelimit-release reads: one
 * per request that ended, as the web server's access log writes it
 * (nginx to a syslog socket, lighttpd and Apache to a pipe), naming the
 * request's lease and, when the front end logs one, its actual cost.
 *
 * Pure: bytes in, a struct out, no allocation, nothing read past the
 * length given, so that the unit tests try every shape and a web server
 * misconfigured to log something else costs a counted bad line, never
 * more.  The format is in release.h.
 */
#include <string.h>

#include "ratelimit.h"
#include "release.h"

#define RELEASE_STR(x) RELEASE_STR_(x)
#define RELEASE_STR_(x) #x

static int
release_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* A lease id: 1 to RELEASE_LEASE_MAX of [A-Za-z0-9._:-]. */
static int
release_lease_ok(const char *s, size_t n)
{
    size_t i;

    if (n == 0 || n > RELEASE_LEASE_MAX)
        return 0;
    for (i = 0; i < n; i++) {
        char c = s[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
            c == '-'))
            return 0;
    }
    return 1;
}

/* A cost: a whole number from 0 to RL_COST_MAX, in decimal.  Returns it,
 * or -1. */
static long long
release_cost(const char *s, size_t n)
{
    long long v = 0;
    size_t i;

    if (n == 0 || n > 18)           /* (no overflow below) */
        return -1;
    for (i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v <= RL_COST_MAX ? v : -1;
}

/*
 * Skips an RFC 3164 header, "<PRI>TIMESTAMP [HOST ]TAG: ", when the text
 * starts with one.  Returns the offset of the message, 0 when there is
 * no header, or -1 when the header is broken.
 */
static long
release_skip_syslog(const char *s, size_t n)
{
    size_t i = 1, digits = 0;

    if (n == 0 || s[0] != '<')
        return 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 4) {
        i++;
        digits++;
    }
    if (digits == 0 || digits > 3 || i >= n || s[i] != '>')
        return -1;
    /* The timestamp ("Dec  5 17:59:00") has colons, never ": ". */
    for (i++; i + 1 < n; i++)
        if (s[i] == ':' && s[i + 1] == ' ')
            return (long)(i + 2);
    return -1;
}

static enum release_kind
release_bad(struct release_line *out, const char *reason)
{
    out->kind = RELEASE_LINE_BAD;
    out->lease[0] = '\0';
    out->cost = -1;
    out->reason = reason;
    return RELEASE_LINE_BAD;
}

enum release_kind
release_line_parse(const char *text, size_t len, struct release_line *out)
{
    const char *lease = NULL, *cost = NULL;
    size_t lease_n = 0, cost_n = 0, i, start, eq;
    long off;
    int has_eq;

    memset(out, 0, sizeof(*out));
    out->cost = -1;
    if (len > RELEASE_LINE_MAX)
        return release_bad(out, "longer than the longest line taken");
    if (len > 0 && text[len - 1] == '\n')
        len--;
    if (len > 0 && text[len - 1] == '\r')
        len--;
    if ((off = release_skip_syslog(text, len)) == -1)
        return release_bad(out, "a syslog header without \"TAG: \"");
    i = (size_t)off;
    for (;;) {
        while (i < len && release_blank(text[i]))
            i++;
        if (i == len)
            break;
        start = eq = i;
        has_eq = 0;
        while (i < len && !release_blank(text[i])) {
            if (text[i] == '=' && !has_eq) {
                eq = i;
                has_eq = 1;
            }
            i++;
        }
        if (!has_eq || eq == start)
            return release_bad(out, "a field that is not NAME=VALUE");
        if (eq - start == 5 && memcmp(text + start, "lease", 5) == 0) {
            if (lease != NULL)
                return release_bad(out, "lease= twice");
            lease = text + eq + 1;
            lease_n = i - eq - 1;
        } else if (eq - start == 4 && memcmp(text + start, "cost", 4) == 0) {
            if (cost != NULL)
                return release_bad(out, "cost= twice");
            cost = text + eq + 1;
            cost_n = i - eq - 1;
        }
        /* Any other field is the front end's business. */
    }
    if (lease == NULL)
        return release_bad(out, "no lease= field");
    if (lease_n == 0 || (lease_n == 1 && lease[0] == '-')) {
        out->kind = RELEASE_LINE_NONE;
        return RELEASE_LINE_NONE;
    }
    if (!release_lease_ok(lease, lease_n))
        return release_bad(out, "a lease id of more than "
            RELEASE_STR(RELEASE_LEASE_MAX) " bytes or not of [A-Za-z0-9._:-]");
    memcpy(out->lease, lease, lease_n);
    out->lease[lease_n] = '\0';
    out->kind = RELEASE_LINE_LEASE;
    if (cost != NULL && cost_n > 0 && !(cost_n == 1 && cost[0] == '-') &&
        (out->cost = release_cost(cost, cost_n)) == -1)
        out->reason = "the cost is not a whole number from 0 to "
            RELEASE_STR(RL_COST_MAX) ": released without settling it";
    return RELEASE_LINE_LEASE;
}
