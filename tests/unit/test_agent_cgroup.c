/* Per-sandbox cgroups (agent/runtime/local/cgroup.c) on this host's
 * hierarchy (needs root and the memory/pids/cpu controllers, which the local
 * runtime refuses to start without): limits written, every process of the
 * group found and killed (more than one read buffer of pids), removal. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/runtime/local/cgroup.h"

static char id[64];

static void read_file(const char *dir, const char *file, char *out, size_t len)
{
    char path[LCG_PATH_MAX + 64];
    int fd;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail_msg("cannot open %s: %s", path, strerror(errno));
    n = read(fd, out, len - 1);
    close(fd);
    assert_true(n >= 0);
    out[n] = '\0';
}

static void test_limits_are_written(void **state)
{
    struct lcg cg;
    struct lcg_limits l = {.mem_bytes = 64 << 20, .cpu_milli = 250, .pids_max = 77};
    char err[512], v[64];

    (void)state;
    if (geteuid() != 0)
        skip();
    assert_int_equal(lcg_create(id, &l, &cg, err, sizeof(err)), 0);
    if (cg.v2) {
        read_file(cg.dirs[0], "memory.max", v, sizeof(v));
        assert_string_equal(v, "67108864\n");
        read_file(cg.dirs[0], "pids.max", v, sizeof(v));
        assert_string_equal(v, "77\n");
    } else {
        /* cpuacct (the sandbox's CPU time for usage.c) whenever the host mounts it */
        bool acct = access("/sys/fs/cgroup/cpuacct/cgroup.procs", F_OK) == 0;
        assert_int_equal(cg.n, acct ? 4 : 3);
        if (acct) {
            read_file(cg.dirs[LCG_V1_CPUACCT], "cpuacct.usage", v, sizeof(v));
            assert_string_equal(v, "0\n");
        }
        read_file(cg.dirs[0], "memory.limit_in_bytes", v, sizeof(v));
        assert_string_equal(v, "67108864\n");
        read_file(cg.dirs[1], "pids.max", v, sizeof(v));
        assert_string_equal(v, "77\n");
        read_file(cg.dirs[2], "cpu.cfs_quota_us", v, sizeof(v));
        assert_string_equal(v, "25000\n");
    }
    assert_true(lcg_is_empty(&cg));
    assert_int_equal(lcg_remove(&cg), 0);
    for (int i = 0; i < cg.n; i++)
        assert_int_equal(access(cg.dirs[i], F_OK), -1);
    l.pids_max = 0;
    assert_int_equal(lcg_create(id, &l, &cg, err, sizeof(err)), AB_EINVAL);
    assert_non_null(strstr(err, "pids limit"));
}

/* 600 processes: their pids fill cgroup.procs past one 4096-byte read. */
static void kill_ends_every_process(int (*kill_fn)(const struct lcg *))
{
    enum { N = 600 };
    struct lcg cg;
    struct lcg_limits l = {.pids_max = N + 10};
    char err[512];
    pid_t leader;
    int ready[2];

    if (geteuid() != 0)
        skip();
    assert_int_equal(lcg_create(id, &l, &cg, err, sizeof(err)), 0);
    assert_int_equal(pipe(ready), 0);
    leader = fork();
    assert_true(leader >= 0);
    if (leader == 0) {
        /* wait to be moved in, then fork N-1 sleepers (all in the group) */
        char c;
        close(ready[1]);
        if (read(ready[0], &c, 1) != 1)
            _exit(1);
        for (int i = 1; i < N; i++)
            if (fork() == 0)
                for (;;)
                    pause();
        for (;;)
            pause();
    }
    close(ready[0]);
    assert_int_equal(lcg_enter(&cg, leader, err, sizeof(err)), 0);
    assert_int_equal(write(ready[1], "g", 1), 1);
    close(ready[1]);
    {
        char v[32];
        int64_t deadline = ab_now_ms() + 10000;
        for (;;) { /* until all N are in */
            read_file(cg.n == 1 ? cg.dirs[0] : cg.dirs[1], "pids.current", v, sizeof(v));
            if (atoi(v) >= N)
                break;
            if (ab_now_ms() > deadline)
                fail_msg("only %s processes started", v);
            poll(NULL, 0, 5);
        }
    }
    assert_false(lcg_is_empty(&cg));
    assert_int_equal(lcg_remove(&cg), AB_EBUSY);
    assert_true(kill_fn(&cg) >= N);
    assert_int_equal(waitpid(leader, NULL, 0), leader);
    {
        int64_t deadline = ab_now_ms() + 10000;
        while (!lcg_is_empty(&cg)) { /* the orphans go to init, which reaps them */
            if (ab_now_ms() > deadline)
                fail_msg("processes survived the kill");
            poll(NULL, 0, 5);
        }
    }
    assert_int_equal(lcg_remove(&cg), 0);
}

static void test_kill_all_ends_every_process(void **state)
{
    (void)state;
    kill_ends_every_process(lcg_kill_all);
}

/* the first hierarchy's list alone reaches all of them (what a dying
 * sandbox's repeated kill uses) */
static void test_kill_members_ends_every_process(void **state)
{
    (void)state;
    kill_ends_every_process(lcg_kill_members);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limits_are_written),
        cmocka_unit_test(test_kill_all_ends_every_process),
        cmocka_unit_test(test_kill_members_ends_every_process),
    };
    snprintf(id, sizeof(id), "test-cg-%d", (int)getpid());
    return cmocka_run_group_tests(tests, NULL, NULL);
}
