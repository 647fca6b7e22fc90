/*
 * shm.c -- the segment of memory that all workers of a pool share.
 *
 * The master maps one MAP_SHARED region before it forks, so every worker,
 * including one started long after, sees the same bytes.  Its layout is
 * fixed when the pool starts and described by a header with a magic
 * number and a version:
 *
 *   header      magic, version, sizes, the change generation
 *   scoreboard  one slot per worker and the pool's counters (service.h)
 *   keys        API keys the pool knows           (key_cache_size entries)
 *   unknown     API keys PostgreSQL did not know  (key_cache_negative_size)
 *   tenants     tenants' rules, packed            (rule_cache_size entries)
 *   overlimit   denials, until when they hold     (overlimit_cache_size)
 *
 * The three tables are the same kind of table: entries found by a 32-byte
 * id (a SHA-256), SHM_WAYS (8) to a set, each carrying a time stamp (when it was
 * fetched, or until when it holds), the change generation it was fetched
 * under, and a value of bounded size.  A full set gives up the entry with
 * the oldest stamp.  Unknown keys live in a table of their own, so a flood
 * of random keys can never push out a key that is in use.
 *
 * No entry is ever locked in a way a dying worker could leave behind.
 * Each has a sequence number that is odd while it is being written: a
 * writer claims the entry by compare-and-swap from even to odd, copies,
 * and releases it with the next even number; a reader copies the entry and
 * keeps the copy only if the number was even and unchanged around the
 * copy.  A writer that died mid-copy leaves an odd number; the next writer
 * takes the entry over once the pid it recorded is gone (the caller says
 * how to tell, so this file stays free of system calls).
 *
 * When PostgreSQL notifies a change, a worker bumps a generation, and
 * every entry fetched under an older one is stale: used only while
 * PostgreSQL cannot be asked.  A notification that names a key or a
 * tenant bumps only that key's or tenant's stripe (one of SHM_STRIPES);
 * one that names nothing, or a lost connection, bumps the pool's.  Version 3 added the over-limit table (its
 * stamp is the monotonic time until which a denial holds); later additions
 * (the per-second history) go after it, with a new version number.
 */
#include <string.h>

#include "ratelimit.h"

#define SHM_MAGIC 0x524c5348u       /* "RLSH" */
#define SHM_ALIGN 64

struct shm_header {
    uint32_t magic;
    uint32_t version;
    uint64_t size;
    uint64_t generation;
    uint64_t board_size;
    uint64_t counts[SHM_NTABLES];
    /* What a notification names bumps one stripe: of the key's hash, or
     * of the tenant's id (see shm_generation_key). */
    uint64_t key_stripes[SHM_STRIPES];
    uint64_t tenant_stripes[SHM_STRIPES];
};

struct shm_entry {
    uint32_t seq;               /* odd while being written */
    int32_t writer;             /* pid of the last writer */
    unsigned char id[32];
    int64_t stamp;              /* 0: empty */
    uint64_t generation;
    uint32_t len;
    uint32_t pad;
    /* then the value, of the table's value size */
};

static const size_t shm_value_size[SHM_NTABLES] = {
    SHM_KEY_VALUE_MAX, 0, SHM_TENANT_VALUE_MAX, SHM_OVERLIMIT_VALUE_MAX
};

static size_t
shm_round(size_t n)
{
    return (n + SHM_ALIGN - 1) / SHM_ALIGN * SHM_ALIGN;
}

static size_t
shm_entry_size(int table)
{
    return shm_round(sizeof(struct shm_entry) + shm_value_size[table]);
}

/* Entries are allocated in whole sets. */
static size_t
shm_sets(size_t n)
{
    return n == 0 ? 1 : (n + SHM_WAYS - 1) / SHM_WAYS;
}

size_t
shm_size(size_t board_size, const size_t counts[SHM_NTABLES])
{
    size_t size = shm_round(sizeof(struct shm_header)) +
        shm_round(board_size);
    int t;

    for (t = 0; t < SHM_NTABLES; t++)
        size += shm_sets(counts[t]) * SHM_WAYS * shm_entry_size(t);
    return size;
}

