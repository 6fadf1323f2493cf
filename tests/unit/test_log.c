/* Logger: line format, quoting, JSON validity, secret masking, levels,
 * truncation and whole lines under concurrent writers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentbox/log.h"

#define CAP_MAX (1 << 20)

static FILE *g_f;
static char g_out[CAP_MAX];

static int setup(void **state)
{
    g_f = tmpfile();
    assert_non_null(g_f);
    log_set_stream(g_f);
    log_set_level(LOG_LEVEL_DEBUG);
    log_set_json(0);
    log_set_component(NULL);
    return 0;
}

static int teardown(void **state)
{
    log_set_stream(NULL);
    log_set_level(LOG_LEVEL_INFO);
    log_set_json(0);
    log_set_json_keys(NULL, NULL);
    log_set_component(NULL);
    fclose(g_f);
    return 0;
}

/* Everything written so far, NUL-terminated. */
static const char *captured(void)
{
    size_t n;

    rewind(g_f);
    n = fread(g_out, 1, sizeof(g_out) - 1, g_f);
    g_out[n] = '\0';
    return g_out;
}

static int count_lines(const char *s)
{
    int n = 0;

    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* "2026-11-30T01:02:03.456Z" */
static void assert_timestamp(const char *s)
{
    const char *pat = "dddd-dd-ddTdd:dd:dd.dddZ";

    for (size_t i = 0; pat[i]; i++) {
        if (pat[i] == 'd')
            assert_true(isdigit((unsigned char)s[i]));
        else
            assert_int_equal(s[i], pat[i]);
    }
}

static void test_text_line_format(void **state)
{
    const char *out;

    log_set_component("hub");
    LOG_INFO("tunnel connected", "cluster", "alpha", "epoch", "3");
    out = captured();
    assert_int_equal(count_lines(out), 1);
    assert_timestamp(out);
    assert_string_equal(out + 24,
                        " INFO component=hub msg=\"tunnel connected\" cluster=alpha epoch=3\n");
}

static void test_text_level_names_and_no_component(void **state)
{
    const char *out;

    LOG_DEBUG("a");
    LOG_WARN("b");
    LOG_ERROR("c");
    out = captured();
    assert_int_equal(count_lines(out), 3);
    assert_non_null(strstr(out, "Z DEBUG msg=a\n"));
    assert_non_null(strstr(out, "Z WARN msg=b\n"));
    assert_non_null(strstr(out, "Z ERROR msg=c\n"));
    assert_null(strstr(out, "component="));
}

static void test_text_quoting(void **state)
{
    const char *out;

    LOG_INFO("m", "plain", "abc", "space", "a b", "quote", "say \"hi\"", "eq", "a=b", "empty", "",
             "bs", "c:\\dir", "nl", "x\ny", "ctl", "a\x01z", "utf8", "caf\xc3\xa9");
    out = captured();
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, " plain=abc "));
    assert_non_null(strstr(out, " space=\"a b\" "));
    assert_non_null(strstr(out, " quote=\"say \\\"hi\\\"\" "));
    assert_non_null(strstr(out, " eq=\"a=b\" "));
    assert_non_null(strstr(out, " empty=\"\" "));
    assert_non_null(strstr(out, " bs=\"c:\\\\dir\" "));
    assert_non_null(strstr(out, " nl=\"x\\ny\" "));
    assert_non_null(strstr(out, " ctl=\"a\\x01z\" "));
    assert_non_null(strstr(out, " utf8=caf\xc3\xa9\n"));
}

/* envd's lines carry E2B's key names (what `e2b sandbox logs` reads). */
static void test_json_key_names(void **state)
{
    char line[1024];
    json_error_t jerr;
    json_t *o;

    log_set_json(1);
    log_set_json_keys("timestamp", "message");
    log_set_component("envd");
    LOG_INFO("envd serving", "listen", "unix:/x");
    rewind(g_f);
    assert_non_null(fgets(line, sizeof(line), g_f));
    o = json_loads(line, 0, &jerr);
    assert_non_null(o);
    assert_true(strncmp(line, "{\"timestamp\":\"", 14) == 0);
    assert_timestamp(json_string_value(json_object_get(o, "timestamp")));
    assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
    assert_string_equal(json_string_value(json_object_get(o, "message")), "envd serving");
    assert_string_equal(json_string_value(json_object_get(o, "listen")), "unix:/x");
    assert_null(json_object_get(o, "ts"));
    assert_null(json_object_get(o, "msg"));
    json_decref(o);
}

