/* Prometheus text rendering, escaping, series bounds and atomic updates. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/metrics.h"

#define DROPPED_TEXT                                                                               \
    "# HELP agentbox_metrics_dropped_series_total Updates dropped because a metric family "        \
    "reached its series limit.\n"                                                                  \
    "# TYPE agentbox_metrics_dropped_series_total counter\n"

static void assert_render(struct metrics_registry *r, const char *want)
{
    size_t len = 0;
    char *got = metrics_render(r, &len);

    assert_non_null(got);
    assert_int_equal(len, strlen(got));
    assert_string_equal(got, want);
    free(got);
}

static void test_empty_registry(void **state)
{
    struct metrics_registry *r = metrics_registry_new();

    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n");
    metrics_registry_free(r);
}

static void test_counter(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    struct metric_family *f =
        metrics_register(r, "a_requests_total", "Requests served.", METRIC_COUNTER, NULL, NULL, 0);

    assert_non_null(f);
    /* A label-less family renders 0 before any update. */
    assert_render(r,
                  "# HELP a_requests_total Requests served.\n"
                  "# TYPE a_requests_total counter\n"
                  "a_requests_total 0\n" DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n");
    metrics_add(f, NULL, 1);
    metrics_add(f, NULL, 2.5);
    metrics_add(f, NULL, -1);  /* counters never go down */
    metrics_add(f, NULL, NAN); /* nor become NaN */
    assert_render(r, "# HELP a_requests_total Requests served.\n"
                     "# TYPE a_requests_total counter\n"
                     "a_requests_total 3.5\n" DROPPED_TEXT
                     "agentbox_metrics_dropped_series_total 0\n");
    /* Histogram-only call on a counter is ignored. */
    metrics_observe(f, NULL, 100);
    metrics_set(f, NULL, 10);
    assert_render(r,
                  "# HELP a_requests_total Requests served.\n"
                  "# TYPE a_requests_total counter\n"
                  "a_requests_total 10\n" DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n");
    metrics_registry_free(r);
}

static void test_gauge_with_labels(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"cluster", "state", NULL};
    struct metric_family *f =
        metrics_register(r, "hub_sessions", "Agent sessions.", METRIC_GAUGE, labels, NULL, 0);
    const char *bu[] = {"b", "up"};
    const char *au[] = {"a", "up"};
    const char *ad[] = {"a", "down"};

    assert_non_null(f);
    /* No series yet: the family is left out entirely. */
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n");
    metrics_set(f, bu, 3);
    metrics_set(f, au, 1);
    metrics_add(f, au, -0.5);
    metrics_add(f, ad, -2);
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP hub_sessions Agent sessions.\n"
                                  "# TYPE hub_sessions gauge\n"
                                  "hub_sessions{cluster=\"a\",state=\"down\"} -2\n"
                                  "hub_sessions{cluster=\"a\",state=\"up\"} 0.5\n"
                                  "hub_sessions{cluster=\"b\",state=\"up\"} 3\n");
    metrics_remove(f, au);
    metrics_remove(f, au); /* removing twice is harmless */
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP hub_sessions Agent sessions.\n"
                                  "# TYPE hub_sessions gauge\n"
                                  "hub_sessions{cluster=\"a\",state=\"down\"} -2\n"
                                  "hub_sessions{cluster=\"b\",state=\"up\"} 3\n");
    /* A removed series starts again from zero. */
    metrics_add(f, au, 1);
    metrics_remove(f, ad);
    metrics_remove(f, bu);
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP hub_sessions Agent sessions.\n"
                                  "# TYPE hub_sessions gauge\n"
                                  "hub_sessions{cluster=\"a\",state=\"up\"} 1\n");
    /* values NULL on a labelled family does nothing. */
    metrics_set(f, NULL, 5);
    metrics_registry_free(r);
}

static void test_histogram(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"route", NULL};
    const double buckets[] = {0.25, 1, 5};
    struct metric_family *f = metrics_register(r, "http_seconds", "Latency.", METRIC_HISTOGRAM,
                                               labels, buckets, AB_ARRAY_LEN(buckets));
    const char *v1[] = {"/v1"};

    assert_non_null(f);
    metrics_observe(f, v1, 0.125);
    metrics_observe(f, v1, 0.25); /* bounds are inclusive */
    metrics_observe(f, v1, 0.5);
    metrics_observe(f, v1, 7);
    metrics_add(f, v1, 1); /* ignored on a histogram */
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP http_seconds Latency.\n"
                                  "# TYPE http_seconds histogram\n"
                                  "http_seconds_bucket{route=\"/v1\",le=\"0.25\"} 2\n"
                                  "http_seconds_bucket{route=\"/v1\",le=\"1\"} 3\n"
                                  "http_seconds_bucket{route=\"/v1\",le=\"5\"} 3\n"
                                  "http_seconds_bucket{route=\"/v1\",le=\"+Inf\"} 4\n"
                                  "http_seconds_sum{route=\"/v1\"} 7.875\n"
                                  "http_seconds_count{route=\"/v1\"} 4\n");
    metrics_registry_free(r);
}

