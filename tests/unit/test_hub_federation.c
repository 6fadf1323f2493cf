/* The federation registry (hub/federation.c): REPORT validation, freshness
 * judged on receipt, full-set replacement, dropping a cluster at once, the
 * per-env index staying consistent through churn, and the gauges. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/metrics.h"
#include "hub/federation.h"

#define NOW 5000000

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    assert_non_null(j);
    return j;
}

static int report(struct fed_registry *g, const char *cluster, const char *text, int64_t now,
                  char *err, size_t errlen)
{
    json_t *j = load(text);
    int rc = fed_registry_report(g, cluster, j, now, err, errlen);
    json_decref(j);
    return rc;
}

static const struct route_record *find(struct fed_registry *g, const char *ns, const char *env,
                                       const char *cluster, const char *pool)
{
    const struct route_entry *v;
    size_t n = fed_registry_env(g, ns, env, &v);
    for (size_t i = 0; i < n; i++)
        if (strcmp(v[i].rec->cluster, cluster) == 0 && strcmp(v[i].rec->pool, pool) == 0) {
            /* the index's compact copy agrees with the record */
            assert_int_equal(v[i].idle, v[i].rec->idle);
            assert_int_equal(v[i].sampled_ms, v[i].rec->sampled_ms);
            assert_int_equal(v[i].headroom, v[i].rec->headroom);
            return v[i].rec;
        }
    return NULL;
}

static void parses_every_field_and_judges_age_on_receipt(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256] = "";
    int rc =
        report(g, "alpha",
               "{\"cluster\":\"mallory\",\"full\":true,\"records\":[{\"namespace\":\"default\","
               "\"env\":\"demo\",\"pool\":\"demo-1c0gi\",\"scalingGroup\":\"1c0gi\","
               "\"idle\":2,\"running\":3,\"pending\":1,\"desired\":5,\"autoscaling\":true,"
               "\"headroom\":7,\"saturatedForMs\":1500,\"ageMs\":1200}]}",
               NOW, err, sizeof(err));
    assert_int_equal(rc, 0);
    const struct route_record *r = find(g, "default", "demo", "alpha", "demo-1c0gi");
    assert_non_null(r); /* the session's cluster, never the report's "cluster" field */
    assert_null(find(g, "default", "demo", "mallory", "demo-1c0gi"));
    assert_string_equal(r->group, "1c0gi");
    assert_int_equal(r->idle, 2);
    assert_int_equal(r->running, 3);
    assert_int_equal(r->pending, 1);
    assert_int_equal(r->desired, 5);
    assert_true(r->autoscaling);
    assert_int_equal(r->headroom, 7);
    assert_int_equal(r->saturated_for_ms, 1500);
    assert_int_equal(r->sampled_ms, NOW - 1200);
    /* fresh until exactly 30 s after the sample, not a millisecond longer */
    assert_true(route_is_fresh(r, NOW - 1200 + 30000, ROUTE_TTL_MS));
    assert_false(route_is_fresh(r, NOW - 1200 + 30001, ROUTE_TTL_MS));
    assert_int_equal(fed_registry_expire(g, NOW - 1200 + 30000), 0);
    assert_int_equal(fed_registry_expire(g, NOW - 1200 + 30001), 1);
    assert_int_equal(fed_registry_count(g), 0);
    fed_registry_free(g);
}

static void defaults_for_optional_fields(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    assert_int_equal(report(g, "alpha",
                            "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p1\","
                            "\"idle\":0,\"autoscaling\":true},{\"namespace\":\"n\",\"env\":\"e\","
                            "\"pool\":\"p2\",\"idle\":1}]}",
                            NOW, err, sizeof(err)),
                     0);
    const struct route_record *a = find(g, "n", "e", "alpha", "p1");
    const struct route_record *b = find(g, "n", "e", "alpha", "p2");
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(a->headroom, -1); /* autoscaling without headroom: unbounded */
    assert_int_equal(b->headroom, 0);
    assert_string_equal(b->group, "");
    assert_int_equal(b->sampled_ms, NOW);
    fed_registry_free(g);
}

struct bad {
    const char *records; /* the records array's text, or a whole report when it starts '{' */
    const char *needle;  /* the error names this */
};