static void test_json_lines_are_valid_json(void **state)
{
    char line[4096];
    json_error_t jerr;
    json_t *o;

    log_set_json(1);
    log_set_component("agent");
    LOG_WARN("tunnel \"lost\"\nretrying", "cluster", "alpha", "path", "c:\\x", "ctl", "\x01\x1f",
             "bad_utf8",
             "a\xff\xfe"
             "b",
             "utf8", "caf\xc3\xa9", "empty", "");
    rewind(g_f);
    assert_non_null(fgets(line, sizeof(line), g_f));
    assert_null(fgets(line + strlen(line), (int)(sizeof(line) - strlen(line)), g_f));
    o = json_loads(line, 0, &jerr);
    assert_non_null(o);
    assert_true(json_is_string(json_object_get(o, "ts")));
    assert_timestamp(json_string_value(json_object_get(o, "ts")));
    assert_string_equal(json_string_value(json_object_get(o, "level")), "warn");
    assert_string_equal(json_string_value(json_object_get(o, "component")), "agent");
    assert_string_equal(json_string_value(json_object_get(o, "msg")), "tunnel \"lost\"\nretrying");
    assert_string_equal(json_string_value(json_object_get(o, "cluster")), "alpha");
    assert_string_equal(json_string_value(json_object_get(o, "path")), "c:\\x");
    assert_string_equal(json_string_value(json_object_get(o, "ctl")), "\x01\x1f");
    assert_string_equal(json_string_value(json_object_get(o, "bad_utf8")),
                        "a\xef\xbf\xbd\xef\xbf\xbd"
                        "b");
    assert_string_equal(json_string_value(json_object_get(o, "utf8")), "caf\xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(o, "empty")), "");
    assert_null(json_object_get(o, "truncated"));
    /* Key order as documented: ts, level, component, msg, fields. */
    assert_true(strncmp(line, "{\"ts\":", 6) == 0);
    assert_true(strstr(line, "\"level\"") < strstr(line, "\"component\""));
    assert_true(strstr(line, "\"component\"") < strstr(line, "\"msg\""));
    assert_true(strstr(line, "\"msg\"") < strstr(line, "\"cluster\""));
    json_decref(o);
}

static void test_secret_fields_masked(void **state)
{
    const char *out;

    LOG_INFO("login", "token", "agbx_abcdefghijklmnopqrstuvwxyz", "api_key",
             "abxc_ZYXWVUTSRQPONMLKJIHG", "Authorization", "Bearer abcdefghijklmnopqrstuvwx",
             "DB_PASSWORD", "hunter2hunter2hunter2", "client_secret", "s3cr3tvaluevaluevalue",
             "apiKey", "qwertyuiopasdfghjkl", "key", "plainkeyvaluevaluevalue", "cluster",
             "alpha-long-cluster-name");
    out = captured();
    assert_non_null(strstr(out, " token=agbx_abcd... "));
    assert_non_null(strstr(out, " api_key=abxc_ZYXW... "));
    assert_non_null(strstr(out, " Authorization=\"Bearer abcd...\" "));
    assert_non_null(strstr(out, " DB_PASSWORD=hunt... "));
    assert_non_null(strstr(out, " client_secret=s3cr... "));
    assert_non_null(strstr(out, " apiKey=qwer... "));
    assert_non_null(strstr(out, " key=plai... "));
    assert_non_null(strstr(out, " cluster=alpha-long-cluster-name\n"));
    assert_null(strstr(out, "efghijkl"));
    assert_null(strstr(out, "VUTSRQ"));
    assert_null(strstr(out, "hunter2hunter2"));
    assert_null(strstr(out, "valuevalue"));
    assert_null(strstr(out, "asdfghjkl"));
}

static void test_secret_fields_masked_json(void **state)
{
    char line[4096];
    json_t *o;

    log_set_json(1);
    LOG_INFO("x", "refresh_token", "agbx_0123456789abcdefghij", "user", "bob");
    rewind(g_f);
    assert_non_null(fgets(line, sizeof(line), g_f));
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "refresh_token")), "agbx_0123...");
    assert_string_equal(json_string_value(json_object_get(o, "user")), "bob");
    json_decref(o);
}

static void test_log_redact(void **state)
{
    char buf[64];
    char tiny[6];

    assert_string_equal(log_redact("agbx_abcdefghijklmnop", buf, sizeof(buf)), "agbx_abcd...");
    assert_string_equal(log_redact("abxc_0123456789abcdef", buf, sizeof(buf)), "abxc_0123...");
    assert_string_equal(log_redact("Bearer agbx_abcdefghijklmnop", buf, sizeof(buf)),
                        "Bearer agbx_abcd...");
    assert_string_equal(log_redact("Bearer eyJhbGciOiJIUzI1NiJ9", buf, sizeof(buf)),
                        "Bearer eyJh...");
    assert_string_equal(log_redact("0123456789abcdef0123", buf, sizeof(buf)), "0123...");
    /* Short secrets show less, never the whole thing. */
    assert_string_equal(log_redact("01234567", buf, sizeof(buf)), "01...");
    assert_string_equal(log_redact("abc", buf, sizeof(buf)), "...");
    assert_string_equal(log_redact("agbx_", buf, sizeof(buf)), "agbx_...");
    assert_string_equal(log_redact("", buf, sizeof(buf)), "");
    assert_string_equal(log_redact(NULL, buf, sizeof(buf)), "(null)");
    /* Always terminated, never past buflen. */
    memset(tiny, 'X', sizeof(tiny));
    log_redact("agbx_abcdefghijklmnop", tiny, sizeof(tiny));
    assert_int_equal(strlen(tiny), 5);
    assert_string_equal(tiny, "agbx_");
}

