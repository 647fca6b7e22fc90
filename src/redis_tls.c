/*
 * redis_tls.c -- TLS under hiredis' protocol code, over OpenSSL's libssl.
 *
 * Debian 12's hiredis (0.14) has no TLS.  It still formats the commands
 * (redisAppendCommand... fill c->obuf) and parses the replies (the reader
 * in c->reader); only its I/O, redisBufferWrite and redisBufferRead on
 * c->fd, is plain.  So a TLS connection is a hiredis context connected
 * as usual, a handshake on its socket, and redis_tls_get_reply() in
 * place of redisGetReply(): SSL_write of c->obuf, SSL_read into
 * redisReaderFeed().  redis_node.c sends every command through one
 * wrapper that calls one or the other.
 *
 * Deadlines: the handshake runs with the socket non-blocking, each step
 * waited for with poll() until the deadline the caller gives (the
 * connect timeout, from before the TCP connect).  Then the socket is
 * blocking again, and the SO_RCVTIMEO and SO_SNDTIMEO that redisSetTimeout
 * set bound each SSL_read and SSL_write as they bound hiredis' read and
 * write: an expired one is a read or write failing with EAGAIN, which
 * OpenSSL reports as SSL_ERROR_WANT_READ or WANT_WRITE.
 *
 * Errors are reported as hiredis reports its own, in c->err and
 * c->errstr, with errno set, so that the callers tell a closed
 * connection (REDIS_ERR_EOF, or REDIS_ERR_IO with ECONNRESET or EPIPE) and
 * a timeout (REDIS_ERR_IO with EAGAIN) from other failures as they do
 * without TLS.  A failure of TLS itself (a certificate not verified, an
 * alert from the server, a handshake not finished in time) is
 * REDIS_ERR_OTHER, and its short reason, without addresses, is kept for
 * redis_tls_error(): /health/ready shows it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <hiredis/sds.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "redis_client.h"

struct redis_tls {
    SSL *ssl;
    int cert_asked;             /* the server asked for a client
                                   certificate and we have none */
    int has_cert;               /* a client certificate is configured */
    char why[144];              /* the TLS failure, "" when none */
};

/* The first error of OpenSSL's queue, as short text ("" when none); the
 * queue is emptied. */
static void
redis_tls_reason(char *out, size_t outlen)
{
    unsigned long e = ERR_get_error();
    const char *reason = e != 0 ? ERR_reason_error_string(e) : NULL;

    if (reason != NULL)
        snprintf(out, outlen, "%s", reason);
    else if (e != 0)
        snprintf(out, outlen, "error %lx", e);
    else
        out[0] = '\0';
    ERR_clear_error();
}

/* Called by OpenSSL when the server asks for a client certificate and
 * none is set: remembered, to say so should the server then refuse us. */
static int
redis_tls_cert_cb(SSL *ssl, X509 **x509, EVP_PKEY **pkey)
{
    struct redis_tls *t = SSL_get_app_data(ssl);

    (void)x509;
    (void)pkey;
    if (t != NULL)
        t->cert_asked = 1;
    return 0;
}

/* The TLS settings of cfg as an SSL_CTX, or NULL with the reason in
 * why. */