static const struct bad bad_reports[] = {
    {"[1]", "records[0] must be an object"},
    {"[{\"env\":\"e\",\"pool\":\"p\",\"idle\":1}]", "'namespace' is required"},
    {"[{\"namespace\":\"n\",\"pool\":\"p\",\"idle\":1}]", "'env' is required"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"idle\":1}]", "'pool' is required"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\"}]", "'idle' is required"},
    {"[{\"namespace\":\"\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1}]", "'namespace' must be"},
    {"[{\"namespace\":\"n s\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1}]", "'namespace' must be"},
    {"[{\"namespace\":\"n\",\"env\":\"e/x\",\"pool\":\"p\",\"idle\":1}]", "'env' must be"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":"
     "\"pppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp\",\"idle\":1}]",
     "'pool' must be at most"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"scalingGroup\":7,\"idle\":1}]",
     "'scalingGroup' must be a string"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":-1}]", "'idle'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1.5}]", "'idle'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":\"3\"}]", "'idle'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1000001}]", "'idle'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1,\"headroom\":-2}]",
     "'headroom'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1,\"autoscaling\":1}]",
     "'autoscaling'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1,\"ageMs\":-5}]", "'ageMs'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1,\"ageMs\":99999999999}]",
     "'ageMs'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1,\"saturatedForMs\":true}]",
     "'saturatedForMs'"},
    {"[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"p\",\"idle\":1},{\"namespace\":\"n\"}]",
     "records[1]"},
    {"{\"records\":{}}", "'records' must be"},
    {"{\"full\":true}", "'records' is required"},
    {"{\"records\":[],\"full\":\"yes\"}", "'full'"},
    {"[]", NULL}, /* valid: an empty set */
};

static void malformed_reports_are_refused_whole(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    assert_int_equal(report(g, "alpha",
                            "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"keep\","
                            "\"idle\":4}]}",
                            NOW, err, sizeof(err)),
                     0);
    for (size_t i = 0; i < AB_ARRAY_LEN(bad_reports); i++) {
        char text[1024];
        const struct bad *b = &bad_reports[i];
        if (b->records[0] == '{')
            snprintf(text, sizeof(text), "%s", b->records);
        else
            snprintf(text, sizeof(text), "{\"full\":false,\"records\":%s}", b->records);
        err[0] = '\0';
        int rc = report(g, "alpha", text, NOW, err, sizeof(err));
        if (!b->needle) {
            assert_int_equal(rc, 0);
            continue;
        }
        if (rc == 0 || !strstr(err, b->needle))
            fail_msg("row %zu: rc %d, err '%s', wanted '%s'", i, rc, err, b->needle);
        /* nothing of a refused report was applied */
        assert_int_equal(fed_registry_count(g), 1);
        assert_int_equal(find(g, "n", "e", "alpha", "keep")->idle, 4);
    }
    json_t *scalar = json_integer(3);
    assert_int_equal(fed_registry_report(g, "alpha", scalar, NOW, err, sizeof(err)), AB_EINVAL);
    json_decref(scalar);
    fed_registry_free(g);
}

static void more_than_ten_thousand_records_is_refused(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    json_t *recs = json_array();
    for (int i = 0; i < FED_REPORT_RECORDS_MAX + 1; i++) {
        char pool[32];
        snprintf(pool, sizeof(pool), "p%d", i);
        json_array_append_new(recs, json_pack("{s:s,s:s,s:s,s:i}", "namespace", "n", "env", "e",
                                              "pool", pool, "idle", 1));
    }
    json_t *msg = json_pack("{s:o}", "records", recs);
    assert_int_equal(fed_registry_report(g, "alpha", msg, NOW, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "at most 10000"));
    assert_int_equal(fed_registry_count(g), 0);
    /* exactly the limit is fine */
    json_array_remove(recs, 0);
    assert_int_equal(fed_registry_report(g, "alpha", msg, NOW, err, sizeof(err)), 0);
    assert_int_equal(fed_registry_count(g), FED_REPORT_RECORDS_MAX);
    json_decref(msg);
    fed_registry_free(g);
}

static void full_report_replaces_partial_upserts(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    assert_int_equal(report(g, "alpha",
                            "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"a\","
                            "\"idle\":1},{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"b\","
                            "\"idle\":2},{\"namespace\":\"n\",\"env\":\"f\",\"pool\":\"c\","
                            "\"idle\":3}]}",
                            NOW, err, sizeof(err)),
                     0);
    assert_int_equal(report(g, "beta",
                            "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"a\","
                            "\"idle\":5}]}",
                            NOW, err, sizeof(err)),
                     0);
    assert_int_equal(fed_registry_count(g), 4);
    /* partial: upsert b, keep a and c */
    assert_int_equal(report(g, "alpha",
                            "{\"full\":false,\"records\":[{\"namespace\":\"n\",\"env\":\"e\","
                            "\"pool\":\"b\",\"idle\":9}]}",
                            NOW, err, sizeof(err)),
                     0);
    assert_int_equal(fed_registry_count(g), 4);
    assert_int_equal(find(g, "n", "e", "alpha", "b")->idle, 9);
    /* full: only b remains for alpha; beta untouched */
    assert_int_equal(report(g, "alpha",
                            "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"b\","
                            "\"idle\":8}]}",
                            NOW, err, sizeof(err)),
                     0);
    assert_int_equal(fed_registry_count(g), 2);
    assert_null(find(g, "n", "e", "alpha", "a"));
    assert_null(find(g, "n", "f", "alpha", "c"));
    assert_int_equal(find(g, "n", "e", "alpha", "b")->idle, 8);
    assert_int_equal(find(g, "n", "e", "beta", "a")->idle, 5);
    const struct route_entry *v;
    assert_int_equal(fed_registry_env(g, "n", "f", &v), 0);
    /* an empty full report clears the cluster */
    assert_int_equal(report(g, "alpha", "{\"records\":[]}", NOW, err, sizeof(err)), 0);
    assert_int_equal(fed_registry_count(g), 1);
    fed_registry_free(g);
}