static void
shm_layout(struct shm *m, unsigned char *base, size_t board_size,
    const uint64_t counts[SHM_NTABLES])
{
    unsigned char *p = base + shm_round(sizeof(struct shm_header));
    int t;

    m->base = base;
    m->board = p;
    p += shm_round(board_size);
    for (t = 0; t < SHM_NTABLES; t++) {
        m->table[t] = p;
        m->sets[t] = shm_sets((size_t)counts[t]);
        p += m->sets[t] * SHM_WAYS * shm_entry_size(t);
    }
}

int
shm_init(struct shm *m, void *base, size_t size, size_t board_size,
    const size_t counts[SHM_NTABLES])
{
    struct shm_header *h = base;
    uint64_t c[SHM_NTABLES];
    int t;

    memset(m, 0, sizeof(*m));
    if (size < shm_size(board_size, counts))
        return -1;
    /* The region is fresh from mmap and thus zero: only the header is
     * written, so untouched table pages cost no memory. */
    for (t = 0; t < SHM_NTABLES; t++)
        c[t] = h->counts[t] = counts[t];
    h->size = size;
    h->board_size = board_size;
    h->generation = 1;
    h->version = SHM_VERSION;
    h->magic = SHM_MAGIC;
    shm_layout(m, base, board_size, c);
    return 0;
}

int
shm_attach(struct shm *m, void *base, size_t size)
{
    const struct shm_header *h = base;

    memset(m, 0, sizeof(*m));
    if (size < sizeof(*h) || h->magic != SHM_MAGIC ||
        h->version != SHM_VERSION || h->size != size)
        return -1;
    shm_layout(m, base, (size_t)h->board_size, h->counts);
    return 0;
}

size_t
shm_total(const struct shm *m)
{
    const struct shm_header *h = m->base;

    return (size_t)h->size;
}

uint64_t
shm_generation(const struct shm *m)
{
    const struct shm_header *h = m->base;

    return __atomic_load_n(&h->generation, __ATOMIC_ACQUIRE);
}

void
shm_changed(struct shm *m)
{
    struct shm_header *h = m->base;

    __atomic_add_fetch(&h->generation, 1, __ATOMIC_ACQ_REL);
}

/* The stripe of a key id (a SHA-256: its first bytes are as good as any)
 * and of a tenant id (FNV-1a of the text). */
static size_t
shm_key_stripe(const unsigned char id[32])
{
    return ((size_t)id[0] | (size_t)id[1] << 8) % SHM_STRIPES;
}

static size_t
shm_tenant_stripe(const char *tenant_id)
{
    uint64_t h = 1469598103934665603ULL;

    while (*tenant_id != '\0') {
        h ^= (unsigned char)*tenant_id++;
        h *= 1099511628211ULL;
    }
    return (size_t)(h % SHM_STRIPES);
}

/*
 * The generations of what one entry depends on, added up: every part only
 * ever grows, so the sum changes exactly when one of them did.  A change
 * of one key or one tenant's rules thus makes stale only the entries of
 * its stripe, not the whole pool's.
 */
uint64_t
shm_generation_key(const struct shm *m, const unsigned char id[32])
{
    const struct shm_header *h = m->base;

    return shm_generation(m) + __atomic_load_n(
        &h->key_stripes[shm_key_stripe(id)], __ATOMIC_ACQUIRE);
}

uint64_t
shm_generation_tenant(const struct shm *m, const char *tenant_id)
{
    const struct shm_header *h = m->base;

    return shm_generation(m) + __atomic_load_n(
        &h->tenant_stripes[shm_tenant_stripe(tenant_id)], __ATOMIC_ACQUIRE);
}

void
shm_changed_key(struct shm *m, const unsigned char id[32])
{
    struct shm_header *h = m->base;

    __atomic_add_fetch(&h->key_stripes[shm_key_stripe(id)], 1,
        __ATOMIC_ACQ_REL);
}

