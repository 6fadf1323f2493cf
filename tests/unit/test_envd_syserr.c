/* envd's errno range (agent/envd/syserr.c): every errno maps below every
 * ab_err and decodes back, and the functions that fail with a system error
 * return it in that range (a bare -ENOENT would read as AB_ENOMEM). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/envd/event.h"
#include "agent/envd/path.h"
#include "agent/envd/syserr.h"
#include "agentbox/common.h"

static void test_round_trip_and_range(void **state)
{
    for (int e = 1; e <= ENVD_ERRNO_MAX; e++) {
        int rc = envd_errno(e);
        assert_true(rc < AB_EDENIED); /* below the lowest ab_err */
        assert_true(rc <= -(ENVD_ERRNO_BASE + 1));
        assert_true(envd_is_errno(rc));
        assert_int_equal(envd_errno_of(rc), e);
    }
    /* the collisions a bare -errno had */
    assert_int_not_equal(envd_errno(EPERM), AB_EINVAL);
    assert_int_not_equal(envd_errno(ENOENT), AB_ENOMEM);
    assert_int_not_equal(envd_errno(ESRCH), AB_ELIMIT);
}

static void test_out_of_range(void **state)
{
    /* no errno: still a failure, and a system one */
    assert_int_equal(envd_errno(0), envd_errno(EIO));
    assert_int_equal(envd_errno(-ENOENT), envd_errno(EIO));
    assert_int_equal(envd_errno(ENVD_ERRNO_MAX + 1), envd_errno(EIO));
    /* the project's codes and success are not in the range */
    for (int rc = AB_OK; rc >= AB_EDENIED; rc--) {
        assert_false(envd_is_errno(rc));
        assert_int_equal(envd_errno_of(rc), EIO);
    }
    assert_false(envd_is_errno(-ENVD_ERRNO_BASE));
    assert_false(envd_is_errno(-(ENVD_ERRNO_BASE + ENVD_ERRNO_MAX + 1)));
    assert_false(envd_is_errno(1));
}

static void test_callers_return_the_range(void **state)
{
    char dir[] = "/tmp/envd_syserr_XXXXXX", file[PATH_MAX], sub[PATH_MAX], missing[PATH_MAX];
    static char longp[PATH_MAX + 16];
    json_t *entry = (json_t *)1;
    int fd;

    assert_non_null(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/file", dir);
    snprintf(sub, sizeof(sub), "%s/file/sub", dir);
    snprintf(missing, sizeof(missing), "%s/missing", dir);
    assert_true((fd = open(file, O_CREAT | O_WRONLY, 0644)) >= 0);
    close(fd);

    assert_int_equal(envd_entry_info(missing, &entry), envd_errno(ENOENT));
    assert_null(entry);
    assert_int_equal(envd_mkdir_all(sub, 0755, false, 0, 0, NULL), envd_errno(ENOTDIR));
    assert_int_equal(envd_mkdir_all(file, 0755, false, 0, 0, NULL), envd_errno(ENOTDIR));
    memset(longp, 'a', sizeof(longp) - 1);
    longp[0] = '/';
    assert_int_equal(envd_mkdir_all(longp, 0755, false, 0, 0, NULL), envd_errno(ENAMETOOLONG));
    assert_int_equal(envd_mkdir_parents(longp, false, 0, 0), envd_errno(ENAMETOOLONG));
    assert_int_equal(envd_mkdir_parents(sub, false, 0, 0), envd_errno(ENOTDIR));
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    assert_int_equal(envd_mkdir_parents(sub, false, 0, 0), 0); /* makes dir/a */
    snprintf(sub, sizeof(sub), "%s/a", dir);
    assert_int_equal(rmdir(sub), 0);

    unlink(file);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_range),
        cmocka_unit_test(test_out_of_range),
        cmocka_unit_test(test_callers_return_the_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
