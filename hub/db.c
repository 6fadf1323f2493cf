/* The PostgreSQL worker pool. See db.h for the contract.
 *
 * One mutex guards the queues and the circuit state. Completed jobs go on a
 * list that one loop_post at a time drains on the loop thread; when the pool
 * is freed while such a post is still queued in the loop, the pool memory
 * stays until that post runs (loop_free drains posts), which then frees it. */
#include "hub/db.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"

#define DB_ERROR_MAX 256

struct db_job {
    struct db_job *next;
    db_job_fn fn;
    db_done_fn done;
    void *arg;
    int status;
};

struct db_list {
    struct db_job *head, *tail;
    size_t n;
};

struct db_worker {
    struct db_pool *pool;
    pthread_t thread;
    PGconn *conn; /* owned by the worker thread */
    int index;
};

struct db_pool {
    struct loop *loop;
    char *database_url;
    char *application_name;
    int64_t connect_timeout_ms;
    int64_t statement_timeout_ms;
    int64_t retry_ms;
    size_t queue_max;
    bool refuse_superuser;

    struct db_worker *workers;
    int nworkers;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct db_list todo; /* waiting for a worker */
    struct db_list done; /* waiting for the loop thread */
    size_t pending;      /* submitted, done() not yet run */
    bool wake_posted;    /* a loop_post of pool_wake is queued */
    bool stopping;
    bool zombie; /* freed by db_pool_free; pool_wake releases the memory */
    bool up;
    int64_t down_until_ms; /* monotonic; submits fail fast before this */
    char last_error[DB_ERROR_MAX];

    struct metric_family *m_up;
    struct metric_family *m_jobs;
    struct metric_family *m_pending;
};

static void list_push(struct db_list *l, struct db_job *j)
{
    j->next = NULL;
    if (l->tail != NULL)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static struct db_job *list_pop(struct db_list *l)
{
    struct db_job *j = l->head;

    if (j == NULL)
        return NULL;
    l->head = j->next;
    if (l->head == NULL)
        l->tail = NULL;
    l->n--;
    return j;
}

const char *db_error_line(PGconn *conn, const PGresult *res, char *buf, size_t len)
{
    const char *msg = res != NULL ? PQresultErrorMessage(res) : NULL;
    size_t n;

    if (msg == NULL || msg[0] == '\0')
        msg = conn != NULL ? PQerrorMessage(conn) : "no connection";
    /* libpq messages span lines ("... failed: Connection refused\n\tIs the
     * server running ..."): one line, single spaces. */
    n = 0;
    for (const char *p = msg; *p != '\0' && n + 1 < len; p++) {
        char c = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
        if (c == ' ' && (n == 0 || buf[n - 1] == ' '))
            continue;
        buf[n++] = c;
    }
    if (len > 0)
        buf[n] = '\0';
    while (n > 0 && buf[n - 1] == ' ')
        buf[--n] = '\0';
    return buf;
}

static void count_job(struct db_pool *p, const char *result)
{
    const char *v[] = {result};

    metrics_add(p->m_jobs, v, 1);
}

/* --- loop side ---------------------------------------------------------------- */

static void deliver(struct db_pool *p, struct db_list *batch)
{
    struct db_job *j;

    while ((j = list_pop(batch)) != NULL) {
        pthread_mutex_lock(&p->mu);
        p->pending--;
        pthread_mutex_unlock(&p->mu);
        j->done(j->arg, j->status);
        free(j);
    }
    metrics_set(p->m_pending, NULL, (double)db_pool_pending(p));
}

static void pool_destroy(struct db_pool *p)
{
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->workers);
    free(p->database_url);
    free(p->application_name);
    free(p);
}

