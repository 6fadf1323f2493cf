/* The federation registry (DESIGN §6), fed_registry.c: the latest capacity record per
 * (cluster, namespace, env, member pool), fed by REPORT frames over the
 * tunnel, authoritative for routing, snapshotted to PostgreSQL
 * (federation_capacity) for the console.
 *
 * REPORT payload (agent → hub, JSON, at most TUN_REPORT_MAX bytes):
 *   {"full": true, "records": [{"namespace", "env", "pool", "scalingGroup"?,
 *    "idle", "running"?, "pending"?, "desired"?, "autoscaling"?, "headroom"?,
 *    "saturatedForMs"?, "claims"?, "ageMs"?}, ...]}
 * claims is the member's count of creates ever queued on it: what pays back
 * the hub's reservations (fed_registry_apply).
 * The cluster is the session's, never a field of the report (a "cluster"
 * field is ignored). full (default true) replaces the cluster's whole set;
 * full=false only upserts. A report is applied whole or not at all: more
 * than FED_REPORT_RECORDS_MAX records or any malformed field refuses it with
 * a message naming the record index and the field.
 *
 * Freshness is judged on receipt: sampled = received - ageMs on the hub's
 * monotonic clock, fresh while now - sampled <= 30 s. A cluster's records
 * are dropped the moment its session ends; stale ones are swept every 5 s.
 *
 * Everything runs on the hub's loop thread; the registry itself is plain
 * memory with no clock, so tests and benchmarks drive it directly. */
#ifndef AGENTBOX_HUB_FED_REGISTRY_H
#define AGENTBOX_HUB_FED_REGISTRY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hub/route.h"

#define FED_REPORT_RECORDS_MAX 10000 /* per REPORT */
#define FED_RECORDS_MAX 500000       /* whole registry; a report past it is refused */
#define FED_COUNT_MAX 1000000        /* idle, running, pending, desired, headroom */
#define FED_AGE_MAX_MS 86400000      /* ageMs and saturatedForMs */
#define FED_CLAIMS_MAX INT64_MAX     /* claims: a count that only grows */
#define FED_SWEEP_MS 5000            /* stale sweep and snapshot cadence */

struct fed_registry;

/* metrics: keep agentbox_federation_env_{idle,running,desired} series in the
 * default registry (the hub does; tests and benchmarks need not). */
struct fed_registry *fed_registry_new(bool metrics);
void fed_registry_free(struct fed_registry *g);

/* Parses and validates a REPORT. On success *out is a malloc'd array of *n
 * records (caller frees) with sampled_ms = now_ms - ageMs and cluster set,
 * and *full says whether it replaces the cluster's set. AB_EINVAL or
 * AB_ELIMIT with the reason in err; nothing is allocated then. */
int fed_report_parse(const json_t *msg, const char *cluster, int64_t now_ms,
                     struct route_record **out, size_t *n, bool *full, char *err, size_t errlen);

/* Applies a parsed report of cluster (v as fed_report_parse made it). A
 * record whose key was already present replaces it. Its reservations are
 * paid back by how far the member's claims moved (oldest first); one that
 * two reports in a row did not pay (its forward never became a claim, or
 * was claimed after the sample) is let go. A record without claims, or
 * whose claims went backwards (the pool was made anew), clears them all.
 * Returns 0 or AB_ELIMIT (registry full: nothing applied) / AB_ENOMEM. */
int fed_registry_apply(struct fed_registry *g, const char *cluster, const struct route_record *v,
                       size_t n, bool full, char *err, size_t errlen);
/* Parse + apply, for the tunnel hook and the fuzzer. */
int fed_registry_report(struct fed_registry *g, const char *cluster, const json_t *msg,
                        int64_t now_ms, char *err, size_t errlen);
/* Forgets every record of cluster (its session ended). Returns how many. */
size_t fed_registry_drop_cluster(struct fed_registry *g, const char *cluster);
/* Forgets records that are no longer fresh. Returns how many. O(records):
 * the hub's loop uses fed_registry_sweep_slice instead. */
size_t fed_registry_expire(struct fed_registry *g, int64_t now_ms);

/* One slice of a pass over the registry, so a pass over 100,000 records
 * never holds the loop for long: from *cursor (0 starts a pass) whole
 * cluster buckets until at least max records were looked at, stale ones
 * forgotten (*expired counts them), fresh(arg, r) called for the rest
 * (fresh may be NULL; it must not change the registry). Returns true when
 * the pass reached the end (*cursor is 0 again). Records added or dropped
 * between slices are seen or not: a pass is no snapshot of one instant. */
bool fed_registry_sweep_slice(struct fed_registry *g, size_t *cursor, size_t max, int64_t now_ms,
                              void (*fresh)(void *arg, const struct route_record *r), void *arg,
                              size_t *expired);

/* The routing index of (ns, env), fresh records or not (entry.rec is the
 * record): borrowed until the next change. */
size_t fed_registry_env(struct fed_registry *g, const char *ns, const char *env,
                        const struct route_entry **out);
/* route_decide over (q->ns, q->env); a forward reserves one idle on the
 * chosen member until a report counts its claim, so a burst spreads. The hub's own
 * front door (/e2b) calls it with q->local NULL: steps 2, 4, then parking on
 * the env's first cluster by id (d.cluster, "" when no cluster reports it).
 * Callers go through federation_place. */
void fed_registry_decide(struct fed_registry *g, const struct route_query *q,
                         struct route_decision *out);
/* Reserves one idle on r (a record of this registry). */
void fed_registry_reserve(struct fed_registry *g, const struct route_record *r);

size_t fed_registry_count(const struct fed_registry *g);
/* Calls fn for every record (any order); fn must not change the registry. */
void fed_registry_each(struct fed_registry *g, void (*fn)(void *arg, const struct route_record *r),
                       void *arg);

#endif
