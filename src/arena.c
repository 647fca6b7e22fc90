/*
 * arena.c -- large values the pool shares: a ring of shared memory that
 * values are appended to and read back from by position.
 *
 * A tenant's rules fit in an entry of the shared tenants table (shm.c)
 * only up to SHM_TENANT_VALUE_MAX bytes packed, about 135 one-limit
 * rules; a tenant may have 10,000.  The packing of a larger set is
 * appended here, and the tenants table holds where it is (an arena
 * reference, decide.c).  So every tenant's rules are known to the whole
 * pool, and a worker that starts while PostgreSQL is down still has them
 * (see doc/design.md, "The shared segment").
 *
 * The ring is written without locks.  A writer reserves its span by
 * adding its size to the head, a 64-bit count of the bytes ever reserved
 * (a span that would cross the end of the ring is given up and another
 * reserved), copies the value there with its position in front, and only
 * then publishes the position elsewhere.  A value at position p is
 * overwritten once the head has passed p + size: a reader copies it, then
 * checks the head, and keeps the copy only if it is still below that and
 * the copy names p.  A writer that dies leaves a span no one points to.
 * Old values thus fade out as new ones come in; the tenants table's own
 * entries name values that may have gone, and the reader then asks
 * PostgreSQL, as on any miss.
 */
#include <string.h>

#include "ratelimit.h"

#define ARENA_MAGIC 0x524c4152u         /* "RLAR" */
#define ARENA_DATA_AT 64

struct arena_header {
    uint32_t magic;
    uint32_t pad;
    uint64_t size;                      /* bytes of the ring */
    uint64_t head;                      /* bytes ever reserved, from 16 */
};

struct arena_record {
    uint64_t pos;
    uint64_t len;
};

_Static_assert(sizeof(struct arena_header) <= ARENA_DATA_AT,
    "the arena's header must fit before its data");

size_t
arena_size(size_t bytes)
{
    return bytes == 0 ? 0 : ARENA_DATA_AT + bytes / 16 * 16;
}

int
arena_init(struct arena *a, void *base, size_t size)
{
    struct arena_header *h = base;

    a->base = NULL;
    if (base == NULL || size < ARENA_DATA_AT + 1024)
        return -1;
    h->size = (uint64_t)(size - ARENA_DATA_AT) / 16 * 16;
    h->head = 16;                       /* no value is at position 0 */
    h->magic = ARENA_MAGIC;
    a->base = base;
    return 0;
}

static struct arena_header *
arena_header(const struct arena *a)
{
    return a->base;
}

static unsigned char *
arena_data(const struct arena *a)
{
    return (unsigned char *)a->base + ARENA_DATA_AT;
}

/* The span a value of len bytes takes, its record included. */
static uint64_t
arena_span(size_t len)
{
    return (sizeof(struct arena_record) + (uint64_t)len + 15) / 16 * 16;
}

size_t
arena_max(const struct arena *a)
{
    if (a == NULL || a->base == NULL)
        return 0;
    return (size_t)(arena_header(a)->size / 4) - sizeof(struct arena_record);
}

uint64_t
arena_put(struct arena *a, const void *value, size_t len)
{
    struct arena_header *h;
    struct arena_record r;
    uint64_t need = arena_span(len), start, off;

    if (a == NULL || a->base == NULL || len > arena_max(a))
        return 0;
    h = arena_header(a);
    for (;;) {
        start = __atomic_fetch_add(&h->head, need, __ATOMIC_ACQ_REL);
        off = start % h->size;
        if (off + need <= h->size)
            break;
        /* Across the end: the rest of the ring is left unused. */
    }
    r.pos = start;
    r.len = len;
    memcpy(arena_data(a) + off, &r, sizeof(r));
    memcpy(arena_data(a) + off + sizeof(r), value, len);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    return start;
}

int
arena_get(const struct arena *a, uint64_t pos, void *out, size_t len)
{
    const struct arena_header *h;
    struct arena_record r;
    uint64_t need = arena_span(len), head, off;

    if (a == NULL || a->base == NULL || pos == 0 || len > arena_max(a))
        return -1;
    h = arena_header(a);
    off = pos % h->size;
    head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
    if (pos + need > head || head > pos + h->size || off + need > h->size)
        return -1;
    memcpy(&r, arena_data(a) + off, sizeof(r));
    memcpy(out, arena_data(a) + off + sizeof(r), len);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
    if (head > pos + h->size || r.pos != pos || r.len != len)
        return -1;
    return 0;
}
