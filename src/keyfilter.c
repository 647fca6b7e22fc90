/*
 * keyfilter.c -- which API keys may exist: a Bloom filter of the hashes of
 * every active key, shared by the pool.
 *
 * key_lookup_rate keeps a flood of random keys from becoming a flood of
 * PostgreSQL lookups, but on its own it cannot tell a random key from a
 * valid key nobody has used since the pool started: a cold pool serving a
 * tenant with many keys would turn valid keys away.  The filter tells
 * them apart without a round trip.  A key whose hash is in it is looked up
 * whatever the rate (it is an active key, one revoked since, or one of the
 * few random keys that look like one); a key that is not is looked up only
 * within key_lookup_rate, and past it answered 401 when the filter is
 * complete (PostgreSQL said it has no such active key), 503 when it is not
 * yet (see decide.c and doc/design.md, "Keys the pool has not seen").
 *
 * It is filled three ways: one worker reads every active key's hash when
 * the filter is not complete (pg_store.c, between requests), every worker
 * adds the hash a key notification names (schema/005_notify_changes.sql), and
 * a lost connection to PostgreSQL, after which notifications may have been
 * missed, marks it incomplete again.  Bits are only ever set, so a reader
 * never sees a key vanish; a revoked key stays in it until the pool
 * restarts, which costs one lookup, answered from the pool's tables after
 * that.
 *
 * The memory is a MAP_SHARED region laid out here: a header, then the
 * bits.  Everything in it is changed with atomic operations; the one
 * builder is chosen by compare-and-swap on its pid, and a builder that
 * died is replaced (the caller says how to tell a live pid).
 */
#include <string.h>

#include "ratelimit.h"

#define KEYFILTER_MAGIC 0x524c4b46u    /* "RLKF" */
#define KEYFILTER_HASHES 4             /* bits per key */
#define KEYFILTER_RETRY_MS 1000        /* after a failed build */

struct keyfilter_header {
    uint32_t magic;
    uint32_t complete;          /* every active key is in it */
    int32_t builder;            /* the pid building it, 0: none */
    uint32_t pad;
    int64_t retry_at_ms;        /* no build is started before this */
    uint64_t nbits;
    uint64_t keys;              /* hashes added, duplicates included */
    uint64_t builds;            /* builds completed */
};

#define KEYFILTER_BITS_AT 64    /* the header, rounded to a cache line */

_Static_assert(sizeof(struct keyfilter_header) <= KEYFILTER_BITS_AT,
    "the key filter's header must fit before its bits");

size_t
keyfilter_size(size_t bytes)
{
    return bytes == 0 ? 0 : KEYFILTER_BITS_AT + bytes;
}

int
keyfilter_init(struct keyfilter *f, void *base, size_t size)
{
    struct keyfilter_header *h = base;

    f->base = NULL;
    if (base == NULL || size <= KEYFILTER_BITS_AT + 8)
        return -1;
    /* Fresh from mmap, so zero: only the header is written. */
    h->nbits = (uint64_t)(size - KEYFILTER_BITS_AT) / 8 * 64;
    h->magic = KEYFILTER_MAGIC;
    f->base = base;
    return 0;
}

static struct keyfilter_header *
keyfilter_header(const struct keyfilter *f)
{
    return f->base;
}

static uint64_t *
keyfilter_words(const struct keyfilter *f)
{
    return (uint64_t *)((unsigned char *)f->base + KEYFILTER_BITS_AT);
}

/* Bit i of the KEYFILTER_HASHES a hash sets: from its own 8-byte slices,
 * which SHA-256 makes independent. */
static uint64_t
keyfilter_bit(const struct keyfilter *f, const unsigned char md[32], int i)
{
    uint64_t v;

    memcpy(&v, md + 8 * i, sizeof(v));
    return v % keyfilter_header(f)->nbits;
}

