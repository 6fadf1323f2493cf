/* Leader election with a Lease (lease.h; kubernetes-api.md §13). The decision
 * (kube_lease_decide), parsing and bodies are pure; the thread below only
 * does the requests and calls the callbacks on transitions. */
#include "agent/runtime/kube/lease.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "agentbox/common.h"
#include "agentbox/log.h"

#define LEASE_NAME_MAX 253

struct kube_lease {
    struct kube_client *client;
    char ns[KUBE_NS_MAX];
    char name[LEASE_NAME_MAX + 1];
    char identity[KUBE_LEASE_HOLDER_MAX];
    int64_t lease_ms, renew_deadline_ms, retry_ms;
    void (*on_started)(void *arg);
    void (*on_stopped)(void *arg);
    void *arg;

    char item_url[KUBE_URL_MAX];       /* .../leases/<name> */
    char collection_url[KUBE_URL_MAX]; /* .../leases */

    /* election thread only */
    struct kube_lease_observed obs;
    int64_t last_renew_ms; /* monotonic time of our last successful write */

    atomic_bool leading;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop; /* under mu */
    pthread_t thread;
};

/* --- pure parts ------------------------------------------------------------------------ */

static bool record_equal(const struct kube_lease_record *a, const struct kube_lease_record *b)
{
    /* the spec, not resourceVersion: a write that changed nothing is not news */
    return strcmp(a->holder, b->holder) == 0 && a->duration_s == b->duration_s &&
           strcmp(a->acquire_time, b->acquire_time) == 0 &&
           strcmp(a->renew_time, b->renew_time) == 0 && a->transitions == b->transitions;
}

enum kube_lease_action kube_lease_decide(struct kube_lease_observed *obs,
                                         const struct kube_lease_record *fetched,
                                         const char *identity, int64_t now_ms)
{
    if (!fetched) {
        obs->seen = false;
        return KUBE_LEASE_CREATE;
    }
    if (!obs->seen || !record_equal(&obs->rec, fetched)) {
        obs->rec = *fetched;
        obs->at_ms = now_ms;
        obs->seen = true;
    } else {
        ab_strlcpy(obs->rec.rv, fetched->rv, sizeof(obs->rec.rv));
    }
    if (strcmp(fetched->holder, identity) == 0)
        return KUBE_LEASE_RENEW;
    /* expiry by how long the record has been unchanged here, never by renewTime
     * against our clock: the nodes' clocks may disagree */
    if (fetched->holder[0] && obs->at_ms + (int64_t)fetched->duration_s * 1000 > now_ms)
        return KUBE_LEASE_WAIT;
    return KUBE_LEASE_TAKE;
}

static int copy_str(const json_t *o, const char *key, char *out, size_t outlen, const char *field,
                    char *err, size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    out[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        snprintf(err, errlen, "lease: %s must be a string", field);
        return AB_EINVAL;
    }
    if (ab_strlcpy(out, json_string_value(v), outlen) >= outlen) {
        snprintf(err, errlen, "lease: %s is longer than %zu bytes", field, outlen - 1);
        return AB_EINVAL;
    }
    return 0;
}

static int copy_int(const json_t *o, const char *key, int32_t *out, const char *field, char *err,
                    size_t errlen)
{
    const json_t *v = json_object_get(o, key);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
        snprintf(err, errlen, "lease: %s must be a non-negative 32-bit integer", field);
        return AB_EINVAL;
    }
    *out = (int32_t)json_integer_value(v);
    return 0;
}

