/* The hub's federation: one registry fed by the tunnel's REPORT frames and
 * session ends, swept for stale records and snapshotted to PostgreSQL
 * (federation_capacity) every FED_SWEEP_MS. See federation.h.
 *
 * The sweep and the snapshot are one pass over the registry in slices of
 * FED_SLICE_RECORDS records, one slice per loop turn: at 10,000 agents the
 * registry holds 100,000 records, and a pass made at once (expire, then
 * JSON of every record) held the loop for over half a second. */
#include "hub/federation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "hub/clusters.h"
#include "hub/db.h"
#include "hub/fed_registry.h"

/* --- the hub's federation -------------------------------------------------------------- */

struct federation {
    struct loop *loop;
    struct db_pool *db;
    struct fed_registry *g;
    struct loop_timer sweep; /* starts a pass every FED_SWEEP_MS */
    struct loop_timer slice; /* the pass's next slice */
    size_t cursor;           /* where the pass goes on (fed_registry_sweep_slice) */
    bool in_pass;
    struct buf snap;   /* the pass's snapshot being written */
    bool snap_writing; /* this pass writes one */
    size_t snap_n;     /* records in it */
    size_t pass_expired;
    bool dirty;
    bool persisting;
    bool stopping;
    struct metric_family *m_reports;
    struct metric_family *m_dropped;
    struct clusters *clusters;
};

struct fed_registry *federation_registry(struct federation *f)
{
    return f ? f->g : NULL;
}

int64_t federation_now_ms(void)
{
    return ab_now_ms();
}

/* Keeps the records of namespaces the cluster was assigned; counts the rest.
 * Routing reads only the registry, so a dropped record can never draw a
 * tenant of that namespace to the cluster. */
static size_t keep_assigned(struct federation *f, const char *cluster, struct route_record *v,
                            size_t n)
{
    size_t kept = 0;
    if (!f->clusters)
        return n;
    for (size_t i = 0; i < n; i++) {
        if (clusters_serves_ns(f->clusters, cluster, v[i].ns)) {
            if (kept != i)
                v[kept] = v[i];
            kept++;
        }
    }
    if (kept < n) {
        const char *lv[] = {cluster};
        metrics_add(f->m_dropped, lv, (double)(n - kept));
        char num[24];
        snprintf(num, sizeof(num), "%zu", n - kept);
        LOG_WARN("capacity records dropped: namespace not assigned to the cluster", "cluster",
                 cluster, "records", num);
    }
    return kept;
}

void federation_on_report(void *arg, const char *cluster, json_t *msg)
{
    struct federation *f = arg;
    char err[256];
    const char *outcome = "applied";
    struct route_record *v = NULL;
    size_t n = 0;
    bool full = true;
    int rc = fed_report_parse(msg, cluster, federation_now_ms(), &v, &n, &full, err, sizeof(err));
    if (rc == 0) {
        n = keep_assigned(f, cluster, v, n);
        rc = fed_registry_apply(f->g, cluster, v, n, full, err, sizeof(err));
    }
    free(v);
    if (rc != 0) {
        outcome = "refused";
        LOG_WARN("capacity report refused", "cluster", cluster, "reason", err);
    } else {
        f->dirty = true;
    }
    const char *lv[] = {outcome};
    metrics_add(f->m_reports, lv, 1);
}

void federation_on_session_end(void *arg, const char *cluster)
{
    struct federation *f = arg;
    size_t n = fed_registry_drop_cluster(f->g, cluster);
    if (n > 0) {
        char num[24];
        snprintf(num, sizeof(num), "%zu", n);
        LOG_INFO("capacity records dropped: session ended", "cluster", cluster, "records", num);
        f->dirty = true;
    }
}

/* A snapshot on its way to federation_capacity: one JSON array, expanded
 * by json_to_recordset in one statement. */
struct snapshot {
    struct federation *f;
    char *json;
    char err[256];
};

/* The snapshot text's limit: FED_RECORDS_MAX records of at most ~700 bytes. */
#define SNAP_MAX ((size_t)FED_RECORDS_MAX * 768)
/* A slice is time, not records: a record costs 2 µs swept and ~30 µs when
 * it is also printed into the snapshot (a loaded machine: 512 records were
 * 16 ms of the loop). Records go FED_SLICE_RECORDS at a time until the
 * slice's FED_SLICE_US are spent. */
