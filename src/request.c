/*
 * request.c -- the check API's input: the JSON body and the API key.
 *
 * Bounds are those of the original Go service: the route is 1 to 512 bytes
 * after trimming white space, the subject at most 256 bytes, and the cost,
 * when given, a whole number from 1 to 1,000,000 (absent or null: 1);
 * "peek" and "reserve" (a lease for the cost, settled by its release)
 * are booleans.
 * Nothing here touches the network; the worker hands in the raw bytes it
 * read, already bounded by max_body_size.
 */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>

#include <json-c/json.h>

#include "ratelimit.h"

/* JSON nested deeper than this many levels is refused by the tokenizer
 * itself (json-c counts the limit as the first depth refused). */
#define REQUEST_JSON_DEPTH 8

/* The answers to a cost out of bounds (RL_COST_MAX). */
#define REQUEST_COST_LOW "\"cost\" must be at least 1 (a whole number from " \
    "1 to 1000000; leave it out to count 1)"
#define REQUEST_COST_HIGH "\"cost\" is larger than 1000000"

static int
fail(char *err, size_t errlen, const char *msg)
{
    snprintf(err, errlen, "%s", msg);
    return -1;
}

/*
 * 1 when a byte below 0x20 stands unescaped inside a string (a value or a
 * member name) of body, which must be valid JSON.  RFC 8259 forbids that,
 * but json-c takes it, even in strict mode; outside strings its strict
 * mode already refuses every control character but white space.
 */
static int
request_raw_control(const char *body, size_t len)
{
    size_t i;
    int in_string = 0;

    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];

        if (!in_string) {
            in_string = c == '"';
        } else if (c == '\\') {
            i++;
        } else if (c == '"') {
            in_string = 0;
        } else if (c < 0x20) {
            return 1;
        }
    }
    return 0;
}

/*
 * The fast path: a body that is one flat object whose member names and
 * string values are printable ASCII without escapes, whose numbers are
 * integers of at most 9 digits and whose other values are true, false and
 * null, and whose check fields are all valid, is read here in one pass
 * without json-c.  It is what clients send; a body like that means the
 * same to json-c, which reads anything else (and every body that is
 * invalid, to say why).  Returns 0 with out filled, or -1 when json-c must
 * decide.
 */

/* Past the JSON white space at p (json-c's strict mode takes no other
 * outside strings). */
