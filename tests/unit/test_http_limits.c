/* What does not fit is refused, never cut: an oversized request line or head,
 * a unix socket path longer than sun_path. Each failure keeps its code and
 * names the limit. The loop runs on this thread until the error arrives. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"

struct outcome {
    struct loop *loop;
    int calls;
    int err;
    char msg[256];
    bool timed_out;
};

static void on_head(struct http_client *c, int status, const struct http_header *h, int n,
                    void *arg)
{
    struct outcome *o = arg;
    o->calls++;
}

static void on_end(struct http_client *c, void *arg)
{
    struct outcome *o = arg;
    o->calls++;
    loop_stop(o->loop);
}

static void on_error(struct http_client *c, int err, const char *msg, void *arg)
{
    struct outcome *o = arg;
    o->calls++;
    o->err = err;
    ab_strlcpy(o->msg, msg ? msg : "", sizeof(o->msg));
    loop_stop(o->loop);
}

static const struct http_client_handler handler = {
    .on_head = on_head,
    .on_end = on_end,
    .on_error = on_error,
};

static void deadline(struct loop_timer *t)
{
    struct outcome *o = t->arg;
    o->timed_out = true;
    loop_stop(o->loop);
}

/* Starts one request and runs the loop until its terminal callback (or 10 s). */
static void run_client(const struct http_client_options *opts, struct outcome *o)
{
    struct loop_timer t;

    memset(&t, 0, sizeof(t));
    memset(o, 0, sizeof(*o));
    o->loop = loop_new(NULL);
    assert_non_null(o->loop);
    struct http_client *c = http_client_start(o->loop, opts, &handler, o);
    assert_non_null(c);            /* only allocation failure gives NULL */
    assert_int_equal(o->calls, 0); /* never called back before start returns */
    loop_timer_start(o->loop, &t, 10000, deadline, o);
    loop_run(o->loop);
    loop_timer_cancel(&t);
    loop_free(o->loop);
    assert_false(o->timed_out);
    assert_int_equal(o->calls, 1);
}

static void test_request_line_too_long_refused(void **state)
{
    size_t n = HTTP_HEAD_MAX + 10;
    char *target = malloc(n + 1);
    struct outcome o;

    target[0] = '/';
    memset(target + 1, 'a', n - 1);
    target[n] = '\0';
    struct http_client_options opts = {
        .addr = "127.0.0.1:9", .method = "GET", .target = target, .timeout_ms = 5000};
    run_client(&opts, &o);
    free(target);
    assert_int_equal(o.err, AB_ELIMIT);
    assert_non_null(strstr(o.msg, "request line"));
    char want[64];
    snprintf(want, sizeof(want), "longer than %d bytes", HTTP_HEAD_MAX - 1);
    assert_non_null(strstr(o.msg, want));
}

static void test_request_head_too_big_refused(void **state)
{
    size_t n = HTTP_HEAD_MAX;
    char *value = malloc(n + 1);
    struct outcome o;

    memset(value, 'v', n);
    value[n] = '\0';
    struct http_header h[] = {{"X-Big", value}};
    struct http_client_options opts = {.addr = "127.0.0.1:9",
                                       .method = "GET",
                                       .target = "/",
                                       .headers = h,
                                       .nheaders = 1,
                                       .timeout_ms = 5000};
    run_client(&opts, &o);
    free(value);
    assert_int_equal(o.err, AB_ELIMIT);
    assert_non_null(strstr(o.msg, "request head"));
    assert_non_null(strstr(o.msg, "16384 bytes"));
}

static void test_client_unix_path_too_long_named(void **state)
{
    char addr[300];
    struct outcome o;

    memcpy(addr, "unix:/", 6);
    memset(addr + 6, 's', 200);
    addr[206] = '\0';
    struct http_client_options opts = {
        .addr = addr, .method = "GET", .target = "/", .timeout_ms = 5000};
    run_client(&opts, &o);
    assert_int_equal(o.err, AB_EIO);
    assert_non_null(strstr(o.msg, "unix socket path is longer than 107 bytes: '/sss"));
}

static void test_server_unix_path_too_long_named(void **state)
{
    char listen[300], err[256] = "";
    struct http_server *s = NULL;
    struct loop *l = loop_new(NULL);

    assert_non_null(l);
    memcpy(listen, "unix:/tmp/", 10);
    memset(listen + 10, 'p', 150);
    listen[160] = '\0';
    struct http_server_options o = {.listen = listen};
    assert_int_equal(http_server_start(l, &o, &s, err, sizeof(err)), AB_EINVAL);
    assert_null(s);
    assert_non_null(strstr(err, "unix socket path must be 1..107 bytes"));
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request_line_too_long_refused),
        cmocka_unit_test(test_request_head_too_big_refused),
        cmocka_unit_test(test_client_unix_path_too_long_named),
        cmocka_unit_test(test_server_unix_path_too_long_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
