/*
 * fuzz_path.c -- request_normalize_path() on any bytes, as a web server
 * hands the authorizer a request path.
 *
 * The first byte picks the size of the output buffer (a heap block of
 * exactly that size, so that writing past it is caught); the rest is the
 * path.  Promises checked: a result is its own length, begins with '/',
 * has no "//" and no "." or ".." segment, and, when it holds no '%' (which
 * a second decoding would change), normalizes to itself.
 */
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out, *again;
    size_t outlen;
    int n, m;

    if (size < 1)
        return 0;
    /* Mostly the size the service uses; sometimes a tiny one. */
    outlen = data[0] < 32 ? (size_t)data[0] : RL_ROUTE_MAX + 1;
    data++;
    size--;
    if ((out = malloc(outlen > 0 ? outlen : 1)) == NULL)
        return 0;
    n = request_normalize_path((const char *)data, size, out, outlen);
    if (n < 0) {
        free(out);
        return 0;
    }
    fuzz_assert((size_t)n < outlen);
    fuzz_assert(strlen(out) == (size_t)n);
    fuzz_assert(out[0] == '/');
    fuzz_assert(strstr(out, "//") == NULL);
    fuzz_assert(strstr(out, "/./") == NULL);
    fuzz_assert(strstr(out, "/../") == NULL);
    fuzz_assert(!(n >= 2 && strcmp(out + n - 2, "/.") == 0));
    fuzz_assert(!(n >= 3 && strcmp(out + n - 3, "/..") == 0));
    if (strchr(out, '%') == NULL) {
        if ((again = malloc(outlen)) != NULL) {
            m = request_normalize_path(out, (size_t)n, again, outlen);
            fuzz_assert(m == n && memcmp(again, out, (size_t)n + 1) == 0);
            free(again);
        }
    }
    free(out);
    return 0;
}