static SSL_CTX *
redis_tls_context(const struct rl_config *cfg, char *why, size_t whylen)
{
    char reason[64];
    const char *step;
    SSL_CTX *ctx;

    ERR_clear_error();
    if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
        step = "cannot make a TLS context";
        goto err;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* A server that closes without close_notify (a restart, a kill) is a
     * closed connection, as without TLS. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_mode(ctx, SSL_MODE_AUTO_RETRY);
    /* One read() for a record's header and body, not two: a check's
     * reply is one small record. */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (cfg->redis_tls_ca_file[0] != '\0') {
        step = "cannot load redis_tls_ca_file";
        if (SSL_CTX_load_verify_locations(ctx, cfg->redis_tls_ca_file,
            NULL) != 1)
            goto err;
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        step = "cannot load the system's CA store";
        goto err;
    }
    if (cfg->redis_tls_cert_file[0] != '\0') {
        step = "cannot load redis_tls_cert_file";
        if (SSL_CTX_use_certificate_chain_file(ctx,
            cfg->redis_tls_cert_file) != 1)
            goto err;
        step = "cannot load redis_tls_key_file";
        if (SSL_CTX_use_PrivateKey_file(ctx, cfg->redis_tls_key_file,
            SSL_FILETYPE_PEM) != 1)
            goto err;
        step = "redis_tls_key_file is not the key of redis_tls_cert_file";
        if (SSL_CTX_check_private_key(ctx) != 1)
            goto err;
    } else
        SSL_CTX_set_client_cert_cb(ctx, redis_tls_cert_cb);
    SSL_CTX_set_verify(ctx, strcmp(cfg->redis_tls_verify, "off") == 0 ?
        SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
    return ctx;
err:
    redis_tls_reason(reason, sizeof(reason));
    snprintf(why, whylen, "%s%s%s%s", step, reason[0] ? " (" : "", reason,
        reason[0] ? ")" : "");
    SSL_CTX_free(ctx);
    return NULL;
}

void
redis_tls_context_free(void *ctx)
{
    SSL_CTX_free(ctx);
}

/* Sets c's error as hiredis does (err, errstr), with errno. */
static void
redis_tls_set_error(redisContext *c, int type, const char *text, int err)
{
    c->err = type;
    util_copy(c->errstr, sizeof(c->errstr), text);
    errno = err;
}

/* A TLS failure of t on c: its reason kept, c failed. */
static void
redis_tls_fail(struct redis_tls *t, redisContext *c, const char *fmt,
    const char *detail)
{
    snprintf(t->why, sizeof(t->why), fmt, detail);
    redis_tls_set_error(c, REDIS_ERR_OTHER, t->why, EPROTO);
}

/* The reason of a handshake that failed with SSL error e. */
static void
redis_tls_handshake_failed(struct redis_tls *t, redisContext *c, int e,
    int err)
{
    char reason[96];
    long v = SSL_get_verify_result(t->ssl);

    redis_tls_reason(reason, sizeof(reason));
    /* (Without verification the result is kept, but it is no reason.) */
    if (v != X509_V_OK && (SSL_get_verify_mode(t->ssl) & SSL_VERIFY_PEER))
        redis_tls_fail(t, c, "certificate verify failed (%s)",
            X509_verify_cert_error_string(v));
    else if (e == SSL_ERROR_SSL && reason[0] != '\0')
        redis_tls_fail(t, c, "handshake failed (%s)", reason);
    else if (err != 0 && err != EAGAIN)
        redis_tls_fail(t, c, "handshake failed (%s)", strerror(err));
    else
        redis_tls_fail(t, c, "%s", "the server closed the connection "
            "during the handshake");
}

/* Whether s is an IPv4 or IPv6 address, written as numbers. */
static int
redis_tls_is_ip(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];

    return inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1;
}

struct redis_tls *
redis_tls_start(void **ctxp, const struct rl_config *cfg, redisContext *c,
    const char *server_name, int64_t deadline_ms)
{
    int verify = strcmp(cfg->redis_tls_verify, "off") != 0;
    struct redis_tls *t;
    struct pollfd pfd;
    int flags, rc, e, err;
    int64_t left;

    if ((t = calloc(1, sizeof(*t))) == NULL)
        return NULL;
    t->has_cert = cfg->redis_tls_cert_file[0] != '\0';
    if (*ctxp == NULL &&
        (*ctxp = redis_tls_context(cfg, t->why, sizeof(t->why))) == NULL) {
        redis_tls_set_error(c, REDIS_ERR_OTHER, t->why, EPROTO);
        return t;
    }
    ERR_clear_error();
    if ((t->ssl = SSL_new(*ctxp)) == NULL ||
        SSL_set_fd(t->ssl, c->fd) != 1) {
        redis_tls_fail(t, c, "%s", "cannot start TLS");
        return t;
    }
    SSL_set_app_data(t->ssl, t);
    /* SNI is a host name, never an address (RFC 6066); an address is
     * verified as one, against the certificate's IP entries. */
    if (server_name[0] != '\0' && !redis_tls_is_ip(server_name))
        SSL_set_tlsext_host_name(t->ssl, server_name);
    if (verify && server_name[0] != '\0') {
        if (redis_tls_is_ip(server_name))
            rc = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl),
                server_name);
        else
            rc = SSL_set1_host(t->ssl, server_name);
        if (rc != 1) {
            redis_tls_fail(t, c, "%s", "cannot set the name to verify");
            return t;
        }
    }
    if ((flags = fcntl(c->fd, F_GETFL)) == -1 ||
        fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) == -1) {
        redis_tls_set_error(c, REDIS_ERR_IO, strerror(errno), errno);
        return t;
    }
    for (;;) {
        ERR_clear_error();
        errno = 0;
        if ((rc = SSL_connect(t->ssl)) == 1)
            break;
        err = errno;
        e = SSL_get_error(t->ssl, rc);
        if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) {
            redis_tls_handshake_failed(t, c, e, err);
            return t;
        }
        left = deadline_ms - util_now_ms();
        pfd.fd = c->fd;
        pfd.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
        pfd.revents = 0;
        if (left <= 0 || (rc = poll(&pfd, 1, (int)left)) == 0) {
            redis_tls_fail(t, c, "%s", "handshake timed out");
            return t;
        }
        if (rc == -1 && errno != EINTR) {
            redis_tls_set_error(c, REDIS_ERR_IO, strerror(errno), errno);
            return t;
        }
    }
    if (fcntl(c->fd, F_SETFL, flags) == -1) {
        redis_tls_set_error(c, REDIS_ERR_IO, strerror(errno), errno);
        return t;
    }
    return t;
}

