/*
 * release.h -- the lines a web server logs at the end of a request so
 * that ratelimit-release frees the request's lease: their parser
 * (release_line.c, pure, unit-tested) and its bounds.
 *
 * A line is blank-separated NAME=VALUE fields, in any order:
 *     lease=ID [cost=N] [any other NAME=VALUE]
 * "lease=-" or "lease=" (the web server's "no value") is a request that
 * held no lease (no concurrency limit, denied, not asked), and so is a
 * missing cost: nothing to settle.  Before the fields may come an RFC
 * 3164 syslog header, "<PRI>Mmm dd hh:mm:ss [HOST ]TAG: ", as nginx's
 * access_log to syslog: sends it.
 */
#ifndef RL_RELEASE_H
#define RL_RELEASE_H

#include <stddef.h>

/* The longest line or datagram taken; a longer one is a bad line. */
#define RELEASE_LINE_MAX 2048
/* The longest lease id taken. */
#define RELEASE_LEASE_MAX 128

enum release_kind {
    RELEASE_LINE_LEASE = 0,     /* a lease to release (maybe a cost) */
    RELEASE_LINE_NONE,          /* the request held no lease */
    RELEASE_LINE_BAD            /* not a line of ours: see reason */
};

struct release_line {
    enum release_kind kind;
    char lease[RELEASE_LEASE_MAX + 1];  /* NUL-terminated, for _LEASE */
    long long cost;             /* the actual cost, or -1: none logged */
    /* Why the line is bad, or (kind _LEASE) why its cost was not read:
     * the lease is then released without a cost.  NULL otherwise. */
    const char *reason;
};

/*
 * Parses one line or datagram of len bytes (a trailing "\n" or "\r\n"
 * is ignored; text need not be NUL-terminated).  Fills out and returns
 * its kind.  Never reads past len.
 */
enum release_kind release_line_parse(const char *text, size_t len,
    struct release_line *out);

#endif /* RL_RELEASE_H */