int kube_lease_parse(const json_t *lease, struct kube_lease_record *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const json_t *md = json_object_get(lease, "metadata");
    const json_t *spec = json_object_get(lease, "spec");
    if (!json_is_object(lease) || !json_is_object(md)) {
        snprintf(err, errlen, "lease: not an object with metadata");
        return AB_EINVAL;
    }
    int rc = copy_str(md, "resourceVersion", out->rv, sizeof(out->rv), "metadata.resourceVersion",
                      err, errlen);
    if (rc < 0)
        return rc;
    if (!out->rv[0]) {
        snprintf(err, errlen, "lease: metadata.resourceVersion is missing");
        return AB_EINVAL;
    }
    if (!spec || json_is_null(spec))
        return 0; /* a Lease nobody wrote a spec into: free to take */
    if (!json_is_object(spec)) {
        snprintf(err, errlen, "lease: spec must be an object");
        return AB_EINVAL;
    }
    if ((rc = copy_str(spec, "holderIdentity", out->holder, sizeof(out->holder),
                       "spec.holderIdentity", err, errlen)) < 0 ||
        (rc = copy_int(spec, "leaseDurationSeconds", &out->duration_s, "spec.leaseDurationSeconds",
                       err, errlen)) < 0 ||
        (rc = copy_str(spec, "acquireTime", out->acquire_time, sizeof(out->acquire_time),
                       "spec.acquireTime", err, errlen)) < 0 ||
        (rc = copy_str(spec, "renewTime", out->renew_time, sizeof(out->renew_time),
                       "spec.renewTime", err, errlen)) < 0 ||
        (rc = copy_int(spec, "leaseTransitions", &out->transitions, "spec.leaseTransitions", err,
                       errlen)) < 0)
        return rc;
    return 0;
}

json_t *kube_lease_body(const char *ns, const char *name, const char *identity, int32_t duration_s,
                        enum kube_lease_action action, bool release,
                        const struct kube_lease_record *cur, int64_t wall_ms)
{
    char now[32];
    kube_time_format(wall_ms, true, now);
    const char *acquire = now;
    int32_t transitions = 0;
    if (cur && (action == KUBE_LEASE_RENEW || release)) {
        /* we held it already: acquireTime and the transition count stay */
        if (cur->acquire_time[0])
            acquire = cur->acquire_time;
        transitions = cur->transitions;
    } else if (cur && action == KUBE_LEASE_TAKE) {
        transitions = cur->transitions + 1;
    }
    json_t *md = json_pack("{s:s, s:s}", "name", name, "namespace", ns);
    if (md && cur && cur->rv[0])
        json_object_set_new(md, "resourceVersion", json_string(cur->rv));
    /* a release leaves a 1 s lease with no holder: followers take it at once */
    json_t *spec = json_pack("{s:s, s:i, s:s, s:s, s:i}", "holderIdentity", release ? "" : identity,
                             "leaseDurationSeconds", release ? 1 : (int)duration_s, "acquireTime",
                             acquire, "renewTime", now, "leaseTransitions", (int)transitions);
    if (!md || !spec) {
        json_decref(md);
        json_decref(spec);
        return NULL;
    }
    return json_pack("{s:s, s:s, s:o, s:o}", "apiVersion", "coordination.k8s.io/v1", "kind",
                     "Lease", "metadata", md, "spec", spec);
}

/* --- the election thread ----------------------------------------------------------------- */

enum tick { TICK_LEADER, TICK_FOLLOWER, TICK_FAILED };

static int send_json(struct kube_lease *l, const char *method, const char *url, json_t *body,
                     struct kube_response *resp)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !text)
        return AB_ENOMEM;
    int rc = kube_request(l->client, method, url, text ? "application/json" : NULL, text,
                          text ? strlen(text) : 0, resp);
    free(text);
    return rc;
}

/* Our write went through: what the server stored is what we saw last. */
static void note_written(struct kube_lease *l, const struct kube_response *resp, int64_t now)
{
    json_t *o = json_loadb(resp->body ? resp->body : "", resp->len, 0, NULL);
    struct kube_lease_record rec;
    char err[128];
    if (o && kube_lease_parse(o, &rec, err, sizeof(err)) == 0) {
        l->obs.rec = rec;
        l->obs.at_ms = now;
        l->obs.seen = true;
    }
    json_decref(o);
    l->last_renew_ms = now;
}

static enum tick write_lease(struct kube_lease *l, enum kube_lease_action action,
                             const struct kube_lease_record *cur, int64_t now)
{
    int32_t dur = (int32_t)(l->lease_ms / 1000 ? l->lease_ms / 1000 : 1);
    json_t *body =
        kube_lease_body(l->ns, l->name, l->identity, dur, action, false, cur, ab_wall_ms());
    if (!body)
        return TICK_FAILED;
    struct kube_response resp;
    int rc = send_json(l, action == KUBE_LEASE_CREATE ? "POST" : "PUT",
                       action == KUBE_LEASE_CREATE ? l->collection_url : l->item_url, body, &resp);
    json_decref(body);
    enum tick t = TICK_FAILED;
    if (rc == 0 && resp.code / 100 == 2) {
        note_written(l, &resp, now);
        t = TICK_LEADER;
    } else if (rc == 0 && resp.code == 409) {
        /* AlreadyExists on create, Conflict on update: another candidate wrote first */
        t = TICK_FOLLOWER;
    } else {
        char code[24];
        snprintf(code, sizeof(code), "%ld", rc == 0 ? resp.code : (long)rc);
        LOG_WARN("kube lease: cannot write the Lease", "name", l->name, "namespace", l->ns,
                 rc == 0 ? "code" : "error", rc == 0 ? code : ab_strerror(rc), "reason",
                 resp.status.reason);
    }
    kube_response_clear(&resp);
    return t;
}

