/* The local runtime's usage sources (usage.c): a cgroup v2 directory and
 * cgroup v1 memory and cpuacct groups laid out in temporary directories, and the /proc pass with
 * this test process standing in for a sandbox's init (its pid namespace is the host's, so the sums
 * are over every process: only lower bounds can be asserted). */
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
#include "agent/runtime/local/sandbox.h"

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

static void usage_read_sources(void **state)
{
    char dir[] = "/tmp/lrt-us-XXXXXX", cg[] = "/tmp/lrt-cg-XXXXXX";
    struct rt_probe p[3];
    struct rt_usage u[3];
    char block[65536];
    pid_t self = getpid();
    uint64_t start = lsbx_proc_start_time(self);
    (void)state;

    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(cg));
    assert_true(start > 0);
    memset(block, 'x', sizeof(block));
    char path[512];
    snprintf(path, sizeof(path), "%s/home.bin", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(block, 1, sizeof(block), f), sizeof(block));
    fclose(f);
    put(cg, "cpu.stat", "usage_usec 7000000\n");
    put(cg, "memory.current", "4096\n");

    memset(p, 0, sizeof(p));
    /* 0: /proc; 1: the same process, a cgroup named; 2: a reused pid (start time differs) */
    assert_int_equal(lrt_usage_probe_of(dir, self, start, "", 1500, 1 << 30, &p[0]), 0);
    assert_int_equal(lrt_usage_probe_of(dir, self, start, cg, 0, 0, &p[1]), 0);
    assert_int_equal(lrt_usage_probe_of(dir, self, start + 1, "", 0, 0, &p[2]), 0);
    for (int i = 0; i < 3; i++)
        p[i].ops = NULL; /* the read must not need the runtime */
    lrt_usage_read(p, 3, u);

    assert_int_equal(u[0].err, 0);
    assert_true(u[0].mem_rss > 0);
    assert_true(u[0].mem_working_set == u[0].mem_rss); /* no cgroup: not separable */
    assert_true(u[0].disk_used >= (double)sizeof(block));
    assert_int_equal(u[0].cpu_count, 2); /* 1500m of the Env member's sizing */
    assert_int_equal(u[0].mem_limit, 1 << 30);

    assert_int_equal(u[1].err, 0);
    assert_true(u[1].cpu_seconds == 7.0); /* the cgroup, not /proc */
    assert_true(u[1].mem_working_set == 4096);
    assert_true(u[1].disk_used >= (double)sizeof(block));

    assert_int_equal(u[2].err, AB_ENOENT);
    assert_true(u[2].cpu_seconds == 0 && u[2].disk_used == 0);

    /* a path that does not fit is refused, not cut */
    char longdir[LSBX_DIR_MAX + 8];
    memset(longdir, 'a', sizeof(longdir) - 1);
    longdir[sizeof(longdir) - 1] = '\0';
    assert_int_equal(lrt_usage_probe_of(longdir, self, start, "", 0, 0, &p[0]), AB_ELIMIT);

    unlink(path);
    rmdir(dir);
    drop(cg, "cpu.stat");
    drop(cg, "memory.current");
    rmdir(cg);
}

