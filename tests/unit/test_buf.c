/* buf: the limit set at creation, exact fits, growth, refused printf truncation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "agentbox/buf.h"

static void test_empty_is_empty_string(void **state)
{
    struct buf b;

    buf_init(&b, 16, "test body");
    assert_null(b.data); /* nothing is allocated before the first append */
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_len(&b), 0);
    assert_string_equal(buf_err(&b), "");
    buf_free(&b);
}

static void test_append_and_terminate(void **state)
{
    struct buf b;

    buf_init(&b, 64, "test body");
    assert_int_equal(buf_append(&b, "abc", 3), 0);
    assert_int_equal(buf_append_str(&b, "def"), 0);
    assert_int_equal(buf_len(&b), 6);
    assert_string_equal(buf_str(&b), "abcdef");
    assert_int_equal(b.data[6], '\0');
    assert_int_equal(buf_append(&b, NULL, 0), 0); /* empty appends are fine */
    assert_int_equal(buf_len(&b), 6);
    buf_free(&b);
    assert_null(b.data);
    assert_int_equal(buf_len(&b), 0);
}

static void test_binary_keeps_nul_bytes(void **state)
{
    struct buf b;
    const char bin[] = {'a', '\0', 'b'};

    buf_init(&b, 8, "frame");
    assert_int_equal(buf_append(&b, bin, sizeof(bin)), 0);
    assert_int_equal(buf_len(&b), 3);
    assert_memory_equal(buf_str(&b), bin, sizeof(bin));
    assert_int_equal(b.data[3], '\0');
    buf_free(&b);
}

static void test_exactly_at_limit(void **state)
{
    struct buf b;

    buf_init(&b, 8, "test body");
    assert_int_equal(buf_append(&b, "12345678", 8), 0);
    assert_int_equal(buf_len(&b), 8);
    assert_string_equal(buf_str(&b), "12345678");
    /* The NUL does not count towards the limit, and no more than limit + 1 is allocated. */
    assert_int_equal(b.cap, 9);
    assert_string_equal(buf_err(&b), "");
    buf_free(&b);
}

static void test_one_past_limit_refused_unchanged(void **state)
{
    struct buf b;

    buf_init(&b, 8, "request body");
    assert_int_equal(buf_append(&b, "1234", 4), 0);
    assert_int_equal(buf_append(&b, "56789", 5), AB_ELIMIT);
    /* refused whole: nothing of the failed append is kept */
    assert_int_equal(buf_len(&b), 4);
    assert_string_equal(buf_str(&b), "1234");
    assert_string_equal(buf_err(&b), "request body is larger than 8 bytes");
    /* what still fits is still accepted */
    assert_int_equal(buf_append(&b, "5678", 4), 0);
    assert_string_equal(buf_str(&b), "12345678");
    assert_int_equal(buf_append(&b, "9", 1), AB_ELIMIT);
    assert_int_equal(buf_len(&b), 8);
    buf_free(&b);
}

static void test_huge_add_does_not_overflow(void **state)
{
    struct buf b;

    buf_init(&b, 8, "x");
    assert_int_equal(buf_append(&b, "ab", 2), 0);
    assert_int_equal(buf_grow(&b, SIZE_MAX), AB_ELIMIT);
    assert_int_equal(buf_grow(&b, SIZE_MAX - 1), AB_ELIMIT);
    assert_int_equal(buf_len(&b), 2);
    buf_free(&b);
}

static void test_zero_limit(void **state)
{
    struct buf b;

    buf_init(&b, 0, "empty-only");
    assert_int_equal(buf_append(&b, "", 0), 0);
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_append(&b, "a", 1), AB_ELIMIT);
    assert_string_equal(buf_err(&b), "empty-only is larger than 0 bytes");
    buf_free(&b);
}

static void test_growth_keeps_content(void **state)
{
    struct buf b;
    char chunk[100];
    size_t prev_cap = 0;
    int grew = 0;

    buf_init(&b, 1 << 20, "big");
    for (int i = 0; i < 1000; i++) {
        memset(chunk, 'a' + i % 26, sizeof(chunk));
        assert_int_equal(buf_append(&b, chunk, sizeof(chunk)), 0);
        assert_true(b.cap > b.len);
        if (b.cap != prev_cap) {
            grew++;
            prev_cap = b.cap;
        }
    }
    assert_int_equal(buf_len(&b), 100000);
    /* doubling: about log2(100000 / 256) + 1 allocations, not one per append */
    assert_true(grew < 15);
    for (int i = 0; i < 1000; i++)
        assert_int_equal(b.data[i * 100 + 99], 'a' + i % 26);
    assert_int_equal(b.data[100000], '\0');
    buf_free(&b);
}

static void test_grow_reserves_without_content(void **state)
{
    struct buf b;

    buf_init(&b, 4096, "x");
    assert_int_equal(buf_grow(&b, 1000), 0);
    assert_true(b.cap >= 1001);
    assert_int_equal(buf_len(&b), 0);
    assert_string_equal(buf_str(&b), "");
    assert_int_equal(buf_grow(&b, 4097), AB_ELIMIT);
    assert_int_equal(buf_grow(&b, 4096), 0);
    buf_free(&b);
}