/* Loop thread: runs the completions gathered so far. */
static void pool_wake(void *arg, int status)
{
    struct db_pool *p = arg;
    struct db_list batch;
    bool zombie;

    (void)status;
    pthread_mutex_lock(&p->mu);
    batch = p->done;
    memset(&p->done, 0, sizeof(p->done));
    p->wake_posted = false;
    zombie = p->zombie;
    pthread_mutex_unlock(&p->mu);
    if (zombie) {
        pool_destroy(p); /* db_pool_free delivered everything already */
        return;
    }
    deliver(p, &batch);
}

int db_submit(struct db_pool *p, db_job_fn job, db_done_fn done, void *arg)
{
    struct db_job *j;
    int rc = 0;

    j = calloc(1, sizeof(*j));
    if (j == NULL)
        return AB_ENOMEM;
    j->fn = job;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&p->mu);
    if (p->stopping)
        rc = AB_ECLOSED;
    else if (p->down_until_ms > ab_now_ms())
        rc = AB_EIO;
    else if (p->pending >= p->queue_max)
        rc = AB_EBUSY;
    if (rc == 0) {
        p->pending++;
        list_push(&p->todo, j);
        pthread_cond_signal(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != 0) {
        free(j);
        count_job(p, rc == AB_EBUSY ? "busy" : "unavailable");
        return rc;
    }
    metrics_set(p->m_pending, NULL, (double)db_pool_pending(p));
    return 0;
}

/* --- worker side -------------------------------------------------------------- */

static void set_down(struct db_pool *p, const char *why)
{
    bool was_up;

    pthread_mutex_lock(&p->mu);
    was_up = p->up;
    p->up = false;
    p->down_until_ms = ab_now_ms() + p->retry_ms;
    ab_strlcpy(p->last_error, why, sizeof(p->last_error));
    pthread_mutex_unlock(&p->mu);
    metrics_set(p->m_up, NULL, 0);
    if (was_up)
        LOG_WARN("database unavailable", "error", why);
}

static void set_up(struct db_pool *p)
{
    bool was_up;

    pthread_mutex_lock(&p->mu);
    was_up = p->up;
    p->up = true;
    p->down_until_ms = 0;
    pthread_mutex_unlock(&p->mu);
    metrics_set(p->m_up, NULL, 1);
    if (!was_up)
        LOG_INFO("database connected");
}

/* Is an idle connection still usable? A server that went away has left an
 * error or EOF on the socket, which PQconsumeInput turns into CONNECTION_BAD. */
static bool conn_is_alive(PGconn *c)
{
    struct pollfd pfd;

    if (PQstatus(c) != CONNECTION_OK)
        return false;
    pfd.fd = PQsocket(c);
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (pfd.fd < 0)
        return false;
    if (poll(&pfd, 1, 0) > 0) {
        PGnotify *n;

        if (PQconsumeInput(c) == 0)
            return false;
        while ((n = PQnotifies(c)) != NULL)
            PQfreemem(n);
    }
    return PQstatus(c) == CONNECTION_OK;
}

bool db_is_superuser(PGconn *c)
{
    const char *v = c ? PQparameterStatus(c, "is_superuser") : NULL;
    return v && strcmp(v, "on") == 0;
}

/* What this thread's connection has prepared: connections belong to one
 * thread (a pool worker, a CLI's main), and db_connect resets this for the
 * thread that connects, so a new connection at a freed one's address never
 * inherits its statements. */
static _Thread_local struct {
    const PGconn *conn;
    const struct db_stmt *done[DB_STMT_MAX];
    int n;
} tl_prepared;