static void test_histogram_default_buckets_no_labels(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    struct metric_family *f =
        metrics_register(r, "z_op_seconds", "Op.", METRIC_HISTOGRAM, NULL, NULL, 0);

    metrics_observe(f, NULL, 0.003);
    metrics_observe(f, NULL, 20);
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP z_op_seconds Op.\n"
                                  "# TYPE z_op_seconds histogram\n"
                                  "z_op_seconds_bucket{le=\"0.0005\"} 0\n"
                                  "z_op_seconds_bucket{le=\"0.001\"} 0\n"
                                  "z_op_seconds_bucket{le=\"0.0025\"} 0\n"
                                  "z_op_seconds_bucket{le=\"0.005\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.01\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.025\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.05\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.1\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.25\"} 1\n"
                                  "z_op_seconds_bucket{le=\"0.5\"} 1\n"
                                  "z_op_seconds_bucket{le=\"1\"} 1\n"
                                  "z_op_seconds_bucket{le=\"2.5\"} 1\n"
                                  "z_op_seconds_bucket{le=\"5\"} 1\n"
                                  "z_op_seconds_bucket{le=\"10\"} 1\n"
                                  "z_op_seconds_bucket{le=\"+Inf\"} 2\n"
                                  "z_op_seconds_sum 20.003\n"
                                  "z_op_seconds_count 2\n");
    metrics_registry_free(r);
}

static void test_escaping(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"path", NULL};
    struct metric_family *f = metrics_register(r, "b_hits", "Hits on C:\\dir\nsecond line \"q\".",
                                               METRIC_GAUGE, labels, NULL, 0);
    const char *v[] = {"a\\b\"c\nd"};

    metrics_set(f, v, 1);
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP b_hits Hits on C:\\\\dir\\nsecond line \"q\".\n"
                                  "# TYPE b_hits gauge\n"
                                  "b_hits{path=\"a\\\\b\\\"c\\nd\"} 1\n");
    metrics_registry_free(r);
}

static void test_number_formats(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"k", NULL};
    struct metric_family *f = metrics_register(r, "g", "G.", METRIC_GAUGE, labels, NULL, 0);
    const char *k[][1] = {{"a"}, {"b"}, {"c"}, {"d"}, {"e"}, {"f"}, {"g"}, {"h"}, {"i"}, {"j"}};

    metrics_set(f, k[0], 0.1);
    metrics_set(f, k[1], 1e21);
    metrics_set(f, k[2], NAN);
    metrics_set(f, k[3], INFINITY);
    metrics_set(f, k[4], -INFINITY);
    metrics_set(f, k[5], 1234567);
    metrics_set(f, k[6], 1.5e-7);
    metrics_set(f, k[7], 1.0 / 3);
    metrics_set(f, k[8], 100000);
    metrics_set(f, k[9], -0.0001);
    assert_render(r, DROPPED_TEXT "agentbox_metrics_dropped_series_total 0\n"
                                  "# HELP g G.\n"
                                  "# TYPE g gauge\n"
                                  "g{k=\"a\"} 0.1\n"
                                  "g{k=\"b\"} 1e+21\n"
                                  "g{k=\"c\"} NaN\n"
                                  "g{k=\"d\"} +Inf\n"
                                  "g{k=\"e\"} -Inf\n"
                                  "g{k=\"f\"} 1.234567e+06\n"
                                  "g{k=\"g\"} 1.5e-07\n"
                                  "g{k=\"h\"} 0.3333333333333333\n"
                                  "g{k=\"i\"} 100000\n"
                                  "g{k=\"j\"} -0.0001\n");
    metrics_registry_free(r);
}

static size_t count_lines_with(const char *text, const char *prefix)
{
    size_t n = 0;
    size_t plen = strlen(prefix);

    for (const char *p = text; *p != '\0';) {
        if (strncmp(p, prefix, plen) == 0)
            n++;
        p = strchr(p, '\n');
        if (p == NULL)
            break;
        p++;
    }
    return n;
}

