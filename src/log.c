/*
 * log.c -- one line per event, to stderr, a file or syslog; and the access
 * log.
 *
 * Under a web server stderr is its error log (lighttpd and mod_fcgid pass
 * theirs to the process), so stderr is the default.  A file ("log =
 * /var/log/...") is opened in append mode onto fd 2, so that what else
 * writes to stderr lands there too, and opened again on SIGUSR1 after
 * logrotate moved it.  The access log (one line per check, formatted by
 * the caller) has a destination of its own, reopened alike.  Every line carries a
 * level; under stderr it also carries a UTC timestamp and the pid.  At
 * log_level = debug every line also names the source file and line that
 * emitted it.  When stderr is systemd's journal (JOURNAL_STREAM names the
 * device and inode of fd 2), a line starts with the sd-daemon priority
 * prefix ("<3>" error, "<4>" warn, "<6>" info, "<7>" debug) instead, and
 * carries neither time nor pid: the journal records both itself.  Control
 * bytes in a message are escaped (\n, \r, \xNN): a line is one event.
 * Callers never pass raw API keys here: only their SHA-256 prefix.
 *
 * A failure that hits every request (Redis out of memory, a dead server)
 * must not write a line per request: each call site (file and line) writes
 * at most one line per LOG_LIMIT_MS, and counts the rest.  The count is
 * reported with the site's next line, "(repeated N times)", or, when the
 * site has gone quiet, in a summary line written before the next line of
 * any site, and by log_flush().  Each process keeps its own table.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "ratelimit.h"

static int log_level = RL_LOG_INFO;
static int log_syslog;
static int log_journal;             /* stderr is the journal's stream */
static const char *log_ident = "ratelimit-fcgi";
static const char *const log_names[] = { "error", "warn", "info", "debug" };
static struct log_limit log_sites;
static char log_file[256];          /* the error log's file, or "" */
static char access_target[256];     /* "", "stderr", "syslog" or a file */
static int access_fd = -1;

/* Opens path for appending onto fd (or a new descriptor when fd is -1).
 * Returns the descriptor, or -1 with errno set. */
static int
log_open_onto(const char *path, int fd)
{
    int nfd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);

    if (nfd == -1 || fd == -1 || nfd == fd)
        return nfd;
    if (dup2(nfd, fd) == -1) {
        close(nfd);
        return -1;
    }
    close(nfd);
    return fd;
}

/* Whether fd 2 is the stream systemd's journal reads: JOURNAL_STREAM
 * ("DEVICE:INODE", set by systemd for StandardError=journal) names it.
 * A child that inherited the variable but writes its stderr elsewhere (a
 * file, a pipe) is not, which the device and inode tell. */
static int
log_stderr_is_journal(void)
{
    const char *v = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    char *end;

    if (v == NULL)
        return 0;
    errno = 0;
    dev = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != ':')
        return 0;
    v = end + 1;
    ino = strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0')
        return 0;
    if (fstat(STDERR_FILENO, &st) == -1)
        return 0;
    return (unsigned long long)st.st_dev == dev &&
        (unsigned long long)st.st_ino == ino;
}

int
log_init(const char *ident, const char *target, int level)
{
    log_ident = ident;
    log_level = level;
    log_syslog = target != NULL && strcmp(target, "syslog") == 0;
    if (log_syslog)
        openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
    log_file[0] = '\0';
    if (target != NULL && target[0] == '/') {
        if (log_open_onto(target, STDERR_FILENO) == -1) {
            fprintf(stderr, "ratelimit-fcgi: log %s: %s\n", target,
                strerror(errno));
            return -1;
        }
        snprintf(log_file, sizeof(log_file), "%s", target);
    }
    /* A log file is opened onto fd 2, so it is never the journal's. */
    log_journal = !log_syslog && log_stderr_is_journal();
    return 0;
}