int db_connect(const struct db_connect_options *o, PGconn **out, char *err, size_t errlen)
{
    const char *keys[10], *vals[10];
    char timeout[32], options[64], msg[DB_ERROR_MAX];
    int n = 0;
    PGconn *c;

    *out = NULL;
    snprintf(timeout, sizeof(timeout), "%" PRId64,
             AB_MAX((o->connect_timeout_ms + 999) / 1000, (int64_t)1));
    keys[n] = "connect_timeout", vals[n++] = timeout;
    if (o->statement_timeout_ms > 0) {
        snprintf(options, sizeof(options), "-c statement_timeout=%" PRId64,
                 o->statement_timeout_ms);
        keys[n] = "options", vals[n++] = options;
    }
    if (o->application_name != NULL)
        keys[n] = "fallback_application_name", vals[n++] = o->application_name;
    if (o->keepalives) {
        keys[n] = "keepalives", vals[n++] = "1";
        keys[n] = "keepalives_idle", vals[n++] = "10";
        keys[n] = "keepalives_interval", vals[n++] = "5";
        keys[n] = "keepalives_count", vals[n++] = "3";
    }
    if (o->database_url != NULL && o->database_url[0] != '\0') {
        /* Expanded last, so settings in the URL win over these defaults. */
        keys[n] = "dbname", vals[n++] = o->database_url;
    }
    keys[n] = NULL, vals[n] = NULL;
    c = PQconnectdbParams(keys, vals, 1);
    if (c == NULL) {
        snprintf(err, errlen, "out of memory creating a PostgreSQL connection");
        return AB_ENOMEM;
    }
    if (PQstatus(c) != CONNECTION_OK) {
        db_error_line(c, NULL, msg, sizeof(msg));
        if (o->hint != NULL)
            snprintf(err, errlen, "cannot connect to PostgreSQL: %s %s", msg, o->hint);
        else
            ab_strlcpy(err, msg, errlen);
        PQfinish(c);
        return AB_EIO;
    }
    tl_prepared.conn = NULL; /* nothing prepared on a new connection */
    tl_prepared.n = 0;
    *out = c;
    return 0;
}

static int worker_connect(struct db_worker *w)
{
    struct db_pool *p = w->pool;
    char msg[DB_ERROR_MAX];
    struct db_connect_options o = {
        .database_url = p->database_url,
        .connect_timeout_ms = p->connect_timeout_ms,
        .application_name = p->application_name,
        .statement_timeout_ms = p->statement_timeout_ms,
        .keepalives = true,
    };
    int rc = db_connect(&o, &w->conn, msg, sizeof(msg));

    if (rc != 0) {
        set_down(p, msg);
        return rc;
    }
    if (p->refuse_superuser && db_is_superuser(w->conn)) {
        snprintf(msg, sizeof(msg),
                 "PostgreSQL role '%s' is a superuser: serve refuses it; connect as a login role "
                 "that owns nothing (see scripts/quickstart.sh) or pass --allow-superuser",
                 PQuser(w->conn));
        PQfinish(w->conn);
        w->conn = NULL;
        set_down(p, msg);
        return AB_EDENIED;
    }
    set_up(p);
    return 0;
}

static int run_job(struct db_worker *w, struct db_job *j)
{
    struct db_pool *p = w->pool;
    bool down;
    int rc;

    if (w->conn != NULL && !conn_is_alive(w->conn)) {
        PQfinish(w->conn);
        w->conn = NULL;
    }
    if (w->conn == NULL) {
        pthread_mutex_lock(&p->mu);
        down = p->down_until_ms > ab_now_ms();
        pthread_mutex_unlock(&p->mu);
        if (down || worker_connect(w) != 0)
            return AB_EIO;
    }
    rc = j->fn(w->conn, j->arg);
    if (PQstatus(w->conn) != CONNECTION_OK) {
        char msg[DB_ERROR_MAX];

        /* Lost mid-job: the next job reconnects (and opens the circuit if
         * that fails). */
        db_error_line(w->conn, NULL, msg, sizeof(msg));
        pthread_mutex_lock(&p->mu);
        ab_strlcpy(p->last_error, msg, sizeof(p->last_error));
        pthread_mutex_unlock(&p->mu);
        PQfinish(w->conn);
        w->conn = NULL;
        if (rc == 0)
            rc = AB_EIO;
    } else if (PQtransactionStatus(w->conn) != PQTRANS_IDLE) {
        LOG_WARN("database job left its connection busy or in a transaction; closing it");
        PQfinish(w->conn);
        w->conn = NULL;
    }
    return rc;
}

