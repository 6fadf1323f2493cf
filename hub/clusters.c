/* The cluster registry of a running hub: the clusters table in memory
 * (clusters_table.c), reloaded from PostgreSQL every 2 s, session rows in
 * cluster_sessions, batched last_seen writes, GET /api/clusters.
 *
 * Loop thread only. Database work runs as db pool jobs; each job struct owns
 * its inputs and outputs, and its done() applies the result on the loop.
 * clusters_free while jobs are in flight leaves the struct "closing": the
 * last done() frees it. */
#include "hub/clusters.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "hub/clusters_table.h"
#include "hub/db.h"

#define CLUSTERS_ERR_MAX 256
#define CLUSTERS_INSTANCE_MAX 96
/* Disconnected session rows older than this are deleted when the cluster
 * opens a new session, so reconnect loops cannot grow the table without end. */
#define CLUSTERS_SESSION_KEEP "7 days"

struct clusters {
    struct loop *loop;
    struct db_pool *db;
    struct clusters_table table;
    struct loop_timer refresh_timer;
    struct loop_timer flush_timer;
    bool refreshing; /* a refresh job is in flight */
    /* the table's array before the last refresh: the next refresh job frees
     * it on its worker (14 MiB at 10,000 clusters is a millisecond or more) */
    struct clusters_entry *retired;
    bool refresh_again; /* refresh_now came while one was in flight */
    bool closing;       /* clusters_free ran; the last done() frees */
    int inflight;       /* jobs submitted, done() not yet run */
    bool failing;       /* the last refresh failed (logged once per episode) */
    char last_error[CLUSTERS_ERR_MAX];
    char instance[CLUSTERS_INSTANCE_MAX];
    void (*revoke_fn)(void *arg, const char *cluster_id, const char *reason);
    void *revoke_arg;
    /* Session begins wait here while one batch of them is in PostgreSQL
     * (clusters_session_begin): non-empty only while begin_busy. */
    struct begin_job *bq_head, **bq_tail;
    bool begin_busy;
};

static void destroy(struct clusters *c)
{
    free(c->retired);
    clusters_table_free(&c->table);
    free(c);
}

/* Every done() ends with this: returns true when c is gone (or going). */
static bool job_finished(struct clusters *c)
{
    c->inflight--;
    if (c->closing) {
        if (c->inflight == 0)
            destroy(c);
        return true;
    }
    return false;
}

static int submit(struct clusters *c, db_job_fn job, db_done_fn done, void *arg)
{
    int rc = db_submit(c->db, job, done, arg);

    if (rc == 0)
        c->inflight++;
    return rc;
}

/* Rolls back after a failed statement inside a transaction, so the
 * connection goes back idle (db.h). */
static void rollback(PGconn *conn)
{
    PQclear(PQexec(conn, "ROLLBACK"));
}

static void sql_error(PGconn *conn, const PGresult *r, const char *what, char *err, size_t errlen)
{
    const char *state = r != NULL ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *hint = "";
    char line[200];

    /* 42P01 undefined table, 42703 undefined column: the schema is behind. */
    if (state != NULL && (strcmp(state, "42P01") == 0 || strcmp(state, "42703") == 0))
        hint = " (run 'agentbox-hub migrate')";
    snprintf(err, errlen, "%s: %s%s", what, db_error_line(conn, r, line, sizeof(line)), hint);
}

/* --- refresh ------------------------------------------------------------------ */

struct refresh_job {
    struct clusters *c;
    struct clusters_entry *retired; /* owned: freed first thing on the worker */
    struct clusters_entry *entries; /* owned; sorted on the worker (clusters_table_build) */
    size_t n;
    char err[CLUSTERS_ERR_MAX];
};

