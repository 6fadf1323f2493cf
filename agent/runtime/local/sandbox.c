/* Local sandboxes as namespaced process trees (see sandbox.h for the layout).
 *
 * The init of a sandbox is made with clone(CLONE_VM) on a small stack of
 * its own: it shares the agent's address space until it execs envd, so a
 * spawn copies no page tables and the agent takes no copy-on-write faults
 * afterwards (what fork() cost: time proportional to the agent's memory, on
 * every thread, for every spawn). Sharing memory with a multi-threaded
 * process asks three things of the child until exec: it only uses system
 * calls and memory the parent prepared (no malloc, no stdio, no locks);
 * it is not instrumented by the address sanitizer (CHILD_FN); and, since it
 * shares the calling thread's thread-local block (errno), the parent and the
 * child take turns: the parent works only while the child is blocked on the
 * sync socket and only waits while the child works. With the envd zygote
 * (zygote.h) the init is the zygote's child instead, on its own memory;
 * the turns are the same. The child's steps are sandbox_init.c's. */
#include "agent/runtime/local/sandbox.h"

#include "agentbox/common.h"
#include "agent/runtime/local/sandbox_init.h"
#include "agent/runtime/local/zygote.h"
#include "agent/runtime/local/seccomp.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The init's stack until exec: its setup needs a few KiB (the plan's copy,
 * snprintf); a guard page below it turns an overflow into the child's
 * SIGSEGV instead of a write into the agent's memory. */
#define CHILD_STACK_SIZE (256 * 1024)

static pid_t raw_fork(unsigned long flags)
{
    return (pid_t)syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0);
}

uint64_t lsbx_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    const char *p;
    unsigned long long st = 0;
    ssize_t n;
    int fd, field;

    if (pid <= 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* The command name may hold spaces and ')': fields start after the last ')'. */
    p = strrchr(buf, ')');
    if (!p || p[1] != ' ')
        return 0;
    p += 2; /* field 3 (state) */
    if (*p == 'Z' || *p == 'X')
        return 0; /* exited, not yet reaped: gone for our purposes */
    for (field = 3; field < 22 && *p; p++)
        if (*p == ' ')
            field++;
    if (field != 22 || sscanf(p, "%llu", &st) != 1)
        return 0;
    return st;
}

static int wait_readable(int fd, int64_t deadline_ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    for (;;) {
        int64_t left = deadline_ms - ab_now_ms();
        int r;
        if (left <= 0)
            return AB_ETIMEOUT;
        r = poll(&pfd, 1, (int)AB_MIN(left, 1000));
        if (r > 0)
            return 0;
        if (r < 0 && errno != EINTR)
            return AB_EIO;
    }
}

static int mkdir_p1(const char *path, mode_t mode)
{
    if (mkdir(path, mode) == 0 || errno == EEXIST)
        return 0;
    return -1;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)ftw;
    if (type == FTW_DP)
        return rmdir(path) == 0 || errno == ENOENT ? 0 : -1;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -1;
}

static int remove_tree(const char *dir)
{
    char data[LSBX_DIR_MAX + 8];
    struct stat st;

    if (lstat(dir, &st) != 0)
        return errno == ENOENT ? 0 : AB_EIO;
    /* the writable space is a mount of its own: gone with it, and the walk
     * below never crosses into a mount */
    snprintf(data, sizeof(data), "%s/data", dir);
    if (umount2(data, MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL && errno != ENOENT)
        return AB_EIO;
    return nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) == 0 ? 0 : AB_EIO;
}

int lsbx_remove_dir(const struct lsbx *s)
{
    int rc = lcg_remove(&s->cg);

    if (rc != 0)
        return rc;
    return remove_tree(s->dir);
}

static int rm_below(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    return ftw->level == 0 ? 0 : rm_entry(path, st, type, ftw);
}

/* The skeleton a spawn would otherwise make: the directory, its writable
 * space's mount point, run/, the home and tmp links. Everything of the
 * sandbox that lived in it goes (writable space unmounted — its log with it —
 * and checked empty, run/ emptied, the record, an older agent's log and any
 * other file removed): what is kept holds nothing of the sandbox that used it. */
