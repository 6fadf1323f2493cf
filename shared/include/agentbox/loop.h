/* The one event loop of a process (DESIGN §4).
 *
 * libwebsockets owns every socket and timer; only the loop thread calls lws.
 * Blocking work (PostgreSQL, Kubernetes, big file I/O) goes to a fixed pool
 * of worker threads through a bounded queue; each job's completion runs back
 * on the loop thread, woken with lws_cancel_service().
 *
 * What waits for events is chosen at creation (--event-loop): libev on epoll
 * (the default; a wake-up costs O(ready descriptors)) through lws's libev
 * plugin, or lws's own poll(2) (O(all descriptors) per wake-up; the fallback). */
#ifndef AGENTBOX_LOOP_H
#define AGENTBOX_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lws_context;
struct loop;

enum loop_kind {
    LOOP_POLL,  /* lws's built-in poll(2) loop */
    LOOP_LIBEV, /* libev, epoll backend, lws's plugin (Debian libwebsockets-evlib-ev) */
};

/* The --event-loop option. The hub's default is libev (10,000 tunnels: a
 * wake-up must cost what is ready, not what is open); everything else
 * defaults to poll: lws 4.1.6's libev plugin runs lws's own timers (a
 * LWS_TO_KILL_ASYNC close among them) up to a second late, which the egress
 * gateway's connection storm test caught (closes came too slowly to free
 * its connection limit), and an agent has a few hundred descriptors. */
#define LOOP_EVENT_LOOP_HUB_DEFAULT "libev"
#define LOOP_EVENT_LOOP_DEFAULT "poll"
#define LOOP_EVENT_LOOP_HELP                                                                       \
    "what waits for socket events: libev (epoll; needs the Debian package "                        \
    "libwebsockets-evlib-ev; the hub's default) or poll (lws's poll(2); the agent's default)"

struct loop_options {
    int workers;         /* worker threads; 0 → 4 */
    size_t queue_max;    /* pending jobs (submitted, not yet done); 0 → 1024 */
    enum loop_kind kind; /* 0 → LOOP_POLL */
    /* The process never serves or dials TLS: OpenSSL's global init (its
     * config file, error strings, every cipher: ~1 ms) is skipped. envd sets
     * it, since every sandbox spawn starts one. */
    bool no_tls;
    /* Descriptors lws may hold at once; 0 → the process's RLIMIT_NOFILE. lws
     * 4.1 sizes and zeroes two tables by it at creation (16 bytes a descriptor:
     * 320 KiB at 20,000, 16 MiB at a Pod's usual 1,048,576) and scans one on
     * every close; below the limit it keeps them this size and looks
     * descriptors up by a scan of those in use. For a process with few
     * descriptors and a short life (envd), not for a server of thousands. */
    unsigned fd_limit;
};

/* Parses an --event-loop value ("libev" or "poll"; NULL → the default). AB_EINVAL with a
 * message naming the option otherwise. */
int loop_kind_parse(const char *name, enum loop_kind *out, char *err, size_t errlen);
/* "libev" or "poll". */
const char *loop_kind_name(enum loop_kind kind);

/* Creates the lws context (explicit vhosts; modules add their own) on the event loop
 * opts->kind names. On failure returns a negative code with the reason in err (for libev:
 * the package to install, or --event-loop=poll); no fallback to poll is taken silently,
 * since poll at thousands of connections is the lag the option exists to remove. */
int loop_create(const struct loop_options *opts, struct loop **out, char *err, size_t errlen);
/* loop_create that logs the error. NULL on failure. */
struct loop *loop_new(const struct loop_options *opts);
/* The event loop in use: "libev" or "poll"; backend "epoll" for libev, "poll" for poll. */
const char *loop_kind_of(struct loop *l);
const char *loop_backend_of(struct loop *l);
/* Stops workers (running jobs finish; queued ones get done(arg, AB_ECLOSED)) and
 * destroys the context. Call after loop_run returns. */
void loop_free(struct loop *l);
struct lws_context *loop_lws(struct loop *l);

/* Runs until loop_stop. Returns 0. */
int loop_run(struct loop *l);
/* Safe from any thread and from a signal handler. */
void loop_stop(struct loop *l);
bool loop_is_stopping(struct loop *l);
/* Turns the loop has taken (wake-ups: each waits once for sockets and timers). */
uint64_t loop_turns(struct loop *l);
/* True on the loop thread (for assertions). */
bool loop_on_loop_thread(struct loop *l);

/* Timers: the struct is owned by the caller and must outlive the schedule
 * (cancel before freeing). Rescheduling a pending timer moves it. Never
 * early; timers due at the same time fire in the order they were started.
 * Loop thread only. */
struct loop_timer;
typedef void (*loop_timer_fn)(struct loop_timer *t);
struct loop_timer {
    uint8_t storage[64]; /* the loop's: a heap node (poll) or an ev_timer (libev) */
    struct loop *loop;
    loop_timer_fn fn;
    void *arg;
};
void loop_timer_start(struct loop *l, struct loop_timer *t, int64_t delay_ms, loop_timer_fn fn,
                      void *arg);
void loop_timer_cancel(struct loop_timer *t);

/* Work for the loop's next turn, queued in O(1): thousands of connections
 * each asking "write at the next turn" were each a timer in lws's one sorted
 * list, O(N) to insert (10% of a 10,000-agent hub's CPU). Every queued item
 * runs once, in queue order, on one timer of the loop's; an item queued while
 * they run waits for the turn after. Queueing a queued item keeps its place.
 * The struct is the caller's; cancel before freeing it. Loop thread only. */
struct loop_defer;
typedef void (*loop_defer_fn)(struct loop_defer *d);
struct loop_defer {
    struct loop_defer *prev, *next;
    struct loop *loop; /* non-NULL while queued */
    uint64_t turn;
    loop_defer_fn fn;
};
void loop_defer(struct loop *l, struct loop_defer *d, loop_defer_fn fn);
void loop_defer_cancel(struct loop_defer *d);
/* The loop whose lws context this is (every context is a loop's). */
struct loop *loop_of_lws(struct lws_context *cx);

/* Work queue. work(arg) runs on a worker thread; done(arg, status) then runs
 * on the loop thread, status 0 or AB_ECLOSED when the loop shut down before
 * the job ran. Returns AB_EBUSY when queue_max jobs are pending (the caller
 * answers 503), never blocks. */
typedef void (*loop_work_fn)(void *arg);
typedef void (*loop_done_fn)(void *arg, int status);
int loop_submit(struct loop *l, loop_work_fn work, loop_done_fn done, void *arg);

/* Runs fn(arg, 0) on the loop thread soon. Safe from any thread. Returns
 * AB_EBUSY when the completion queue is full. */
int loop_post(struct loop *l, loop_done_fn fn, void *arg);

#endif