static const char REFRESH_SQL[] =
    "SELECT c.id, c.name, c.region, c.token_hash, c.disabled, COALESCE(s.epoch, 0), "
    "COALESCE((extract(epoch FROM s.last_seen) * 1000)::bigint, 0), "
    "COALESCE(s.disconnected_at IS NULL AND s.last_seen > now() - make_interval(secs => $1), "
    "false), COALESCE(s.agent_version, ''), COALESCE(array_to_string(c.namespaces, ','), '') "
    "FROM clusters c LEFT JOIN LATERAL (SELECT epoch, last_seen, disconnected_at, agent_version "
    "FROM cluster_sessions WHERE cluster_id = c.id ORDER BY epoch DESC LIMIT 1) s ON true "
    "ORDER BY c.id LIMIT $2";

static int refresh_run(PGconn *conn, void *arg)
{
    struct refresh_job *j = arg;
    char window[16], limit[16];
    const char *vals[2] = {window, limit};
    struct clusters_row *rows = NULL;
    PGresult *r;
    int rc = 0, n;

    free(j->retired);
    j->retired = NULL;
    snprintf(window, sizeof(window), "%d", CLUSTERS_ONLINE_WINDOW_S);
    snprintf(limit, sizeof(limit), "%d", CLUSTERS_MAX + 1);
    r = PQexecParams(conn, REFRESH_SQL, 2, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        sql_error(conn, r, "cannot read the clusters table", j->err, sizeof(j->err));
        rc = AB_EIO;
        goto out;
    }
    n = PQntuples(r);
    if (n > CLUSTERS_MAX) {
        snprintf(j->err, sizeof(j->err),
                 "more than %d clusters registered: the hub keeps at most CLUSTERS_MAX in memory",
                 CLUSTERS_MAX);
        rc = AB_ELIMIT;
        goto out;
    }
    if (n > 0) {
        rows = calloc((size_t)n, sizeof(*rows));
        if (rows == NULL) {
            snprintf(j->err, sizeof(j->err), "out of memory reading %d clusters", n);
            rc = AB_ENOMEM;
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        struct clusters_row *row = &rows[i];

        ab_strlcpy(row->id, PQgetvalue(r, i, 0), sizeof(row->id));
        ab_strlcpy(row->name, PQgetvalue(r, i, 1), sizeof(row->name));
        ab_strlcpy(row->region, PQgetvalue(r, i, 2), sizeof(row->region));
        ab_strlcpy(row->token_hash, PQgetvalue(r, i, 3), sizeof(row->token_hash));
        row->disabled = PQgetvalue(r, i, 4)[0] == 't';
        row->db_epoch = strtoll(PQgetvalue(r, i, 5), NULL, 10);
        row->db_last_seen_ms = strtoll(PQgetvalue(r, i, 6), NULL, 10);
        row->db_online = PQgetvalue(r, i, 7)[0] == 't';
        ab_strlcpy(row->agent_version, PQgetvalue(r, i, 8), sizeof(row->agent_version));
        ab_strlcpy(row->namespaces, PQgetvalue(r, i, 9), sizeof(row->namespaces));
    }
    /* the sort and the copy here, off the loop (10,000 rows of 1.4 KiB) */
    rc = clusters_table_build(rows, (size_t)n, &j->entries);
    if (rc != 0) {
        snprintf(j->err, sizeof(j->err), "%s",
                 rc == AB_EINVAL ? "duplicate cluster id in a refresh"
                                 : "out of memory applying a refresh");
        goto out;
    }
    j->n = (size_t)n;
out:
    free(rows);
    PQclear(r);
    return rc;
}

static void start_refresh(struct clusters *c);

static void refresh_failed(struct clusters *c, const char *why)
{
    if (!c->failing || strcmp(c->last_error, why) != 0)
        LOG_WARN("cannot refresh the cluster registry; retrying every 2 s", "error", why);
    c->failing = true;
    ab_strlcpy(c->last_error, why, sizeof(c->last_error));
}

static void refresh_done(void *arg, int status)
{
    struct refresh_job *j = arg;
    struct clusters *c = j->c;
    struct clusters_revocation *revs = NULL;
    size_t nrevs = 0;
    bool was_loaded;

    if (job_finished(c))
        goto out;
    c->refreshing = false;
    if (status != 0) {
        char why[CLUSTERS_ERR_MAX];

        if (j->err[0] != '\0')
            ab_strlcpy(why, j->err, sizeof(why));
        else
            db_pool_last_error(c->db, why, sizeof(why));
        refresh_failed(c, why[0] != '\0' ? why : ab_strerror(status));
        goto again;
    }
    if (c->table.n > 0) {
        revs = calloc(c->table.n, sizeof(*revs));
        if (revs == NULL) {
            refresh_failed(c, "out of memory applying a refresh");
            goto again;
        }
    }
    was_loaded = c->table.loaded;
    free(c->retired); /* a refresh that never ran left one: rare */
    c->retired = clusters_table_swap(&c->table, j->entries, j->n, revs, &nrevs);
    j->entries = NULL;
    if (c->failing || !was_loaded) {
        char count[24];

        snprintf(count, sizeof(count), "%zu", j->n);
        LOG_INFO("cluster registry loaded", "clusters", count);
    }
    c->failing = false;
    c->last_error[0] = '\0';
    /* Hooks last: they may call back into the registry. */
    for (size_t i = 0; i < nrevs; i++) {
        LOG_INFO("cluster session revoked", "cluster", revs[i].id, "reason", revs[i].reason);
        if (c->revoke_fn != NULL)
            c->revoke_fn(c->revoke_arg, revs[i].id, revs[i].reason);
    }
again:
    if (c->refresh_again) {
        c->refresh_again = false;
        start_refresh(c);
    }
out:
    free(revs);
    free(j->entries);
    free(j->retired);
    free(j);
}

static void start_refresh(struct clusters *c)
{
    struct refresh_job *j;
    int rc;

    if (c->refreshing) {
        c->refresh_again = true;
        return;
    }
    j = calloc(1, sizeof(*j));
    if (j == NULL) {
        refresh_failed(c, "out of memory starting a refresh");
        return;
    }
    j->c = c;
    j->retired = c->retired; /* before submit: the worker may run it at once */
    c->retired = NULL;
    rc = submit(c, refresh_run, refresh_done, j);
    if (rc != 0) {
        char why[CLUSTERS_ERR_MAX], line[200];

        c->retired = j->retired;
        free(j);
        if (rc == AB_EIO && db_pool_last_error(c->db, line, sizeof(line))[0] != '\0')
            snprintf(why, sizeof(why), "database unavailable: %s", line);
        else
            snprintf(why, sizeof(why), "database unavailable: %s", ab_strerror(rc));
        refresh_failed(c, why);
        return;
    }
    c->refreshing = true;
}

static void refresh_tick(struct loop_timer *t)
{
    struct clusters *c = t->arg;

    start_refresh(c);
    loop_timer_start(c->loop, &c->refresh_timer, CLUSTERS_REFRESH_MS, refresh_tick, c);
}

void clusters_refresh_now(struct clusters *c)
{
    if (c != NULL && !c->closing)
        start_refresh(c);
}

bool clusters_is_loaded(struct clusters *c)
{
    return c != NULL && c->table.loaded;
}

const char *clusters_hub_instance(struct clusters *c)
{
    return c->instance;
}

/* --- sessions ------------------------------------------------------------------- */

struct begin_job {
    struct clusters *c;
    char id[AB_CLUSTER_ID_BUF];
    char version[64];
    char instance[CLUSTERS_INSTANCE_MAX];
    void (*done)(void *arg, int status, int64_t epoch);
    void *arg;
    int64_t epoch;
    int status;
    struct begin_job *next; /* in the queue */
    char err[CLUSTERS_ERR_MAX];
};

/* Session begins are batched: while one batch is in PostgreSQL the next
 * ones queue, and the batch after takes up to BEGIN_BATCH_MAX of them in one
 * transaction of four statements (what one begin cost before). A reconnect
 * storm of 10,000 agents is then ~40 transactions instead of 10,000, and a
 * single handshake on a quiet hub still goes at once. */
#define BEGIN_BATCH_MAX 256
#define BEGIN_SQL_MAX (64 + BEGIN_BATCH_MAX * 24)

struct begin_batch {
    struct clusters *c;
    struct begin_job *jobs[BEGIN_BATCH_MAX];
    size_t n;
    char err[CLUSTERS_ERR_MAX];
};

/* "($1,$2,$3),($4,$5,$6)..." (per = 3) or "$1,$2..." (per = 1) into b. */
static int placeholders(struct buf *b, size_t n, int per)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (per == 1)
            rc = buf_printf(b, "%s$%zu", i ? "," : "", i + 1);
        else
            rc = buf_printf(b, "%s($%zu,$%zu,$%zu)", i ? "," : "", 3 * i + 1, 3 * i + 2, 3 * i + 3);
    }
    return rc;
}

