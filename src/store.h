/*
 * store.h -- what the stores answer: the result codes every store call
 * returns (PostgreSQL's, Redis's, the unit tests' fakes), and what the
 * key store fills in for the decision (a key, a tenant's rules, the
 * changes it was told of).  decide.h, pg_store.h and redis.h build on it.
 */
#ifndef STORE_H
#define STORE_H

#include "ratelimit.h"

enum { STORE_OK = 0, STORE_UNAVAILABLE = -1, STORE_BAD_REPLY = -2 };

struct key_info {
    int found;
    long long key_id;
    char key_prefix[16];
    char tenant_id[RL_UUID_LEN + 1];
    char tenant_name[129];
    int admin;
    int revoked;
    int suspended;
    int anonymous;              /* the anonymous tenant, not a key */
    long long counter_budget;   /* the tenant's own; -1: the configuration's
                                   tenant_counter_budget */
};

/* What a change notification named (pg_store_poll, decide_sync). */
struct store_change {
    int kind;                   /* STORE_CHANGE_* */
    unsigned char key[32];      /* a key's: its SHA-256 */
    char tenant[RL_UUID_LEN + 1]; /* a tenant's rules or limits: its id */
};

enum { STORE_CHANGE_KEY = 1, STORE_CHANGE_TENANT };
#define STORE_CHANGES_MAX 64

struct tenant_rules {
    int n;
    int too_many;               /* the store had more than RL_MAX_RULES:
                                   every check of the tenant is refused */
    uint64_t generation;        /* shm change generation when fetched */
    struct rl_rule *rules;
    struct rules_index *index;  /* of rules, made by decide.c */
};

#endif /* STORE_H */
