/*
 * scoreboard.c -- the pool's shared segment, as the service uses it.
 *
 * shm.c lays the segment out and manages its tables; this file maps it
 * (MAP_SHARED, before the master forks, so every worker sees the same
 * pages), sizes it from the configuration, and reads the scoreboard at its
 * front: one slot per worker, with the worker's pid, what it is doing and
 * since when, plus the pool's counters.  The master writes the pids; each
 * worker writes its own slot; /metrics and /status read them all.
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>

#include "service.h"

/* Whether a writer recorded in a shared entry still runs (see shm.c). */
static int
scoreboard_pid_alive(int32_t pid)
{
    return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH);
}

int
scoreboard_map(struct shm *m, const struct rl_config *cfg)
{
    size_t counts[SHM_NTABLES], size;
    void *base;

    counts[SHM_KEYS] = (size_t)cfg->key_cache_size;
    counts[SHM_UNKNOWN] = (size_t)cfg->key_cache_negative_size;
    counts[SHM_TENANTS] = (size_t)cfg->rule_cache_size;
    counts[SHM_OVERLIMIT] = (size_t)cfg->overlimit_cache_size;
    size = shm_size(sizeof(struct scoreboard), counts);
    /* Fresh anonymous pages read as zero and cost nothing until touched. */
    base = mmap(NULL, size, PROT_READ | PROT_WRITE,
        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        log_error("mmap of %zu bytes for the shared segment: %s", size,
            strerror(errno));
        return -1;
    }
    if (shm_init(m, base, size, sizeof(struct scoreboard), counts) == -1) {
        munmap(base, size);
        log_error("shared segment: layout failed");
        return -1;
    }
    m->pid_alive = scoreboard_pid_alive;
    log_debug("shared segment: %zu bytes (%zu keys, %zu unknown keys, %zu "
        "tenants)", size, counts[SHM_KEYS], counts[SHM_UNKNOWN],
        counts[SHM_TENANTS]);
    return 0;
}

void
scoreboard_unmap(struct shm *m)
{
    if (m->base != NULL)
        munmap(m->base, shm_total(m));
    memset(m, 0, sizeof(*m));
}

void
scoreboard_count(const struct scoreboard *b, unsigned long *live,
    unsigned long *active)
{
    int i, st;

    *live = *active = 0;
    if (b->workers == 0) {
        /* No master: this process is the pool, and it is on a request. */
        *live = *active = 1;
        return;
    }
    for (i = 0; i < RL_MAX_WORKERS; i++) {
        if (b->slots[i].pid == 0)
            continue;
        (*live)++;
        st = b->slots[i].state;
        *active += st == SLOT_READING || st == SLOT_BUSY;
    }
}
