/* A hashed timer wheel: many timers (one per tunnel session) on one loop,
 * driven by one periodic tick, with O(1) schedule and cancel.
 *
 * lws keeps every per-connection timer in one sorted list, so rescheduling
 * one costs a walk of all of them: at 10,000 sessions that is the loop's
 * time. Here a timer lands in the slot of its due tick (due / tick_ms modulo
 * the slot count); a tick visits only the slots whose time has come and
 * fires, in each, the timers actually due (one further away than a full
 * turn waits for a later round). Timers fire at most one tick late, never
 * early.
 *
 * Timers are intrusive (embed a struct tw_timer) and owned by the caller;
 * the wheel allocates only its slot array. Loop thread only. */
#ifndef AGENTBOX_TIMERWHEEL_H
#define AGENTBOX_TIMERWHEEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct timerwheel;
struct tw_timer;

typedef void (*tw_fn)(struct tw_timer *t, void *arg);

struct tw_timer {
    struct tw_timer *prev, *next; /* the list it is on */
    struct tw_timer **head;       /* that list's head (a slot, or the one firing) */
    int64_t due_ms;
    tw_fn fn;
    void *arg;
    bool armed;
};

/* tick_ms is the resolution (>= 1); slots is rounded up to a power of two
 * (at least 2, at most 1 << 20); now_ms is where the wheel starts.
 * Returns 0, AB_EINVAL (a bad size, named in err) or AB_ENOMEM. */
int timerwheel_new(int64_t tick_ms, size_t slots, int64_t now_ms, struct timerwheel **out,
                   char *err, size_t errlen);
/* Frees the wheel; timers still armed are left unarmed (never fired). */
void timerwheel_free(struct timerwheel *w);
/* Arms t to fire fn(t, arg) at due_ms (in the past: at the next advance).
 * An armed timer is moved. */
void timerwheel_schedule(struct timerwheel *w, struct tw_timer *t, int64_t due_ms, tw_fn fn,
                         void *arg);
/* Disarms t (nothing if it is not armed). Safe from inside any callback. */
void timerwheel_cancel(struct timerwheel *w, struct tw_timer *t);
static inline bool timerwheel_armed(const struct tw_timer *t)
{
    return t->armed;
}
/* Fires every timer due at or before now_ms, in tick order. A callback may
 * schedule or cancel any timer (itself included); one rescheduled for a due
 * time already passed fires at the next advance, not in this one, so a
 * callback cannot keep the loop here. Returns how many fired. */
size_t timerwheel_advance(struct timerwheel *w, int64_t now_ms);
/* Timers armed. */
size_t timerwheel_count(const struct timerwheel *w);

#endif
