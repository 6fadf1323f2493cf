/* Request-body helpers: parse errors and each getter's rules and messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/json.h"

#define BODY                                                                                       \
    "{\"templateID\":\"base\",\"timeout\":300,\"secure\":true,\"metadata\":{\"k\":\"v\"},"         \
    "\"envVars\":null,\"list\":[1,2],\"neg\":-5,\"real\":1.5,\"whole\":2.0,\"empty\":\"\","        \
    "\"big\":9223372036854775807}"

static json_t *body(void)
{
    char err[256] = "";
    json_t *o = json_parse_object(BODY, strlen(BODY), 0, err, sizeof(err));

    assert_non_null(o);
    assert_string_equal(err, "");
    return o;
}

static void assert_contains(const char *s, const char *part)
{
    if (strstr(s, part) == NULL)
        fail_msg("'%s' does not contain '%s'", s, part);
}

/* ---- parse ---- */

static void test_parse_ok(void **state)
{
    json_t *o = body();

    assert_true(json_is_object(o));
    assert_int_equal(json_object_size(o), 11);
    json_decref(o);
}

static void test_parse_empty(void **state)
{
    char err[256] = "";

    assert_null(json_parse_object("", 0, 0, err, sizeof(err)));
    assert_contains(err, "body is empty");
    err[0] = '\0';
    assert_null(json_parse_object(NULL, 0, 0, err, sizeof(err)));
    assert_contains(err, "empty");
    /* Only whitespace is not empty but is not JSON either. */
    assert_null(json_parse_object("  \n", 3, 0, err, sizeof(err)));
    assert_contains(err, "not valid JSON");
}

static void test_parse_not_object(void **state)
{
    char err[256];
    const char *cases[][2] = {
        {"[1,2]", "an array"}, {"\"s\"", "a string"}, {"42", "a number"},
        {"null", "null"},      {"true", "a boolean"},
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
        err[0] = '\0';
        assert_null(json_parse_object(cases[i][0], strlen(cases[i][0]), 0, err, sizeof(err)));
        assert_contains(err, "must be a JSON object");
        assert_contains(err, cases[i][1]);
    }
}

static void test_parse_invalid(void **state)
{
    char err[256] = "";
    const char *bad = "{\"timeout\": 30";

    assert_null(json_parse_object(bad, strlen(bad), 0, err, sizeof(err)));
    assert_contains(err, "body is not valid JSON: ");
    assert_contains(err, "(line 1, column ");

    /* Trailing garbage after the object. */
    assert_null(json_parse_object("{} x", 4, 0, err, sizeof(err)));
    assert_contains(err, "not valid JSON");
    /* Only len bytes are read: a valid prefix with junk after len parses. */
    json_t *o = json_parse_object("{}garbage", 2, 0, err, sizeof(err));
    assert_non_null(o);
    json_decref(o);
    /* Escaped NUL inside a string is refused. */
    assert_null(json_parse_object("{\"a\":\"x\\u0000y\"}", 16, 0, err, sizeof(err)));
    assert_contains(err, "not valid JSON");
    /* Nesting far past the parser's depth limit fails cleanly, no stack overflow. */
    size_t deep = 200000;
    char *nest = malloc(deep);
    assert_non_null(nest);
    nest[0] = '{';
    nest[1] = '"';
    nest[2] = 'a';
    nest[3] = '"';
    nest[4] = ':';
    memset(nest + 5, '[', deep - 5);
    assert_null(json_parse_object(nest, deep, 0, err, sizeof(err)));
    assert_contains(err, "not valid JSON");
    free(nest);
    /* Invalid UTF-8. */
    assert_null(json_parse_object("{\"a\":\"\xff\"}", 8, 0, err, sizeof(err)));
    assert_contains(err, "not valid JSON");
}

static void test_parse_over_maxlen(void **state)
{
    char err[256] = "";
    const char *b = "{\"a\":1}"; /* 7 bytes */
    json_t *o;

    assert_null(json_parse_object(b, 7, 6, err, sizeof(err)));
    assert_contains(err, "limit of 6 bytes");
    o = json_parse_object(b, 7, 7, err, sizeof(err));
    assert_non_null(o);
    json_decref(o);

    /* maxlen 0 is JSON_BODY_MAX: one byte more is refused before parsing. */
    size_t n = JSON_BODY_MAX + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    assert_null(json_parse_object(big, n, 0, err, sizeof(err)));
    assert_contains(err, "limit of 1048576 bytes");
    o = json_parse_object(big, n - 1, 0, err, sizeof(err)); /* "{   ...  " unterminated */
    assert_null(o);
    assert_contains(err, "not valid JSON");
    big[n - 2] = '}';
    o = json_parse_object(big, n - 1, 0, err, sizeof(err));
    assert_non_null(o);
    json_decref(o);
    free(big);
}

