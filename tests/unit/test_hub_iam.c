/* hub/iam.c: the t-<team>-<user> namespace table of reference §5.4, the
 * 63-character cut, DNS-label checks and team/user name checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "hub/iam.h"

struct ns_case {
    const char *team, *user, *want;
};

static void test_namespace_table(void **state)
{
    static const struct ns_case cases[] = {
        {"ml", "alice", "t-ml-alice"},
        {"ML", "Alice", "t-ml-alice"},                     /* lower-cased */
        {"data_eng", "bob.smith", "t-data-eng-bob-smith"}, /* outside [a-z0-9-] → '-' */
        {"a b", "c@d", "t-a-b-c-d"},
        {"-team-", "--u--", "t-team-u"},   /* '-' trimmed per part */
        {"_x_", "y", "t-x-y"},             /* replaced, then trimmed */
        {"team", "", "t-team-unknown"},    /* empty user → unknown */
        {"team", "___", "t-team-unknown"}, /* empty after trimming */
        {"!!!", "bob", "t-unknown-bob"},
        {"", "bob", "default"}, /* empty team → default */
        {"  ", "bob", "default"},
        {NULL, "bob", "default"},
        {"Ops", "ÉLodie", "t-ops-lodie"}, /* non-ASCII bytes become '-', trimmed */
        {"x1", "u-2", "t-x1-u-2"},
        {"a--b", "c", "t-a--b-c"}, /* runs are kept, not collapsed */
    };
    char out[IAM_NAMESPACE_MAX + 1];

    (void)state;
    for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
        iam_namespace_for(cases[i].team, cases[i].user, out);
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("case %zu (%s, %s): got '%s', want '%s'", i,
                     cases[i].team ? cases[i].team : "(null)", cases[i].user, out, cases[i].want);
        assert_true(iam_namespace_is_valid(out));
    }
}

static void test_namespace_long_names_are_cut_with_a_hash(void **state)
{
    char team[101], user1[101], user2[101];
    char a[IAM_NAMESPACE_MAX + 1], b[IAM_NAMESPACE_MAX + 1];

    (void)state;
    memset(team, 'a', 100);
    team[100] = '\0';
    memcpy(user1, team, sizeof(team));
    memcpy(user2, team, sizeof(team));
    user2[99] = 'b';
    iam_namespace_for(team, user1, a);
    iam_namespace_for(team, user2, b);
    assert_int_equal(strlen(a), 63);
    assert_true(iam_namespace_is_valid(a));
    assert_true(iam_namespace_is_valid(b));
    assert_memory_equal(a, b, 57); /* same 56-char prefix and '-' */
    assert_string_not_equal(a, b); /* told apart by the hash */
    assert_int_equal(strncmp(a, "t-aaaa", 6), 0);
    /* deterministic */
    iam_namespace_for(team, user1, b);
    assert_string_equal(a, b);
}

static void test_namespace_cut_does_not_end_in_dash(void **state)
{
    char out[IAM_NAMESPACE_MAX + 1];

    (void)state;
    /* "t-" + 53 x + "-" puts a '-' at position 56 */
    iam_namespace_for("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
                      "yyyyyyyyyyyyyyyyyyyy", out);
    assert_true(iam_namespace_is_valid(out));
    assert_null(strstr(out, "--"));
}

static void test_namespace_is_valid(void **state)
{
    (void)state;
    assert_true(iam_namespace_is_valid("default"));
    assert_true(iam_namespace_is_valid("a"));
    assert_true(iam_namespace_is_valid("team-1"));
    assert_false(iam_namespace_is_valid(""));
    assert_false(iam_namespace_is_valid(NULL));
    assert_false(iam_namespace_is_valid("-a"));
    assert_false(iam_namespace_is_valid("a-"));
    assert_false(iam_namespace_is_valid("A"));
    assert_false(iam_namespace_is_valid("a_b"));
    assert_false(iam_namespace_is_valid(
        "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")); /* 64 */
}

static void test_check_name(void **state)
{
    char err[256];
    char big[300];

    (void)state;
    assert_int_equal(iam_check_name("team", "ml", err, sizeof(err)), 0);
    assert_int_equal(iam_check_name("team", "", err, sizeof(err)), AB_EINVAL);
    assert_string_equal(err, "team is required");
    assert_int_equal(iam_check_name("user", "a/b", err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "'/'"));
    assert_non_null(strstr(err, "user"));
    assert_int_equal(iam_check_name("user", "a b", err, sizeof(err)), AB_EINVAL);
    memset(big, 'x', 254);
    big[254] = '\0';
    assert_int_equal(iam_check_name("team", big, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "at most 253"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namespace_table),
        cmocka_unit_test(test_namespace_long_names_are_cut_with_a_hash),
        cmocka_unit_test(test_namespace_cut_does_not_end_in_dash),
        cmocka_unit_test(test_namespace_is_valid),
        cmocka_unit_test(test_check_name),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
