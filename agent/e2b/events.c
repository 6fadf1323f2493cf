/* Sandbox lifecycle events for the console (claimed, armed, released with a
 * reason, failed), sent to the hub over the tunnel: POST
 * /internal/v1/sandbox-events {"events": [...]} on the `hub` service
 * (hub/sandbox_events.c keeps them in the `sandboxes` table).
 *
 * A create never waits for the hub: events go into a bounded ring (drop the
 * oldest when full, counted in agentbox_e2b_events_dropped_total) that a
 * timer flushes in batches, one call in flight at a time; a failed call
 * keeps its events for the next try, so a hub outage loses only what
 * overflows the ring. The same timer notices sandboxes that ended without
 * an E2B call (idle timeout, runtime) and reports them released "ended". */
#include "agent/e2b/e2b.h"

#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_MAX 4096
#define BATCH_MAX 256
#define FLUSH_MS 1000
#define LIVE_MAX 8192

struct e2b_events {
    struct e2b *e;
    json_t *ring[RING_MAX];
    size_t head, n;
    size_t inflight; /* events of the call in flight (the ring's oldest) */
    struct loop_timer timer;
    struct metric_family *dropped, *sent;
    char (*live)[RT_ID_MAX + 1]; /* armed sandboxes we have not reported ended */
    size_t nlive;
};

static void schedule(struct e2b_events *q);

static void push(struct e2b_events *q, json_t *ev)
{
    if (q->n == RING_MAX) {
        if (q->inflight > 0) { /* never drop what is being sent: drop the new one */
            json_decref(ev);
            metrics_add(q->dropped, NULL, 1);
            return;
        }
        json_decref(q->ring[q->head]);
        q->head = (q->head + 1) % RING_MAX;
        q->n--;
        metrics_add(q->dropped, NULL, 1);
    }
    q->ring[(q->head + q->n) % RING_MAX] = ev;
    q->n++;
}

static void live_add(struct e2b_events *q, const char *id)
{
    if (q->live && q->nlive < LIVE_MAX)
        ab_strlcpy(q->live[q->nlive++], id, RT_ID_MAX + 1);
}

static void live_del(struct e2b_events *q, const char *id)
{
    for (size_t i = 0; i < q->nlive; i++) {
        if (strcmp(q->live[i], id) == 0) {
            memcpy(q->live[i], q->live[q->nlive - 1], RT_ID_MAX + 1);
            q->nlive--;
            return;
        }
    }
}

void e2b_event_ids(struct e2b *e, const char *type, const char *id, const char *ns, const char *env,
                   const char *pool, const char *team, const char *user, const json_t *metadata,
                   const char *reason, const char *assertion)
{
    struct e2b_events *q = e->events;
    if (!q)
        return;
    json_t *ev =
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:I}", "type", type, "id", id, "namespace", ns,
                  "env", env ? env : "", "pool", pool ? pool : "", "team", team ? team : "", "user",
                  user ? user : "", "at", (json_int_t)ab_wall_ms());
    if (!ev)
        return;
    if (metadata)
        json_object_set_new(ev, "metadata", json_deep_copy(metadata));
    if (reason)
        json_object_set_new(ev, "reason", json_string(reason));
    /* a claim makes the hub's row only with the principal's assertion for us */
    if (assertion && assertion[0])
        json_object_set_new(ev, "assertion", json_string(assertion));
    if (strcmp(type, "armed") == 0)
        live_add(q, id);
    else if (strcmp(type, "released") == 0 || strcmp(type, "failed") == 0)
        live_del(q, id);
    push(q, ev);
}

void e2b_event(struct e2b *e, const char *type, const struct rt_sandbox *s, const char *reason)
{
    e2b_event_ids(e, type, s->id, s->ns, s->env, s->pool, s->team, s->owner, s->metadata, reason,
                  NULL);
}

