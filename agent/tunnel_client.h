/* The agent's end of the tunnel (DESIGN §5): dials the hub, keeps one
 * session, serves the e2b, data and native services on streams through the
 * very routers its sockets use, pings every 10 s, drops a silent socket
 * after 30 s on its own watchdog, and reconnects with exponential backoff
 * and full jitter. Loop thread only. */
#ifndef AGENTBOX_AGENT_TUNNEL_CLIENT_H
#define AGENTBOX_AGENT_TUNNEL_CLIENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

struct http_router;
struct loop;
struct tun_session;
struct agent_tunnel;

struct agent_tunnel_options {
    const char *hub_url; /* ws://host:port or wss://host:port (path /v1/tunnel added) */
    const char *token;   /* abxc_… */
    const char *cluster;
    const char *hub_ca;       /* CA bundle for wss (NULL: system CAs) */
    const char *framing;      /* "wslay" (raw socket + wslay) [NULL: wslay] or "lws" */
    int64_t ping_interval_ms; /* [10000] */
    int64_t timeout_ms;       /* [30000] */
    int64_t backoff_min_ms;   /* [500] */
    int64_t backoff_max_ms;   /* [30000] */
    int64_t backoff_reset_ms; /* [60000] */
    /* where streams of each service are dispatched (the listeners' own routers; borrowed) */
    struct http_router *e2b_router, *data_router, *native_router;
};

typedef void (*agent_tunnel_event_fn)(json_t *event, void *arg);

int agent_tunnel_start(struct loop *loop, const struct agent_tunnel_options *o,
                       struct agent_tunnel **out, char *err, size_t errlen);
void agent_tunnel_stop(struct agent_tunnel *t);
/* The established session, or NULL while the tunnel is down. */
struct tun_session *agent_tunnel_session(struct agent_tunnel *t);
int64_t agent_tunnel_epoch(struct agent_tunnel *t);
/* fn gets every EVENT frame, and after each WELCOME a synthesized
 * {"type":"welcome","assertionKeys":[…]} (the hub's public keys, current first). */
void agent_tunnel_set_event_hook(struct agent_tunnel *t, agent_tunnel_event_fn fn, void *arg);

#endif
