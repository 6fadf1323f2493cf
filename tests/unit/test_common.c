/* ab_strlcpy, clocks and error names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"

static void test_strlcpy_fits(void **state)
{
    char buf[8];

    memset(buf, 'x', sizeof(buf));
    assert_int_equal(ab_strlcpy(buf, "abc", sizeof(buf)), 3);
    assert_string_equal(buf, "abc");
}

static void test_strlcpy_exact_fit(void **state)
{
    char buf[4];

    assert_int_equal(ab_strlcpy(buf, "abc", sizeof(buf)), 3);
    assert_string_equal(buf, "abc");
}

static void test_strlcpy_truncates(void **state)
{
    char buf[4];

    memset(buf, 'x', sizeof(buf));
    assert_int_equal(ab_strlcpy(buf, "abcdef", sizeof(buf)), 6);
    assert_string_equal(buf, "abc");
}

static void test_strlcpy_size_one_and_zero(void **state)
{
    char buf[2] = {'x', 'y'};

    assert_int_equal(ab_strlcpy(buf, "abc", 1), 3);
    assert_int_equal(buf[0], '\0');
    assert_int_equal(buf[1], 'y');
    buf[0] = 'q';
    assert_int_equal(ab_strlcpy(buf, "abc", 0), 3);
    assert_int_equal(buf[0], 'q'); /* size 0 writes nothing */
}

static void test_strlcpy_empty(void **state)
{
    char buf[4] = "zzz";

    assert_int_equal(ab_strlcpy(buf, "", sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

static void test_clocks(void **state)
{
    int64_t ms1 = ab_now_ms();
    int64_t us1 = ab_now_us();
    int64_t ms2 = ab_now_ms();
    int64_t us2 = ab_now_us();
    int64_t wall = ab_wall_ms();

    assert_true(ms1 > 0);
    assert_true(ms2 >= ms1);
    assert_true(us2 >= us1);
    /* Same clock: the microsecond reading is within a second of the ms one. */
    assert_true(us1 / 1000 - ms1 < 1000 && us1 / 1000 - ms1 >= 0);
    /* Wall clock is after 2020-01-01 and before 2200. */
    assert_true(wall > INT64_C(1577836800000));
    assert_true(wall < INT64_C(7258118400000));
}

static void test_strerror(void **state)
{
    const int codes[] = {AB_OK,     AB_EINVAL, AB_ENOMEM,  AB_ELIMIT,   AB_EIO,    AB_ENOENT,
                         AB_EEXIST, AB_EBUSY,  AB_ECLOSED, AB_ETIMEOUT, AB_EDENIED};

    for (size_t i = 0; i < AB_ARRAY_LEN(codes); i++) {
        const char *s = ab_strerror(codes[i]);
        assert_non_null(s);
        assert_string_not_equal(s, "unknown error");
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(s, ab_strerror(codes[k]));
    }
    assert_string_equal(ab_strerror(AB_EDENIED), "denied");
    assert_string_equal(ab_strerror(-999), "unknown error");
    assert_string_equal(ab_strerror(5), "unknown error");
}

static void test_macros(void **state)
{
    int a[7];

    assert_int_equal(AB_ARRAY_LEN(a), 7);
    assert_int_equal(AB_MIN(3, -2), -2);
    assert_int_equal(AB_MAX(3, -2), 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_strlcpy_fits),      cmocka_unit_test(test_strlcpy_exact_fit),
        cmocka_unit_test(test_strlcpy_truncates), cmocka_unit_test(test_strlcpy_size_one_and_zero),
        cmocka_unit_test(test_strlcpy_empty),     cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_strerror),          cmocka_unit_test(test_macros),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
