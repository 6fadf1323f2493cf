/* The init of a local sandbox up to its program (sandbox_init.h). The
 * functions marked CHILD_FN run in the init while it may share the agent's
 * memory (a clone(CLONE_VM) of it, sandbox.c): only system calls and memory
 * the parent prepared — no malloc, no stdio, no locks — and no sanitizer
 * instrumentation. */
#include "agent/runtime/local/sandbox_init.h"

#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/seccomp.h>

extern char **environ;

/* Code that runs in the init before exec, on the agent's memory: never
 * instrumented (the sanitizer's per-thread state is the calling thread's). */
#if defined(__SANITIZE_ADDRESS__)
#define CHILD_FN __attribute__((no_sanitize_address))
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHILD_FN __attribute__((no_sanitize_address))
#endif
#endif
#ifndef CHILD_FN
#define CHILD_FN
#endif

const char *lsbx_step_name(int step)
{
    switch (step) {
    case STEP_MOUNT_PRIVATE:
        return "making mounts private";
    case STEP_BIND_HOME:
        return "bind-mounting home on " LSBX_HOME;
    case STEP_BIND_TMP:
        return "bind-mounting tmp on /tmp";
    case STEP_BIND_RUN:
        return "bind-mounting run on " LSBX_INNER_RUN;
    case STEP_PROC:
        return "mounting /proc";
    case STEP_ROOT:
        return "building the sandbox root";
    case STEP_PIVOT:
        return "entering the sandbox root";
    case STEP_LOOPBACK:
        return "bringing loopback up";
    case STEP_HOSTNAME:
        return "setting the hostname";
    case STEP_FORK:
        return "starting the program";
    case STEP_EXEC:
        return "executing the program";
    case STEP_USERNS:
        return "entering the sandbox's user namespace";
    case STEP_IDS:
        return "becoming the sandbox's root";
    case STEP_LOCK:
        return "locking the mounts (new mount and cgroup namespaces)";
    case STEP_CAPS:
        return "dropping capabilities";
    case STEP_NNP:
        return "setting no_new_privs";
    case STEP_SECCOMP:
        return "installing the seccomp filter";
    case STEP_ETC:
        return "binding the sandbox's /etc/passwd and /etc/group";
    case STEP_NAMESPACES:
        return "making the sandbox's mount, uts, ipc and network namespaces";
    }
    return "setup";
}

CHILD_FN static void child_fail(const struct lsbx_plan *p, int step)
{
    int msg[2] = {step, errno};
    ssize_t r = write(p->errfd, msg, sizeof(msg));

    (void)r;
    _exit(127);
}

CHILD_FN static int loopback_up(void)
{
    struct ifreq ifr;
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int rc = -1;

    if (fd < 0)
        return -1;
    memset(&ifr, 0, sizeof(ifr));
    memcpy(ifr.ifr_name, "lo", 3);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    close(fd);
    return rc;
}

/* Leaves the init with stdin /dev/null, stdout and stderr on the sandbox's
 * log, the two pipes on fds 3 and 4, and nothing else of the agent's (its
 * listening sockets must not outlive it in a sandbox). */
CHILD_FN static void child_fds(struct lsbx_plan *p)
{
    int e = fcntl(p->errfd, F_DUPFD_CLOEXEC, 100);
    int sy = fcntl(p->syncfd, F_DUPFD_CLOEXEC, 100);
    int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
    int lg = open(p->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

    if (e < 0 || sy < 0 || nul < 0)
        _exit(126);
    if (lg < 0)
        lg = nul;
    dup2(nul, 0);
    dup2(lg, 1);
    dup2(lg, 2);
    if (dup3(e, 3, O_CLOEXEC) != 3 || dup3(sy, 4, O_CLOEXEC) != 4)
        _exit(126);
    p->errfd = 3;
    p->syncfd = 4;
    syscall(SYS_close_range, 5U, ~0U, 0U);
}

/* The sandbox's / is a tmpfs holding read-only binds of the host's system
 * directories, its own /home/user, /tmp and /run/agentbox, a fresh /proc,
 * a minimal /dev and, read-only at LSBX_PROGRAM_DIR, the directory holding the
 * program (envd: its own binary and nothing secret). So a sandbox sees the
 * OS but not the agent's state directory, other sandboxes, the hub's
 * secrets or the operator's files. */

static const char *const system_dirs[] = {"/usr",   "/bin",    "/sbin", "/lib", "/lib32",
                                          "/lib64", "/libx32", "/etc",  "/opt", NULL};
static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty", NULL};

CHILD_FN static const char *under(struct lsbx_plan *p, const char *path)
{
    snprintf(p->rpath, sizeof(p->rpath), "%s%s", p->root, path);
    return p->rpath;
}

CHILD_FN static int bind_ro(struct lsbx_plan *p, const char *src, const char *dst, bool is_dir)
{
    (void)p;
    if (is_dir) {
        if (mkdir(dst, 0755) != 0 && errno != EEXIST)
            return -1;
    } else if (access(dst, F_OK) != 0) { /* a file in a read-only bind already exists */
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return -1;
        close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | MS_REC, NULL) != 0)
        return -1;
    return mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL);
}