static enum tick tick(struct kube_lease *l)
{
    struct kube_response resp;
    int rc = kube_request(l->client, "GET", l->item_url, NULL, NULL, 0, &resp);
    int64_t now = ab_now_ms();
    enum tick t = TICK_FAILED;
    if (rc != 0 || (resp.code != 200 && resp.code != 404)) {
        char code[24];
        snprintf(code, sizeof(code), "%ld", rc == 0 ? resp.code : (long)rc);
        LOG_WARN("kube lease: cannot read the Lease", "name", l->name, "namespace", l->ns,
                 rc == 0 ? "code" : "error", rc == 0 ? code : ab_strerror(rc), "reason",
                 resp.status.reason);
        kube_response_clear(&resp);
        return TICK_FAILED;
    }
    if (resp.code == 404) {
        kube_response_clear(&resp);
        kube_lease_decide(&l->obs, NULL, l->identity, now);
        return write_lease(l, KUBE_LEASE_CREATE, NULL, now);
    }
    json_t *o = json_loadb(resp.body, resp.len, 0, NULL);
    kube_response_clear(&resp);
    struct kube_lease_record rec;
    char err[256];
    if (!o || kube_lease_parse(o, &rec, err, sizeof(err)) < 0) {
        LOG_WARN("kube lease: unreadable Lease", "name", l->name, "namespace", l->ns, "error",
                 o ? err : "not JSON");
        json_decref(o);
        return TICK_FAILED;
    }
    json_decref(o);
    enum kube_lease_action a = kube_lease_decide(&l->obs, &rec, l->identity, now);
    if (a == KUBE_LEASE_WAIT)
        t = TICK_FOLLOWER;
    else
        t = write_lease(l, a, &rec, now);
    return t;
}

static void set_leading(struct kube_lease *l, bool on)
{
    if (atomic_load(&l->leading) == on)
        return;
    atomic_store(&l->leading, on);
    LOG_INFO(on ? "kube lease: started leading" : "kube lease: stopped leading", "name", l->name,
             "namespace", l->ns, "identity", l->identity);
    if (on && l->on_started)
        l->on_started(l->arg);
    else if (!on && l->on_stopped)
        l->on_stopped(l->arg);
}

static uint64_t rnd64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
        v = (uint64_t)ab_now_us() * 6364136223846793005ULL;
    return v;
}

/* Sleeps ms unless stopped first; true when stopped. */
static bool nap(struct kube_lease *l, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &ts) != ETIMEDOUT) {
    }
    bool stop = l->stop;
    pthread_mutex_unlock(&l->mu);
    return stop;
}

static void *run(void *arg)
{
    struct kube_lease *l = arg;
    for (;;) {
        enum tick t = tick(l);
        int64_t now = ab_now_ms();
        if (t == TICK_LEADER)
            set_leading(l, true);
        else if (t == TICK_FOLLOWER)
            set_leading(l, false); /* someone else holds it: a leader lost it */
        else if (atomic_load(&l->leading) && now - l->last_renew_ms >= l->renew_deadline_ms)
            set_leading(l, false); /* could not renew in time: others may take it now */
        /* RetryPeriod jittered up to ×1.2 so candidates do not move in step */
        int64_t wait = l->retry_ms + (int64_t)(rnd64() % (uint64_t)(l->retry_ms / 5 + 1));
        if (nap(l, wait))
            break;
    }
    return NULL;
}

