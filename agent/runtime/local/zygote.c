/* The envd zygote (zygote.h): the agent's client and envd's server. */
#include "agent/runtime/local/zygote.h"

#include "agentbox/common.h"
#include "agentbox/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define LZY_MAGIC 0x617a7931u /* "azy1" */
#define LZY_TIMEOUT_MS 5000
#define LZY_FD 3 /* the zygote's end of the socket, in the zygote */

struct hello {
    uint32_t magic;
    uint32_t len; /* instructions */
    struct sock_filter insns[BPF_MAXINSNS];
};

struct answer {
    uint32_t magic;
    int32_t pid; /* > 0, or 0 with err */
    int32_t err; /* an errno */
};

/* ---- the agent's side ---------------------------------------------------------------- */

struct lzy {
    pthread_mutex_t mu;
    int fd;
    pid_t pid;
    char program[LSBX_DIR_MAX];
    struct hello hello;
    size_t hello_len;
};

/* Waits for one answer of the zygote: 0, or AB_ETIMEOUT / AB_ECLOSED. */
static int read_answer(int fd, struct answer *a)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int64_t deadline = ab_now_ms() + LZY_TIMEOUT_MS;

    for (;;) {
        int64_t left = deadline - ab_now_ms();
        if (left <= 0)
            return AB_ETIMEOUT;
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return r == 0 ? AB_ETIMEOUT : AB_EIO;
        ssize_t n = recv(fd, a, sizeof(*a), 0);
        if (n < 0 && errno == EINTR)
            continue;
        return n == (ssize_t)sizeof(*a) && a->magic == LZY_MAGIC ? 0 : AB_ECLOSED;
    }
}

static void stop(struct lzy *z)
{
    if (z->fd >= 0)
        close(z->fd); /* EOF: the zygote exits */
    z->fd = -1;
    if (z->pid > 0) {
        int64_t deadline = ab_now_ms() + 1000;
        while (waitpid(z->pid, NULL, WNOHANG) == 0) {
            if (ab_now_ms() >= deadline) {
                kill(z->pid, SIGKILL);
                waitpid(z->pid, NULL, 0);
                break;
            }
            poll(NULL, 0, 2);
        }
    }
    z->pid = 0;
}

/* Starts the program as a zygote and gives it the filter. Under z->mu. */
static int start(struct lzy *z, char *err, size_t errlen)
{
    /* nothing of the agent's environment: the zygote's memory is every
     * sandbox's (zygote.h). A sandbox's /proc/1/environ shows this block
     * (its start's), so it is the sandboxes' own: PATH and HOME. */
    static char *const envp[] = {LSBX_ENV_PATH, LSBX_ENV_HOME, NULL};
    char fdarg[16];
    char *argv[] = {z->program, LZY_FLAG, fdarg, NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    sigset_t none, all;
    struct answer a;
    int sv[2], rc;

    snprintf(fdarg, sizeof(fdarg), "%d", LZY_FD);
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        snprintf(err, errlen, "cannot start the envd zygote: socketpair: %s", strerror(errno));
        return AB_EIO;
    }
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], LZY_FD);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_init(&at);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    rc = posix_spawn(&z->pid, z->program, &fa, &at, argv, envp);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(sv[1]);
    z->fd = sv[0];
    if (rc != 0) {
        z->pid = 0;
        stop(z);
        snprintf(err, errlen, "cannot start the envd zygote %s: %s", z->program, strerror(rc));
        return AB_EIO;
    }
    if (send(z->fd, &z->hello, z->hello_len, MSG_NOSIGNAL) != (ssize_t)z->hello_len ||
        (rc = read_answer(z->fd, &a)) != 0 || a.pid != (int32_t)z->pid) {
        snprintf(err, errlen,
                 "%s did not answer as an envd zygote (%s %s %d) within %d ms: it must be an "
                 "agentbox-envd",
                 z->program, z->program, LZY_FLAG, LZY_FD, LZY_TIMEOUT_MS);
        stop(z);
        return AB_EIO;
    }
    return 0;
}

