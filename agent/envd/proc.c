/* process.Process: children exec'd directly (no shell wrapper, no
 * oom_score_adj/nice priming), their pipes or PTY watched on the loop, their
 * output pushed to every subscribed stream, their exit reaped by signalfd.
 *
 * Backpressure: when any subscriber's pending output passes the high water
 * mark, reading the child's output pauses until that subscriber drains, so
 * each subscriber buffers at most HTTP_STREAM_HIGH_WATER plus one chunk. */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agent/envd/envd.h"
#include "agent/envd/event.h"
#include "agent/envd/fdwatch.h"

#define PIPE_READ_CHUNK (32 * 1024)
#define PTY_READ_CHUNK (16 * 1024)
#define EXIT_GRACE_MS 200 /* after exit, wait this long for pipe EOF */
#define FINAL_DRAIN_MAX (1024 * 1024)
#define ARGS_MAX 4096
#define ENVS_MAX 4096

extern char **environ;

struct envd_sub {
    struct envd_stream s;
    struct envd_sub *next;
    struct envd_proc *p;
    bool congested;
};

struct envd_proc {
    struct envd_proc *next;
    struct envd *e;
    pid_t pid;
    char *tag;
    json_t *config;
    bool pty;
    bool has_stdin;
    bool close_stdin_after_flush;
    struct envd_fd *out_w;
    struct envd_fd *err_w;
    struct envd_fd *pty_w;
    struct envd_fd *in_w;
    uint8_t *in_buf;
    size_t in_len;
    bool exited;
    int wstatus;
    bool ended;
    struct envd_sub *subs;
    int nsubs;
    int congested;
    bool paused;
    struct loop_timer deadline;
    struct loop_timer grace;
    struct loop_timer retain;
};

static struct envd_fd *g_sigw;

/* ---- output fan-out ------------------------------------------------------ */

static void set_paused(struct envd_proc *p, bool paused)
{
    if (p->paused == paused)
        return;
    p->paused = paused;
    if (p->out_w != NULL)
        envd_fd_pause_read(p->out_w, paused);
    if (p->err_w != NULL)
        envd_fd_pause_read(p->err_w, paused);
    if (p->pty_w != NULL)
        envd_fd_pause_read(p->pty_w, paused);
}

static void sub_unlink(struct envd_sub *sub)
{
    struct envd_proc *p = sub->p;

    for (struct envd_sub **pp = &p->subs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == sub) {
            *pp = sub->next;
            p->nsubs--;
            break;
        }
    }
    if (sub->congested && --p->congested == 0)
        set_paused(p, false);
    free(sub);
}

static void sub_gone(struct envd_stream *s)
{
    /* The client went away: the process lives on (e2b-protocol.md §2.5). */
    sub_unlink(s->owner);
}

static void sub_drain(struct envd_stream *s)
{
    struct envd_sub *sub = s->owner;

    if (sub->congested && !envd_stream_is_congested(s)) {
        sub->congested = false;
        if (--sub->p->congested == 0)
            set_paused(sub->p, false);
    }
}

static void broadcast(struct envd_proc *p, json_t *ev)
{
    if (ev == NULL)
        return;
    for (struct envd_sub *sub = p->subs; sub != NULL; sub = sub->next) {
        envd_stream_send(&sub->s, json_incref(ev));
        if (!sub->congested && envd_stream_is_congested(&sub->s)) {
            sub->congested = true;
            if (p->congested++ == 0)
                set_paused(p, true);
        }
    }
    json_decref(ev);
}

static struct envd_sub *subscribe(struct envd_proc *p, struct envd_call *c)
{
    struct envd_sub *sub = calloc(1, sizeof(*sub));

    if (sub == NULL)
        return NULL;
    sub->p = p;
    sub->s.owner = sub;
    sub->s.on_gone = sub_gone;
    sub->s.on_drain = sub_drain;
    /* Start's Connect-Timeout-Ms is the process lifetime (see rpc_start);
     * Connect's bounds only its own stream. */
    if (envd_stream_open(&sub->s, c->e, c->ex, c->keepalive_ms,
                         strcmp(c->method, "Connect") == 0 ? c->timeout_ms : 0) != 0) {
        free(sub);
        return NULL;
    }
    sub->next = p->subs;
    p->subs = sub;
    p->nsubs++;
    return sub;
}

/* ---- lifecycle ----------------------------------------------------------- */

