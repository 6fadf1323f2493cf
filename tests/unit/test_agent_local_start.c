/* Start commands and readiness probes of the local runtime (start.c): what a
 * pool takes from its manifest runtimes (envd's own probe skipped, the one
 * start command, probes in order) and what a timed-out claim is told. The
 * steps themselves run against a real envd in tests/e2e/code_interpreter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/local/lrt.h"

static void pool_takes_start_command_and_probes(void **state)
{
    struct mf_runtime rts[3];
    struct lpool *p = calloc(1, sizeof(*p));

    (void)state;
    assert_non_null(p);
    memset(rts, 0, sizeof(rts));
    strcpy(rts[0].name, "envd");
    rts[0].probe.kind = MF_PROBE_HTTP;
    rts[0].probe.port = 49983;
    strcpy(rts[1].name, "app");
    rts[1].probe.kind = MF_PROBE_HTTP;
    rts[1].probe.port = 49999;
    strcpy(rts[1].probe.path, "/health");
    strcpy(rts[1].start_command, "run-app");
    strcpy(rts[2].name, "db");
    rts[2].probe.kind = MF_PROBE_TCP;
    rts[2].probe.port = 5432;

    assert_false(lrt_start_needed(p));
    lrt_pool_set_runtimes(p, rts, 3);
    assert_true(lrt_start_needed(p));
    assert_string_equal(p->start.cmd, "run-app");
    assert_string_equal(p->start.cmd_rt, "app");
    assert_int_equal(p->start.nprobes, 2); /* envd's is the socket the runtime waits for */
    assert_string_equal(p->start.probes[0].rt, "app");
    assert_int_equal(p->start.probes[0].p.port, 49999);
    assert_string_equal(p->start.probes[0].p.path, "/health");
    assert_string_equal(p->start.probes[1].rt, "db");
    assert_int_equal(p->start.probes[1].p.kind, MF_PROBE_TCP);

    /* a reload without them clears them */
    lrt_pool_set_runtimes(p, rts, 1);
    assert_false(lrt_start_needed(p));
    assert_string_equal(p->start.cmd, "");
    lrt_pool_set_runtimes(p, NULL, 0);
    assert_false(lrt_start_needed(p));
    free(p);
}

static void timed_out_claims_hear_the_last_failure(void **state)
{
    struct lrt *rt = calloc(1, sizeof(*rt));
    struct lpool *p = calloc(1, sizeof(*p));
    char out[LRT_START_MSG_MAX];

    (void)state;
    assert_non_null(rt);
    assert_non_null(p);
    /* nothing known: the caller keeps its generic message */
    assert_int_equal(lrt_start_describe(p, rt, out, sizeof(out)), 0);
    strcpy(p->last_start_err,
           "the readiness check tcpSocket 127.0.0.1:1 of runtime 'a' did not pass");
    assert_int_equal(lrt_start_describe(p, rt, out, sizeof(out)), 1);
    assert_string_equal(out, p->last_start_err);
    /* bounded by the caller's buffer */
    assert_int_equal(lrt_start_describe(p, rt, out, 10), 1);
    assert_string_equal(out, "the readi");
    free(p);
    free(rt);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pool_takes_start_command_and_probes),
        cmocka_unit_test(timed_out_claims_hear_the_last_failure),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
