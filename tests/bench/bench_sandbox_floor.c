/* bench_sandbox_floor: what the kernel alone charges for one sandbox's
 * isolation objects (DESIGN §10a), made and torn down as the local runtime
 * does, many at a time, with none of agentbox's own work: no HTTP, no envd,
 * no state records. It is the baseline of the sustained-create row
 * (e2b_create.mjs prints the whole machine's CPU a create): what a create
 * costs above this is ours to cut; this much is not, short of isolating
 * less or recycling namespaces between tenants.
 *
 * Stages, each adding to the one before:
 *   namespaces  clone into new pid, mount, uts, ipc and net namespaces
 *               (CLONE_VM, as sandbox.c), then a user namespace mapped
 *               from outside and new mount + cgroup namespaces; exit; reap
 *   veth        a veth pair, its peer created in the sandbox's namespace,
 *               both ends addressed and up (the bench's own network
 *               namespace holds the other end); gone with the namespace
 *   cgroup      the sandbox's cgroups (memory, pids, cpu: cgroup.c), the
 *               init moved in, removed after
 *   root        a tmpfs root with /usr bound read-only, /proc, pivot_root
 *   exec        exec of a static program without libc that exits
 *   exec-glibc  exec of /bin/true instead (glibc's start: its CPUID probes
 *               are a hypervisor exit each on a VM)
 *   veth-del    exec, with the veth deleted explicitly after the sandbox
 *               is gone (what the agent's removal does) instead of by the
 *               namespace's teardown
 * Each runs for BENCH_FLOOR_SECONDS (default 3) with BENCH_FLOOR_INFLIGHT
 * (default 16, the runtime's --spawn-concurrency) at a time, and prints
 * sandboxes/s and the whole machine's CPU a sandbox (/proc/stat: the
 * namespaces' teardown runs in kernel workers, not in this process), so
 * "at most N/s" is what this machine's cores could do at that cost.
 * Needs root. Usage: bench_sandbox_floor [stage ...] */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/egress/netlink.h"
#include "agent/runtime/local/cgroup.h"
#include "agentbox/common.h"

#define STACK_SIZE (64 * 1024)
#define UID_BASE 2000000000u
#define NOOP_PATH "/tmp/abx-floor-noop"

enum { F_VETH = 1, F_CGROUP = 2, F_ROOT = 4, F_EXEC = 8, F_GLIBC = 16, F_VETH_DEL = 32 };

static const struct stage {
    const char *name;
    int flags;
    const char *what;
} stages[] = {
    {"namespaces", 0, "pid, mount, uts, ipc, net, user and cgroup namespaces"},
    {"veth", F_VETH, "+ a veth pair into the sandbox, addressed and up"},
    {"cgroup", F_VETH | F_CGROUP, "+ the sandbox's cgroups"},
    {"root", F_VETH | F_CGROUP | F_ROOT, "+ a tmpfs root, /usr bound, /proc, pivot_root"},
    {"exec", F_VETH | F_CGROUP | F_ROOT | F_EXEC, "+ exec of a program without libc"},
    {"exec-glibc", F_VETH | F_CGROUP | F_ROOT | F_EXEC | F_GLIBC,
     "+ exec of /bin/true (glibc) instead"},
    {"veth-del", F_VETH | F_CGROUP | F_ROOT | F_EXEC | F_VETH_DEL,
     "exec, the veth deleted by the removal (as the agent does), not the teardown"},
};

