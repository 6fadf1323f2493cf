/* The sandbox seccomp table (agent/runtime/local/seccomp.c): what the table
 * says for each class of system call, and what the compiled filter does to
 * a process that installed it (each probe in its own child, which then
 * reports the errno it saw). No root needed: no_new_privs is enough. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <seccomp.h>

#include "agentbox/common.h"
#include "agent/runtime/local/seccomp.h"

static const char *const denied[] = {"mount",
                                     "umount2",
                                     "pivot_root",
                                     "open_by_handle_at",
                                     "name_to_handle_at",
                                     "kexec_load",
                                     "kexec_file_load",
                                     "init_module",
                                     "finit_module",
                                     "delete_module",
                                     "bpf",
                                     "perf_event_open",
                                     "add_key",
                                     "request_key",
                                     "keyctl",
                                     "setns",
                                     "userfaultfd",
                                     "io_uring_setup",
                                     "io_uring_enter",
                                     "io_uring_register",
                                     "fsopen",
                                     "fsmount",
                                     "move_mount",
                                     "open_tree",
                                     "mount_setattr",
                                     "reboot",
                                     "swapon",
                                     "syslog",
                                     "clock_settime",
                                     "settimeofday",
                                     "sethostname",
                                     "iopl",
                                     "ioperm",
                                     NULL};

static void test_table_refuses_what_reaches_the_host(void **state)
{
    (void)state;
    for (int i = 0; denied[i]; i++) {
        enum lsec_rule r = lsec_rule_of(denied[i]);
        if (r != LSEC_DENY)
            fail_msg("%s: rule %d, want LSEC_DENY", denied[i], (int)r);
    }
    assert_int_equal(lsec_rule_of("clone"), LSEC_NO_NS);
    assert_int_equal(lsec_rule_of("unshare"), LSEC_NO_NS);
    assert_int_equal(lsec_rule_of("clone3"), LSEC_ENOSYS);
    assert_int_equal(lsec_rule_of("personality"), LSEC_PERSONA);
    assert_int_equal(lsec_rule_of("no_such_call"), LSEC_NOT_LISTED);
    assert_int_equal(lsec_rule_of("lookup_dcookie"), LSEC_DENY);
}

static void test_table_allows_ordinary_programs(void **state)
{
    static const char *const allowed[] = {
        "read",    "write",  "openat",    "execve", "fork",  "wait4", "mmap", "socket",
        "connect", "ptrace", "setresuid", "chroot", "ioctl", "futex", "rseq", NULL};
    (void)state;
    for (int i = 0; allowed[i]; i++)
        if (lsec_rule_of(allowed[i]) != LSEC_ALLOW)
            fail_msg("%s must be allowed", allowed[i]);
}

/* Runs probe() in a child under the filter. Returns its wait status. */
static int under_filter(long (*probe)(void))
{
    const struct sock_fprog *prog;
    char err[256];
    pid_t pid;
    int status = 0;

    assert_int_equal(lsec_program(&prog, err, sizeof(err)), 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long rc;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || lsec_install(prog) != 0)
            _exit(200);
        errno = 0;
        rc = probe();
        _exit(rc >= 0 ? 0 : (errno > 0 && errno < 200 ? errno : 201));
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void expect_errno(long (*probe)(void), int want, const char *what)
{
    int st = under_filter(probe);

    if (!WIFEXITED(st))
        fail_msg("%s: child died (status %d)", what, st);
    if (WEXITSTATUS(st) != want)
        fail_msg("%s: errno %d, want %d", what, WEXITSTATUS(st), want);
}

static long p_getpid(void)
{
    return syscall(SYS_getpid);
}
static long p_mount(void)
{
    return syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0);
}
static long p_open_by_handle(void)
{
    char fh[64] = {0};
    return syscall(SYS_open_by_handle_at, AT_FDCWD, fh, O_RDONLY);
}
static long p_unshare_user(void)
{
    return syscall(SYS_unshare, CLONE_NEWUSER);
}
static long p_unshare_time(void)
{
    return syscall(SYS_unshare, 0x80 /* CLONE_NEWTIME */);
}
static long p_unshare_files(void)
{
    return syscall(SYS_unshare, CLONE_FILES);
}
static long p_clone_newns(void)
{
    long r = syscall(SYS_clone, CLONE_NEWNS | SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(0);
    return r;
}
static long p_clone_plain(void)
{
    long r = syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
    if (r == 0)
        _exit(0);
    if (r > 0)
        waitpid((pid_t)r, NULL, 0);
    return r;
}
static long p_clone3(void)
{
    char args[88] = {0};
    return syscall(435 /* clone3 */, args, sizeof(args));
}
static long p_keyctl(void)
{
    return syscall(SYS_keyctl, 0, -3, 0);
}
static long p_bpf(void)
{
    return syscall(SYS_bpf, 0, 0, 0);
}
static long p_setns(void)
{
    return syscall(SYS_setns, 0, 0);
}
static long p_io_uring(void)
{
    char params[120] = {0};
    return syscall(SYS_io_uring_setup, 8, params);
}
static long p_unlisted(void)
{
    return syscall(SYS_lookup_dcookie, 0, 0, 0);
}
static long p_persona_query(void)
{
    return syscall(SYS_personality, 0xffffffffUL);
}
static long p_persona_norandom(void)
{
    return syscall(SYS_personality, ADDR_NO_RANDOMIZE);
}
static long p_x32(void)
{
    return syscall(0x40000000L | SYS_getpid);
}
static long p_i386(void)
{
    long rc;
    __asm__ volatile("int $0x80" : "=a"(rc) : "a"(20L) : "memory");
    return rc;
}

static void test_filter_refuses_and_allows(void **state)
{
    (void)state;
    expect_errno(p_getpid, 0, "getpid");
    expect_errno(p_clone_plain, 0, "clone without namespace flags");
    expect_errno(p_unshare_files, 0, "unshare(CLONE_FILES)");
    expect_errno(p_persona_query, 0, "personality query");
    expect_errno(p_mount, EPERM, "mount");
    expect_errno(p_open_by_handle, EPERM, "open_by_handle_at");
    expect_errno(p_unshare_user, EPERM, "unshare(CLONE_NEWUSER)");
    expect_errno(p_unshare_time, EPERM, "unshare(CLONE_NEWTIME)");
    expect_errno(p_clone_newns, EPERM, "clone(CLONE_NEWNS)");
    expect_errno(p_clone3, ENOSYS, "clone3");
    expect_errno(p_keyctl, EPERM, "keyctl");
    expect_errno(p_bpf, EPERM, "bpf");
    expect_errno(p_setns, EPERM, "setns");
    expect_errno(p_io_uring, EPERM, "io_uring_setup");
    expect_errno(p_unlisted, EPERM, "a call not in the table");
    expect_errno(p_persona_norandom, EPERM, "personality(ADDR_NO_RANDOMIZE)");
}

static void test_other_architectures_kill(void **state)
{
    int st;

    (void)state;
    st = under_filter(p_x32);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
    st = under_filter(p_i386);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGSYS);
}

