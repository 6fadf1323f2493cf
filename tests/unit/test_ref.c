/* The [cluster::]name[//image] grammar: every row of reference §1.7. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agentbox/common.h"
#include "agentbox/ref.h"

struct row {
    const char *in;
    const char *cluster;
    const char *name;
    const char *image;
};

static const struct row table[] = {
    {"my-pool", "", "my-pool", ""},
    {"my-pool//ubuntu:22.04", "", "my-pool", "ubuntu:22.04"},
    {"cluster-b::my-pool", "cluster-b", "my-pool", ""},
    {"cluster-b::my-pool//docker.io/library/ubuntu:22.04", "cluster-b", "my-pool",
     "docker.io/library/ubuntu:22.04"},
    {"  cluster-b :: my-pool // image ", "cluster-b", "my-pool", "image"},
    {"", "", "", ""},
    {"::poolName", "", "poolName", ""},
    {"pool//", "", "pool", ""},
    {"cks::", "cks", "", ""},
};

static void check(const char *in, const char *cluster, const char *name, const char *image)
{
    struct ref r;

    memset(&r, 'x', sizeof(r));
    assert_int_equal(ref_parse(in, &r), 0);
    assert_string_equal(r.cluster, cluster);
    assert_string_equal(r.name, name);
    assert_string_equal(r.image, image);
}

static void test_reference_table(void **state)
{
    for (size_t i = 0; i < AB_ARRAY_LEN(table); i++)
        check(table[i].in, table[i].cluster, table[i].name, table[i].image);
}

static void test_first_cluster_separator_only(void **state)
{
    check("a::b::c", "a", "b::c", "");
    check("a::b::c//img", "a", "b::c", "img");
}

static void test_image_split_first(void **state)
{
    /* The image may contain "//" and "::"; it is split off before the cluster. */
    check("p//registry.example.com//x::y", "", "p", "registry.example.com//x::y");
    check("c::p//https://host/img", "c", "p", "https://host/img");
    /* "::" after the first "//" belongs to the image, not the cluster. */
    check("p//c::img", "", "p", "c::img");
    check("//img", "", "", "img");
    check("c:://img", "c", "", "img");
}

static void test_whitespace_kinds(void **state)
{
    check("\t c \n::\r p \v// i \f", "c", "p", "i");
    check("   ", "", "", "");
    /* Inner whitespace is kept. */
    check("my pool", "", "my pool", "");
}

static void test_single_colons_and_slashes(void **state)
{
    check("a:b", "", "a:b", "");
    check("a/b", "", "a/b", "");
    check("a:::b", "a", ":b", "");
    check("a///b", "", "a", "/b");
}

static void test_overlong(void **state)
{
    char buf[REF_MAX + 10];
    struct ref r;

    memset(buf, 'a', sizeof(buf));
    buf[REF_MAX - 1] = '\0'; /* REF_MAX - 1 bytes: the longest accepted */
    assert_int_equal(ref_parse(buf, &r), 0);
    assert_int_equal(strlen(r.name), REF_MAX - 1);

    buf[REF_MAX - 1] = 'a';
    buf[REF_MAX] = '\0'; /* REF_MAX bytes */
    assert_int_equal(ref_parse(buf, &r), AB_ELIMIT);
    assert_string_equal(r.name, "");
    assert_string_equal(r.cluster, "");
    assert_string_equal(r.image, "");

    buf[REF_MAX] = 'a';
    buf[REF_MAX + 9] = '\0';
    assert_int_equal(ref_parse(buf, &r), AB_ELIMIT);
}

static void test_format(void **state)
{
    struct ref r;
    char buf[64];

    for (size_t i = 0; i < AB_ARRAY_LEN(table); i++) {
        struct ref again;
        assert_int_equal(ref_parse(table[i].in, &r), 0);
        int n = ref_format(&r, buf, sizeof(buf));
        assert_int_equal(n, (int)strlen(buf));
        assert_int_equal(ref_parse(buf, &again), 0);
        assert_string_equal(again.cluster, r.cluster);
        assert_string_equal(again.name, r.name);
        assert_string_equal(again.image, r.image);
    }

    ref_parse("  cluster-b :: my-pool // image ", &r);
    assert_int_equal(ref_format(&r, buf, sizeof(buf)), 25);
    assert_string_equal(buf, "cluster-b::my-pool//image");
    ref_parse("::poolName", &r);
    ref_format(&r, buf, sizeof(buf));
    assert_string_equal(buf, "poolName");
    ref_parse("cks::", &r);
    ref_format(&r, buf, sizeof(buf));
    assert_string_equal(buf, "cks::");
    ref_parse("p//i", &r);
    ref_format(&r, buf, sizeof(buf));
    assert_string_equal(buf, "p//i");
}

static void test_format_truncates_like_snprintf(void **state)
{
    struct ref r;
    char buf[8];

    ref_parse("cluster-b::my-pool", &r);
    assert_int_equal(ref_format(&r, buf, sizeof(buf)), 18);
    assert_string_equal(buf, "cluster");
    assert_int_equal(ref_format(&r, NULL, 0), 18);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_table),
        cmocka_unit_test(test_first_cluster_separator_only),
        cmocka_unit_test(test_image_split_first),
        cmocka_unit_test(test_whitespace_kinds),
        cmocka_unit_test(test_single_colons_and_slashes),
        cmocka_unit_test(test_overlong),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_format_truncates_like_snprintf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