static struct begin_job *job_of(struct begin_batch *b, const char *id)
{
    for (size_t i = 0; i < b->n; i++)
        if (strcmp(b->jobs[i]->id, id) == 0)
            return b->jobs[i];
    return NULL;
}

static int batch_sql(PGconn *conn, struct begin_batch *b, struct buf *sql)
{
    const char *vals[3 * BEGIN_BATCH_MAX];
    size_t nok = 0;
    PGresult *r;

    for (size_t i = 0; i < b->n; i++) {
        vals[i] = b->jobs[i]->id;
        b->jobs[i]->status = AB_ENOENT; /* until the SELECT finds it */
    }
    /* FOR SHARE: a concurrent disable waits for these sessions to be
     * recorded (and then revokes them) instead of racing them. */
    buf_reset(sql);
    if (buf_append_str(sql, "SELECT id, disabled FROM clusters WHERE id IN (") != 0 ||
        placeholders(sql, b->n, 1) != 0 || buf_append_str(sql, ") FOR SHARE") != 0) {
        snprintf(b->err, sizeof(b->err), "%s", buf_err(sql));
        return AB_ELIMIT;
    }
    r = PQexecParams(conn, buf_str(sql), (int)b->n, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        sql_error(conn, r, "cannot read the clusters", b->err, sizeof(b->err));
        PQclear(r);
        return AB_EIO;
    }
    for (int row = 0; row < PQntuples(r); row++) {
        struct begin_job *j = job_of(b, PQgetvalue(r, row, 0));
        if (j != NULL)
            j->status = PQgetvalue(r, row, 1)[0] == 't' ? AB_EDENIED : 0;
    }
    PQclear(r);
    for (size_t i = 0; i < b->n; i++) {
        struct begin_job *j = b->jobs[i];
        if (j->status == AB_ENOENT)
            snprintf(j->err, sizeof(j->err), "cluster '%s' is not registered", j->id);
        else if (j->status == AB_EDENIED)
            snprintf(j->err, sizeof(j->err), "cluster '%s' is disabled", j->id);
        else {
            vals[3 * nok] = j->id;
            vals[3 * nok + 1] = j->instance;
            vals[3 * nok + 2] = j->version;
            nok++;
        }
    }
    if (nok == 0)
        return 0;
    buf_reset(sql);
    if (buf_append_str(sql, "WITH v (cluster_id, hub_instance, agent_version) AS (VALUES ") != 0 ||
        placeholders(sql, nok, 3) != 0 ||
        buf_append_str(sql,
                       "), closed AS (UPDATE cluster_sessions SET connected = false, "
                       "disconnected_at = now() WHERE cluster_id IN (SELECT cluster_id FROM v) "
                       "AND connected), pruned AS (DELETE FROM cluster_sessions WHERE cluster_id "
                       "IN (SELECT cluster_id FROM v) AND NOT connected AND disconnected_at < "
                       "now() - interval '" CLUSTERS_SESSION_KEEP "') INSERT INTO "
                       "cluster_sessions (cluster_id, hub_instance, agent_version) SELECT "
                       "cluster_id, hub_instance, agent_version FROM v RETURNING cluster_id, "
                       "epoch") != 0) {
        snprintf(b->err, sizeof(b->err), "%s", buf_err(sql));
        return AB_ELIMIT;
    }
    r = PQexecParams(conn, buf_str(sql), (int)(3 * nok), NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != (int)nok) {
        sql_error(conn, r, "cannot record the sessions", b->err, sizeof(b->err));
        PQclear(r);
        return AB_EIO;
    }
    for (int row = 0; row < PQntuples(r); row++) {
        struct begin_job *j = job_of(b, PQgetvalue(r, row, 0));
        if (j != NULL)
            j->epoch = strtoll(PQgetvalue(r, row, 1), NULL, 10);
    }
    PQclear(r);
    return 0;
}