void
shm_changed_tenant(struct shm *m, const char *tenant_id)
{
    struct shm_header *h = m->base;

    __atomic_add_fetch(&h->tenant_stripes[shm_tenant_stripe(tenant_id)], 1,
        __ATOMIC_ACQ_REL);
}

static struct shm_entry *
shm_way(const struct shm *m, int table, const unsigned char id[32], int way)
{
    uint64_t h;
    size_t set;

    memcpy(&h, id, sizeof(h));
    set = (size_t)(h % m->sets[table]);
    return (struct shm_entry *)(m->table[table] +
        (set * SHM_WAYS + (size_t)way) * shm_entry_size(table));
}

static unsigned char *
shm_value(struct shm_entry *e)
{
    return (unsigned char *)(e + 1);
}

int
shm_get(const struct shm *m, int table, const unsigned char id[32],
    void *value, size_t cap, struct shm_meta *meta)
{
    struct shm_entry *e, *best = NULL;
    uint32_t s1, s2, len;
    int way, tries;

    /* A racing writer may have put the same id in two ways: the newest
     * stamp is the one that counts. */
    for (way = 0; way < SHM_WAYS; way++) {
        e = shm_way(m, table, id, way);
        if (e->stamp != 0 && memcmp(e->id, id, 32) == 0 &&
            (best == NULL || e->stamp > best->stamp))
            best = e;
    }
    if ((e = best) == NULL)
        return 0;
    for (tries = 0; tries < 3; tries++) {
        s1 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1)
            return 0;           /* being written: a miss this time */
        if (e->stamp == 0 || memcmp(e->id, id, 32) != 0)
            return 0;
        meta->stamp = e->stamp;
        meta->generation = e->generation;
        len = e->len;
        if (len > shm_value_size[table])
            len = 0;
        if (len > cap)
            len = (uint32_t)cap;
        if (len > 0)
            memcpy(value, shm_value(e), len);
        meta->len = len;
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s2 = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
        if (s1 == s2)
            return 1;
    }
    return 0;
}

/* Claims e for writing: 0 with *seq the odd number to release from, or -1
 * when another live writer holds it. */
static int
shm_claim(const struct shm *m, struct shm_entry *e, int32_t pid,
    uint32_t *seq)
{
    uint32_t s = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
    uint32_t next = s + 1;

    if (s & 1) {
        /* Odd: a writer is at it, or died at it. */
        if (m->pid_alive == NULL || m->pid_alive(e->writer))
            return -1;
        next = s + 2;
    }
    if (!__atomic_compare_exchange_n(&e->seq, &s, next, 0, __ATOMIC_ACQUIRE,
        __ATOMIC_RELAXED))
        return -1;
    e->writer = pid;
    *seq = next;
    return 0;
}

int
shm_put(struct shm *m, int table, const unsigned char id[32],
    const void *value, size_t len, int64_t stamp, uint64_t generation,
    int32_t pid)
{
    struct shm_entry *e, *victim = NULL;
    uint32_t seq;
    int way, evicted;

    if (len > shm_value_size[table] || stamp == 0)
        return -1;
    /* The entry of this id, else an empty one, else the oldest stamp. */
    for (way = 0; way < SHM_WAYS; way++) {
        e = shm_way(m, table, id, way);
        if (e->stamp != 0 && memcmp(e->id, id, 32) == 0) {
            victim = e;
            break;
        }
        if (victim == NULL || (victim->stamp != 0 &&
            (e->stamp == 0 || e->stamp < victim->stamp)))
            victim = e;
    }
    if (shm_claim(m, victim, pid, &seq) == -1)
        return -1;
    evicted = victim->stamp != 0 && memcmp(victim->id, id, 32) != 0;
    memcpy(victim->id, id, 32);
    victim->stamp = stamp;
    victim->generation = generation;
    victim->len = (uint32_t)len;
    if (len > 0)
        memcpy(shm_value(victim), value, len);
    __atomic_store_n(&victim->seq, seq + 1, __ATOMIC_RELEASE);
    return evicted;
}

