/* The E2B layer's usage and log paths against a fake runtime (fake_rt.h):
 * the /metrics exporter (metrics.h) and the live logs answer (logs.h) need
 * nothing but runtime.h. Real loop, real worker threads; every wait is on a
 * condition with a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agent/e2b/e2b.h"
#include "agent/e2b/logs.h"
#include "agent/e2b/metrics.h"
#include "agent/runtime/runtime.h"
#include "fake_rt.h"

#define DEADLINE_MS 10000
#define POLL_MS 5

/* ---- running the loop until a condition holds ------------------------------------ */

struct waiting {
    struct loop *loop;
    struct loop_timer timer;
    bool (*cond)(void *arg);
    void *arg;
    int64_t deadline_ms;
    bool met;
};

static void wait_poll(struct loop_timer *t)
{
    struct waiting *w = t->arg;
    if (w->cond(w->arg)) {
        w->met = true;
        loop_stop(w->loop);
    } else if (ab_now_ms() > w->deadline_ms) {
        loop_stop(w->loop);
    } else {
        loop_timer_start(w->loop, &w->timer, POLL_MS, wait_poll, w);
    }
}

/* Runs l until cond(arg) or the deadline; true when cond held. A loop runs
 * once (loop_stop is final), so a test with several steps makes cond a
 * sequence of them. */
static bool run_until(struct loop *l, bool (*cond)(void *), void *arg)
{
    struct waiting w = {.loop = l, .cond = cond, .arg = arg};
    w.deadline_ms = ab_now_ms() + DEADLINE_MS;
    loop_timer_start(l, &w.timer, 0, wait_poll, &w);
    loop_run(l);
    loop_timer_cancel(&w.timer);
    return w.met;
}

/* ---- the exporter ------------------------------------------------------------------ */

struct exp_env {
    struct fake_rt f;
    struct metrics_registry *reg;
    int rt_asks;         /* rounds: the exporter asks for the runtime at each */
    const char *want;    /* a line that must be rendered ... */
    const char *notwant; /* ... and one that must not */
    int min_asks;
    /* optional next step, once the current condition holds */
    void (*next)(struct exp_env *x);
};

static struct rt *exp_rt(void *arg)
{
    struct exp_env *x = arg;
    x->rt_asks++;
    return &x->f.base;
}

static bool rendered(void *arg)
{
    struct exp_env *x = arg;
    size_t len = 0;
    char *text = metrics_render(x->reg, &len);
    bool ok = text && x->rt_asks >= x->min_asks && (!x->want || strstr(text, x->want)) &&
              (!x->notwant || !strstr(text, x->notwant));
    free(text);
    if (ok && x->next) {
        void (*next)(struct exp_env *) = x->next;
        x->next = NULL;
        next(x);
        return false;
    }
    return ok;
}

static struct fake_sbx *g_a, *g_b;

/* Step 1 is checked here, then a1 ends and b2 becomes readable. */
static void first_round_seen(struct exp_env *x)
{
    size_t len = 0;
    char *text = metrics_render(x->reg, &len);
    assert_non_null(text);
    const char *lines[] = {
        "container_memory_working_set_bytes{namespace=\"team-a\",pod=\"a1\","
        "container=\"sandbox\"} 4096\n",
        "container_memory_rss{namespace=\"team-a\",pod=\"a1\",container=\"sandbox\"} 3072\n",
        "container_memory_cache{namespace=\"team-a\",pod=\"a1\",container=\"sandbox\"} 1024\n",
        "container_fs_usage_bytes{namespace=\"team-a\",pod=\"a1\",container=\"sandbox\"} 8192\n",
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(lines); i++) {
        if (!strstr(text, lines[i]))
            fail_msg("missing %s in\n%s", lines[i], text);
    }
    assert_null(strstr(text, "pod=\"b2\""));
    assert_null(strstr(text, "pod=\"c3\""));
    free(text);
    /* a1 ends: its series go at the next round; b2 reads now */
    g_a->present = false;
    g_b->usage.err = 0;
    x->want = "container_cpu_usage_seconds_total{namespace=\"team-a\",pod=\"b2\","
              "container=\"sandbox\"} 99\n";
    x->notwant = "pod=\"a1\"";
}

