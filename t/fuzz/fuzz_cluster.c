/*
 * fuzz_cluster.c -- cluster_redirect() on any error reply, and
 * cluster_keyslot() and util_split_list() on the same bytes.
 *
 * The input, NUL-terminated in a heap block of its exact size, is read as
 * a Redis error reply, as a key and as the "redis" key's list.  Promises
 * checked: a redirection has a slot below 16384 and a NUL-terminated
 * address that fits and holds a ':'; a key's slot is below 16384 and the
 * same as that of its hash tag alone; a list gives at most its maximum of
 * non-empty items without blanks at either end.
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char addr[24], list[4][RL_REDIS_ADDR_MAX];
    const char *open, *close;
    char *s = malloc(size + 1);
    unsigned slot;
    int kind, at = -1, n, i;
    size_t len;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    kind = cluster_redirect(s, &at, addr, sizeof(addr));
    fuzz_assert(kind >= -1 && kind <= CLUSTER_ASK);
    if (kind > 0) {
        fuzz_assert(at >= 0 && at < CLUSTER_SLOTS);
        fuzz_assert(strlen(addr) < sizeof(addr));
        fuzz_assert(strchr(addr, ':') != NULL);
    }
    slot = cluster_keyslot((const char *)data, size);
    fuzz_assert(slot < CLUSTER_SLOTS);
    open = memchr(data, '{', size);
    if (open != NULL) {
        close = memchr(open + 1, '}', size - (size_t)(open + 1 -
            (const char *)data));
        if (close != NULL && close > open + 1)
            fuzz_assert(slot == cluster_keyslot(open + 1,
                (size_t)(close - open - 1)));
    }
    n = util_split_list(s, list, 4);
    fuzz_assert(n >= -1 && n <= 4);
    for (i = 0; i < n; i++) {
        len = strlen(list[i]);
        fuzz_assert(len > 0 && len < RL_REDIS_ADDR_MAX);
        fuzz_assert(!isspace((unsigned char)list[i][0]) &&
            !isspace((unsigned char)list[i][len - 1]));
        fuzz_assert(strchr(list[i], ',') == NULL);
    }
    free(s);
    return 0;
}
