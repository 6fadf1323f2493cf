/* The process's event loop: an lws context, timers, and a pool of
 * worker threads whose results come back through a locked list drained on
 * LWS_CALLBACK_EVENT_WAIT_CANCELLED (raised by lws_cancel_service).
 *
 * LOOP_LIBEV hands lws a libev loop of ours (lws's "foreign loop", epoll
 * backend) and runs it here; lws's libev plugin registers one watcher per
 * descriptor, so a wake-up costs what is ready, not what is open (lws's poll
 * loop passes all 10,000 tunnels to poll(2) on every wake-up). Owning the
 * ev_loop lets loop_run take one iteration at a time, as with lws_service, so
 * loop_stop works the same on both; lws's own libev loop would instead run
 * ev_run until broken and install a SIGINT watcher over ours.
 *
 * libev is opened with dlopen, not linked: a binary that runs on poll (envd
 * in a Pod image, say) needs neither libev nor lws's plugin, and a missing one
 * is an error that names the package rather than a loader failure (ev.h gives
 * the types only).
 *
 * Timers: on poll, a pairing heap of ours on one timerfd that lws polls with
 * its sockets. lws 4.1 turns the time to its next lws_sul into poll's timeout
 * in whole milliseconds, rounded down, so with a timer less than 1 ms away it
 * polls with timeout 0 until it is due: an agent with a few sandboxes starting
 * and stopping (10 ms polls each) spun through 24,000 polls a second, 9 in 10
 * of them with timeout 0, each over every open descriptor (~16 % of its CPU
 * under sustained creates). A timerfd is armed to the microsecond. On libev,
 * one ev_timer each in libev's heap: lws 4.1's plugin keeps one ev_timer for
 * all of lws_sul and re-arms it only when it is not already pending, so a
 * 30 ms timer started while a 3 s one was armed fired after 3 s when nothing
 * else happened (tests/unit/test_loop.c). After each of our timers a wake-up
 * (lws_cancel_service) lets lws run its own due work (an async close, say)
 * on the next turn, since lws does that only after an event of its own; the
 * same wake-up once a second bounds how late lws's own timeouts (whole
 * seconds, lws_set_timeout) can be in a process where nothing else happens. */
#include "agentbox/loop.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"

#include <dlfcn.h>
#include <ev.h>
#include <libwebsockets.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(ev_timer) <= sizeof(((struct loop_timer *)0)->storage),
               "loop_timer storage too small for an ev_timer");

/* LOOP_POLL: a loop_timer's storage is a node of the loop's pairing heap. prev
 * is the parent for a first child, else the left sibling; NULL for the root. */
struct timer_node {
    struct timer_node *child, *next, *prev;
    int64_t due_us;
    uint64_t seq;
    bool queued;
};
_Static_assert(sizeof(struct timer_node) <= sizeof(((struct loop_timer *)0)->storage),
               "loop_timer storage too small for a timer_node");

#define LOOP_POST_MAX 65536

/* The libev functions the loop calls, from dlopen (see the top). */
#define LOOP_LIBEV_SONAME "libev.so.4"
struct libev {
    void *dl;
    int (*version_major)(void);
    struct ev_loop *(*loop_new)(unsigned int flags);
    int (*run)(struct ev_loop *loop, int flags);
    void (*loop_destroy)(struct ev_loop *loop);
    unsigned int (*backend)(struct ev_loop *loop);
    void (*now_update)(struct ev_loop *loop);
    void (*timer_start)(struct ev_loop *loop, ev_timer *w);
    void (*timer_stop)(struct ev_loop *loop, ev_timer *w);
};

struct loop_job {
    struct loop_job *next;
    loop_work_fn work;
    loop_done_fn done;
    void *arg;
    int status;
};

struct job_list {
    struct loop_job *head, *tail;
    size_t n;
};

