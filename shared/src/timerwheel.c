/* Hashed timer wheel. See timerwheel.h. */
#include "agentbox/timerwheel.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>

#define TW_MAX_SLOTS ((size_t)1 << 20)

struct timerwheel {
    int64_t tick_ms;
    size_t mask;        /* slots - 1 */
    int64_t next_tick;  /* first tick not yet visited */
    int64_t floor_tick; /* earliest tick a timer may be put in now */
    size_t count;
    bool advancing;
    struct tw_timer *firing; /* the slot being visited, detached */
    struct tw_timer **slots; /* heads; each a doubly linked list */
};

int timerwheel_new(int64_t tick_ms, size_t slots, int64_t now_ms, struct timerwheel **out,
                   char *err, size_t errlen)
{
    if (tick_ms < 1 || slots == 0 || slots > TW_MAX_SLOTS) {
        snprintf(err, errlen, "timer wheel: tick_ms (%lld) must be >= 1 and slots (%zu) 1..%zu",
                 (long long)tick_ms, slots, TW_MAX_SLOTS);
        return AB_EINVAL;
    }
    size_t n = 2;
    while (n < slots)
        n <<= 1;
    struct timerwheel *w = calloc(1, sizeof(*w));
    if (w)
        w->slots = calloc(n, sizeof(*w->slots));
    if (!w || !w->slots) {
        free(w);
        snprintf(err, errlen, "out of memory for a timer wheel of %zu slots", n);
        return AB_ENOMEM;
    }
    w->tick_ms = tick_ms;
    w->mask = n - 1;
    w->next_tick = w->floor_tick = now_ms / tick_ms;
    *out = w;
    return 0;
}

static void push(struct tw_timer **head, struct tw_timer *t)
{
    t->head = head;
    t->prev = NULL;
    t->next = *head;
    if (*head)
        (*head)->prev = t;
    *head = t;
}

static void unlink_timer(struct tw_timer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        *t->head = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
    t->head = NULL;
}

void timerwheel_free(struct timerwheel *w)
{
    if (!w)
        return;
    for (size_t i = 0; i <= w->mask; i++)
        while (w->slots[i]) {
            struct tw_timer *t = w->slots[i];
            unlink_timer(t);
            t->armed = false;
        }
    free(w->slots);
    free(w);
}

void timerwheel_cancel(struct timerwheel *w, struct tw_timer *t)
{
    if (!t->armed)
        return;
    unlink_timer(t);
    t->armed = false;
    w->count--;
}

void timerwheel_schedule(struct timerwheel *w, struct tw_timer *t, int64_t due_ms, tw_fn fn,
                         void *arg)
{
    timerwheel_cancel(w, t);
    int64_t tick = due_ms / w->tick_ms;
    /* Never behind the cursor: a timer due already waits for the next tick
     * (during an advance, the one after the advance's last). */
    if (tick < w->floor_tick) {
        tick = w->floor_tick;
        due_ms = tick * w->tick_ms;
    }
    t->due_ms = due_ms;
    t->fn = fn;
    t->arg = arg;
    t->armed = true;
    push(&w->slots[(size_t)((uint64_t)tick & w->mask)], t);
    w->count++;
}

size_t timerwheel_advance(struct timerwheel *w, int64_t now_ms)
{
    int64_t now_tick = now_ms / w->tick_ms;
    size_t fired = 0;
    if (w->advancing || now_tick < w->next_tick)
        return 0;
    w->advancing = true;
    w->floor_tick = now_tick + 1;
    /* More than a turn behind: every slot once is enough (a timer further
     * away than a turn stays for its round). */
    int64_t first = w->next_tick;
    if (now_tick - first > (int64_t)w->mask)
        first = now_tick - (int64_t)w->mask;
    for (int64_t tick = first; tick <= now_tick; tick++) {
        struct tw_timer **head = &w->slots[(size_t)((uint64_t)tick & w->mask)];
        /* Detach the slot: callbacks may cancel any timer on it (they find
         * it through t->head) and what they schedule lands in the slots. */
        w->firing = *head;
        *head = NULL;
        for (struct tw_timer *t = w->firing; t; t = t->next)
            t->head = &w->firing;
        while (w->firing) {
            struct tw_timer *t = w->firing;
            unlink_timer(t);
            if (t->due_ms > now_ms) { /* a later round: back into its slot */
                push(head, t);
                continue;
            }
            t->armed = false;
            w->count--;
            fired++;
            t->fn(t, t->arg);
        }
    }
    /* The current tick is visited again next time: a timer due later in it
     * (past now_ms) went back to its slot and must not wait a turn. */
    w->next_tick = w->floor_tick = now_tick;
    w->advancing = false;
    return fired;
}

size_t timerwheel_count(const struct timerwheel *w)
{
    return w->count;
}