CHILD_FN static void build_root(struct lsbx_plan *p, const char fdpath[3][32])
{
    static const char *const inner[3] = {LSBX_HOME, "/tmp", LSBX_INNER_RUN};
    struct stat st;
    char link[256];

    if (mount("tmpfs", p->root, "tmpfs", MS_NOSUID | MS_NODEV, p->root_opts) != 0)
        child_fail(p, STEP_ROOT);
    for (int i = 0; system_dirs[i]; i++) {
        if (lstat(system_dirs[i], &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) { /* merged /usr: /bin -> usr/bin */
            ssize_t n = readlink(system_dirs[i], link, sizeof(link) - 1);
            if (n <= 0)
                child_fail(p, STEP_ROOT);
            link[n] = '\0';
            if (symlink(link, under(p, system_dirs[i])) != 0)
                child_fail(p, STEP_ROOT);
        } else if (S_ISDIR(st.st_mode) &&
                   bind_ro(p, system_dirs[i], under(p, system_dirs[i]), true) != 0) {
            child_fail(p, STEP_ROOT);
        }
    }
    /* the host's credentials stay out of view even though /etc is shared */
    static const char *const hidden_files[] = {"/etc/shadow", "/etc/gshadow", "/etc/shadow-",
                                               "/etc/gshadow-", NULL};
    /* and so does an agent configuration kept under /etc (join token, keys) */
    static const char *const hidden_dirs[] = {"/etc/ssh", "/etc/ssl/private", "/etc/agentbox",
                                              NULL};
    for (int i = 0; hidden_files[i]; i++)
        if (lstat(hidden_files[i], &st) == 0 && S_ISREG(st.st_mode) &&
            mount("/dev/null", under(p, hidden_files[i]), NULL, MS_BIND, NULL) != 0)
            child_fail(p, STEP_ROOT);
    for (int i = 0; hidden_dirs[i]; i++)
        if (lstat(hidden_dirs[i], &st) == 0 && S_ISDIR(st.st_mode) &&
            mount("tmpfs", under(p, hidden_dirs[i]), "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY,
                  "mode=0700,size=4k") != 0)
            child_fail(p, STEP_ROOT);
    /* the sandbox's own accounts: root and user (uid 1000, /home/user) */
    if (bind_ro(p, p->passwd, under(p, "/etc/passwd"), false) != 0 ||
        bind_ro(p, p->group, under(p, "/etc/group"), false) != 0)
        child_fail(p, STEP_ETC);
    /* Best effort: where the host's resolv.conf is a link (systemd-resolved)
     * there is no file to bind over, and the host's own nameserver line still
     * reaches the gateway, which takes every port-53 packet (netns.h). */
    if (p->resolv[0] && lstat("/etc/resolv.conf", &st) == 0 && S_ISREG(st.st_mode))
        (void)bind_ro(p, p->resolv, under(p, "/etc/resolv.conf"), false);
    const char *dirs[] = {"/home", LSBX_HOME,  "/tmp",     "/run",      LSBX_INNER_RUN, "/proc",
                          "/dev",  "/dev/pts", "/dev/shm", "/.oldroot", "/root",        NULL};
    for (int i = 0; dirs[i]; i++)
        if (mkdir(under(p, dirs[i]), 0755) != 0)
            child_fail(p, STEP_ROOT);
    chmod(under(p, "/tmp"), 01777);
    chmod(under(p, "/root"), 0700);
    /* host root's inodes are nobody's inside: give the sandbox's root its own */
    if (chown(under(p, "/root"), p->uid_base, p->uid_base) != 0 ||
        chown(under(p, "/run"), p->uid_base, p->uid_base) != 0)
        child_fail(p, STEP_ROOT);
    /* writable, so never a device node or a set-uid program */
    for (int i = 0; i < 3; i++)
        if (mount(fdpath[i], under(p, inner[i]), NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, under(p, inner[i]), NULL, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV,
                  NULL) != 0)
            child_fail(p, STEP_BIND_HOME + i);
    if (access(p->program, X_OK) != 0 || mkdir(under(p, LSBX_PROGRAM_DIR), 0755) != 0 ||
        bind_ro(p, p->program, under(p, p->exec_path), false) != 0)
        child_fail(p, STEP_EXEC); /* a missing program fails here, before exec */
    for (int i = 0; dev_nodes[i]; i++) {
        char src[32];
        snprintf(src, sizeof(src), "/dev/%s", dev_nodes[i]);
        snprintf(link, sizeof(link), "/dev/%s", dev_nodes[i]);
        const char *dst = under(p, link);
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
        if (fd < 0 || (close(fd), mount(src, dst, NULL, MS_BIND, NULL)) != 0)
            child_fail(p, STEP_ROOT);
    }
    if (mount("devpts", under(p, "/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC,
              "newinstance,ptmxmode=0666,mode=0620") != 0 ||
        symlink("pts/ptmx", under(p, "/dev/ptmx")) != 0 ||
        mount("tmpfs", under(p, "/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=64m") !=
            0 ||
        symlink("/proc/self/fd", under(p, "/dev/fd")) != 0 ||
        symlink("/proc/self/fd/0", under(p, "/dev/stdin")) != 0 ||
        symlink("/proc/self/fd/1", under(p, "/dev/stdout")) != 0 ||
        symlink("/proc/self/fd/2", under(p, "/dev/stderr")) != 0)
        child_fail(p, STEP_ROOT);
    if (syscall(SYS_pivot_root, p->root, under(p, "/.oldroot")) != 0 || chdir("/") != 0 ||
        umount2("/.oldroot", MNT_DETACH) != 0 || rmdir("/.oldroot") != 0)
        child_fail(p, STEP_PIVOT);
}

/* /proc is the sandbox's own, but some of its files are the kernel's (DESIGN
 * §10a, as runc does): read-only where they configure the host, hidden where
 * they leak its memory, keys or timers. Entries this kernel lacks are skipped. */
CHILD_FN static int mask_proc(void)
{
    static const char *const ro[] = {"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus",
                                     NULL};
    static const char *const masked[] = {"/proc/kcore",
                                         "/proc/keys",
                                         "/proc/kallsyms",
                                         "/proc/timer_list",
                                         "/proc/sched_debug",
                                         "/proc/latency_stats",
                                         NULL};
    static const char *const masked_dirs[] = {"/proc/acpi", "/proc/scsi", NULL};
    const unsigned long ro_flags =
        MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
    struct stat st;

    for (int i = 0; ro[i]; i++) {
        if (lstat(ro[i], &st) != 0)
            continue;
        if (mount(ro[i], ro[i], NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, ro[i], NULL, ro_flags, NULL) != 0)
            return -1;
    }
    for (int i = 0; masked[i]; i++)
        if (lstat(masked[i], &st) == 0 && mount("/dev/null", masked[i], NULL, MS_BIND, NULL) != 0)
            return -1;
    for (int i = 0; masked_dirs[i]; i++)
        if (lstat(masked_dirs[i], &st) == 0 && S_ISDIR(st.st_mode) &&
            mount("tmpfs", masked_dirs[i], "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "size=4k") != 0)
            return -1;
    return 0;
}

/* Docker's default capabilities minus NET_RAW and MKNOD: never SYS_ADMIN,
 * NET_ADMIN, DAC_READ_SEARCH, SYS_MODULE or SYS_PTRACE. */
static const int kept_caps[] = {CAP_CHOWN,      CAP_DAC_OVERRIDE, CAP_FSETID,
                                CAP_FOWNER,     CAP_SETGID,       CAP_SETUID,
                                CAP_SETFCAP,    CAP_SETPCAP,      CAP_NET_BIND_SERVICE,
                                CAP_SYS_CHROOT, CAP_KILL,         CAP_AUDIT_WRITE};

CHILD_FN static int drop_caps(void)
{
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[2];
    uint64_t keep = 0;

    for (size_t i = 0; i < sizeof(kept_caps) / sizeof(kept_caps[0]); i++)
        keep |= 1ULL << kept_caps[i];
    for (int cap = 0; cap < 64; cap++) {
        if (keep & (1ULL << cap))
            continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            if (errno == EINVAL)
                break; /* past the kernel's last capability */
            return -1;
        }
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
        return -1;
    memset(d, 0, sizeof(d));
    d[0].effective = d[0].permitted = (uint32_t)keep;
    d[1].effective = d[1].permitted = (uint32_t)(keep >> 32);
    return (int)syscall(SYS_capset, &h, d);
}

/* The last steps before exec: a user namespace in which the sandbox's root
 * is host uid_base (the parent writes the maps while we wait), new mount and
 * cgroup namespaces owned by it (so every inherited mount is locked by the
 * kernel: read-only stays read-only, nothing can be unmounted to reveal what
 * lies below), the kept capabilities, no_new_privs and the seccomp filter.
 * Raw system calls for the ids: glibc's setxid would signal the agent's
 * threads, which do not exist in this copy of it. */
CHILD_FN static void child_confine(struct lsbx_plan *p)
{
    char c = 'u';

    if (unshare(CLONE_NEWUSER) != 0)
        child_fail(p, STEP_USERNS);
    if (write(p->syncfd, &c, 1) != 1 || read(p->syncfd, &c, 1) != 1 || c != 'm')
        child_fail(p, STEP_USERNS);
    if (syscall(SYS_setresgid, 0, 0, 0) != 0 || syscall(SYS_setgroups, 0, NULL) != 0 ||
        syscall(SYS_setresuid, 0, 0, 0) != 0)
        child_fail(p, STEP_IDS);
    if (unshare(CLONE_NEWNS | CLONE_NEWCGROUP) != 0)
        child_fail(p, STEP_LOCK);
    if (drop_caps() != 0)
        child_fail(p, STEP_CAPS);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        child_fail(p, STEP_NNP);
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p->seccomp, 0, 0) != 0)
        child_fail(p, STEP_SECCOMP);
}

/* Rebuilds argv and envp from the plan's strings (lsbx_plan_strings). */
CHILD_FN static void unpack(const struct lsbx_plan *p, char **argv, char **envp)
{
    const char *s = p->strings;
    int i;

    for (i = 0; i < p->argc; i++, s += strlen(s) + 1)
        argv[i] = (char *)s;
    argv[i] = NULL;
    for (i = 0; i < p->envc; i++, s += strlen(s) + 1)
        envp[i] = (char *)s;
    envp[i] = NULL;
}

/* A zygote's child becomes the program: what exec would have given it —
 * its own environment, a dumpable process (setresuid left it not: its
 * /proc files would be host root's), the stack protector's value of its
 * own instead of the zygote's, shared by every sandbox forked from it —
 * then main(). The frames below this one never return (exit), so the new
 * guard value fails no check; this function itself carries none. */
__attribute__((no_stack_protector, noreturn)) static void
start_program(struct lsbx_plan *p, int (*run)(int, char **), char **argv, char **envp)
{
#if defined(__x86_64__)
    uint64_t guard = 0;
    if (getrandom(&guard, sizeof(guard), 0) != (ssize_t)sizeof(guard))
        child_fail(p, STEP_EXEC);
    guard &= ~(uint64_t)0xff; /* glibc's guard keeps a zero low byte (it stops string reads) */
    __asm__ volatile("movq %0, %%fs:0x28" : : "r"(guard) : "memory");
#endif
    environ = envp;
    /* ps and top: the zygote calls itself envd-zygote, its children are envd */
    (void)prctl(PR_SET_NAME, "agentbox-envd", 0, 0, 0);
    if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0)
        child_fail(p, STEP_EXEC);
    close(p->errfd); /* EOF: the program runs */
    exit(run(p->argc, argv));
}

/* pid 1 of the namespace, up to its program: exec'd (run NULL) or called.
 * Never returns. */
CHILD_FN static void child_init(const struct lsbx_plan *plan, int (*run)(int, char **))
{
    struct lsbx_plan copy = *plan;
    struct lsbx_plan *p = &copy;
    static const int steps[3] = {STEP_BIND_HOME, STEP_BIND_TMP, STEP_BIND_RUN};
    char *argv[LSBX_ARGV_MAX + 1], *envp[LSBX_ENV_MAX + 1];
    char fdpath[3][32];
    int src[3], i;
    sigset_t all;
    char c;

    /* the parent's ends, the zygote's socket: a parent that gives up must
     * be an EOF here, and nothing of the zygote's reaches the sandbox */
    close(p->parent_fds[0]);
    close(p->parent_fds[1]);
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, NULL); /* pid 1: only SIGKILL from outside matters */
    /* The parent puts this process in its cgroups and attaches the veth
     * while it waits here (its turn: see the top of sandbox.c). */
    if (read(p->syncfd, &c, 1) != 1)
        _exit(125); /* the parent gave up: nobody reads a report */
    child_fds(p);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0)
        child_fail(p, STEP_MOUNT_PRIVATE);
    /* Sources are opened first: the sandbox directory may itself live under
     * /tmp or /home/user, which the first bind mount would hide. */
    src[0] = open(p->home, O_PATH | O_DIRECTORY | O_CLOEXEC);
    src[1] = open(p->tmp, O_PATH | O_DIRECTORY | O_CLOEXEC);
    src[2] = open(p->run, O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (i = 0; i < 3; i++) {
        if (src[i] < 0)
            child_fail(p, steps[i]);
        snprintf(fdpath[i], sizeof(fdpath[i]), "/proc/self/fd/%d", src[i]);
    }
    build_root(p, (const char(*)[32])fdpath);
    for (i = 0; i < 3; i++)
        close(src[i]);
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
        mask_proc() != 0)
        child_fail(p, STEP_PROC);
    if (loopback_up() != 0)
        child_fail(p, STEP_LOOPBACK);
    if (sethostname(p->hostname, strlen(p->hostname)) != 0)
        child_fail(p, STEP_HOSTNAME);
    child_confine(p);
    close(p->syncfd);

    /* The program becomes pid 1 itself (envd reaps every child, orphans
     * included). exec replaces the memory image this clone of the agent
     * carried — tokens, key caches, the agent's environment — so nothing of
     * the agent stays readable inside the sandbox. (A zygote's child has
     * only the zygote's memory: no secret is ever in it, zygote.c.) */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (chdir(LSBX_HOME) != 0)
        (void)!chdir("/");
    unpack(p, argv, envp);
    if (run)
        start_program(p, run, argv, envp);
    execve(p->exec_path, argv, envp);
    child_fail(p, STEP_EXEC); /* errfd closes on a successful exec: EOF means all is well */
}

