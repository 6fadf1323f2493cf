/* Leader election (agent/runtime/kube/lease.c): the decision table, Lease
 * parsing and the bodies written, as unit tests; and, with
 *   test_agent_kube_lease --live KUBECONFIG NAMESPACE NAME IDENTITY LEASE_MS RENEW_MS RETRY_MS
 * a contender that tests/integration/kube_lease.test.mjs runs against the
 * in-test API server: it prints LEADING / FOLLOWING on each transition and,
 * when stdin closes or says "quit", frees the lease (releasing it) and prints
 * RELEASED. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/kube/lease.h"

static struct kube_lease_record rec(const char *holder, int32_t dur, const char *renew,
                                    int32_t transitions, const char *rv)
{
    struct kube_lease_record r = {.duration_s = dur, .transitions = transitions};
    ab_strlcpy(r.holder, holder, sizeof(r.holder));
    ab_strlcpy(r.acquire_time, "2025-06-01T12:00:00.000000Z", sizeof(r.acquire_time));
    ab_strlcpy(r.renew_time, renew, sizeof(r.renew_time));
    ab_strlcpy(r.rv, rv, sizeof(r.rv));
    return r;
}

static void decide_table(void **state)
{
    (void)state;
    struct kube_lease_observed obs = {0};
    /* no Lease: create one */
    assert_int_equal(kube_lease_decide(&obs, NULL, "me", 1000), KUBE_LEASE_CREATE);

    /* someone else's, first seen at t=1000: theirs for 15 s of no change, as
     * observed here; renewTime (years ago on their clock) is not compared
     * with ours */
    struct kube_lease_record other = rec("other", 15, "2001-01-01T00:00:00.000000Z", 3, "10");
    assert_int_equal(kube_lease_decide(&obs, &other, "me", 1000), KUBE_LEASE_WAIT);
    assert_int_equal(kube_lease_decide(&obs, &other, "me", 15999), KUBE_LEASE_WAIT);
    /* a new resourceVersion with the same spec is not a renewal */
    struct kube_lease_record same = other;
    ab_strlcpy(same.rv, "11", sizeof(same.rv));
    assert_int_equal(kube_lease_decide(&obs, &same, "me", 15999), KUBE_LEASE_WAIT);
    assert_string_equal(obs.rec.rv, "11");
    /* their renewal restarts the clock */
    struct kube_lease_record renewed = rec("other", 15, "2001-01-01T00:00:02.000000Z", 3, "12");
    assert_int_equal(kube_lease_decide(&obs, &renewed, "me", 15000), KUBE_LEASE_WAIT);
    assert_int_equal(kube_lease_decide(&obs, &renewed, "me", 29999), KUBE_LEASE_WAIT);
    /* unchanged for the whole duration: ours to take */
    assert_int_equal(kube_lease_decide(&obs, &renewed, "me", 30000), KUBE_LEASE_TAKE);

    /* ours: renew, whatever the clock */
    struct kube_lease_observed o2 = {0};
    struct kube_lease_record mine = rec("me", 15, "2025-06-01T12:00:00.000000Z", 1, "20");
    assert_int_equal(kube_lease_decide(&o2, &mine, "me", 5), KUBE_LEASE_RENEW);
    assert_int_equal(kube_lease_decide(&o2, &mine, "me", 1000000), KUBE_LEASE_RENEW);

    /* released (no holder): take at once */
    struct kube_lease_observed o3 = {0};
    struct kube_lease_record released = rec("", 1, "2025-06-01T12:00:00.000000Z", 4, "30");
    assert_int_equal(kube_lease_decide(&o3, &released, "me", 100), KUBE_LEASE_TAKE);

    /* a holder whose name only starts like ours is someone else */
    struct kube_lease_observed o4 = {0};
    struct kube_lease_record prefix = rec("me-2", 15, "x", 0, "40");
    assert_int_equal(kube_lease_decide(&o4, &prefix, "me", 100), KUBE_LEASE_WAIT);
}

static json_t *parse_json(const char *s)
{
    json_t *o = json_loads(s, 0, NULL);
    assert_non_null(o);
    return o;
}