static int strip_to_skeleton(const char *dir)
{
    static const char *const kept[] = {"data", "run", "home", "tmp"};
    char path[LSBX_DIR_MAX + 16];
    struct dirent *de;
    DIR *d;
    int rc = 0;

    snprintf(path, sizeof(path), "%s/data", dir);
    if (umount2(path, MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL)
        return AB_EIO;
    if (!(d = opendir(path)))
        return AB_EIO;
    while ((de = readdir(d)) && (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0))
        ;
    closedir(d);
    if (de) /* not empty: still mounted, or written below the mount */
        return AB_EIO;
    snprintf(path, sizeof(path), "%s/run", dir);
    if (nftw(path, rm_below, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0)
        return AB_EIO;
    if (!(d = opendir(dir)))
        return AB_EIO;
    while (rc == 0 && (de = readdir(d))) {
        bool keep = strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(kept) && !keep; i++)
            keep = strcmp(de->d_name, kept[i]) == 0;
        if (keep)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (unlink(path) != 0 && (errno != EISDIR || remove_tree(path) != 0))
            rc = AB_EIO;
    }
    closedir(d);
    return rc;
}

int lsbx_recycle_dir(const struct lsbx *s, const char *spare)
{
    int rc = lcg_remove(&s->cg);

    if (rc != 0)
        return rc;
    if (spare && strip_to_skeleton(s->dir) == 0 && rename(s->dir, spare) == 0)
        return 0;
    return remove_tree(s->dir);
}

static bool id_is_valid(const char *id)
{
    size_t n = strlen(id);

    return n > 0 && n <= LSBX_ID_MAX && strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* The sandbox's veth into the agent's egress namespace, before its program
 * runs: the default route goes to the gateway and DNS to its address. */
static int attach_egress(struct lsbx *s, const struct lsbx_options *o, char *err, size_t errlen)
{
    char ns[48], why[512];

    snprintf(ns, sizeof(ns), "/proc/%d/ns/net", (int)s->pid);
    if (egress_netns_attach(o->egress, o->egress_slot, ns, NULL, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "cannot attach the sandbox to the egress namespace: %s", why);
        return AB_EIO;
    }
    s->egress = true;
    return 0;
}

/* Sandbox ids 0-65535 are host ids base.. (written by us, host root, while
 * the child waits in its fresh user namespace). */
static int write_id_maps(pid_t pid, uint32_t base)
{
    static const char *const files[] = {"uid_map", "gid_map"};
    char path[64], line[64];

    for (int i = 0; i < 2; i++) {
        int fd, n;
        ssize_t w;
        snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, files[i]);
        n = snprintf(line, sizeof(line), "0 %u %u\n", base, LSBX_UID_COUNT);
        fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
            return -1;
        w = write(fd, line, (size_t)n);
        close(fd);
        if (w != n)
            return -1;
    }
    return 0;
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    size_t n = strlen(text);
    ssize_t w;

    if (fd < 0)
        return -1;
    w = write(fd, text, n);
    close(fd);
    return w == (ssize_t)n ? 0 : -1;
}

/* True when path is a symbolic link to target (a recycled skeleton's). */
static bool link_is(const char *path, const char *target)
{
    char buf[64];
    ssize_t n = readlink(path, buf, sizeof(buf) - 1);

    if (n < 0)
        return false;
    buf[n] = '\0';
    return strcmp(buf, target) == 0;
}

/* The sandbox's writable space (home and /tmp) is one size-limited tmpfs at
 * <dir>/data, mounted here in the agent's namespace so that the host sees
 * the files at <dir>/home and <dir>/tmp (symlinks into it): a full disk is
 * ENOSPC inside and nothing outside. Its pages are charged to the memory
 * cgroup of whoever writes them, the sandbox. */
static int make_data(const char *dir, const char *data, const char *opts)
{
    char link[LSBX_DIR_MAX + 8];

    if (mkdir_p1(data, 0755) != 0 || mount("tmpfs", data, "tmpfs", MS_NOSUID | MS_NODEV, opts) != 0)
        return -1;
    snprintf(link, sizeof(link), "%s/home", dir);
    if (symlink("data/home", link) != 0 && !link_is(link, "data/home"))
        return -1;
    snprintf(link, sizeof(link), "%s/tmp", dir);
    return symlink("data/tmp", link) == 0 || link_is(link, "data/tmp") ? 0 : -1;
}

/* A file of the shared directory holding exactly text: written when it is
 * missing or differs (a temporary file of this thread + rename, since two
 * workers may spawn at once), else only read. Bound read-only into
 * sandboxes, never written while bound: a rename leaves a bound inode as
 * it was. */
static int shared_file(const char *path, const char *text)
{
    char buf[512], tmp[LSBX_DIR_MAX + 48];
    size_t n = strlen(text);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

    if (fd >= 0) {
        ssize_t r = read(fd, buf, sizeof(buf));
        close(fd);
        if (r == (ssize_t)n && memcmp(buf, text, n) == 0)
            return 0;
    }
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)gettid());
    if (write_file(tmp, text) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static int put_file(const struct lsbx_options *o, const char *path, const char *text)
{
    return o->shared_dir ? shared_file(path, text) : write_file(path, text);
}

/* resolv.conf naming the gateway's end of the sandbox's veth (any address
 * would do: the egress namespace redirects all of port 53 to the gateway). */
static int write_resolv(const struct lsbx_options *o, struct lsbx_plan *p)
{
    struct egress_link l;
    char text[96], a[64];

    p->resolv[0] = '\0';
    if (!o->egress || egress_netns_link(o->egress, o->egress_slot, &l) != 0)
        return 0;
    inet_ntop(AF_INET, l.gateway.a, a, sizeof(a));
    snprintf(text, sizeof(text), "nameserver %s\noptions timeout:2 attempts:2\n", a);
    if (o->shared_dir)
        snprintf(p->resolv, sizeof(p->resolv), "%s/resolv-%u.conf", o->shared_dir, o->egress_slot);
    else
        snprintf(p->resolv, sizeof(p->resolv), "%s/resolv.conf", o->dir);
    return put_file(o, p->resolv, text);
}

/* The sandbox's own accounts, as on E2B: root and user (uid 1000). */
static int write_accounts(const struct lsbx_options *o, const struct lsbx_plan *p)
{
    static const char passwd[] = "root:x:0:0:root:/root:/bin/bash\n"
                                 "user:x:1000:1000:user:" LSBX_HOME ":/bin/bash\n"
                                 "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
    static const char group[] = "root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n";

    return put_file(o, p->passwd, passwd) == 0 && put_file(o, p->group, group) == 0 ? 0 : -1;
}

/* Host ownership of the writable directories: uid_base is the sandbox's
 * root, uid_base+1000 its user (home). */
static int own_dirs(const struct lsbx_plan *p)
{
    uid_t r = p->uid_base, u = p->uid_base + LSBX_USER_UID;

    return chown(p->home, u, u) == 0 && chown(p->tmp, r, r) == 0 && chown(p->run, r, r) == 0 ? 0
                                                                                             : -1;
}

/* The child has unshared its user namespace: map it and let it go on. */
static int map_child(struct lsbx *s, int syncfd, uint32_t base, char *err, size_t errlen)
{
    char c = 0;

    if (wait_readable(syncfd, ab_now_ms() + LSBX_SETUP_TIMEOUT_MS) != 0) {
        snprintf(err, errlen, "sandbox setup did not reach its user namespace within %d ms",
                 LSBX_SETUP_TIMEOUT_MS);
        return AB_ETIMEOUT;
    }
    if (read(syncfd, &c, 1) != 1 || c != 'u')
        return AB_ECLOSED; /* it failed: errfd says where */
    if (write_id_maps(s->pid, base) != 0) {
        snprintf(err, errlen,
                 "cannot write the user namespace maps of the sandbox (host ids %u-%u): %s", base,
                 base + LSBX_UID_COUNT - 1, strerror(errno));
        return AB_EIO;
    }
    c = 'm';
    if (send(syncfd, &c, 1, MSG_NOSIGNAL) != 1)
        return AB_ECLOSED;
    return 0;
}

int lsbx_spawn(const struct lsbx_options *o, struct lsbx *s, char *err, size_t errlen)
{
    static const char *default_env[] = {LSBX_ENV_PATH, LSBX_ENV_HOME, NULL};
    struct lsbx_plan plan;
    int errp[2] = {-1, -1}, syncp[2] = {-1, -1};
    int msg[2] = {0, 0}, i, rc = AB_EIO;
    char data_opts[96];
    uint64_t disk;
    const char *const *envp = o->envp ? o->envp : default_env;
    bool made_dir = false, made_cg = false, stack_done = false;
    void *stack = NULL;
    ssize_t n;
    char c = 'g';

    memset(s, 0, sizeof(*s));
    memset(&plan, 0, sizeof(plan));
    {
        uint8_t raw[32];
        if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw)) {
            snprintf(err, errlen, "cannot make the sandbox's envd token: getrandom: %s",
                     strerror(errno));
            return AB_EIO;
        }
        for (size_t k = 0; k < sizeof(raw); k++)
            snprintf(s->token + 2 * k, 3, "%02x", raw[k]);
        explicit_bzero(raw, sizeof(raw));
    }
    if (!o->id || !id_is_valid(o->id)) {
        snprintf(err, errlen, "sandbox id must be 1-%d characters of [a-z0-9-]", LSBX_ID_MAX);
        return AB_EINVAL;
    }
    if (!o->argv || !o->argv[0] || o->argv[0][0] != '/') {
        snprintf(err, errlen, "sandbox program must be given as an absolute path");
        return AB_EINVAL;
    }
    ab_strlcpy(s->id, o->id, sizeof(s->id));
    if (ab_strlcpy(s->dir, o->dir, sizeof(s->dir)) >= sizeof(s->dir) ||
        (size_t)snprintf(s->socket, sizeof(s->socket), "%s/run/envd.sock", o->dir) >=
            sizeof(((struct sockaddr_un *)0)->sun_path)) {
        snprintf(err, errlen,
                 "sandbox directory %s is too long: the socket path "
                 "<dir>/run/envd.sock must stay under 108 bytes; use a shorter state directory",
                 o->dir);
        return AB_ELIMIT;
    }
    if ((rc = lsbx_plan_strings(&plan, o->argv, envp, err, errlen)) != 0)
        return rc;
    errno = 0;
    plan.nice = getpriority(PRIO_PROCESS, (id_t)gettid());
    if (errno != 0)
        plan.nice = 0;
    plan.uid_base = o->uid_base ? o->uid_base : LSBX_UID_BASE_DEFAULT;
    if (plan.uid_base < LSBX_UID_COUNT || plan.uid_base > UINT32_MAX - LSBX_UID_COUNT) {
        snprintf(err, errlen,
                 "uid_base %u is out of range: sandbox ids 0-65535 need host ids from at least "
                 "65536 up to 4294901759 (default %u)",
                 plan.uid_base, LSBX_UID_BASE_DEFAULT);
        return AB_EINVAL;
    }
    if ((rc = lsec_program(&plan.seccomp, err, errlen)) != 0)
        return rc;
    rc = AB_EIO;
    snprintf(plan.root_opts, sizeof(plan.root_opts), "mode=0755,size=16m,uid=%u,gid=%u",
             plan.uid_base, plan.uid_base);
    ab_strlcpy(plan.hostname, o->hostname ? o->hostname : o->id, sizeof(plan.hostname));
    snprintf(plan.data, sizeof(plan.data), "%s/data", o->dir);
    snprintf(plan.home, sizeof(plan.home), "%s/data/home", o->dir);
    snprintf(plan.tmp, sizeof(plan.tmp), "%s/data/tmp", o->dir);
    disk = o->disk_bytes ? o->disk_bytes : LSBX_DISK_DEFAULT;
    /* The tmpfs is charged to the sandbox's memory cgroup: past the memory
     * limit a full disk would be an OOM kill (of envd last, but of envd once
     * the files hold everything), not ENOSPC. So at most half the memory. */
    if (o->mem_bytes > 0 && disk > (uint64_t)o->mem_bytes / 2)
        disk = (uint64_t)o->mem_bytes / 2;
    snprintf(data_opts, sizeof(data_opts), "size=%llu,nr_inodes=%u,mode=0755",
             (unsigned long long)disk, LSBX_INODES_MAX);
    snprintf(plan.run, sizeof(plan.run), "%s/run", o->dir);
    snprintf(plan.log, sizeof(plan.log), "%s/" LSBX_LOG, o->dir);
    {
        const char *at = o->shared_dir ? o->shared_dir : o->dir;
        if (strlen(at) + 16 > LSBX_DIR_MAX) {
            snprintf(err, errlen, "sandbox shared directory %s is too long", at);
            return AB_EINVAL;
        }
        snprintf(plan.root, sizeof(plan.root), "%s/root", at);
        snprintf(plan.passwd, sizeof(plan.passwd), "%s/passwd", at);
        snprintf(plan.group, sizeof(plan.group), "%s/group", at);
    }
    if (o->shared_dir && mkdir_p1(o->shared_dir, 0700) != 0) {
        snprintf(err, errlen, "cannot create %s: %s", o->shared_dir, strerror(errno));
        return AB_EIO;
    }
    {
        const char *slash = strrchr(o->argv[0], '/');
        size_t dl = slash == o->argv[0] ? 1 : (size_t)(slash - o->argv[0]);
        if (strlen(o->argv[0]) >= sizeof(plan.program) || dl >= sizeof(plan.program) ||
            strlen(slash + 1) == 0) {
            snprintf(err, errlen, "sandbox program path %s is too long or names no file",
                     o->argv[0]);
            return AB_EINVAL;
        }
        ab_strlcpy(plan.program, o->argv[0], sizeof(plan.program));
        snprintf(plan.exec_path, sizeof(plan.exec_path), "%s/%s", LSBX_PROGRAM_DIR, slash + 1);
    }

    /* a skeleton a removal left (lsbx_recycle_dir): no inode to make */
    if (!(o->spare && rename(o->spare, o->dir) == 0) && mkdir(o->dir, 0700) != 0) {
        snprintf(err, errlen, "cannot create sandbox directory %s: %s", o->dir, strerror(errno));
        return errno == EEXIST ? AB_EEXIST : AB_EIO;
    }
    made_dir = true;
    if (make_data(o->dir, plan.data, data_opts) != 0 || mkdir_p1(plan.home, 0755) != 0 ||
        mkdir_p1(plan.tmp, 01777) != 0 || mkdir_p1(plan.root, 0755) != 0 ||
        chmod(plan.tmp, 01777) != 0 || mkdir_p1(plan.run, 0755) != 0 || own_dirs(&plan) != 0 ||
        write_accounts(o, &plan) != 0 || write_resolv(o, &plan) != 0) {
        snprintf(err, errlen, "cannot create the sandbox's directories under %s: %s", o->dir,
                 strerror(errno));
        goto fail;
    }
    /* sync is a socket so that writing to a dead init is EPIPE, not SIGPIPE */
    if (pipe2(errp, O_CLOEXEC) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, syncp) != 0) {
        snprintf(err, errlen, "cannot create pipes: %s", strerror(errno));
        goto fail;
    }
    {
        struct lcg_limits lim = {.mem_bytes = o->mem_bytes,
                                 .cpu_milli = o->cpu_milli,
                                 .pids_max = o->pids_max > 0 ? o->pids_max : LSBX_PIDS_DEFAULT};
        if ((rc = lcg_create(o->id, &lim, &s->cg, err, errlen)) != 0)
            goto fail;
        made_cg = true;
        rc = AB_EIO;
    }
    plan.errfd = errp[1];
    plan.syncfd = syncp[0];
    plan.parent_fds[0] = errp[0];
    plan.parent_fds[1] = syncp[1];
    if (o->zygote) {
        /* forked by the zygote (zygote.h): its child, tracked by start time */
        if ((rc = lzy_spawn(o->zygote, &plan, errp[1], syncp[0], &s->pid, err, errlen)) != 0)
            goto fail;
        s->start_time = lsbx_proc_start_time(s->pid);
        stack_done = true; /* none */
    } else {
        stack = mmap(NULL, CHILD_STACK_SIZE, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
        if (stack == MAP_FAILED || mprotect(stack, 4096, PROT_NONE) != 0) {
            snprintf(err, errlen, "cannot map the sandbox init's stack: %s", strerror(errno));
            if (stack != MAP_FAILED)
                munmap(stack, CHILD_STACK_SIZE);
            stack = NULL;
            goto fail;
        }
        /* no CLONE_VFORK: this thread must write the id maps and attach the
         * veth while the child waits half-way */
        s->pid = clone(lsbx_init_entry, (char *)stack + CHILD_STACK_SIZE,
                       CLONE_VM | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC |
                           CLONE_NEWNET | SIGCHLD,
                       &plan);
        if (s->pid < 0) {
            snprintf(err, errlen, "clone() of the sandbox failed: %s%s", strerror(errno),
                     errno == EPERM ? " (the local runtime needs root or CAP_SYS_ADMIN)" : "");
            s->pid = 0;
            goto fail;
        }
        s->is_child = true;
    }
    if ((rc = lcg_enter(&s->cg, s->pid, err, errlen)) != 0)
        goto fail; /* before the init may run anything: every process is counted */
    rc = AB_EIO;
    s->created_ms = ab_wall_ms();
    s->uid_base = plan.uid_base;
    close(errp[1]);
    errp[1] = -1;
    close(syncp[0]);
    syncp[0] = -1;
    if (!o->zygote)
        s->start_time = lsbx_proc_start_time(s->pid);

    /* a zygote's child makes its own namespaces first: 'r' once they exist
     * (else it failed: its report on errfd below names the step) */
    bool ready = !o->zygote;
    if (o->zygote) {
        char r = 0;
        if (wait_readable(syncp[1], ab_now_ms() + LSBX_SETUP_TIMEOUT_MS) != 0) {
            snprintf(err, errlen, "sandbox init did not make its namespaces within %d ms",
                     LSBX_SETUP_TIMEOUT_MS);
            goto fail;
        }
        ready = read(syncp[1], &r, 1) == 1 && r == 'r';
    }
    if (ready && o->egress && attach_egress(s, o, err, errlen) != 0)
        goto fail;
    /* The child's turn: it sets up its root and enters its user namespace
     * while this thread only waits. A child that failed makes send() fail
     * or closes the socket: its report on errfd below names the step. */
    if (ready && send(syncp[1], &c, 1, MSG_NOSIGNAL) == 1) {
        rc = map_child(s, syncp[1], plan.uid_base, err, errlen);
        if (rc == AB_ECLOSED)
            rc = AB_EIO; /* the report on errfd below names the failed step */
        else if (rc != 0)
            goto fail;
    }
    if (wait_readable(errp[0], ab_now_ms() + LSBX_SETUP_TIMEOUT_MS) != 0) {
        snprintf(err, errlen, "sandbox setup did not finish within %d ms", LSBX_SETUP_TIMEOUT_MS);
        goto fail;
    }
    n = read(errp[0], msg, sizeof(msg));
    /* EOF: the child exec'd or exited, and either way left its stack (the
     * kernel drops its old memory before closing its descriptors) */
    stack_done = n >= 0;
    if (n != 0) {
        snprintf(err, errlen, "sandbox setup failed while %s: %s",
                 n == (ssize_t)sizeof(msg) ? lsbx_step_name(msg[0]) : "starting",
                 n == (ssize_t)sizeof(msg) ? strerror(msg[1]) : "short report");
        goto fail;
    }
    if (!lsbx_is_alive(s)) {
        snprintf(err, errlen, "sandbox init or its program exited during setup");
        goto fail;
    }
    /* envd (pid 1) is the OOM killer's last choice in its cgroup: a hog, or
     * a writer filling the tmpfs, goes first; envd gives its commands the
     * ordinary score back. Written only now: before exec the init shared
     * the agent's memory, and the score is set for every process sharing it. */
    {
        char adj[64];
        int fd;
        snprintf(adj, sizeof(adj), "/proc/%d/oom_score_adj", (int)s->pid);
        fd = open(adj, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "-998", 4);
            close(fd);
        }
    }
    /* the caller may spawn at a low priority (pool.c); envd runs at the
     * ordinary one whatever the spawning thread's */
    if (setpriority(PRIO_PROCESS, (id_t)s->pid, 0) != 0) {
        snprintf(err, errlen, "cannot give the sandbox's envd the ordinary priority: %s",
                 strerror(errno));
        goto fail;
    }
    if ((rc = lsbx_state_write(s)) != 0) {
        snprintf(err, errlen, "cannot write the state record %s/state.rec: %s", s->dir,
                 strerror(errno));
        goto fail;
    }
    rc = 0;
    goto out;
