/* Accounts read from passwd and group files without NSS (agent/envd/account.c):
 * lookups by name and uid, group names, supplementary groups, and the lines a
 * real file may hold that must not match or break anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/envd/account.h"

static char passwd_path[64], group_path[64];

static void write_file(char *path, const char *tmpl, const char *text)
{
    strcpy(path, tmpl);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static int setup(void **state)
{
    char *long_line = malloc(ENVD_ACCOUNT_LINE_MAX + 100);
    memset(long_line, 'x', ENVD_ACCOUNT_LINE_MAX + 50);
    memcpy(long_line, "huge:x:7:7::/h", 14);
    long_line[ENVD_ACCOUNT_LINE_MAX + 50] = '\0';
    char text[ENVD_ACCOUNT_LINE_MAX + 1024];
    snprintf(text, sizeof(text),
             "# a comment\n"
             "root:x:0:0:root:/root:/bin/bash\n"
             "\n"
             "+nisuser::::::\n"
             "broken:x:notanumber:1::/b:/bin/sh\n"
             "short:x:5\n"
             "%s\n"
             "after:x:8:8::/home/after:/bin/sh\n"
             "user:x:1000:1000:E2B user:/home/user:/bin/bash\r\n"
             "dup:x:1001:1001::/first:/bin/sh\n"
             "dup:x:1002:1002::/second:/bin/sh\n"
             "big:x:4294967295:1::/big:/bin/sh\n"
             "last:x:1003:1003::/home/last:/bin/sh",
             long_line);
    free(long_line);
    write_file(passwd_path, "/tmp/envd-passwd-XXXXXX", text);
    write_file(group_path, "/tmp/envd-group-XXXXXX",
               "root:x:0:\n"
               "sudo:x:27:user,other\n"
               "docker:x:999:other,user\n"
               "user:x:1000:\n"
               "again:x:27:user\n"
               "nogid:x::user\n"
               "audio:x:29:userx,xuser\n");
    return 0;
}

static int teardown(void **state)
{
    unlink(passwd_path);
    unlink(group_path);
    return 0;
}

static void by_name(void **state)
{
    struct envd_account a;
    assert_int_equal(envd_account_by_name(passwd_path, "user", &a), 0);
    assert_string_equal(a.name, "user");
    assert_int_equal(a.uid, 1000);
    assert_int_equal(a.gid, 1000);
    assert_string_equal(a.home, "/home/user"); /* the CR of a CRLF line is not kept */
    assert_int_equal(envd_account_by_name(passwd_path, "root", &a), 0);
    assert_int_equal(a.uid, 0);
    assert_string_equal(a.home, "/root");
    /* the first of two entries wins, as getpwnam's files module does */
    assert_int_equal(envd_account_by_name(passwd_path, "dup", &a), 0);
    assert_string_equal(a.home, "/first");
    /* an entry after a line past the limit is still found; the last line
     * needs no newline */
    assert_int_equal(envd_account_by_name(passwd_path, "after", &a), 0);
    assert_int_equal(a.uid, 8);
    assert_int_equal(envd_account_by_name(passwd_path, "last", &a), 0);
    assert_string_equal(a.home, "/home/last");
}

static void what_is_not_an_account(void **state)
{
    struct envd_account a;
    assert_int_equal(envd_account_by_name(passwd_path, "nosuch", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name(passwd_path, "broken", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name(passwd_path, "short", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name(passwd_path, "huge", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name(passwd_path, "+nisuser", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name(passwd_path, "big", &a), AB_ENOENT); /* (uid_t)-1 */
    assert_int_equal(envd_account_by_name(passwd_path, "# a comment", &a), AB_ENOENT);
    assert_int_equal(envd_account_by_name("/nonexistent/passwd", "root", &a), AB_ENOENT);
}

static void by_uid(void **state)
{
    struct envd_account a;
    assert_int_equal(envd_account_by_uid(passwd_path, 1000, &a), 0);
    assert_string_equal(a.name, "user");
    assert_int_equal(envd_account_by_uid(passwd_path, 0, &a), 0);
    assert_string_equal(a.name, "root");
    assert_int_equal(envd_account_by_uid(passwd_path, 4242, &a), AB_ENOENT);
}

static void group_names(void **state)
{
    char name[16];
    assert_int_equal(envd_group_name(group_path, 27, name, sizeof(name)), 0);
    assert_string_equal(name, "sudo"); /* the first with the gid */
    assert_int_equal(envd_group_name(group_path, 1000, name, sizeof(name)), 0);
    assert_string_equal(name, "user");
    assert_int_equal(envd_group_name(group_path, 12345, name, sizeof(name)), AB_ENOENT);
    char tiny[3];
    assert_int_equal(envd_group_name(group_path, 999, tiny, sizeof(tiny)), AB_ENOENT);
}

static void supplementary_groups(void **state)
{
    gid_t g[8];
    int n = envd_groups_of(group_path, "user", 1000, g, 8);
    /* primary first, each gid once, no partial name matches (userx, xuser) */
    assert_int_equal(n, 3);
    assert_int_equal(g[0], 1000);
    assert_int_equal(g[1], 27);
    assert_int_equal(g[2], 999);
    assert_int_equal(envd_groups_of(group_path, "user", 1000, g, 2), 2);
    assert_int_equal(envd_groups_of(group_path, "nobody", 65534, g, 8), 1);
    assert_int_equal(g[0], 65534);
    assert_int_equal(envd_groups_of("/nonexistent/group", "user", 1000, g, 8), 1);
    assert_int_equal(envd_groups_of(group_path, "user", 1000, g, 0), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(by_name),
        cmocka_unit_test(what_is_not_an_account),
        cmocka_unit_test(by_uid),
        cmocka_unit_test(group_names),
        cmocka_unit_test(supplementary_groups),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