int
log_access_open(const char *target)
{
    if (access_fd > STDERR_FILENO)
        close(access_fd);
    access_fd = -1;
    access_target[0] = '\0';
    if (target == NULL || strcmp(target, "off") == 0 || target[0] == '\0')
        return 0;
    snprintf(access_target, sizeof(access_target), "%s", target);
    if (strcmp(target, "stderr") == 0)
        access_fd = STDERR_FILENO;
    else if (strcmp(target, "syslog") == 0) {
        if (!log_syslog)
            openlog(log_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
    } else if ((access_fd = log_open_onto(target, -1)) == -1) {
        log_error("access_log %s: %s", target, strerror(errno));
        access_target[0] = '\0';
        return -1;
    }
    return 0;
}

int
log_access_on(void)
{
    return access_target[0] != '\0';
}

void
log_access(const char *line, size_t len)
{
    if (access_target[0] == '\0')
        return;
    if (access_fd == -1) {
        syslog(LOG_INFO, "%.*s", (int)len, line);
        return;
    }
    /* One write(2) of a whole line to an O_APPEND file: the lines of
     * several workers do not mix. */
    if (write(access_fd, line, len) == -1)
        log_warn("access log: %s", strerror(errno));
}

void
log_reopen(void)
{
    /* stderr that belongs to whoever started us (the web server's error
     * log) is not ours to reopen.  A file is opened again by name, after
     * logrotate moved it; should that fail, the old one is kept.  The
     * syslog socket is opened afresh. */
    if (log_syslog || strcmp(access_target, "syslog") == 0) {
        closelog();
        openlog(log_ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
    }
    if (log_file[0] != '\0' &&
        log_open_onto(log_file, STDERR_FILENO) == -1)
        log_error("reopening log %s: %s; still writing to the old file",
            log_file, strerror(errno));
    if (access_fd > STDERR_FILENO) {
        int fd = log_open_onto(access_target, access_fd);

        if (fd == -1)
            log_error("reopening access_log %s: %s; still writing to the "
                "old file", access_target, strerror(errno));
    }
}

void
log_set_level(int level)
{
    log_level = level;
}

int
log_limit_event(struct log_limit *ll, const char *file, int line,
    int64_t now_ms, unsigned long *repeated)
{
    struct log_site *s;
    int i, slot = -1, oldest = 0;

    for (i = 0; i < LOG_LIMIT_SITES; i++) {
        s = &ll->site[i];
        if (s->file == NULL) {
            if (slot == -1)
                slot = i;
            continue;
        }
        /* __FILE__ is a literal, usually one copy per file; strcmp only
         * when the lines agree and the copies differ. */
        if (s->line == line && (s->file == file || strcmp(s->file, file) == 0))
            break;
        if (s->written_ms < ll->site[oldest].written_ms ||
            ll->site[oldest].file == NULL)
            oldest = i;
    }
    if (i < LOG_LIMIT_SITES) {
        if (now_ms - s->written_ms < LOG_LIMIT_MS) {
            s->held++;
            return -1;
        }
        *repeated = s->held;
        s->held = 0;
        s->written_ms = now_ms;
        return i;
    }
    if (slot == -1)
        slot = oldest;
    s = &ll->site[slot];
    memset(s, 0, sizeof(*s));
    s->file = file;
    s->line = line;
    s->written_ms = now_ms;
    *repeated = 0;
    return slot;
}

int
log_limit_overdue(struct log_limit *ll, int64_t now_ms,
    unsigned long *repeated)
{
    struct log_site *s;
    int i;

    for (i = 0; i < LOG_LIMIT_SITES; i++) {
        s = &ll->site[i];
        if (s->file != NULL && s->held > 0 &&
            now_ms - s->written_ms >= LOG_LIMIT_MS) {
            *repeated = s->held;
            s->held = 0;
            return i;
        }
    }
    return -1;
}

/* Writes one finished line (msg has no newline) at level for file:line,
 * with the count of lines held back: those before this one, or, for a
 * summary, those after the site's last line, whose text msg is.  The
 * source location is written only at log_level = debug. */
static void
log_write(int level, const char *file, int line, const char *msg,
    unsigned long repeated, int summary)
{
    /* syslog(3)'s priorities, which are also sd-daemon(3)'s prefixes. */
    static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
    char stamp[32], more[64], where[160];
    struct tm tm;
    time_t now;

    more[0] = '\0';
    if (summary)
        snprintf(more, sizeof(more), " (repeated %lu more times)", repeated);
    else if (repeated > 0)
        snprintf(more, sizeof(more), " (repeated %lu times before this line)",
            repeated);
    where[0] = '\0';
    if (log_level >= RL_LOG_DEBUG)
        snprintf(where, sizeof(where), " (%s:%d)", file, line);
    if (log_syslog) {
        syslog(prio[level], "%s: %s%s%s", log_names[level], msg, more, where);
        return;
    }
    if (log_journal) {
        fprintf(stderr, "<%d>%s: %s%s%s\n", prio[level], log_names[level],
            msg, more, where);
        return;
    }
    now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s %s[%ld]: %s: %s%s%s\n", stamp, log_ident,
        (long)getpid(), log_names[level], msg, more, where);
}

/* Writes the summaries of the sites that have gone quiet since now_ms -
 * LOG_LIMIT_MS with lines held back. */
static void
log_summaries(int64_t now_ms)
{
    const struct log_site *s;
    unsigned long repeated;
    int i;

    while ((i = log_limit_overdue(&log_sites, now_ms, &repeated)) != -1) {
        s = &log_sites.site[i];
        log_write(s->level, s->file, s->line, s->text, repeated, 1);
    }
}

void
log_flush(void)
{
    log_summaries(INT64_MAX);
}

void
log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    char raw[1024], msg[2048];
    unsigned long repeated = 0;
    int64_t now_ms;
    va_list ap;
    int slot = -1, unlimited = level & RL_LOG_UNLIMITED;

    level &= ~RL_LOG_UNLIMITED;
    if (level > log_level)
        return;
    now_ms = util_now_ms();
    if (level < RL_LOG_DEBUG && !unlimited &&
        (slot = log_limit_event(&log_sites, file, line, now_ms,
        &repeated)) == -1)
        return;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof(raw), fmt, ap);
    va_end(ap);
    /* One event, one line: the control bytes of a message (a request's
     * texts, a server's reply) are escaped, so that none can end the line
     * and start one of its own. */
    util_escape(msg, sizeof(msg), raw, strlen(raw));
    log_summaries(now_ms);
    if (slot != -1) {
        log_sites.site[slot].level = level;
        struct log_site *s = &log_sites.site[slot];

        snprintf(s->text, sizeof(s->text), "%.*s", (int)sizeof(s->text) - 1,
            msg);
    }
    log_write(level, file, line, msg, repeated, 0);
}
