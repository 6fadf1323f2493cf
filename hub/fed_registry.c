/* The federation registry and the rules of a REPORT: plain memory, no clock,
 * no I/O. See fed_registry.h; the wiring into the hub is federation.c.
 *
 * Three chained hash tables over one set of records: by full key (cluster,
 * namespace, env, pool) for upserts, by (namespace, env) for routing (an
 * array of record pointers, so a decision scans only the clusters that
 * report the env), and by cluster (a list, so a session's end or a full
 * report drops that cluster's records without a scan). Bucket counts are
 * fixed and sized for FED_RECORDS_MAX. */
#include "hub/fed_registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"

#define REC_BUCKETS (1u << 18)
#define ENV_BUCKETS (1u << 16)
#define CL_BUCKETS (1u << 14)

struct fed_env;
struct fed_cluster;

struct fed_rec {
    struct route_record r; /* first: the env index points at it */
    uint32_t hash;
    struct fed_rec *hnext;
    struct fed_env *env;
    size_t env_idx;
    struct fed_cluster *cl;
    struct fed_rec *cprev, *cnext;
    uint64_t gen;
    /* r.reserved split by age: made since the last report (fresh) and
     * carried over one report unpaid (carried); the next report lets the
     * carried ones go */
    int32_t fresh, carried;
};

struct fed_env {
    char ns[ROUTE_NAME_MAX + 1];
    char env[ROUTE_NAME_MAX + 1];
    uint32_t hash;
    struct fed_env *hnext;
    struct route_entry *v; /* the routing index: compact copies of the records */
    size_t n, cap;
};

struct fed_cluster {
    char id[AB_CLUSTER_ID_BUF];
    uint32_t hash;
    struct fed_cluster *hnext;
    struct fed_rec *head;
    size_t n;
};

struct fed_registry {
    bool metrics;
    struct metric_family *m_idle, *m_running, *m_desired;
    struct fed_rec **rt;
    struct fed_env **et;
    struct fed_cluster **ct;
    size_t n;
    uint64_t gen;
};

/* --- hashing ------------------------------------------------------------------------- */

static uint32_t fnv(uint32_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return (h ^ 0xffu) * 16777619u; /* separator, so ("ab","c") != ("a","bc") */
}

static uint32_t key_hash(const char *cluster, const char *ns, const char *env, const char *pool)
{
    return fnv(fnv(fnv(fnv(2166136261u, cluster), ns), env), pool);
}

static uint32_t env_hash(const char *ns, const char *env)
{
    return fnv(fnv(2166136261u, ns), env);
}

/* --- metrics ------------------------------------------------------------------------- */

static void metrics_put(struct fed_registry *g, const struct route_record *r)
{
    if (!g->metrics)
        return;
    const char *lv[] = {r->cluster, r->ns, r->env, r->pool, r->group};
    metrics_set(g->m_idle, lv, r->idle);
    metrics_set(g->m_running, lv, r->running);
    metrics_set(g->m_desired, lv, r->desired);
}

static void metrics_drop(struct fed_registry *g, const struct route_record *r)
{
    if (!g->metrics)
        return;
    const char *lv[] = {r->cluster, r->ns, r->env, r->pool, r->group};
    metrics_remove(g->m_idle, lv);
    metrics_remove(g->m_running, lv);
    metrics_remove(g->m_desired, lv);
}

/* --- registry -------------------------------------------------------------------------- */

struct fed_registry *fed_registry_new(bool metrics)
{
    struct fed_registry *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->rt = calloc(REC_BUCKETS, sizeof(*g->rt));
    g->et = calloc(ENV_BUCKETS, sizeof(*g->et));
    g->ct = calloc(CL_BUCKETS, sizeof(*g->ct));
    if (!g->rt || !g->et || !g->ct) {
        fed_registry_free(g);
        return NULL;
    }
    g->metrics = metrics;
    if (metrics) {
        static const char *const labels[] = {"cluster", "namespace", "env",
                                             "member",  "group",     NULL};
        struct metrics_registry *mr = metrics_default();
        g->m_idle = metrics_register(mr, "agentbox_federation_env_idle",
                                     "Idle sandboxes of a member pool, as last reported.",
                                     METRIC_GAUGE, labels, NULL, 0);
        g->m_running = metrics_register(mr, "agentbox_federation_env_running",
                                        "Running sandboxes of a member pool, as last reported.",
                                        METRIC_GAUGE, labels, NULL, 0);
        g->m_desired = metrics_register(mr, "agentbox_federation_env_desired",
                                        "Desired sandboxes of a member pool, as last reported.",
                                        METRIC_GAUGE, labels, NULL, 0);
    }
    return g;
}

