/* The hub's end of the tunnel (DESIGN §5): a WebSocket listener on :7701
 * (/v1/tunnel), one session per cluster, the `hub` service (internal API)
 * and the `relay` service (splice to another cluster), and the hub API's
 * reach into a cluster (/api/clusters/{id}/v1/... → its native service).
 * Loop thread only. */
#ifndef AGENTBOX_HUB_TUNNEL_SERVER_H
#define AGENTBOX_HUB_TUNNEL_SERVER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

struct auth_ctx;
struct clusters;
struct http_router;
struct loop;
struct tun_session;
struct tunnel_server;

struct tunnel_server_options {
    const char *listen;   /* ":7701", "127.0.0.1:7701" */
    const char *tls_cert; /* PEM; with tls_key: wss:// */
    const char *tls_key;
    int64_t timeout_ms;       /* drop a session silent this long [30000] */
    int64_t sync_interval_ms; /* SYNC cadence [60000] */
    const char *framing;      /* "wslay" (raw socket + wslay) [NULL: wslay] or "lws" */
};

/* What the tunnel server may use; none owned, all must outlive ts. */
struct tunnel_server_deps {
    struct loop *loop;            /* its lws context hosts the listener; timers */
    struct clusters *clusters;    /* token check, session epochs, revoke hook */
    struct http_router *internal; /* the router behind the `hub` service */
    struct auth_ctx *auth;        /* assertion keys for WELCOME, relay re-signing; may be NULL */
};

int tunnel_server_start(const struct tunnel_server_deps *d, const struct tunnel_server_options *o,
                        struct tunnel_server **out, char *err, size_t errlen);
/* Closes every session and the listener. */
void tunnel_server_stop(struct tunnel_server *ts);

/* The cluster's live, established session, or NULL. */
struct tun_session *tunnel_server_session(struct tunnel_server *ts, const char *cluster_id);
size_t tunnel_server_online(struct tunnel_server *ts);
/* Calls fn with the id of every cluster that has a live, established session
 * (the hub's E2B front door fans lists out over them). fn must not open or
 * close sessions. */
void tunnel_server_each_online(struct tunnel_server *ts,
                               void (*fn)(void *arg, const char *cluster_id), void *arg);
/* Queues an EVENT to every established session (msg borrowed). */
void tunnel_server_broadcast(struct tunnel_server *ts, json_t *msg);

/* Federation hooks (one each; NULL fn removes). report: a REPORT frame of a
 * live session (msg borrowed for the call). session_end: the cluster's live
 * session is gone (closed, superseded, revoked), called at once. */
typedef void (*tunnel_server_report_fn)(void *arg, const char *cluster_id, json_t *msg);
typedef void (*tunnel_server_session_end_fn)(void *arg, const char *cluster_id);
/* A keys_revocation_fn (keys.h), arg = the tunnel server: sends every
 * session an EVENT {type: key_revoked, hash, reason}. */
/* auth_keys_fn (hub/auth.h): broadcasts {"type":"assertion_keys",
 * "assertionKeys":[…]} (current first), which agents treat as a WELCOME's. */
void tunnel_server_on_assertion_keys(void *arg, json_t *keys);
void tunnel_server_on_key_revoked(void *arg, const char *key_id, const char *hash,
                                  const char *reason);
void tunnel_server_set_report_hook(struct tunnel_server *ts, tunnel_server_report_fn fn, void *arg);
void tunnel_server_set_session_end_hook(struct tunnel_server *ts, tunnel_server_session_end_fn fn,
                                        void *arg);

#endif