static void parse_lease(void **state)
{
    (void)state;
    char err[256];
    struct kube_lease_record r;
    json_t *o = parse_json(
        "{\"apiVersion\":\"coordination.k8s.io/v1\",\"kind\":\"Lease\",\"metadata\":{\"name\":"
        "\"agentbox-agent\",\"resourceVersion\":\"48901\"},\"spec\":{\"holderIdentity\":\"pod-a_"
        "1\","
        "\"leaseDurationSeconds\":15,\"acquireTime\":\"2025-06-01T12:00:00.000000Z\","
        "\"renewTime\":\"2025-06-01T12:10:04.123456Z\",\"leaseTransitions\":3}}");
    assert_int_equal(kube_lease_parse(o, &r, err, sizeof(err)), 0);
    assert_string_equal(r.holder, "pod-a_1");
    assert_int_equal(r.duration_s, 15);
    assert_int_equal(r.transitions, 3);
    assert_string_equal(r.rv, "48901");
    assert_string_equal(r.renew_time, "2025-06-01T12:10:04.123456Z");
    json_decref(o);

    /* a Lease with no spec yet: free to take */
    o = parse_json("{\"metadata\":{\"resourceVersion\":\"7\"}}");
    assert_int_equal(kube_lease_parse(o, &r, err, sizeof(err)), 0);
    assert_string_equal(r.holder, "");
    json_decref(o);

    const struct {
        const char *json, *msg;
    } bad[] = {
        {"{\"metadata\":{}}", "metadata.resourceVersion is missing"},
        {"{\"spec\":{}}", "not an object with metadata"},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"spec\":{\"leaseDurationSeconds\":\"15\"}}",
         "spec.leaseDurationSeconds must be a non-negative 32-bit integer"},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"spec\":{\"holderIdentity\":5}}",
         "spec.holderIdentity must be a string"},
        {"{\"metadata\":{\"resourceVersion\":\"1\"},\"spec\":{\"leaseTransitions\":-1}}",
         "spec.leaseTransitions must be a non-negative 32-bit integer"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        o = parse_json(bad[i].json);
        err[0] = '\0';
        assert_int_equal(kube_lease_parse(o, &r, err, sizeof(err)), AB_EINVAL);
        assert_non_null(strstr(err, bad[i].msg));
        json_decref(o);
    }
}

static const char *spec_str(json_t *b, const char *k)
{
    return json_string_value(json_object_get(json_object_get(b, "spec"), k));
}
static long long spec_int(json_t *b, const char *k)
{
    return json_integer_value(json_object_get(json_object_get(b, "spec"), k));
}
static const char *md_str(json_t *b, const char *k)
{
    return json_string_value(json_object_get(json_object_get(b, "metadata"), k));
}

static void bodies(void **state)
{
    (void)state;
    const int64_t wall = 1748779200123; /* 2025-06-01T12:00:00.123Z */
    json_t *b = kube_lease_body("ns", "l", "me", 15, KUBE_LEASE_CREATE, false, NULL, wall);
    assert_string_equal(json_string_value(json_object_get(b, "kind")), "Lease");
    assert_string_equal(spec_str(b, "holderIdentity"), "me");
    assert_int_equal(spec_int(b, "leaseDurationSeconds"), 15);
    assert_int_equal(spec_int(b, "leaseTransitions"), 0);
    assert_string_equal(spec_str(b, "acquireTime"), "2025-06-01T12:00:00.123000Z");
    assert_string_equal(spec_str(b, "renewTime"), "2025-06-01T12:00:00.123000Z");
    assert_null(md_str(b, "resourceVersion"));
    assert_string_equal(md_str(b, "namespace"), "ns");
    json_decref(b);

    /* taking someone's: acquireTime now, one more transition, their resourceVersion */
    struct kube_lease_record cur = rec("other", 15, "2025-06-01T11:00:00.000000Z", 3, "99");
    b = kube_lease_body("ns", "l", "me", 15, KUBE_LEASE_TAKE, false, &cur, wall);
    assert_string_equal(spec_str(b, "holderIdentity"), "me");
    assert_int_equal(spec_int(b, "leaseTransitions"), 4);
    assert_string_equal(spec_str(b, "acquireTime"), "2025-06-01T12:00:00.123000Z");
    assert_string_equal(md_str(b, "resourceVersion"), "99");
    json_decref(b);

    /* renewing ours: acquireTime and transitions kept */
    struct kube_lease_record mine = rec("me", 15, "2025-06-01T11:59:58.000000Z", 4, "100");
    b = kube_lease_body("ns", "l", "me", 15, KUBE_LEASE_RENEW, false, &mine, wall);
    assert_int_equal(spec_int(b, "leaseTransitions"), 4);
    assert_string_equal(spec_str(b, "acquireTime"), "2025-06-01T12:00:00.000000Z");
    assert_string_equal(spec_str(b, "renewTime"), "2025-06-01T12:00:00.123000Z");
    assert_string_equal(md_str(b, "resourceVersion"), "100");
    json_decref(b);

    /* release: no holder, 1 s, so a follower need not wait */
    b = kube_lease_body("ns", "l", "me", 15, KUBE_LEASE_RENEW, true, &mine, wall);
    assert_string_equal(spec_str(b, "holderIdentity"), "");
    assert_int_equal(spec_int(b, "leaseDurationSeconds"), 1);
    assert_int_equal(spec_int(b, "leaseTransitions"), 4);
    assert_string_equal(md_str(b, "resourceVersion"), "100");
    json_decref(b);
}

