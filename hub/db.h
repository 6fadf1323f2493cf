/* PostgreSQL from the loop: a fixed pool of worker threads, each with its
 * own connection, fed by a bounded queue (DESIGN §4, §9).
 *
 * The loop thread submits a job; a worker runs job(conn, arg) with a live
 * connection; done(arg, status) then runs on the loop thread (handed back
 * with loop_post). The loop never waits on PostgreSQL:
 *   - a full queue is AB_EBUSY at submit time (answer 503);
 *   - after a failed connect the pool is "down" for retry_ms: submits fail at
 *     once with AB_EIO, and queued jobs are failed without trying, so a dead
 *     database costs a request microseconds, not a connect timeout;
 *   - every connection has connect_timeout and statement_timeout.
 * Connections are opened lazily and replaced when they break (checked before
 * each job, so a restarted server costs no failed job). */
#ifndef AGENTBOX_HUB_DB_H
#define AGENTBOX_HUB_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

struct loop;
struct db_pool;

struct db_pool_options {
    const char *database_url;     /* URL or conninfo; NULL or "" → libpq's PG* variables */
    int workers;                  /* threads = connections; 0 → 4 */
    size_t queue_max;             /* submitted, done() not yet run; 0 → 256 */
    int64_t connect_timeout_ms;   /* 0 → 2000 (libpq counts whole seconds, at least 2) */
    int64_t statement_timeout_ms; /* 0 → 5000 */
    int64_t retry_ms;             /* fail fast this long after a failed connect; 0 → 1000 */
    const char *application_name; /* NULL → "agentbox-hub" */
    /* Refuse a connection whose role is a superuser (the server reports
     * is_superuser at connect): the pool stays down with a message saying so. */
    bool refuse_superuser;
};

/* Whether c's role is a PostgreSQL superuser (is_superuser, reported by the
 * server at connect). */
bool db_is_superuser(PGconn *c);

/* Runs on a worker thread with a connection that was alive just before.
 * Returns 0 or a negative ab_err, passed to done as status. The job must
 * leave the connection idle (no open transaction, results consumed), else the
 * pool closes it. It must not touch lws or loop-owned state. */
typedef int (*db_job_fn)(PGconn *conn, void *arg);
/* Runs on the loop thread. status: the job's return value; AB_EIO when the
 * database could not be reached (see db_pool_last_error); AB_ECLOSED when the
 * pool shut down before the job ran. */
typedef void (*db_done_fn)(void *arg, int status);

/* Starts the workers; connects nothing yet. NULL with err on failure.
 * The pool keeps l; it must outlive the pool. */
struct db_pool *db_pool_new(struct loop *l, const struct db_pool_options *o, char *err,
                            size_t errlen);

/* Loop thread only. Returns 0 (done will run exactly once), or without
 * calling done: AB_EBUSY (queue full), AB_EIO (database known down),
 * AB_ECLOSED (pool shutting down), AB_ENOMEM. */
int db_submit(struct db_pool *p, db_job_fn job, db_done_fn done, void *arg);

/* Loop thread (or after loop_run returned), before loop_free. Joins the
 * workers; completed jobs get their done(), queued ones done(arg, AB_ECLOSED),
 * all before this returns. */
void db_pool_free(struct db_pool *p);

/* False after a failed connect until a connect succeeds again. */
bool db_pool_is_up(struct db_pool *p);
/* The last connection error (libpq's words, one line), "" when none. Returns buf. */
const char *db_pool_last_error(struct db_pool *p, char *buf, size_t len);
/* Jobs submitted and not yet done. */
size_t db_pool_pending(struct db_pool *p);

/* How to reach PostgreSQL: the one libpq connect of the hub (the pool's
 * workers and the CLIs). */
struct db_connect_options {
    const char *database_url;     /* URL or conninfo; NULL or "": libpq's PG* variables */
    int64_t connect_timeout_ms;   /* rounded up to whole seconds, at least 1 */
    const char *application_name; /* fallback_application_name (the URL's wins) */
    int64_t statement_timeout_ms; /* > 0: SET statement_timeout for the session */
    bool keepalives;              /* TCP keepalives (10 s idle, 5 s apart, 3 probes) */
    const char *hint;             /* CLIs: what to set (DB_CONNECT_HINT), see below */
};

#define DB_CONNECT_HINT "(set --database-url, DATABASE_URL or PG* variables)"

/* Connects; settings in the URL win over the options (it is expanded last).
 * 0 with *out (the caller PQfinish()es it); AB_ENOMEM; or AB_EIO with err =
 * libpq's words on one line (the pool's last error), or with a hint
 * "cannot connect to PostgreSQL: <libpq's words> <hint>". */
int db_connect(const struct db_connect_options *o, PGconn **out, char *err, size_t errlen);

/* Copies the error of conn (or of res when not NULL) as one line into buf. */
const char *db_error_line(PGconn *conn, const PGresult *res, char *buf, size_t len);

/* Small synchronous helpers for job functions and CLIs (any thread that owns c).
 * db_fail writes "<what>: <server error>" into err and returns AB_EIO;
 * db_exec runs a statement without results (BEGIN, COMMIT, DDL);
 * db_finish_tx COMMITs when rc is 0, else ROLLBACKs, and returns rc or the
 * commit's error. */
/* Folds a libpq message (newlines, tabs, runs of spaces) onto one line. */
void db_one_line(char *buf, size_t len, const char *msg);
int db_fail(PGconn *c, const PGresult *r, const char *what, char *err, size_t errlen);
int db_exec(PGconn *c, const char *sql, char *err, size_t errlen);
int db_finish_tx(PGconn *c, int rc, char *err, size_t errlen);

/* A statement a job runs often: prepared on a connection the first time it
 * runs there (parsed and planned once, not at every run), by the thread
 * that owns the connection. Declare one static const per statement; the
 * name is the server-side statement's and must be unique. */
struct db_stmt {
    const char *name;
    const char *sql;
    int nparams;
};

/* PQexecPrepared of st on c with text parameters, preparing it first when
 * this connection has not yet; the result (the caller PQclear()s it) or
 * NULL out of memory. A connection made by db_connect on this thread starts
 * with nothing prepared; at most DB_STMT_MAX statements are kept per thread
 * (more are run unprepared). */
#define DB_STMT_MAX 16
PGresult *db_exec_stmt(PGconn *c, const struct db_stmt *st, const char *const *vals);

#endif
