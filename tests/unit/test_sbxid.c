/* Sandbox ids <cluster>-<20 [a-z0-9]> and cluster-id validation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "agentbox/sbxid.h"

static bool in_charset(const char *s)
{
    for (; *s != '\0'; s++) {
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
            return false;
    }
    return true;
}

static void test_generate_split_round_trip(void **state)
{
    const char *clusters[] = {"a", "cluster-b", "49983", "c-1-2-3", "abcdefghijklmnopqrstuvwx"};
    char id[SBXID_MAX + 1], cluster[SBXID_CLUSTER_MAX + 1], suffix[SBXID_SUFFIX_LEN + 1];

    for (size_t i = 0; i < AB_ARRAY_LEN(clusters); i++) {
        assert_int_equal(sbxid_generate(clusters[i], id, sizeof(id)), 0);
        assert_int_equal(strlen(id), strlen(clusters[i]) + 1 + SBXID_SUFFIX_LEN);
        assert_int_equal(sbxid_split(id, cluster, suffix), 0);
        assert_string_equal(cluster, clusters[i]);
        assert_int_equal(strlen(suffix), SBXID_SUFFIX_LEN);
        assert_true(in_charset(suffix));
        assert_string_equal(id + strlen(clusters[i]) + 1, suffix);
        memset(cluster, 0, sizeof(cluster));
        assert_int_equal(sbxid_cluster_of(id, cluster), 0);
        assert_string_equal(cluster, clusters[i]);
    }
}

/* Many suffixes: every character is in [a-z0-9], both letters and digits
 * show up, and no two ids repeat. */
static void test_suffix_charset_and_spread(void **state)
{
    static char ids[200][SBXID_MAX + 1];
    bool seen[128] = {false};
    size_t distinct = 0;

    for (size_t i = 0; i < AB_ARRAY_LEN(ids); i++) {
        assert_int_equal(sbxid_generate("c", ids[i], sizeof(ids[i])), 0);
        assert_int_equal(strlen(ids[i]), 2 + SBXID_SUFFIX_LEN);
        assert_true(in_charset(ids[i] + 2));
        for (const char *p = ids[i] + 2; *p != '\0'; p++)
            seen[(unsigned char)*p] = true;
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(ids[i], ids[k]);
    }
    /* 4000 draws from 36 symbols: missing any one has odds below 1e-40. */
    for (int c = 0; c < 128; c++)
        distinct += seen[c];
    assert_int_equal(distinct, 36);
}

static void test_generate_refuses(void **state)
{
    char id[SBXID_MAX + 1];

    assert_int_equal(sbxid_generate("", id, sizeof(id)), AB_EINVAL);
    assert_int_equal(sbxid_generate("Cluster", id, sizeof(id)), AB_EINVAL);
    assert_int_equal(sbxid_generate("-c", id, sizeof(id)), AB_EINVAL);
    assert_int_equal(sbxid_generate("abcdefghijklmnopqrstuvwxy", id, sizeof(id)), AB_EINVAL);
    /* Output buffer: exactly enough, and one short. */
    assert_int_equal(sbxid_generate("ab", id, 2 + 1 + SBXID_SUFFIX_LEN + 1), 0);
    assert_int_equal(sbxid_generate("ab", id, 2 + 1 + SBXID_SUFFIX_LEN), AB_ELIMIT);
}

static void test_cluster_validity(void **state)
{
    char err[128];

    assert_true(sbxid_cluster_is_valid("a", err, sizeof(err)));
    assert_true(sbxid_cluster_is_valid("0", NULL, 0));
    assert_true(sbxid_cluster_is_valid("cluster-b", NULL, 0));
    assert_true(sbxid_cluster_is_valid("a--b", NULL, 0));
    assert_true(sbxid_cluster_is_valid("abcdefghijklmnopqrstuvwx", NULL, 0)); /* 24 */

    err[0] = '\0';
    assert_false(sbxid_cluster_is_valid("abcdefghijklmnopqrstuvwxy", err, sizeof(err))); /* 25 */
    assert_non_null(strstr(err, "24"));
    assert_false(sbxid_cluster_is_valid("", err, sizeof(err)));
    assert_non_null(strstr(err, "empty"));
    assert_false(sbxid_cluster_is_valid(NULL, err, sizeof(err)));
    assert_false(sbxid_cluster_is_valid("Cluster", err, sizeof(err)));
    assert_non_null(strstr(err, "lowercase"));
    assert_false(sbxid_cluster_is_valid("c_b", err, sizeof(err)));
    assert_false(sbxid_cluster_is_valid("c.b", err, sizeof(err)));
    assert_false(sbxid_cluster_is_valid("-cb", err, sizeof(err)));
    assert_non_null(strstr(err, "start and end"));
    assert_false(sbxid_cluster_is_valid("cb-", err, sizeof(err)));
    assert_false(sbxid_cluster_is_valid("-", err, sizeof(err)));
    /* A tiny err buffer is still terminated. */
    assert_false(sbxid_cluster_is_valid("", err, 4));
    assert_int_equal(strlen(err), 3);
}

