/* The five-step placement (see route.h). Everything is one pass over the
 * records handed in, so the registry's per-env index bounds the cost of a
 * decision by the clusters that report the env, not by the whole registry. */
#include "hub/route.h"

#include <stdio.h>
#include <string.h>

#include "agentbox/common.h"

bool route_is_fresh(const struct route_record *r, int64_t now_ms, int64_t ttl_ms)
{
    if (ttl_ms <= 0)
        ttl_ms = ROUTE_TTL_MS;
    return now_ms - r->sampled_ms <= ttl_ms;
}

bool route_group_matches(const char *want, const char *have)
{
    return want == NULL || want[0] == '\0' || strcmp(want, have) == 0;
}

/* The ordering rules, on plain numbers: route_compare reads them from the
 * records, entry_compare from the compact copies; one rule for both. */
static int available_of(int64_t idle, int64_t reserved)
{
    int64_t a = idle - (reserved > 0 ? reserved : 0);
    return a > 0 ? (int)a : 0;
}

/* -1 (unbounded) ranks above every finite headroom. */
static int64_t headroom_rank_of(bool autoscaling, int64_t headroom)
{
    if (!autoscaling)
        return 0;
    return headroom < 0 ? INT64_MAX : headroom;
}

/* More available first; with none available on either side, more headroom;
 * then cluster and pool names, for a stable order. */
static int rank_compare(int ia, int64_t ha, const struct route_record *ra, int ib, int64_t hb,
                        const struct route_record *rb)
{
    if ((ia > 0) != (ib > 0))
        return ia > 0 ? -1 : 1;
    if (ia > 0) {
        if (ia != ib)
            return ia > ib ? -1 : 1;
    } else if (ha != hb) {
        return ha > hb ? -1 : 1;
    }
    int c = strcmp(ra->cluster, rb->cluster);
    if (c != 0)
        return c;
    return strcmp(ra->pool, rb->pool);
}

int route_available(const struct route_record *r)
{
    return available_of(r->idle, r->reserved);
}

bool route_is_schedulable(const struct route_record *r)
{
    return route_available(r) > 0 || (r->autoscaling && r->headroom != 0);
}

int route_compare(const struct route_record *a, const struct route_record *b)
{
    return rank_compare(route_available(a), headroom_rank_of(a->autoscaling, a->headroom), a,
                        route_available(b), headroom_rank_of(b->autoscaling, b->headroom), b);
}

bool route_matches(const struct route_query *q, const struct route_record *r)
{
    return strcmp(r->env, q->env) == 0 && strcmp(r->ns, q->ns) == 0 &&
           route_group_matches(q->group, r->group);
}

static bool has_local(const struct route_query *q)
{
    return q->local != NULL && q->local[0] != '\0';
}

static bool is_local(const struct route_query *q, const struct route_record *r)
{
    return has_local(q) && strcmp(r->cluster, q->local) == 0;
}

/* What one pass over the records finds. */
struct scan {
    int local_idle;
    bool local_can_grow;
    const struct route_record *best;  /* best schedulable foreign record */
    const struct route_record *first; /* smallest cluster id among fresh matches */
    size_t best_index;                /* scan_entries: index of best in v */
};

static void scan(const struct route_query *q, const struct route_record *const *v, size_t n,
                 struct scan *s)
{
    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < n; i++) {
        const struct route_record *r = v[i];
        if (!route_matches(q, r) || !route_is_fresh(r, q->now_ms, q->ttl_ms))
            continue;
        if (!s->first || strcmp(r->cluster, s->first->cluster) < 0)
            s->first = r;
        if (is_local(q, r)) {
            if (r->idle > 0 && s->local_idle < INT32_MAX - r->idle)
                s->local_idle += r->idle;
            if (r->autoscaling && r->headroom != 0)
                s->local_can_grow = true;
            continue;
        }
        if (route_is_schedulable(r) && (!s->best || route_compare(r, s->best) < 0))
            s->best = r;
    }
}

int route_local_idle(const struct route_query *q, const struct route_record *const *v, size_t n)
{
    struct scan s;
    scan(q, v, n, &s);
    return s.local_idle;
}

bool route_local_can_grow(const struct route_query *q, const struct route_record *const *v,
                          size_t n)
{
    struct scan s;
    scan(q, v, n, &s);
    return s.local_can_grow;
}

const struct route_record *route_best_foreign(const struct route_query *q,
                                              const struct route_record *const *v, size_t n)
{
    struct scan s;
    scan(q, v, n, &s);
    return s.best;
}

static void set(struct route_decision *d, int step, enum route_action a, const char *cluster,
                const struct route_record *chosen)
{
    d->step = step;
    d->action = a;
    ab_strlcpy(d->cluster, cluster ? cluster : "", sizeof(d->cluster));
    d->chosen = chosen;
    if (chosen) {
        ab_strlcpy(d->pool, chosen->pool, sizeof(d->pool));
        d->idle = route_available(chosen);
    }
}

static void forward(struct route_decision *d, int step, const struct route_record *b)
{
    set(d, step, ROUTE_FORWARD, b->cluster, b);
    if (step == 2)
        snprintf(d->reason, sizeof(d->reason), "%s has %d idle in %s", b->cluster,
                 route_available(b), b->pool);
    else if (b->headroom < 0)
        snprintf(d->reason, sizeof(d->reason),
                 "nobody idle; %s/%s can scale up without bound and the origin cannot grow",
                 b->cluster, b->pool);
    else
        snprintf(d->reason, sizeof(d->reason),
                 "nobody idle; %s/%s can scale up by %d and the origin cannot grow", b->cluster,
                 b->pool, (int)b->headroom);
}

