/* The hub's federation: one registry fed by the tunnel's REPORT frames and
 * session ends, swept for stale records and snapshotted to PostgreSQL
 * (federation_capacity) every FED_SWEEP_MS. See federation.h. */
#include "hub/federation.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    struct loop_timer sweep;
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

struct snap_build {
    json_t *arr;
    int64_t now_ms, wall_ms;
};

static void snap_add(void *arg, const struct route_record *r)
{
    struct snap_build *b = arg;
    if (!route_is_fresh(r, b->now_ms, ROUTE_TTL_MS))
        return;
    json_array_append_new(
        b->arr,
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:b,s:i,s:I,s:I}", "cluster_id", r->cluster,
                  "namespace", r->ns, "env", r->env, "pool", r->pool, "scaling_group", r->group,
                  "idle", r->idle, "running", r->running, "pending", r->pending, "desired",
                  r->desired, "autoscaling", r->autoscaling, "headroom", r->headroom,
                  "saturated_for_ms", (json_int_t)r->saturated_for_ms, "sampled_ms",
                  (json_int_t)(b->wall_ms - (b->now_ms - r->sampled_ms))));
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
    return db_finish_tx(c, rc, s->err, sizeof(s->err));
}

static void snap_done(void *arg, int status)
{
    struct snapshot *s = arg;
    struct federation *f = s->f;
    f->persisting = false;
    if (status != 0) {
        f->dirty = true; /* try again next tick */
        LOG_DEBUG("federation snapshot not written", "error",
                  s->err[0] ? s->err : ab_strerror(status));
    }
    free(s->json);
    free(s);
    if (f->stopping) {
        fed_registry_free(f->g);
        free(f);
    }
}

static void snapshot(struct federation *f)
{
    if (f->persisting || !f->dirty || !f->db)
        return;
    struct snap_build b = {json_array(), federation_now_ms(), ab_wall_ms()};
    struct snapshot *s = calloc(1, sizeof(*s));
    if (!b.arr || !s) {
        json_decref(b.arr);
        free(s);
        return;
    }
    fed_registry_each(f->g, snap_add, &b);
    s->f = f;
    s->json = json_dumps(b.arr, JSON_COMPACT);
    json_decref(b.arr);
    if (!s->json || db_submit(f->db, snap_job, snap_done, s) != 0) {
        free(s->json);
        free(s);
        return; /* the database is down or busy: next tick */
    }
    f->dirty = false;
    f->persisting = true;
}

static void sweep_tick(struct loop_timer *t)
{
    struct federation *f = t->arg;
    size_t n = fed_registry_expire(f->g, federation_now_ms());
    if (n > 0) {
        char num[24];
        snprintf(num, sizeof(num), "%zu", n);
        LOG_DEBUG("stale capacity records swept", "records", num);
        f->dirty = true;
    }
    snapshot(f);
    loop_timer_start(f->loop, &f->sweep, FED_SWEEP_MS, sweep_tick, f);
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
    f->db = d->db;
    loop_timer_start(f->loop, &f->sweep, FED_SWEEP_MS, sweep_tick, f);
    return f;
}

void federation_free(struct federation *f)
{
    if (!f)
        return;
    loop_timer_cancel(&f->sweep);
    if (f->persisting) {
        f->stopping = true; /* snap_done frees */
        return;
    }
    fed_registry_free(f->g);
    free(f);
}