static int begin_run(PGconn *conn, void *arg)
{
    struct begin_batch *b = arg;
    struct buf sql;
    PGresult *r;
    int rc;

    r = PQexec(conn, "BEGIN");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        sql_error(conn, r, "cannot start a transaction", b->err, sizeof(b->err));
        PQclear(r);
        return AB_EIO;
    }
    PQclear(r);
    buf_init(&sql, BEGIN_SQL_MAX + 1024, "session batch statement");
    rc = batch_sql(conn, b, &sql);
    buf_free(&sql);
    if (rc != 0) {
        rollback(conn);
        return rc;
    }
    r = PQexec(conn, "COMMIT");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        sql_error(conn, r, "cannot commit the sessions", b->err, sizeof(b->err));
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}

static void begin_kick(struct clusters *c);

static void finish_job(struct clusters *c, struct begin_job *j, int status)
{
    if (!c->closing && status == 0) {
        struct clusters_entry *e = clusters_table_find(&c->table, j->id);

        /* The next refresh would say the same; the API should not wait for it. */
        if (e != NULL && e->row.db_epoch < j->epoch) {
            e->row.db_epoch = j->epoch;
            e->row.db_online = false;
            ab_strlcpy(e->row.agent_version, j->version, sizeof(e->row.agent_version));
        }
    }
    if (status != 0 && status != AB_ENOENT && status != AB_EDENIED)
        LOG_WARN("cannot record a tunnel session", "cluster", j->id, "error",
                 j->err[0] != '\0' ? j->err : ab_strerror(status));
    j->done(j->arg, status, status == 0 ? j->epoch : 0);
    free(j);
}

