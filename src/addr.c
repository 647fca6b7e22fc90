/*
 * addr.c -- who the client is: for limits counted per client address,
 * and for status_allow and metrics_allow.
 *
 * The peer of a FastCGI request is the web server, which reports the
 * client in REMOTE_ADDR.  When that client is itself a proxy we trust
 * (trusted_proxies), the real client is in X-Forwarded-For: proxies append
 * to it, so we walk it from the right and take the first address that is
 * not one of our trusted proxies.  From anyone else the header is not
 * believed, since a client can write whatever it likes there; but it says
 * that REMOTE_ADDR may be a proxy, whose loopback address must not open
 * the operator's views to whoever it forwards.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ratelimit.h"

static int
addr_parse_one(const char *s, size_t len, struct addr_net *net)
{
    char buf[64];
    char *slash, *end;
    long prefix;
    int max;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    memset(net, 0, sizeof(*net));
    if ((slash = strchr(buf, '/')) != NULL)
        *slash = '\0';
    if (inet_pton(AF_INET, buf, net->addr) == 1) {
        net->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, buf, net->addr) == 1) {
        net->family = AF_INET6;
        max = 128;
    } else
        return -1;
    net->prefix = max;
    if (slash != NULL) {
        prefix = strtol(slash + 1, &end, 10);
        if (slash[1] == '\0' || *end != '\0' || prefix < 0 || prefix > max)
            return -1;
        net->prefix = (int)prefix;
    }
    return 0;
}

int
addr_parse_list(const char *s, struct addr_net *nets, int max, char *err,
    size_t errlen)
{
    const char *p = s, *start;
    int n = 0;

    for (;;) {
        while (*p == ',' || isspace((unsigned char)*p))
            p++;
        if (*p == '\0')
            return n;
        start = p;
        while (*p != '\0' && *p != ',' && !isspace((unsigned char)*p))
            p++;
        if (n == max) {
            snprintf(err, errlen, "more than %d entries",
                max);
            return -1;
        }
        if (addr_parse_one(start, (size_t)(p - start), &nets[n]) == -1) {
            snprintf(err, errlen, "\"%.*s\" is not an address or network",
                (int)(p - start), start);
            return -1;
        }
        n++;
    }
}

static int
addr_in(const struct addr_net *net, int family, const unsigned char *a)
{
    int full = net->prefix / 8, rest = net->prefix % 8;

    if (net->family != family)
        return 0;
    if (memcmp(net->addr, a, (size_t)full) != 0)
        return 0;
    if (rest == 0)
        return 1;
    return ((net->addr[full] ^ a[full]) & (0xff << (8 - rest)) & 0xff) == 0;
}

int
addr_match(const struct addr_net *nets, int n, const char *ip)
{
    unsigned char a[16];
    int family, i;

    if (ip == NULL)
        return 0;
    if (inet_pton(AF_INET, ip, a) == 1)
        family = AF_INET;
    else if (inet_pton(AF_INET6, ip, a) == 1) {
        family = AF_INET6;
        /* An IPv4-mapped address is matched as IPv4. */
        if (memcmp(a, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0) {
            memmove(a, a + 12, 4);
            family = AF_INET;
        }
    } else
        return 0;
    for (i = 0; i < n; i++)
        if (addr_in(&nets[i], family, a))
            return 1;
    return 0;
}

static void
addr_copy(char *out, size_t outlen, const char *s, size_t n)
{
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, s, n);
    out[n] = '\0';
}

/* 1 when s is an IPv4 or IPv6 address in text. */
static int
addr_valid(const char *s)
{
    unsigned char tmp[16];

    return inet_pton(AF_INET, s, tmp) == 1 || inet_pton(AF_INET6, s, tmp) == 1;
}

static int
addr_separator(char c)
{
    return c == ',' || isspace((unsigned char)c);
}

int
addr_client(const char *peer, const char *xff, const struct addr_net *nets,
    int n, char *out, size_t outlen)
{
    const char *end, *start;
    char one[64];

    addr_copy(out, outlen, peer ? peer : "", peer ? strlen(peer) : 0);
    if (xff == NULL)
        return 0;
    end = xff + strlen(xff);
    while (end > xff && addr_separator(end[-1]))
        end--;
    if (end == xff)
        return 0;               /* an empty header names no one */
    if (!addr_match(nets, n, peer))
        return -1;
    while (end > xff) {
        start = end;
        while (start > xff && !addr_separator(start[-1]))
            start--;
        if ((size_t)(end - start) >= sizeof(one))
            break;
        addr_copy(one, sizeof(one), start, (size_t)(end - start));
        /* Only a well-formed address may become the client. */
        if (!addr_valid(one))
            break;
        addr_copy(out, outlen, one, strlen(one));
        if (!addr_match(nets, n, one))
            return 0;
        while (start > xff && addr_separator(start[-1]))
            start--;
        end = start;
    }
    if (end == xff)
        return 0;               /* every hop trusted: the first is the client */
    addr_copy(out, outlen, peer, strlen(peer));
    return -1;
}