/* Hands a finished job to the loop thread. */
static void complete(struct db_pool *p, struct db_job *j)
{
    bool post;

    pthread_mutex_lock(&p->mu);
    list_push(&p->done, j);
    post = !p->wake_posted;
    p->wake_posted = true;
    pthread_mutex_unlock(&p->mu);
    if (!post)
        return;
    /* The loop's post queue is bounded; it is full only under extreme load.
     * Keep trying: done() must run exactly once. */
    while (loop_post(p->loop, pool_wake, p) != 0) {
        struct timespec ts = {0, 1000000};

        pthread_mutex_lock(&p->mu);
        if (p->stopping) {
            /* db_pool_free delivers what is left on the done list. */
            p->wake_posted = false;
            pthread_mutex_unlock(&p->mu);
            return;
        }
        pthread_mutex_unlock(&p->mu);
        nanosleep(&ts, NULL);
    }
}

static void *worker_main(void *arg)
{
    struct db_worker *w = arg;
    struct db_pool *p = w->pool;
    sigset_t all;

    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the loop thread */
    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct db_job *j;

        while (!p->stopping && p->todo.head == NULL)
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->stopping)
            break;
        j = list_pop(&p->todo);
        pthread_mutex_unlock(&p->mu);
        j->status = run_job(w, j);
        count_job(p, j->status == 0 ? "ok" : j->status == AB_EIO ? "unavailable" : "error");
        complete(p, j);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    if (w->conn != NULL)
        PQfinish(w->conn);
    w->conn = NULL;
    return NULL;
}

/* --- lifecycle ---------------------------------------------------------------- */

struct db_pool *db_pool_new(struct loop *l, const struct db_pool_options *o, char *err,
                            size_t errlen)
{
    static const char *const job_labels[] = {"result", NULL};
    struct metrics_registry *reg = metrics_default();
    struct db_pool *p;

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        snprintf(err, errlen, "out of memory creating the database pool");
        return NULL;
    }
    p->loop = l;
    p->nworkers = o->workers > 0 ? o->workers : 4;
    p->queue_max = o->queue_max > 0 ? o->queue_max : 256;
    p->connect_timeout_ms = o->connect_timeout_ms > 0 ? o->connect_timeout_ms : 2000;
    p->statement_timeout_ms = o->statement_timeout_ms > 0 ? o->statement_timeout_ms : 5000;
    p->retry_ms = o->retry_ms > 0 ? o->retry_ms : 1000;
    p->refuse_superuser = o->refuse_superuser;
    p->database_url = strdup(o->database_url != NULL ? o->database_url : "");
    p->application_name =
        strdup(o->application_name != NULL ? o->application_name : "agentbox-hub");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->workers = calloc((size_t)p->nworkers, sizeof(*p->workers));
    if (p->database_url == NULL || p->application_name == NULL || p->workers == NULL) {
        snprintf(err, errlen, "out of memory creating the database pool");
        pool_destroy(p);
        return NULL;
    }
    p->m_up =
        metrics_register(reg, "agentbox_db_up", "1 when the last PostgreSQL connect succeeded",
                         METRIC_GAUGE, NULL, NULL, 0);
    p->m_jobs = metrics_register(reg, "agentbox_db_jobs_total",
                                 "Database jobs by result (ok, error, unavailable, busy)",
                                 METRIC_COUNTER, job_labels, NULL, 0);
    p->m_pending = metrics_register(reg, "agentbox_db_pending_jobs",
                                    "Database jobs submitted and not yet completed", METRIC_GAUGE,
                                    NULL, NULL, 0);
    metrics_set(p->m_up, NULL, 0);
    metrics_set(p->m_pending, NULL, 0);
    for (int i = 0; i < p->nworkers; i++) {
        p->workers[i].pool = p;
        p->workers[i].index = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i]) != 0) {
            snprintf(err, errlen, "cannot start database worker thread %d: %s", i, strerror(errno));
            p->nworkers = i;
            db_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void db_pool_free(struct db_pool *p)
{
    struct db_list batch;
    struct db_job *j;
    bool posted;

    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->nworkers; i++)
        pthread_join(p->workers[i].thread, NULL);

    /* Completed first, then the jobs no worker took, as cancelled. */
    pthread_mutex_lock(&p->mu);
    batch = p->done;
    memset(&p->done, 0, sizeof(p->done));
    while ((j = list_pop(&p->todo)) != NULL) {
        j->status = AB_ECLOSED;
        list_push(&batch, j);
    }
    pthread_mutex_unlock(&p->mu);
    deliver(p, &batch);

    pthread_mutex_lock(&p->mu);
    posted = p->wake_posted;
    p->zombie = posted;
    pthread_mutex_unlock(&p->mu);
    if (!posted)
        pool_destroy(p);
}