void
keyfilter_add(struct keyfilter *f, const unsigned char md[32])
{
    uint64_t *w, b;
    int i;

    if (f == NULL || f->base == NULL)
        return;
    w = keyfilter_words(f);
    for (i = 0; i < KEYFILTER_HASHES; i++) {
        b = keyfilter_bit(f, md, i);
        __atomic_or_fetch(&w[b / 64], (uint64_t)1 << (b % 64),
            __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&keyfilter_header(f)->keys, 1, __ATOMIC_RELAXED);
}

int
keyfilter_add_hex(struct keyfilter *f, const char *hex)
{
    unsigned char md[32];

    if (util_unhex(hex, strlen(hex), md, sizeof(md)) == -1)
        return -1;
    keyfilter_add(f, md);
    return 0;
}

int
keyfilter_test(const struct keyfilter *f, const unsigned char md[32])
{
    const uint64_t *w;
    uint64_t b;
    int i;

    if (f == NULL || f->base == NULL)
        return KEYFILTER_UNKNOWN;
    w = keyfilter_words(f);
    for (i = 0; i < KEYFILTER_HASHES; i++) {
        b = keyfilter_bit(f, md, i);
        if (!(__atomic_load_n(&w[b / 64], __ATOMIC_RELAXED) &
            ((uint64_t)1 << (b % 64))))
            return __atomic_load_n(&keyfilter_header(f)->complete,
                __ATOMIC_ACQUIRE) ? KEYFILTER_ABSENT : KEYFILTER_UNKNOWN;
    }
    return KEYFILTER_MAYBE;
}

int
keyfilter_complete(const struct keyfilter *f)
{
    return f != NULL && f->base != NULL &&
        __atomic_load_n(&keyfilter_header(f)->complete, __ATOMIC_ACQUIRE);
}

void
keyfilter_incomplete(struct keyfilter *f)
{
    if (f == NULL || f->base == NULL)
        return;
    __atomic_store_n(&keyfilter_header(f)->complete, 0, __ATOMIC_RELEASE);
}

int
keyfilter_claim(struct keyfilter *f, int32_t pid, int64_t now_ms,
    int (*alive)(int32_t))
{
    struct keyfilter_header *h;
    int32_t cur;

    if (f == NULL || f->base == NULL)
        return 0;
    h = keyfilter_header(f);
    if (__atomic_load_n(&h->complete, __ATOMIC_ACQUIRE) ||
        now_ms < __atomic_load_n(&h->retry_at_ms, __ATOMIC_RELAXED))
        return 0;
    cur = __atomic_load_n(&h->builder, __ATOMIC_ACQUIRE);
    if (cur != 0 && (alive == NULL || alive(cur)))
        return 0;
    return __atomic_compare_exchange_n(&h->builder, &cur, pid, 0,
        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

void
keyfilter_release(struct keyfilter *f, int32_t pid, int built,
    int64_t now_ms)
{
    struct keyfilter_header *h;
    int32_t cur = pid;

    if (f == NULL || f->base == NULL)
        return;
    h = keyfilter_header(f);
    if (built) {
        __atomic_store_n(&h->complete, 1, __ATOMIC_RELEASE);
        __atomic_add_fetch(&h->builds, 1, __ATOMIC_RELAXED);
    } else
        __atomic_store_n(&h->retry_at_ms, now_ms + KEYFILTER_RETRY_MS,
            __ATOMIC_RELAXED);
    __atomic_compare_exchange_n(&h->builder, &cur, 0, 0, __ATOMIC_ACQ_REL,
        __ATOMIC_RELAXED);
}

void
keyfilter_stats(const struct keyfilter *f, struct keyfilter_stats *st)
{
    const struct keyfilter_header *h;

    memset(st, 0, sizeof(*st));
    if (f == NULL || f->base == NULL)
        return;
    h = keyfilter_header(f);
    st->bits = h->nbits;
    st->keys = __atomic_load_n(&h->keys, __ATOMIC_RELAXED);
    st->builds = __atomic_load_n(&h->builds, __ATOMIC_RELAXED);
    st->complete = (int)__atomic_load_n(&h->complete, __ATOMIC_ACQUIRE);
}
