/* Page tokens: round trips, and malformed input decodes to 0 (the first page). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agentbox/pagetoken.h"

#include <string.h>

static void test_round_trip(void **state)
{
    const int64_t offs[] = {1, 9, 10, 99, 1000, 123456789, 9223372036854775807LL};
    for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
        char t[PAGETOKEN_MAX];
        pagetoken_encode(offs[i], t);
        assert_null(strpbrk(t, "+/=")); /* base64url, no padding */
        assert_true(pagetoken_decode(t) == offs[i]);
    }
}

static void test_malformed_is_first_page(void **state)
{
    assert_int_equal(pagetoken_decode(NULL), 0);
    assert_int_equal(pagetoken_decode(""), 0);
    assert_int_equal(pagetoken_decode("!!!"), 0);
    assert_int_equal(pagetoken_decode("YWJj"), 0); /* "abc": not a number */
    assert_int_equal(pagetoken_decode("LTU"), 0);  /* "-5": not positive */
    char big[64];
    memset(big, 'A', 60);
    big[60] = '\0';
    assert_int_equal(pagetoken_decode(big), 0); /* over the length limit */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_malformed_is_first_page),
    };
    return cmocka_run_group_tests_name("pagetoken", tests, NULL, NULL);
}
