/*
 * fuzz_api_key.c -- request_api_key() on any pair of header values.
 *
 * The first byte says which headers are present (bit 0: X-API-Key, bit 1:
 * Authorization); the rest, split at the first NUL, holds their values,
 * each copied to a heap block of its exact size.  Promises checked: the
 * result is -1, 0 or a length of at most RL_KEY_MAX, and a key lies wholly
 * inside one of the two values, without trailing white space.
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

/* A NUL-terminated heap copy of n bytes of p. */
static char *
fuzz_strndup(const uint8_t *p, size_t n)
{
    char *s = malloc(n + 1);

    if (s != NULL) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* 1 when [key, key + n) lies inside the string s. */
static int
fuzz_inside(const char *key, int n, const char *s)
{
    return s != NULL && key >= s && key + n <= s + strlen(s);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul;
    char *x = NULL, *auth = NULL;
    const char *key = NULL;
    size_t first;
    int n;

    if (size < 1)
        return 0;
    nul = memchr(data + 1, '\0', size - 1);
    first = nul != NULL ? (size_t)(nul - (data + 1)) : size - 1;
    if (data[0] & 1)
        x = fuzz_strndup(data + 1, first);
    if ((data[0] & 2) && nul != NULL)
        auth = fuzz_strndup(nul + 1, size - 1 - first - 1);
    n = request_api_key(x, auth, &key);
    fuzz_assert(n >= -1 && n <= RL_KEY_MAX);
    if (n > 0) {
        fuzz_assert(fuzz_inside(key, n, x) || fuzz_inside(key, n, auth));
        fuzz_assert(!isspace((unsigned char)key[n - 1]));
    }
    free(x);
    free(auth);
    return 0;
}