fail:
    if (rc == 0)
        rc = AB_EIO;
    if (s->egress) { /* the veth would go with the namespace; not its slot's next owner's */
        char why[256];
        egress_netns_detach(o->egress, o->egress_slot, why, sizeof(why));
        s->egress = false;
    }
    if (s->pid > 0) {
        int64_t deadline = ab_now_ms() + LSBX_SETUP_TIMEOUT_MS;
        lsbx_kill(s);
        while (!lsbx_is_gone(s) && ab_now_ms() < deadline)
            poll(NULL, 0, 5);
        if (s->pid == 0)
            stack_done = true; /* reaped */
    } else {
        stack_done = true; /* never cloned */
    }
    if (made_cg) {
        lcg_kill_all(&s->cg);
        lcg_remove(&s->cg);
    }
    if (made_dir)
        remove_tree(o->dir);
    s->pid = 0;
out:
    for (i = 0; i < 2; i++) {
        if (errp[i] >= 0)
            close(errp[i]);
        if (syncp[i] >= 0)
            close(syncp[i]);
    }
    /* a child that may still run on it keeps it (a few pages, never reused) */
    if (stack && stack_done)
        munmap(stack, CHILD_STACK_SIZE);
    return rc;
}

/* In a child: a user namespace mapping base. 0 when the kernel allows it. */
static int try_userns(uint32_t base)
{
    int go[2] = {-1, -1}, up[2] = {-1, -1};
    char c = 0;
    pid_t pid;
    int st = 0, rc = -1;

    if (pipe2(go, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0)
        goto out;
    pid = raw_fork(0);
    if (pid < 0)
        goto out;
    if (pid == 0) {
        if (unshare(CLONE_NEWUSER) != 0)
            _exit(1);
        if (write(up[1], &c, 1) != 1)
            _exit(2);
        _exit(read(go[0], &c, 1) == 1 && c == 'm' ? 0 : 3); /* until mapped */
    }
    close(up[1]);
    up[1] = -1;
    if (wait_readable(up[0], ab_now_ms() + LSBX_SETUP_TIMEOUT_MS) == 0 && read(up[0], &c, 1) == 1)
        rc = write_id_maps(pid, base);
    c = rc == 0 ? 'm' : 'x';
    (void)!write(go[1], &c, 1);
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        rc = -1;
out:
    for (int i = 0; i < 2; i++) {
        if (go[i] >= 0)
            close(go[i]);
        if (up[i] >= 0)
            close(up[i]);
    }
    return rc;
}

int lsbx_check_host(uint32_t uid_base, char *err, size_t errlen)
{
    const struct sock_fprog *prog;
    char why[400], buf[64];
    struct lcg cg;
    struct lcg_limits lim = {.pids_max = 1};
    int fd;
    ssize_t n;

    uid_base = uid_base ? uid_base : LSBX_UID_BASE_DEFAULT;
    fd = open("/proc/sys/user/max_user_namespaces", O_RDONLY | O_CLOEXEC);
    n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0 || (buf[n] = '\0', atol(buf) <= 0) || try_userns(uid_base) != 0) {
        snprintf(err, errlen,
                 "cannot isolate sandboxes: user namespaces are not available (%s); enable "
                 "them (sysctl user.max_user_namespaces=10000, a kernel with CONFIG_USER_NS) and "
                 "run the agent as root",
                 n <= 0 ? "no /proc/sys/user/max_user_namespaces"
                        : "creating or mapping one failed");
        return AB_EDENIED;
    }
    if (prctl(PR_GET_SECCOMP, 0, 0, 0, 0) < 0 || lsec_program(&prog, why, sizeof(why)) != 0) {
        snprintf(err, errlen,
                 "cannot isolate sandboxes: no seccomp filter (%s); use a kernel with "
                 "CONFIG_SECCOMP_FILTER and install libseccomp2",
                 errno == EINVAL ? "the kernel lacks seccomp" : why);
        return AB_EDENIED;
    }
    snprintf(buf, sizeof(buf), "probe-%d", (int)getpid());
    if (lcg_create(buf, &lim, &cg, why, sizeof(why)) != 0) {
        snprintf(err, errlen, "cannot isolate sandboxes: %s", why);
        return AB_EDENIED;
    }
    lcg_remove(&cg);
    return 0;
}