static void exporter_sets_and_drops_series(void **state)
{
    struct exp_env *x = calloc(1, sizeof(*x));
    struct loop *l = loop_new(NULL);
    struct e2b_exporter *exp = NULL;
    (void)state;

    assert_non_null(x);
    assert_non_null(l);
    fake_rt_init(&x->f, RT_CAP_USAGE);
    x->reg = metrics_registry_new();
    struct fake_sbx *a = fake_rt_add(&x->f, "team-a", "a1", RT_RUNNING);
    a->usage = (struct rt_usage){.cpu_seconds = 1.5,
                                 .mem_working_set = 4096,
                                 .mem_rss = 3072,
                                 .mem_cache = 1024,
                                 .disk_used = 8192,
                                 .net_rx_bytes = 10,
                                 .net_tx_bytes = 20,
                                 .cpu_count = 2,
                                 .mem_limit = 1 << 30};
    /* gone between the probe and the read: no series */
    struct fake_sbx *b = fake_rt_add(&x->f, "team-a", "b2", RT_RUNNING);
    b->usage.err = AB_ENOENT;
    b->usage.cpu_seconds = 99;
    /* idle (a warm pool's): not a sandbox anyone owns, never exported */
    struct fake_sbx *c = fake_rt_add(&x->f, "team-a", "c3", RT_IDLE);
    c->usage.cpu_seconds = 77;

    struct e2b_exporter_deps d = {
        .loop = l, .registry = x->reg, .rt = exp_rt, .arg = x, .first_ms = 1, .interval_ms = 10};
    assert_int_equal(e2b_exporter_new(&d, &exp), 0);

    x->want = "container_cpu_usage_seconds_total{namespace=\"team-a\",pod=\"a1\","
              "container=\"sandbox\"} 1.5\n";
    x->next = first_round_seen;
    g_a = a;
    g_b = b;
    assert_true(run_until(l, rendered, x));
    assert_null(x->next); /* both steps were seen */
    assert_true(x->f.usage_probes >= 3);

    e2b_exporter_free(exp);
    loop_free(l);
    metrics_registry_free(x->reg);
    free(x);
}

static void exporter_needs_the_usage_capability(void **state)
{
    struct exp_env *x = calloc(1, sizeof(*x));
    struct loop *l = loop_new(NULL);
    struct e2b_exporter *exp = NULL;
    (void)state;

    assert_non_null(x);
    fake_rt_init(&x->f, 0); /* no RT_CAP_USAGE */
    x->reg = metrics_registry_new();
    fake_rt_add(&x->f, "team-a", "a1", RT_RUNNING)->usage.cpu_seconds = 3;
    struct e2b_exporter_deps d = {
        .loop = l, .registry = x->reg, .rt = exp_rt, .arg = x, .first_ms = 1, .interval_ms = 5};
    assert_int_equal(e2b_exporter_new(&d, &exp), 0);
    x->min_asks = 5; /* five rounds went by ... */
    x->notwant = "pod=\"a1\"";
    assert_true(run_until(l, rendered, x));
    assert_int_equal(x->f.usage_probes, 0); /* ... and nothing was asked of the runtime */
    e2b_exporter_free(exp);
    loop_free(l);
    metrics_registry_free(x->reg);
    free(x);
}

/* ---- the live logs answer ---------------------------------------------------------------- */

static const char LOG_TEXT[] = "2026-01-02T03:04:05.250Z INFO envd serving on /run/agentbox\n"
                               "DEBUG reading config\n"
                               "2026-01-02T03:04:06Z [WARN] disk almost full\n"
                               "\n"
                               "2026-01-02T03:04:07.5Z ERROR: cannot open /nope\n";

#include "capture.h"

struct log_env {
    struct fake_rt f;
    struct loop *loop; /* one per request: a loop runs once */
};
static struct log_env g_env; /* the routes' argument */

static void h_logs(struct http_exchange *ex, bool v2)
{
    struct rt_log_query q;
    if (e2b_log_query(ex, v2, &q) != 0)
        return;
    e2b_logs_live(g_env.loop, &g_env.f.base, ex, http_param(ex, "id"), &q, v2);
}
static void h_v1(struct http_exchange *ex, void *arg)
{
    (void)arg;
    h_logs(ex, false);
}
static void h_v2(struct http_exchange *ex, void *arg)
{
    (void)arg;
    h_logs(ex, true);
}

static bool finished(void *arg)
{
    return ((struct capture *)arg)->finished;
}