int lzy_start(const char *program, const struct sock_fprog *filter, struct lzy **out, char *err,
              size_t errlen)
{
    struct lzy *z;
    int rc;

    *out = NULL;
    if (!filter || filter->len == 0 || filter->len > BPF_MAXINSNS) {
        snprintf(err, errlen, "the envd zygote needs a seccomp filter of 1-%d instructions",
                 BPF_MAXINSNS);
        return AB_EINVAL;
    }
    if (!(z = calloc(1, sizeof(*z)))) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    if (ab_strlcpy(z->program, program, sizeof(z->program)) >= sizeof(z->program)) {
        snprintf(err, errlen, "envd path %s is too long", program);
        free(z);
        return AB_EINVAL;
    }
    pthread_mutex_init(&z->mu, NULL);
    z->fd = -1;
    z->hello.magic = LZY_MAGIC;
    z->hello.len = filter->len;
    memcpy(z->hello.insns, filter->filter, filter->len * sizeof(struct sock_filter));
    z->hello_len = offsetof(struct hello, insns) + filter->len * sizeof(struct sock_filter);
    if ((rc = start(z, err, errlen)) != 0) {
        pthread_mutex_destroy(&z->mu);
        free(z);
        return rc;
    }
    *out = z;
    return 0;
}

/* One request on a live zygote: 0, AB_ECLOSED (the zygote is gone: start
 * another), or another error with err set. Under z->mu. */
static int request(struct lzy *z, const struct lsbx_plan *plan, int errfd, int syncfd, pid_t *pid,
                   char *err, size_t errlen)
{
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)plan, .iov_len = sizeof(*plan)};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    int fds[2] = {errfd, syncfd}, rc;
    struct answer a;

    memset(ctl.buf, 0, sizeof(ctl.buf));
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(fds));
    memcpy(CMSG_DATA(c), fds, sizeof(fds));
    if (z->fd < 0 || sendmsg(z->fd, &msg, MSG_NOSIGNAL) != (ssize_t)sizeof(*plan))
        return AB_ECLOSED;
    if ((rc = read_answer(z->fd, &a)) != 0) {
        if (rc == AB_ETIMEOUT) {
            snprintf(err, errlen, "the envd zygote (pid %d) did not answer within %d ms",
                     (int)z->pid, LZY_TIMEOUT_MS);
            stop(z); /* its next answer would be this one's */
        }
        return rc == AB_ETIMEOUT ? AB_ETIMEOUT : AB_ECLOSED;
    }
    if (a.pid <= 0) {
        snprintf(err, errlen, "the envd zygote (pid %d) could not fork the sandbox: %s",
                 (int)z->pid, strerror(a.err));
        return AB_EIO;
    }
    *pid = a.pid;
    return 0;
}

int lzy_spawn(struct lzy *z, const struct lsbx_plan *plan, int errfd, int syncfd, pid_t *pid,
              char *err, size_t errlen)
{
    int rc;

    *pid = 0;
    pthread_mutex_lock(&z->mu);
    rc = request(z, plan, errfd, syncfd, pid, err, errlen);
    if (rc == AB_ECLOSED) { /* died (OOM kill, crash): once more, on a new one */
        char why[256], was[16];
        pid_t old = z->pid;
        snprintf(was, sizeof(was), "%d", (int)old);
        LOG_WARN("the envd zygote is gone; starting another", "pid", was);
        stop(z);
        if ((rc = start(z, why, sizeof(why))) == 0)
            rc = request(z, plan, errfd, syncfd, pid, err, errlen);
        else
            snprintf(err, errlen,
                     "the envd zygote (pid %d) is gone and cannot be started again: %s", (int)old,
                     why);
        if (rc == AB_ECLOSED)
            snprintf(err, errlen, "the envd zygote (pid %d) closed its socket", (int)z->pid);
    }
    pthread_mutex_unlock(&z->mu);
    return rc == 0 ? 0 : rc == AB_ETIMEOUT ? AB_ETIMEOUT : AB_EIO;
}

pid_t lzy_pid(struct lzy *z)
{
    pthread_mutex_lock(&z->mu);
    pid_t pid = z->pid;
    pthread_mutex_unlock(&z->mu);
    return pid;
}

void lzy_free(struct lzy *z)
{
    if (!z)
        return;
    stop(z);
    pthread_mutex_destroy(&z->mu);
    free(z);
}

/* ---- envd's side --------------------------------------------------------------------- */

/* Static, not on the stack: the request is wiped after each fork, and a
 * stack frame's copy would live on in every later child. */
static struct hello g_hello;
static struct sock_fprog g_filter;
static struct lsbx_plan g_plan;