static void begin_done(void *arg, int status)
{
    struct begin_batch *b = arg;
    struct clusters *c = b->c;

    for (size_t i = 0; i < b->n; i++) {
        struct begin_job *j = b->jobs[i];
        if (status != 0)
            ab_strlcpy(j->err, b->err, sizeof(j->err));
        finish_job(c, j, status != 0 ? status : j->status);
    }
    free(b);
    c->begin_busy = false;
    if (c->closing) {
        /* the hub is stopping: its sessions are gone, nobody waits for these */
        while (c->bq_head != NULL) {
            struct begin_job *j = c->bq_head;
            c->bq_head = j->next;
            free(j);
        }
        c->bq_tail = &c->bq_head;
    } else
        begin_kick(c);
    job_finished(c);
}

/* Sends the queued begins (up to BEGIN_BATCH_MAX, none twice for one
 * cluster: the later one must get the later epoch) as one job. */
static void begin_kick(struct clusters *c)
{
    if (c->begin_busy || c->bq_head == NULL)
        return;
    struct begin_batch *b = calloc(1, sizeof(*b));
    int rc = AB_ENOMEM;
    if (b != NULL) {
        b->c = c;
        while (c->bq_head != NULL && b->n < BEGIN_BATCH_MAX && job_of(b, c->bq_head->id) == NULL) {
            struct begin_job *j = c->bq_head;
            c->bq_head = j->next;
            b->jobs[b->n++] = j;
        }
        if (c->bq_head == NULL)
            c->bq_tail = &c->bq_head;
        rc = submit(c, begin_run, begin_done, b);
        if (rc == 0) {
            c->begin_busy = true;
            return;
        }
        for (size_t i = 0; i < b->n; i++) { /* back to the front, failed below */
            b->jobs[b->n - 1 - i]->next = c->bq_head;
            if (c->bq_head == NULL)
                c->bq_tail = &b->jobs[b->n - 1 - i]->next;
            c->bq_head = b->jobs[b->n - 1 - i];
        }
        free(b);
    }
    /* the pool refuses (full or closed): every queued begin fails now */
    while (c->bq_head != NULL) {
        struct begin_job *j = c->bq_head;
        c->bq_head = j->next;
        snprintf(j->err, sizeof(j->err), "cannot queue the session write: %s", ab_strerror(rc));
        finish_job(c, j, rc);
    }
    c->bq_tail = &c->bq_head;
}

