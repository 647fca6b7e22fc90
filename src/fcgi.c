/*
 * fcgi.c -- the FastCGI records a worker reads ahead of libfcgi.
 *
 * libfcgi reads a request's BEGIN_REQUEST, PARAMS and STDIN records with
 * blocking reads and no deadline, and trusts the lengths it finds: a
 * PARAMS pair announcing two 2^30-byte lengths makes Debian's libfcgi
 * abort the process, an unknown management record leaks memory, and a
 * peer that sends half a record holds the worker for as long as it likes.
 *
 * So the worker looks first.  It peeks at the bytes waiting on the
 * connection (MSG_PEEK, which leaves them for libfcgi) and hands them to
 * fcgi_scan(), which walks the records without copying and says whether
 * the request is complete, still arriving, or unacceptable.  Only a
 * request whose records are all present and well formed is given to
 * libfcgi, whose reads then find everything in the socket buffer and
 * cannot block.  This file is pure: bytes in, verdict out.
 */
#include <string.h>

#include "ratelimit.h"

#define FCGI_HEADER_LEN 8
#define FCGI_VERSION_1 1
#define FCGI_BEGIN_REQUEST 1
#define FCGI_PARAMS 4
#define FCGI_STDIN 5
#define FCGI_DATA 8
#define FCGI_RESPONDER 1
#define FCGI_AUTHORIZER 2
#define FCGI_KEEP_CONN 1

struct fcgi_record {
    int type;
    int request_id;
    size_t content;             /* offset of the content in the buffer */
    size_t content_len;
    size_t total;               /* header + content + padding */
};

/* Reads the record header at off.  Returns 1 when the whole record is in
 * the buffer, 0 when more bytes are needed. */
static int
fcgi_record_at(const unsigned char *buf, size_t len, size_t off,
    struct fcgi_record *r, int *version_ok)
{
    const unsigned char *h = buf + off;

    if (len - off < FCGI_HEADER_LEN)
        return 0;
    *version_ok = h[0] == FCGI_VERSION_1;
    r->type = h[1];
    r->request_id = (h[2] << 8) | h[3];
    r->content_len = ((size_t)h[4] << 8) | h[5];
    r->content = off + FCGI_HEADER_LEN;
    r->total = FCGI_HEADER_LEN + r->content_len + h[6];
    return len - off >= r->total;
}

static int
fcgi_bad(struct fcgi_scan *s, const char *why)
{
    s->error = why;
    return FCGI_SCAN_BAD;
}

/*
 * A cursor over the content of consecutive PARAMS records: name-value
 * pairs may cross record boundaries, so the bytes are fetched through it.
 */
struct fcgi_cursor {
    const unsigned char *buf;
    size_t len;
    size_t rec;                 /* offset of the current record */
    size_t pos;                 /* next content byte */
    size_t left;                /* content bytes left in this record */
    size_t remaining;           /* content bytes left in all records */
};

static void
fcgi_cursor_next_record(struct fcgi_cursor *c)
{
    struct fcgi_record r;
    int v;

    while (c->left == 0 && c->remaining > 0) {
        /* The records were checked by the caller: whole and PARAMS. */
        fcgi_record_at(c->buf, c->len, c->rec, &r, &v);
        c->rec += r.total;
        if (fcgi_record_at(c->buf, c->len, c->rec, &r, &v) == 0)
            return;
        c->pos = r.content;
        c->left = r.content_len;
    }
}

static int
fcgi_cursor_byte(struct fcgi_cursor *c)
{
    if (c->remaining == 0)
        return -1;
    if (c->left == 0)
        fcgi_cursor_next_record(c);
    c->left--;
    c->remaining--;
    return c->buf[c->pos++];
}

/* Takes up to want bytes that lie together in the current record: *p
 * points at them and the count is returned (0 at the end of the
 * content).  Long names and values are walked a record's run at a time
 * rather than byte by byte. */
