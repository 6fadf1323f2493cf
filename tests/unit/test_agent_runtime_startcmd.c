/* The pure parts of start commands and readiness checks both runtimes use
 * (agent/runtime/startcmd.c): the spec from runtimes, the Start request
 * envelope, the Connect stream decoding split at any byte, the output
 * tail and the failure wording. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agent/runtime/startcmd.h"

static void spec_from_runtimes(void **state)
{
    (void)state;
    struct mf_runtime rts[3];
    struct rt_start_spec s;
    memset(rts, 0, sizeof(rts));
    strcpy(rts[0].name, "envd");
    rts[0].probe.kind = MF_PROBE_HTTP;
    rts[0].probe.port = 49983;
    strcpy(rts[1].name, "app");
    strcpy(rts[1].start_command, "run-app");
    rts[1].probe.kind = MF_PROBE_TCP;
    rts[1].probe.port = 8080;
    strcpy(rts[2].name, "other");
    strcpy(rts[2].start_command, "ignored: only the first command runs");
    rt_start_spec_from(&s, rts, 3);
    assert_string_equal(s.cmd, "run-app");
    assert_string_equal(s.cmd_rt, "app");
    assert_int_equal(s.nprobes, 1); /* envd's own probe is left out */
    assert_string_equal(s.probes[0].rt, "app");
    assert_true(rt_start_spec_needed(&s));
    rt_start_spec_from(&s, rts, 1);
    assert_false(rt_start_spec_needed(&s));
}

/* One Connect envelope of a JSON text; flags 0x02 ends the stream. */
static size_t envelope(uint8_t flags, const char *js, uint8_t *out)
{
    size_t n = strlen(js);
    out[0] = flags;
    out[1] = (uint8_t)(n >> 24);
    out[2] = (uint8_t)(n >> 16);
    out[3] = (uint8_t)(n >> 8);
    out[4] = (uint8_t)n;
    memcpy(out + 5, js, n);
    return 5 + n;
}

static void stream_decoding(void **state)
{
    (void)state;
    uint8_t buf[2048];
    size_t n = 0;
    char b64[64], ev[256];
    crypto_base64_encode("hello\nworld\n", 12, b64);
    n += envelope(0, "{\"event\":{\"start\":{\"pid\":7}}}", buf + n);
    snprintf(ev, sizeof(ev), "{\"event\":{\"data\":{\"stdout\":\"%s\"}}}", b64);
    n += envelope(0, ev, buf + n);
    n += envelope(0, "{\"event\":{\"end\":{\"exitCode\":3}}}", buf + n);
    n += envelope(2, "{}", buf + n);

    /* fed one byte at a time: the same result as at once */
    struct rt_start_stream st;
    memset(&st, 0, sizeof(st));
    st.status = 200;
    int evs = 0;
    for (size_t i = 0; i < n; i++)
        evs |= rt_start_feed(&st, buf + i, 1);
    assert_int_equal(evs, RT_START_EV_STARTED | RT_START_EV_EXITED);
    assert_true(st.started);
    assert_true(st.exited);
    assert_int_equal(st.exit_code, 3);
    char tail[RT_START_TAIL_MAX + 1];
    rt_start_tail(&st, tail, sizeof(tail));
    assert_string_equal(tail, "hello\nworld");
    rt_start_stream_clear(&st);

    /* a refusal (not 200): its body is the error text */
    memset(&st, 0, sizeof(st));
    st.status = 401;
    assert_int_equal(rt_start_feed(&st, "unauthorized", 12), 0);
    assert_string_equal(st.err, "unauthorized");
    rt_start_stream_clear(&st);
}

static void tail_is_bounded_and_clean(void **state)
{
    (void)state;
    struct rt_start_stream st;
    memset(&st, 0, sizeof(st));
    st.status = 200;
    /* 20 lines through the ring, a control byte and a non-ASCII byte */
    char line[64], b64[128], ev[256];
    uint8_t buf[512];
    for (int i = 0; i < 20; i++) {
        snprintf(line, sizeof(line), "line %d\x01\xc3\n", i);
        crypto_base64_encode(line, strlen(line), b64);
        snprintf(ev, sizeof(ev), "{\"event\":{\"data\":{\"stderr\":\"%s\"}}}", b64);
        size_t n = envelope(0, ev, buf);
        rt_start_feed(&st, buf, n);
    }
    char tail[RT_START_TAIL_MAX + 1];
    rt_start_tail(&st, tail, sizeof(tail));
    assert_non_null(strstr(tail, "line 19??"));
    assert_null(strstr(tail, "line 11")); /* at most RT_START_TAIL_LINES lines */
    int lines = 1;
    for (const char *p = tail; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, RT_START_TAIL_LINES);
    rt_start_stream_clear(&st);
}

static void request_and_words(void **state)
{
    (void)state;
    uint8_t *env;
    size_t n;
    assert_int_equal(rt_start_request("echo \"hi\"", &env, &n), 0);
    assert_int_equal(env[0], 0);
    size_t plen = (size_t)env[1] << 24 | (size_t)env[2] << 16 | (size_t)env[3] << 8 | env[4];
    assert_int_equal(plen + 5, n);
    json_t *req = json_loadb((const char *)env + 5, plen, 0, NULL);
    assert_non_null(req);
    json_t *proc = json_object_get(req, "process");
    assert_string_equal(json_string_value(json_object_get(proc, "cmd")), "/bin/bash");
    assert_string_equal(json_string_value(json_array_get(json_object_get(proc, "args"), 1)),
                        "echo \"hi\"");
    json_decref(req);
    free(env);

    struct rt_start_spec s;
    memset(&s, 0, sizeof(s));
    strcpy(s.cmd, "x");
    strcpy(s.cmd_rt, "app");
    s.nprobes = 2;
    strcpy(s.probes[0].rt, "app");
    s.probes[0].p.kind = MF_PROBE_HTTP;
    s.probes[0].p.port = 80;
    strcpy(s.probes[0].p.path, "/health");
    strcpy(s.probes[1].rt, "db");
    s.probes[1].p.kind = MF_PROBE_TCP;
    s.probes[1].p.port = 5432;
    char out[600];
    rt_start_probe_name(&s, 0, "10.0.0.7", out, sizeof(out));
    assert_string_equal(out, "readiness check httpGet http://10.0.0.7:80/health of runtime 'app'");
    rt_start_probe_name(&s, 1, "127.0.0.1", out, sizeof(out));
    assert_string_equal(out, "readiness check tcpSocket 127.0.0.1:5432 of runtime 'db'");
    struct rt_start_stream st;
    memset(&st, 0, sizeof(st));
    rt_start_describe(&s, &st, "late", out, sizeof(out));
    assert_string_equal(out, "late; the start command of runtime 'app' did not start; it printed "
                             "nothing");
    st.started = st.exited = true;
    st.exit_code = 2;
    rt_start_describe(&s, &st, "boom", out, sizeof(out));
    assert_string_equal(out, "boom; the start command of runtime 'app' exited with code 2; it "
                             "printed nothing");
    s.cmd[0] = '\0'; /* probes only: just what */
    rt_start_describe(&s, &st, "only this", out, sizeof(out));
    assert_string_equal(out, "only this");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(spec_from_runtimes),
        cmocka_unit_test(stream_decoding),
        cmocka_unit_test(tail_is_bounded_and_clean),
        cmocka_unit_test(request_and_words),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
