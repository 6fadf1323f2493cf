/* Agents' sandbox lifecycle events → the `sandboxes` table (see
 * sandbox_events.h). A batch is applied on a database worker in one
 * transaction, one (prepared) upsert per event; a sandbox never leaves
 * 'ended', and a late 'claimed' never undoes 'running'. */
#include "hub/sandbox_events.h"

#include "hub/auth.h"
#include "hub/clusters.h"
#include "hub/db.h"
#include "hub/hub.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"
#include "agentbox/sbxid.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct batch {
    struct http_exchange *ex;
    char cluster[AB_CLUSTER_ID_BUF]; /* the tunnel's cluster id, checked to fit */
    json_t *events;                  /* owned */
    char err[256];
};

static const char UPSERT_SQL[] =
    "INSERT INTO sandboxes (id, cluster_id, namespace, env, pool, team, user_name, metadata, "
    "state, claimed_at, started_at, ended_at, end_reason) "
    "SELECT $1, $2, $3, $4, $5, $6, $7, COALESCE($8::jsonb, '{}'::jsonb), $9::text, "
    "to_timestamp($10::bigint / 1000.0), "
    "CASE WHEN $9::text = 'running' THEN to_timestamp($10::bigint / 1000.0) END, "
    "CASE WHEN $9::text = 'ended' THEN to_timestamp($10::bigint / 1000.0) END, $11::text "
    /* only a claim (its assertion checked in keep_own) makes a row; every other
     * event (armed, an end noticed later) only updates one */
    "WHERE $9::text = 'claimed' OR EXISTS (SELECT 1 FROM sandboxes e WHERE e.id = $1::text) "
    "ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, "
    "env = CASE WHEN EXCLUDED.env <> '' THEN EXCLUDED.env ELSE sandboxes.env END, "
    "pool = CASE WHEN EXCLUDED.pool <> '' THEN EXCLUDED.pool ELSE sandboxes.pool END, "
    "metadata = CASE WHEN $8::jsonb IS NOT NULL THEN EXCLUDED.metadata "
    "ELSE sandboxes.metadata END, "
    "started_at = COALESCE(sandboxes.started_at, EXCLUDED.started_at), "
    "ended_at = EXCLUDED.ended_at, end_reason = EXCLUDED.end_reason "
    "WHERE sandboxes.state <> 'ended' AND EXCLUDED.state <> 'claimed'";

/* prepared once per connection: parsing and planning this upsert was most
 * of PostgreSQL's CPU under sustained creates (three events a create) */
static const struct db_stmt UPSERT = {"abx_sandbox_event", UPSERT_SQL, 11};

static const char *state_of(const char *type)
{
    if (strcmp(type, "claimed") == 0)
        return "claimed";
    if (strcmp(type, "armed") == 0)
        return "running";
    if (strcmp(type, "released") == 0 || strcmp(type, "failed") == 0)
        return "ended";
    return NULL;
}

static const char *str(json_t *ev, const char *k)
{
    const char *s = json_string_value(json_object_get(ev, k));
    return s ? s : "";
}

static int apply(PGconn *c, struct batch *b)
{
    size_t i;
    json_t *ev;
    size_t cl = strlen(b->cluster);

    json_array_foreach(b->events, i, ev)
    {
        const char *type = str(ev, "type"), *id = str(ev, "id");
        const char *state = state_of(type);
        char at[32], reason[600];
        char *md = NULL;
        /* only the calling cluster's own sandboxes */
        if (!state || strncmp(id, b->cluster, cl) != 0 || id[cl] != '-')
            continue;
        snprintf(at, sizeof(at), "%lld", (long long)json_integer_value(json_object_get(ev, "at")));
        if (strcmp(type, "failed") == 0)
            snprintf(reason, sizeof(reason), "failed: %.500s", str(ev, "reason"));
        else
            snprintf(reason, sizeof(reason), "%.500s", str(ev, "reason"));
        if (json_is_object(json_object_get(ev, "metadata")))
            md = json_dumps(json_object_get(ev, "metadata"), JSON_COMPACT);
        const char *v[11] = {id,
                             b->cluster,
                             str(ev, "namespace"),
                             str(ev, "env"),
                             str(ev, "pool"),
                             str(ev, "team"),
                             str(ev, "user"),
                             md,
                             state,
                             at,
                             strcmp(state, "ended") == 0 ? reason : NULL};
        PGresult *r = db_exec_stmt(c, &UPSERT, v);
        free(md);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            char line[256];
            snprintf(b->err, sizeof(b->err), "sandbox event for %s: %s", id,
                     db_error_line(c, r, line, sizeof(line)));
            PQclear(r);
            return AB_EIO;
        }
        PQclear(r);
    }
    return 0;
}

/* The batch in one transaction: all of it or nothing (a failed call is
 * sent again whole, agent/e2b/events.c), one commit instead of one per
 * event. */
static int job(PGconn *c, void *arg)
{
    struct batch *b = arg;
    int rc = db_exec(c, "BEGIN", b->err, sizeof(b->err));

    if (rc == 0)
        rc = apply(c, b);
    return db_finish_tx(c, rc, b->err, sizeof(b->err));
}

static void done(void *arg, int status)
{
    struct batch *b = arg;
    if (status != 0)
        http_respond_error(b->ex, 503, "sandbox events not stored: %s",
                           b->err[0] ? b->err : ab_strerror(status));
    else
        http_respond(b->ex, 204, NULL, NULL, 0, NULL, 0);
    json_decref(b->events);
    free(b);
}