struct loop {
    struct lws_context *ctx;
    struct lws_vhost *vh;
    enum loop_kind kind;
    struct libev libev; /* LOOP_LIBEV: the library, open while the loop lives */
    struct ev_loop *ev; /* LOOP_LIBEV: ours, lws's foreign loop; freed after the context */
    ev_timer lws_tick;  /* LOOP_LIBEV: the once-a-second wake-up for lws's own timeouts */
    pthread_t loop_thread;
    atomic_bool stopping;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job_list todo; /* waiting for a worker */
    struct job_list done; /* waiting for the loop thread */
    size_t pending;       /* submitted, done() not yet run */
    size_t queue_max;
    bool shutdown;
    pthread_t *workers;
    int nworkers;

    /* LOOP_POLL: the timers, a pairing heap (earliest first) on one timerfd */
    struct timer_node *timers;
    uint64_t timer_seq; /* start order: equal due times fire first started, first */
    int tfd;            /* -1 until adopted; lws closes it with the context */
    int64_t tfd_due_us; /* what the timerfd is armed for, INT64_MAX: disarmed */
    uint64_t turns;     /* loop_turns */

    /* loop_defer: queued items, oldest first, and the one timer that runs them */
    struct loop_defer *defer_head, *defer_tail;
    uint64_t defer_turn;
    struct loop_timer defer_timer;
    bool defer_armed;
};

static void list_push(struct job_list *l, struct loop_job *j)
{
    j->next = NULL;
    if (l->tail)
        l->tail->next = j;
    else
        l->head = j;
    l->tail = j;
    l->n++;
}

static struct loop_job *list_pop(struct job_list *l)
{
    struct loop_job *j = l->head;
    if (!j)
        return NULL;
    l->head = j->next;
    if (!l->head)
        l->tail = NULL;
    l->n--;
    return j;
}

/* Runs the completions queued so far; new ones wait for the next wake-up. */
static void drain_done(struct loop *l)
{
    pthread_mutex_lock(&l->mu);
    struct job_list batch = l->done;
    memset(&l->done, 0, sizeof(l->done));
    pthread_mutex_unlock(&l->mu);

    struct loop_job *j;
    while ((j = list_pop(&batch))) {
        if (j->work) {
            pthread_mutex_lock(&l->mu);
            l->pending--;
            pthread_mutex_unlock(&l->mu);
        }
        if (j->done)
            j->done(j->arg, j->status);
        free(j);
    }
}

static void timers_run(struct loop *l);

static int loop_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    struct loop *l = lws_context_user(lws_get_context(wsi));
    if (!l)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        drain_done(l);
        break;
    case LWS_CALLBACK_RAW_RX_FILE: /* the timerfd, the only file the loop adopts */
        timers_run(l);
        break;
    case LWS_CALLBACK_RAW_CLOSE_FILE: /* lws closes it (the context is going) */
        l->tfd = -1;
        break;
    default:
        break;
    }
    return 0;
}