static void proc_free(struct envd_proc *p)
{
    struct envd *e = p->e;

    for (struct envd_proc **pp = &e->procs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == p) {
            *pp = p->next;
            e->nprocs--;
            break;
        }
    }
    loop_timer_cancel(&p->deadline);
    loop_timer_cancel(&p->grace);
    loop_timer_cancel(&p->retain);
    json_decref(p->config);
    free(p->tag);
    free(p->in_buf);
    free(p);
}

static void retain_expired(struct loop_timer *t)
{
    struct envd_proc *p = t->arg;

    /* Watches still closing hold p; free once they are gone. */
    if (p->out_w != NULL || p->err_w != NULL || p->pty_w != NULL || p->in_w != NULL) {
        loop_timer_start(p->e->loop, &p->retain, 1000, retain_expired, p);
        return;
    }
    proc_free(p);
}

static void finalize(struct envd_proc *p)
{
    json_t *end;

    if (p->ended)
        return;
    p->ended = true;
    loop_timer_cancel(&p->deadline);
    loop_timer_cancel(&p->grace);
    end = envd_ev_end(p->wstatus);
    while (p->subs != NULL) {
        struct envd_sub *sub = p->subs;
        if (end != NULL)
            envd_stream_send(&sub->s, json_incref(end));
        envd_stream_close(&sub->s, end != NULL ? NULL : "internal",
                          end != NULL ? NULL : "out of memory building the end event");
        sub_unlink(sub);
    }
    json_decref(end);
    if (p->in_w != NULL)
        envd_fd_close(p->in_w);
    p->in_len = 0;
    loop_timer_start(p->e->loop, &p->retain, ENVD_ENDED_KEEP_MS, retain_expired, p);
}

static void maybe_finalize(struct envd_proc *p)
{
    if (p->exited && p->out_w == NULL && p->err_w == NULL && p->pty_w == NULL)
        finalize(p);
}

/* Reads what is left in an output pipe after the child exited (bounded),
 * then closes it. */
static void final_drain(struct envd_proc *p, struct envd_fd *w, const char *kind)
{
    uint8_t buf[PIPE_READ_CHUNK];
    size_t total = 0;
    ssize_t n;

    while (total < FINAL_DRAIN_MAX && (n = read(envd_fd_get(w), buf, sizeof(buf))) > 0) {
        broadcast(p, envd_ev_data(kind, buf, (size_t)n));
        total += (size_t)n;
    }
    envd_fd_close(w);
}

static void grace_expired(struct loop_timer *t)
{
    struct envd_proc *p = t->arg;

    /* A background grandchild may keep the pipes open: do not wait for it. */
    if (p->out_w != NULL)
        final_drain(p, p->out_w, "stdout");
    if (p->err_w != NULL)
        final_drain(p, p->err_w, "stderr");
    if (p->pty_w != NULL)
        final_drain(p, p->pty_w, "pty");
}

static void on_exit_status(struct envd_proc *p, int status)
{
    p->exited = true;
    p->wstatus = status;
    loop_timer_cancel(&p->deadline);
    if (p->out_w == NULL && p->err_w == NULL && p->pty_w == NULL)
        finalize(p);
    else
        loop_timer_start(p->e->loop, &p->grace, EXIT_GRACE_MS, grace_expired, p);
}

static int on_sigchld(struct envd_fd *w, enum envd_fd_event ev, void *arg)
{
    struct envd *e = arg;
    struct signalfd_siginfo si[8];
    int status;
    pid_t pid;

    if (ev == ENVD_FD_CLOSED) {
        g_sigw = NULL;
        return 0;
    }
    while (read(envd_fd_get(w), si, sizeof(si)) > 0)
        ;
    /* Reap every child, ours or (as pid 1 of a sandbox) orphans. */
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (struct envd_proc *p = e->procs; p != NULL; p = p->next) {
            if (p->pid == pid && !p->exited) {
                on_exit_status(p, status);
                break;
            }
        }
    }
    return 0;
}

/* ---- stdin --------------------------------------------------------------- */

static struct envd_fd *input_watch(struct envd_proc *p)
{
    return p->pty ? p->pty_w : p->in_w;
}

static void flush_stdin(struct envd_proc *p)
{
    struct envd_fd *w = input_watch(p);

    while (w != NULL && p->in_len > 0) {
        ssize_t n = write(envd_fd_get(w), p->in_buf, p->in_len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN)
                envd_fd_want_write(w);
            else
                p->in_len = 0; /* reader gone: drop */
            break;
        }
        memmove(p->in_buf, p->in_buf + n, p->in_len - (size_t)n);
        p->in_len -= (size_t)n;
    }
    if (p->in_len == 0 && p->close_stdin_after_flush && p->in_w != NULL) {
        envd_fd_close(p->in_w);
        p->close_stdin_after_flush = false;
    }
}