int clusters_session_begin(struct clusters *c, const char *cluster_id, const char *agent_version,
                           void (*done)(void *arg, int status, int64_t epoch), void *arg)
{
    struct begin_job *j;

    if (c->closing)
        return AB_ECLOSED;
    if (cluster_id == NULL || strlen(cluster_id) >= sizeof(j->id) || done == NULL)
        return AB_EINVAL;
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return AB_ENOMEM;
    j->c = c;
    ab_strlcpy(j->id, cluster_id, sizeof(j->id));
    ab_strlcpy(j->version, agent_version != NULL ? agent_version : "", sizeof(j->version));
    ab_strlcpy(j->instance, c->instance, sizeof(j->instance));
    j->done = done;
    j->arg = arg;
    if (!c->begin_busy) { /* a quiet hub: at once, and the pool's refusal is the caller's */
        struct begin_batch *b = calloc(1, sizeof(*b));
        int rc = b != NULL ? 0 : AB_ENOMEM;
        if (b != NULL) {
            b->c = c;
            b->jobs[b->n++] = j;
            rc = submit(c, begin_run, begin_done, b);
        }
        if (rc != 0) {
            free(b);
            free(j);
            return rc;
        }
        c->begin_busy = true;
        return 0;
    }
    j->next = NULL;
    *c->bq_tail = j;
    c->bq_tail = &j->next;
    return 0;
}

void clusters_session_online(struct clusters *c, const char *cluster_id, int64_t epoch)
{
    if (c == NULL || c->closing)
        return;
    clusters_table_online(&c->table, cluster_id, epoch, ab_wall_ms());
}

struct end_job {
    struct clusters *c;
    char id[AB_CLUSTER_ID_BUF];
    int64_t epoch;
    char err[CLUSTERS_ERR_MAX];
};