static void sent(const struct tun_call_result *res, void *arg)
{
    struct e2b_events *q = arg;
    size_t k = q->inflight;
    q->inflight = 0;
    if (res->status >= 200 && res->status < 300) {
        for (size_t i = 0; i < k && q->n > 0; i++) {
            json_decref(q->ring[q->head]);
            q->head = (q->head + 1) % RING_MAX;
            q->n--;
        }
        metrics_add(q->sent, NULL, (double)k);
    } else if (res->status >= 400 && res->status < 500) {
        /* the hub will never take this batch: drop it rather than loop on it */
        LOG_WARN("hub refused sandbox events", "status", res->status > 0 ? "4xx" : "0");
        for (size_t i = 0; i < k && q->n > 0; i++) {
            json_decref(q->ring[q->head]);
            q->head = (q->head + 1) % RING_MAX;
            q->n--;
        }
        metrics_add(q->dropped, NULL, (double)k);
    }
}

static void reap_ended(struct e2b_events *q)
{
    struct rt *rt = e2b_rt(q->e);
    if (!rt)
        return;
    for (size_t i = 0; i < q->nlive;) {
        struct rt_sandbox s;
        memset(&s, 0, sizeof(s));
        if (rt_get(rt, q->live[i], &s) == 0 && s.state != RT_STOPPING) {
            json_decref(s.metadata);
            i++;
            continue;
        }
        char id[RT_ID_MAX + 1];
        ab_strlcpy(id, q->live[i], sizeof(id));
        json_decref(s.metadata);
        e2b_event_ids(q->e, "released", id, s.ns, s.env, s.pool, s.team, s.owner, NULL, "ended",
                      NULL); /* removes it from live */
    }
}

static void tick(struct loop_timer *t)
{
    struct e2b_events *q = t->arg;
    struct hub_link *hub = e2b_hub(q->e);

    reap_ended(q);
    if (!hub_link_configured(hub)) { /* standalone: nobody to tell; keep memory bounded */
        while (q->n > 0) {
            json_decref(q->ring[q->head]);
            q->head = (q->head + 1) % RING_MAX;
            q->n--;
        }
    }
    if (hub_link_session(hub) && q->n > 0 && q->inflight == 0) {
        size_t k = q->n < BATCH_MAX ? q->n : BATCH_MAX;
        json_t *arr = json_array();
        for (size_t i = 0; i < k; i++)
            json_array_append(arr, q->ring[(q->head + i) % RING_MAX]);
        json_t *body = json_pack("{s:o}", "events", arr);
        char *txt = json_dumps(body, JSON_COMPACT);
        json_decref(body);
        struct tun_header h[] = {{"Content-Type", "application/json"}};
        if (txt && hub_link_call(hub, "POST", "/internal/v1/sandbox-events", h, 1, txt, strlen(txt),
                                 64 * 1024, sent, q) == 0)
            q->inflight = k;
        free(txt);
    }
    schedule(q);
}

static void schedule(struct e2b_events *q)
{
    loop_timer_start(e2b_loop(q->e), &q->timer, FLUSH_MS, tick, q);
}

int e2b_events_new(struct e2b *e, struct e2b_events **out)
{
    struct e2b_events *q = calloc(1, sizeof(*q));
    if (!q)
        return AB_ENOMEM;
    q->e = e;
    q->live = calloc(LIVE_MAX, RT_ID_MAX + 1);
    q->dropped = metrics_register(metrics_default(), "agentbox_e2b_events_dropped_total",
                                  "Sandbox lifecycle events dropped (queue full or refused)",
                                  METRIC_COUNTER, NULL, NULL, 0);
    q->sent = metrics_register(metrics_default(), "agentbox_e2b_events_sent_total",
                               "Sandbox lifecycle events delivered to the hub", METRIC_COUNTER,
                               NULL, NULL, 0);
    schedule(q);
    *out = q;
    return 0;
}

/* After the tunnel stopped: its end delivered the call in flight, if any. */
void e2b_events_free(struct e2b_events *q)
{
    if (!q)
        return;
    loop_timer_cancel(&q->timer);
    for (size_t i = 0; i < q->n; i++)
        json_decref(q->ring[(q->head + i) % RING_MAX]);
    free(q->live);
    free(q);
}