static void test_level_filtering(void **state)
{
    enum log_level lv;
    const char *out;

    log_set_level(LOG_LEVEL_WARN);
    assert_int_equal(log_get_level(), LOG_LEVEL_WARN);
    LOG_DEBUG("d-line");
    LOG_INFO("i-line");
    LOG_WARN("w-line");
    LOG_ERROR("e-line");
    out = captured();
    assert_int_equal(count_lines(out), 2);
    assert_null(strstr(out, "d-line"));
    assert_null(strstr(out, "i-line"));
    assert_non_null(strstr(out, "WARN msg=w-line"));
    assert_non_null(strstr(out, "ERROR msg=e-line"));

    assert_int_equal(log_parse_level("debug", &lv), 0);
    assert_int_equal(lv, LOG_LEVEL_DEBUG);
    assert_int_equal(log_parse_level("INFO", &lv), 0);
    assert_int_equal(lv, LOG_LEVEL_INFO);
    assert_int_equal(log_parse_level("warn", &lv), 0);
    assert_int_equal(lv, LOG_LEVEL_WARN);
    assert_int_equal(log_parse_level("error", &lv), 0);
    assert_int_equal(lv, LOG_LEVEL_ERROR);
    assert_int_equal(log_parse_level("loud", &lv), -1);
    assert_int_equal(log_parse_level("", &lv), -1);
}

static void test_truncation_text(void **state)
{
    char *big = malloc(20000);
    const char *out;
    size_t n;

    memset(big, 'a', 19999);
    big[19999] = '\0';
    LOG_INFO("big", "v", big, "after", "x");
    out = captured();
    n = strlen(out);
    assert_int_equal(count_lines(out), 1);
    assert_true(n <= 8192);
    assert_true(n > 8000);
    assert_string_equal(out + n - 16, " truncated=true\n");
    assert_null(strstr(out, "after="));

    /* A quoted value is closed before the marker. */
    assert_int_equal(ftruncate(fileno(g_f), 0), 0);
    rewind(g_f);
    big[10] = ' ';
    LOG_INFO("big", "v", big);
    out = captured();
    n = strlen(out);
    assert_true(n <= 8192);
    assert_string_equal(out + n - 18, "a\" truncated=true\n");
    free(big);
}

static void test_truncation_json(void **state)
{
    char *big = malloc(20000);
    char *line = malloc(16384);
    json_t *o;
    size_t n;

    /* Quotes double in size when escaped: the cut must not split an escape. */
    memset(big, '"', 19999);
    big[19999] = '\0';
    log_set_json(1);
    LOG_INFO("big", "v", big, "after", "x");
    rewind(g_f);
    assert_non_null(fgets(line, 16384, g_f));
    n = strlen(line);
    assert_true(n <= 8192);
    o = json_loads(line, 0, NULL);
    assert_non_null(o);
    assert_true(json_is_true(json_object_get(o, "truncated")));
    assert_null(json_object_get(o, "after"));
    assert_true(strlen(json_string_value(json_object_get(o, "v"))) > 3000);
    json_decref(o);
    free(line);
    free(big);
}

static void test_null_value_ends_fields(void **state)
{
    const char *out;

    LOG_INFO("m", "a", "1", "b", (const char *)NULL, "c", "3");
    out = captured();
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, " a=1 b=(null)\n"));
}

#define THREADS 4
#define PER_THREAD 300

static void *writer(void *arg)
{
    char val[600];
    char id[16];

    memset(val, 'a' + (int)(intptr_t)arg, sizeof(val) - 1);
    val[sizeof(val) - 1] = '\0';
    snprintf(id, sizeof(id), "%d", (int)(intptr_t)arg);
    for (int i = 0; i < PER_THREAD; i++)
        LOG_INFO("concurrent", "thread", id, "payload", val);
    return NULL;
}

static void test_concurrent_lines_stay_whole(void **state)
{
    pthread_t t[THREADS];
    char *line = malloc(4096);
    int lines = 0;

    log_set_json(1);
    for (intptr_t i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)i), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    rewind(g_f);
    while (fgets(line, 4096, g_f)) {
        json_t *o = json_loads(line, 0, NULL);
        const char *payload, *tid;

        assert_non_null(o);
        tid = json_string_value(json_object_get(o, "thread"));
        payload = json_string_value(json_object_get(o, "payload"));
        assert_non_null(tid);
        assert_non_null(payload);
        assert_int_equal(strlen(payload), 599);
        assert_int_equal(payload[0], 'a' + atoi(tid));
        assert_int_equal(payload[598], 'a' + atoi(tid));
        json_decref(o);
        lines++;
    }
    assert_int_equal(lines, THREADS * PER_THREAD);
    free(line);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_text_line_format, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_level_names_and_no_component, setup, teardown),
        cmocka_unit_test_setup_teardown(test_text_quoting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_lines_are_valid_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_json_key_names, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_fields_masked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_secret_fields_masked_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_redact, setup, teardown),
        cmocka_unit_test_setup_teardown(test_level_filtering, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_null_value_ends_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_lines_stay_whole, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