static void session_end_drops_only_that_cluster(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    const char *body = "{\"records\":[{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"a\","
                       "\"idle\":1},{\"namespace\":\"n\",\"env\":\"e\",\"pool\":\"b\","
                       "\"idle\":2}]}";
    assert_int_equal(report(g, "alpha", body, NOW, err, sizeof(err)), 0);
    assert_int_equal(report(g, "beta", body, NOW, err, sizeof(err)), 0);
    assert_int_equal(report(g, "gamma", body, NOW, err, sizeof(err)), 0);
    assert_int_equal(fed_registry_drop_cluster(g, "beta"), 2);
    assert_int_equal(fed_registry_drop_cluster(g, "beta"), 0);
    assert_int_equal(fed_registry_drop_cluster(g, "nobody"), 0);
    assert_int_equal(fed_registry_count(g), 4);
    const struct route_entry *v;
    size_t n = fed_registry_env(g, "n", "e", &v);
    assert_int_equal(n, 4);
    for (size_t i = 0; i < n; i++)
        assert_string_not_equal(v[i].rec->cluster, "beta");
    /* a routing decision no longer sees beta */
    struct route_query q = {.ns = "n",
                            .env = "e",
                            .local = "alpha",
                            .local_idle = 0,
                            .local_can_grow = 0,
                            .now_ms = NOW};
    struct route_decision d;
    fed_registry_decide(g, &q, &d);
    assert_string_equal(d.cluster, "gamma");
    fed_registry_free(g);
}

/* Random churn against a brute-force model: the per-env index, the cluster
 * lists and the key table stay in agreement. */
static void index_survives_churn(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    enum { NC = 6, NE = 4, NP = 5 };
    int model[NC][NE][NP]; /* idle + 1, 0 = absent */
    memset(model, 0, sizeof(model));
    srand(7);
    char err[256];
    for (int step = 0; step < 3000; step++) {
        int c = rand() % NC;
        char cl[8];
        snprintf(cl, sizeof(cl), "c%d", c);
        int op = rand() % 10;
        if (op == 0) {
            fed_registry_drop_cluster(g, cl);
            memset(model[c], 0, sizeof(model[c]));
            continue;
        }
        bool full = op < 4;
        struct route_record v[NE * NP];
        size_t n = 0;
        int next[NE][NP];
        memcpy(next, full ? (int[NE][NP]){{0}} : model[c], sizeof(next));
        for (int e = 0; e < NE; e++)
            for (int p = 0; p < NP; p++) {
                if (rand() % 3 != 0)
                    continue;
                memset(&v[n], 0, sizeof(v[n]));
                ab_strlcpy(v[n].ns, "ns", sizeof(v[n].ns));
                snprintf(v[n].env, sizeof(v[n].env), "e%d", e);
                snprintf(v[n].pool, sizeof(v[n].pool), "p%d", p);
                v[n].idle = rand() % 50;
                v[n].sampled_ms = NOW;
                next[e][p] = v[n].idle + 1;
                n++;
            }
        assert_int_equal(fed_registry_apply(g, cl, v, n, full, err, sizeof(err)), 0);
        memcpy(model[c], next, sizeof(next));
    }
    size_t total = 0;
    for (int e = 0; e < NE; e++) {
        char env[8];
        snprintf(env, sizeof(env), "e%d", e);
        size_t want = 0;
        for (int c = 0; c < NC; c++)
            for (int p = 0; p < NP; p++)
                if (model[c][e][p]) {
                    char cl[8], pool[8];
                    snprintf(cl, sizeof(cl), "c%d", c);
                    snprintf(pool, sizeof(pool), "p%d", p);
                    const struct route_record *r = find(g, "ns", env, cl, pool);
                    assert_non_null(r);
                    assert_int_equal(r->idle, model[c][e][p] - 1);
                    want++;
                }
        const struct route_entry *v;
        assert_int_equal(fed_registry_env(g, "ns", env, &v), want);
        total += want;
    }
    assert_int_equal(fed_registry_count(g), total);
    fed_registry_free(g);
}