/* A static x86-64 ELF of one page: exit(0). */
static int write_noop(void)
{
    static const unsigned char code[] = {0xb8, 0x3c, 0, 0, 0, 0x31, 0xff, 0x0f, 0x05};
    unsigned char img[120 + sizeof(code)];
    uint64_t entry = 0x400000 + 120, filesz = sizeof(img);

    memset(img, 0, sizeof(img));
    memcpy(img,
           "\x7f"
           "ELF\x02\x01\x01",
           7);
    img[16] = 2;  /* ET_EXEC */
    img[18] = 62; /* EM_X86_64 */
    img[20] = 1;
    memcpy(img + 24, &entry, 8);
    img[32] = 64; /* e_phoff */
    img[52] = 64; /* e_ehsize */
    img[54] = 56; /* e_phentsize */
    img[56] = 1;  /* e_phnum */
    unsigned char *ph = img + 64;
    ph[0] = 1; /* PT_LOAD */
    ph[4] = 5; /* R + X */
    uint64_t vaddr = 0x400000, align = 0x1000;
    memcpy(ph + 16, &vaddr, 8);
    memcpy(ph + 24, &vaddr, 8);
    memcpy(ph + 32, &filesz, 8);
    memcpy(ph + 40, &filesz, 8);
    memcpy(ph + 48, &align, 8);
    memcpy(img + 120, code, sizeof(code));
    int fd = open(NOOP_PATH, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (fd < 0 || write(fd, img, sizeof(img)) != (ssize_t)sizeof(img))
        return -1;
    return close(fd);
}

struct plan {
    int flags;
    int sync; /* the child's end */
    int other;
    char root[64];
};

/* The child shares this process's memory until exec or exit: system calls
 * on prepared memory only, while its parent waits on the socket. */
static int child(void *arg)
{
    struct plan *p = arg;
    char c;

    close(p->other);
    if (read(p->sync, &c, 1) != 1)
        _exit(1);
    if (p->flags & F_ROOT) {
        char at[128];
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("tmpfs", p->root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m") != 0)
            _exit(2);
        snprintf(at, sizeof(at), "%s/usr", p->root);
        if (mkdir(at, 0755) != 0 || mount("/usr", at, NULL, MS_BIND | MS_REC, NULL) != 0 ||
            mount(NULL, at, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) != 0)
            _exit(3);
        static const char *const links[][2] = {
            {"usr/bin", "bin"}, {"usr/lib", "lib"}, {"usr/lib64", "lib64"}};
        for (int i = 0; i < 3; i++) {
            snprintf(at, sizeof(at), "%s/%s", p->root, links[i][1]);
            if (symlink(links[i][0], at) != 0)
                _exit(4);
        }
        snprintf(at, sizeof(at), "%s/noop", p->root);
        int fd = open(at, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
        if (fd < 0 || close(fd) != 0 || mount(NOOP_PATH, at, NULL, MS_BIND, NULL) != 0)
            _exit(4); /* the program is bound in, as envd is */
        snprintf(at, sizeof(at), "%s/old", p->root);
        if (mkdir(at, 0700) != 0)
            _exit(5);
        snprintf(at, sizeof(at), "%s/proc", p->root);
        if (mkdir(at, 0555) != 0)
            _exit(6);
        snprintf(at, sizeof(at), "%s/old", p->root);
        if (syscall(SYS_pivot_root, p->root, at) != 0 || chdir("/") != 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0 ||
            umount2("/old", MNT_DETACH) != 0)
            _exit(7);
    }
    if (unshare(CLONE_NEWUSER) != 0)
        _exit(8);
    c = 'u';
    if (write(p->sync, &c, 1) != 1 || read(p->sync, &c, 1) != 1)
        _exit(9);
    if (syscall(SYS_setresgid, 0, 0, 0) != 0 || syscall(SYS_setresuid, 0, 0, 0) != 0 ||
        unshare(CLONE_NEWNS | CLONE_NEWCGROUP) != 0)
        _exit(10);
    if (p->flags & F_EXEC) {
        static char *const noop_argv[] = {"noop", NULL}, *const true_argv[] = {"true", NULL};
        static char *const envp[] = {NULL};
        if (p->flags & F_GLIBC)
            execve("/usr/bin/true", true_argv, envp);
        else
            execve(p->flags & F_ROOT ? "/noop" : NOOP_PATH, noop_argv, envp);
        _exit(11);
    }
    _exit(0);
}

static int write_maps(pid_t pid)
{
    char path[64], text[64];
    const char *files[] = {"uid_map", "gid_map"};

    snprintf(text, sizeof(text), "0 %u 65536\n", UID_BASE);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
            if (fd >= 0)
                close(fd);
            return -1;
        }
        close(fd);
    }
    return 0;
}

static atomic_int stop_now, made, failed, next_id;
static const struct stage *cur;

/* The veth of sandbox n: host end "fl<n>" here, "eth0" in the sandbox;
 * 10.<n>/30 (n below 2^22). */
static int veth(pid_t pid, int n, char *err, size_t errlen)
{
    char path[64], name[16];
    struct egress_nl nl;
    struct egress_addr a = {.family = AF_INET};
    int index = 0, rc, fd;
    uint32_t base = (10u << 24) | ((uint32_t)(n & 0x3fffff) << 2);

    snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
    snprintf(name, sizeof(name), "fl%d", n);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return AB_EIO;
    if ((rc = egress_nl_open(NULL, &nl, err, errlen)) == 0) {
        a.a[0] = (uint8_t)(base >> 24), a.a[1] = (uint8_t)(base >> 16);
        a.a[2] = (uint8_t)(base >> 8), a.a[3] = (uint8_t)(base + 1);
        if (!(rc = egress_nl_veth_add(&nl, name, "eth0", fd, err, errlen)) &&
            !(rc = egress_nl_ifindex(&nl, name, &index, err, errlen)) &&
            !(rc = egress_nl_addr_add(&nl, index, &a, 30, err, errlen)))
            rc = egress_nl_link_up(&nl, name, err, errlen);
        egress_nl_close(&nl);
    }
    if (rc == 0 && (rc = egress_nl_open_fd(fd, &nl, err, errlen)) == 0) {
        a.a[3] = (uint8_t)(base + 2);
        if (!(rc = egress_nl_link_up(&nl, "lo", err, errlen)) &&
            !(rc = egress_nl_ifindex(&nl, "eth0", &index, err, errlen)) &&
            !(rc = egress_nl_addr_add(&nl, index, &a, 30, err, errlen)))
            rc = egress_nl_link_up(&nl, "eth0", err, errlen);
        egress_nl_close(&nl);
    }
    close(fd);
    return rc;
}

static void veth_del(int n)
{
    char name[16], err[256];
    struct egress_nl nl;

    snprintf(name, sizeof(name), "fl%d", n);
    if (egress_nl_open(NULL, &nl, err, sizeof(err)) == 0) {
        egress_nl_link_del(&nl, name, err, sizeof(err));
        egress_nl_close(&nl);
    }
}

static int one(int flags, void *stack, int tid)
{
    int sp[2], n = atomic_fetch_add(&next_id, 1), status = 0, rc = -1;
    char err[512], id[32], c = 'g';
    struct lcg cg;
    bool have_cg = false;
    struct plan p = {.flags = flags};

    snprintf(p.root, sizeof(p.root), "/tmp/abx-floor-root-%d", tid);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) != 0)
        return -1;
    p.sync = sp[0];
    p.other = sp[1];
    pid_t pid = clone(child, (char *)stack + STACK_SIZE,
                      CLONE_VM | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                          CLONE_NEWNET | SIGCHLD,
                      &p);
    if (pid < 0) {
        fprintf(stderr, "clone: %s\n", strerror(errno));
        close(sp[0]), close(sp[1]);
        return -1;
    }
    if (flags & F_CGROUP) {
        struct lcg_limits lim = {.mem_bytes = 512 << 20, .cpu_milli = 1000, .pids_max = 1024};
        snprintf(id, sizeof(id), "floor-%d", n);
        if (lcg_create(id, &lim, &cg, err, sizeof(err)) != 0 ||
            lcg_enter(&cg, pid, err, sizeof(err)) != 0) {
            fprintf(stderr, "cgroup: %s\n", err);
            goto out;
        }
        have_cg = true;
    }
    if ((flags & F_VETH) && veth(pid, n, err, sizeof(err)) != 0) {
        fprintf(stderr, "veth: %s\n", err);
        goto out;
    }
    if (write(sp[1], &c, 1) != 1 || read(sp[1], &c, 1) != 1 || c != 'u' || write_maps(pid) != 0 ||
        write(sp[1], &c, 1) != 1)
        goto out;
    rc = 0;
