/*
 * buf.c -- a growable byte buffer whose data is always NUL terminated:
 * the service and the admin tool build replies, JSON and SQL in it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

void
buf_init(struct rl_buf *b)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void
buf_free(struct rl_buf *b)
{
    free(b->data);
    buf_init(b);
}

void
buf_reset(struct rl_buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

static int
buf_reserve(struct rl_buf *b, size_t extra)
{
    size_t need = b->len + extra + 1, cap;
    char *p;

    if (need <= b->cap)
        return 0;
    cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    if ((p = realloc(b->data, cap)) == NULL)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

/* Appends n bytes.  Returns 0, or -1 when out of memory. */
int
buf_append(struct rl_buf *b, const char *s, size_t n)
{
    if (buf_reserve(b, n) == -1)
        return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int
buf_puts(struct rl_buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int
buf_put_ll(struct rl_buf *b, long long v)
{
    char digits[21];
    size_t n = util_lltoa(v, digits);

    return buf_append(b, digits, n);
}

/* s as a JSON string, quotes included: '"', '\\' and control characters
 * escaped, everything else (UTF-8 included) as it is. */
int
buf_json_str(struct rl_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char esc[6] = { '\\', 'u', '0', '0', 0, 0 };
    const char *run = s;

    if (buf_append(b, "\"", 1) == -1)
        return -1;
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        if (buf_append(b, run, (size_t)(s - run)) == -1)
            return -1;
        if (c == '"' || c == '\\') {
            esc[1] = (char)c;
            if (buf_append(b, esc, 2) == -1)
                return -1;
        } else {
            esc[1] = 'u';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            if (buf_append(b, esc, 6) == -1)
                return -1;
        }
        run = s + 1;
    }
    if (buf_append(b, run, (size_t)(s - run)) == -1)
        return -1;
    return buf_append(b, "\"", 1);
}

int
buf_printf(struct rl_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n) == -1)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}