static void test_series_cap(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"id", NULL};
    struct metric_family *f = metrics_register(r, "s", "S.", METRIC_GAUGE, labels, NULL, 0);
    char id[32];
    const char *v[] = {id};
    char *text;

    for (int i = 0; i < METRICS_MAX_SERIES; i++) {
        snprintf(id, sizeof(id), "%d", i);
        metrics_set(f, v, i);
    }
    text = metrics_render(r, NULL);
    assert_int_equal(count_lines_with(text, "s{id=\""), METRICS_MAX_SERIES);
    assert_non_null(strstr(text, "agentbox_metrics_dropped_series_total 0\n"));
    free(text);

    /* Two new series past the cap are dropped and counted. */
    snprintf(id, sizeof(id), "new1");
    metrics_set(f, v, 1);
    snprintf(id, sizeof(id), "new2");
    metrics_add(f, v, 1);
    /* An existing series still updates. */
    snprintf(id, sizeof(id), "7");
    metrics_set(f, v, 700);
    text = metrics_render(r, NULL);
    assert_int_equal(count_lines_with(text, "s{id=\""), METRICS_MAX_SERIES);
    assert_null(strstr(text, "new1"));
    assert_non_null(strstr(text, "\ns{id=\"7\"} 700\n"));
    assert_non_null(strstr(text, "agentbox_metrics_dropped_series_total 2\n"));
    free(text);

    /* Removing one makes room for exactly one more. */
    snprintf(id, sizeof(id), "0");
    metrics_remove(f, v);
    snprintf(id, sizeof(id), "new3");
    metrics_set(f, v, 3);
    snprintf(id, sizeof(id), "new4");
    metrics_set(f, v, 4);
    text = metrics_render(r, NULL);
    assert_int_equal(count_lines_with(text, "s{id=\""), METRICS_MAX_SERIES);
    assert_non_null(strstr(text, "\ns{id=\"new3\"} 3\n"));
    assert_null(strstr(text, "new4"));
    assert_non_null(strstr(text, "agentbox_metrics_dropped_series_total 3\n"));
    free(text);
    metrics_registry_free(r);
}

static void test_long_label_value_is_cut(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"v", NULL};
    struct metric_family *f = metrics_register(r, "l", "L.", METRIC_GAUGE, labels, NULL, 0);
    char *big = malloc(5000);
    const char *v[] = {big};
    char *text;

    memset(big, 'x', 4999);
    big[4999] = '\0';
    metrics_set(f, v, 1);
    big[2000] = 'y'; /* differs only past the cut: the same series */
    metrics_add(f, v, 1);
    text = metrics_render(r, NULL);
    assert_int_equal(count_lines_with(text, "l{v=\""), 1);
    assert_non_null(strstr(text, "\"} 2\n"));
    assert_true(strlen(text) < 1500);
    free(text);
    free(big);
    metrics_registry_free(r);
}

static void test_register_rules(void **state)
{
    struct metrics_registry *r = metrics_registry_new();
    const char *l1[] = {"a", NULL};
    const char *l2[] = {"b", NULL};
    const char *le[] = {"le", NULL};
    const char *reserved[] = {"__x", NULL};
    const char *badl[] = {"1a", NULL};
    const char *seven[] = {"a", "b", "c", "d", "e", "f", "g", NULL};
    const char *six[] = {"a", "b", "c", "d", "e", "f", NULL};
    const double unsorted[] = {1, 0.5};
    const double dup[] = {1, 1};
    const double with_inf[] = {1, INFINITY};
    struct metric_family *f = metrics_register(r, "x_total", "X.", METRIC_COUNTER, l1, NULL, 0);

    assert_non_null(f);
    assert_ptr_equal(metrics_register(r, "x_total", "other help", METRIC_COUNTER, l1, NULL, 0), f);
    assert_null(metrics_register(r, "x_total", "X.", METRIC_GAUGE, l1, NULL, 0));
    assert_null(metrics_register(r, "x_total", "X.", METRIC_COUNTER, l2, NULL, 0));
    assert_null(metrics_register(r, "x_total", "X.", METRIC_COUNTER, NULL, NULL, 0));
    assert_null(metrics_register(r, "", "X.", METRIC_COUNTER, NULL, NULL, 0));
    assert_null(metrics_register(r, "9x", "X.", METRIC_COUNTER, NULL, NULL, 0));
    assert_null(metrics_register(r, "x-y", "X.", METRIC_COUNTER, NULL, NULL, 0));
    assert_non_null(metrics_register(r, "ns:x_y", "X.", METRIC_COUNTER, NULL, NULL, 0));
    assert_null(metrics_register(r, "y", "Y.", METRIC_GAUGE, badl, NULL, 0));
    assert_null(metrics_register(r, "y", "Y.", METRIC_GAUGE, reserved, NULL, 0));
    assert_null(metrics_register(r, "y", "Y.", METRIC_GAUGE, seven, NULL, 0));
    assert_non_null(metrics_register(r, "y6", "Y.", METRIC_GAUGE, six, NULL, 0));
    assert_null(metrics_register(r, "h", "H.", METRIC_HISTOGRAM, le, NULL, 0));
    assert_null(metrics_register(r, "h", "H.", METRIC_HISTOGRAM, NULL, unsorted, 2));
    assert_null(metrics_register(r, "h", "H.", METRIC_HISTOGRAM, NULL, dup, 2));
    /* A trailing +Inf is accepted and rendered once. */
    struct metric_family *h = metrics_register(r, "h", "H.", METRIC_HISTOGRAM, NULL, with_inf, 2);
    assert_non_null(h);
    metrics_observe(h, NULL, 3);
    char *text = metrics_render(r, NULL);
    assert_int_equal(count_lines_with(text, "h_bucket{le=\"+Inf\"}"), 1);
    assert_non_null(strstr(text, "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 1\n"));
    free(text);
    /* NULL family and registry are harmless. */
    metrics_add(NULL, NULL, 1);
    metrics_set(NULL, NULL, 1);
    metrics_observe(NULL, NULL, 1);
    metrics_remove(NULL, NULL);
    assert_null(metrics_register(NULL, "q", "Q.", METRIC_GAUGE, NULL, NULL, 0));
    assert_null(metrics_render(NULL, NULL));
    metrics_registry_free(r);
    metrics_registry_free(NULL);
}

