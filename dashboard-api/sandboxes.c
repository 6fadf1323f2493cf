/* Console API over the `sandboxes` table (hub/sandbox_events.h fills it):
 *
 *   GET /api/v1/sandboxes?state=&cluster=&env=&limit=&offset=
 *       → {"items": [{id, clusterId, namespace, env, pool, team, user, metadata,
 *          state, createdAt, claimedAt, startedAt, endedAt, endReason}], "total": n}
 *       newest first; limit 1..1000 (default 100)
 *   GET /api/v1/statistics/sandboxes
 *       → {"total", "running", "claimed", "ended", "byCluster": [{cluster, running, ended}]}
 *
 * Authenticated like the other /api/v1 routes; a tenant sees the sandboxes of
 * its own team and user, an admin key sees every sandbox. Errors {"error",
 * "errorCode"}. Loop thread; queries on database workers. */
#include "dashboard-api/dashboard_api.h"
#include "hub/sandbox_events.h"

#include "hub/auth.h"
#include "hub/db.h"
#include "hub/hub.h"
#include "hub/keys.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 1000

struct sq {
    struct auth_ctx *a;
    struct http_exchange *ex;
    bool stats;
    bool admin;
    char team[IAM_TEAM_MAX + 1];
    char user[IAM_USER_MAX + 1];
    char state[16], cluster[64], env[64];
    long long limit, offset;
    json_t *out;
    char err[256];
};

static const char *ts(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

static json_t *opt(const char *s)
{
    return s ? json_string(s) : json_null();
}

static int list_job(PGconn *c, void *arg)
{
    struct sq *q = arg;
    char lim[24], off[24];
    snprintf(lim, sizeof(lim), "%lld", q->limit);
    snprintf(off, sizeof(off), "%lld", q->offset);
    const char *v[7] = {q->admin ? NULL : q->team,
                        q->admin ? NULL : q->user,
                        q->state[0] ? q->state : NULL,
                        q->cluster[0] ? q->cluster : NULL,
                        q->env[0] ? q->env : NULL,
                        lim,
                        off};
    static const char where[] =
        " WHERE ($1::text IS NULL OR team = $1) AND ($2::text IS NULL OR user_name = $2)"
        " AND ($3::text IS NULL OR state = $3) AND ($4::text IS NULL OR cluster_id = $4)"
        " AND ($5::text IS NULL OR env = $5)";
    char sql[2048];
    snprintf(sql, sizeof(sql),
             "SELECT id, cluster_id, namespace, env, pool, team, user_name, metadata::text, "
             "state, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
             "to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
             "to_char(started_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
             "to_char(ended_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), "
             "end_reason, count(*) OVER () FROM sandboxes%s "
             "ORDER BY created_at DESC, id LIMIT $6::bigint OFFSET $7::bigint",
             where);
    PGresult *r = PQexecParams(c, sql, 7, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char line[200];
        snprintf(q->err, sizeof(q->err), "listing sandboxes: %s",
                 db_error_line(c, r, line, sizeof(line)));
        PQclear(r);
        return AB_EIO;
    }
    json_t *items = json_array();
    long long total = 0;
    for (int i = 0; i < PQntuples(r); i++) {
        json_t *md = json_loads(PQgetvalue(r, i, 7), 0, NULL);
        json_array_append_new(
            items, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s,s:s,s:o,s:o,s:o,s:o}", "id",
                             PQgetvalue(r, i, 0), "clusterId", PQgetvalue(r, i, 1), "namespace",
                             PQgetvalue(r, i, 2), "env", PQgetvalue(r, i, 3), "pool",
                             PQgetvalue(r, i, 4), "team", PQgetvalue(r, i, 5), "user",
                             PQgetvalue(r, i, 6), "metadata", md ? md : json_object(), "state",
                             PQgetvalue(r, i, 8), "createdAt", PQgetvalue(r, i, 9), "claimedAt",
                             opt(ts(r, i, 10)), "startedAt", opt(ts(r, i, 11)), "endedAt",
                             opt(ts(r, i, 12)), "endReason", opt(ts(r, i, 13))));
        total = strtoll(PQgetvalue(r, i, 14), NULL, 10);
    }
    PQclear(r);
    q->out = json_pack("{s:o,s:I}", "items", items, "total", (json_int_t)total);
    return 0;
}

