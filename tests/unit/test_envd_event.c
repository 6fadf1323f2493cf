/* Process events and EntryInfo JSON, byte for byte as the protocol doc shows. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/envd/event.h"
#include "agent/envd/syserr.h"

static void assert_json(json_t *v, const char *want)
{
    char *s;

    assert_non_null(v);
    s = json_dumps(v, JSON_COMPACT);
    assert_string_equal(s, want);
    free(s);
    json_decref(v);
}

static void test_start_data_keepalive(void **state)
{
    assert_json(envd_ev_start(1000), "{\"event\":{\"start\":{\"pid\":1000}}}");
    assert_json(envd_ev_data("stdout", "hello\n", 6),
                "{\"event\":{\"data\":{\"stdout\":\"aGVsbG8K\"}}}");
    assert_json(envd_ev_data("stderr", "warn\n", 5),
                "{\"event\":{\"data\":{\"stderr\":\"d2Fybgo=\"}}}");
    assert_json(envd_ev_data("pty", "user@e2b:~$ ", 12),
                "{\"event\":{\"data\":{\"pty\":\"dXNlckBlMmI6fiQg\"}}}");
    assert_json(envd_ev_keepalive(), "{\"event\":{\"keepalive\":{}}}");
}

static void test_end_from_wait_status(void **state)
{
    /* Real statuses from real children, worded like Go's ProcessState. */
    int st;
    pid_t pid = fork();

    if (pid == 0)
        _exit(0);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_json(envd_ev_end(st), "{\"event\":{\"end\":{\"exited\":true,\"status\":\"exit status "
                                 "0\"}}}");
    pid = fork();
    if (pid == 0)
        _exit(3);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_json(envd_ev_end(st), "{\"event\":{\"end\":{\"exitCode\":3,\"exited\":true,\"status\":"
                                 "\"exit status 3\",\"error\":\"exit status 3\"}}}");
    pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    kill(pid, SIGKILL);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_json(envd_ev_end(st), "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: "
                                 "killed\",\"error\":\"signal: killed\"}}}");
    pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    kill(pid, SIGTERM);
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_json(envd_ev_end(st), "{\"event\":{\"end\":{\"exitCode\":-1,\"status\":\"signal: "
                                 "terminated\",\"error\":\"signal: terminated\"}}}");
}

static void test_mode_string_like_go(void **state)
{
    char s[24];

    envd_mode_string(S_IFREG | 0644, s, sizeof(s));
    assert_string_equal(s, "-rw-r--r--");
    envd_mode_string(S_IFDIR | 0755, s, sizeof(s));
    assert_string_equal(s, "drwxr-xr-x");
    envd_mode_string(S_IFLNK | 0777, s, sizeof(s));
    assert_string_equal(s, "Lrwxrwxrwx");
    envd_mode_string(S_IFDIR | S_ISVTX | 0777, s, sizeof(s));
    assert_string_equal(s, "dtrwxrwxrwx");
    envd_mode_string(S_IFCHR | 0666, s, sizeof(s));
    assert_string_equal(s, "Dcrw-rw-rw-");
    envd_mode_string(S_IFREG | S_ISUID | 0755, s, sizeof(s));
    assert_string_equal(s, "urwxr-xr-x");
}

static void test_timestamp_fraction_digits(void **state)
{
    char s[48];
    struct timespec ts = {1795997636, 866000000};

    envd_timestamp(&ts, s, sizeof(s));
    assert_string_equal(s, "2026-11-30T00:13:56.866Z");
    ts.tv_nsec = 0;
    envd_timestamp(&ts, s, sizeof(s));
    assert_string_equal(s, "2026-11-30T00:13:56Z");
    ts.tv_nsec = 1000;
    envd_timestamp(&ts, s, sizeof(s));
    assert_string_equal(s, "2026-11-30T00:13:56.000001Z");
    ts.tv_nsec = 5;
    envd_timestamp(&ts, s, sizeof(s));
    assert_string_equal(s, "2026-11-30T00:13:56.000000005Z");
}

