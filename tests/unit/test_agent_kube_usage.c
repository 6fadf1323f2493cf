/* Usage and logs on the kube runtime (agent/runtime/kube/usage.c): the
 * Kubernetes quantities PodMetrics answers in, and the client registry the
 * worker-side reads use (a read after the runtime went answers "gone", never
 * touches a freed client). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "agent/runtime/kube/client.h"
#include "agent/runtime/kube/usage.h"
#include "agentbox/common.h"

static void quantities(void **state)
{
    (void)state;
    double v;
    assert_int_equal(kube_quantity_cpu("250m", &v), 0);
    assert_true(fabs(v - 0.25) < 1e-9);
    assert_int_equal(kube_quantity_cpu("123456789n", &v), 0);
    assert_true(fabs(v - 0.123456789) < 1e-12);
    assert_int_equal(kube_quantity_cpu("2", &v), 0);
    assert_true(v == 2);
    assert_int_equal(kube_quantity_cpu("5u", &v), 0);
    assert_true(fabs(v - 5e-6) < 1e-12);
    assert_int_equal(kube_quantity_cpu("1Gi", &v), AB_EINVAL);
    assert_int_equal(kube_quantity_cpu("", &v), AB_EINVAL);
    assert_int_equal(kube_quantity_cpu(NULL, &v), AB_EINVAL);
    assert_int_equal(kube_quantity_cpu("-1", &v), AB_EINVAL);
    assert_int_equal(kube_quantity_bytes("1024Ki", &v), 0);
    assert_true(v == 1048576);
    assert_int_equal(kube_quantity_bytes("2Gi", &v), 0);
    assert_true(v == 2147483648.0);
    assert_int_equal(kube_quantity_bytes("1M", &v), 0);
    assert_true(v == 1e6);
    assert_int_equal(kube_quantity_bytes("512", &v), 0);
    assert_true(v == 512);
    assert_int_equal(kube_quantity_bytes("3Xi", &v), AB_EINVAL);
    assert_int_equal(kube_quantity_bytes("abc", &v), AB_EINVAL);
}

static const struct rt_ops no_ops;

static void reads_after_the_runtime_went(void **state)
{
    (void)state;
    struct kube_config cfg;
    char err[256];
    memset(&cfg, 0, sizeof(cfg));
    ab_strlcpy(cfg.server, "http://127.0.0.1:9", sizeof(cfg.server));
    struct kube_client *c = kube_client_new(&cfg, NULL, err, sizeof(err));
    assert_non_null(c);
    uint64_t id = kube_usage_register(c);
    assert_true(id != 0);
    struct rt_probe p;
    kube_usage_probe_fill(&p, &no_ops, id, "sbx", "default", "pod-1", "sandbox", 1000, 2000,
                          1 << 30);
    assert_string_equal(p.id, "sbx");
    assert_string_equal(p.ns, "default");
    kube_usage_unregister(id, c); /* no read holds it: freed now */
    struct rt_usage u;
    kube_usage_read(&p, 1, &u);
    assert_int_equal(u.err, AB_ENOENT);
    struct rt_log l;
    const struct rt_log_query q = {0};
    assert_int_equal(kube_log_read(&p, &q, &l), AB_EIO);
    assert_int_equal((int)l.n, 0);
    rt_log_free(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(quantities),
        cmocka_unit_test(reads_after_the_runtime_went),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