/* GET target through the real handlers; returns the parsed body (or NULL). */
static json_t *get(const char *target, struct capture *c)
{
    static const struct http_route routes[] = {
        {"GET", "/sandboxes/{id}/logs", h_v1, NULL, 0},
        {"GET", "/v2/sandboxes/{id}/logs", h_v2, NULL, 0},
    };
    struct http_router *r = http_router_new(routes, AB_ARRAY_LEN(routes));
    struct http_request head;
    char path[256];
    const char *qm = strchr(target, '?');

    assert_non_null(r);
    g_env.loop = loop_new(NULL);
    assert_non_null(g_env.loop);
    memset(c, 0, sizeof(*c));
    memset(&head, 0, sizeof(head));
    snprintf(path, sizeof(path), "%.*s", qm ? (int)(qm - target) : (int)strlen(target), target);
    head.method = "GET";
    head.target = target;
    head.path = path;
    head.query = qm ? qm + 1 : "";
    head.peer = "unix";
    struct http_exchange *ex = http_exchange_new(r, &head, &cap_ops, c);
    assert_non_null(ex);
    http_exchange_start(ex);
    http_exchange_body_end(ex);
    assert_true(run_until(g_env.loop, finished, c));
    http_exchange_release(ex);
    http_router_free(r);
    loop_free(g_env.loop);
    g_env.loop = NULL;
    return json_loads(c->body, 0, NULL);
}

static void logs_setup(unsigned caps)
{
    fake_rt_init(&g_env.f, caps);
    struct fake_sbx *s = fake_rt_add(&g_env.f, "team-a", "a1", RT_RUNNING);
    s->log = LOG_TEXT;
    s->s.claimed_ms = 1767323000000; /* 2026-01-02T03:03:20Z: the time of untimed lines */
}

static void logs_v1_shape_levels_and_times(void **state)
{
    struct capture c;
    (void)state;
    logs_setup(RT_CAP_LOGS);
    json_t *j = get("/sandboxes/a1/logs?limit=50", &c);
    assert_int_equal(c.status, 200);
    assert_non_null(j);
    json_t *plain = json_object_get(j, "logs"), *ent = json_object_get(j, "logEntries");
    assert_int_equal(json_array_size(ent), 4); /* the empty line is no entry */
    assert_int_equal(json_array_size(plain), 4);
    static const char *const levels[] = {"info", "debug", "warn", "error"};
    static const char *const times[] = {"2026-01-02T03:04:05.250Z", "2026-01-02T03:03:20.000Z",
                                        "2026-01-02T03:04:06.000Z", "2026-01-02T03:04:07.500Z"};
    for (size_t i = 0; i < 4; i++) {
        json_t *e = json_array_get(ent, i);
        assert_string_equal(json_string_value(json_object_get(e, "level")), levels[i]);
        assert_string_equal(json_string_value(json_object_get(e, "timestamp")), times[i]);
        assert_string_equal(json_string_value(json_object_get(json_array_get(plain, i), "line")),
                            json_string_value(json_object_get(e, "message")));
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(e, "fields"), "container")), "envd");
    }
    assert_string_equal(json_string_value(json_object_get(json_array_get(ent, 0), "message")),
                        "2026-01-02T03:04:05.250Z INFO envd serving on /run/agentbox");
    json_decref(j);

    /* start (ms) skips older entries; limit caps */
    j = get("/sandboxes/a1/logs?start=1767323046000&limit=1", &c);
    assert_int_equal(json_array_size(json_object_get(j, "logEntries")), 1);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(j, "logEntries"), 0), "level")),
                        "warn");
    json_decref(j);
    assert_true(g_env.f.log_probes >= 2);
}

static void logs_v2_filters(void **state)
{
    struct capture c;
    (void)state;
    logs_setup(RT_CAP_LOGS);
    json_t *j = get("/v2/sandboxes/a1/logs?level=warn&direction=backward", &c);
    assert_int_equal(c.status, 200);
    json_t *logs = json_object_get(j, "logs");
    assert_int_equal(json_array_size(logs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(logs, 0), "level")),
                        "error"); /* newest first */
    assert_string_equal(json_string_value(json_object_get(json_array_get(logs, 1), "level")),
                        "warn");
    json_decref(j);

    j = get("/v2/sandboxes/a1/logs?search=envd%20serving", &c);
    logs = json_object_get(j, "logs");
    assert_int_equal(json_array_size(logs), 1);
    assert_non_null(
        strstr(json_string_value(json_object_get(json_array_get(logs, 0), "message")), "envd"));
    json_decref(j);

    j = get("/v2/sandboxes/a1/logs?level=loud", &c);
    assert_int_equal(c.status, 400);
    assert_non_null(strstr(c.body, "level must be debug, info, warn or error"));
    json_decref(j);
}

static void logs_without_the_capability_are_empty(void **state)
{
    struct capture c;
    (void)state;
    logs_setup(0); /* a runtime that cannot read logs */
    json_t *j = get("/v2/sandboxes/a1/logs", &c);
    assert_int_equal(c.status, 200);
    assert_int_equal(json_array_size(json_object_get(j, "logs")), 0);
    assert_int_equal(g_env.f.log_probes, 0);
    json_decref(j);
}

/* ---- the seam's own text → entries ----------------------------------------------------- */

