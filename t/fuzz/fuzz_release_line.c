/*
 * fuzz_release_line.c -- release_line_parse() on any bytes, as a web
 * server (or anyone who can write to the reader's socket or pipe) hands
 * ratelimit-release a line.
 *
 * The input is copied to a heap block of exactly its size, so that a read
 * past the length is caught.  Promises checked: the kind is one of the
 * three; a lease is NUL-terminated, 1 to RELEASE_LEASE_MAX bytes of
 * [A-Za-z0-9._:-], and found in the input; a cost is -1 or 0 to
 * RL_COST_MAX, and a bad line has a reason, no lease and no cost.
 */
#define _GNU_SOURCE             /* memmem */
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"
#include "release.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct release_line l;
    enum release_kind k;
    char *in;
    size_t n, i;

    if ((in = malloc(size > 0 ? size : 1)) == NULL)
        return 0;
    if (size > 0)
        memcpy(in, data, size);
    k = release_line_parse(in, size, &l);
    fuzz_assert(k == RELEASE_LINE_LEASE || k == RELEASE_LINE_NONE ||
        k == RELEASE_LINE_BAD);
    fuzz_assert(k == l.kind);
    fuzz_assert(l.cost >= -1 && l.cost <= RL_COST_MAX);
    if (k == RELEASE_LINE_BAD) {
        fuzz_assert(l.reason != NULL);
        fuzz_assert(l.lease[0] == '\0' && l.cost == -1);
    }
    if (k == RELEASE_LINE_LEASE) {
        n = strnlen(l.lease, sizeof(l.lease));
        fuzz_assert(n >= 1 && n <= RELEASE_LEASE_MAX);
        for (i = 0; i < n; i++)
            fuzz_assert(strchr("abcdefghijklmnopqrstuvwxyz"
                "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-", l.lease[i]) !=
                NULL && l.lease[i] != '\0');
        fuzz_assert(memmem(in, size, l.lease, n) != NULL);
    }
    free(in);
    return 0;
}
