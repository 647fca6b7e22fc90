/*
 * wakelag.c -- how late this machine wakes a process that sleeps.
 *
 * It sleeps 1 ms at a time (nanosleep, timer slack 1 ns) for SECONDS and
 * counts the sleeps that ended late by more than 1, 2 and 5 ms.  On an
 * idle machine of its own a sleep ends within tens of microseconds; on a
 * virtual machine whose host is busy, a sleeping vCPU may be woken
 * milliseconds late.  Every process of an open-loop benchmark sleeps
 * between requests, so such delays show in its tail latency whatever the
 * program measured: the benchmark prints this figure next to its tiers.
 *
 * Build: cc -std=c99 -D_GNU_SOURCE -O2 -Wall -Wextra -o wakelag wakelag.c
 */
#include <sys/prctl.h>

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NSEC        1000000000ULL
#define SLEEP_NS    1000000ULL
#define MAX_SECONDS 600

static const char usage_text[] =
    "usage: wakelag SECONDS\n"
    "\n"
    "Sleeps 1 ms at a time for SECONDS (1-600) and prints one line:\n"
    "  WAKE seconds=S sleeps=N late_1ms=N late_2ms=N late_5ms=N max_late_us=N\n"
    "late_Xms: sleeps that ended more than X ms after their 1 ms;\n"
    "max_late_us: the latest one.  Exit 0, or 2 on a usage error.\n";

static uint64_t
now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NSEC + (uint64_t)ts.tv_nsec;
}

int
main(int argc, char *argv[])
{
    struct timespec req = { 0, (long)SLEEP_NS };
    uint64_t end, t, late, max_late = 0, sleeps = 0;
    uint64_t late1 = 0, late2 = 0, late5 = 0;
    char *ep;
    long secs;

    if (argc == 2 && strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    errno = 0;
    secs = argc == 2 ? strtol(argv[1], &ep, 10) : 0;
    if (argc != 2 || errno != 0 || ep == argv[1] || *ep != '\0' ||
        secs < 1 || secs > MAX_SECONDS) {
        fputs(usage_text, stderr);
        return 2;
    }
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    end = now_ns() + (uint64_t)secs * NSEC;
    while ((t = now_ns()) < end) {
        if (nanosleep(&req, NULL) == -1 && errno != EINTR)
            break;
        late = now_ns() - t;
        late = late > SLEEP_NS ? late - SLEEP_NS : 0;
        sleeps++;
        late1 += late > 1000000;
        late2 += late > 2000000;
        late5 += late > 5000000;
        if (late > max_late)
            max_late = late;
    }
    printf("WAKE seconds=%ld sleeps=%" PRIu64 " late_1ms=%" PRIu64
        " late_2ms=%" PRIu64 " late_5ms=%" PRIu64 " max_late_us=%" PRIu64
        "\n", secs, sleeps, late1, late2, late5, max_late / 1000);
    return fflush(stdout) == 0 ? 0 : 1;
}