static void reap(int sfd)
{
    struct signalfd_siginfo si;

    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        ;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

/* A plan the child can unpack: argc + envc strings, each ended, within
 * strings_len (the agent is trusted; a plan cut or garbled in transit
 * must still not make a child read past its buffer). */
static bool plan_ok(const struct lsbx_plan *p)
{
    unsigned ends = 0;

    if (p->argc == 0 || p->argc > LSBX_ARGV_MAX || p->envc > LSBX_ENV_MAX || p->strings_len == 0 ||
        p->strings_len > sizeof(p->strings))
        return false;
    for (uint32_t i = 0; i < p->strings_len; i++)
        ends += p->strings[i] == '\0';
    return ends == (unsigned)p->argc + p->envc && p->strings[p->strings_len - 1] == '\0';
}

/* One fork for the plan in g_plan: the child's pid, or -errno. */
static pid_t fork_one(int fd, int sfd, int own_pidns, const int fds[2], int (*run)(int, char **))
{
    pid_t pid;
    int e;

    g_plan.seccomp = &g_filter;
    g_plan.errfd = fds[0];
    g_plan.syncfd = fds[1];
    g_plan.parent_fds[0] = fd;
    g_plan.parent_fds[1] = sfd;
    /* the next child is pid 1 of a pid namespace of its own; then back, so
     * that the next unshare starts from this process's own namespace */
    if (unshare(CLONE_NEWPID) != 0)
        return -errno;
    pid = fork();
    e = errno;
    if (pid == 0) {
        close(own_pidns);
        lsbx_init_run(&g_plan, run);
    }
    if (setns(own_pidns, CLONE_NEWPID) != 0) {
        fprintf(stderr, "agentbox-envd zygote: cannot return to its pid namespace: %s\n",
                strerror(errno));
        _exit(1); /* every later sandbox would share one: the agent starts a new zygote */
    }
    return pid > 0 ? pid : -e;
}

int lzy_serve(int fd, int (*run)(int argc, char **argv))
{
    union {
        char buf[CMSG_SPACE(2 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    sigset_t chld;
    int sfd, own_pidns;
    ssize_t n;

    if (fd != LZY_FD) {
        fprintf(stderr, "agentbox-envd: %s takes the descriptor %d\n", LZY_FLAG, LZY_FD);
        return 2;
    }
    (void)prctl(PR_SET_NAME, "envd-zygote", 0, 0, 0);
    /* whatever else the agent left open is not a sandbox's business */
    syscall(SYS_close_range, (unsigned)LZY_FD + 1, ~0U, 0U);
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    sfd = signalfd(-1, &chld, SFD_NONBLOCK | SFD_CLOEXEC);
    own_pidns = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    n = recv(fd, &g_hello, sizeof(g_hello), 0);
    if (sfd < 0 || own_pidns < 0 || n < (ssize_t)offsetof(struct hello, insns) ||
        g_hello.magic != LZY_MAGIC || g_hello.len == 0 || g_hello.len > BPF_MAXINSNS ||
        (size_t)n != offsetof(struct hello, insns) + g_hello.len * sizeof(struct sock_filter)) {
        fprintf(stderr, "agentbox-envd zygote: no valid hello from the agent\n");
        return 2;
    }
    g_filter.len = (unsigned short)g_hello.len;
    g_filter.filter = g_hello.insns;
    {
        struct answer a = {.magic = LZY_MAGIC, .pid = (int32_t)getpid()};
        if (send(fd, &a, sizeof(a), MSG_NOSIGNAL) != (ssize_t)sizeof(a))
            return 1;
    }
    for (;;) {
        struct pollfd pfd[2] = {{.fd = fd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        struct iovec iov = {.iov_base = &g_plan, .iov_len = sizeof(g_plan)};
        struct msghdr msg = {.msg_iov = &iov,
                             .msg_iovlen = 1,
                             .msg_control = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf)};
        struct answer a = {.magic = LZY_MAGIC};
        int fds[2] = {-1, -1}, nfds = 0;

        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return 1;
        }
        if (pfd[1].revents)
            reap(sfd);
        if (!pfd[0].revents)
            continue;
        n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
        if (n == 0 || (n < 0 && errno != EINTR))
            return 0; /* the agent is gone or stopped us; the sandboxes live on */
        if (n < 0)
            continue;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                for (size_t i = 0; i < k; i++) {
                    int x;
                    memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                    if (nfds < 2)
                        fds[nfds++] = x;
                    else
                        close(x);
                }
            }
        if (n != (ssize_t)sizeof(g_plan) || nfds != 2 ||
            (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || !plan_ok(&g_plan)) {
            a.err = EINVAL;
        } else {
            pid_t pid = fork_one(fd, sfd, own_pidns, fds, run);
            if (pid > 0)
                a.pid = (int32_t)pid;
            else
                a.err = -pid;
        }
        for (int i = 0; i < nfds; i++)
            close(fds[i]);
        explicit_bzero(&g_plan, sizeof(g_plan)); /* the next child sees none of it */
        if (send(fd, &a, sizeof(a), MSG_NOSIGNAL) != (ssize_t)sizeof(a))
            return 0;
    }
}