static const char *
fast_space(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* A string that starts at p[0] == '"': its content is p[1 .. *n], and
 * the return is past its closing quote; NULL when it has a byte the fast
 * path leaves to json-c (an escape, a control byte, non-ASCII). */
static const char *
fast_string(const char *p, const char *end, size_t *n)
{
    const char *s = ++p;

    for (; p < end; p++) {
        unsigned char c = (unsigned char)*p;

        if (c == '"') {
            *n = (size_t)(p - s);
            return p + 1;
        }
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return NULL;
    }
    return NULL;
}

static int
request_fast_check(const char *body, size_t len, struct check_request *out)
{
    const char *p = body, *end = body + len, *name, *v, *s, *e;
    size_t nlen, vlen;
    int seen = 0, field;
    long long num;

    p = fast_space(p, end);
    if (p == end || *p++ != '{')
        return -1;
    /* Member after member ("{}" has no route: json-c says so). */
    for (;;) {
        if (p == end || *p != '"')
            return -1;
        name = p + 1;
        if ((p = fast_string(p, end, &nlen)) == NULL)
            return -1;
        p = fast_space(p, end);
        if (p == end || *p++ != ':')
            return -1;
        p = fast_space(p, end);
        if (p == end)
            return -1;
        /* 1 route, 2 subject, 4 cost, 8 peek, 16 reserve, 0 any other
         * name; a name given twice is left to json-c (the last one wins
         * there). */
        field = nlen == 5 && memcmp(name, "route", 5) == 0 ? 1 :
            nlen == 7 && memcmp(name, "subject", 7) == 0 ? 2 :
            nlen == 4 && memcmp(name, "cost", 4) == 0 ? 4 :
            nlen == 4 && memcmp(name, "peek", 4) == 0 ? 8 :
            nlen == 7 && memcmp(name, "reserve", 7) == 0 ? 16 : 0;
        if (field & seen)
            return -1;
        seen |= field;
        v = p;
        if (*p == '"') {
            if ((p = fast_string(p, end, &vlen)) == NULL)
                return -1;
            if (field == 1) {
                s = v + 1;
                e = s + vlen;
                while (s < e && *s == ' ')
                    s++;
                while (e > s && e[-1] == ' ')
                    e--;
                if (e == s || (size_t)(e - s) > RL_ROUTE_MAX)
                    return -1;
                memcpy(out->route, s, (size_t)(e - s));
                out->route[e - s] = '\0';
            } else if (field == 2) {
                if (vlen > RL_SUBJECT_MAX)
                    return -1;
                memcpy(out->subject, v + 1, vlen);
                out->subject[vlen] = '\0';
                out->has_subject = vlen > 0;
            } else if (field != 0)
                return -1;
        } else if (*p == '-' || (*p >= '0' && *p <= '9')) {
            s = p;
            if (*p == '-')
                p++;
            if (p == end || *p < '0' || *p > '9' ||
                (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9'))
                return -1;
            /* At most 9 digits: no overflow, and json-c's int. */
            for (num = 0; p < end && *p >= '0' && *p <= '9'; p++) {
                if (p - s >= 9 + (*s == '-'))
                    return -1;
                num = num * 10 + (*p - '0');
            }
            if (p < end && (*p == '.' || *p == 'e' || *p == 'E'))
                return -1;
            if (field == 4) {
                /* Not from 1 to RL_COST_MAX: json-c's path says why. */
                if (*s == '-' || num == 0 || num > RL_COST_MAX)
                    return -1;
                out->cost = num;
            } else if (field != 0)
                return -1;
        } else if ((size_t)(end - p) >= 4 && memcmp(p, "true", 4) == 0) {
            p += 4;
            if (field == 8)
                out->peek = 1;
            else if (field == 16)
                out->reserve = 1;
            else if (field != 0)
                return -1;
        } else if ((size_t)(end - p) >= 5 && memcmp(p, "false", 5) == 0) {
            p += 5;
            if (field != 8 && field != 16 && field != 0)
                return -1;
        } else if ((size_t)(end - p) >= 4 && memcmp(p, "null", 4) == 0) {
            p += 4;
            if (field == 1)
                return -1;
        } else
            return -1;
        p = fast_space(p, end);
        if (p == end)
            return -1;
        if (*p == '}') {
            p++;
            break;
        }
        if (*p++ != ',')
            return -1;
        p = fast_space(p, end);
    }
    p = fast_space(p, end);
    return p == end && (seen & 1) ? 0 : -1;
}

int
request_parse_check(const char *body, size_t len, struct check_request *out,
    char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    out->cost = 1;
    if (request_fast_check(body, len, out) == 0)
        return 0;
    return request_parse_check_json(body, len, out, err, errlen);
}

int
request_parse_check_json(const char *body, size_t len,
    struct check_request *out, char *err, size_t errlen)
{
    /* One tokener for the life of the process, reset for each body:
     * making one allocates its whole parse stack. */
    static struct json_tokener *tok;
    struct json_object *root = NULL, *v;
    const char *s, *e;
    size_t n;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    out->cost = 1;
    if (len == 0)
        return fail(err, errlen, "request body is empty");
    if (memchr(body, '\0', len) != NULL)
        return fail(err, errlen, "request body contains a NUL byte");
    if (tok == NULL) {
        if ((tok = json_tokener_new_ex(REQUEST_JSON_DEPTH + 1)) == NULL)
            return fail(err, errlen, "out of memory");
        /* Plain RFC 8259 only: no comments, single quotes, trailing
         * commas. */
        json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    } else
        json_tokener_reset(tok);
    root = json_tokener_parse_ex(tok, body, (int)len);
    if (root == NULL || json_tokener_get_error(tok) != json_tokener_success ||
        tok->char_offset != (int)len) {
        /* Trailing white space after the value is fine. */
        if (root != NULL) {
            size_t off = (size_t)tok->char_offset;

            while (off < len && isspace((unsigned char)body[off]))
                off++;
            if (off == len && json_tokener_get_error(tok) ==
                json_tokener_success)
                goto parsed;
        }
        fail(err, errlen, "request body is not valid JSON");
        /* A parse cut short can leave state in the tokener that
         * json_tokener_reset() keeps (json-c 0.16: half a \u surrogate
         * pair, which the next body's first \u escape then follows with
         * U+FFFD): the next body gets a new one. */
        json_tokener_free(tok);
        tok = NULL;
        goto out;
    }
parsed:
    if (request_raw_control(body, len)) {
        fail(err, errlen, "request body has a control character inside a "
            "JSON string (write it escaped, as \\u0000 to \\u001f)");
        goto out;
    }
    if (!json_object_is_type(root, json_type_object)) {
        fail(err, errlen, "request body must be a JSON object");
        goto out;
    }
    if (!json_object_object_get_ex(root, "route", &v) ||
        !json_object_is_type(v, json_type_string)) {
        fail(err, errlen, "\"route\" is required and must be a string");
        goto out;
    }
    s = json_object_get_string(v);
    n = (size_t)json_object_get_string_len(v);
    e = s + n;
    while (s < e && isspace((unsigned char)*s))
        s++;
    while (e > s && isspace((unsigned char)e[-1]))
        e--;
    if (e == s) {
        fail(err, errlen, "\"route\" must not be empty");
        goto out;
    }
    if ((size_t)(e - s) > RL_ROUTE_MAX) {
        fail(err, errlen, "\"route\" is longer than 512 bytes");
        goto out;
    }
    if (memchr(s, '\0', (size_t)(e - s)) != NULL) {
        fail(err, errlen, "\"route\" contains a NUL byte");
        goto out;
    }
    memcpy(out->route, s, (size_t)(e - s));
    out->route[e - s] = '\0';

    if (json_object_object_get_ex(root, "subject", &v) &&
        !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_string)) {
            fail(err, errlen, "\"subject\" must be a string");
            goto out;
        }
        n = (size_t)json_object_get_string_len(v);
        if (n > RL_SUBJECT_MAX) {
            fail(err, errlen, "\"subject\" is longer than 256 bytes");
            goto out;
        }
        memcpy(out->subject, json_object_get_string(v), n);
        out->subject[n] = '\0';
        if (strlen(out->subject) != n) {
            fail(err, errlen, "\"subject\" contains a NUL byte");
            goto out;
        }
        out->has_subject = n > 0;
    }

    /* A cost that is not a whole number from 1 to RL_COST_MAX is refused,
     * never counted as another: 0 or -3 used to count as 1. */
    if (json_object_object_get_ex(root, "cost", &v) &&
        !json_object_is_type(v, json_type_null)) {
        double d;

        if (json_object_is_type(v, json_type_int)) {
            int64_t c = json_object_get_int64(v);

            if (c < 1 || c > RL_COST_MAX) {
                fail(err, errlen, c < 1 ? REQUEST_COST_LOW :
                    REQUEST_COST_HIGH);
                goto out;
            }
            out->cost = c;
        } else if (json_object_is_type(v, json_type_double)) {
            d = json_object_get_double(v);
            if (!isfinite(d) || d != floor(d)) {
                fail(err, errlen, "\"cost\" must be a whole number from 1 "
                    "to 1000000");
                goto out;
            }
            if (d < 1 || d > RL_COST_MAX) {
                fail(err, errlen, d < 1 ? REQUEST_COST_LOW :
                    REQUEST_COST_HIGH);
                goto out;
            }
            out->cost = (long long)d;
        } else {
            fail(err, errlen, "\"cost\" must be a number: a whole number "
                "from 1 to 1000000");
            goto out;
        }
    }

    if (json_object_object_get_ex(root, "peek", &v) &&
        !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_boolean)) {
            fail(err, errlen, "\"peek\" must be true or false");
            goto out;
        }
        out->peek = json_object_get_boolean(v);
    }

    if (json_object_object_get_ex(root, "reserve", &v) &&
        !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_boolean)) {
            fail(err, errlen, "\"reserve\" must be true or false");
            goto out;
        }
        out->reserve = json_object_get_boolean(v);
    }
    rc = 0;