static void test_default_registry(void **state)
{
    struct metrics_registry *a = metrics_default();

    assert_non_null(a);
    assert_ptr_equal(metrics_default(), a);
}

#define THREADS 4
#define ROUNDS 20000

struct worker {
    struct metric_family *counter;
    struct metric_family *hist;
    int index;
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char mine[16];
    const char *shared_v[] = {"shared"};
    const char *mine_v[] = {mine};

    snprintf(mine, sizeof(mine), "t%d", w->index);
    for (int i = 0; i < ROUNDS; i++) {
        metrics_add(w->counter, shared_v, 1);
        metrics_add(w->counter, mine_v, 1);
        metrics_observe(w->hist, NULL, 0.5);
    }
    return NULL;
}

struct renderer {
    struct metrics_registry *r;
    atomic_int *stop;
    int renders;
};

/* Renders and removes a throwaway series while the workers update. */
static void *render_loop(void *arg)
{
    struct renderer *x = arg;
    struct metric_family *g = metrics_register(x->r, "tmp", "T.", METRIC_GAUGE, NULL, NULL, 0);

    while (!atomic_load(x->stop) || x->renders == 0) {
        char *text = metrics_render(x->r, NULL);
        if (text == NULL) /* cmocka asserts may not jump out of another thread */
            abort();
        free(text);
        metrics_set(g, NULL, x->renders);
        metrics_remove(g, NULL);
        x->renders++;
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    atomic_int stop = 0;
    pthread_t rt;
    struct renderer rx;
    struct metrics_registry *r = metrics_registry_new();
    const char *labels[] = {"who", NULL};
    const double b[] = {1};
    struct worker w[THREADS];
    pthread_t t[THREADS];
    struct metric_family *c = metrics_register(r, "c_total", "C.", METRIC_COUNTER, labels, NULL, 0);
    struct metric_family *h = metrics_register(r, "d", "D.", METRIC_HISTOGRAM, NULL, b, 1);
    char want[64];
    char *text;

    rx = (struct renderer){r, &stop, 0};
    assert_int_equal(pthread_create(&rt, NULL, render_loop, &rx), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){c, h, i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    assert_true(rx.renders > 0);
    text = metrics_render(r, NULL);
    snprintf(want, sizeof(want), "c_total{who=\"shared\"} %d\n", THREADS * ROUNDS);
    assert_non_null(strstr(text, want));
    for (int i = 0; i < THREADS; i++) {
        snprintf(want, sizeof(want), "c_total{who=\"t%d\"} %d\n", i, ROUNDS);
        assert_non_null(strstr(text, want));
    }
    snprintf(want, sizeof(want), "d_bucket{le=\"1\"} %d\n", THREADS * ROUNDS);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "d_sum %d\n", THREADS * ROUNDS / 2);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof(want), "d_count %d\n", THREADS * ROUNDS);
    assert_non_null(strstr(text, want));
    free(text);
    metrics_registry_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_registry),
        cmocka_unit_test(test_counter),
        cmocka_unit_test(test_gauge_with_labels),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_histogram_default_buckets_no_labels),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_number_formats),
        cmocka_unit_test(test_series_cap),
        cmocka_unit_test(test_long_label_value_is_cut),
        cmocka_unit_test(test_register_rules),
        cmocka_unit_test(test_default_registry),
        cmocka_unit_test(test_concurrent_updates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