static void log_text_tail_and_ring(void **state)
{
    struct rt_log_query q = {.limit = 0};
    struct rt_log out;
    (void)state;
    /* a partial first line is dropped; more than RT_LOG_LINES_MAX keeps the last ones */
    size_t cap = (RT_LOG_LINES_MAX + 10) * 16 + 32;
    char *text = malloc(cap);
    size_t len = (size_t)snprintf(text, cap, "cut-in-the-middle\n");
    for (int i = 0; i < RT_LOG_LINES_MAX + 10; i++)
        len += (size_t)snprintf(text + len, cap - len, "line %d\n", i);
    assert_int_equal(rt_log_from_text(text, len, true, 0, &q, &out), 0);
    assert_int_equal(out.n, RT_LOG_LINES_MAX);
    assert_string_equal(out.entries[0].line, "line 10");
    assert_string_equal(out.entries[out.n - 1].line, "line 1009");
    rt_log_free(&out);
    assert_int_equal(rt_log_infer_level("  (warning) x"), RT_LOG_WARN);
    assert_int_equal(rt_log_infer_level("ERRORS are fine"), RT_LOG_INFO);
    assert_int_equal(rt_log_infer_level("<fatal> boom"), RT_LOG_ERROR);

    /* envd's JSON lines: level and time come from their keys, not the start */
    const char *js = "{\"timestamp\":\"2026-12-01T10:00:01.250Z\",\"level\":\"warn\","
                     "\"component\":\"envd\",\"message\":\"say \\\"level\\\":\\\"error\\\"\"}\n"
                     "{\"ts\":\"2026-12-01T10:00:02Z\",\"level\":\"debug\",\"msg\":\"x\"}\n"
                     "2026-12-01T10:00:03Z ERROR plain\n";
    text = strdup(js);
    assert_int_equal(rt_log_from_text(text, strlen(js), false, 7, &q, &out), 0);
    assert_int_equal(out.n, 3);
    assert_int_equal(out.entries[0].level, RT_LOG_WARN);
    assert_int_equal(out.entries[0].ms, 1796119201250LL);
    assert_int_equal(out.entries[1].level, RT_LOG_DEBUG);
    assert_int_equal(out.entries[1].ms, 1796119202000LL);
    assert_int_equal(out.entries[2].level, RT_LOG_ERROR);
    assert_int_equal(out.entries[2].ms, 1796119203000LL);
    rt_log_free(&out);
}

/* e2b_new gives the failing step's code (the agent used to turn every
 * failure into AB_ELIMIT) and a reason naming the setting; nothing leaks. */
static void e2b_new_keeps_the_code_and_names_the_setting(void **state)
{
    struct loop *l = loop_new(NULL);
    char err[256] = "", long_dir[1200], *tok = malloc(2048);
    struct e2b *e = (struct e2b *)1;
    (void)state;
    assert_non_null(l);
    assert_non_null(tok);

    /* a state_dir whose token key path does not fit: refused, never cut */
    memset(long_dir, 'd', sizeof(long_dir) - 1);
    long_dir[0] = '/';
    long_dir[sizeof(long_dir) - 1] = '\0';
    struct e2b_deps d = {.loop = l, .cluster = "alpha", .state_dir = long_dir};
    assert_int_equal(e2b_new(&d, &e, err, sizeof(err)), AB_EINVAL);
    assert_null(e);
    assert_non_null(strstr(err, "state_dir"));

    /* PROMETHEUS_TOKEN over its limit: AB_EINVAL naming the variable */
    memset(tok, 't', 2047);
    tok[2047] = '\0';
    setenv("PROMETHEUS_TOKEN", tok, 1);
    char dir[] = "/tmp/agentbox-e2b-new-XXXXXX", key[64];
    assert_non_null(mkdtemp(dir));
    d.state_dir = dir;
    e = (struct e2b *)1;
    err[0] = '\0';
    assert_int_equal(e2b_new(&d, &e, err, sizeof(err)), AB_EINVAL);
    assert_null(e);
    assert_non_null(strstr(err, "PROMETHEUS_TOKEN"));
    unsetenv("PROMETHEUS_TOKEN");
    snprintf(key, sizeof(key), "%s/e2b-token.key", dir);
    unlink(key);
    rmdir(dir);
    free(tok);
    loop_free(l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exporter_sets_and_drops_series),
        cmocka_unit_test(exporter_needs_the_usage_capability),
        cmocka_unit_test(logs_v1_shape_levels_and_times),
        cmocka_unit_test(logs_v2_filters),
        cmocka_unit_test(logs_without_the_capability_are_empty),
        cmocka_unit_test(log_text_tail_and_ring),
        cmocka_unit_test(e2b_new_keeps_the_code_and_names_the_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