#define FED_SLICE_RECORDS 64
#define FED_SLICE_US 2000

/* Names are validated on receipt (letters, digits, '.', '_', '-'), so they
 * need no escaping; anything else is escaped anyway, so the text stays JSON. */
static void snap_str(struct buf *b, const char *s)
{
    buf_append(b, "\"", 1);
    for (;;) {
        size_t run = 0;
        while (s[run] && (unsigned char)s[run] >= 0x20 && s[run] != '"' && s[run] != '\\')
            run++;
        buf_append(b, s, run);
        s += run;
        if (!*s)
            break;
        buf_printf(b, "\\u%04x", (unsigned char)*s++);
    }
    buf_append(b, "\"", 1);
}

struct snap_slice {
    struct federation *f;
    int64_t now_ms, wall_ms;
};

static void snap_add(void *arg, const struct route_record *r)
{
    struct snap_slice *x = arg;
    struct buf *b = &x->f->snap;
    buf_append_str(b, x->f->snap_n++ ? ",{\"cluster_id\":" : "{\"cluster_id\":");
    snap_str(b, r->cluster);
    buf_append_str(b, ",\"namespace\":");
    snap_str(b, r->ns);
    buf_append_str(b, ",\"env\":");
    snap_str(b, r->env);
    buf_append_str(b, ",\"pool\":");
    snap_str(b, r->pool);
    buf_append_str(b, ",\"scaling_group\":");
    snap_str(b, r->group);
    buf_printf(b,
               ",\"idle\":%d,\"running\":%d,\"pending\":%d,\"desired\":%d,\"autoscaling\":%s,"
               "\"headroom\":%d,\"saturated_for_ms\":%lld,\"sampled_ms\":%lld}",
               r->idle, r->running, r->pending, r->desired, r->autoscaling ? "true" : "false",
               r->headroom, (long long)r->saturated_for_ms,
               (long long)(x->wall_ms - (x->now_ms - r->sampled_ms)));
}