/* The compiled program run by a classic-BPF interpreter of the test's own
 * over one seccomp_data: the kernel's answer for those arguments, without
 * making the call. Fails on an instruction it does not know rather than
 * guessing. */
static uint32_t run_filter(const struct sock_fprog *prog, int nr, uint32_t arch, uint64_t arg0)
{
    struct seccomp_data d = {.nr = nr, .arch = arch};
    uint32_t a = 0, x = 0, mem[BPF_MEMWORDS] = {0};

    d.args[0] = arg0;
    for (unsigned pc = 0, steps = 0; pc < prog->len && steps < 100000; pc++, steps++) {
        const struct sock_filter *f = &prog->filter[pc];
        uint32_t k = f->k, src = BPF_SRC(f->code) == BPF_X ? x : k;
        switch (f->code) {
        case BPF_LD | BPF_W | BPF_ABS:
            if (k > sizeof(d) - 4 || k % 4)
                fail_msg("load at %u out of seccomp_data", k);
            memcpy(&a, (const char *)&d + k, 4);
            continue;
        case BPF_LD | BPF_MEM:
            a = mem[k % BPF_MEMWORDS];
            continue;
        case BPF_LDX | BPF_MEM:
            x = mem[k % BPF_MEMWORDS];
            continue;
        case BPF_ST:
            mem[k % BPF_MEMWORDS] = a;
            continue;
        case BPF_STX:
            mem[k % BPF_MEMWORDS] = x;
            continue;
        case BPF_LD | BPF_IMM:
            a = k;
            continue;
        case BPF_MISC | BPF_TAX:
            x = a;
            continue;
        case BPF_MISC | BPF_TXA:
            a = x;
            continue;
        case BPF_ALU | BPF_AND | BPF_K:
        case BPF_ALU | BPF_AND | BPF_X:
            a &= src;
            continue;
        case BPF_ALU | BPF_OR | BPF_K:
            a |= k;
            continue;
        case BPF_JMP | BPF_JA:
            pc += k;
            continue;
        case BPF_JMP | BPF_JEQ | BPF_K:
        case BPF_JMP | BPF_JEQ | BPF_X:
            pc += a == src ? f->jt : f->jf;
            continue;
        case BPF_JMP | BPF_JGT | BPF_K:
        case BPF_JMP | BPF_JGT | BPF_X:
            pc += a > src ? f->jt : f->jf;
            continue;
        case BPF_JMP | BPF_JGE | BPF_K:
        case BPF_JMP | BPF_JGE | BPF_X:
            pc += a >= src ? f->jt : f->jf;
            continue;
        case BPF_JMP | BPF_JSET | BPF_K:
            pc += (a & k) ? f->jt : f->jf;
            continue;
        case BPF_RET | BPF_K:
            return k;
        case BPF_RET | BPF_A:
            return a;
        default:
            fail_msg("instruction %u: opcode 0x%x not known to the test's interpreter", pc,
                     f->code);
        }
    }
    fail_msg("the filter ran off its end or looped");
    return 0;
}

