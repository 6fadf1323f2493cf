/* The one seccomp table of the local runtime (see seccomp.h).
 *
 * Allowed: what ordinary programs (shells, compilers, language runtimes,
 * servers, debuggers of their own children) need, after Docker's default
 * profile. Refused: whatever reaches kernel state shared with the host or
 * other sandboxes (mounts, file handles, modules, kexec, bpf, perf, keyrings,
 * namespaces, io_uring, userfaultfd, clocks, swap, reboot). Capabilities are
 * dropped too (sandbox.c); the table does not rely on that. */
#include "agent/runtime/local/seccomp.h"

#include "agentbox/common.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <linux/seccomp.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* clone()'s low byte is the exit signal, so CLONE_NEWTIME (0x80) is only a
 * namespace flag for unshare(); clone3 is refused outright (ENOSYS). */
#define NS_FLAGS_CLONE                                                                             \
    (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET |     \
     CLONE_NEWCGROUP)
#define NS_FLAGS_UNSHARE (NS_FLAGS_CLONE | CLONE_NEWTIME)

struct lsec_entry {
    const char *name;
    enum lsec_rule rule;
};

#define A(n)                                                                                       \
    {                                                                                              \
#n, LSEC_ALLOW                                                                             \
    }
#define D(n)                                                                                       \
    {                                                                                              \
#n, LSEC_DENY                                                                              \
    }