static void gauges_follow_records(void **state)
{
    struct fed_registry *g = fed_registry_new(true);
    char err[256];
    assert_int_equal(report(g, "alpha",
                            "{\"records\":[{\"namespace\":\"ns1\",\"env\":\"demo\",\"pool\":"
                            "\"demo-1c0gi\",\"scalingGroup\":\"g1\",\"idle\":3,\"running\":4,"
                            "\"desired\":6}]}",
                            NOW, err, sizeof(err)),
                     0);
    const char *series = "{cluster=\"alpha\",namespace=\"ns1\",env=\"demo\",member=\"demo-1c0gi\","
                         "group=\"g1\"}";
    char want[256];
    char *txt = metrics_render(metrics_default(), NULL);
    snprintf(want, sizeof(want), "agentbox_federation_env_idle%s 3", series);
    assert_non_null(strstr(txt, want));
    snprintf(want, sizeof(want), "agentbox_federation_env_running%s 4", series);
    assert_non_null(strstr(txt, want));
    snprintf(want, sizeof(want), "agentbox_federation_env_desired%s 6", series);
    assert_non_null(strstr(txt, want));
    free(txt);
    fed_registry_drop_cluster(g, "alpha");
    txt = metrics_render(metrics_default(), NULL);
    assert_null(strstr(txt, series));
    free(txt);
    fed_registry_free(g);
}

static void count_fresh(void *arg, const struct route_record *r)
{
    (void)r;
    (*(size_t *)arg)++;
}

/* The hub's sweep walks the registry in slices (a pass at once over 100,000
 * records held the loop for half a second): every record is looked at once
 * per pass, stale ones go, and no slice looks at many more than it was
 * allowed. */
static void sweep_slices_cover_every_record_once(void **state)
{
    struct fed_registry *g = fed_registry_new(false);
    char err[256];
    struct route_record v[5];
    for (int c = 0; c < 200; c++) {
        char id[16];
        snprintf(id, sizeof(id), "c-%03d", c);
        memset(v, 0, sizeof(v));
        for (int i = 0; i < 5; i++) {
            snprintf(v[i].ns, sizeof(v[i].ns), "ns");
            snprintf(v[i].env, sizeof(v[i].env), "env-%d", i);
            snprintf(v[i].pool, sizeof(v[i].pool), "p");
            v[i].idle = 1;
            /* every third cluster reported 31 s ago: stale */
            v[i].sampled_ms = c % 3 == 0 ? NOW - 31000 : NOW - 1000;
        }
        assert_int_equal(fed_registry_apply(g, id, v, 5, true, err, sizeof(err)), 0);
    }
    assert_int_equal(fed_registry_count(g), 1000);
    size_t cursor = 0, expired = 0, fresh = 0, slices = 0;
    bool done = false;
    while (!done) {
        size_t before = fresh, exp_before = expired;
        done = fed_registry_sweep_slice(g, &cursor, 50, NOW, count_fresh, &fresh, &expired);
        slices++;
        /* whole buckets: at most one bucket's records past the limit */
        assert_true(fresh - before + expired - exp_before <= 50 + 10);
        assert_true(slices < 1000);
    }
    assert_int_equal(cursor, 0);
    assert_int_equal(expired, 67 * 5);
    assert_int_equal(fresh, 133 * 5);
    assert_true(slices >= 1000 / 60);
    assert_int_equal(fed_registry_count(g), 133 * 5);
    /* a second pass finds nothing stale and every fresh record again */
    fresh = expired = 0;
    while (!fed_registry_sweep_slice(g, &cursor, 50, NOW, count_fresh, &fresh, &expired))
        ;
    assert_int_equal(expired, 0);
    assert_int_equal(fresh, 133 * 5);
    fed_registry_free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(parses_every_field_and_judges_age_on_receipt),
        cmocka_unit_test(defaults_for_optional_fields),
        cmocka_unit_test(malformed_reports_are_refused_whole),
        cmocka_unit_test(more_than_ten_thousand_records_is_refused),
        cmocka_unit_test(full_report_replaces_partial_upserts),
        cmocka_unit_test(session_end_drops_only_that_cluster),
        cmocka_unit_test(index_survives_churn),
        cmocka_unit_test(gauges_follow_records),
        cmocka_unit_test(sweep_slices_cover_every_record_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
