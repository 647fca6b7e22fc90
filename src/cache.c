/*
 * cache.c -- a bounded, string-keyed cache with an expiry per entry.
 *
 * Each worker keeps one: tenants' rules (by tenant id).  A chained hash
 * table finds entries; a doubly linked list in recency order picks the
 * victim when the cache is full -- by count, or by the bytes the caller
 * says its entries hold (cache_put_cost) -- so the cache never grows past
 * its bounds however many tenants there are.  Time
 * is passed in by the caller, which keeps the cache pure and testable.
 * Expired entries stay until they are replaced or evicted, so a caller that
 * cannot reach PostgreSQL may still ask for them ("stale").
 */
#include <stdlib.h>
#include <string.h>

#include "ratelimit.h"

struct cache_entry {
    char *key;
    void *value;
    size_t cost;                    /* what the caller said it holds */
    int64_t expires_ms;
    struct cache_entry *next;       /* hash chain */
    struct cache_entry *newer;      /* recency list */
    struct cache_entry *older;
};

struct cache {
    struct cache_entry **buckets;
    size_t nbuckets;
    size_t count;
    size_t capacity;
    size_t cost;                    /* of the entries in it */
    size_t max_cost;                /* 0: no bound */
    struct cache_entry *newest;
    struct cache_entry *oldest;
    void (*free_value)(void *);
};

/* FNV-1a: short keys, no adversary can choose them (they are hashes). */
static size_t
cache_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL;

    while (*s != '\0') {
        h ^= (unsigned char)*s++;
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

struct cache *
cache_create(size_t capacity, void (*free_value)(void *))
{
    struct cache *c;
    size_t n = 16;

    if (capacity == 0)
        capacity = 1;
    while (n < capacity && n < ((size_t)1 << 24))
        n *= 2;
    if ((c = calloc(1, sizeof(*c))) == NULL)
        return NULL;
    if ((c->buckets = calloc(n, sizeof(*c->buckets))) == NULL) {
        free(c);
        return NULL;
    }
    c->nbuckets = n;
    c->capacity = capacity;
    c->free_value = free_value;
    return c;
}

static void
cache_unlink_lru(struct cache *c, struct cache_entry *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        c->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        c->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void
cache_push_newest(struct cache *c, struct cache_entry *e)
{
    e->older = c->newest;
    e->newer = NULL;
    if (c->newest != NULL)
        c->newest->newer = e;
    c->newest = e;
    if (c->oldest == NULL)
        c->oldest = e;
}

static struct cache_entry **
cache_slot(struct cache *c, const char *key)
{
    struct cache_entry **pp = &c->buckets[cache_hash(key) & (c->nbuckets - 1)];

    while (*pp != NULL && strcmp((*pp)->key, key) != 0)
        pp = &(*pp)->next;
    return pp;
}

static void
cache_drop(struct cache *c, struct cache_entry **pp)
{
    struct cache_entry *e = *pp;

    *pp = e->next;
    cache_unlink_lru(c, e);
    c->cost -= e->cost;
    if (c->free_value != NULL)
        c->free_value(e->value);
    free(e->key);
    free(e);
    c->count--;
}

void
cache_remove(struct cache *c, const char *key)
{
    struct cache_entry **pp = cache_slot(c, key);

    if (*pp != NULL)
        cache_drop(c, pp);
}

void
cache_set_max_cost(struct cache *c, size_t max_cost)
{
    c->max_cost = max_cost;
}

int
cache_put(struct cache *c, const char *key, void *value, int64_t now_ms,
    int64_t ttl_ms)
{
    return cache_put_cost(c, key, value, 0, now_ms, ttl_ms);
}

int
cache_put_cost(struct cache *c, const char *key, void *value, size_t cost,
    int64_t now_ms, int64_t ttl_ms)
{
    struct cache_entry **pp, *e;

    cache_remove(c, key);
    /* The least recently used go until the new one fits; one that is
     * larger than the bound by itself is kept alone. */
    while (c->oldest != NULL && (c->count >= c->capacity ||
        (c->max_cost > 0 && c->cost + cost > c->max_cost)))
        cache_remove(c, c->oldest->key);
    if ((e = calloc(1, sizeof(*e))) == NULL ||
        (e->key = strdup(key)) == NULL) {
        free(e);
        if (c->free_value != NULL)
            c->free_value(value);
        return -1;
    }
    e->value = value;
    e->cost = cost;
    c->cost += cost;
    e->expires_ms = now_ms + ttl_ms;
    pp = &c->buckets[cache_hash(key) & (c->nbuckets - 1)];
    e->next = *pp;
    *pp = e;
    cache_push_newest(c, e);
    c->count++;
    return 0;
}

void *
cache_get(struct cache *c, const char *key, int64_t now_ms, int *stale)
{
    struct cache_entry *e = *cache_slot(c, key);

    if (e == NULL)
        return NULL;
    if (stale != NULL)
        *stale = now_ms >= e->expires_ms;
    else if (now_ms >= e->expires_ms)
        return NULL;
    cache_unlink_lru(c, e);
    cache_push_newest(c, e);
    return e->value;
}

void
cache_clear(struct cache *c)
{
    while (c->oldest != NULL)
        cache_remove(c, c->oldest->key);
}

size_t
cache_count(const struct cache *c)
{
    return c->count;
}

size_t
cache_cost(const struct cache *c)
{
    return c->cost;
}

void
cache_free(struct cache *c)
{
    if (c == NULL)
        return;
    cache_clear(c);
    free(c->buckets);
    free(c);
}