static const struct lsec_entry table[] = {
    /* files and directories */
    A(access),
    A(chdir),
    A(chmod),
    A(chown),
    A(close),
    A(close_range),
    A(copy_file_range),
    A(creat),
    A(dup),
    A(dup2),
    A(dup3),
    A(faccessat),
    A(faccessat2),
    A(fadvise64),
    A(fallocate),
    A(fchdir),
    A(fchmod),
    A(fchmodat),
    A(fchmodat2),
    A(fchown),
    A(fchownat),
    A(fcntl),
    A(fdatasync),
    A(fgetxattr),
    A(flistxattr),
    A(flock),
    A(fremovexattr),
    A(fsetxattr),
    A(fstat),
    A(fstatfs),
    A(fsync),
    A(ftruncate),
    A(futimesat),
    A(getcwd),
    A(getdents),
    A(getdents64),
    A(getxattr),
    A(inotify_add_watch),
    A(inotify_init),
    A(inotify_init1),
    A(inotify_rm_watch),
    A(lchown),
    A(lgetxattr),
    A(link),
    A(linkat),
    A(listxattr),
    A(llistxattr),
    A(lremovexattr),
    A(lseek),
    A(lsetxattr),
    A(lstat),
    A(mkdir),
    A(mkdirat),
    A(mknod),
    A(mknodat),
    A(newfstatat),
    A(open),
    A(openat),
    A(openat2),
    A(pread64),
    A(preadv),
    A(preadv2),
    A(pwrite64),
    A(pwritev),
    A(pwritev2),
    A(read),
    A(readahead),
    A(readlink),
    A(readlinkat),
    A(readv),
    A(removexattr),
    A(rename),
    A(renameat),
    A(renameat2),
    A(rmdir),
    A(sendfile),
    A(setxattr),
    A(splice),
    A(stat),
    A(statfs),
    A(statx),
    A(symlink),
    A(symlinkat),
    A(sync),
    A(sync_file_range),
    A(syncfs),
    A(tee),
    A(truncate),
    A(umask),
    A(unlink),
    A(unlinkat),
    A(utime),
    A(utimensat),
    A(utimes),
    A(vmsplice),
    A(write),
    A(writev),
    A(fanotify_mark),
    A(memfd_create),
    A(chroot),
    /* memory */
    A(brk),
    A(madvise),
    A(membarrier),
    A(mincore),
    A(mlock),
    A(mlock2),
    A(mlockall),
    A(mmap),
    A(mprotect),
    A(mremap),
    A(msync),
    A(munlock),
    A(munlockall),
    A(munmap),
    A(pkey_alloc),
    A(pkey_free),
    A(pkey_mprotect),
    A(remap_file_pages),
    A(map_shadow_stack),
    A(cachestat),
    /* processes, threads, signals */
    A(execve),
    A(execveat),
    A(exit),
    A(exit_group),
    A(fork),
    A(vfork),
    A(wait4),
    A(waitid),
    A(kill),
    A(tkill),
    A(tgkill),
    A(pidfd_open),
    A(pidfd_send_signal),
    A(pidfd_getfd),
    A(process_mrelease),
    A(rt_sigaction),
    A(rt_sigpending),
    A(rt_sigprocmask),
    A(rt_sigqueueinfo),
    A(rt_sigreturn),
    A(rt_sigsuspend),
    A(rt_sigtimedwait),
    A(rt_tgsigqueueinfo),
    A(sigaltstack),
    A(signalfd),
    A(signalfd4),
    A(pause),
    A(restart_syscall),
    A(set_tid_address),
    A(set_robust_list),
    A(get_robust_list),
    A(rseq),
    A(arch_prctl),
    A(modify_ldt),
    A(prctl),
    A(seccomp),
    A(capget),
    A(capset),
    A(futex),
    A(futex_waitv),
    A(futex_wake),
    A(futex_wait),
    A(futex_requeue),
    A(getcpu),
    A(ptrace),
    A(process_vm_readv),
    A(process_vm_writev),
    A(landlock_create_ruleset),
    A(landlock_add_rule),
    A(landlock_restrict_self),
    /* identity and limits (within the sandbox's user namespace) */
    A(getegid),
    A(geteuid),
    A(getgid),
    A(getgroups),
    A(getpgid),
    A(getpgrp),
    A(getpid),
    A(getppid),
    A(getpriority),
    A(getresgid),
    A(getresuid),
    A(getrlimit),
    A(getrusage),
    A(getsid),
    A(gettid),
    A(getuid),
    A(prlimit64),
    A(setfsgid),
    A(setfsuid),
    A(setgid),
    A(setgroups),
    A(setpgid),
    A(setpriority),
    A(setregid),
    A(setresgid),
    A(setresuid),
    A(setreuid),
    A(setrlimit),
    A(setsid),
    A(setuid),
    A(times),
    A(uname),
    A(sysinfo),
    A(ioprio_get),
    A(ioprio_set),
    A(sched_getaffinity),
    A(sched_getattr),
    A(sched_getparam),
    A(sched_get_priority_max),
    A(sched_get_priority_min),
    A(sched_getscheduler),
    A(sched_rr_get_interval),
    A(sched_setaffinity),
    A(sched_setattr),
    A(sched_setparam),
    A(sched_setscheduler),
    A(sched_yield),
    /* time (reading it; setting it is refused below) */
    A(alarm),
    A(clock_getres),
    A(clock_gettime),
    A(clock_nanosleep),
    A(getitimer),
    A(gettimeofday),
    A(nanosleep),
    A(setitimer),
    A(time),
    A(timer_create),
    A(timer_delete),
    A(timer_getoverrun),
    A(timer_gettime),
    A(timer_settime),
    A(timerfd_create),
    A(timerfd_gettime),
    A(timerfd_settime),
    /* waiting and events */
    A(epoll_create),
    A(epoll_create1),
    A(epoll_ctl),
    A(epoll_pwait),
    A(epoll_pwait2),
    A(epoll_wait),
    A(eventfd),
    A(eventfd2),
    A(poll),
    A(ppoll),
    A(pselect6),
    A(select),
    A(pipe),
    A(pipe2),
    A(getrandom),
    /* sockets (raw and packet sockets need NET_RAW, which is dropped) */
    A(socket),
    A(socketpair),
    A(accept),
    A(accept4),
    A(bind),
    A(connect),
    A(getpeername),
    A(getsockname),
    A(getsockopt),
    A(listen),
    A(recvfrom),
    A(recvmmsg),
    A(recvmsg),
    A(sendmmsg),
    A(sendmsg),
    A(sendto),
    A(setsockopt),
    A(shutdown),
    /* System V IPC and POSIX queues (the sandbox has its own ipc namespace) */
    A(msgctl),
    A(msgget),
    A(msgrcv),
    A(msgsnd),
    A(semctl),
    A(semget),
    A(semop),
    A(semtimedop),
    A(shmat),
    A(shmctl),
    A(shmdt),
    A(shmget),
    A(mq_getsetattr),
    A(mq_notify),
    A(mq_open),
    A(mq_timedreceive),
    A(mq_timedsend),
    A(mq_unlink),
    /* old asynchronous I/O (bounded by fs.aio-max-nr; io_uring is refused) */
    A(io_cancel),
    A(io_destroy),
    A(io_getevents),
    A(io_pgetevents),
    A(io_setup),
    A(io_submit),
    /* device control: the sandbox's /dev holds only null, zero, full, random, tty and its ptys */
    A(ioctl),

    {"clone", LSEC_NO_NS},
    {"unshare", LSEC_NO_NS},
    {"personality", LSEC_PERSONA},
    {"clone3", LSEC_ENOSYS},

    /* mounts: remounting a system directory writable, a fresh procfs (core_pattern) */
    D(mount),
    D(umount2),
    D(pivot_root),
    D(fsopen),
    D(fsconfig),
    D(fsmount),
    D(fspick),
    D(move_mount),
    D(open_tree),
    D(mount_setattr),
    /* file handles open any inode of a mounted file system, the host's / included */
    D(open_by_handle_at),
    D(name_to_handle_at),
    /* the kernel itself */
    D(kexec_load),
    D(kexec_file_load),
    D(init_module),
    D(finit_module),
    D(delete_module),
    D(bpf),
    D(perf_event_open),
    D(reboot),
    D(swapon),
    D(swapoff),
    D(syslog),
    D(acct),
    D(quotactl),
    D(quotactl_fd),
    D(iopl),
    D(ioperm),
    D(lookup_dcookie),
    D(_sysctl),
    D(uselib),
    D(ustat),
    D(sysfs),
    D(vhangup),
    D(nfsservctl),
    D(fanotify_init),
    /* keyrings are not namespaced */
    D(add_key),
    D(request_key),
    D(keyctl),
    /* joining or creating namespaces */
    D(setns),
    /* kernel attack surface without a use in a sandbox */
    D(userfaultfd),
    D(io_uring_setup),
    D(io_uring_enter),
    D(io_uring_register),
    D(kcmp),
    D(memfd_secret),
    D(move_pages),
    D(migrate_pages),
    D(mbind),
    D(set_mempolicy),
    D(get_mempolicy),
    D(set_mempolicy_home_node),
    /* the host's clocks */
    D(settimeofday),
    D(clock_settime),
    D(clock_adjtime),
    D(adjtimex),
    /* the uts namespace belongs to the agent: the hostname is the sandbox id */
    D(sethostname),
    D(setdomainname),
};