/* Whether a claim event speaks for a principal that really asked this
 * cluster: its assertion must have been made by the hub for cluster and name
 * the event's team, user and namespace. Without this a registered cluster
 * could fabricate a claim for any user in a namespace it serves, and the
 * vault (which answers claims) would then resolve that user's secrets. */
static bool claim_asserted(struct hub *h, const char *cluster, json_t *ev)
{
    struct keys_principal p;
    char err[256], rid[ASRT_RID_MAX + 1];
    const char *tok = str(ev, "assertion");
    if (!tok[0] || auth_verify_from(h->auth, cluster, tok, &p, rid, err, sizeof(err)) != 0) {
        LOG_WARN("claim event assertion refused", "cluster", cluster, "id", str(ev, "id"), "error",
                 tok[0] ? err : "no assertion");
        return false;
    }
    if (strcmp(p.team, str(ev, "team")) != 0 || strcmp(p.user, str(ev, "user")) != 0 ||
        strcmp(p.namespace, str(ev, "namespace")) != 0)
        return false;
    /* and made for a create (hub/auth.h AUTH_RID_VALIDATION): an assertion
     * the cluster got with a read, or one whose forwarded create already made
     * its row, records nothing */
    if (!auth_claim_allowed(h->auth, cluster, rid)) {
        LOG_WARN("claim event assertion not made for a create", "cluster", cluster, "id",
                 str(ev, "id"));
        return false;
    }
    return true;
}

/* Whether cluster may speak for ev: a sandbox of its own id prefix, in a
 * namespace assigned to it (DESIGN §11), and — for the claim that makes the
 * row — for the principal the hub asserted to it. The rest never becomes a
 * row; later events of a row (armed, ended) need no assertion, the row's
 * owner being fixed by its claim. */
static const char *event_refusal(struct hub *h, const char *cluster, json_t *ev)
{
    char owner[AB_CLUSTER_ID_BUF];
    const char *id = str(ev, "id");
    if (sbxid_cluster_of(id, owner) != 0 || strcmp(owner, cluster) != 0)
        return "foreign_id";
    /* no namespace: an update of a row this cluster made (the upsert inserts nothing) */
    if (str(ev, "namespace")[0] && !clusters_serves_ns(h->clusters, cluster, str(ev, "namespace")))
        return "namespace";
    if (strcmp(str(ev, "type"), "claimed") == 0 && !claim_asserted(h, cluster, ev))
        return "assertion";
    return NULL;
}

/* Drops (and counts) the events cluster may not speak for, in place. */
static void keep_own(struct hub *h, const char *cluster, json_t *evs)
{
    static const char *const labels[] = {"cluster", "reason", NULL};
    struct metric_family *m = metrics_register(
        metrics_default(), "agentbox_sandbox_events_dropped_total",
        "Sandbox lifecycle events dropped: another cluster's id prefix (foreign_id), a "
        "namespace not assigned to the sending cluster (namespace), or a claim without an "
        "assertion for the sending cluster of the claimed principal (assertion).",
        METRIC_COUNTER, labels, NULL, 0);
    for (size_t i = json_array_size(evs); i-- > 0;) {
        const char *why = event_refusal(h, cluster, json_array_get(evs, i));
        if (why) {
            const char *lv[] = {cluster, why};
            metrics_add(m, lv, 1);
            LOG_WARN("sandbox event dropped", "cluster", cluster, "reason", why, "id",
                     str(json_array_get(evs, i), "id"));
            json_array_remove(evs, i);
        }
    }
}

/* arg: the hub, for its database pool and its cluster registry (the
 * namespaces each cluster may speak for). */
static void h_events(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    struct db_pool *db = h->db;
    const struct http_request *r = http_req(ex);
    const char *cluster = r->transport_data;
    char err[256];
    json_t *body, *evs;
    struct batch *b;

    if (!cluster || !cluster[0] || strlen(cluster) > AB_CLUSTER_ID_MAX) {
        http_respond_error(ex, 403, "sandbox events come from agents over their tunnel");
        return;
    }
    body = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    if (!body) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    evs = json_object_get(body, "events");
    if (!json_is_array(evs) || json_array_size(evs) > SANDBOX_EVENTS_BATCH_MAX) {
        json_decref(body);
        http_respond_error(ex, 400, "events must be an array of at most %d events",
                           SANDBOX_EVENTS_BATCH_MAX);
        return;
    }
    b = calloc(1, sizeof(*b));
    if (!b) {
        json_decref(body);
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    b->ex = ex;
    ab_strlcpy(b->cluster, cluster, sizeof(b->cluster));
    keep_own(h, cluster, evs);
    b->events = json_incref(evs);
    json_decref(body);
    int rc = db_submit(db, job, done, b);
    if (rc != 0) {
        json_decref(b->events);
        free(b);
        http_respond_error(ex, 503, "database unavailable: %s", ab_strerror(rc));
    }
}

int hub_sandboxes_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route internal[] = {
        {"POST", "/internal/v1/sandbox-events", h_events, h, 0},
    };
    int rc = hub_add_internal_routes(h, internal, AB_ARRAY_LEN(internal), err, errlen);
    if (rc == 0)
        rc = public_bridge_add_routes(h, err, errlen);
    return rc;
}
