/* Connect envelopes: encode, decode and every malformed request refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agent/envd/envelope.h"

static void test_header_is_big_endian(void **state)
{
    uint8_t h[5];

    envd_env_header(0x02, 0x01020304, h);
    assert_int_equal(h[0], 0x02);
    assert_int_equal(h[1], 0x01);
    assert_int_equal(h[2], 0x02);
    assert_int_equal(h[3], 0x03);
    assert_int_equal(h[4], 0x04);
}

static void test_encode_start_event_matches_capture(void **state)
{
    /* e2b-protocol.md §2.4: 00 00000020 {"event":{"start":{"pid":1000}}} */
    json_t *v = json_pack("{s:{s:{s:i}}}", "event", "start", "pid", 1000);
    uint8_t *out;
    size_t n;

    assert_int_equal(envd_env_encode_json(v, &out, &n), 0);
    assert_int_equal(n, 5 + 32);
    assert_memory_equal(out, "\x00\x00\x00\x00\x20", 5);
    assert_memory_equal(out + 5, "{\"event\":{\"start\":{\"pid\":1000}}}", 32);
    free(out);
    json_decref(v);
}

static void test_end_stream_ok_and_error(void **state)
{
    uint8_t *out;
    size_t n;

    assert_int_equal(envd_env_encode_end(NULL, NULL, &out, &n), 0);
    assert_int_equal(n, 7);
    assert_memory_equal(out, "\x02\x00\x00\x00\x02{}", 7);
    free(out);

    assert_int_equal(envd_env_encode_end("not_found", "process with pid 9 not found", &out, &n), 0);
    const char *want = "{\"error\":{\"code\":\"not_found\",\"message\":\"process with pid 9 not "
                       "found\"}}";
    assert_int_equal(out[0], 0x02);
    assert_int_equal(n, 5 + strlen(want));
    assert_int_equal((out[3] << 8) | out[4], strlen(want));
    assert_memory_equal(out + 5, want, strlen(want));
    free(out);
}

static void test_encode_refuses_over_limit(void **state)
{
    uint8_t *out = (uint8_t *)1;
    size_t n = 1;

    assert_int_equal(envd_env_encode(0, "", (size_t)ENVD_ENV_MAX + 1, &out, &n), AB_ELIMIT);
    assert_null(out);
    assert_int_equal(n, 0);
}

static void test_decode_roundtrip_and_consumed(void **state)
{
    uint8_t buf[5 + 2 + 5 + 3];
    const uint8_t *p;
    size_t plen, used;
    uint8_t flags;
    char err[128];

    envd_env_header(0, 2, buf);
    memcpy(buf + 5, "{}", 2);
    envd_env_header(ENVD_ENV_FLAG_END, 3, buf + 7);
    memcpy(buf + 12, "abc", 3);
    assert_int_equal(
        envd_env_decode(buf, sizeof(buf), ENVD_ENV_MAX, &flags, &p, &plen, &used, err, sizeof(err)),
        0);
    assert_int_equal(flags, 0);
    assert_int_equal(plen, 2);
    assert_int_equal(used, 7);
    assert_memory_equal(p, "{}", 2);
    assert_int_equal(envd_env_decode(buf + used, sizeof(buf) - used, ENVD_ENV_MAX, &flags, &p,
                                     &plen, &used, err, sizeof(err)),
                     0);
    assert_int_equal(flags, ENVD_ENV_FLAG_END);
    assert_memory_equal(p, "abc", 3);
}

static void test_decode_rejects_malformed(void **state)
{
    uint8_t buf[16] = {0};
    const uint8_t *p;
    size_t plen, used;
    uint8_t flags;
    char err[128];

    /* short header */
    assert_int_equal(
        envd_env_decode(buf, 4, ENVD_ENV_MAX, &flags, &p, &plen, &used, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "truncated"));
    /* truncated payload */
    envd_env_header(0, 10, buf);
    assert_int_equal(
        envd_env_decode(buf, 9, ENVD_ENV_MAX, &flags, &p, &plen, &used, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "4 of 10"));
    /* over the limit, even though the header itself is complete */
    envd_env_header(0, ENVD_ENV_MAX + 1, buf);
    assert_int_equal(
        envd_env_decode(buf, 5, ENVD_ENV_MAX, &flags, &p, &plen, &used, err, sizeof(err)),
        AB_ELIMIT);
    assert_non_null(strstr(err, "limit"));
    /* unknown flag bits */
    envd_env_header(0x80, 0, buf);
    assert_int_equal(
        envd_env_decode(buf, 5, ENVD_ENV_MAX, &flags, &p, &plen, &used, err, sizeof(err)),
        AB_EINVAL);
    assert_non_null(strstr(err, "0x80"));
}

static int parse(const char *payload, uint8_t flags, size_t extra, json_t **out, char *err)
{
    size_t n = strlen(payload);
    uint8_t *buf = calloc(1, 5 + n + extra);
    int rc;

    envd_env_header(flags, (uint32_t)n, buf);
    memcpy(buf + 5, payload, n);
    rc = envd_env_parse_request(buf, 5 + n + extra, out, err, 128);
    free(buf);
    return rc;
}

static void test_parse_request(void **state)
{
    char err[128];
    json_t *v = NULL;

    /* The exact Start body of the capture. */
    assert_int_equal(
        parse("{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo hello\"]},"
              "\"stdin\":false}",
              0, 0, &v, err),
        0);
    assert_string_equal(json_string_value(json_object_get(json_object_get(v, "process"), "cmd")),
                        "/bin/bash");
    json_decref(v);

    assert_int_equal(parse("{}", ENVD_ENV_FLAG_COMPRESSED, 0, &v, err), AB_EINVAL);
    assert_non_null(strstr(err, "compressed"));
    assert_int_equal(parse("{}", ENVD_ENV_FLAG_END, 0, &v, err), AB_EINVAL);
    assert_non_null(strstr(err, "end-stream"));
    assert_int_equal(parse("{}", 0, 3, &v, err), AB_EINVAL);
    assert_non_null(strstr(err, "after"));
    assert_int_equal(parse("{\"a\":", 0, 0, &v, err), AB_EINVAL);
    assert_non_null(strstr(err, "JSON"));
    assert_int_equal(parse("[1]", 0, 0, &v, err), AB_EINVAL);
    assert_non_null(strstr(err, "object"));
    assert_null(v);
    assert_int_equal(envd_env_parse_request((const uint8_t *)"", 0, &v, err, sizeof(err)),
                     AB_EINVAL);
}

static void test_connect_status(void **state)
{
    assert_int_equal(envd_connect_status("not_found"), 404);
    assert_int_equal(envd_connect_status("failed_precondition"), 400);
    assert_int_equal(envd_connect_status("unauthenticated"), 401);
    assert_int_equal(envd_connect_status("unimplemented"), 501);
    assert_int_equal(envd_connect_status("resource_exhausted"), 429);
    assert_int_equal(envd_connect_status("what"), 500);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_is_big_endian),
        cmocka_unit_test(test_encode_start_event_matches_capture),
        cmocka_unit_test(test_end_stream_ok_and_error),
        cmocka_unit_test(test_encode_refuses_over_limit),
        cmocka_unit_test(test_decode_roundtrip_and_consumed),
        cmocka_unit_test(test_decode_rejects_malformed),
        cmocka_unit_test(test_parse_request),
        cmocka_unit_test(test_connect_status),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