void
shm_remove(struct shm *m, int table, const unsigned char id[32], int32_t pid)
{
    struct shm_entry *e;
    uint32_t seq;
    int way;

    for (way = 0; way < SHM_WAYS; way++) {
        e = shm_way(m, table, id, way);
        if (e->stamp == 0 || memcmp(e->id, id, 32) != 0 ||
            shm_claim(m, e, pid, &seq) == -1)
            continue;
        if (memcmp(e->id, id, 32) == 0)
            e->stamp = 0;
        __atomic_store_n(&e->seq, seq + 1, __ATOMIC_RELEASE);
    }
}

/* ------------------------------------------------------------------ */
/* A tenant's rules, packed for the tenants table. */

struct shm_packer {
    unsigned char *p;
    size_t len, cap;
    int overflow;
    size_t need;                /* bytes the packing needs, fit or not */
};

static void
shm_pack_bytes(struct shm_packer *k, const void *v, size_t n)
{
    k->need += n;
    if (k->overflow || k->len + n > k->cap) {
        k->overflow = 1;
        return;
    }
    memcpy(k->p + k->len, v, n);
    k->len += n;
}

static void
shm_pack_str(struct shm_packer *k, const char *s)
{
    uint16_t n = (uint16_t)strlen(s);

    shm_pack_bytes(k, &n, sizeof(n));
    shm_pack_bytes(k, s, n);
}

/*
 * Every field of struct rl_rule and struct rl_limit is packed: a field
 * added there must be added here and in shm_rules_unpack (the unit test
 * compares a round trip field by field).
 */
static void
shm_rules_pack_into(struct shm_packer *k0, const struct rl_rule *rules,
    int n)
{
    struct shm_packer k = *k0;
    const struct rl_rule *r;
    const struct rl_limit *l;
    int32_t count = n;
    int i, j;

    shm_pack_bytes(&k, &count, sizeof(count));
    for (i = 0; i < n; i++) {
        r = &rules[i];
        shm_pack_bytes(&k, &r->id, sizeof(r->id));
        shm_pack_str(&k, r->pattern);
        shm_pack_bytes(&k, &r->priority, sizeof(r->priority));
        shm_pack_bytes(&k, &r->shadow, sizeof(r->shadow));
        shm_pack_bytes(&k, &r->fail_open, sizeof(r->fail_open));
        shm_pack_bytes(&k, &r->per_route, sizeof(r->per_route));
        shm_pack_bytes(&k, &r->always, sizeof(r->always));
        shm_pack_bytes(&k, &r->broken, sizeof(r->broken));
        shm_pack_bytes(&k, &r->nlimits, sizeof(r->nlimits));
        for (j = 0; j < r->nlimits && j < RL_MAX_LIMITS; j++) {
            l = &r->limits[j];
            shm_pack_bytes(&k, &l->id, sizeof(l->id));
            shm_pack_str(&k, l->name);
            shm_pack_bytes(&k, &l->algorithm, sizeof(l->algorithm));
            shm_pack_bytes(&k, &l->limit_count, sizeof(l->limit_count));
            shm_pack_bytes(&k, &l->window_seconds, sizeof(l->window_seconds));
            shm_pack_bytes(&k, &l->bucket_capacity,
                sizeof(l->bucket_capacity));
            shm_pack_bytes(&k, &l->refill_rate, sizeof(l->refill_rate));
            shm_pack_bytes(&k, &l->period_us, sizeof(l->period_us));
            shm_pack_bytes(&k, &l->burst, sizeof(l->burst));
            shm_pack_bytes(&k, &l->calendar, sizeof(l->calendar));
            shm_pack_bytes(&k, &l->count, sizeof(l->count));
        }
    }
    *k0 = k;
}