/* Every system call number of x86-64 against the table, through the
 * compiled program (a binary tree: the table's order is not the
 * program's): allowed ones allowed, namespace flags and odd personas
 * refused, clone3 ENOSYS, everything else EPERM; another architecture
 * killed whatever the number. */
static void test_program_matches_the_table_for_every_call(void **state)
{
    const struct sock_fprog *prog;
    const uint32_t eperm = SECCOMP_RET_ERRNO | EPERM, enosys = SECCOMP_RET_ERRNO | ENOSYS;
    char err[256];
    int named = 0;

    (void)state;
    assert_int_equal(lsec_program(&prog, err, sizeof(err)), 0);
    for (int nr = 0; nr < 1024; nr++) {
        char *name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, nr);
        enum lsec_rule r = name ? lsec_rule_of(name) : LSEC_NOT_LISTED;
        uint32_t plain = run_filter(prog, nr, AUDIT_ARCH_X86_64, 0);
        uint32_t ns = run_filter(prog, nr, AUDIT_ARCH_X86_64, CLONE_NEWUSER | CLONE_NEWNET);
        uint32_t odd = run_filter(prog, nr, AUDIT_ARCH_X86_64, ADDR_NO_RANDOMIZE);
        uint32_t want_plain = r == LSEC_ALLOW || r == LSEC_NO_NS || r == LSEC_PERSONA
                                  ? SECCOMP_RET_ALLOW
                                  : (r == LSEC_ENOSYS ? enosys : eperm);

        named += name != NULL;
        if (plain != want_plain)
            fail_msg("%s (%d): 0x%x with arguments 0, the table says 0x%x", name ? name : "?", nr,
                     plain, want_plain);
        if (r == LSEC_NO_NS && ns != eperm)
            fail_msg("%s: namespace flags answered 0x%x, want EPERM", name, ns);
        if (r == LSEC_PERSONA && odd != eperm)
            fail_msg("%s(ADDR_NO_RANDOMIZE) answered 0x%x, want EPERM", name, odd);
        if (r == LSEC_ALLOW && (ns != SECCOMP_RET_ALLOW || odd != SECCOMP_RET_ALLOW))
            fail_msg("%s: allowed calls must not depend on their arguments", name);
        if (run_filter(prog, nr, AUDIT_ARCH_I386, 0) != SECCOMP_RET_KILL_PROCESS)
            fail_msg("i386 call %d must kill the process", nr);
        free(name);
    }
    assert_true(named > 300); /* the loop saw the real table */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_refuses_what_reaches_the_host),
        cmocka_unit_test(test_table_allows_ordinary_programs),
        cmocka_unit_test(test_filter_refuses_and_allows),
        cmocka_unit_test(test_other_architectures_kill),
        cmocka_unit_test(test_program_matches_the_table_for_every_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