static size_t
fcgi_cursor_run(struct fcgi_cursor *c, size_t want, const unsigned char **p)
{
    size_t n;

    if (c->remaining == 0 || want == 0)
        return 0;
    if (c->left == 0)
        fcgi_cursor_next_record(c);
    n = want < c->left ? want : c->left;
    if (n > c->remaining)
        n = c->remaining;
    *p = c->buf + c->pos;
    c->pos += n;
    c->left -= n;
    c->remaining -= n;
    return n;
}

/* A pair length: one byte, or four with the high bit set.  -1 when the
 * content ends first. */
static long
fcgi_cursor_length(struct fcgi_cursor *c)
{
    int b = fcgi_cursor_byte(c), i;
    long n;

    if (b < 0 || (b & 0x80) == 0)
        return b;
    n = b & 0x7f;
    for (i = 0; i < 3; i++) {
        if ((b = fcgi_cursor_byte(c)) < 0)
            return -1;
        n = (n << 8) | b;
    }
    return n;
}

/*
 * Walks the name-value pairs of the PARAMS stream that starts with the
 * record at first and holds total content bytes so far; complete says
 * whether the empty PARAMS record has been seen.  Every announced length
 * must fit in what was sent (or, while the stream is still arriving, in
 * FCGI_PARAMS_MAX), so a pair announcing gigabytes is refused at once
 * rather than waited for; a NUL in a value is noted (libfcgi would cut the
 * value there).
 */
static int
fcgi_scan_params(const unsigned char *buf, size_t len, size_t first,
    size_t total, int complete, struct fcgi_scan *s)
{
    static const char key1[] = "HTTP_X_API_KEY",
        key2[] = "HTTP_AUTHORIZATION";
    struct fcgi_cursor c;
    struct fcgi_record r;
    char name[sizeof(key2)];
    const unsigned char *p = NULL;
    long nlen, vlen;
    size_t room, want, n, got;
    int v, is_key, maybe_key;

    memset(&c, 0, sizeof(c));
    c.buf = buf;
    c.len = len;
    c.rec = first;
    c.remaining = total;
    fcgi_record_at(buf, len, first, &r, &v);
    c.pos = r.content;
    c.left = r.content_len;
    while (c.remaining > 0) {
        if ((nlen = fcgi_cursor_length(&c)) < 0 ||
            (vlen = fcgi_cursor_length(&c)) < 0) {
            if (!complete)
                return FCGI_SCAN_MORE;
            return fcgi_bad(s, "a parameter's length is cut short");
        }
        /* What the rest of the stream holds, or may still hold. */
        room = complete ? c.remaining : FCGI_PARAMS_MAX - (total - c.remaining);
        if ((size_t)nlen > room || (size_t)vlen > room - (size_t)nlen)
            return fcgi_bad(s, "a parameter is longer than the PARAMS "
                "stream may be");
        if (nlen == 0)
            return fcgi_bad(s, "a parameter has an empty name");
        if ((size_t)(nlen + vlen) > c.remaining)
            return FCGI_SCAN_MORE;      /* the rest is still to come */
        s->nparams++;
        /* The name, kept only when it is as long as a key parameter's
         * (to tell those apart); then the value, searched for a NUL. */
        maybe_key = nlen == (long)sizeof(key1) - 1 ||
            nlen == (long)sizeof(key2) - 1;
        got = 0;
        for (want = (size_t)nlen; want > 0; want -= n) {
            if ((n = fcgi_cursor_run(&c, want, &p)) == 0)
                return fcgi_bad(s, "the PARAMS stream is cut short");
            if (maybe_key) {
                memcpy(name + got, p, n);
                got += n;
            }
        }
        name[got] = '\0';
        is_key = maybe_key && (strcmp(name, key1) == 0 ||
            strcmp(name, key2) == 0);
        for (want = (size_t)vlen; want > 0; want -= n) {
            if ((n = fcgi_cursor_run(&c, want, &p)) == 0)
                return fcgi_bad(s, "the PARAMS stream is cut short");
            if (memchr(p, 0, n) != NULL) {
                if (is_key)
                    s->nul_in_key = 1;
                else
                    s->nul_in_value = 1;
            }
        }
    }
    return FCGI_SCAN_DONE;
}