static void test_split_hyphens_inside_cluster(void **state)
{
    char cluster[SBXID_CLUSTER_MAX + 1], suffix[SBXID_SUFFIX_LEN + 1];

    assert_int_equal(sbxid_split("cluster-b-abcdefghij0123456789", cluster, suffix), 0);
    assert_string_equal(cluster, "cluster-b");
    assert_string_equal(suffix, "abcdefghij0123456789");
    assert_int_equal(sbxid_split("a-b-c-d-0123456789abcdefghij", cluster, suffix), 0);
    assert_string_equal(cluster, "a-b-c-d");
    /* Shortest valid: one-character cluster. */
    assert_int_equal(sbxid_split("x-abcdefghij0123456789", cluster, suffix), 0);
    assert_string_equal(cluster, "x");
    /* Longest valid: 24-character cluster, 45 in all. */
    assert_int_equal(sbxid_split("abcdefghijklmnopqrstuvwx-abcdefghij0123456789", cluster, suffix),
                     0);
    assert_string_equal(cluster, "abcdefghijklmnopqrstuvwx");
    /* NULL outputs just validate. */
    assert_int_equal(sbxid_split("x-abcdefghij0123456789", NULL, NULL), 0);
}

static void test_split_refuses(void **state)
{
    char cluster[SBXID_CLUSTER_MAX + 1], suffix[SBXID_SUFFIX_LEN + 1];
    const char *bad[] = {
        "",                                                /* empty */
        "abcdefghij0123456789",                            /* suffix only, no cluster */
        "-abcdefghij0123456789",                           /* empty cluster */
        "x-abcdefghij012345678",                           /* suffix 19 */
        "xabcdefghij0123456789",                           /* missing hyphen (21 chars) */
        "clusterbabcdefghij0123456789",                    /* missing hyphen */
        "cluster-b_abcdefghij0123456789",                  /* wrong separator */
        "cluster-b-ABCDEFGHIJ0123456789",                  /* uppercase suffix */
        "Cluster-b-abcdefghij0123456789",                  /* uppercase cluster */
        "cluster-b-abcdefghij012345678-",                  /* hyphen in suffix */
        "-cluster-abcdefghij0123456789",                   /* leading hyphen */
        "cluster--abcdefghij0123456789",                   /* trailing hyphen in cluster */
        "abcdefghijklmnopqrstuvwxy-abcdefghij0123456789",  /* 25-char cluster */
        "abcdefghijklmnopqrstuvwxyz-abcdefghij0123456789", /* 26-char cluster */
        "c.b-abcdefghij0123456789",                        /* dot in cluster */
        "cluster-b-abcdefghij01234567 9",                  /* space in suffix */
        "cluster-b.abcdefghij0123456789",                  /* E2B-style dot */
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++) {
        strcpy(cluster, "untouched");
        assert_int_equal(sbxid_split(bad[i], cluster, suffix), AB_EINVAL);
        assert_string_equal(cluster, "untouched");
        assert_int_equal(sbxid_cluster_of(bad[i], cluster), AB_EINVAL);
    }
    assert_int_equal(sbxid_split(NULL, cluster, suffix), AB_EINVAL);
}

static void test_split_long_input_is_bounded(void **state)
{
    char id[4096];
    char cluster[SBXID_CLUSTER_MAX + 1], suffix[SBXID_SUFFIX_LEN + 1];

    memset(id, 'a', sizeof(id) - 1);
    id[sizeof(id) - 1] = '\0';
    id[sizeof(id) - 22] = '-';
    assert_int_equal(sbxid_split(id, cluster, suffix), AB_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_split_round_trip),
        cmocka_unit_test(test_suffix_charset_and_spread),
        cmocka_unit_test(test_generate_refuses),
        cmocka_unit_test(test_cluster_validity),
        cmocka_unit_test(test_split_hyphens_inside_cluster),
        cmocka_unit_test(test_split_refuses),
        cmocka_unit_test(test_split_long_input_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