static void new_refusals(void **state)
{
    (void)state;
    struct kube_config cfg = {0};
    ab_strlcpy(cfg.server, "http://127.0.0.1:1", sizeof(cfg.server));
    char err[256];
    struct kube_client *c = kube_client_new(&cfg, NULL, err, sizeof(err));
    assert_non_null(c);
    const struct {
        struct kube_lease_deps d;
        const char *msg;
    } bad[] = {
        {{.client = c, .ns = "ns", .name = "l", .identity = ""}, "identity must be 1 to"},
        {{.client = c, .ns = "", .name = "l", .identity = "me"}, "namespace must be 1 to"},
        {{.client = c,
          .ns = "ns",
          .name = "l",
          .identity = "me",
          .lease_duration_ms = 10000,
          .renew_deadline_ms = 10000},
         "lease duration (10000 ms) > renew deadline (10000 ms) > 1.2 x retry period (2000 ms)"},
        {{.client = c, .ns = "ns", .name = "l", .identity = "me", .renew_deadline_ms = 2400},
         "> 1.2 x retry period"},
        {{.client = c, .ns = "ns", .name = "l", .identity = "me", .lease_duration_ms = 1500},
         "whole seconds"},
        {{.client = NULL, .ns = "ns", .name = "l", .identity = "me"}, "a kube client is required"},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        err[0] = '\0';
        assert_null(kube_lease_new(&bad[i].d, err, sizeof(err)));
        if (!strstr(err, bad[i].msg))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].msg);
    }
    kube_client_free(c);
}

/* --- the live contender ------------------------------------------------------------- */

static void say(const char *what)
{
    printf("%s\n", what);
    fflush(stdout);
}
static void started(void *arg)
{
    (void)arg;
    say("LEADING");
}
static void stopped(void *arg)
{
    (void)arg;
    say("FOLLOWING");
}

static int live(char **argv)
{
    struct kube_config cfg;
    char err[512];
    if (kube_config_load(argv[0], &cfg, err, sizeof(err)) < 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    struct kube_client_options co = {.timeout_ms = 2000, .max_retries = -1};
    struct kube_client *c = kube_client_new(&cfg, &co, err, sizeof(err));
    kube_config_clear(&cfg);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    struct kube_lease_deps d = {.client = c,
                                .ns = argv[1],
                                .name = argv[2],
                                .identity = argv[3],
                                .lease_duration_ms = atoll(argv[4]),
                                .renew_deadline_ms = atoll(argv[5]),
                                .retry_period_ms = atoll(argv[6]),
                                .on_started_leading = started,
                                .on_stopped_leading = stopped};
    struct kube_lease *l = kube_lease_new(&d, err, sizeof(err));
    if (!l) {
        fprintf(stderr, "%s\n", err);
        kube_client_free(c);
        return 2;
    }
    char line[64];
    while (fgets(line, sizeof(line), stdin) && strncmp(line, "quit", 4) != 0) {
    }
    kube_lease_free(l);
    say("RELEASED");
    kube_client_free(c);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 9 && strcmp(argv[1], "--live") == 0)
        return live(argv + 2);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decide_table),
        cmocka_unit_test(parse_lease),
        cmocka_unit_test(bodies),
        cmocka_unit_test(new_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
