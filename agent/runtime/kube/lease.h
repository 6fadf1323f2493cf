/* Leader election with a coordination.k8s.io/v1 Lease (kubernetes-api.md §13,
 * client-go semantics): every retry period (jittered ×1.2) GET the Lease; 404
 * → create it holding it; a record held by someone else is left alone until it
 * has been unchanged, as observed on the local clock, for its
 * leaseDurationSeconds; otherwise PUT it with the fetched resourceVersion (a
 * 409 means someone else wrote first: not leader). The leader renews every
 * retry period and stops leading when it could not renew within the renew
 * deadline. kube_lease_free releases a held Lease (holder "", duration 1 s) so
 * a follower takes over at once. There is no fencing: an old leader may act
 * briefly after losing the Lease, so every write it makes must still use
 * optimistic concurrency.
 *
 * Threads: the election runs on a thread of its own (kube_request blocks);
 * on_started_leading / on_stopped_leading are called on that thread, never
 * concurrently, and must not block (post to the loop). kube_lease_is_leader
 * may be called from any thread. */
#ifndef AGENT_RUNTIME_KUBE_LEASE_H
#define AGENT_RUNTIME_KUBE_LEASE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/runtime/kube/client.h"

#define KUBE_LEASE_HOLDER_MAX 256
#define KUBE_LEASE_RV_MAX 64

struct kube_lease_deps {
    struct kube_client *client; /* borrowed; must outlive the lease */
    const char *ns;             /* the Lease's namespace (the agent's own) */
    const char *name;           /* the Lease's name */
    const char *identity;       /* unique per process: e.g. pod name + "_" + random */
    int64_t lease_duration_ms;  /* 0 → 15000 */
    int64_t renew_deadline_ms;  /* 0 → 10000 */
    int64_t retry_period_ms;    /* 0 → 2000 */
    void (*on_started_leading)(void *arg);
    void (*on_stopped_leading)(void *arg);
    void *arg;
};

struct kube_lease;

/* Checks deps (LeaseDuration > RenewDeadline > 1.2 × RetryPeriod, names
 * valid) and starts the election thread. NULL with err naming the field on
 * refusal. The strings are copied. */
struct kube_lease *kube_lease_new(const struct kube_lease_deps *deps, char *err, size_t errlen);
/* Stops the thread; if leading, releases the Lease and calls
 * on_stopped_leading (on the calling thread) before returning. NULL is a no-op. */
void kube_lease_free(struct kube_lease *l);
bool kube_lease_is_leader(const struct kube_lease *l);

/* --- the decision, pure (unit-tested) -------------------------------------------------- */

/* The fields of a Lease's spec the election reads, and its resourceVersion. */
struct kube_lease_record {
    char holder[KUBE_LEASE_HOLDER_MAX];
    int32_t duration_s;
    char acquire_time[32];
    char renew_time[32];
    int32_t transitions;
    char rv[KUBE_LEASE_RV_MAX];
};

/* What a candidate last saw and when, on its own monotonic clock. */
struct kube_lease_observed {
    bool seen;
    struct kube_lease_record rec;
    int64_t at_ms;
};

enum kube_lease_action {
    KUBE_LEASE_WAIT,   /* someone else holds an unexpired Lease */
    KUBE_LEASE_CREATE, /* there is none: POST one */
    KUBE_LEASE_RENEW,  /* ours: PUT renewTime (acquireTime, transitions kept) */
    KUBE_LEASE_TAKE,   /* expired or released: PUT as ours, acquireTime now, transitions + 1 */
};

/* fetched NULL = the GET answered 404. Updates obs (a changed record restarts
 * its expiry clock at now_ms) and says what to do. */
enum kube_lease_action kube_lease_decide(struct kube_lease_observed *obs,
                                         const struct kube_lease_record *fetched,
                                         const char *identity, int64_t now_ms);

/* A Lease object (JSON) → record. AB_EINVAL naming the field when it is not
 * a Lease spec we can read; absent optional fields read as empty / 0. */
int kube_lease_parse(const json_t *lease, struct kube_lease_record *out, char *err, size_t errlen);

/* The body to send for action (CREATE, RENEW or TAKE) or, with release, the
 * release write (holder "", duration 1 s). cur is the fetched record (NULL for
 * CREATE); wall_ms is the wall clock for the MicroTimes. Caller frees. */
json_t *kube_lease_body(const char *ns, const char *name, const char *identity, int32_t duration_s,
                        enum kube_lease_action action, bool release,
                        const struct kube_lease_record *cur, int64_t wall_ms);

#endif