static void rec_free_all(struct fed_registry *g)
{
    for (size_t b = 0; b < CL_BUCKETS; b++) {
        struct fed_cluster *c = g->ct[b];
        while (c) {
            struct fed_cluster *cn = c->hnext;
            for (struct fed_rec *r = c->head; r;) {
                struct fed_rec *rn = r->cnext;
                metrics_drop(g, &r->r);
                free(r);
                r = rn;
            }
            free(c);
            c = cn;
        }
    }
    for (size_t b = 0; b < ENV_BUCKETS; b++) {
        struct fed_env *e = g->et[b];
        while (e) {
            struct fed_env *en = e->hnext;
            free(e->v);
            free(e);
            e = en;
        }
    }
}

void fed_registry_free(struct fed_registry *g)
{
    if (!g)
        return;
    if (g->rt && g->et && g->ct)
        rec_free_all(g);
    free(g->rt);
    free(g->et);
    free(g->ct);
    free(g);
}

static struct fed_rec *rec_find(struct fed_registry *g, uint32_t h, const struct route_record *k)
{
    for (struct fed_rec *r = g->rt[h & (REC_BUCKETS - 1)]; r; r = r->hnext)
        if (r->hash == h && strcmp(r->r.pool, k->pool) == 0 && strcmp(r->r.env, k->env) == 0 &&
            strcmp(r->r.ns, k->ns) == 0 && strcmp(r->r.cluster, k->cluster) == 0)
            return r;
    return NULL;
}

static struct fed_env *env_find(struct fed_registry *g, const char *ns, const char *env, uint32_t h)
{
    for (struct fed_env *e = g->et[h & (ENV_BUCKETS - 1)]; e; e = e->hnext)
        if (e->hash == h && strcmp(e->env, env) == 0 && strcmp(e->ns, ns) == 0)
            return e;
    return NULL;
}

static struct fed_cluster *cluster_find(struct fed_registry *g, const char *id, uint32_t h)
{
    for (struct fed_cluster *c = g->ct[h & (CL_BUCKETS - 1)]; c; c = c->hnext)
        if (c->hash == h && strcmp(c->id, id) == 0)
            return c;
    return NULL;
}

static void rec_delete(struct fed_registry *g, struct fed_rec *r)
{
    struct fed_rec **pp = &g->rt[r->hash & (REC_BUCKETS - 1)];
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;

    struct fed_env *e = r->env;
    e->n--;
    if (r->env_idx != e->n) {
        e->v[r->env_idx] = e->v[e->n];
        ((struct fed_rec *)(uintptr_t)e->v[r->env_idx].rec)->env_idx = r->env_idx;
    }
    if (e->n == 0) {
        struct fed_env **ep = &g->et[e->hash & (ENV_BUCKETS - 1)];
        while (*ep != e)
            ep = &(*ep)->hnext;
        *ep = e->hnext;
        free(e->v);
        free(e);
    }

    struct fed_cluster *c = r->cl;
    if (r->cprev)
        r->cprev->cnext = r->cnext;
    else
        c->head = r->cnext;
    if (r->cnext)
        r->cnext->cprev = r->cprev;
    if (--c->n == 0) {
        struct fed_cluster **cp = &g->ct[c->hash & (CL_BUCKETS - 1)];
        while (*cp != c)
            cp = &(*cp)->hnext;
        *cp = c->hnext;
        free(c);
    }
    metrics_drop(g, &r->r);
    free(r);
    g->n--;
}