out:
    json_object_put(root);
    return rc;
}

int
request_api_key(const char *x_api_key, const char *authorization,
    const char **key)
{
    const char *k = NULL;
    size_t n;

    if (x_api_key != NULL && *x_api_key != '\0')
        k = x_api_key;
    else if (authorization != NULL &&
        strncasecmp(authorization, "Bearer ", 7) == 0) {
        k = authorization + 7;
        while (*k == ' ')
            k++;
    }
    if (k == NULL || *k == '\0')
        return 0;
    n = strlen(k);
    while (n > 0 && isspace((unsigned char)k[n - 1]))
        n--;
    if (n > RL_KEY_MAX)
        return -1;
    *key = k;
    return (int)n;
}

int
request_normalize_path(const char *path, size_t len, char *out,
    size_t outlen)
{
    size_t i, n = 0, seg;
    int hi, lo, c;

    if (len == 0 || path[0] != '/' || outlen < 2)
        return -1;
    /* Decode into out, merging slashes on the way. */
    for (i = 0; i < len; i++) {
        c = (unsigned char)path[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -1;
            hi = util_hex_digit((unsigned char)path[i + 1]);
            lo = util_hex_digit((unsigned char)path[i + 2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            i += 2;
            if (c == 0)
                return -1;
            if (c == '/') {
                /* An encoded slash is not a separator to the server. */
                if (n + 3 >= outlen)
                    return -1;
                memcpy(out + n, "%2F", 3);
                n += 3;
                continue;
            }
        } else if (c == '\0')
            return -1;
        if (c == '/' && n > 0 && out[n - 1] == '/')
            continue;
        if (n + 1 >= outlen)
            return -1;
        out[n++] = (char)c;
    }
    out[n] = '\0';

    /* Resolve "." and ".." segments in place (RFC 3986 5.2.4). */
    {
        size_t r = 0, w = 0;

        while (r < n) {
            /* out[r] is '/': look at the segment after it. */
            seg = r + 1;
            while (seg < n && out[seg] != '/')
                seg++;
            if (seg - r == 2 && out[r + 1] == '.') {
                if (seg == n)
                    out[w++] = '/';
            } else if (seg - r == 3 && out[r + 1] == '.' &&
                out[r + 2] == '.') {
                while (w > 0 && out[--w] != '/')
                    ;
                if (seg == n)
                    out[w++] = '/';
            } else {
                memmove(out + w, out + r, seg - r);
                w += seg - r;
            }
            r = seg;
        }
        if (w == 0)
            out[w++] = '/';
        out[w] = '\0';
        return (int)w;
    }
}