static void test_printf(void **state)
{
    struct buf b;

    buf_init(&b, 32, "metrics text");
    assert_int_equal(buf_printf(&b, "%s=%d", "a", 1), 0);
    assert_int_equal(buf_printf(&b, " %s=%d", "bb", 22), 0);
    assert_string_equal(buf_str(&b), "a=1 bb=22");
    assert_int_equal(buf_len(&b), 9);
    buf_free(&b);
}

static void test_printf_truncation_refused(void **state)
{
    struct buf b;

    buf_init(&b, 10, "metrics text");
    assert_int_equal(buf_printf(&b, "%s", "12345"), 0);
    /* 6 more would be 11 > 10: refused whole, nothing of it written */
    assert_int_equal(buf_printf(&b, "%s", "abcdef"), AB_ELIMIT);
    assert_string_equal(buf_str(&b), "12345");
    assert_int_equal(buf_len(&b), 5);
    assert_string_equal(buf_err(&b), "metrics text is larger than 10 bytes");
    /* exactly to the limit is fine */
    assert_int_equal(buf_printf(&b, "%05d", 42), 0);
    assert_string_equal(buf_str(&b), "1234500042");
    assert_int_equal(buf_printf(&b, "%s", ""), 0);
    assert_int_equal(buf_printf(&b, "x"), AB_ELIMIT);
    buf_free(&b);
}

static void test_printf_long_output_grows(void **state)
{
    struct buf b;
    char big[1000];

    memset(big, 'z', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    buf_init(&b, 4096, "x");
    assert_int_equal(buf_printf(&b, "<%s>", big), 0);
    assert_int_equal(buf_len(&b), 1001);
    assert_int_equal(buf_str(&b)[0], '<');
    assert_int_equal(buf_str(&b)[1000], '>');
    assert_int_equal(buf_str(&b)[1001], '\0');
    buf_free(&b);
}

static void test_reset_keeps_memory_and_limit(void **state)
{
    struct buf b;
    char *before;

    buf_init(&b, 8, "x");
    assert_int_equal(buf_append(&b, "abcdefgh", 8), 0);
    assert_int_equal(buf_append(&b, "i", 1), AB_ELIMIT);
    before = b.data;
    buf_reset(&b);
    assert_ptr_equal(b.data, before);
    assert_int_equal(buf_len(&b), 0);
    assert_string_equal(buf_str(&b), "");
    assert_string_equal(buf_err(&b), "");
    assert_int_equal(buf_append(&b, "12345678", 8), 0);
    assert_int_equal(buf_append(&b, "9", 1), AB_ELIMIT);
    buf_free(&b);
}

static void test_take_hands_over(void **state)
{
    struct buf b;
    size_t len = 99;
    char *p;

    buf_init(&b, 8, "x");
    assert_null(buf_take(&b, &len)); /* nothing allocated yet */
    assert_int_equal(len, 0);
    assert_int_equal(buf_append(&b, "hello", 5), 0);
    p = buf_take(&b, &len);
    assert_non_null(p);
    assert_int_equal(len, 5);
    assert_string_equal(p, "hello");
    /* the buffer is empty, owns nothing, and keeps its limit */
    assert_null(b.data);
    assert_int_equal(buf_len(&b), 0);
    assert_int_equal(buf_append(&b, "123456789", 9), AB_ELIMIT);
    assert_int_equal(buf_append(&b, "12345678", 8), 0);
    free(p);
    buf_free(&b);
}

static void test_consume_from_front(void **state)
{
    struct buf b;

    buf_init(&b, 8, "stdin queue");
    buf_consume(&b, 3); /* nothing there: fine */
    assert_int_equal(buf_append(&b, "abcdefgh", 8), 0);
    buf_consume(&b, 3);
    assert_int_equal(buf_len(&b), 5);
    assert_string_equal(buf_str(&b), "defgh");
    /* what was consumed is room again, up to the same limit */
    assert_int_equal(buf_append(&b, "123", 3), 0);
    assert_string_equal(buf_str(&b), "defgh123");
    assert_int_equal(buf_append(&b, "4", 1), AB_ELIMIT);
    buf_consume(&b, 100);
    assert_int_equal(buf_len(&b), 0);
    assert_string_equal(buf_str(&b), "");
    buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_is_empty_string),
        cmocka_unit_test(test_append_and_terminate),
        cmocka_unit_test(test_binary_keeps_nul_bytes),
        cmocka_unit_test(test_exactly_at_limit),
        cmocka_unit_test(test_one_past_limit_refused_unchanged),
        cmocka_unit_test(test_huge_add_does_not_overflow),
        cmocka_unit_test(test_zero_limit),
        cmocka_unit_test(test_growth_keeps_content),
        cmocka_unit_test(test_grow_reserves_without_content),
        cmocka_unit_test(test_printf),
        cmocka_unit_test(test_printf_truncation_refused),
        cmocka_unit_test(test_printf_long_output_grows),
        cmocka_unit_test(test_reset_keeps_memory_and_limit),
        cmocka_unit_test(test_take_hands_over),
        cmocka_unit_test(test_consume_from_front),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