int lsbx_init_entry(void *arg)
{
    child_init(arg, NULL);
    return 127;
}

/* A zygote's child: pid 1 of its new pid namespace already; the other
 * namespaces are its own to make (the zygote must stay in the agent's),
 * before its parent looks for its network namespace ('r'). */
void lsbx_init_run(const struct lsbx_plan *plan, int (*run)(int argc, char **argv))
{
    struct lsbx_plan copy = *plan;
    char c = 'r';

    close(copy.parent_fds[0]);
    close(copy.parent_fds[1]);
    copy.parent_fds[0] = copy.parent_fds[1] = -1;
    /* the setup runs at the spawning worker's priority, as a clone of that
     * worker's would (the agent gives envd the ordinary one once it runs) */
    (void)setpriority(PRIO_PROCESS, 0, copy.nice);
    if (unshare(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET) != 0)
        child_fail(&copy, STEP_NAMESPACES);
    if (write(copy.syncfd, &c, 1) != 1)
        _exit(125);
    child_init(&copy, run);
    _exit(127);
}

int lsbx_plan_strings(struct lsbx_plan *p, const char *const *argv, const char *const *envp,
                      char *err, size_t errlen)
{
    size_t at = 0;
    int n;

    for (int list = 0; list < 2; list++) {
        const char *const *v = list == 0 ? argv : envp;
        int max = list == 0 ? LSBX_ARGV_MAX : LSBX_ENV_MAX;
        for (n = 0; v && v[n]; n++) {
            size_t len = strlen(v[n]) + 1;
            if (n == max || len > sizeof(p->strings) - at) {
                snprintf(err, errlen,
                         n == max ? "sandbox %s has more than %d entries"
                                  : "sandbox %s is longer than %d bytes in all",
                         list == 0 ? "program's argument list" : "environment",
                         n == max ? max : (int)sizeof(p->strings));
                return AB_ELIMIT;
            }
            memcpy(p->strings + at, v[n], len);
            at += len;
        }
        if (list == 0)
            p->argc = (uint16_t)n;
        else
            p->envc = (uint16_t)n;
    }
    p->strings_len = (uint32_t)at;
    return 0;
}
