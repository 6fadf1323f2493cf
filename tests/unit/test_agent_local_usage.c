/* The local runtime's cgroup usage source (usage.c): a cgroup v2 directory
 * laid out in a temporary directory, read into struct rt_usage. */
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
#include "agent/runtime/local/lrt.h"

static void put(const char *dir, const char *name, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void drop(const char *dir, const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    unlink(path);
}

static void cgroup_fields(void **state)
{
    char dir[] = "/tmp/lrt-cg-XXXXXX";
    struct rt_usage u;
    (void)state;

    assert_non_null(mkdtemp(dir));
    put(dir, "cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n");
    put(dir, "memory.current", "1048576\n");
    put(dir, "memory.stat",
        "anon 524288\nfile 262144\nanon_thp 4096\nfile_mapped 8192\n"
        "inactive_anon 0\ninactive_file 131072\n");
    put(dir, "cpu.max", "150000 100000\n");
    put(dir, "memory.max", "2147483648\n");
    memset(&u, 0, sizeof(u));
    assert_int_equal(lrt_usage_cgroup(dir, &u), 0);
    assert_true(u.cpu_seconds == 2.5);
    assert_true(u.mem_working_set == 1048576 - 131072); /* inactive file pages are reclaimable */
    assert_true(u.mem_rss == 524288);                   /* "anon", not "anon_thp" */
    assert_true(u.mem_cache == 262144);                 /* "file", not "file_mapped" */
    assert_int_equal(u.cpu_count, 2);                   /* 1.5 CPUs of quota: 2 */
    assert_int_equal(u.mem_limit, 2147483648LL);

    /* no limits set: what the caller had stays */
    put(dir, "cpu.max", "max 100000\n");
    put(dir, "memory.max", "max\n");
    memset(&u, 0, sizeof(u));
    u.cpu_count = 4;
    u.mem_limit = 1 << 20;
    assert_int_equal(lrt_usage_cgroup(dir, &u), 0);
    assert_int_equal(u.cpu_count, 4);
    assert_int_equal(u.mem_limit, 1 << 20);

    /* without cpu.stat the cgroup is no source: the caller falls back to /proc */
    drop(dir, "cpu.stat");
    assert_int_equal(lrt_usage_cgroup(dir, &u), AB_EIO);
    put(dir, "cpu.stat", "user_usec 1\n");
    assert_int_equal(lrt_usage_cgroup(dir, &u), AB_EIO);

    const char *files[] = {"cpu.stat", "memory.current", "memory.stat", "cpu.max", "memory.max"};
    for (size_t i = 0; i < AB_ARRAY_LEN(files); i++)
        drop(dir, files[i]);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cgroup_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
