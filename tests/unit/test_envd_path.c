/* Path resolution against the user's home, Go-style cleaning, users. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agent/envd/path.h"
#include "agent/envd/syserr.h"

static void check_clean(const char *in, const char *want)
{
    char buf[256];

    snprintf(buf, sizeof(buf), "%s", in);
    envd_path_clean(buf);
    assert_string_equal(buf, want);
}

static void test_clean_like_go(void **state)
{
    check_clean("", ".");
    check_clean("/", "/");
    check_clean("//a//b/", "/a/b");
    check_clean("/a/./b/../c", "/a/c");
    check_clean("/../..", "/");
    check_clean("a/../..", "..");
    check_clean("../a/../../b", "../../b");
    check_clean("./", ".");
    check_clean("abc/def/..", "abc");
}

static void test_resolve(void **state)
{
    char out[PATH_MAX];
    char err[128];

    assert_int_equal(envd_path_resolve("b.txt", "/home/user", NULL, out, sizeof(out), err, 128), 0);
    assert_string_equal(out, "/home/user/b.txt");
    assert_int_equal(envd_path_resolve("~", "/home/user", NULL, out, sizeof(out), err, 128), 0);
    assert_string_equal(out, "/home/user");
    assert_int_equal(envd_path_resolve("~/d/../e", "/home/user", NULL, out, sizeof(out), err, 128),
                     0);
    assert_string_equal(out, "/home/user/e");
    assert_int_equal(envd_path_resolve("../x", "/home/user", NULL, out, sizeof(out), err, 128), 0);
    assert_string_equal(out, "/home/x");
    /* Absolute paths are taken as given. */
    assert_int_equal(envd_path_resolve("/tmp//a", "/home/user", NULL, out, sizeof(out), err, 128),
                     0);
    assert_string_equal(out, "/tmp//a");
    /* Empty: the default, else home. */
    assert_int_equal(envd_path_resolve("", "/home/user", "/work", out, sizeof(out), err, 128), 0);
    assert_string_equal(out, "/work");
    assert_int_equal(envd_path_resolve(NULL, "/home/user", NULL, out, sizeof(out), err, 128), 0);
    assert_string_equal(out, "/home/user");
    assert_int_equal(envd_path_resolve("~root/x", "/home/user", NULL, out, sizeof(out), err, 128),
                     AB_EINVAL);
    assert_non_null(strstr(err, "another user"));
    assert_int_equal(envd_path_resolve("abcdef", "/home/user", NULL, out, 8, err, 128), AB_ELIMIT);
}

static void test_user_lookup(void **state)
{
    struct envd_user u;
    char err[128];

    assert_int_equal(envd_user_lookup("root", &u, err, sizeof(err)), 0);
    assert_true(u.exists);
    assert_int_equal(u.uid, 0);
    assert_string_equal(u.home, "/root");
    assert_true(u.ngroups >= 1);
    /* A name with no account: runs as envd itself, keeps the name. */
    assert_int_equal(envd_user_lookup("nosuchuserxyz", &u, err, sizeof(err)), 0);
    assert_false(u.exists);
    assert_string_equal(u.name, "nosuchuserxyz");
    assert_int_equal(u.uid, getuid());
    assert_false(envd_user_needs_switch(&u));
    assert_int_equal(envd_user_lookup("../etc", &u, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "invalid username"));
}

static void test_mkdir_all(void **state)
{
    char base[] = "/tmp/envd-path-XXXXXX";
    char p[256];
    bool created;
    struct stat st;

    assert_non_null(mkdtemp(base));
    snprintf(p, sizeof(p), "%s/a/b/c", base);
    assert_int_equal(envd_mkdir_all(p, 0755, false, 0, 0, &created), 0);
    assert_true(created);
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(envd_mkdir_all(p, 0755, false, 0, 0, &created), 0);
    assert_false(created);
    snprintf(p, sizeof(p), "%s/a/b/c/f/x.txt", base);
    assert_int_equal(envd_mkdir_parents(p, false, 0, 0), 0);
    snprintf(p, sizeof(p), "%s/a/b/c/f", base);
    assert_int_equal(stat(p, &st), 0);
    /* a file in the way */
    snprintf(p, sizeof(p), "%s/file", base);
    FILE *f = fopen(p, "w");
    fclose(f);
    snprintf(p, sizeof(p), "%s/file/sub", base);
    assert_int_equal(envd_mkdir_all(p, 0755, false, 0, 0, NULL), envd_errno(ENOTDIR));
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_like_go),
        cmocka_unit_test(test_resolve),
        cmocka_unit_test(test_user_lookup),
        cmocka_unit_test(test_mkdir_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