/* A new record in all three tables; NULL when out of memory (nothing changed). */
static struct fed_rec *rec_insert(struct fed_registry *g, uint32_t h,
                                  const struct route_record *src)
{
    uint32_t eh = env_hash(src->ns, src->env), ch = fnv(2166136261u, src->cluster);
    struct fed_rec *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    struct fed_env *e = env_find(g, src->ns, src->env, eh);
    bool new_env = false;
    if (!e) {
        if (!(e = calloc(1, sizeof(*e)))) {
            free(r);
            return NULL;
        }
        ab_strlcpy(e->ns, src->ns, sizeof(e->ns));
        ab_strlcpy(e->env, src->env, sizeof(e->env));
        e->hash = eh;
        new_env = true;
    }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        struct route_entry *v = realloc(e->v, cap * sizeof(*v));
        if (!v) {
            if (new_env)
                free(e);
            free(r);
            return NULL;
        }
        e->v = v;
        e->cap = cap;
    }
    struct fed_cluster *c = cluster_find(g, src->cluster, ch);
    if (!c) {
        if (!(c = calloc(1, sizeof(*c)))) {
            if (new_env) {
                free(e->v);
                free(e);
            }
            free(r);
            return NULL;
        }
        ab_strlcpy(c->id, src->cluster, sizeof(c->id));
        c->hash = ch;
        c->hnext = g->ct[ch & (CL_BUCKETS - 1)];
        g->ct[ch & (CL_BUCKETS - 1)] = c;
    }
    if (new_env) {
        e->hnext = g->et[eh & (ENV_BUCKETS - 1)];
        g->et[eh & (ENV_BUCKETS - 1)] = e;
    }
    r->r = *src;
    r->hash = h;
    r->hnext = g->rt[h & (REC_BUCKETS - 1)];
    g->rt[h & (REC_BUCKETS - 1)] = r;
    r->env = e;
    r->env_idx = e->n;
    route_entry_set(&e->v[e->n++], &r->r);
    r->cl = c;
    r->cnext = c->head;
    if (c->head)
        c->head->cprev = r;
    c->head = r;
    c->n++;
    g->n++;
    return r;
}

/* What a report with the member's claims does to r's reservations (see
 * fed_registry.h): the claims since the last report pay the carried ones
 * first, then the fresh; carried ones still unpaid are let go, and fresh
 * ones still unpaid are carried to the next report. */
static void pay_back(struct fed_rec *r, int64_t claims)
{
    int64_t paid = claims - r->r.claims;
    if (claims < 0 || r->r.claims < 0 || paid < 0) {
        r->fresh = r->carried = 0;
        return;
    }
    paid -= paid < r->carried ? paid : r->carried;
    r->carried = r->fresh - (int32_t)(paid < r->fresh ? paid : r->fresh);
    r->fresh = 0;
}

int fed_registry_apply(struct fed_registry *g, const char *cluster, const struct route_record *v,
                       size_t n, bool full, char *err, size_t errlen)
{
    struct fed_cluster *c = cluster_find(g, cluster, fnv(2166136261u, cluster));
    size_t replaced = full && c ? c->n : 0;
    if (g->n - replaced + n > FED_RECORDS_MAX) {
        snprintf(err, errlen,
                 "the federation registry holds %zu records; %zu more would pass its limit of %d",
                 g->n, n, FED_RECORDS_MAX);
        return AB_ELIMIT;
    }
    uint64_t gen = ++g->gen;
    for (size_t i = 0; i < n; i++) {
        struct route_record k = v[i];
        ab_strlcpy(k.cluster, cluster, sizeof(k.cluster));
        k.reserved = 0;
        uint32_t h = key_hash(k.cluster, k.ns, k.env, k.pool);
        struct fed_rec *r = rec_find(g, h, &k);
        if (r) {
            if (strcmp(r->r.group, k.group) != 0)
                metrics_drop(g, &r->r); /* the group is a label: its old series goes */
            pay_back(r, k.claims);
            k.reserved = r->carried;
            r->r = k;
            route_entry_set(&r->env->v[r->env_idx], &r->r);
        } else if (!(r = rec_insert(g, h, &k))) {
            snprintf(err, errlen, "out of memory storing capacity record %zu", i);
            return AB_ENOMEM; /* what was applied stays: it is newer than before */
        }
        r->gen = gen;
        metrics_put(g, &r->r);
    }
    if (full && (c = cluster_find(g, cluster, fnv(2166136261u, cluster)))) {
        for (struct fed_rec *r = c->head; r;) {
            struct fed_rec *next = r->cnext;
            bool last = c->n == 1;
            if (r->gen != gen) {
                rec_delete(g, r);
                if (last)
                    break; /* the cluster entry went with its last record */
            }
            r = next;
        }
    }
    return 0;
}

size_t fed_registry_drop_cluster(struct fed_registry *g, const char *cluster)
{
    struct fed_cluster *c = cluster_find(g, cluster, fnv(2166136261u, cluster));
    size_t n = 0;
    while (c) {
        bool last = c->n == 1;
        rec_delete(g, c->head);
        n++;
        if (last)
            break;
    }
    return n;
}

/* Sweeps one bucket: stale records go, fresh ones are handed to fresh().
 * Returns how many records it looked at. */