static int end_run(PGconn *conn, void *arg)
{
    struct end_job *j = arg;
    char epoch[24];
    const char *vals[1] = {epoch};
    PGresult *r;
    int rc = 0;

    snprintf(epoch, sizeof(epoch), "%" PRId64, j->epoch);
    r = PQexecParams(conn,
                     "UPDATE cluster_sessions SET connected = false, disconnected_at = now() "
                     "WHERE epoch = $1 AND connected",
                     1, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        sql_error(conn, r, "cannot record the disconnection", j->err, sizeof(j->err));
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}

static void end_done(void *arg, int status)
{
    struct end_job *j = arg;
    char epoch[24];

    if (status != 0) {
        snprintf(epoch, sizeof(epoch), "%" PRId64, j->epoch);
        LOG_WARN("cannot record a tunnel disconnection (the session turns offline in the "
                 "database once last_seen is 30 s old)",
                 "cluster", j->id, "epoch", epoch, "error",
                 j->err[0] != '\0' ? j->err : ab_strerror(status));
    }
    job_finished(j->c);
    free(j);
}

void clusters_session_end(struct clusters *c, const char *cluster_id, int64_t epoch)
{
    struct end_job *j;

    if (c == NULL || c->closing || cluster_id == NULL || epoch <= 0)
        return;
    clusters_table_end(&c->table, cluster_id, epoch);
    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return;
    j->c = c;
    ab_strlcpy(j->id, cluster_id, sizeof(j->id));
    j->epoch = epoch;
    if (submit(c, end_run, end_done, j) != 0) {
        LOG_WARN("cannot queue a tunnel disconnection write", "cluster", cluster_id);
        free(j);
    }
}

void clusters_set_revoke_hook(struct clusters *c,
                              void (*fn)(void *arg, const char *cluster_id, const char *reason),
                              void *arg)
{
    c->revoke_fn = fn;
    c->revoke_arg = arg;
}

/* --- last_seen ------------------------------------------------------------------ */

void clusters_touch(struct clusters *c, const char *cluster_id, int64_t epoch)
{
    if (c == NULL || c->closing)
        return;
    clusters_table_touch(&c->table, cluster_id, epoch, ab_wall_ms());
}

struct flush_job {
    struct clusters *c;
    char *epochs; /* owned: a PostgreSQL array literal "{1,2,3}" */
    char err[CLUSTERS_ERR_MAX];
};

static int flush_run(PGconn *conn, void *arg)
{
    struct flush_job *j = arg;
    const char *vals[1] = {j->epochs};
    PGresult *r;
    int rc = 0;

    r = PQexecParams(conn,
                     "UPDATE cluster_sessions SET last_seen = now() "
                     "WHERE epoch = ANY($1::bigint[]) AND connected",
                     1, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        sql_error(conn, r, "cannot write last_seen", j->err, sizeof(j->err));
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}

static void flush_done(void *arg, int status)
{
    struct flush_job *j = arg;

    if (status != 0)
        LOG_WARN("cannot write cluster last_seen (retried with the next touches)", "error",
                 j->err[0] != '\0' ? j->err : ab_strerror(status));
    job_finished(j->c);
    free(j->epochs);
    free(j);
}

static void flush_touched(struct clusters *c)
{
    struct flush_job *j = NULL;
    int64_t *epochs = NULL;
    size_t n, cap = 2 * c->table.n, len = 0, size;

    if (cap == 0)
        return;
    epochs = calloc(cap, sizeof(*epochs));
    if (epochs == NULL)
        return;
    n = clusters_table_take_seen(&c->table, epochs, cap);
    if (n == 0)
        goto out;
    j = calloc(1, sizeof(*j));
    size = n * 21 + 3; /* each epoch: at most 19 digits and a comma */
    if (j == NULL || (j->epochs = malloc(size)) == NULL)
        goto out;
    j->epochs[len++] = '{';
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(j->epochs + len, size - len, "%s%" PRId64, i > 0 ? "," : "",
                                epochs[i]);
    snprintf(j->epochs + len, size - len, "}");
    j->c = c;
    if (submit(c, flush_run, flush_done, j) == 0)
        j = NULL;
out:
    if (j != NULL)
        free(j->epochs);
    free(j);
    free(epochs);
}

static void flush_tick(struct loop_timer *t)
{
    struct clusters *c = t->arg;

    flush_touched(c);
    loop_timer_start(c->loop, &c->flush_timer, CLUSTERS_TOUCH_FLUSH_MS, flush_tick, c);
}

/* --- lookups ------------------------------------------------------------ */

int clusters_check_token(struct clusters *c, const char *cluster_id, const char *token, char *why,
                         size_t whylen)
{
    return clusters_table_check_token(&c->table, cluster_id, token, why, whylen);
}

int clusters_get(struct clusters *c, const char *cluster_id, struct cluster_info *out)
{
    struct clusters_entry *e = clusters_table_find(&c->table, cluster_id);

    if (e == NULL)
        return AB_ENOENT;
    clusters_table_info(e, out);
    return 0;
}

bool clusters_list_has_ns(const char *list, const char *ns)
{
    size_t n;

    if (!ns || !ns[0])
        return false; /* a record without a namespace belongs to nobody */
    if (!list || !list[0])
        return true;
    n = strlen(ns);
    for (const char *p = list; *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && memcmp(p, ns, n) == 0)
            return true;
        if (!end)
            break;
        p = end + 1;
    }
    return false;
}

bool clusters_serves_ns(struct clusters *c, const char *cluster_id, const char *ns)
{
    struct clusters_entry *e = clusters_table_find(&c->table, cluster_id);
    return e != NULL && clusters_list_has_ns(e->row.namespaces, ns);
}

static bool ns_name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 63 || s[0] == '-' || s[len - 1] == '-')
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