const char *
redis_tls_error(const struct redis_tls *t)
{
    return t != NULL ? t->why : "";
}

void
redis_tls_free(struct redis_tls *t)
{
    if (t == NULL)
        return;
    if (t->ssl != NULL)
        SSL_free(t->ssl);
    free(t);
}

/* Records why SSL_read or SSL_write (returning rc) failed, in hiredis'
 * terms: a closed connection, a timeout, an I/O error or a TLS one. */
static void
redis_tls_io_failed(struct redis_tls *t, redisContext *c, int rc)
{
    char reason[96];
    int err = errno, e = SSL_get_error(t->ssl, rc);

    redis_tls_reason(reason, sizeof(reason));
    if (t->cert_asked && !t->has_cert && e != SSL_ERROR_WANT_READ &&
        e != SSL_ERROR_WANT_WRITE) {
        /* TLS 1.3: the server checks the client's certificate after the
         * client's handshake is done, and says no to its first read. */
        redis_tls_fail(t, c, "%s", "the server wants a client certificate "
            "(redis_tls_cert_file)");
        return;
    }
    switch (e) {
    case SSL_ERROR_ZERO_RETURN:
        redis_tls_set_error(c, REDIS_ERR_EOF, "Server closed the connection",
            0);
        return;
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
        /* SO_RCVTIMEO or SO_SNDTIMEO expired on the blocking socket. */
        redis_tls_set_error(c, REDIS_ERR_IO, strerror(EAGAIN), EAGAIN);
        return;
    case SSL_ERROR_SYSCALL:
        if (err == 0)
            redis_tls_set_error(c, REDIS_ERR_EOF, "Server closed the "
                "connection", 0);
        else
            redis_tls_set_error(c, REDIS_ERR_IO, strerror(err), err);
        return;
    default:
        redis_tls_fail(t, c, "%s", reason[0] ? reason : "TLS error");
        return;
    }
}

int
redis_tls_get_reply(struct redis_tls *t, redisContext *c, void **reply)
{
    char buf[16 * 1024];
    void *r = NULL;
    size_t len;
    int n;

    if (c->err)
        return REDIS_ERR;
    if (redisGetReplyFromReader(c, &r) != REDIS_OK)
        return REDIS_ERR;
    if (r != NULL) {
        *reply = r;
        return REDIS_OK;
    }
    while ((len = sdslen(c->obuf)) > 0) {
        ERR_clear_error();
        errno = 0;
        n = SSL_write(t->ssl, c->obuf, len > INT32_MAX ? INT32_MAX :
            (int)len);
        if (n <= 0) {
            redis_tls_io_failed(t, c, n);
            return REDIS_ERR;
        }
        sdsrange(c->obuf, n, -1);
    }
    do {
        ERR_clear_error();
        errno = 0;
        n = SSL_read(t->ssl, buf, sizeof(buf));
        if (n <= 0) {
            redis_tls_io_failed(t, c, n);
            return REDIS_ERR;
        }
        if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK ||
            redisGetReplyFromReader(c, &r) != REDIS_OK) {
            if (!c->err)
                redis_tls_set_error(c, REDIS_ERR_PROTOCOL, "Protocol error",
                    EPROTO);
            return REDIS_ERR;
        }
    } while (r == NULL);
    *reply = r;
    return REDIS_OK;
}
