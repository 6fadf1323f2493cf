/* hub/db.c without a database: the circuit after a failed connect, the
 * queue bound, done() on the loop thread, cancellation at shutdown.
 * "Unreachable" is a closed port (refused at once); "slow" is a socket that
 * listens but never answers (libpq waits for its connect_timeout). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/loop.h"
#include "hub/db.h"

struct probe {
    struct loop *loop;
    int job_runs; /* touched by the worker; read after done() */
    int done_calls;
    int status;
    bool on_loop;
    int *remaining; /* loop_stop when it reaches 0 */
};

static int job_select1(PGconn *c, void *arg)
{
    struct probe *p = arg;

    (void)c;
    p->job_runs++;
    return 0;
}

static void probe_done(void *arg, int status)
{
    struct probe *p = arg;

    p->done_calls++;
    p->status = status;
    p->on_loop = loop_on_loop_thread(p->loop);
    if (p->remaining != NULL && --*p->remaining == 0)
        loop_stop(p->loop);
}

/* A port where nothing listens: bind, read the port, close. */
static int closed_port(void)
{
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    assert_true(fd >= 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* A listening socket nobody accepts from; the caller closes *fd. */
static int silent_port(int *fd)
{
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);

    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(*fd, 16), 0);
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

static void url_for(char *buf, size_t len, int port)
{
    snprintf(buf, len, "postgres://u:p@127.0.0.1:%d/db?sslmode=disable", port);
}

static void test_failed_connect_opens_the_circuit(void **state)
{
    struct db_pool_options o = {0};
    struct probe p = {0};
    char url[128], err[256] = "", why[256];
    struct loop *l;
    struct db_pool *pool;
    int remaining = 1;

    (void)state;
    l = loop_new(NULL);
    assert_non_null(l);
    url_for(url, sizeof(url), closed_port());
    o.database_url = url;
    o.workers = 2;
    o.retry_ms = 3600 * 1000; /* the circuit stays open for the whole test */
    pool = db_pool_new(l, &o, err, sizeof(err));
    assert_non_null(pool);
    assert_false(db_pool_is_up(pool));

    p.loop = l;
    p.remaining = &remaining;
    assert_int_equal(db_submit(pool, job_select1, probe_done, &p), 0);
    loop_run(l);
    assert_int_equal(p.done_calls, 1);
    assert_int_equal(p.status, AB_EIO);
    assert_int_equal(p.job_runs, 0); /* never ran without a connection */
    assert_true(p.on_loop);
    assert_false(db_pool_is_up(pool));
    db_pool_last_error(pool, why, sizeof(why));
    assert_non_null(strstr(why, "refused"));
    assert_null(strchr(why, '\n'));

    /* Known down: refused at submit time, done() never called. */
    struct probe q = {.loop = l};
    assert_int_equal(db_submit(pool, job_select1, probe_done, &q), AB_EIO);
    assert_int_equal(q.done_calls, 0);
    assert_int_equal(db_pool_pending(pool), 0);

    db_pool_free(pool);
    loop_free(l);
}

static void test_queue_bound_and_shutdown(void **state)
{
    struct db_pool_options o = {0};
    struct probe p[3];
    char url[128], err[256] = "";
    struct loop *l;
    struct db_pool *pool;
    int fd;

    (void)state;
    memset(p, 0, sizeof(p));
    l = loop_new(NULL);
    assert_non_null(l);
    url_for(url, sizeof(url), silent_port(&fd));
    o.database_url = url;
    o.workers = 1;
    o.queue_max = 2;
    o.connect_timeout_ms = 2000;
    pool = db_pool_new(l, &o, err, sizeof(err));
    assert_non_null(pool);
    for (int i = 0; i < 3; i++)
        p[i].loop = l;
    /* done() runs only on the loop thread, and we are it: nothing completes
     * while we submit, so the bound is exact. */
    assert_int_equal(db_submit(pool, job_select1, probe_done, &p[0]), 0);
    assert_int_equal(db_submit(pool, job_select1, probe_done, &p[1]), 0);
    assert_int_equal(db_submit(pool, job_select1, probe_done, &p[2]), AB_EBUSY);
    assert_int_equal(db_pool_pending(pool), 2);

    /* The one worker is either stuck connecting to the silent port with the
     * first job (then it fails with AB_EIO) or has not taken it yet (then it
     * is cancelled). Freeing the pool waits for the worker; the second job
     * can only have stayed queued: cancelled. Each done() exactly once. */
    db_pool_free(pool);
    assert_int_equal(p[0].done_calls, 1);
    assert_true(p[0].status == AB_EIO || p[0].status == AB_ECLOSED);
    assert_int_equal(p[1].done_calls, 1);
    assert_int_equal(p[1].status, AB_ECLOSED);
    assert_int_equal(p[2].done_calls, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(p[i].job_runs, 0);
    /* Runs any wake-up the pool left queued in the loop (it must not touch
     * the freed pool's callbacks twice). */
    loop_free(l);
    assert_int_equal(p[0].done_calls, 1);
    assert_int_equal(p[1].done_calls, 1);
    close(fd);
}

static void test_error_line_is_one_line(void **state)
{
    char buf[64];

    (void)state;
    /* No connection and no result: a fixed message, not a crash. */
    assert_string_equal(db_error_line(NULL, NULL, buf, sizeof(buf)), "no connection");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_failed_connect_opens_the_circuit),
        cmocka_unit_test(test_queue_bound_and_shutdown),
        cmocka_unit_test(test_error_line_is_one_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