int clusters_parse_ns_list(const char *in, char *out, size_t outlen, char *err, size_t errlen)
{
    size_t used = 0, count = 0;

    if (outlen == 0)
        return AB_EINVAL;
    out[0] = '\0';
    if (!in || !in[0] || strcmp(in, "*") == 0)
        return 0;
    for (const char *p = in;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (!ns_name_ok(p, len)) {
            snprintf(err, errlen,
                     "namespace '%.*s' is invalid: a namespace is a DNS label of at most 63 "
                     "characters (lowercase letters, digits and '-'); separate several with ','",
                     (int)(len > 64 ? 64 : len), p);
            return AB_EINVAL;
        }
        char name[64];
        memcpy(name, p, len);
        name[len] = '\0';
        if (!clusters_list_has_ns(out[0] ? out : ",", name)) { /* "," matches nothing */
            if (++count > CLUSTERS_NS_COUNT_MAX || used + len + 2 > outlen) {
                snprintf(err, errlen, "namespaces: at most %d names and %zu bytes",
                         CLUSTERS_NS_COUNT_MAX, outlen - 1);
                return AB_EINVAL;
            }
            if (used)
                out[used++] = ',';
            memcpy(out + used, name, len + 1);
            used += len;
        }
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

size_t clusters_count(struct clusters *c)
{
    return c->table.n;
}

int clusters_at(struct clusters *c, size_t i, struct cluster_info *out)
{
    if (i >= c->table.n)
        return AB_ENOENT;
    clusters_table_info(&c->table.v[i], out);
    return 0;
}

const char *clusters_last_error(struct clusters *c)
{
    return c->last_error;
}

/* --- lifetime --------------------------------------------------------------------- */

static void make_instance(char *out, size_t len)
{
    char host[64] = "";
    uint8_t rnd[4] = {0};
    char hex[9];

    if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
        ab_strlcpy(host, "hub", sizeof(host));
    host[sizeof(host) - 1] = '\0';
    crypto_random(rnd, sizeof(rnd));
    crypto_hex_encode(rnd, sizeof(rnd), hex);
    snprintf(out, len, "%s-%s", host, hex);
}

int clusters_new(const struct clusters_deps *d, struct clusters **out, char *err, size_t errlen)
{
    struct clusters *c;

    *out = NULL;
    if (d->loop == NULL || d->db == NULL) {
        snprintf(err, errlen, "clusters_new needs the hub's loop and database pool");
        return AB_EINVAL;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        snprintf(err, errlen, "out of memory creating the cluster registry");
        return AB_ENOMEM;
    }
    c->loop = d->loop;
    c->db = d->db;
    c->bq_tail = &c->bq_head;
    make_instance(c->instance, sizeof(c->instance));
    loop_timer_start(c->loop, &c->refresh_timer, 0, refresh_tick, c);
    loop_timer_start(c->loop, &c->flush_timer, CLUSTERS_TOUCH_FLUSH_MS, flush_tick, c);
    *out = c;
    return 0;
}

void clusters_free(struct clusters *c)
{
    if (c == NULL)
        return;
    loop_timer_cancel(&c->refresh_timer);
    loop_timer_cancel(&c->flush_timer);
    c->revoke_fn = NULL;
    if (c->inflight > 0) {
        c->closing = true;
        return;
    }
    destroy(c);
}
