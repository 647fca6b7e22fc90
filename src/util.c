/*
 * util.c -- small helpers shared by the service and the admin tool:
 * SHA-256 and hex, bounded string copies, host:port splitting, clocks and
 * the OS random generator.  The growable buffer is in buf.c.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "ratelimit.h"

/*
 * OpenSSL 3's SHA256() looks the algorithm up and allocates a context on
 * every call, which costs several times the hashing of a short string; a
 * check hashes four or five.  So the algorithm and one context are made
 * once per process and reused (a process hashes one thing at a time).
 * Should either fail, SHA256() still gives the same digest.
 */
void
util_sha256(const void *data, size_t len, unsigned char out[32])
{
    static EVP_MD *md;
    static EVP_MD_CTX *ctx;
    static int broken;

    if (md == NULL && !broken) {
        md = EVP_MD_fetch(NULL, "SHA256", NULL);
        ctx = EVP_MD_CTX_new();
        if (md == NULL || ctx == NULL) {
            EVP_MD_free(md);
            EVP_MD_CTX_free(ctx);
            md = NULL;
            ctx = NULL;
            broken = 1;
        }
    }
    if (md != NULL && EVP_DigestInit_ex2(ctx, md, NULL) == 1 &&
        EVP_DigestUpdate(ctx, data, len) == 1 &&
        EVP_DigestFinal_ex(ctx, out, NULL) == 1)
        return;
    SHA256(data, len, out);
}

void
util_sha256_memo(struct sha256_memo *m, const void *data, size_t len,
    unsigned char out[32])
{
    if (m->valid && m->len == len && memcmp(m->in, data, len) == 0) {
        memcpy(out, m->out, 32);
        return;
    }
    util_sha256(data, len, out);
    m->valid = len <= sizeof(m->in);
    if (m->valid) {
        memcpy(m->in, data, len);
        m->len = len;
        memcpy(m->out, out, 32);
    }
}

double
util_be_double(const unsigned char *p)
{
    uint64_t u = 0;
    double d;
    int k;

    for (k = 0; k < 8; k++)
        u = u << 8 | p[k];
    memcpy(&d, &u, sizeof(d));
    return d;
}

void
util_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[SHA256_DIGEST_LENGTH];

    util_sha256(data, len, md);
    util_hex(md, sizeof(md), out);
}

/*
 * A check formats some twenty numbers (the counters' keys, the command's
 * argument lengths), most of one or two digits: the length is found by
 * comparisons, and the digits are written from the end two at a time, so
 * a number of d digits costs d / 2 divisions and nothing is reversed.
 */
size_t
util_lltoa(long long v, char out[21])
{
    static const char pairs[] =
        "00010203040506070809101112131415161718192021222324252627282930"
        "31323334353637383940414243444546474849505152535455565758596061"
        "6263646566676869707172737475767778798081828384858687888990919293"
        "949596979899";
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v :
        (unsigned long long)v, p = 10;
    size_t n = 1, len, i;
    unsigned d;

    /* 10^19 is the last power of ten below 2^64: u has 20 digits at most. */
    while (n < 20 && u >= p) {
        n++;
        p *= 10;
    }
    len = (v < 0) + n;
    i = len;
    out[i] = '\0';
    while (u >= 100) {
        d = (unsigned)(u % 100) * 2;
        u /= 100;
        out[--i] = pairs[d + 1];
        out[--i] = pairs[d];
    }
    if (u >= 10) {
        d = (unsigned)u * 2;
        out[--i] = pairs[d + 1];
        out[--i] = pairs[d];
    } else
        out[--i] = (char)('0' + u);
    if (v < 0)
        out[0] = '-';
    return len;
}

void
util_hex(const void *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = in;
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[p[i] >> 4];
        out[2 * i + 1] = hex[p[i] & 15];
    }
    out[2 * n] = '\0';
}

size_t
util_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), i, j;
    size_t row[64], prev, up;

    if (la > 63 || lb > 63)
        return SIZE_MAX;
    for (j = 0; j <= lb; j++)
        row[j] = j;
    for (i = 1; i <= la; i++) {
        prev = row[0];
        row[0] = i;
        for (j = 1; j <= lb; j++) {
            up = row[j];
            row[j] = prev + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < row[j])
                row[j] = row[j - 1] + 1;
            if (up + 1 < row[j])
                row[j] = up + 1;
            prev = up;
        }
    }
    return row[lb];
}