out:
    close(sp[0]);
    close(sp[1]);
    if (rc != 0)
        kill(pid, SIGKILL);
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (rc == 0)
            fprintf(stderr, "sandbox init ended with status %#x\n", status);
        rc = -1;
    }
    if (flags & F_VETH_DEL)
        veth_del(n);
    if (have_cg)
        lcg_remove(&cg);
    return rc;
}

static void *worker(void *arg)
{
    int tid = (int)(intptr_t)arg;
    char root[64];
    void *stack = mmap(NULL, STACK_SIZE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);

    snprintf(root, sizeof(root), "/tmp/abx-floor-root-%d", tid);
    if (stack == MAP_FAILED || (mkdir(root, 0700) != 0 && errno != EEXIST))
        return NULL;
    while (!atomic_load(&stop_now)) {
        if (one(cur->flags, stack, tid) == 0)
            atomic_fetch_add(&made, 1);
        else if (atomic_fetch_add(&failed, 1) > 100)
            break;
    }
    rmdir(root);
    return NULL;
}

/* Busy and total jiffies of the whole machine. */
static void machine(long long *busy, long long *total)
{
    long long v[10] = {0};
    FILE *f = fopen("/proc/stat", "r");

    *busy = *total = 0;
    if (!f)
        return;
    if (fscanf(f, "cpu %lld %lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        for (int i = 0; i < 8; i++)
            *total += v[i];
        *busy = *total - v[3] - v[4];
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    double seconds = getenv("BENCH_FLOOR_SECONDS") ? atof(getenv("BENCH_FLOOR_SECONDS")) : 3;
    int inflight = getenv("BENCH_FLOOR_INFLIGHT") ? atoi(getenv("BENCH_FLOOR_INFLIGHT")) : 16;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN), hz = sysconf(_SC_CLK_TCK);
    double ms_of[sizeof(stages) / sizeof(stages[0])];
    char load[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");

    if (lf) {
        if (!fgets(load, sizeof(load), lf))
            load[0] = '\0';
        load[strcspn(load, " ")] = '\0';
        fclose(lf);
    }
    if (inflight < 1 || inflight > 256 || seconds <= 0) {
        fprintf(stderr, "BENCH_FLOOR_INFLIGHT must be 1-256 and BENCH_FLOOR_SECONDS > 0\n");
        return 2;
    }
    /* the veths' host ends in a namespace of this process's own */
    if (geteuid() != 0 || unshare(CLONE_NEWNET) != 0 || write_noop() != 0) {
        fprintf(stderr, "bench_sandbox_floor needs root (namespaces, cgroups): %s\n",
                strerror(errno));
        return 2;
    }
    printf("a sandbox's isolation objects alone, %d at a time for %.0f s a stage, %ld cpus, "
           "load %s\n",
           inflight, seconds, cpus, load);
    for (size_t s = 0; s < sizeof(stages) / sizeof(stages[0]); s++) {
        bool wanted = argc < 2;
        for (int i = 1; i < argc; i++)
            wanted |= strcmp(argv[i], stages[s].name) == 0;
        ms_of[s] = -1;
        if (!wanted)
            continue;
        pthread_t th[256];
        long long b0, t0, b1, t1;
        cur = &stages[s];
        atomic_store(&stop_now, 0);
        atomic_store(&made, 0);
        atomic_store(&failed, 0);
        machine(&b0, &t0);
        int64_t start = ab_now_us();
        for (int i = 0; i < inflight; i++)
            pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i);
        while (ab_now_us() - start < (int64_t)(seconds * 1e6))
            usleep(20000);
        atomic_store(&stop_now, 1);
        for (int i = 0; i < inflight; i++)
            pthread_join(th[i], NULL);
        double elapsed = (double)(ab_now_us() - start) / 1e6;
        /* the namespaces' teardown goes on in kernel workers after the last
         * init is reaped: counted until the machine is idle again (a 50 ms
         * stretch under 10 % busy, at most 5 s) */
        machine(&b1, &t1);
        for (int64_t until = ab_now_us() + 5000000; ab_now_us() < until;) {
            long long b2, t2;
            usleep(50000);
            machine(&b2, &t2);
            bool quiet = t2 > t1 && (double)(b2 - b1) < 0.1 * (double)(t2 - t1);
            b1 = b2, t1 = t2;
            if (quiet)
                break;
        }
        int n = atomic_load(&made);
        if (atomic_load(&failed) > 0)
            printf("  %s: %d failed\n", stages[s].name, atomic_load(&failed));
        if (n == 0) {
            printf("  %-10s  none made\n", stages[s].name);
            continue;
        }
        double busy_ms = (double)(b1 - b0) * 1000.0 / (double)hz;
        ms_of[s] = busy_ms / n;
        printf("  %-10s %8.1f sandboxes/s  %5.2f ms of machine CPU each (busy %3.0f %%): at most "
               "%4.0f/s on %ld cores   %s\n",
               stages[s].name, n / elapsed, ms_of[s],
               t1 > t0 ? 100.0 * (double)(b1 - b0) / (double)(t1 - t0) : 0, cpus * 1000 / ms_of[s],
               cpus, stages[s].what);
    }
    unlink(NOOP_PATH);
    /* the summary row: the floor of a sandbox (every object, the cheapest exec) */
    if (ms_of[4] > 0) {
        char glibc[48] = "not run", del[48] = "not run", ns[48] = "not run";
        if (ms_of[0] > 0)
            snprintf(ns, sizeof(ns), "%.2f ms", ms_of[0]);
        if (ms_of[5] > 0)
            snprintf(glibc, sizeof(glibc), "%+.2f ms", ms_of[5] - ms_of[4]);
        if (ms_of[6] > 0)
            snprintf(del, sizeof(del), "%+.2f ms", ms_of[6] - ms_of[4]);
        printf("ROW create-floor | a sandbox's isolation objects alone (kernel: 7 namespaces, "
               "veth, cgroups, tmpfs root, exec without libc), %d at a time | %.2f ms of machine "
               "CPU each: at most %.0f creates/s on %ld cores | namespaces alone %s; glibc's "
               "exec %s; veth deleted by the removal %s | - | baseline\n",
               inflight, ms_of[4], cpus * 1000 / ms_of[4], cpus, ns, glibc, del);
    }
    return 0;
}
