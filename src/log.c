/*
 * log.c -- one line per event, to stderr or syslog.
 *
 * Under a web server stderr is its error log (lighttpd and mod_fcgid pass
 * theirs to the process), so stderr is the default.  Every line carries a
 * level and the source file and line that emitted it; under stderr it also
 * carries a UTC timestamp and the pid.  Callers never pass raw API keys
 * here: only their SHA-256 prefix.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "ratelimit.h"

static int log_level = RL_LOG_INFO;
static int log_syslog;
static const char *log_ident = "ratelimit-fcgi";
static const char *const log_names[] = { "error", "warn", "info", "debug" };

void
log_init(const char *ident, const char *target, int level)
{
    log_ident = ident;
    log_level = level;
    log_syslog = target != NULL && strcmp(target, "syslog") == 0;
    if (log_syslog)
        openlog(ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
}

void
log_set_level(int level)
{
    log_level = level;
}

void
log_emit(int level, const char *file, int line, const char *fmt, ...)
{
    static const int prio[] = { LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG };
    char msg[1024], stamp[32];
    struct tm tm;
    time_t now;
    va_list ap;
    size_t i;

    if (level > log_level)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One event, one line: a newline inside a message would split it. */
    for (i = 0; msg[i] != '\0'; i++)
        if (msg[i] == '\n' || msg[i] == '\r')
            msg[i] = ' ';
    if (log_syslog) {
        syslog(prio[level], "%s: %s (%s:%d)", log_names[level], msg, file,
            line);
        return;
    }
    now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    fprintf(stderr, "%s %s[%ld]: %s: %s (%s:%d)\n", stamp, log_ident,
        (long)getpid(), log_names[level], msg, file, line);
}