int
fcgi_scan(const unsigned char *buf, size_t len, int want_stdin,
    struct fcgi_scan *s)
{
    struct fcgi_record r, next;
    size_t off = 0, params_first = 0;
    int version_ok, rc;
    enum { BEGIN, PARAMS, STDIN } state = BEGIN;

    memset(s, 0, sizeof(*s));
    while (off < len) {
        if (!fcgi_record_at(buf, len, off, &r, &version_ok)) {
            if (len - off >= FCGI_HEADER_LEN && !version_ok)
                return fcgi_bad(s, "not a FastCGI version 1 record");
            if (len - off >= FCGI_HEADER_LEN && r.request_id == 0)
                return fcgi_bad(s, "management records are not accepted");
            return FCGI_SCAN_MORE;
        }
        if (!version_ok)
            return fcgi_bad(s, "not a FastCGI version 1 record");
        if (r.request_id == 0)
            return fcgi_bad(s, "management records are not accepted");
        switch (state) {
        case BEGIN:
            if (r.type == FCGI_STDIN || r.type == FCGI_DATA) {
                /* The rest of an earlier request's input on a kept
                 * connection: the caller reads it off and scans again. */
                s->skip = off + r.total;
                off += r.total;
                continue;
            }
            if (s->skip > 0)
                return FCGI_SCAN_MORE;
            if (r.type != FCGI_BEGIN_REQUEST || r.content_len != 8)
                return fcgi_bad(s, "the first record is not BEGIN_REQUEST");
            s->request_id = r.request_id;
            s->role = (buf[r.content] << 8) | buf[r.content + 1];
            s->keep_conn = (buf[r.content + 2] & FCGI_KEEP_CONN) != 0;
            if (s->role != FCGI_RESPONDER && s->role != FCGI_AUTHORIZER)
                return fcgi_bad(s, "only the Responder and Authorizer roles "
                    "are served");
            state = PARAMS;
            params_first = off + r.total;
            break;
        case PARAMS:
            if (r.request_id != s->request_id)
                return fcgi_bad(s, "records of another request interleaved");
            if (r.type != FCGI_PARAMS)
                return fcgi_bad(s, "PARAMS expected");
            if (r.content_len == 0) {
                s->nparams = s->nul_in_key = s->nul_in_value = 0;
                if (s->params_len > 0 && (rc = fcgi_scan_params(buf, len,
                    params_first, s->params_len, 1, s)) != FCGI_SCAN_DONE)
                    return rc;
                s->params_end = off + r.total;
                if (!want_stdin || s->role != FCGI_RESPONDER)
                    return FCGI_SCAN_DONE;
                state = STDIN;
                break;
            }
            s->params_len += r.content_len;
            if (s->params_len > FCGI_PARAMS_MAX)
                return fcgi_bad(s, "the parameters are larger than the "
                    "limit");
            /* Judge the pairs so far: an impossible length is refused
             * now, not after the read deadline. */
            if (fcgi_record_at(buf, len, off + r.total, &next, &version_ok) ==
                0 && fcgi_scan_params(buf, len, params_first,
                s->params_len, 0, s) == FCGI_SCAN_BAD)
                return FCGI_SCAN_BAD;
            break;
        case STDIN:
            if (r.request_id != s->request_id)
                return fcgi_bad(s, "records of another request interleaved");
            if (r.type != FCGI_STDIN)
                return fcgi_bad(s, "STDIN expected");
            if (r.content_len == 0) {
                s->stdin_end = off + r.total;
                return FCGI_SCAN_DONE;
            }
            s->stdin_len += r.content_len;
            break;
        }
        off += r.total;
    }
    return FCGI_SCAN_MORE;
}