static int stats_job(PGconn *c, void *arg)
{
    struct sq *q = arg;
    const char *v[2] = {q->admin ? NULL : q->team, q->admin ? NULL : q->user};
    PGresult *r = PQexecParams(
        c,
        "SELECT cluster_id, count(*) FILTER (WHERE state = 'running'), "
        "count(*) FILTER (WHERE state = 'claimed'), count(*) FILTER (WHERE state = 'ended'), "
        "count(*) FROM sandboxes WHERE ($1::text IS NULL OR team = $1) "
        "AND ($2::text IS NULL OR user_name = $2) GROUP BY cluster_id ORDER BY cluster_id",
        2, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char line[200];
        snprintf(q->err, sizeof(q->err), "counting sandboxes: %s",
                 db_error_line(c, r, line, sizeof(line)));
        PQclear(r);
        return AB_EIO;
    }
    long long run = 0, cl = 0, end = 0, tot = 0;
    json_t *by = json_array();
    for (int i = 0; i < PQntuples(r); i++) {
        long long a = strtoll(PQgetvalue(r, i, 1), NULL, 10);
        long long b = strtoll(PQgetvalue(r, i, 2), NULL, 10);
        long long e = strtoll(PQgetvalue(r, i, 3), NULL, 10);
        run += a;
        cl += b;
        end += e;
        tot += strtoll(PQgetvalue(r, i, 4), NULL, 10);
        json_array_append_new(by, json_pack("{s:s,s:I,s:I,s:I}", "cluster", PQgetvalue(r, i, 0),
                                            "running", (json_int_t)a, "claimed", (json_int_t)b,
                                            "ended", (json_int_t)e));
    }
    PQclear(r);
    q->out =
        json_pack("{s:I,s:I,s:I,s:I,s:o}", "total", (json_int_t)tot, "running", (json_int_t)run,
                  "claimed", (json_int_t)cl, "ended", (json_int_t)end, "byCluster", by);
    return 0;
}

static void sq_done(void *arg, int status)
{
    struct sq *q = arg;
    if (status != 0)
        auth_respond_db_error(q->a, q->ex, AUTH_SURFACE_API, status, q->err);
    else
        http_respond_json(q->ex, 200, json_incref(q->out));
    json_decref(q->out);
    free(q);
}

static void submit(struct sq *q)
{
    int rc = db_submit(auth_db(q->a), q->stats ? stats_job : list_job, sq_done, q);
    if (rc != 0) {
        auth_respond_db_error(q->a, q->ex, AUTH_SURFACE_API, rc, NULL);
        free(q);
    }
}

static struct sq *sq_new(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct sq *q = calloc(1, sizeof(*q));
    if (!q) {
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return NULL;
    }
    q->a = arg;
    q->ex = ex;
    q->admin = p->role == KEYS_ROLE_ADMIN;
    ab_strlcpy(q->team, p->team, sizeof(q->team));
    ab_strlcpy(q->user, p->user, sizeof(q->user));
    return q;
}

static bool q_int(struct http_exchange *ex, const char *name, long long lo, long long hi,
                  long long *out)
{
    char b[32];
    int rc = http_query_get(http_req(ex), name, b, sizeof(b));
    if (rc == AB_ENOENT || (rc == 0 && !b[0]))
        return true;
    char *end = NULL;
    long long v = rc == 0 ? strtoll(b, &end, 10) : 0;
    if (rc != 0 || !end || *end || v < lo || v > hi) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "%s must be an integer from %lld to "
                               "%lld",
                               name, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct sq *q = sq_new(ex, p, arg);
    const struct http_request *r = http_req(ex);
    if (!q)
        return;
    q->limit = 100;
    if (!q_int(ex, "limit", 1, LIST_MAX, &q->limit) ||
        !q_int(ex, "offset", 0, 1000000000, &q->offset)) {
        free(q);
        return;
    }
    if (http_query_get(r, "state", q->state, sizeof(q->state)) == AB_ELIMIT ||
        http_query_get(r, "cluster", q->cluster, sizeof(q->cluster)) == AB_ELIMIT ||
        http_query_get(r, "env", q->env, sizeof(q->env)) == AB_ELIMIT) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "state, cluster and env filters are at most 63 characters");
        free(q);
        return;
    }
    submit(q);
}

static void stats_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct sq *q = sq_new(ex, p, arg);
    if (!q)
        return;
    q->stats = true;
    submit(q);
}

static void h_list(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, list_ok, arg);
}

static void h_stats(struct http_exchange *ex, void *arg)
{
    auth_request(arg, ex, AUTH_SURFACE_API, stats_ok, arg);
}

int sandboxes_api_add_routes(struct hub *h, struct auth_ctx *a, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/api/v1/sandboxes", h_list, a, 0},
        {"GET", "/api/v1/statistics/sandboxes", h_stats, a, 0},
    };
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