/* Writes holder "" so a follower need not wait out the duration. Best effort. */
static void release(struct kube_lease *l)
{
    struct kube_response resp;
    if (kube_request(l->client, "GET", l->item_url, NULL, NULL, 0, &resp) != 0 ||
        resp.code != 200) {
        kube_response_clear(&resp);
        return;
    }
    json_t *o = json_loadb(resp.body, resp.len, 0, NULL);
    kube_response_clear(&resp);
    struct kube_lease_record rec;
    char err[256];
    if (!o || kube_lease_parse(o, &rec, err, sizeof(err)) < 0 ||
        strcmp(rec.holder, l->identity) != 0) {
        json_decref(o);
        return; /* not ours any more: nothing to release */
    }
    json_decref(o);
    json_t *body = kube_lease_body(l->ns, l->name, l->identity, rec.duration_s, KUBE_LEASE_RENEW,
                                   true, &rec, ab_wall_ms());
    if (body && send_json(l, "PUT", l->item_url, body, &resp) == 0) {
        if (resp.code / 100 != 2) {
            char code[24];
            snprintf(code, sizeof(code), "%ld", resp.code);
            LOG_WARN("kube lease: cannot release the Lease", "name", l->name, "namespace", l->ns,
                     "code", code);
        }
        kube_response_clear(&resp);
    }
    json_decref(body);
}

/* --- lifecycle ----------------------------------------------------------------------------- */

struct kube_lease *kube_lease_new(const struct kube_lease_deps *d, char *err, size_t errlen)
{
    if (!d->client) {
        snprintf(err, errlen, "lease: a kube client is required");
        return NULL;
    }
    const struct {
        const char *v;
        size_t max;
        const char *what;
    } strs[] = {
        {d->ns, KUBE_NS_MAX - 1, "namespace"},
        {d->name, LEASE_NAME_MAX, "name"},
        {d->identity, KUBE_LEASE_HOLDER_MAX - 1, "identity"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(strs); i++)
        if (!strs[i].v || !*strs[i].v || strlen(strs[i].v) > strs[i].max) {
            snprintf(err, errlen, "lease: %s must be 1 to %zu characters", strs[i].what,
                     strs[i].max);
            return NULL;
        }
    int64_t lease = d->lease_duration_ms ? d->lease_duration_ms : 15000;
    int64_t renew = d->renew_deadline_ms ? d->renew_deadline_ms : 10000;
    int64_t retry = d->retry_period_ms ? d->retry_period_ms : 2000;
    /* client-go's rule: a leader must get several renew attempts before the
     * lease can expire under it */
    if (lease < 1000 || lease % 1000 != 0) {
        snprintf(err, errlen, "lease: lease duration must be whole seconds, at least 1 s");
        return NULL;
    }
    if (!(lease > renew && renew * 10 > retry * 12 && retry > 0)) {
        snprintf(err, errlen,
                 "lease: durations must satisfy lease duration (%lld ms) > renew deadline (%lld "
                 "ms) > 1.2 x retry period (%lld ms)",
                 (long long)lease, (long long)renew, (long long)retry);
        return NULL;
    }
    struct kube_lease *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, errlen, "lease: out of memory");
        return NULL;
    }
    l->client = d->client;
    ab_strlcpy(l->ns, d->ns, sizeof(l->ns));
    ab_strlcpy(l->name, d->name, sizeof(l->name));
    ab_strlcpy(l->identity, d->identity, sizeof(l->identity));
    l->lease_ms = lease;
    l->renew_deadline_ms = renew;
    l->retry_ms = retry;
    l->on_started = d->on_started_leading;
    l->on_stopped = d->on_stopped_leading;
    l->arg = d->arg;
    struct kube_ref item = {.group = "coordination.k8s.io",
                            .version = "v1",
                            .ns = l->ns,
                            .resource = "leases",
                            .name = l->name};
    struct kube_ref coll = item;
    coll.name = NULL;
    const char *server = kube_client_server(l->client);
    if (kube_url(l->item_url, sizeof(l->item_url), server, &item, NULL, err, errlen) < 0 ||
        kube_url(l->collection_url, sizeof(l->collection_url), server, &coll, NULL, err, errlen) <
            0) {
        free(l);
        return NULL;
    }
    atomic_init(&l->leading, false);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        snprintf(err, errlen, "lease: cannot start the election thread");
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    return l;
}

void kube_lease_free(struct kube_lease *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    if (atomic_load(&l->leading)) {
        release(l);
        set_leading(l, false);
    }
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

bool kube_lease_is_leader(const struct kube_lease *l)
{
    return l && atomic_load(&((struct kube_lease *)l)->leading);
}
