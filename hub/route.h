/* The five-step placement of a bare env name (DESIGN §6, reference §1.5–1.6),
 * as pure functions over capacity records: no clock, no I/O, no allocation.
 * The caller (federation.c, route_api.c, the tests, the benchmark) passes
 * the records of interest and the time; any thread. */
#ifndef AGENTBOX_HUB_ROUTE_H
#define AGENTBOX_HUB_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/common.h" /* AB_CLUSTER_ID_MAX, AB_CLUSTER_ID_BUF */

#define ROUTE_NAME_MAX 63  /* namespace, env, pool, scaling group */
#define ROUTE_TTL_MS 30000 /* a record is fresh while now - sampled <= this */
#define ROUTE_REASON_MAX 192

/* One member pool of one env in one cluster, as last reported. */
struct route_record {
    char cluster[AB_CLUSTER_ID_BUF];
    char ns[ROUTE_NAME_MAX + 1];
    char env[ROUTE_NAME_MAX + 1];
    char pool[ROUTE_NAME_MAX + 1];
    char group[ROUTE_NAME_MAX + 1]; /* scaling group; "" when none */
    int32_t idle, running, pending, desired;
    bool autoscaling;
    int32_t headroom;         /* scale-up room when autoscaling: -1 unbounded, 0 at ceiling */
    int64_t saturated_for_ms; /* informational: ranking ignores it */
    int64_t sampled_ms;       /* the caller's clock: received - age */
    int32_t reserved;         /* idle promised away by the hub and not yet claimed */
    int64_t claims;           /* the member's count of creates ever queued; -1: not reported */
};

/* A compact copy of what ranking reads from one record, for the registry's
 * per-env index: contiguous, so a decision over a thousand clusters streams
 * through cache instead of chasing a thousand records. The hashes are
 * route_hash() of the cluster id and the scaling group; names are compared
 * (through rec) only when hashes agree, and for ties. */
struct route_entry {
    const struct route_record *rec;
    int64_t sampled_ms;
    int32_t idle, reserved, headroom;
    uint32_t cluster_hash, group_hash;
    bool autoscaling;
};

struct route_query {
    const char *ns;
    const char *env;
    const char *group;  /* NULL or "": any member; else a hard constraint */
    const char *local;  /* origin cluster; NULL or "": the hub front door (no local) */
    int local_idle;     /* the origin's own count; -1: sum the local records */
    int local_can_grow; /* 1 yes, 0 no, -1: from the local records */
    int64_t now_ms;     /* same clock as sampled_ms */
    int64_t ttl_ms;     /* 0 → ROUTE_TTL_MS */
};

enum route_action {
    ROUTE_LOCAL = 1, /* serve on the origin (steps 1 and 3) */
    ROUTE_FORWARD,   /* forward pinned as cluster::pool (steps 2 and 4) */
    ROUTE_QUEUE,     /* nobody can serve: wait in the origin's (or parking cluster's) queue */
};

struct route_decision {
    int step; /* 1..5 */
    enum route_action action;
    char cluster[AB_CLUSTER_ID_BUF];   /* forward target, or the parking cluster at the
                                              front door; the origin otherwise */
    char pool[ROUTE_NAME_MAX + 1];     /* forward: the pinned member pool */
    int idle;                          /* chosen member's available idle (0 via headroom) */
    const struct route_record *chosen; /* forward: the record (borrowed), else NULL */
    size_t chosen_index;               /* route_decide_entries: its index in v */
    char reason[ROUTE_REASON_MAX];
};

/* Fresh iff now - sampled <= ttl (inclusive, reference §1.4). */
bool route_is_fresh(const struct route_record *r, int64_t now_ms, int64_t ttl_ms);
/* An empty wanted group matches every record; otherwise exact equality. */
bool route_group_matches(const char *want, const char *have);
/* Idle not yet promised away: max(idle - reserved, 0). */
int route_available(const struct route_record *r);
/* available > 0, or autoscaling with headroom != 0. */
bool route_is_schedulable(const struct route_record *r);
/* Foreign ranking: negative when a ranks before b. Idle tier before the
 * scale-up tier; more idle; more headroom (-1 highest); cluster id, then
 * pool name, byte order. */
int route_compare(const struct route_record *a, const struct route_record *b);
/* True when r is a record the query is about (namespace, env, group). */
bool route_matches(const struct route_query *q, const struct route_record *r);

/* Registry queries of reference §1.5 over v[0..n) (records of other envs
 * are skipped). */
int route_local_idle(const struct route_query *q, const struct route_record *const *v, size_t n);
bool route_local_can_grow(const struct route_query *q, const struct route_record *const *v,
                          size_t n);
/* The best schedulable fresh foreign record, or NULL. */
const struct route_record *route_best_foreign(const struct route_query *q,
                                              const struct route_record *const *v, size_t n);

/* The decision, in one pass over v. With a local cluster: steps 1–5. At the
 * front door (no local): step 2, step 4, else park (ROUTE_QUEUE, step 5) on
 * the smallest cluster id with a fresh matching record ("" when none). */
void route_decide(const struct route_query *q, const struct route_record *const *v, size_t n,
                  struct route_decision *out);

/* The same decision over one env's index (every entry is of q->ns/q->env). */
void route_decide_entries(const struct route_query *q, const struct route_entry *v, size_t n,
                          struct route_decision *out);
/* Fills e from r (e->rec = r). */
void route_entry_set(struct route_entry *e, const struct route_record *r);
/* FNV-1a of s, the hash route_entry uses. */
uint32_t route_hash(const char *s);

/* "local", "forward", "queue". */
const char *route_action_name(enum route_action a);

#endif