static int on_stdin(struct envd_fd *w, enum envd_fd_event ev, void *arg)
{
    struct envd_proc *p = arg;

    if (ev == ENVD_FD_CLOSED) {
        p->in_w = NULL;
        p->in_len = 0;
        return 0;
    }
    if (ev == ENVD_FD_WRITE)
        flush_stdin(p);
    return 0;
}

static int on_output(struct envd_fd *w, enum envd_fd_event ev, void *arg)
{
    struct envd_proc *p = arg;
    uint8_t buf[PIPE_READ_CHUNK];
    const char *kind = w == p->out_w ? "stdout" : w == p->err_w ? "stderr" : "pty";
    ssize_t n;

    if (ev == ENVD_FD_CLOSED) {
        if (w == p->out_w)
            p->out_w = NULL;
        else if (w == p->err_w)
            p->err_w = NULL;
        else if (w == p->pty_w)
            p->pty_w = NULL;
        if (!p->e->stopping)
            maybe_finalize(p);
        return 0;
    }
    if (ev == ENVD_FD_WRITE) {
        flush_stdin(p);
        return 0;
    }
    n = read(envd_fd_get(w), buf, p->pty ? PTY_READ_CHUNK : PIPE_READ_CHUNK);
    if (n > 0) {
        broadcast(p, envd_ev_data(kind, buf, (size_t)n));
        return 0;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    return -1; /* EOF, or EIO once a PTY's last slave closed */
}

/* ---- spawn --------------------------------------------------------------- */

struct spawn_req {
    const char *cmd;
    char **argv;
    char **envp;
    const char *cwd;
    const struct envd_user *user;
    bool use_stdin;
    bool pty;
    struct winsize ws;
};

struct spawn_fail {
    int stage; /* 1 identity, 2 cwd, 3 exec, 4 tty */
    int err;
};

static void child_fail(int fd, int stage)
{
    struct spawn_fail f = {stage, errno};
    ssize_t rc = write(fd, &f, sizeof(f));

    (void)rc;
    _exit(127);
}

/* Runs in the forked child: only async-signal-safe calls. */
static void child_exec(const struct spawn_req *r, int in_fd, int out_fd, int err_fd, int slave,
                       int status_fd)
{
    sigset_t none;

    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    for (int s = 1; s < NSIG; s++) {
        if (s != SIGKILL && s != SIGSTOP)
            signal(s, SIG_DFL);
    }
    setsid();
    if (slave >= 0) {
        if (ioctl(slave, TIOCSCTTY, 0) != 0)
            child_fail(status_fd, 4);
        in_fd = out_fd = err_fd = slave;
    }
    if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        child_fail(status_fd, 3);
    if (close_range(3, (unsigned)status_fd - 1, 0) != 0 ||
        close_range((unsigned)status_fd + 1, ~0U, 0) != 0) {
        for (int fd = 3; fd < 65536; fd++) {
            if (fd != status_fd)
                close(fd);
        }
    }
    /* The runtime makes envd the last choice of an OOM kill in its sandbox
     * (oom_score_adj -998, inherited); a command is an ordinary candidate
     * again. Raising one's own score needs no privilege. */
    {
        int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            (void)!write(fd, "0", 1);
            close(fd);
        }
    }
    if (envd_user_needs_switch(r->user)) {
        if (setgroups((size_t)r->user->ngroups, r->user->groups) != 0 ||
            setgid(r->user->gid) != 0 || setuid(r->user->uid) != 0)
            child_fail(status_fd, 1);
    }
    if (chdir(r->cwd) != 0)
        child_fail(status_fd, 2);
    environ = r->envp;
    execvp(r->cmd, r->argv);
    child_fail(status_fd, 3);
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Forks and execs; on success the parent ends of the pipes (or the PTY
 * master) are returned, -1 for those not used. */
static int spawn(const struct spawn_req *r, pid_t *pid_out, int *in_fd, int *out_fd, int *err_fd,
                 int *pty_fd, char *err, size_t errlen)
{
    int in_p[2] = {-1, -1}, out_p[2] = {-1, -1}, err_p[2] = {-1, -1}, st_p[2] = {-1, -1};
    int master = -1, slave = -1, devnull = -1;
    struct spawn_fail f;
    ssize_t n;
    pid_t pid;
    int rc = AB_EIO;

    *in_fd = *out_fd = *err_fd = *pty_fd = -1;
    if (pipe2(st_p, O_CLOEXEC) != 0)
        goto sys_fail;
    if (r->pty) {
        struct winsize ws = r->ws;
        if (openpty(&master, &slave, NULL, NULL, &ws) != 0)
            goto sys_fail;
        fcntl(master, F_SETFD, FD_CLOEXEC);
        fcntl(slave, F_SETFD, FD_CLOEXEC);
    } else {
        if (pipe2(out_p, O_CLOEXEC) != 0 || pipe2(err_p, O_CLOEXEC) != 0)
            goto sys_fail;
        if (r->use_stdin ? pipe2(in_p, O_CLOEXEC) != 0
                         : (devnull = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0)
            goto sys_fail;
    }
    pid = fork();
    if (pid < 0)
        goto sys_fail;
    if (pid == 0)
        child_exec(r, r->use_stdin ? in_p[0] : devnull, out_p[1], err_p[1], slave, st_p[1]);
    close_fd(&st_p[1]);
    close_fd(&slave);
    close_fd(&in_p[0]);
    close_fd(&out_p[1]);
    close_fd(&err_p[1]);
    close_fd(&devnull);
    do {
        n = read(st_p[0], &f, sizeof(f));
    } while (n < 0 && errno == EINTR);
    close_fd(&st_p[0]);
    if (n == (ssize_t)sizeof(f)) {
        int status;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        if (f.stage == 3)
            snprintf(err, errlen, "cannot run '%s': %s", r->cmd, strerror(f.err));
        else if (f.stage == 2)
            snprintf(err, errlen, "cannot enter cwd '%s': %s", r->cwd, strerror(f.err));
        else if (f.stage == 1)
            snprintf(err, errlen, "cannot switch to user '%s': %s", r->user->name, strerror(f.err));
        else
            snprintf(err, errlen, "cannot set up the PTY: %s", strerror(f.err));
        rc = f.stage == 3 ? AB_ENOENT : AB_EIO;
        goto fail;
    }
    *pid_out = pid;
    *in_fd = in_p[1];
    *out_fd = out_p[0];
    *err_fd = err_p[0];
    *pty_fd = master;
    return 0;

sys_fail:
    snprintf(err, errlen, "cannot start the process: %s", strerror(errno));
fail:
    close_fd(&st_p[0]);
    close_fd(&st_p[1]);
    close_fd(&in_p[0]);
    close_fd(&in_p[1]);
    close_fd(&out_p[0]);
    close_fd(&out_p[1]);
    close_fd(&err_p[0]);
    close_fd(&err_p[1]);
    close_fd(&master);
    close_fd(&slave);
    close_fd(&devnull);
    return rc;
}

/* ---- request helpers ------------------------------------------------------ */

static struct envd_proc *find_proc(struct envd *e, json_t *req, char *what, size_t len)
{
    json_t *sel = json_object_get(req, "process");
    json_t *pid = json_object_get(sel, "pid");
    json_t *tag = json_object_get(sel, "tag");
    json_int_t want = -1;

    if (json_is_string(pid)) /* uint32 may come as a string in proto3 JSON */
        want = strtoll(json_string_value(pid), NULL, 10);
    else if (json_is_integer(pid))
        want = json_integer_value(pid);
    if (want > 0) {
        snprintf(what, len, "process with pid %lld", (long long)want);
        for (struct envd_proc *p = e->procs; p != NULL; p = p->next) {
            if (p->pid == want)
                return p;
        }
        return NULL;
    }
    if (json_is_string(tag)) {
        snprintf(what, len, "process with tag '%.64s'", json_string_value(tag));
        for (struct envd_proc *p = e->procs; p != NULL; p = p->next) {
            if (p->tag != NULL && strcmp(p->tag, json_string_value(tag)) == 0 && !p->ended)
                return p;
        }
        return NULL;
    }
    snprintf(what, len, "no process: field 'process' needs 'pid' or 'tag'");
    return NULL;
}

static void free_strv(char **v)
{
    for (size_t i = 0; v != NULL && v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

static char **build_env(struct envd *e, const struct envd_user *u, json_t *envs)
{
    json_t *all = json_object();
    const char *path = getenv("PATH");
    const char *k;
    json_t *v;
    char **out;
    size_t i = 0;

    if (all == NULL)
        return NULL;
    json_object_set_new(all, "PATH",
                        json_string(path != NULL ? path
                                                 : "/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                                                   "/usr/bin:/sbin:/bin"));
    json_object_set_new(all, "HOME", json_string(u->home));
    json_object_set_new(all, "USER", json_string(u->name));
    json_object_set_new(all, "LOGNAME", json_string(u->name));
    if (e->env_vars != NULL)
        json_object_update(all, e->env_vars);
    if (envs != NULL)
        json_object_update(all, envs);
    out = calloc(json_object_size(all) + 1, sizeof(char *));
    if (out == NULL)
        goto done;
    json_object_foreach(all, k, v)
    {
        if (asprintf(&out[i], "%s=%s", k, json_string_value(v)) < 0) {
            out[i] = NULL;
            free_strv(out);
            out = NULL;
            goto done;
        }
        i++;
    }
done:
    json_decref(all);
    return out;
}

static int check_strings(json_t *v, bool object, size_t max, const char *field, char *err,
                         size_t errlen)
{
    const char *k;
    json_t *x;
    size_t i;

    if (v == NULL || json_is_null(v))
        return 0;
    if (object ? !json_is_object(v) : !json_is_array(v)) {
        snprintf(err, errlen, "field '%s' must be %s of strings", field,
                 object ? "an object" : "an array");
        return AB_EINVAL;
    }
    if ((object ? json_object_size(v) : json_array_size(v)) > max) {
        snprintf(err, errlen, "field '%s' has more than %zu entries", field, max);
        return AB_ELIMIT;
    }
    if (object) {
        json_object_foreach(v, k, x)
        {
            if (!json_is_string(x) || k[0] == '\0' || strchr(k, '=') != NULL) {
                snprintf(err, errlen, "field '%s' must map names without '=' to strings", field);
                return AB_EINVAL;
            }
        }
    } else {
        json_array_foreach(v, i, x)
        {
            if (!json_is_string(x)) {
                snprintf(err, errlen, "field '%s' must hold only strings", field);
                return AB_EINVAL;
            }
        }
    }
    return 0;
}

static void deadline_expired(struct loop_timer *t)
{
    struct envd_proc *p = t->arg;

    if (!p->exited && kill(-p->pid, SIGKILL) != 0)
        kill(p->pid, SIGKILL);
}

/* ---- methods ---------------------------------------------------------------- */

static void rpc_start(struct envd_call *c)
{
    struct envd *e = c->e;
    json_t *pj = json_object_get(c->req, "process");
    json_t *args = json_object_get(pj, "args");
    json_t *envs = json_object_get(pj, "envs");
    json_t *cwdj = json_object_get(pj, "cwd");
    json_t *tagj = json_object_get(c->req, "tag");
    json_t *stdinj = json_object_get(c->req, "stdin");
    json_t *ptyj = json_object_get(c->req, "pty");
    const char *cmd = json_string_value(json_object_get(pj, "cmd"));
    struct spawn_req r;
    char cwd[PATH_MAX];
    char err[512];
    char **argv = NULL;
    char **envp = NULL;
    struct envd_proc *p = NULL;
    struct stat st;
    int in_fd, out_fd, err_fd, pty_fd;
    size_t i;
    json_t *x;
    pid_t pid;
    int rc;

    memset(&r, 0, sizeof(r));
    if (!json_is_object(pj) || cmd == NULL || cmd[0] == '\0') {
        envd_rpc_error(c, "invalid_argument", "field 'process.cmd' is required");
        return;
    }
    if (check_strings(args, false, ARGS_MAX, "process.args", err, sizeof(err)) != 0 ||
        check_strings(envs, true, ENVS_MAX, "process.envs", err, sizeof(err)) != 0) {
        envd_rpc_error(c, "invalid_argument", "%s", err);
        return;
    }
    if (cwdj != NULL && !json_is_null(cwdj) && !json_is_string(cwdj)) {
        envd_rpc_error(c, "invalid_argument", "field 'process.cwd' must be a string");
        return;
    }
    if (e->nprocs >= ENVD_PROCS_MAX) {
        envd_rpc_error(c, "resource_exhausted",
                       "%d processes are tracked already: wait for some to end or kill them",
                       ENVD_PROCS_MAX);
        return;
    }
    if (json_string_length(cwdj) > 0)
        rc = envd_path_resolve(json_string_value(cwdj), c->user.home, NULL, cwd, sizeof(cwd), err,
                               sizeof(err));
    else
        rc = envd_path_resolve(e->default_workdir, c->user.home, NULL, cwd, sizeof(cwd), err,
                               sizeof(err));
    if (rc != 0) {
        envd_rpc_error(c, "invalid_argument", "%s", err);
        return;
    }
    if (stat(cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        envd_rpc_error(c, "invalid_argument", "cwd '%s' does not exist", cwd);
        return;
    }
    argv = calloc(json_array_size(args) + 2, sizeof(char *));
    envp = build_env(e, &c->user, envs);
    if (argv == NULL || envp == NULL)
        goto nomem;
    argv[0] = strdup(cmd);
    json_array_foreach(args, i, x) argv[i + 1] = strdup(json_string_value(x));
    for (i = 0; i <= json_array_size(args); i++) {
        if (argv[i] == NULL)
            goto nomem;
    }
    r.cmd = cmd;
    r.argv = argv;
    r.envp = envp;
    r.cwd = cwd;
    r.user = &c->user;
    r.use_stdin = !json_is_false(stdinj); /* absent means true (compatibility) */
    r.pty = json_is_object(ptyj);
    if (r.pty) {
        json_t *size = json_object_get(ptyj, "size");
        json_int_t cols = json_integer_value(json_object_get(size, "cols"));
        json_int_t rows = json_integer_value(json_object_get(size, "rows"));
        r.ws.ws_col = (unsigned short)(cols > 0 && cols < 10000 ? cols : 80);
        r.ws.ws_row = (unsigned short)(rows > 0 && rows < 10000 ? rows : 24);
        r.use_stdin = true;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        goto nomem;
    rc = spawn(&r, &pid, &in_fd, &out_fd, &err_fd, &pty_fd, err, sizeof(err));
    if (rc != 0) {
        free(p);
        p = NULL;
        envd_rpc_error(c, rc == AB_ENOENT ? "invalid_argument" : "internal", "%s", err);
        goto out;
    }
    p->e = e;
    p->pid = pid;
    p->pty = r.pty;
    p->has_stdin = r.use_stdin;
    p->tag = json_is_string(tagj) ? strdup(json_string_value(tagj)) : NULL;
    p->config = json_pack("{s:s,s:o}", "cmd", cmd, "args",
                          args != NULL ? json_deep_copy(args) : json_array());
    if (p->config != NULL) {
        json_object_set_new(p->config, "envs", envs != NULL ? json_deep_copy(envs) : json_object());
        if (json_string_length(cwdj) > 0)
            json_object_set(p->config, "cwd", cwdj);
    }
    p->next = e->procs;
    e->procs = p;
    e->nprocs++;
    if (r.pty) {
        p->pty_w = envd_fd_watch(pty_fd, on_output, p);
    } else {
        p->out_w = envd_fd_watch(out_fd, on_output, p);
        p->err_w = envd_fd_watch(err_fd, on_output, p);
        if (in_fd >= 0)
            p->in_w = envd_fd_watch(in_fd, on_stdin, p);
    }
    LOG_DEBUG("process started", "cmd", cmd, "cwd", cwd, "user", c->user.name);
    if (c->timeout_ms > 0)
        loop_timer_start(e->loop, &p->deadline, c->timeout_ms, deadline_expired, p);
    {
        struct envd_sub *sub = subscribe(p, c);
        if (sub != NULL)
            envd_stream_send(&sub->s, envd_ev_start((uint32_t)pid));
        else
            http_abort(c->ex);
    }
    envd_call_free(c);
    /* Output or exit that raced the subscription is read from the loop later. */
    goto out;

nomem:
    envd_rpc_error(c, "resource_exhausted", "out of memory starting the process");
out:
    free_strv(argv);
    free_strv(envp);
}

static void rpc_connect(struct envd_call *c)
{
    char what[96];
    struct envd_proc *p = find_proc(c->e, c->req, what, sizeof(what));
    struct envd_sub *sub;

    if (p == NULL) {
        envd_rpc_error(c, "not_found", "%s not found", what);
        return;
    }
    if (!p->ended && p->nsubs >= ENVD_SUBS_MAX) {
        envd_rpc_error(c, "resource_exhausted", "%s already has %d connected streams", what,
                       ENVD_SUBS_MAX);
        return;
    }
    sub = subscribe(p, c);
    if (sub == NULL) {
        http_abort(c->ex);
        envd_call_free(c);
        return;
    }
    envd_stream_send(&sub->s, envd_ev_start((uint32_t)p->pid));
    if (p->ended) {
        envd_stream_send(&sub->s, envd_ev_end(p->wstatus));
        envd_stream_close(&sub->s, NULL, NULL);
        sub_unlink(sub);
    }
    envd_call_free(c);
}

static int decode_b64(const char *s, uint8_t **out, size_t *outlen)
{
    size_t n = strlen(s);
    char *padded = malloc(n + 4);
    uint8_t *buf;
    size_t w = 0;
    int rc;

    *out = NULL;
    *outlen = 0;
    if (padded == NULL)
        return AB_ENOMEM;
    for (size_t i = 0; i < n; i++) /* protojson also accepts the URL alphabet */
        padded[i] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
    while (n % 4 != 0)
        padded[n++] = '=';
    buf = malloc(n / 4 * 3 + 1);
    if (buf == NULL) {
        free(padded);
        return AB_ENOMEM;
    }
    rc = crypto_base64_decode(padded, n, buf, n / 4 * 3 + 1, &w);
    free(padded);
    if (rc != 0) {
        free(buf);
        return AB_EINVAL;
    }
    *out = buf;
    *outlen = w;
    return 0;
}

static void rpc_send_input(struct envd_call *c)
{
    char what[96];
    struct envd_proc *p = find_proc(c->e, c->req, what, sizeof(what));
    json_t *input = json_object_get(c->req, "input");
    const char *b64 = json_string_value(json_object_get(input, "stdin"));
    uint8_t *data;
    size_t n;

    if (b64 == NULL)
        b64 = json_string_value(json_object_get(input, "pty"));
    if (p == NULL || p->ended) {
        envd_rpc_error(c, "not_found", "%s not found", what);
        return;
    }
    if (b64 == NULL) {
        envd_rpc_error(c, "invalid_argument", "field 'input' needs 'stdin' or 'pty' (base64)");
        return;
    }
    if (!p->has_stdin || input_watch(p) == NULL) {
        envd_rpc_error(c, "failed_precondition",
                       "%s has no open stdin (started with stdin:false, or stdin was closed)",
                       what);
        return;
    }
    if (decode_b64(b64, &data, &n) != 0) {
        envd_rpc_error(c, "invalid_argument", "input is not valid base64");
        return;
    }
    if (p->in_len + n > ENVD_STDIN_PENDING_MAX) {
        free(data);
        envd_rpc_error(c, "resource_exhausted",
                       "%s is not reading its stdin: %d bytes are already waiting", what,
                       ENVD_STDIN_PENDING_MAX);
        return;
    }
    if (n > 0) {
        uint8_t *nb = realloc(p->in_buf, p->in_len + n);
        if (nb == NULL) {
            free(data);
            envd_rpc_error(c, "resource_exhausted", "out of memory queueing input");
            return;
        }
        memcpy(nb + p->in_len, data, n);
        p->in_buf = nb;
        p->in_len += n;
        flush_stdin(p);
    }
    free(data);
    envd_rpc_reply(c, json_object());
}

static int parse_signal(json_t *v)
{
    const char *s = json_string_value(v);

    if (json_is_integer(v))
        return json_integer_value(v) == SIGKILL || json_integer_value(v) == SIGTERM
                   ? (int)json_integer_value(v)
                   : -1;
    if (s != NULL && strcmp(s, "SIGNAL_SIGKILL") == 0)
        return SIGKILL;
    if (s != NULL && strcmp(s, "SIGNAL_SIGTERM") == 0)
        return SIGTERM;
    return -1;
}

static void rpc_send_signal(struct envd_call *c)
{
    char what[96];
    struct envd_proc *p = find_proc(c->e, c->req, what, sizeof(what));
    int sig = parse_signal(json_object_get(c->req, "signal"));

    if (p == NULL || p->exited) {
        envd_rpc_error(c, "not_found", "%s not found", what);
        return;
    }
    if (sig < 0) {
        envd_rpc_error(c, "invalid_argument",
                       "field 'signal' must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
        return;
    }
    /* The child leads its own session: signal its whole group so that
     * what it started goes too. */
    if (kill(-p->pid, sig) != 0 && kill(p->pid, sig) != 0) {
        envd_rpc_error(c, "internal", "cannot signal %s: %s", what, strerror(errno));
        return;
    }
    envd_rpc_reply(c, json_object());
}

static void rpc_update(struct envd_call *c)
{
    char what[96];
    struct envd_proc *p = find_proc(c->e, c->req, what, sizeof(what));
    json_t *size = json_object_get(json_object_get(c->req, "pty"), "size");
    json_int_t cols = json_integer_value(json_object_get(size, "cols"));
    json_int_t rows = json_integer_value(json_object_get(size, "rows"));
    struct winsize ws;

    if (p == NULL || p->ended) {
        envd_rpc_error(c, "not_found", "%s not found", what);
        return;
    }
    if (size == NULL) {
        envd_rpc_reply(c, json_object()); /* nothing to update */
        return;
    }
    if (!p->pty || p->pty_w == NULL) {
        envd_rpc_error(c, "failed_precondition", "%s has no PTY to resize", what);
        return;
    }
    if (cols <= 0 || rows <= 0 || cols > 65535 || rows > 65535) {
        envd_rpc_error(c, "invalid_argument", "pty size must have cols and rows in 1..65535");
        return;
    }
    memset(&ws, 0, sizeof(ws));
    ws.ws_col = (unsigned short)cols;
    ws.ws_row = (unsigned short)rows;
    if (ioctl(envd_fd_get(p->pty_w), TIOCSWINSZ, &ws) != 0) {
        envd_rpc_error(c, "internal", "cannot resize the PTY: %s", strerror(errno));
        return;
    }
    envd_rpc_reply(c, json_object());
}

static void rpc_close_stdin(struct envd_call *c)
{
    char what[96];
    struct envd_proc *p = find_proc(c->e, c->req, what, sizeof(what));

    if (p == NULL || p->ended) {
        envd_rpc_error(c, "not_found", "%s not found", what);
        return;
    }
    if (p->pty) {
        envd_rpc_error(c, "failed_precondition",
                       "%s runs in a PTY: send Ctrl-D (0x04) as input to end its input", what);
        return;
    }
    if (p->in_w != NULL) {
        if (p->in_len > 0)
            p->close_stdin_after_flush = true;
        else
            envd_fd_close(p->in_w);
    }
    p->has_stdin = false;
    envd_rpc_reply(c, json_object());
}

static void rpc_list(struct envd_call *c)
{
    json_t *list = json_array();

    for (struct envd_proc *p = c->e->procs; list != NULL && p != NULL; p = p->next) {
        json_t *item;
        if (p->ended)
            continue;
        item = json_pack("{s:O,s:I}", "config", p->config, "pid", (json_int_t)p->pid);
        if (item != NULL && p->tag != NULL)
            json_object_set_new(item, "tag", json_string(p->tag));
        json_array_append_new(list, item);
    }
    envd_rpc_reply(c, json_pack("{s:o}", "processes", list));
}

void envd_proc_rpc(struct envd_call *c)
{
    static const struct {
        const char *name;
        bool stream;
        void (*fn)(struct envd_call *c);
    } methods[] = {
        {"Start", true, rpc_start},
        {"Connect", true, rpc_connect},
        {"SendInput", false, rpc_send_input},
        {"SendSignal", false, rpc_send_signal},
        {"Update", false, rpc_update},
        {"CloseStdin", false, rpc_close_stdin},
        {"List", false, rpc_list},
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(methods); i++) {
        if (strcmp(methods[i].name, c->method) != 0)
            continue;
        if (methods[i].stream != c->stream) {
            envd_rpc_error(c, "invalid_argument",
                           "process.Process/%s is a %s call: use Content-Type %s", c->method,
                           methods[i].stream ? "server-streaming" : "unary",
                           methods[i].stream ? "application/connect+json" : "application/json");
            return;
        }
        methods[i].fn(c);
        return;
    }
    envd_rpc_error(c, "unimplemented", "process.Process/%s is not implemented", c->method);
}

int envd_proc_init(struct envd *e)
{
    sigset_t set;
    int fd;

    /* SIGCHLD is blocked by main() before any thread exists. */
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd < 0) {
        LOG_ERROR("cannot create a signalfd for SIGCHLD", "error", strerror(errno));
        return AB_EIO;
    }
    g_sigw = envd_fd_watch(fd, on_sigchld, e);
    if (g_sigw == NULL) {
        /* envd_fd_watch closed fd */
        LOG_ERROR("cannot watch the SIGCHLD signalfd", "error", "cannot add it to the loop");
        return AB_EIO;
    }
    return 0;
}

void envd_proc_free_all(struct envd *e)
{
    while (e->procs != NULL) {
        struct envd_proc *p = e->procs;
        while (p->subs != NULL)
            sub_unlink(p->subs);
        proc_free(p);
    }
}

void envd_proc_shutdown(struct envd *e)
{
    e->stopping = true;
    for (struct envd_proc *p = e->procs; p != NULL; p = p->next) {
        /* The loop is freed before the procs: no timer may outlive it. */
        loop_timer_cancel(&p->deadline);
        loop_timer_cancel(&p->grace);
        loop_timer_cancel(&p->retain);
        memset(&p->deadline, 0, sizeof(p->deadline));
        memset(&p->grace, 0, sizeof(p->grace));
        memset(&p->retain, 0, sizeof(p->retain));
        if (!p->exited)
            kill(-p->pid, SIGKILL);
        for (struct envd_sub *s = p->subs; s != NULL; s = s->next)
            envd_stream_close(&s->s, "unavailable", "envd is shutting down");
    }
}