#undef A
#undef D

enum lsec_rule lsec_rule_of(const char *name)
{
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(table[i].name, name) == 0)
            return table[i].rule;
    return LSEC_NOT_LISTED;
}

static int add_rules(scmp_filter_ctx ctx, char *err, size_t errlen)
{
    /* personality(2) values Docker allows: PER_LINUX, PER_LINUX32, UNAME26
     * variants and the query 0xffffffff (ADDR_NO_RANDOMIZE etc. are refused). */
    static const unsigned long personas[] = {0x0, 0x8, 0x20000, 0x20008, 0xffffffffUL};

    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        int nr = seccomp_syscall_resolve_name(table[i].name);
        int rc = 0;
        if (nr == __NR_SCMP_ERROR) {
            snprintf(err, errlen, "seccomp table: libseccomp does not know system call '%s'",
                     table[i].name);
            return AB_EIO;
        }
        if (nr < 0)
            continue; /* not a system call on x86-64 */
        switch (table[i].rule) {
        case LSEC_ALLOW:
            rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
            break;
        case LSEC_NO_NS:
            rc = seccomp_rule_add(
                ctx, SCMP_ACT_ALLOW, nr, 1,
                SCMP_A0(SCMP_CMP_MASKED_EQ,
                        strcmp(table[i].name, "clone") == 0 ? NS_FLAGS_CLONE : NS_FLAGS_UNSHARE,
                        0));
            break;
        case LSEC_PERSONA:
            for (size_t k = 0; k < sizeof(personas) / sizeof(personas[0]) && rc == 0; k++)
                rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 1,
                                      SCMP_A0(SCMP_CMP_EQ, personas[k], 0));
            break;
        case LSEC_ENOSYS:
            rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), nr, 0);
            break;
        case LSEC_DENY:
        case LSEC_NOT_LISTED:
            break; /* the default action */
        }
        if (rc != 0) {
            snprintf(err, errlen, "seccomp table: cannot add the rule for '%s': %s", table[i].name,
                     strerror(-rc));
            return AB_EIO;
        }
    }
    return 0;
}