bool db_pool_is_up(struct db_pool *p)
{
    bool up;

    pthread_mutex_lock(&p->mu);
    up = p->up;
    pthread_mutex_unlock(&p->mu);
    return up;
}

const char *db_pool_last_error(struct db_pool *p, char *buf, size_t len)
{
    pthread_mutex_lock(&p->mu);
    ab_strlcpy(buf, p->last_error, len);
    pthread_mutex_unlock(&p->mu);
    return buf;
}

size_t db_pool_pending(struct db_pool *p)
{
    size_t n;

    pthread_mutex_lock(&p->mu);
    n = p->pending;
    pthread_mutex_unlock(&p->mu);
    return n;
}

int db_fail(PGconn *c, const PGresult *r, const char *what, char *err, size_t errlen)
{
    char line[256];

    snprintf(err, errlen, "%s: %s", what, db_error_line(c, r, line, sizeof(line)));
    return AB_EIO;
}

int db_exec(PGconn *c, const char *sql, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    int rc = 0;

    if (PQresultStatus(r) != PGRES_COMMAND_OK)
        rc = db_fail(c, r, sql, err, errlen);
    PQclear(r);
    return rc;
}

PGresult *db_exec_stmt(PGconn *c, const struct db_stmt *st, const char *const *vals)
{
    bool known = false;

    if (tl_prepared.conn != c) {
        tl_prepared.conn = c;
        tl_prepared.n = 0;
    }
    for (int i = 0; i < tl_prepared.n && !known; i++)
        known = tl_prepared.done[i] == st;
    if (!known && tl_prepared.n < DB_STMT_MAX) {
        PGresult *r = PQprepare(c, st->name, st->sql, st->nparams, NULL);
        if (PQresultStatus(r) != PGRES_COMMAND_OK)
            return r; /* the server's error, as a run of it would give */
        PQclear(r);
        tl_prepared.done[tl_prepared.n++] = st;
        known = true;
    }
    if (!known)
        return PQexecParams(c, st->sql, st->nparams, NULL, vals, NULL, NULL, 0);
    PGresult *r = PQexecPrepared(c, st->name, st->nparams, vals, NULL, NULL, 0);
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    if (state && strcmp(state, "26000") == 0) /* gone (DISCARD ALL): prepare again next time */
        tl_prepared.n = 0;
    return r;
}

int db_finish_tx(PGconn *c, int rc, char *err, size_t errlen)
{
    if (rc == 0)
        return db_exec(c, "COMMIT", err, errlen);
    PQclear(PQexec(c, "ROLLBACK"));
    return rc;
}

void db_one_line(char *buf, size_t len, const char *msg)
{
    size_t n = 0;

    if (len == 0)
        return;
    for (const char *p = msg != NULL ? msg : ""; *p != '\0' && n + 1 < len; p++) {
        char c = (*p == '\n' || *p == '\t' || *p == '\r') ? ' ' : *p;
        if (c == ' ' && (n == 0 || buf[n - 1] == ' '))
            continue;
        buf[n++] = c;
    }
    while (n > 0 && buf[n - 1] == ' ')
        n--;
    buf[n] = '\0';
}
