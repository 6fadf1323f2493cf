/* hex: digits of either case, lowercase encoding, refusals before any write. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "agentbox/hex.h"

static void test_digit(void **state)
{
    assert_int_equal(hex_digit('0'), 0);
    assert_int_equal(hex_digit('9'), 9);
    assert_int_equal(hex_digit('a'), 10);
    assert_int_equal(hex_digit('F'), 15);
    assert_int_equal(hex_digit('g'), -1);
    assert_int_equal(hex_digit('G'), -1);
    assert_int_equal(hex_digit('/'), -1);
    assert_int_equal(hex_digit(':'), -1);
    assert_int_equal(hex_digit('@'), -1);
    assert_int_equal(hex_digit('`'), -1);
    assert_int_equal(hex_digit('\0'), -1);
    assert_int_equal(hex_digit(0xe0), -1);
}

static void test_encode(void **state)
{
    const uint8_t in[] = {0x00, 0x01, 0xab, 0xff, 0x7f};
    char out[2 * sizeof(in) + 1];

    memset(out, 'x', sizeof(out));
    hex_encode(in, sizeof(in), out);
    assert_string_equal(out, "0001abff7f");
    hex_encode(in, 0, out);
    assert_string_equal(out, "");
}

static void test_roundtrip(void **state)
{
    uint8_t in[256], back[256];
    char hex[513];
    size_t n = 0;

    for (int i = 0; i < 256; i++)
        in[i] = (uint8_t)i;
    hex_encode(in, sizeof(in), hex);
    assert_int_equal(strlen(hex), 512);
    assert_int_equal(hex_decode(hex, 512, back, sizeof(back), &n), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(in, back, sizeof(in));
}

static void test_decode_case_and_length(void **state)
{
    uint8_t out[4];
    size_t n = 99;

    assert_int_equal(hex_decode("DEADbeef", 8, out, sizeof(out), &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(out[0], 0xde);
    assert_int_equal(out[3], 0xef);
    /* hexlen bounds the read: the rest of the string is not looked at */
    assert_int_equal(hex_decode("00ffzz", 4, out, sizeof(out), &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(hex_decode("", 0, out, sizeof(out), &n), 0);
    assert_int_equal(n, 0);
}

static void test_decode_refusals(void **state)
{
    const char *bad[] = {"abc", "zz", "0g", "00 1", "0x00", "+1", "-1", "1\n"};
    uint8_t out[8];
    size_t n;

    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        memset(out, 0x55, sizeof(out));
        n = 99;
        assert_int_equal(hex_decode(bad[i], strlen(bad[i]), out, sizeof(out), &n), AB_EINVAL);
        assert_int_equal(n, 0);
        assert_int_equal(out[0], 0x55); /* checked before anything is written */
    }
    memset(out, 0x55, sizeof(out));
    assert_int_equal(hex_decode("000102", 6, out, 2, &n), AB_ELIMIT);
    assert_int_equal(n, 0);
    assert_int_equal(out[0], 0x55);
    assert_int_equal(hex_decode("0001", 4, out, 2, NULL), 0);
    assert_int_equal(out[1], 0x01);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digit),           cmocka_unit_test(test_encode),
        cmocka_unit_test(test_roundtrip),       cmocka_unit_test(test_decode_case_and_length),
        cmocka_unit_test(test_decode_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