static const struct lws_protocols loop_protocols[] = {
    {"ab-loop", loop_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

static void *worker_main(void *arg)
{
    struct loop *l = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* signals belong to the loop thread */

    pthread_mutex_lock(&l->mu);
    for (;;) {
        while (!l->shutdown && !l->todo.head)
            pthread_cond_wait(&l->cv, &l->mu);
        if (l->shutdown)
            break;
        struct loop_job *j = list_pop(&l->todo);
        pthread_mutex_unlock(&l->mu);
        j->work(j->arg);
        j->status = 0;
        pthread_mutex_lock(&l->mu);
        list_push(&l->done, j);
        pthread_mutex_unlock(&l->mu);
        lws_cancel_service(l->ctx);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void lws_log_to_ours(int level, const char *line)
{
    char buf[512];
    size_t n = ab_strlcpy(buf, line, sizeof(buf));
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (level & LLL_ERR)
        LOG_WARN("libwebsockets", "detail", buf);
    else
        LOG_DEBUG("libwebsockets", "detail", buf);
}

/* POSIX's way to take a function pointer from dlsym. */
#define LOOP_DLSYM(dl, sym, fp) (*(void **)(&(fp)) = dlsym((dl), (sym)))

static int libev_open(struct libev *ev, char *err, size_t errlen)
{
    ev->dl = dlopen(LOOP_LIBEV_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!ev->dl) {
        snprintf(err, errlen,
                 "event_loop libev: cannot load %s (install the Debian package "
                 "libwebsockets-evlib-ev, which brings libev4, or run with --event-loop=poll): %s",
                 LOOP_LIBEV_SONAME, dlerror());
        return AB_EIO;
    }
    if (!LOOP_DLSYM(ev->dl, "ev_version_major", ev->version_major) ||
        !LOOP_DLSYM(ev->dl, "ev_loop_new", ev->loop_new) ||
        !LOOP_DLSYM(ev->dl, "ev_run", ev->run) ||
        !LOOP_DLSYM(ev->dl, "ev_loop_destroy", ev->loop_destroy) ||
        !LOOP_DLSYM(ev->dl, "ev_backend", ev->backend) ||
        !LOOP_DLSYM(ev->dl, "ev_now_update", ev->now_update) ||
        !LOOP_DLSYM(ev->dl, "ev_timer_start", ev->timer_start) ||
        !LOOP_DLSYM(ev->dl, "ev_timer_stop", ev->timer_stop) ||
        ev->version_major() != EV_VERSION_MAJOR) {
        snprintf(err, errlen,
                 "event_loop libev: %s is not libev 4 (no ev_run, or another major version); "
                 "run with --event-loop=poll",
                 LOOP_LIBEV_SONAME);
        dlclose(ev->dl);
        ev->dl = NULL;
        return AB_EIO;
    }
    return 0;
}

static void lws_tick_fired(struct ev_loop *ev, ev_timer *w, int revents)
{
    (void)ev;
    (void)revents;
    struct loop *l = (struct loop *)((char *)w - offsetof(struct loop, lws_tick));
    lws_cancel_service(l->ctx);
}

int loop_kind_parse(const char *name, enum loop_kind *out, char *err, size_t errlen)
{
    if (name && strcmp(name, "libev") == 0) {
        *out = LOOP_LIBEV;
        return 0;
    }
    if (!name || strcmp(name, "poll") == 0) {
        *out = LOOP_POLL;
        return 0;
    }
    snprintf(err, errlen, "event_loop '%s' must be libev or poll", name);
    return AB_EINVAL;
}

const char *loop_kind_name(enum loop_kind kind)
{
    return kind == LOOP_POLL ? "poll" : "libev";
}

/* agentbox_event_loop_info{loop,backend} 1: which loop a process runs on, for
 * operators and for the tests that check the default. */
static void publish_kind(struct loop *l)
{
    static const char *const labels[] = {"loop", "backend", NULL};
    struct metric_family *f =
        metrics_register(metrics_default(), "agentbox_event_loop_info",
                         "the event loop this process waits on (1 for the one in use)",
                         METRIC_GAUGE, labels, NULL, 0);
    const char *values[] = {loop_kind_of(l), loop_backend_of(l)};
    metrics_set(f, values, 1);
    LOG_INFO("event loop", "loop", values[0], "backend", values[1]);
}

int loop_create(const struct loop_options *opts, struct loop **out, char *err, size_t errlen)
{
    *out = NULL;
    struct loop *l = calloc(1, sizeof(*l));
    if (!l) {
        snprintf(err, errlen, "out of memory creating the event loop");
        return AB_ENOMEM;
    }
    int rc = AB_EIO;
    l->nworkers = opts && opts->workers > 0 ? opts->workers : 4;
    l->queue_max = opts && opts->queue_max > 0 ? opts->queue_max : 1024;
    l->kind = opts ? opts->kind : LOOP_POLL;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->loop_thread = pthread_self();
    l->tfd = -1;
    l->tfd_due_us = INT64_MAX;

    lws_set_log_level(log_get_level() == LOG_LEVEL_DEBUG ? LLL_ERR | LLL_WARN : LLL_ERR,
                      lws_log_to_ours);

    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
    if (!(opts && opts->no_tls))
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.user = l;
    /* lws reads sockets in chunks of this size (default 4 KiB): bulk streams
     * through the tunnel want fewer, larger reads (a relaying hub's reads
     * were all cut at 64 KiB - LWS_PRE with the socket holding more: strace) */
    info.pt_serv_buf_size = 256 * 1024;
    info.gid = -1;
    info.uid = -1;
    if (opts && opts->fd_limit)
        info.fd_limit_per_thread = opts->fd_limit;
    void *foreign[1] = {NULL};
    if (l->kind == LOOP_LIBEV) {
        /* NOSIGMASK: signals stay ours (hub/main.c, agent/main.c); NOENV: LIBEV_FLAGS
         * in the environment does not pick another backend behind the option's back */
        if ((rc = libev_open(&l->libev, err, errlen)) != 0)
            goto fail;
        rc = AB_EIO;
        l->ev = l->libev.loop_new(EVBACKEND_EPOLL | EVFLAG_NOSIGMASK | EVFLAG_NOENV);
        if (!l->ev) {
            snprintf(err, errlen, "event_loop libev: cannot create an epoll loop (%s)",
                     strerror(errno));
            goto fail;
        }
        foreign[0] = l->ev;
        info.options |= LWS_SERVER_OPTION_LIBEV;
        info.foreign_loops = foreign;
    }
    l->ctx = lws_create_context(&info);
    if (!l->ctx) {
        if (l->kind == LOOP_LIBEV)
            snprintf(err, errlen,
                     "event_loop libev: libwebsockets could not load its libev plugin "
                     "(install the Debian package libwebsockets-evlib-ev, or run with "
                     "--event-loop=poll)");
        else
            snprintf(err, errlen, "cannot create the libwebsockets context");
        goto fail;
    }

    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = loop_protocols;
    info.vhost_name = "ab-loop";
    l->vh = lws_create_vhost(l->ctx, &info);
    if (!l->vh) {
        snprintf(err, errlen, "cannot create the event loop's vhost");
        goto fail;
    }

    if (!l->ev) {
        int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (fd < 0) {
            snprintf(err, errlen, "cannot create the event loop's timerfd: %s", strerror(errno));
            goto fail;
        }
        lws_sock_file_fd_type d = {.filefd = fd};
        if (!lws_adopt_descriptor_vhost(l->vh, LWS_ADOPT_RAW_FILE_DESC, d, "ab-loop", NULL)) {
            close(fd);
            snprintf(err, errlen, "cannot add the event loop's timerfd to libwebsockets");
            goto fail;
        }
        l->tfd = fd;
    }

    l->workers = calloc((size_t)l->nworkers, sizeof(pthread_t));
    if (!l->workers) {
        snprintf(err, errlen, "out of memory creating %d worker threads", l->nworkers);
        rc = AB_ENOMEM;
        goto fail;
    }
    for (int i = 0; i < l->nworkers; i++) {
        if (pthread_create(&l->workers[i], NULL, worker_main, l) != 0) {
            snprintf(err, errlen, "cannot start worker thread %d of %d", i + 1, l->nworkers);
            l->nworkers = i;
            goto fail;
        }
    }
    if (l->ev) {
        ev_timer_init(&l->lws_tick, lws_tick_fired, 1., 1.);
        l->libev.timer_start(l->ev, &l->lws_tick);
    }
    publish_kind(l);
    *out = l;
    return 0;

fail:
    loop_free(l);
    return rc;
}

struct loop *loop_new(const struct loop_options *opts)
{
    struct loop *l = NULL;
    char err[256];
    if (loop_create(opts, &l, err, sizeof(err)) != 0)
        LOG_ERROR("cannot create the event loop", "error", err);
    return l;
}

const char *loop_kind_of(struct loop *l)
{
    return loop_kind_name(l->kind);
}

const char *loop_backend_of(struct loop *l)
{
    if (!l->ev)
        return "poll";
    return l->libev.backend(l->ev) == EVBACKEND_EPOLL ? "epoll" : "other";
}

static void defer_unlink(struct loop *l, struct loop_defer *d);

void loop_free(struct loop *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->shutdown = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        pthread_join(l->workers[i], NULL);
    free(l->workers);

    /* Jobs no worker ran are completed as cancelled; then finish the rest. */
    struct loop_job *j;
    while ((j = list_pop(&l->todo))) {
        j->status = AB_ECLOSED;
        list_push(&l->done, j);
    }
    drain_done(l);
    if (l->ctx)
        lws_context_destroy(l->ctx);
    /* what closes queued is not run: its owners are gone */
    while (l->defer_head)
        defer_unlink(l, l->defer_head);
    if (l->ev) { /* lws stopped its watchers on it; a foreign loop is ours to free */
        l->libev.timer_stop(l->ev, &l->lws_tick);
        if (l->defer_armed)
            l->libev.timer_stop(l->ev, (ev_timer *)(void *)l->defer_timer.storage);
        l->libev.loop_destroy(l->ev);
    }
    if (l->libev.dl)
        dlclose(l->libev.dl);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}

struct lws_context *loop_lws(struct loop *l)
{
    return l->ctx;
}

int loop_run(struct loop *l)
{
    l->loop_thread = pthread_self();
    if (l->ev) {
        /* lws runs its own due work (and arms its timer watcher) only after an
         * event of its own: one now, for what was scheduled before loop_run */
        lws_cancel_service(l->ctx);
        while (!atomic_load(&l->stopping)) {
            l->libev.run(l->ev, EVRUN_ONCE);
            l->turns++;
        }
        return 0;
    }
    while (!atomic_load(&l->stopping)) {
        if (lws_service(l->ctx, 0) < 0)
            break;
        l->turns++;
    }
    return 0;
}

void loop_stop(struct loop *l)
{
    atomic_store(&l->stopping, true);
    lws_cancel_service(l->ctx);
}

uint64_t loop_turns(struct loop *l)
{
    return l->turns;
}

bool loop_is_stopping(struct loop *l)
{
    return atomic_load(&l->stopping);
}

bool loop_on_loop_thread(struct loop *l)
{
    return pthread_equal(pthread_self(), l->loop_thread);
}

/* LOOP_POLL's timers. A pairing heap: insert and meld O(1), removing the
 * earliest (or any one) O(log n) amortised, intrusive (no allocation). */
static struct timer_node *node_of(struct loop_timer *t)
{
    return (struct timer_node *)(void *)t->storage;
}

static bool node_before(const struct timer_node *a, const struct timer_node *b)
{
    return a->due_us < b->due_us || (a->due_us == b->due_us && a->seq < b->seq);
}

/* Two roots (either may be NULL) into one. */
static struct timer_node *heap_meld(struct timer_node *a, struct timer_node *b)
{
    if (!a)
        return b;
    if (!b)
        return a;
    if (node_before(b, a)) {
        struct timer_node *x = a;
        a = b;
        b = x;
    }
    b->prev = a;
    b->next = a->child;
    if (a->child)
        a->child->prev = b;
    a->child = b;
    a->next = a->prev = NULL;
    return a;
}

/* The siblings from first on into one root: meld pairs left to right, then
 * the pairs right to left (the two passes that make the bound). */
static struct timer_node *heap_merge_pairs(struct timer_node *first)
{
    struct timer_node *pairs = NULL; /* melded pairs, last first, through next */
    while (first) {
        struct timer_node *a = first, *b = first->next;
        first = b ? b->next : NULL;
        a->next = a->prev = NULL;
        if (b)
            b->next = b->prev = NULL;
        struct timer_node *m = heap_meld(a, b);
        m->next = pairs;
        pairs = m;
    }
    struct timer_node *root = NULL;
    while (pairs) {
        struct timer_node *m = pairs;
        pairs = m->next;
        m->next = NULL;
        root = heap_meld(root, m);
    }
    return root;
}

static void heap_remove(struct loop *l, struct timer_node *n)
{
    struct timer_node *sub = heap_merge_pairs(n->child);
    if (n == l->timers) {
        l->timers = sub;
    } else {
        if (n->prev->child == n)
            n->prev->child = n->next;
        else
            n->prev->next = n->next;
        if (n->next)
            n->next->prev = n->prev;
        l->timers = heap_meld(l->timers, sub);
    }
    n->child = n->next = n->prev = NULL;
    n->queued = false;
}

/* Arms the timerfd for the earliest timer (disarms it when there is none). */
static void tfd_arm(struct loop *l)
{
    int64_t due = l->timers ? l->timers->due_us : INT64_MAX;
    if (due == l->tfd_due_us || l->tfd < 0)
        return;
    struct itimerspec its = {0};
    if (due != INT64_MAX) {
        int64_t at = due > 0 ? due : 1; /* it_value 0 would disarm */
        its.it_value.tv_sec = at / 1000000;
        its.it_value.tv_nsec = (at % 1000000) * 1000;
    }
    if (timerfd_settime(l->tfd, TFD_TIMER_ABSTIME, &its, NULL) != 0) {
        LOG_ERROR("cannot arm the event loop's timerfd", "error", strerror(errno));
        return;
    }
    l->tfd_due_us = due;
}

/* The timerfd fired: every timer due by now that was started before now
 * runs, earliest first; one a callback starts (at 0 ms, say) waits for the
 * next turn, so callbacks cannot keep the loop here. */
static void timers_run(struct loop *l)
{
    uint64_t expirations;
    if (read(l->tfd, &expirations, sizeof(expirations)) < 0 && errno != EAGAIN)
        LOG_WARN("cannot read the event loop's timerfd", "error", strerror(errno));
    l->tfd_due_us = INT64_MAX; /* fired (or never armed): armed anew below */
    int64_t now = ab_now_us();
    uint64_t seq_end = l->timer_seq;
    struct timer_node *n;
    while ((n = l->timers) && n->due_us <= now && n->seq < seq_end) {
        heap_remove(l, n);
        struct loop_timer *t = (struct loop_timer *)(void *)n;
        t->fn(t); /* may start, cancel or free timers, itself included */
    }
    tfd_arm(l);
}

/* libev: the ev_timer is the first bytes of the loop_timer. */
static void ev_timer_fired(struct ev_loop *ev, ev_timer *w, int revents)
{
    (void)ev;
    (void)revents;
    struct loop_timer *t = (struct loop_timer *)(void *)w;
    lws_cancel_service(t->loop->ctx); /* lws's own due work runs after an event of its own */
    t->fn(t);                         /* may free t */
}

void loop_timer_start(struct loop *l, struct loop_timer *t, int64_t delay_ms, loop_timer_fn fn,
                      void *arg)
{
    if (l->ev) {
        ev_timer *w = (ev_timer *)(void *)t->storage;
        if (t->loop == l)
            l->libev.timer_stop(l->ev, w); /* a pending one moves; a stopped one: no-op */
        t->loop = l;
        t->fn = fn;
        t->arg = arg;
        ev_timer_init(w, ev_timer_fired, (ev_tstamp)(delay_ms < 0 ? 0 : delay_ms) / 1000.0, 0.);
        /* from now, not from when this loop turn began (libev's cached time): never early */
        l->libev.now_update(l->ev);
        l->libev.timer_start(l->ev, w);
        return;
    }
    struct timer_node *n = node_of(t);
    if (t->loop == l && n->queued)
        heap_remove(l, n); /* a pending one moves */
    t->loop = l;
    t->fn = fn;
    t->arg = arg;
    n->due_us = ab_now_us() + (delay_ms < 0 ? 0 : delay_ms) * 1000;
    n->seq = l->timer_seq++;
    n->child = n->next = n->prev = NULL;
    n->queued = true;
    l->timers = heap_meld(l->timers, n);
    if (n->due_us < l->tfd_due_us)
        tfd_arm(l);
}

void loop_timer_cancel(struct loop_timer *t)
{
    if (!t->loop)
        return;
    if (t->loop->ev) {
        t->loop->libev.timer_stop(t->loop->ev, (ev_timer *)(void *)t->storage);
        return;
    }
    if (node_of(t)->queued)
        heap_remove(t->loop, node_of(t)); /* the timerfd may wake once for nothing */
}

struct loop *loop_of_lws(struct lws_context *cx)
{
    return cx ? lws_context_user(cx) : NULL;
}

static void defer_unlink(struct loop *l, struct loop_defer *d)
{
    if (d->prev)
        d->prev->next = d->next;
    else
        l->defer_head = d->next;
    if (d->next)
        d->next->prev = d->prev;
    else
        l->defer_tail = d->prev;
    d->prev = d->next = NULL;
    d->loop = NULL;
}

static void defer_run(struct loop_timer *t)
{
    struct loop *l = t->arg;
    l->defer_armed = false;
    /* what is queued from here on has this turn and waits for the next run */
    uint64_t turn = ++l->defer_turn;
    struct loop_defer *d;
    while ((d = l->defer_head) && d->turn < turn) {
        defer_unlink(l, d);
        d->fn(d); /* may queue, cancel or free items, itself included */
    }
    if (l->defer_head && !l->defer_armed) {
        l->defer_armed = true;
        loop_timer_start(l, &l->defer_timer, 0, defer_run, l);
    }
}

void loop_defer(struct loop *l, struct loop_defer *d, loop_defer_fn fn)
{
    d->fn = fn;
    if (d->loop)
        return;
    d->loop = l;
    d->turn = l->defer_turn;
    d->next = NULL;
    d->prev = l->defer_tail;
    if (l->defer_tail)
        l->defer_tail->next = d;
    else
        l->defer_head = d;
    l->defer_tail = d;
    if (!l->defer_armed) {
        l->defer_armed = true;
        loop_timer_start(l, &l->defer_timer, 0, defer_run, l);
    }
}

void loop_defer_cancel(struct loop_defer *d)
{
    if (d->loop)
        defer_unlink(d->loop, d);
}

int loop_submit(struct loop *l, loop_work_fn work, loop_done_fn done, void *arg)
{
    struct loop_job *j = calloc(1, sizeof(*j));
    if (!j)
        return AB_ENOMEM;
    j->work = work;
    j->done = done;
    j->arg = arg;
    pthread_mutex_lock(&l->mu);
    if (l->shutdown || l->pending >= l->queue_max) {
        int rc = l->shutdown ? AB_ECLOSED : AB_EBUSY;
        pthread_mutex_unlock(&l->mu);
        free(j);
        return rc;
    }
    l->pending++;
    list_push(&l->todo, j);
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int loop_post(struct loop *l, loop_done_fn fn, void *arg)
{
    struct loop_job *j = calloc(1, sizeof(*j));
    if (!j)
        return AB_ENOMEM;
    j->done = fn;
    j->arg = arg;
    pthread_mutex_lock(&l->mu);
    if (l->done.n >= LOOP_POST_MAX) {
        pthread_mutex_unlock(&l->mu);
        free(j);
        return AB_EBUSY;
    }
    list_push(&l->done, j);
    pthread_mutex_unlock(&l->mu);
    lws_cancel_service(l->ctx);
    return 0;
}