static void test_entry_from_stat(void **state)
{
    struct stat st;
    json_t *v;

    memset(&st, 0, sizeof(st));
    st.st_mode = S_IFREG | 0644;
    st.st_size = 5;
    st.st_uid = 0;
    st.st_gid = 0;
    st.st_mtim.tv_sec = 1795997636;
    st.st_mtim.tv_nsec = 866000000;
    v = envd_entry_from_stat("/home/user/a.txt", &st, NULL, NULL, NULL);
    assert_json(v, "{\"name\":\"a.txt\",\"type\":\"FILE_TYPE_FILE\",\"path\":\"/home/user/a.txt\","
                   "\"size\":\"5\",\"mode\":420,\"permissions\":\"-rw-r--r--\",\"owner\":\"root\","
                   "\"group\":\"root\",\"modifiedTime\":\"2026-11-30T00:13:56.866Z\"}");

    /* A dangling symlink: typed symlink, its own mode, target kept. */
    st.st_mode = S_IFLNK | 0777;
    st.st_size = 4;
    v = envd_entry_from_stat("/tmp/l", &st, "/gone", NULL, NULL);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "FILE_TYPE_SYMLINK");
    assert_int_equal(json_integer_value(json_object_get(v, "mode")), 0777);
    assert_string_equal(json_string_value(json_object_get(v, "symlinkTarget")), "/gone");
    assert_string_equal(json_string_value(json_object_get(v, "permissions")), "Lrwxrwxrwx");
    json_decref(v);
    /* A socket: no type, so the SDK drops it. */
    st.st_mode = S_IFSOCK | 0755;
    v = envd_entry_from_stat("/tmp/s", &st, NULL, NULL, NULL);
    assert_null(json_object_get(v, "type"));
    json_decref(v);
}

static void test_entry_info_reads_disk(void **state)
{
    char dir[] = "/tmp/envd-event-XXXXXX";
    char path[128];
    char link[128];
    json_t *v;
    FILE *f;

    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/f.bin", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fwrite("abcdefgh", 1, 8, f);
    fclose(f);
    chmod(path, 0600);
    assert_int_equal(envd_entry_info(path, &v), 0);
    assert_string_equal(json_string_value(json_object_get(v, "name")), "f.bin");
    assert_string_equal(json_string_value(json_object_get(v, "size")), "8");
    assert_int_equal(json_integer_value(json_object_get(v, "mode")), 0600);
    json_decref(v);

    assert_int_equal(envd_entry_info(dir, &v), 0);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "FILE_TYPE_DIRECTORY");
    assert_int_equal(json_integer_value(json_object_get(v, "mode")), 0700);
    json_decref(v);

    snprintf(link, sizeof(link), "%s/l", dir);
    assert_int_equal(symlink(path, link), 0);
    assert_int_equal(envd_entry_info(link, &v), 0);
    assert_string_equal(json_string_value(json_object_get(v, "type")), "FILE_TYPE_SYMLINK");
    assert_int_equal(json_integer_value(json_object_get(v, "mode")), 0600);
    assert_string_equal(json_string_value(json_object_get(v, "symlinkTarget")), path);
    json_decref(v);

    snprintf(link, sizeof(link), "%s/missing", dir);
    assert_int_equal(envd_entry_info(link, &v), envd_errno(ENOENT));
    assert_null(v);
    unlink(path);
    snprintf(link, sizeof(link), "%s/l", dir);
    unlink(link);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_start_data_keepalive),
        cmocka_unit_test(test_end_from_wait_status),
        cmocka_unit_test(test_mode_string_like_go),
        cmocka_unit_test(test_timestamp_fraction_digits),
        cmocka_unit_test(test_entry_from_stat),
        cmocka_unit_test(test_entry_info_reads_disk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
