/*
 * cluster.c -- the pure parts of talking to a Redis Cluster: which of the
 * 16384 hash slots a key lives in, and what a redirection reply says.
 *
 * A key's slot is CRC16 (the XMODEM variant: polynomial 0x1021, initial
 * value 0, no reflection) of the key modulo 16384, where a key holding a
 * non-empty "{...}" hashes only what is between the first '{' and the
 * first '}' after it.  Every key of a check carries the tenant's id as
 * that tag (rl:{tenant}:...), so one check is one slot and one node.
 */
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

static unsigned
crc16(const unsigned char *p, size_t n)
{
    unsigned crc = 0;
    int bit;

    while (n-- > 0) {
        crc ^= (unsigned)*p++ << 8;
        for (bit = 0; bit < 8; bit++)
            crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1);
        crc &= 0xffff;
    }
    return crc;
}

unsigned
cluster_keyslot(const char *key, size_t len)
{
    const char *open, *close;

    if ((open = memchr(key, '{', len)) != NULL &&
        (close = memchr(open + 1, '}', len - (size_t)(open + 1 - key))) !=
        NULL && close > open + 1) {
        key = open + 1;
        len = (size_t)(close - key);
    }
    return crc16((const unsigned char *)key, len) & (CLUSTER_SLOTS - 1);
}

int
cluster_redirect(const char *msg, int *slot, char *addr, size_t addrlen)
{
    const char *p, *sp;
    char *end;
    long v;
    int kind;
    size_t n;

    if (strncmp(msg, "MOVED ", 6) == 0) {
        kind = CLUSTER_MOVED;
        p = msg + 6;
    } else if (strncmp(msg, "ASK ", 4) == 0) {
        kind = CLUSTER_ASK;
        p = msg + 4;
    } else
        return 0;
    v = strtol(p, &end, 10);
    if (end == p || *end != ' ' || v < 0 || v >= CLUSTER_SLOTS)
        return -1;
    p = end + 1;
    sp = strchr(p, ' ');
    n = sp != NULL ? (size_t)(sp - p) : strlen(p);
    /* "host:port"; Redis 7 may send ":port" for "the node you asked". */
    if (n == 0 || n >= addrlen || memchr(p, ':', n) == NULL)
        return -1;
    memcpy(addr, p, n);
    addr[n] = '\0';
    *slot = (int)v;
    return kind;
}