long
shm_rules_pack(const struct rl_rule *rules, int n, void *out, size_t cap)
{
    struct shm_packer k = { out, 0, cap, 0, 0 };

    shm_rules_pack_into(&k, rules, n);
    return k.overflow ? -1 : (long)k.len;
}

size_t
shm_rules_packed_size(const struct rl_rule *rules, int n)
{
    struct shm_packer k = { NULL, 0, 0, 0, 0 };

    shm_rules_pack_into(&k, rules, n);
    return k.need;
}

struct shm_unpacker {
    const unsigned char *p;
    size_t len, off;
    int bad;
};

static void
shm_unpack_bytes(struct shm_unpacker *u, void *v, size_t n)
{
    if (u->off + n > u->len) {
        u->bad = 1;
        memset(v, 0, n);
        return;
    }
    memcpy(v, u->p + u->off, n);
    u->off += n;
}

static void
shm_unpack_str(struct shm_unpacker *u, char *s, size_t size)
{
    uint16_t n = 0;

    shm_unpack_bytes(u, &n, sizeof(n));
    if (n >= size || u->off + n > u->len) {
        u->bad = 1;
        s[0] = '\0';
        return;
    }
    memcpy(s, u->p + u->off, n);
    s[n] = '\0';
    u->off += n;
}

int
shm_rules_count(const void *in, size_t len)
{
    int32_t count;

    if (len < sizeof(count))
        return -1;
    memcpy(&count, in, sizeof(count));
    return count < 0 ? -1 : count;
}

int
shm_rules_unpack(const void *in, size_t len, struct rl_rule *rules, int max)
{
    struct shm_unpacker u = { in, len, 0, 0 };
    struct rl_rule *r;
    struct rl_limit *l;
    int32_t count = 0;
    int i, j;

    shm_unpack_bytes(&u, &count, sizeof(count));
    if (u.bad || count < 0 || count > max)
        return -1;
    for (i = 0; i < count && !u.bad; i++) {
        r = &rules[i];
        memset(r, 0, sizeof(*r));
        shm_unpack_bytes(&u, &r->id, sizeof(r->id));
        shm_unpack_str(&u, r->pattern, sizeof(r->pattern));
        shm_unpack_bytes(&u, &r->priority, sizeof(r->priority));
        shm_unpack_bytes(&u, &r->shadow, sizeof(r->shadow));
        shm_unpack_bytes(&u, &r->fail_open, sizeof(r->fail_open));
        shm_unpack_bytes(&u, &r->per_route, sizeof(r->per_route));
        shm_unpack_bytes(&u, &r->always, sizeof(r->always));
        shm_unpack_bytes(&u, &r->broken, sizeof(r->broken));
        shm_unpack_bytes(&u, &r->nlimits, sizeof(r->nlimits));
        if (r->nlimits < 0 || r->nlimits > RL_MAX_LIMITS)
            return -1;
        for (j = 0; j < r->nlimits && !u.bad; j++) {
            l = &r->limits[j];
            shm_unpack_bytes(&u, &l->id, sizeof(l->id));
            shm_unpack_str(&u, l->name, sizeof(l->name));
            shm_unpack_bytes(&u, &l->algorithm, sizeof(l->algorithm));
            shm_unpack_bytes(&u, &l->limit_count, sizeof(l->limit_count));
            shm_unpack_bytes(&u, &l->window_seconds,
                sizeof(l->window_seconds));
            shm_unpack_bytes(&u, &l->bucket_capacity,
                sizeof(l->bucket_capacity));
            shm_unpack_bytes(&u, &l->refill_rate, sizeof(l->refill_rate));
            shm_unpack_bytes(&u, &l->period_us, sizeof(l->period_us));
            shm_unpack_bytes(&u, &l->burst, sizeof(l->burst));
            shm_unpack_bytes(&u, &l->calendar, sizeof(l->calendar));
            shm_unpack_bytes(&u, &l->count, sizeof(l->count));
        }
    }
    return u.bad || u.off != len ? -1 : count;
}