/* What a v1 host's groups hold (this machine: /sys/fs/cgroup/{memory,cpuacct}). */
static void cgroup_v1_fields(void **state)
{
    char mem[] = "/tmp/lrt-v1m-XXXXXX", acct[] = "/tmp/lrt-v1a-XXXXXX";
    struct rt_usage u;
    (void)state;

    assert_non_null(mkdtemp(mem));
    assert_non_null(mkdtemp(acct));
    put(acct, "cpuacct.usage", "3250000000\n");
    put(mem, "memory.usage_in_bytes", "8388608\n");
    put(mem, "memory.stat",
        "cache 1\nrss 2\nrss_huge 4096\ninactive_file 3\n"
        "total_cache 2097152\ntotal_rss 4194304\ntotal_rss_huge 8192\n"
        "total_inactive_file 1048576\ntotal_active_file 1048576\n");
    put(mem, "memory.limit_in_bytes", "268435456\n");
    memset(&u, 0, sizeof(u));
    assert_int_equal(lrt_usage_cgroup_v1(mem, acct, &u), 0);
    assert_true(u.cpu_seconds == 3.25);                  /* nanoseconds */
    assert_true(u.mem_working_set == 8388608 - 1048576); /* usage - total_inactive_file */
    assert_true(u.mem_rss == 4194304);                   /* total_rss, not rss nor rss_huge */
    assert_true(u.mem_cache == 2097152);
    assert_int_equal(u.mem_limit, 268435456);

    /* a group without children's totals; v1's "no limit" keeps the caller's */
    put(mem, "memory.stat", "cache 100\nrss 200\nrss_huge 0\ninactive_file 50\n");
    put(mem, "memory.limit_in_bytes", "9223372036854771712\n");
    memset(&u, 0, sizeof(u));
    u.mem_limit = 1 << 20;
    assert_int_equal(lrt_usage_cgroup_v1(mem, acct, &u), 0);
    assert_true(u.mem_rss == 200 && u.mem_cache == 100);
    assert_true(u.mem_working_set == 8388608 - 50);
    assert_int_equal(u.mem_limit, 1 << 20);

    /* without cpuacct.usage or memory.usage_in_bytes: no source (/proc then) */
    drop(acct, "cpuacct.usage");
    assert_int_equal(lrt_usage_cgroup_v1(mem, acct, &u), AB_EIO);
    put(acct, "cpuacct.usage", "1\n");
    drop(mem, "memory.usage_in_bytes");
    assert_int_equal(lrt_usage_cgroup_v1(mem, acct, &u), AB_EIO);

    drop(acct, "cpuacct.usage");
    drop(mem, "memory.stat");
    drop(mem, "memory.limit_in_bytes");
    rmdir(mem);
    rmdir(acct);
}

/* A probe with v1 groups reads them, not /proc; one without reads /proc. */
static void usage_read_v1(void **state)
{
    char dir[] = "/tmp/lrt-us1-XXXXXX", mem[] = "/tmp/lrt-v1m-XXXXXX",
         acct[] = "/tmp/lrt-v1a-XXXXXX";
    struct rt_probe p[2];
    struct rt_usage u[2];
    pid_t self = getpid();
    uint64_t start = lsbx_proc_start_time(self);
    (void)state;

    assert_non_null(mkdtemp(dir));
    assert_non_null(mkdtemp(mem));
    assert_non_null(mkdtemp(acct));
    put(acct, "cpuacct.usage", "9000000000000\n"); /* 9000 s: more than this test has used */
    put(mem, "memory.usage_in_bytes", "12345\n");
    memset(p, 0, sizeof(p));
    assert_int_equal(lrt_usage_probe_of(dir, self, start, "", 0, 0, &p[0]), 0);
    assert_int_equal(lrt_usage_probe_v1(&p[0], mem, acct), 0);
    assert_int_equal(lrt_usage_probe_of(dir, self, start, "", 0, 0, &p[1]), 0);
    lrt_usage_read(p, 2, u);
    assert_int_equal(u[0].err, 0);
    assert_true(u[0].cpu_seconds == 9000.0);
    assert_true(u[0].mem_working_set == 12345);
    assert_int_equal(u[1].err, 0);
    assert_true(u[1].cpu_seconds < 9000.0 && u[1].mem_rss > 0); /* /proc */

    /* unreadable v1 groups fall back to /proc rather than reading zeros */
    drop(mem, "memory.usage_in_bytes");
    lrt_usage_read(p, 1, u);
    assert_int_equal(u[0].err, 0);
    assert_true(u[0].cpu_seconds < 9000.0 && u[0].mem_rss > 0);

    char longdir[400];
    memset(longdir, 'a', sizeof(longdir) - 1);
    longdir[sizeof(longdir) - 1] = '\0';
    assert_int_equal(lrt_usage_probe_v1(&p[0], longdir, acct), AB_ELIMIT);

    drop(acct, "cpuacct.usage");
    rmdir(dir);
    rmdir(mem);
    rmdir(acct);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cgroup_fields),
        cmocka_unit_test(usage_read_sources),
        cmocka_unit_test(cgroup_v1_fields),
        cmocka_unit_test(usage_read_v1),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