static size_t sweep_bucket(struct fed_registry *g, size_t b, int64_t now_ms,
                           void (*fresh)(void *arg, const struct route_record *r), void *arg,
                           size_t *expired)
{
    size_t seen = 0;
    struct fed_cluster *c = g->ct[b];
    while (c) {
        struct fed_cluster *cnext = c->hnext;
        for (struct fed_rec *r = c->head; r;) {
            struct fed_rec *next = r->cnext;
            bool last = c->n == 1;
            seen++;
            if (!route_is_fresh(&r->r, now_ms, ROUTE_TTL_MS)) {
                rec_delete(g, r);
                (*expired)++;
                if (last)
                    break; /* the cluster entry went with its last record */
            } else if (fresh) {
                fresh(arg, &r->r);
            }
            r = next;
        }
        c = cnext;
    }
    return seen;
}

bool fed_registry_sweep_slice(struct fed_registry *g, size_t *cursor, size_t max, int64_t now_ms,
                              void (*fresh)(void *arg, const struct route_record *r), void *arg,
                              size_t *expired)
{
    size_t b = *cursor, seen = 0;
    while (b < CL_BUCKETS && seen < max)
        seen += sweep_bucket(g, b++, now_ms, fresh, arg, expired);
    *cursor = b < CL_BUCKETS ? b : 0;
    return b >= CL_BUCKETS;
}

size_t fed_registry_expire(struct fed_registry *g, int64_t now_ms)
{
    size_t cursor = 0, n = 0;
    while (!fed_registry_sweep_slice(g, &cursor, SIZE_MAX, now_ms, NULL, NULL, &n))
        ;
    return n;
}

size_t fed_registry_env(struct fed_registry *g, const char *ns, const char *env,
                        const struct route_entry **out)
{
    struct fed_env *e = env_find(g, ns, env, env_hash(ns, env));
    *out = e ? e->v : NULL;
    return e ? e->n : 0;
}

void fed_registry_reserve(struct fed_registry *g, const struct route_record *r)
{
    (void)g;
    struct fed_rec *fr = (struct fed_rec *)(uintptr_t)r;
    if (fr->r.reserved < INT32_MAX) {
        fr->fresh++;
        fr->r.reserved++;
    }
    fr->env->v[fr->env_idx].reserved = fr->r.reserved;
}

void fed_registry_decide(struct fed_registry *g, const struct route_query *q,
                         struct route_decision *out)
{
    const struct route_entry *v = NULL;
    size_t n = q->ns && q->env ? fed_registry_env(g, q->ns, q->env, &v) : 0;
    route_decide_entries(q, v, n, out);
    if (out->action == ROUTE_FORWARD && out->chosen && route_available(out->chosen) > 0)
        fed_registry_reserve(g, out->chosen);
}

size_t fed_registry_count(const struct fed_registry *g)
{
    return g->n;
}

void fed_registry_each(struct fed_registry *g, void (*fn)(void *arg, const struct route_record *r),
                       void *arg)
{
    for (size_t b = 0; b < CL_BUCKETS; b++)
        for (struct fed_cluster *c = g->ct[b]; c; c = c->hnext)
            for (struct fed_rec *r = c->head; r; r = r->cnext)
                fn(arg, &r->r);
}

/* --- REPORT parsing -------------------------------------------------------------------- */