/* libseccomp 2.5 exports BPF only to a file descriptor: a memfd here. */
static int export_program(scmp_filter_ctx ctx, struct sock_fprog *prog, char *err, size_t errlen)
{
    int fd = memfd_create("agentbox-seccomp", MFD_CLOEXEC);
    off_t len;
    struct sock_filter *f = NULL;
    int rc = AB_EIO;

    if (fd < 0) {
        snprintf(err, errlen, "seccomp: memfd_create: %s", strerror(errno));
        return AB_EIO;
    }
    if ((rc = seccomp_export_bpf(ctx, fd)) != 0) {
        snprintf(err, errlen, "seccomp: cannot export the filter: %s", strerror(-rc));
        rc = AB_EIO;
        goto out;
    }
    rc = AB_EIO;
    len = lseek(fd, 0, SEEK_END);
    if (len <= 0 || len % (off_t)sizeof(*f) != 0 || len / (off_t)sizeof(*f) > BPF_MAXINSNS) {
        snprintf(err, errlen, "seccomp: the exported filter has an invalid size (%lld bytes)",
                 (long long)len);
        goto out;
    }
    f = malloc((size_t)len);
    if (!f || pread(fd, f, (size_t)len, 0) != (ssize_t)len) {
        snprintf(err, errlen, "seccomp: cannot read the exported filter back");
        free(f);
        goto out;
    }
    prog->filter = f;
    prog->len = (unsigned short)(len / (off_t)sizeof(*f));
    rc = 0;
out:
    close(fd);
    return rc;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct sock_fprog compiled;
static char compile_err[256];

static void compile(void)
{
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));

    if (!ctx) {
        snprintf(compile_err, sizeof(compile_err), "seccomp: seccomp_init failed");
        return;
    }
    /* The native architecture only (x86-64): i386's int 0x80 and x32 numbers
     * reach other tables of the kernel, so they end the process. */
    if (seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS) != 0 ||
        seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0) != 0) {
        snprintf(compile_err, sizeof(compile_err), "seccomp: cannot set the filter attributes");
    } else if (seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2) != 0) {
        /* The system calls as a binary tree, not a list of ~300 compared in
         * turn: the kernel runs the filter once per system call number when
         * it is installed (to cache the always-allowed ones), which made the
         * list 0.3 ms of CPU in every spawn and the tree ~0.05 ms
         * (README.md). The decisions are the same. */
        snprintf(compile_err, sizeof(compile_err),
                 "seccomp: libseccomp cannot build a binary tree filter (2.5 or newer needed)");
    } else if (add_rules(ctx, compile_err, sizeof(compile_err)) == 0) {
        export_program(ctx, &compiled, compile_err, sizeof(compile_err));
    }
    seccomp_release(ctx);
}

int lsec_program(const struct sock_fprog **out, char *err, size_t errlen)
{
    pthread_once(&once, compile);
    if (!compiled.filter) {
        snprintf(err, errlen, "%s", compile_err[0] ? compile_err : "seccomp: no filter");
        return AB_EIO;
    }
    *out = &compiled;
    return 0;
}

int lsec_install(const struct sock_fprog *prog)
{
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, prog, 0, 0) == 0 ? 0 : -1;
}