int
util_hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int
util_unhex(const char *hex, size_t hexlen, void *out, size_t n)
{
    unsigned char *p = out;
    size_t i;
    int hi, lo;

    if (hexlen != 2 * n)
        return -1;
    for (i = 0; i < n; i++) {
        if ((hi = util_hex_digit((unsigned char)hex[2 * i])) < 0 ||
            (lo = util_hex_digit((unsigned char)hex[2 * i + 1])) < 0)
            return -1;
        p[i] = (unsigned char)(hi << 4 | lo);
    }
    return 0;
}

int64_t
util_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int
util_is_dir(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int64_t
util_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t
util_wall_s(void)
{
    return (int64_t)time(NULL);
}

int
util_random(void *out, size_t n)
{
    unsigned char *p = out;
    ssize_t r;

    while (n > 0) {
        r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

size_t
util_copy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);

    if (size == 0)
        return n;
    if (n >= size) {
        memcpy(dst, src, size - 1);
        dst[size - 1] = '\0';
    } else
        memcpy(dst, src, n + 1);
    return n;
}

int
util_split_list(const char *list, char (*out)[RL_REDIS_ADDR_MAX], int max)
{
    const char *p = list, *e, *end;
    int n = 0;

    while (*p != '\0') {
        if ((end = strchr(p, ',')) == NULL)
            end = p + strlen(p);
        e = end;
        while (p < e && isspace((unsigned char)*p))
            p++;
        while (e > p && isspace((unsigned char)e[-1]))
            e--;
        if (e > p) {
            if (n == max || (size_t)(e - p) >= RL_REDIS_ADDR_MAX)
                return -1;
            memcpy(out[n], p, (size_t)(e - p));
            out[n][e - p] = '\0';
            n++;
        }
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

int
util_split_hostport(const char *addr, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(addr, ':'), *h = addr;
    size_t n;
    char *end;
    long p;

    if (colon == NULL || colon == addr || colon[1] == '\0')
        return -1;
    n = (size_t)(colon - addr);
    if (addr[0] == '[') {
        /* [::1]:6379 */
        if (n < 3 || colon[-1] != ']')
            return -1;
        h++;
        n -= 2;
    } else if (memchr(addr, ':', n) != NULL)
        return -1;              /* an IPv6 address without brackets */
    errno = 0;
    p = strtol(colon + 1, &end, 10);
    if (errno != 0 || *end != '\0' || p < 1 || p > 65535 || n >= hostlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = (int)p;
    return 0;
}

/*
 * Escapes for text that must stay on one line: a log line, a field of
 * /status.  The bytes a request can carry below 0x20 and 0x7f would end
 * the line or move the cursor; the backslash is doubled, so that an
 * escape the request wrote itself is not mistaken for one made here.
 */
size_t
util_escape_char(unsigned char c, char out[5])
{
    static const char hex[] = "0123456789abcdef";

    switch (c) {
    case '\t':
        memcpy(out, "\\t", 3);
        return 2;
    case '\n':
        memcpy(out, "\\n", 3);
        return 2;
    case '\r':
        memcpy(out, "\\r", 3);
        return 2;
    case '\\':
        memcpy(out, "\\\\", 3);
        return 2;
    }
    if (c >= 0x20 && c != 0x7f) {
        out[0] = '\0';
        return 0;
    }
    out[0] = '\\';
    out[1] = 'x';
    out[2] = hex[c >> 4];
    out[3] = hex[c & 15];
    out[4] = '\0';
    return 4;
}

size_t
util_escape(char *out, size_t size, const char *s, size_t len)
{
    char esc[5];
    size_t i, j, k, n = 0, need = 0, room;

    if (size == 0)
        return 0;
    for (i = 0; i < len; i++) {
        k = util_escape_char((unsigned char)s[i], esc);
        need += k > 0 ? k : 1;
    }
    /* Everything, or what fits before "..." (nothing when even that does
     * not fit). */
    room = need < size ? need : size >= 4 ? size - 4 : 0;
    for (i = 0; i < len; i++) {
        k = util_escape_char((unsigned char)s[i], esc);
        if (n + (k > 0 ? k : 1) > room)
            break;
        if (k > 0) {
            memcpy(out + n, esc, k);
            n += k;
        } else
            out[n++] = s[i];
    }
    if (i < len) {
        /* Not inside a UTF-8 sequence: its bytes went out as they are. */
        j = i;
        while (j > 0 && i - j < 3 && ((unsigned char)s[j] & 0xc0) == 0x80)
            j--;
        if (((unsigned char)s[i] & 0xc0) == 0x80 &&
            ((unsigned char)s[j] & 0xc0) == 0xc0)
            n -= i - j;
        if (size >= 4) {
            memcpy(out + n, "...", 3);
            n += 3;
        }
    }
    out[n] = '\0';
    return n;
}
