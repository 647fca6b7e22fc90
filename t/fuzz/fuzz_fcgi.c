/*
 * fuzz_fcgi.c -- fcgi_scan() on any bytes, as a peer on the FastCGI socket
 * may send them.
 *
 * The input is scanned whole, with and without waiting for STDIN, from a
 * heap block of exactly its size (so a read past the end is caught).
 * Promises checked: a verdict is one of the three; a refusal says why;
 * "done" points inside the input at record boundaries it has accounted
 * for; and every shorter prefix of an input judged done is not judged done
 * with the same end (a request cannot complete before its last record).
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fcgi_scan s, t;
    unsigned char *buf;
    int rc, want;

    if ((buf = malloc(size > 0 ? size : 1)) == NULL)
        return 0;
    memcpy(buf, data, size);
    for (want = 0; want < 2; want++) {
        rc = fcgi_scan(buf, size, want, &s);
        fuzz_assert(rc == FCGI_SCAN_BAD || rc == FCGI_SCAN_MORE ||
            rc == FCGI_SCAN_DONE);
        if (rc == FCGI_SCAN_BAD)
            fuzz_assert(s.error != NULL && *s.error != '\0');
        if (rc == FCGI_SCAN_MORE)
            fuzz_assert(s.skip <= size);
        if (rc != FCGI_SCAN_DONE)
            continue;
        fuzz_assert(s.role == 1 || s.role == 2);
        fuzz_assert(s.request_id != 0);
        fuzz_assert(s.params_end > 0 && s.params_end <= size);
        fuzz_assert(s.params_len <= FCGI_PARAMS_MAX);
        if (s.stdin_end != 0)
            fuzz_assert(s.stdin_end > s.params_end && s.stdin_end <= size);
        /* One byte less can never complete the same request. */
        if (fcgi_scan(buf, (s.stdin_end ? s.stdin_end : s.params_end) - 1,
            want, &t) == FCGI_SCAN_DONE)
            fuzz_assert((t.stdin_end ? t.stdin_end : t.params_end) <
                (s.stdin_end ? s.stdin_end : s.params_end));
    }
    free(buf);
    return 0;
}