/* Names are Kubernetes-ish: letters, digits, '.', '_', '-'. */
static bool name_ok(const char *s, bool may_be_empty)
{
    size_t n = strlen(s);
    if (n == 0)
        return may_be_empty;
    if (n > ROUTE_NAME_MAX)
        return false;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

static int parse_name(json_t *o, const char *field, bool required, char *dst, size_t i, char *err,
                      size_t errlen)
{
    const char *s = "";
    char why[160];
    if (json_get_str(o, field, required, ROUTE_NAME_MAX, &s, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "records[%zu]: %s", i, why);
        return AB_EINVAL;
    }
    if (!name_ok(s, !required)) {
        snprintf(err, errlen,
                 "records[%zu]: field '%s' must be %s1..%d letters, digits, '.', '_' or '-'", i,
                 field, required ? "" : "empty or ", ROUTE_NAME_MAX);
        return AB_EINVAL;
    }
    ab_strlcpy(dst, s, ROUTE_NAME_MAX + 1);
    return 0;
}

static int parse_int(json_t *o, const char *field, bool required, int64_t min, int64_t max,
                     int64_t def, int64_t *out, size_t i, char *err, size_t errlen)
{
    char why[160];
    *out = def;
    if (json_get_int(o, field, required, min, max, out, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "records[%zu]: %s", i, why);
        return AB_EINVAL;
    }
    return 0;
}

static int parse_record(json_t *o, size_t i, int64_t now_ms, struct route_record *r, char *err,
                        size_t errlen)
{
    int64_t idle, running, pending, desired, headroom, sat, claims, age;
    bool autoscaling = false;
    char why[160];

    if (!json_is_object(o)) {
        snprintf(err, errlen, "records[%zu] must be an object", i);
        return AB_EINVAL;
    }
    memset(r, 0, sizeof(*r));
    if (parse_name(o, "namespace", true, r->ns, i, err, errlen) ||
        parse_name(o, "env", true, r->env, i, err, errlen) ||
        parse_name(o, "pool", true, r->pool, i, err, errlen) ||
        parse_name(o, "scalingGroup", false, r->group, i, err, errlen))
        return AB_EINVAL;
    if (json_get_bool(o, "autoscaling", false, &autoscaling, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "records[%zu]: %s", i, why);
        return AB_EINVAL;
    }
    /* an autoscaling member that omits its headroom is unbounded (reference §1.3) */
    if (parse_int(o, "idle", true, 0, FED_COUNT_MAX, 0, &idle, i, err, errlen) ||
        parse_int(o, "running", false, 0, FED_COUNT_MAX, 0, &running, i, err, errlen) ||
        parse_int(o, "pending", false, 0, FED_COUNT_MAX, 0, &pending, i, err, errlen) ||
        parse_int(o, "desired", false, 0, FED_COUNT_MAX, 0, &desired, i, err, errlen) ||
        parse_int(o, "headroom", false, -1, FED_COUNT_MAX, autoscaling ? -1 : 0, &headroom, i, err,
                  errlen) ||
        parse_int(o, "saturatedForMs", false, 0, FED_AGE_MAX_MS, 0, &sat, i, err, errlen) ||
        parse_int(o, "claims", false, 0, FED_CLAIMS_MAX, -1, &claims, i, err, errlen) ||
        parse_int(o, "ageMs", false, 0, FED_AGE_MAX_MS, 0, &age, i, err, errlen))
        return AB_EINVAL;
    r->idle = (int32_t)idle;
    r->running = (int32_t)running;
    r->pending = (int32_t)pending;
    r->desired = (int32_t)desired;
    r->autoscaling = autoscaling;
    r->headroom = (int32_t)headroom;
    r->saturated_for_ms = sat;
    r->claims = claims;
    r->sampled_ms = now_ms - age;
    return 0;
}

int fed_report_parse(const json_t *msg, const char *cluster, int64_t now_ms,
                     struct route_record **out, size_t *n, bool *full, char *err, size_t errlen)
{
    json_t *m = (json_t *)(uintptr_t)msg, *recs = NULL;
    char why[160];
    bool f = true;

    *out = NULL;
    *n = 0;
    if (!json_is_object(m)) {
        snprintf(err, errlen, "a capacity report must be a JSON object");
        return AB_EINVAL;
    }
    if (json_get_array(m, "records", true, &recs, why, sizeof(why)) != 0 ||
        json_get_bool(m, "full", false, &f, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "capacity report: %s", why);
        return AB_EINVAL;
    }
    size_t count = json_array_size(recs);
    if (count > FED_REPORT_RECORDS_MAX) {
        snprintf(err, errlen,
                 "capacity report has %zu records; at most %d per report (one per member pool)",
                 count, FED_REPORT_RECORDS_MAX);
        return AB_ELIMIT;
    }
    struct route_record *v = count ? calloc(count, sizeof(*v)) : NULL;
    if (count && !v) {
        snprintf(err, errlen, "out of memory parsing %zu capacity records", count);
        return AB_ENOMEM;
    }
    for (size_t i = 0; i < count; i++) {
        if (parse_record(json_array_get(recs, i), i, now_ms, &v[i], err, errlen) != 0) {
            free(v);
            return AB_EINVAL;
        }
        ab_strlcpy(v[i].cluster, cluster, sizeof(v[i].cluster));
    }
    *out = v;
    *n = count;
    *full = f;
    return 0;
}

int fed_registry_report(struct fed_registry *g, const char *cluster, const json_t *msg,
                        int64_t now_ms, char *err, size_t errlen)
{
    struct route_record *v;
    size_t n;
    bool full;
    int rc = fed_report_parse(msg, cluster, now_ms, &v, &n, &full, err, errlen);
    if (rc == 0) {
        rc = fed_registry_apply(g, cluster, v, n, full, err, errlen);
        free(v);
    }
    return rc;
}
