/*
 * fuzz_check_body.c -- request_parse_check() on any bytes, as the worker
 * hands it a request body.
 *
 * Promises checked: a refusal gives a reason; an accepted body gives a
 * route of 1 to 512 bytes without a NUL or surrounding white space, a
 * subject of at most 256 bytes, a cost from 1 to 1000000 and peek 0 or 1,
 * and it contains no raw control character inside a JSON string.  And the
 * answer is json-c's (request_parse_check_json): a body the fast path
 * reads means the same to json-c.
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "ratelimit.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct check_request req, slow;
    char err[256], err2[256], *body;
    size_t n, i;
    int rc, in_string = 0;

    /* A copy of exactly size bytes, so that reading past it is caught. */
    if ((body = malloc(size > 0 ? size : 1)) == NULL)
        return 0;
    memcpy(body, data, size);
    err[0] = '\0';
    rc = request_parse_check(body, size, &req, err, sizeof(err));
    fuzz_assert(rc == 0 || rc == -1);
    err2[0] = '\0';
    fuzz_assert(request_parse_check_json(body, size, &slow, err2,
        sizeof(err2)) == rc);
    fuzz_assert(rc == 0 ? strcmp(req.route, slow.route) == 0 &&
        strcmp(req.subject, slow.subject) == 0 &&
        req.has_subject == slow.has_subject && req.cost == slow.cost &&
        req.peek == slow.peek : strcmp(err, err2) == 0);
    if (rc == -1) {
        fuzz_assert(err[0] != '\0' && strlen(err) < sizeof(err));
        free(body);
        return 0;
    }
    n = strlen(req.route);
    fuzz_assert(n >= 1 && n <= RL_ROUTE_MAX);
    fuzz_assert(!isspace((unsigned char)req.route[0]));
    fuzz_assert(!isspace((unsigned char)req.route[n - 1]));
    fuzz_assert(strlen(req.subject) <= RL_SUBJECT_MAX);
    fuzz_assert(req.has_subject == (req.subject[0] != '\0'));
    fuzz_assert(req.cost >= 1 && req.cost <= RL_COST_MAX);
    fuzz_assert(req.peek == 0 || req.peek == 1);
    for (i = 0; i < size; i++) {
        unsigned char c = (unsigned char)data[i];

        if (!in_string)
            in_string = c == '"';
        else if (c == '\\')
            i++;
        else if (c == '"')
            in_string = 0;
        else
            fuzz_assert(c >= 0x20);
    }
    free(body);
    return 0;
}