static int snap_job(PGconn *c, void *arg)
{
    struct snapshot *s = arg;
    static const char sql[] =
        "INSERT INTO federation_capacity (cluster_id, namespace, env, pool, scaling_group, idle, "
        "running, pending, desired, autoscaling, headroom, saturated_for_ms, sampled_at, "
        "updated_at) "
        "SELECT x.cluster_id, x.namespace, x.env, x.pool, x.scaling_group, x.idle, x.running, "
        "x.pending, x.desired, x.autoscaling, x.headroom, x.saturated_for_ms, "
        "to_timestamp(x.sampled_ms / 1000.0), now() "
        "FROM json_to_recordset($1::json) AS x(cluster_id text, namespace text, env text, "
        "pool text, scaling_group text, idle int, running int, pending int, desired int, "
        "autoscaling boolean, headroom int, saturated_for_ms bigint, sampled_ms bigint) "
        "WHERE x.cluster_id IN (SELECT id FROM clusters)";
    const char *params[] = {s->json};
    int rc = db_exec(c, "BEGIN", s->err, sizeof(s->err));
    if (rc != 0)
        return rc;
    rc = db_exec(c, "DELETE FROM federation_capacity", s->err, sizeof(s->err));
    if (rc == 0) {
        PGresult *r = PQexecParams(c, sql, 1, NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            rc = db_fail(c, r, "insert federation_capacity", s->err, sizeof(s->err));
        PQclear(r);
    }
    /* freed here, not in snap_done: the text is tens of MiB at 10,000 agents */
    free(s->json);
    s->json = NULL;
    return db_finish_tx(c, rc, s->err, sizeof(s->err));
}

static void federation_destroy(struct federation *f)
{
    buf_free(&f->snap);
    fed_registry_free(f->g);
    free(f);
}

static void snap_done(void *arg, int status)
{
    struct snapshot *s = arg;
    struct federation *f = s->f;
    f->persisting = false;
    if (status != 0) {
        f->dirty = true; /* try again next pass */
        LOG_DEBUG("federation snapshot not written", "error",
                  s->err[0] ? s->err : ab_strerror(status));
    }
    free(s->json);
    free(s);
    if (f->stopping)
        federation_destroy(f);
}

/* The pass is over: its snapshot (if it wrote one) goes to a worker. */
static void snapshot_submit(struct federation *f)
{
    if (!f->snap_writing)
        return;
    f->snap_writing = false;
    struct snapshot *s = calloc(1, sizeof(*s));
    if (!s || buf_append(&f->snap, "]", 1) != 0) {
        free(s);
        buf_reset(&f->snap);
        f->dirty = true;
        return;
    }
    s->f = f;
    s->json = buf_take(&f->snap, NULL);
    if (db_submit(f->db, snap_job, snap_done, s) != 0) {
        free(s->json);
        free(s);
        f->dirty = true; /* the database is down or busy: next pass */
        return;
    }
    f->persisting = true;
}

static void sweep_tick(struct loop_timer *t);

static void slice_tick(struct loop_timer *t)
{
    struct federation *f = t->arg;
    struct snap_slice x = {f, federation_now_ms(), ab_wall_ms()};
    int64_t start = ab_now_us();
    bool done;
    do
        done = fed_registry_sweep_slice(f->g, &f->cursor, FED_SLICE_RECORDS, x.now_ms,
                                        f->snap_writing ? snap_add : NULL, &x, &f->pass_expired);
    while (!done && ab_now_us() - start < FED_SLICE_US);
    if (f->snap_writing && buf_err(&f->snap)[0]) {
        /* past SNAP_MAX or out of memory: this pass writes none, the next tries again */
        LOG_WARN("federation snapshot skipped", "reason", buf_err(&f->snap));
        buf_free(&f->snap);
        buf_init(&f->snap, SNAP_MAX, "federation snapshot");
        f->snap_writing = false;
        f->dirty = true;
    }
    if (!done) {
        /* 1 ms, not 0: the loop serves sockets between two slices */
        loop_timer_start(f->loop, &f->slice, 1, slice_tick, f);
        return;
    }
    f->in_pass = false;
    if (f->pass_expired > 0) {
        char num[24];
        snprintf(num, sizeof(num), "%zu", f->pass_expired);
        LOG_DEBUG("stale capacity records swept", "records", num);
        f->dirty = true;
    }
    snapshot_submit(f);
}

/* Starts a pass: the sweep always, a snapshot when something changed and
 * the last one is written. */
static void sweep_tick(struct loop_timer *t)
{
    struct federation *f = t->arg;
    loop_timer_start(f->loop, &f->sweep, FED_SWEEP_MS, sweep_tick, f);
    if (f->in_pass)
        return; /* the last pass is still going (a loaded machine): it counts */
    f->in_pass = true;
    f->cursor = 0;
    f->pass_expired = 0;
    f->snap_n = 0;
    buf_reset(&f->snap);
    if (f->dirty && !f->persisting && f->db && buf_append(&f->snap, "[", 1) == 0) {
        f->snap_writing = true;
        f->dirty = false; /* a change from now on dirties it for the next pass */
    }
    slice_tick(&f->slice);
}

struct federation *federation_new(const struct federation_deps *d, char *err, size_t errlen)
{
    struct federation *f = calloc(1, sizeof(*f));
    if (!f || !(f->g = fed_registry_new(true))) {
        free(f);
        snprintf(err, errlen, "out of memory creating the federation registry");
        return NULL;
    }
    static const char *const ol[] = {"outcome", NULL};
    f->m_reports = metrics_register(metrics_default(), "agentbox_federation_reports_total",
                                    "Capacity reports received, by outcome (applied, refused).",
                                    METRIC_COUNTER, ol, NULL, 0);
    static const char *const cl[] = {"cluster", NULL};
    f->m_dropped = metrics_register(
        metrics_default(), "agentbox_federation_records_dropped_total",
        "Capacity records dropped because their namespace is not assigned to the reporting "
        "cluster (agentbox-hub cluster add --namespaces).",
        METRIC_COUNTER, cl, NULL, 0);
    f->clusters = d->clusters;
    f->loop = d->loop;
    f->slice.arg = f;
    buf_init(&f->snap, SNAP_MAX, "federation snapshot");
    f->db = d->db;
    loop_timer_start(f->loop, &f->sweep, FED_SWEEP_MS, sweep_tick, f);
    return f;
}

void federation_free(struct federation *f)
{
    if (!f)
        return;
    loop_timer_cancel(&f->sweep);
    loop_timer_cancel(&f->slice);
    if (f->persisting) {
        f->stopping = true; /* snap_done frees */
        return;
    }
    federation_destroy(f);
}