static void test_parse_err_buffer_small_or_null(void **state)
{
    char err[8];

    assert_null(json_parse_object("[]", 2, 0, err, sizeof(err)));
    assert_int_equal(strlen(err), 7);
    assert_null(json_parse_object("[]", 2, 0, NULL, 0));
}

/* ---- getters ---- */

static void test_get_str(void **state)
{
    json_t *o = body();
    char err[256];
    const char *s = "default";

    assert_int_equal(json_get_str(o, "templateID", true, 64, &s, err, sizeof(err)), 0);
    assert_string_equal(s, "base");
    assert_int_equal(json_get_str(o, "empty", true, 64, &s, err, sizeof(err)), 0);
    assert_string_equal(s, "");

    /* missing, not required: default stays */
    s = "default";
    assert_int_equal(json_get_str(o, "nope", false, 64, &s, err, sizeof(err)), 0);
    assert_string_equal(s, "default");
    /* null counts as missing */
    assert_int_equal(json_get_str(o, "envVars", false, 64, &s, err, sizeof(err)), 0);
    assert_string_equal(s, "default");

    assert_int_equal(json_get_str(o, "nope", true, 64, &s, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'nope' is required");
    assert_int_equal(json_get_str(o, "envVars", true, 64, &s, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'envVars' is required");

    assert_int_equal(json_get_str(o, "timeout", true, 64, &s, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "field 'timeout' must be a string");
    assert_int_equal(json_get_str(o, "metadata", false, 64, &s, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "field 'metadata' must be a string");
    assert_string_equal(s, "default");

    /* length limit: exactly maxlen passes, one less refuses */
    assert_int_equal(json_get_str(o, "templateID", true, 4, &s, err, sizeof(err)), 0);
    assert_int_equal(json_get_str(o, "templateID", true, 3, &s, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'templateID' must be at most 3 bytes long");
    /* maxlen 0: no limit */
    assert_int_equal(json_get_str(o, "templateID", true, 0, &s, err, sizeof(err)), 0);
    json_decref(o);
}

static void test_get_int(void **state)
{
    json_t *o = body();
    char err[256];
    int64_t v = 77;

    assert_int_equal(json_get_int(o, "timeout", true, 0, 86400, &v, err, sizeof(err)), 0);
    assert_int_equal(v, 300);
    assert_int_equal(json_get_int(o, "neg", true, -5, 5, &v, err, sizeof(err)), 0);
    assert_int_equal(v, -5);
    assert_int_equal(json_get_int(o, "big", true, INT64_MIN, INT64_MAX, &v, err, sizeof(err)), 0);
    assert_true(v == INT64_MAX);

    v = 77;
    assert_int_equal(json_get_int(o, "nope", false, 0, 10, &v, err, sizeof(err)), 0);
    assert_int_equal(v, 77);
    assert_int_equal(json_get_int(o, "envVars", false, 0, 10, &v, err, sizeof(err)), 0);
    assert_int_equal(v, 77);
    assert_int_equal(json_get_int(o, "nope", true, 0, 10, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'nope' is required");

    /* range, both ends */
    assert_int_equal(json_get_int(o, "timeout", true, 0, 299, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'timeout' must be an integer between 0 and 299");
    assert_int_equal(json_get_int(o, "timeout", true, 301, 400, &v, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(json_get_int(o, "timeout", true, 300, 300, &v, err, sizeof(err)), 0);
    assert_int_equal(json_get_int(o, "neg", true, 0, 86400, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'neg' must be an integer between 0 and 86400");
    assert_int_equal(v, 300);

    /* wrong types, including reals with or without a fraction */
    assert_int_equal(json_get_int(o, "templateID", true, 0, 10, &v, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "field 'templateID' must be an integer");
    assert_int_equal(json_get_int(o, "real", true, 0, 10, &v, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "field 'real'");
    assert_int_equal(json_get_int(o, "whole", true, 0, 10, &v, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(json_get_int(o, "secure", true, 0, 10, &v, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(v, 300);
    json_decref(o);
}

static void test_get_bool(void **state)
{
    json_t *o = body();
    char err[256];
    bool b = false;

    assert_int_equal(json_get_bool(o, "secure", true, &b, err, sizeof(err)), 0);
    assert_true(b);
    b = true;
    assert_int_equal(json_get_bool(o, "nope", false, &b, err, sizeof(err)), 0);
    assert_true(b);
    assert_int_equal(json_get_bool(o, "envVars", false, &b, err, sizeof(err)), 0);
    assert_int_equal(json_get_bool(o, "nope", true, &b, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'nope' is required");
    assert_int_equal(json_get_bool(o, "timeout", true, &b, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'timeout' must be true or false, not a number");
    assert_int_equal(json_get_bool(o, "templateID", true, &b, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "field 'templateID' must be true or false");

    json_t *f = json_pack("{s:b}", "x", 0);
    assert_int_equal(json_get_bool(f, "x", true, &b, err, sizeof(err)), 0);
    assert_false(b);
    json_decref(f);
    json_decref(o);
}

static void test_get_object_and_array(void **state)
{
    json_t *o = body();
    char err[256];
    json_t *v = NULL;

    assert_int_equal(json_get_object(o, "metadata", true, &v, err, sizeof(err)), 0);
    assert_true(json_is_object(v));
    assert_string_equal(json_string_value(json_object_get(v, "k")), "v");
    v = NULL;
    assert_int_equal(json_get_object(o, "nope", false, &v, err, sizeof(err)), 0);
    assert_null(v);
    assert_int_equal(json_get_object(o, "envVars", false, &v, err, sizeof(err)), 0);
    assert_null(v);
    assert_int_equal(json_get_object(o, "envVars", true, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'envVars' is required");
    assert_int_equal(json_get_object(o, "list", true, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'list' must be an object, not an array");

    assert_int_equal(json_get_array(o, "list", true, &v, err, sizeof(err)), 0);
    assert_true(json_is_array(v));
    assert_int_equal(json_array_size(v), 2);
    v = NULL;
    assert_int_equal(json_get_array(o, "nope", false, &v, err, sizeof(err)), 0);
    assert_null(v);
    assert_int_equal(json_get_array(o, "nope", true, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'nope' is required");
    assert_int_equal(json_get_array(o, "metadata", true, &v, err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "field 'metadata' must be an array, not an object");
    assert_null(v);
    json_decref(o);
}

static void test_getters_on_non_object(void **state)
{
    json_t *a = json_array();
    char err[256];
    const char *s = NULL;
    int64_t n;
    bool b;
    json_t *v;

    assert_int_equal(json_get_str(a, "x", false, 0, &s, err, sizeof(err)), AB_EINVAL);
    assert_contains(err, "JSON object");
    assert_int_equal(json_get_int(NULL, "x", false, 0, 1, &n, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(json_get_bool(a, "x", false, &b, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(json_get_object(a, "x", false, &v, err, sizeof(err)), AB_EINVAL);
    assert_int_equal(json_get_array(a, "x", false, &v, NULL, 0), AB_EINVAL);
    json_decref(a);
}

static void test_dump_compact(void **state)
{
    json_t *o = json_pack("{s:s, s:i, s:[i,b], s:n}", "a", "x\"y", "b", 2, "c", 1, 1, "d");
    char *s = json_dump_compact(o);

    assert_string_equal(s, "{\"a\":\"x\\\"y\",\"b\":2,\"c\":[1,true],\"d\":null}");
    free(s);
    json_decref(o);
    o = json_integer(5);
    s = json_dump_compact(o);
    assert_string_equal(s, "5");
    free(s);
    json_decref(o);
}

/* json_child_object: an object member kept, anything else replaced by {} */
static void test_child_object(void **state)
{
    json_t *o = json_loads("{\"a\":{\"x\":1},\"b\":3,\"c\":null}", 0, NULL);
    json_t *a, *b, *c, *d;

    (void)state;
    assert_non_null(o);
    a = json_child_object(o, "a");
    assert_ptr_equal(a, json_object_get(o, "a"));
    assert_int_equal(json_integer_value(json_object_get(a, "x")), 1);
    b = json_child_object(o, "b");
    assert_true(json_is_object(b));
    assert_int_equal(json_object_size(b), 0);
    assert_ptr_equal(b, json_object_get(o, "b"));
    c = json_child_object(o, "c");
    assert_true(json_is_object(c));
    d = json_child_object(json_child_object(o, "d"), "e");
    assert_true(json_is_object(d));
    assert_ptr_equal(d, json_object_get(json_object_get(o, "d"), "e"));
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_empty),
        cmocka_unit_test(test_parse_not_object),
        cmocka_unit_test(test_parse_invalid),
        cmocka_unit_test(test_parse_over_maxlen),
        cmocka_unit_test(test_parse_err_buffer_small_or_null),
        cmocka_unit_test(test_get_str),
        cmocka_unit_test(test_get_int),
        cmocka_unit_test(test_get_bool),
        cmocka_unit_test(test_get_object_and_array),
        cmocka_unit_test(test_getters_on_non_object),
        cmocka_unit_test(test_dump_compact),
        cmocka_unit_test(test_child_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
