/* pct_decode: the documented policy for "%G1", "%", "%2", "%00", '+' and limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/pct.h"

static int dec(const char *src, char *out, size_t outlen, unsigned flags, size_t *n)
{
    return pct_decode(src, strlen(src), out, outlen, flags, n);
}

static void test_plain_and_escapes(void **state)
{
    char out[64];
    size_t n = 99;

    assert_int_equal(dec("/a/b", out, sizeof(out), 0, &n), 0);
    assert_string_equal(out, "/a/b");
    assert_int_equal(n, 4);
    assert_int_equal(dec("%41%4a%4A", out, sizeof(out), 0, &n), 0);
    assert_string_equal(out, "AJJ");
    assert_int_equal(n, 3);
    assert_int_equal(dec("%2Fetc%2fpasswd", out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "/etc/passwd"); /* %2F is not special to the decoder */
    assert_int_equal(dec("%25", out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "%"); /* decoded once, not twice */
    assert_int_equal(dec("%2541", out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "%41");
    assert_int_equal(dec("%ff", out, sizeof(out), 0, &n), 0);
    assert_int_equal((unsigned char)out[0], 0xff);
    assert_int_equal(n, 1);
    assert_int_equal(dec("", out, sizeof(out), 0, &n), 0);
    assert_string_equal(out, "");
    assert_int_equal(n, 0);
}

static void test_plus(void **state)
{
    char out[16];

    assert_int_equal(dec("a+b%2B", out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "a+b+");
    assert_int_equal(dec("a+b%2B", out, sizeof(out), PCT_PLUS_IS_SPACE, NULL), 0);
    assert_string_equal(out, "a b+"); /* an escaped plus stays a plus */
}

static void test_malformed_refused(void **state)
{
    const char *bad[] = {"%G1", "%1G", "%", "%2", "a%", "a%2", "%%41", "%-1", "% 1", "%0x1"};
    char out[16];
    size_t n;

    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        memset(out, 'x', sizeof(out));
        n = 99;
        assert_int_equal(dec(bad[i], out, sizeof(out), 0, &n), AB_EINVAL);
        /* nothing half-decoded is left behind */
        assert_string_equal(out, "");
        assert_int_equal(n, 0);
    }
}

static void test_nul_refused(void **state)
{
    char out[16];
    const char raw[] = {'a', '\0', 'b'};

    assert_int_equal(dec("%00", out, sizeof(out), 0, NULL), AB_EINVAL);
    assert_int_equal(dec("/files%00.txt", out, sizeof(out), 0, NULL), AB_EINVAL);
    assert_string_equal(out, "");
    assert_int_equal(pct_decode(raw, sizeof(raw), out, sizeof(out), 0, NULL), AB_EINVAL);
    /* %01 is a byte like any other */
    assert_int_equal(dec("%01", out, sizeof(out), 0, NULL), 0);
    assert_int_equal(out[0], 1);
}

static void test_limits(void **state)
{
    char out[4];
    size_t n;

    assert_int_equal(dec("abc", out, sizeof(out), 0, &n), 0); /* 3 + NUL fits exactly */
    assert_string_equal(out, "abc");
    assert_int_equal(dec("abcd", out, sizeof(out), 0, &n), AB_ELIMIT);
    assert_string_equal(out, "");
    assert_int_equal(n, 0);
    /* the limit is on the decoded length: 9 escaped bytes decode to 3 */
    assert_int_equal(dec("%41%42%43", out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "ABC");
    assert_int_equal(dec("%41%42%43%44", out, sizeof(out), 0, NULL), AB_ELIMIT);
    assert_int_equal(dec("", out, 1, 0, NULL), 0);
    assert_int_equal(dec("", out, 0, 0, NULL), AB_ELIMIT);
    assert_int_equal(dec("a", out, 0, 0, NULL), AB_ELIMIT);
}

static void test_length_not_terminator(void **state)
{
    char out[16];

    /* only len bytes are read: an escape cut by len is truncated, not read past */
    assert_int_equal(pct_decode("ab%41", 4, out, sizeof(out), 0, NULL), AB_EINVAL);
    assert_int_equal(pct_decode("ab%41", 2, out, sizeof(out), 0, NULL), 0);
    assert_string_equal(out, "ab");
}

/* http_query_get decodes keys and values with the same policy, '+' as a space. */
static void test_query_get_uses_policy(void **state)
{
    struct http_request r;
    char out[8];

    memset(&r, 0, sizeof(r));
    r.query = "a=x+y%21&b%5F1=2&bad=%G1&nul=a%00b&cut=%2&long=123456789&empty=&flag";
    assert_int_equal(http_query_get(&r, "a", out, sizeof(out)), 0);
    assert_string_equal(out, "x y!");
    assert_int_equal(http_query_get(&r, "b_1", out, sizeof(out)), 0);
    assert_string_equal(out, "2");
    memset(out, 'x', sizeof(out));
    assert_int_equal(http_query_get(&r, "bad", out, sizeof(out)), AB_ELIMIT);
    assert_string_equal(out, "");
    assert_int_equal(http_query_get(&r, "nul", out, sizeof(out)), AB_ELIMIT);
    assert_string_equal(out, ""); /* never a value silently cut at the NUL */
    assert_int_equal(http_query_get(&r, "cut", out, sizeof(out)), AB_ELIMIT);
    assert_int_equal(http_query_get(&r, "long", out, sizeof(out)), AB_ELIMIT);
    assert_string_equal(out, "");
    assert_int_equal(http_query_get(&r, "empty", out, sizeof(out)), 0);
    assert_string_equal(out, "");
    assert_int_equal(http_query_get(&r, "flag", out, sizeof(out)), 0);
    assert_string_equal(out, "");
    assert_int_equal(http_query_get(&r, "missing", out, sizeof(out)), AB_ENOENT);
}

/* http_query_long: absent → the default; only a whole decimal in range. */
static void test_query_long(void **state)
{
    struct http_request r;
    long v;

    (void)state;
    memset(&r, 0, sizeof(r));
    r.query = "n=42&neg=-3&big=99999999999999999999&junk=4x&empty=&sp=%204&top=500";
    assert_int_equal(http_query_long(&r, "n", 7, 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(http_query_long(&r, "missing", 7, 0, 100, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(http_query_long(&r, "neg", 7, 0, 100, &v), AB_EINVAL);
    assert_int_equal(http_query_long(&r, "neg", 7, -5, 100, &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(http_query_long(&r, "big", 7, 0, 100, &v), AB_EINVAL);
    assert_int_equal(http_query_long(&r, "junk", 7, 0, 100, &v), AB_EINVAL);
    assert_int_equal(http_query_long(&r, "empty", 7, 0, 100, &v), AB_EINVAL);
    assert_int_equal(http_query_long(&r, "sp", 7, 0, 100, &v), AB_EINVAL);
    assert_int_equal(http_query_long(&r, "top", 7, 1, 500, &v), 0);
    assert_int_equal(v, 500);
    assert_int_equal(http_query_long(&r, "top", 7, 1, 499, &v), AB_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_and_escapes),
        cmocka_unit_test(test_plus),
        cmocka_unit_test(test_malformed_refused),
        cmocka_unit_test(test_nul_refused),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_length_not_terminator),
        cmocka_unit_test(test_query_get_uses_policy),
        cmocka_unit_test(test_query_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