char *lsbx_state_text(const struct lsbx *s)
{
    json_t *j;
    char *text;

    j = json_pack("{s:s, s:s, s:I, s:I, s:b, s:b, s:I, s:I}", "id", s->id, "token", s->token, "pid",
                  (json_int_t)s->pid, "start_time", (json_int_t)s->start_time, "internet",
                  s->internet, "egress", s->egress, "created_ms", (json_int_t)s->created_ms,
                  "uid_base", (json_int_t)s->uid_base);
    if (!j)
        return NULL;
    if (s->info)
        json_object_set(j, "info", s->info);
    text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return text;
}

int lsbx_state_write_text(const char *dir, const char *text)
{
    return lsbx_record_write(dir, text); /* state.c: in place, two generations */
}

int lsbx_state_write(const struct lsbx *s)
{
    char *text = lsbx_state_text(s);
    int rc;

    if (!text)
        return AB_ENOMEM;
    rc = lsbx_state_write_text(s->dir, text);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

int lsbx_state_read(const char *dir, struct lsbx *s)
{
    char path[LSBX_DIR_MAX + 32];
    json_error_t jerr;
    json_t *j, *info = NULL;
    const char *id = NULL, *token = NULL;
    json_int_t pid = 0, st = 0, created = 0, ubase = 0;
    int internet = 0, egress = 0;

    memset(s, 0, sizeof(*s));
    if (ab_strlcpy(s->dir, dir, sizeof(s->dir)) >= sizeof(s->dir))
        return AB_ELIMIT;
    snprintf(s->socket, sizeof(s->socket), "%s/run/envd.sock", dir);
    {
        char *text = NULL;
        size_t tlen = 0;
        int rc = lsbx_record_read(dir, &text, &tlen, NULL);
        if (rc == 0) {
            j = json_loadb(text, tlen, 0, &jerr);
            explicit_bzero(text, tlen);
            free(text);
            if (!j)
                return AB_EINVAL;
        } else {
            /* a record of an agent from before state.rec */
            snprintf(path, sizeof(path), "%s/state.json", dir);
            j = json_load_file(path, 0, &jerr);
            if (!j)
                return access(path, F_OK) == 0 || rc != AB_ENOENT ? AB_EINVAL : AB_ENOENT;
        }
    }
    if (json_unpack(j, "{s:s, s?s, s:I, s:I, s?b, s?b, s?I, s?o, s?I}", "id", &id, "token", &token,
                    "pid", &pid, "start_time", &st, "internet", &internet, "egress", &egress,
                    "created_ms", &created, "info", &info, "uid_base", &ubase) != 0 ||
        !id_is_valid(id) || pid <= 0 || pid > INT32_MAX || ubase < 0 || ubase > UINT32_MAX) {
        json_decref(j);
        return AB_EINVAL;
    }
    ab_strlcpy(s->id, id, sizeof(s->id));
    if (token)
        ab_strlcpy(s->token, token, sizeof(s->token));
    s->pid = (pid_t)pid;
    s->start_time = (uint64_t)st;
    s->internet = internet;
    s->egress = egress;
    s->created_ms = created;
    s->uid_base = (uint32_t)ubase; /* 0: a record from before per-sandbox slices */
    s->info = info ? json_incref(info) : NULL;
    json_decref(j);
    {
        char why[256];
        if (lcg_locate(s->id, &s->cg, why, sizeof(why)) != 0)
            memset(&s->cg, 0, sizeof(s->cg));
    }
    return 0;
}

bool lsbx_is_alive(const struct lsbx *s)
{
    uint64_t st = lsbx_proc_start_time(s->pid);

    return st != 0 && st == s->start_time;
}

int lsbx_lock_socket(const struct lsbx *s)
{
    char run[LSBX_DIR_MAX + 8];
    struct stat st;
    int fd;
    int rc = 0;

    snprintf(run, sizeof(run), "%s/run", s->dir);
    fd = open(run, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return AB_EIO;
    if (fchown(fd, 0, 0) != 0 || fchmod(fd, 0755) != 0)
        rc = AB_EIO;
    else if (fstatat(fd, "envd.sock", &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISSOCK(st.st_mode))
        rc = AB_EDENIED; /* something else than envd's socket: never connect to it */
    close(fd);
    return rc;
}

bool lsbx_socket_answers(const struct lsbx *s)
{
    struct sockaddr_un sa;
    struct stat st;
    int fd;
    bool ok;

    if (lstat(s->socket, &st) != 0 || !S_ISSOCK(st.st_mode))
        return false;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (ab_strlcpy(sa.sun_path, s->socket, sizeof(sa.sun_path)) >= sizeof(sa.sun_path))
        return false;
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return false;
    ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 || errno == EAGAIN;
    close(fd);
    return ok;
}

void lsbx_kill(struct lsbx *s)
{
    /* A reused pid belongs to someone else: only signal the process we started. */
    if (s->pid > 0 && (s->is_child || lsbx_is_alive(s)))
        kill(s->pid, SIGKILL);
    /* anything of the sandbox that escaped the pid namespace's end */
    lcg_kill_all(&s->cg);
}

static bool proc_gone(pid_t *pid, uint64_t start, bool child)
{
    if (*pid <= 0)
        return true;
    if (child) {
        pid_t r = waitpid(*pid, NULL, WNOHANG);
        if (r == *pid || (r < 0 && errno == ECHILD)) {
            *pid = 0;
            return true;
        }
        return false;
    }
    /* gone (or a zombie) has no start time; another start time is a reused pid */
    uint64_t now = lsbx_proc_start_time(*pid);
    if (now == 0 || now != start) {
        *pid = 0;
        return true;
    }
    return false;
}

bool lsbx_is_gone(struct lsbx *s)
{
    return proc_gone(&s->pid, s->start_time, s->is_child) && lcg_is_empty(&s->cg);
}

void lsbx_release(struct lsbx *s)
{
    json_decref(s->info);
    s->info = NULL;
}

int lsbx_destroy(struct lsbx *s, int timeout_ms)
{
    int64_t deadline = ab_now_ms() + timeout_ms;
    int rc;

    lsbx_kill(s);
    while (!lsbx_is_gone(s)) {
        if (ab_now_ms() >= deadline)
            return AB_ETIMEOUT;
        poll(NULL, 0, 2);
    }
    rc = lsbx_remove_dir(s);
    lsbx_release(s);
    return rc;
}