static void decide_from_scan(const struct route_query *q, const struct scan *sc,
                             struct route_decision *out)
{
    struct scan s = *sc;
    const struct route_record *b = s.best;

    if (!has_local(q)) {
        if (b && route_available(b) > 0)
            forward(out, 2, b);
        else if (b)
            forward(out, 4, b);
        else if (s.first) {
            set(out, 5, ROUTE_QUEUE, s.first->cluster, NULL);
            snprintf(out->reason, sizeof(out->reason),
                     "no cluster can serve; parked on %s, the env's first cluster by id",
                     s.first->cluster);
        } else {
            set(out, 5, ROUTE_QUEUE, "", NULL);
            snprintf(out->reason, sizeof(out->reason), "no cluster reports this env");
        }
        return;
    }
    int local_idle = q->local_idle >= 0 ? q->local_idle : s.local_idle;
    bool can_grow = q->local_can_grow >= 0 ? q->local_can_grow > 0 : s.local_can_grow;
    if (local_idle > 0) {
        set(out, 1, ROUTE_LOCAL, q->local, NULL);
        snprintf(out->reason, sizeof(out->reason), "origin has %d idle", local_idle);
    } else if (b && route_available(b) > 0) {
        forward(out, 2, b);
    } else if (can_grow) {
        set(out, 3, ROUTE_LOCAL, q->local, NULL);
        snprintf(out->reason, sizeof(out->reason),
                 b ? "nobody idle; the origin can grow (best foreign %s/%s could only scale)"
                   : "nobody idle; the origin can grow%s%s",
                 b ? b->cluster : "", b ? b->pool : "");
    } else if (b) {
        forward(out, 4, b);
    } else {
        set(out, 5, ROUTE_QUEUE, q->local, NULL);
        snprintf(out->reason, sizeof(out->reason),
                 "nobody idle and nobody can scale up; queued on the origin");
    }
}

void route_decide(const struct route_query *q, const struct route_record *const *v, size_t n,
                  struct route_decision *out)
{
    struct scan s;
    memset(out, 0, sizeof(*out));
    scan(q, v, n, &s);
    decide_from_scan(q, &s, out);
}

/* --- the per-env index ------------------------------------------------------------------- */

uint32_t route_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

void route_entry_set(struct route_entry *e, const struct route_record *r)
{
    e->rec = r;
    e->sampled_ms = r->sampled_ms;
    e->idle = r->idle;
    e->reserved = r->reserved;
    e->headroom = r->headroom;
    e->cluster_hash = route_hash(r->cluster);
    e->group_hash = route_hash(r->group);
    e->autoscaling = r->autoscaling;
}

static int entry_available(const struct route_entry *e)
{
    return available_of(e->idle, e->reserved);
}

/* route_compare on the compact copies; names only for ties. */
static int entry_compare(const struct route_entry *a, const struct route_entry *b)
{
    return rank_compare(entry_available(a), headroom_rank_of(a->autoscaling, a->headroom), a->rec,
                        entry_available(b), headroom_rank_of(b->autoscaling, b->headroom), b->rec);
}

static void scan_entries(const struct route_query *q, const struct route_entry *v, size_t n,
                         struct scan *s)
{
    bool any_group = q->group == NULL || q->group[0] == '\0';
    uint32_t gh = any_group ? 0 : route_hash(q->group);
    bool local = has_local(q);
    uint32_t lh = local ? route_hash(q->local) : 0;
    int64_t ttl = q->ttl_ms > 0 ? q->ttl_ms : ROUTE_TTL_MS;
    const struct route_entry *best = NULL;

    memset(s, 0, sizeof(*s));
    for (size_t i = 0; i < n; i++) {
        const struct route_entry *e = &v[i];
        if (q->now_ms - e->sampled_ms > ttl)
            continue;
        /* the group's name is checked only where it can change the outcome
         * (local records, a new best, parking): a record whose hash collides
         * but that loses anyway needs no look at its name */
        if (!any_group && e->group_hash != gh)
            continue;
        /* parking is for the front door only; the origin never needs it */
        if (!local && (!s->first || strcmp(e->rec->cluster, s->first->cluster) < 0) &&
            (any_group || strcmp(e->rec->group, q->group) == 0))
            s->first = e->rec;
        if (local && e->cluster_hash == lh && strcmp(e->rec->cluster, q->local) == 0) {
            if (!any_group && strcmp(e->rec->group, q->group) != 0)
                continue;
            if (e->idle > 0 && s->local_idle < INT32_MAX - e->idle)
                s->local_idle += e->idle;
            if (e->autoscaling && e->headroom != 0)
                s->local_can_grow = true;
            continue;
        }
        if (entry_available(e) == 0 && !(e->autoscaling && e->headroom != 0))
            continue;
        if ((!best || entry_compare(e, best) < 0) &&
            (any_group || strcmp(e->rec->group, q->group) == 0)) {
            best = e;
            s->best_index = i;
        }
    }
    s->best = best ? best->rec : NULL;
}

void route_decide_entries(const struct route_query *q, const struct route_entry *v, size_t n,
                          struct route_decision *out)
{
    struct scan s;
    memset(out, 0, sizeof(*out));
    scan_entries(q, v, n, &s);
    /* reservations live in the entries; the decision reports the entry's view */
    decide_from_scan(q, &s, out);
    if (out->chosen) {
        out->chosen_index = s.best_index;
        out->idle = entry_available(&v[s.best_index]);
    }
}

const char *route_action_name(enum route_action a)
{
    switch (a) {
    case ROUTE_LOCAL:
        return "local";
    case ROUTE_FORWARD:
        return "forward";
    case ROUTE_QUEUE:
        return "queue";
    }
    return "unknown";
}
