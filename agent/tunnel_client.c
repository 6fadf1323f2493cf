/* See tunnel_client.h.
 *
 * Two framings of one wire (RFC 6455, subprotocol agentbox.tunnel.v1),
 * chosen by --tunnel-framing: "wslay" (default) dials an lws raw socket
 * (TLS by lws/OpenSSL for wss://), writes the upgrade request itself, checks
 * the 101 (tunnel_upgrade.h) and frames with wslay (tunnel_wsl.h); "lws" is
 * lws's WebSocket client (tunnel_ws.h), kept as the fallback. Either hub
 * framing accepts either. */
#include "agent/tunnel_client.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/relay.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agentbox/tls_client.h"
#include "agentbox/tunnel_upgrade.h"
#include "agentbox/tunnel_ws.h"
#include "agentbox/tunnel_wsl.h"
#include "agentbox/version.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROTOCOL "agentbox.tunnel.v1"
#define STATS_INTERVAL_MS 5000
#define RAW_PROTOCOL "ab-tunnel-raw"
#define HANDSHAKE_TIMEOUT_S 10 /* a hub that accepts but does not answer the upgrade */
#define TLS_BUF (64 * 1024)    /* plaintext read / ciphertext written per step */

struct agent_tunnel {
    struct loop *loop;
    struct lws_vhost *vh;
    struct lws_protocols protocols[2];
    struct tun_callbacks cb;
    struct agent_tunnel_options o;
    char host[256], cluster[32], auth[128], ca[512];
    int port;
    bool tls;

    struct lws *wsi; /* the current connection, or NULL */
    bool raw;        /* wslay framing on a raw socket (else lws's WebSocket client) */
    struct tun_ws ws;
    struct tun_wsl wsl;
    struct tun_upgrade_reader *rd; /* raw: until the hub's answer is complete */
    char key[TUN_UPGRADE_KEY_LEN + 1];
    bool upgraded, conn_live;       /* raw: 101 checked; a connection attempt is ours to retry */
    struct tls_client_ctx *tls_ctx; /* raw wss://: TLS over the raw socket (tls_client.h) */
    struct tls_client *tlsc;        /* the current connection's, or NULL */
    bool tls_up;
    uint8_t *tls_buf; /* TLS_BUF */
    struct tun_session *s;
    bool established, stopping;
    int64_t connected_at_ms; /* 0 while not connected */
    int64_t epoch;
    char close_reason[128];
    uint64_t stalls_seen;

    struct tun_backoff bo;
    struct loop_timer retry_timer, ping_timer, watchdog_timer, stats_timer;
    agent_tunnel_event_fn event_fn;
    void *event_arg;

    struct metric_family *m_connected, *m_reconnects, *m_rtt, *m_streams, *m_buffered, *m_stalls;
};

static void schedule_retry(struct agent_tunnel *t, int64_t connected_ms, const char *why);

/* --- the two framings, one set of verbs ----------------------------------------- */

static void cl_want_write(struct agent_tunnel *t)
{
    if (t->raw)
        tun_wsl_want_write(&t->wsl);
    else
        tun_ws_want_write(&t->ws);
}

static int64_t cl_last_rx_ms(struct agent_tunnel *t)
{
    return t->raw ? t->wsl.last_rx_ms : t->ws.last_rx_ms;
}

static int64_t cl_rtt_us(struct agent_tunnel *t)
{
    return t->raw ? t->wsl.last_rtt_us : t->ws.last_rtt_us;
}

struct tun_session *agent_tunnel_session(struct agent_tunnel *t)
{
    return t && t->established && t->s ? t->s : NULL;
}

int64_t agent_tunnel_epoch(struct agent_tunnel *t)
{
    return t ? t->epoch : 0;
}

void agent_tunnel_set_event_hook(struct agent_tunnel *t, agent_tunnel_event_fn fn, void *arg)
{
    t->event_fn = fn;
    t->event_arg = arg;
}

/* --- session callbacks -------------------------------------------------------------- */

static void on_welcome(struct tun_session *s, json_t *msg, void *arg)
{
    struct agent_tunnel *t = arg;
    t->established = true;
    t->epoch = (int64_t)json_integer_value(json_object_get(msg, "epoch"));
    metrics_set(t->m_connected, NULL, 1);
    char ep[24];
    snprintf(ep, sizeof(ep), "%lld", (long long)t->epoch);
    LOG_INFO("tunnel up", "hub", t->o.hub_url, "cluster", t->cluster, "epoch", ep);
    /* the hub's assertion keys, to the event hook as a "welcome" event: the
     * agent's auth replaces its keyring on every WELCOME (rotation) */
    json_t *ev = json_pack("{s:s,s:O?}", "type", "welcome", "assertionKeys",
                           json_object_get(msg, "assertionKeys"));
    if (ev && t->event_fn)
        t->event_fn(ev, t->event_arg);
    json_decref(ev);
}

static void on_event(struct tun_session *s, json_t *msg, void *arg)
{
    struct agent_tunnel *t = arg;
    if (t->event_fn)
        t->event_fn(msg, t->event_arg);
}

static void on_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct agent_tunnel *t = arg;
    struct http_router *router;
    if (strcmp(head->service, RELAY_SVC_E2B) == 0)
        router = t->o.e2b_router;
    else if (strcmp(head->service, RELAY_SVC_DATA) == 0)
        router = t->o.data_router;
    else if (strcmp(head->service, RELAY_SVC_NATIVE) == 0)
        router = t->o.native_router;
    else {
        tun_stream_reset(st, TUN_RESET_NOT_FOUND, "the agent serves only e2b, data and native");
        return;
    }
    tun_http_serve(st, head, router, "tunnel:hub", t);
}

static void want_write(struct tun_session *s, void *arg)
{
    struct agent_tunnel *t = arg;
    if (t->wsi)
        cl_want_write(t);
}

/* --- timers --------------------------------------------------------------------------- */

static void ping_tick(struct loop_timer *tm)
{
    struct agent_tunnel *t = tm->arg;
    if (!t->wsi)
        return;
    if (t->raw)
        tun_wsl_ping(&t->wsl);
    else
        tun_ws_ping(&t->ws);
    loop_timer_start(t->loop, &t->ping_timer, t->o.ping_interval_ms, ping_tick, t);
}

static void watchdog_tick(struct loop_timer *tm)
{
    struct agent_tunnel *t = tm->arg;
    if (!t->wsi)
        return;
    int64_t silent = ab_now_ms() - cl_last_rx_ms(t);
    if (silent >= t->o.timeout_ms) {
        char s[32];
        snprintf(s, sizeof(s), "%lld", (long long)silent);
        LOG_WARN("hub silent; dropping the tunnel", "silent_ms", s);
        ab_strlcpy(t->close_reason, "hub silent", sizeof(t->close_reason));
        if (t->raw)
            tun_wsl_kill(&t->wsl);
        else
            tun_ws_kill(&t->ws, "silent");
        return;
    }
    loop_timer_start(t->loop, &t->watchdog_timer, t->o.timeout_ms - silent, watchdog_tick, t);
}

static void stats_tick(struct loop_timer *tm)
{
    struct agent_tunnel *t = tm->arg;
    if (t->s) {
        struct tun_stats st;
        tun_session_stats(t->s, &st);
        metrics_set(t->m_streams, NULL, st.streams);
        metrics_set(t->m_buffered, NULL, (double)st.buffered);
        if (st.credit_stalls > t->stalls_seen) {
            metrics_add(t->m_stalls, NULL, (double)(st.credit_stalls - t->stalls_seen));
            t->stalls_seen = st.credit_stalls;
        }
        if (cl_rtt_us(t))
            metrics_set(t->m_rtt, NULL, (double)cl_rtt_us(t) / 1e6);
    }
    loop_timer_start(t->loop, &t->stats_timer, STATS_INTERVAL_MS, stats_tick, t);
}

/* --- connection ---------------------------------------------------------------------- */

static void teardown(struct agent_tunnel *t)
{
    loop_timer_cancel(&t->ping_timer);
    loop_timer_cancel(&t->watchdog_timer);
    if (t->s) {
        tun_session_free(t->s); /* resets every stream: pending calls fail fast */
        t->s = NULL;
    }
    if (t->raw) {
        tun_wsl_fini(&t->wsl);
        tun_upgrade_reader_free(t->rd);
        t->rd = NULL;
        t->upgraded = false;
        tls_client_free(t->tlsc);
        t->tlsc = NULL;
        t->tls_up = false;
    } else {
        tun_ws_fini(&t->ws);
    }
    t->wsi = NULL;
    t->established = false;
    metrics_set(t->m_connected, NULL, 0);
}

static void connect_now(struct loop_timer *tm)
{
    struct agent_tunnel *t = tm->arg;
    if (t->stopping || t->wsi)
        return;
    struct lws_client_connect_info i;
    memset(&i, 0, sizeof(i));
    i.context = loop_lws(t->loop);
    i.vhost = t->vh;
    i.address = t->host;
    i.port = t->port;
    i.path = "/v1/tunnel";
    i.host = t->host;
    i.origin = t->host;
    i.protocol = t->raw ? RAW_PROTOCOL : PROTOCOL;
    i.local_protocol_name = t->raw ? RAW_PROTOCOL : PROTOCOL;
    if (t->raw)
        i.method = "RAW"; /* the upgrade is ours: raw_callback */
    i.ssl_connection = t->tls && !t->raw ? LCCSCF_USE_SSL : 0; /* raw: tls_client.h */
    i.opaque_user_data = t;
    i.pwsi = &t->wsi;
    t->close_reason[0] = '\0';
    t->conn_live = true;
    if (!lws_client_connect_via_info(&i)) {
        t->wsi = NULL;
        if (t->conn_live) /* else CONNECTION_ERROR came already and retried */
            schedule_retry(t, 0, "cannot start the connection");
        t->conn_live = false;
    }
}

static void schedule_retry(struct agent_tunnel *t, int64_t connected_ms, const char *why)
{
    if (t->stopping)
        return;
    uint32_t rnd = 0;
    crypto_random(&rnd, sizeof(rnd));
    uint32_t delay = tun_backoff_next(&t->bo, connected_ms, rnd);
    char d[24], cap[24];
    snprintf(d, sizeof(d), "%u", delay);
    snprintf(cap, sizeof(cap), "%u", tun_backoff_ceiling(&t->bo));
    LOG_WARN("tunnel down; reconnecting", "hub", t->o.hub_url, "reason", why, "retry_in_ms", d,
             "backoff_cap_ms", cap);
    metrics_add(t->m_reconnects, NULL, 1);
    loop_timer_start(t->loop, &t->retry_timer, delay, connect_now, t);
}

static const char *refusal_text(unsigned status, const char *in, char *buf, size_t len,
                                const char *cluster)
{
    if (status == 401 || (in && strstr(in, "unauthorized")))
        snprintf(buf, len,
                 "hub refused the join token (HTTP 401): cluster '%s' is unknown or the token "
                 "is wrong; check --join-token (agentbox-hub cluster rotate-token %s)",
                 cluster, cluster);
    else if (status == 403)
        snprintf(buf, len,
                 "hub refused the tunnel (HTTP 403): cluster '%s' is disabled "
                 "(agentbox-hub cluster enable %s)",
                 cluster, cluster);
    else if (status)
        snprintf(buf, len, "hub answered HTTP %u instead of a WebSocket upgrade", status);
    else
        snprintf(buf, len, "%s", in ? in : "connection failed");
    return buf;
}

static const char *refusal_reason(struct lws *wsi, const char *in, char *buf, size_t len,
                                  const char *cluster)
{
    return refusal_text(wsi ? lws_http_client_http_response(wsi) : 0, in, buf, len, cluster);
}

/* The upgrade is done: the session, HELLO, the ping and watchdog timers. */
static int session_up(struct agent_tunnel *t)
{
    struct tun_config cfg;
    char err[128] = "";
    memset(&cfg, 0, sizeof(cfg));
    cfg.role = TUN_ROLE_AGENT;
    cfg.cb = &t->cb;
    cfg.arg = t;
    cfg.window = TUN_BULK_WINDOW;
    if (tun_session_new(&cfg, &t->s, err, sizeof(err)) != 0) {
        LOG_ERROR("cannot create the tunnel session", "error", err);
        return -1;
    }
    t->connected_at_ms = ab_now_ms();
    json_t *hello = json_pack("{s:s,s:s,s:i,s:[s,s,s]}", "cluster", t->cluster, "version",
                              AGENTBOX_VERSION, "protocol", 1, "services", "e2b", "data", "native");
    tun_session_send_json(t->s, TUN_HELLO, hello);
    json_decref(hello);
    loop_timer_start(t->loop, &t->ping_timer, t->o.ping_interval_ms, ping_tick, t);
    loop_timer_start(t->loop, &t->watchdog_timer, t->o.timeout_ms, watchdog_tick, t);
    return 0;
}

/* --- raw connections: our upgrade, wslay framing ---------------------------------- */

static int raw_rx(struct agent_tunnel *t, const void *in, size_t len)
{
    if (!t->s || t->wsl.closing)
        return 0;
    int rc = tun_wsl_rx(&t->wsl, in, len);
    if (rc == AB_ECLOSED) {
        /* the reply goes out in WRITEABLE, then the socket closes */
        ab_strlcpy(t->close_reason, t->wsl.peer_reason, sizeof(t->close_reason));
        if (strcmp(t->close_reason, "superseded") == 0)
            LOG_ERROR("tunnel superseded: another agent connected with the same cluster id",
                      "cluster", t->cluster);
        return 0;
    }
    if (rc < 0) {
        LOG_WARN("tunnel protocol error; reconnecting", "error", t->wsl.err ? t->wsl.err : "?");
        ab_strlcpy(t->close_reason, "protocol error", sizeof(t->close_reason));
        return -1;
    }
    return 0;
}

/* Reads the hub's answer to the upgrade; a refusal closes with its reason. */
static int raw_handshake(struct agent_tunnel *t, const char *in, size_t len)
{
    size_t used = 0;
    int status = 0;
    const char *why = NULL;
    int rc = tun_upgrade_reader_feed(t->rd, in, len, &used, &status, &why);
    if (rc == 0)
        return 0;
    if (rc < 0) {
        snprintf(t->close_reason, sizeof(t->close_reason), "hub answered a malformed upgrade: %s",
                 why ? why : "?");
        return -1;
    }
    const struct http_request *h = tun_upgrade_reader_head(t->rd, &status);
    char why2[160];
    rc = tun_upgrade_check_response(status, h, t->key, why2, sizeof(why2));
    if (rc == AB_EDENIED) {
        char buf[300];
        refusal_text((unsigned)status, NULL, buf, sizeof(buf), t->cluster);
        ab_strlcpy(t->close_reason, buf, sizeof(t->close_reason));
        return -1;
    }
    if (rc != 0) {
        ab_strlcpy(t->close_reason, why2, sizeof(t->close_reason));
        return -1;
    }
    t->upgraded = true;
    tun_upgrade_reader_free(t->rd);
    t->rd = NULL;
    lws_set_timeout(t->wsi, NO_PENDING_TIMEOUT, 0);
    t->close_reason[0] = '\0';
    if (session_up(t) != 0)
        return -1;
    tun_wsl_start(&t->wsl, t->s);
    tun_wsl_want_write(&t->wsl);
    if (used < len)
        return raw_rx(t, in + used, len - used);
    return 0;
}

/* Sends the upgrade request (through TLS when wss://). */
static int send_upgrade(struct agent_tunnel *t)
{
    char req[1024];
    int n;
    if (tun_upgrade_key(t->key) != 0 ||
        (n = tun_upgrade_request(req, sizeof(req), t->host, t->port, t->key, t->auth, t->cluster)) <
            0 ||
        tun_wsl_send_raw(&t->wsl, req, (size_t)n) != 0) {
        ab_strlcpy(t->close_reason, "cannot write the upgrade request", sizeof(t->close_reason));
        return -1;
    }
    return 0;
}

/* Writes the ciphertext TLS has made (in WRITEABLE). */
static int tls_flush(struct agent_tunnel *t)
{
    size_t n;
    while ((n = tls_client_output(t->tlsc, t->tls_buf, TLS_BUF)) > 0)
        if (lws_write(t->wsi, t->tls_buf, n, LWS_WRITE_RAW) < (int)n)
            return -1;
    return 0;
}

/* tun_wsl's write_fn for wss://: encrypt, then write. */
static int tls_send(void *arg, const uint8_t *data, size_t len)
{
    struct agent_tunnel *t = arg;
    return tls_client_write(t->tlsc, data, len) == 0 ? tls_flush(t) : -1;
}

static int raw_connected(struct agent_tunnel *t, struct lws *wsi)
{
    t->wsi = wsi;
    if (tun_wsl_init(&t->wsl, wsi, false) != 0 || !(t->rd = tun_upgrade_reader_new(true))) {
        ab_strlcpy(t->close_reason, "out of memory for the tunnel's buffers",
                   sizeof(t->close_reason));
        return -1;
    }
    lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, HANDSHAKE_TIMEOUT_S);
    if (t->tls_ctx) {
        char why[160];
        if (!(t->tlsc = tls_client_new(t->tls_ctx, t->host)) ||
            tls_client_handshake(t->tlsc, why, sizeof(why)) < 0) {
            ab_strlcpy(t->close_reason, "cannot start TLS to the hub", sizeof(t->close_reason));
            return -1;
        }
        t->wsl.write_fn = tls_send;
        t->wsl.write_arg = t;
        ab_strlcpy(t->close_reason, "hub did not finish the TLS handshake",
                   sizeof(t->close_reason));
        lws_callback_on_writable(wsi); /* the ClientHello */
        return 0;
    }
    if (send_upgrade(t) != 0)
        return -1;
    ab_strlcpy(t->close_reason, "hub did not answer the upgrade", sizeof(t->close_reason));
    return 0;
}

/* Plaintext from the hub: the upgrade's answer, then WebSocket bytes. */
static int raw_plain(struct agent_tunnel *t, const char *in, size_t len)
{
    return t->upgraded ? raw_rx(t, in, len) : raw_handshake(t, in, len);
}

/* Ciphertext from the hub: the TLS handshake, then plaintext for raw_plain. */
static int tls_rx(struct agent_tunnel *t, const void *in, size_t len)
{
    if (tls_client_input(t->tlsc, in, len) != 0)
        return -1;
    if (!t->tls_up) {
        char why[160];
        int hs = tls_client_handshake(t->tlsc, why, sizeof(why));
        if (hs < 0) {
            ab_strlcpy(t->close_reason, why, sizeof(t->close_reason));
            return -1;
        }
        if (tls_client_output_pending(t->tlsc))
            lws_callback_on_writable(t->wsi);
        if (hs == 0)
            return 0;
        t->tls_up = true;
        if (send_upgrade(t) != 0)
            return -1;
        ab_strlcpy(t->close_reason, "hub did not answer the upgrade", sizeof(t->close_reason));
    }
    for (;;) {
        ssize_t n = tls_client_read(t->tlsc, t->tls_buf, TLS_BUF);
        if (n == 0)
            break;
        if (n < 0) {
            if (!t->close_reason[0])
                ab_strlcpy(t->close_reason,
                           n == AB_ECLOSED ? "hub closed the TLS session" : "TLS error",
                           sizeof(t->close_reason));
            return -1;
        }
        if (raw_plain(t, (const char *)t->tls_buf, (size_t)n) != 0)
            return -1;
        if (!t->wsi || !t->tlsc)
            return 0;
    }
    if (tls_client_output_pending(t->tlsc))
        lws_callback_on_writable(t->wsi);
    return 0;
}

/* The connection is gone (either framing): how long it was up and why, then
 * the next try on the backoff. */
static void closed(struct agent_tunnel *t)
{
    int64_t up = t->connected_at_ms ? ab_now_ms() - t->connected_at_ms : 0;
    char why[160];

    t->connected_at_ms = 0;
    snprintf(why, sizeof(why), "%s", t->close_reason[0] ? t->close_reason : "connection closed");
    teardown(t);
    schedule_retry(t, up, why);
}

static int raw_client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                               void *in, size_t len)
{
    struct agent_tunnel *t = lws_get_opaque_user_data(wsi);
    if (!t)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        if (!t->conn_live)
            return 0;
        t->conn_live = false;
        char buf[300];
        const char *why = refusal_text(0, in, buf, sizeof(buf), t->cluster);
        teardown(t);
        schedule_retry(t, 0, why);
        return 0;
    }
    case LWS_CALLBACK_RAW_CONNECTED:
        return raw_connected(t, wsi);
    case LWS_CALLBACK_RAW_RX:
        if (t->wsi != wsi)
            return 0;
        return t->tlsc ? tls_rx(t, in, len) : raw_plain(t, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE:
        if (t->wsi != wsi)
            return -1;
        if (t->tlsc && (tls_flush(t) != 0 || !t->tls_up))
            return t->tls_up ? -1 : 0;
        return tun_wsl_writeable(&t->wsl);
    case LWS_CALLBACK_RAW_CLOSE: {
        if (!t->conn_live || (t->wsi && t->wsi != wsi))
            return 0;
        t->conn_live = false;
        closed(t);
        return 0;
    }
    default:
        return 0;
    }
}

static int client_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                           size_t len)
{
    struct agent_tunnel *t = lws_get_opaque_user_data(wsi);
    if (!t)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_APPEND_HANDSHAKE_HEADER: {
        unsigned char **p = (unsigned char **)in, *end = (*p) + len;
        if (lws_add_http_header_by_name(
                wsi, (const unsigned char *)"authorization:", (const unsigned char *)t->auth,
                (int)strlen(t->auth), p, end) ||
            lws_add_http_header_by_name(wsi, (const unsigned char *)"x-agentbox-cluster:",
                                        (const unsigned char *)t->cluster, (int)strlen(t->cluster),
                                        p, end))
            return -1;
        return 0;
    }
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR: {
        char buf[300];
        const char *why = refusal_reason(wsi, in, buf, sizeof(buf), t->cluster);
        if (t->wsi == wsi || !t->s)
            t->wsi = NULL;
        teardown(t);
        schedule_retry(t, 0, why);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_ESTABLISHED: {
        t->wsi = wsi;
        if (session_up(t) != 0)
            return -1;
        if (tun_ws_init(&t->ws, wsi, t->s) != 0) {
            LOG_ERROR("cannot create the tunnel session", "error",
                      "out of memory for the tunnel's frame buffers");
            return -1;
        }
        tun_ws_want_write(&t->ws);
        return 0;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE: {
        if (!t->s || t->ws.closing)
            return 0;
        int rc =
            tun_ws_receive(&t->ws, in, len, lws_is_first_fragment(wsi), lws_is_final_fragment(wsi));
        if (rc < 0) {
            LOG_WARN("tunnel protocol error; reconnecting", "error",
                     rc == AB_ELIMIT ? "message over 1 MiB" : tun_session_error(t->s));
            ab_strlcpy(t->close_reason, "protocol error", sizeof(t->close_reason));
            return -1;
        }
        return 0;
    }
    case LWS_CALLBACK_CLIENT_RECEIVE_PONG:
        tun_ws_pong(&t->ws);
        return 0;
    case LWS_CALLBACK_CLIENT_WRITEABLE:
        if (!t->s)
            return -1;
        return tun_ws_writeable(&t->ws);
    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len > 2) {
            size_t n = AB_MIN(len - 2, sizeof(t->close_reason) - 1);
            memcpy(t->close_reason, (const char *)in + 2, n);
            t->close_reason[n] = '\0';
            if (strcmp(t->close_reason, "superseded") == 0)
                LOG_ERROR("tunnel superseded: another agent connected with the same cluster id",
                          "cluster", t->cluster);
        }
        return 0;
    case LWS_CALLBACK_CLIENT_CLOSED: {
        closed(t);
        return 0;
    }
    default:
        return 0;
    }
}

static int parse_url(struct agent_tunnel *t, const char *url, char *err, size_t errlen)
{
    const char *p;
    if (strncmp(url, "wss://", 6) == 0) {
        t->tls = true;
        p = url + 6;
    } else if (strncmp(url, "ws://", 5) == 0) {
        p = url + 5;
    } else {
        snprintf(err, errlen, "hub_url '%s' must start with wss:// or ws://", url);
        return AB_EINVAL;
    }
    const char *slash = strchr(p, '/');
    size_t hl = slash ? (size_t)(slash - p) : strlen(p);
    char hp[300];
    if (hl == 0 || hl >= sizeof(hp)) {
        snprintf(err, errlen, "hub_url '%s' has no host", url);
        return AB_EINVAL;
    }
    memcpy(hp, p, hl);
    hp[hl] = '\0';
    char *colon = strrchr(hp, ':');
    t->port = t->tls ? 443 : 80;
    if (colon && !strchr(colon, ']')) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (*end || port <= 0 || port > 65535) {
            snprintf(err, errlen, "hub_url '%s' has a bad port", url);
            return AB_EINVAL;
        }
        t->port = (int)port;
        *colon = '\0';
    }
    if (ab_strlcpy(t->host, hp, sizeof(t->host)) >= sizeof(t->host)) {
        snprintf(err, errlen, "hub_url's host is longer than %zu bytes", sizeof(t->host) - 1);
        return AB_EINVAL;
    }
    return 0;
}

int agent_tunnel_start(struct loop *loop, const struct agent_tunnel_options *o,
                       struct agent_tunnel **out, char *err, size_t errlen)
{
    struct agent_tunnel *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, errlen, "out of memory starting the tunnel client");
        return AB_ENOMEM;
    }
    t->loop = loop;
    t->o = *o;
    if (t->o.ping_interval_ms <= 0)
        t->o.ping_interval_ms = 10000;
    if (t->o.timeout_ms <= 0)
        t->o.timeout_ms = 30000;
    int rc = parse_url(t, o->hub_url, err, errlen);
    if (rc == 0 && ab_strlcpy(t->cluster, o->cluster, sizeof(t->cluster)) >= sizeof(t->cluster)) {
        snprintf(err, errlen, "cluster_id is longer than %zu bytes", sizeof(t->cluster) - 1);
        rc = AB_EINVAL;
    }
    if (rc == 0 &&
        (size_t)snprintf(t->auth, sizeof(t->auth), "Bearer %s", o->token) >= sizeof(t->auth)) {
        snprintf(err, errlen, "join_token is longer than %zu bytes", sizeof(t->auth) - 8);
        rc = AB_EINVAL;
    }
    if (rc == 0 && o->hub_ca && ab_strlcpy(t->ca, o->hub_ca, sizeof(t->ca)) >= sizeof(t->ca)) {
        snprintf(err, errlen, "hub_ca path is longer than %zu bytes", sizeof(t->ca) - 1);
        rc = AB_EINVAL;
    }
    if (rc != 0) {
        explicit_bzero(t->auth, sizeof(t->auth));
        free(t);
        return rc;
    }
    tun_backoff_init(&t->bo, (uint32_t)(o->backoff_min_ms > 0 ? o->backoff_min_ms : 500),
                     (uint32_t)(o->backoff_max_ms > 0 ? o->backoff_max_ms : 30000),
                     (uint32_t)(o->backoff_reset_ms > 0 ? o->backoff_reset_ms : 60000));
    tun_ep_callbacks_init(&t->cb);
    t->cb.on_welcome = on_welcome;
    t->cb.on_event = on_event;
    t->cb.on_open = on_open;
    t->cb.want_write = want_write;

    struct metrics_registry *mr = metrics_default();
    t->m_connected = metrics_register(mr, "agentbox_tunnel_connected",
                                      "1 while the tunnel to the hub is established.", METRIC_GAUGE,
                                      NULL, NULL, 0);
    t->m_reconnects =
        metrics_register(mr, "agentbox_tunnel_reconnects_total",
                         "Tunnel connections lost or refused.", METRIC_COUNTER, NULL, NULL, 0);
    t->m_rtt = metrics_register(mr, "agentbox_tunnel_ping_rtt_seconds",
                                "Round trip of the last WebSocket ping to the hub.", METRIC_GAUGE,
                                NULL, NULL, 0);
    t->m_streams = metrics_register(mr, "agentbox_tunnel_streams", "Open tunnel streams.",
                                    METRIC_GAUGE, NULL, NULL, 0);
    t->m_buffered =
        metrics_register(mr, "agentbox_tunnel_buffered_bytes",
                         "Bytes queued for sending on the tunnel.", METRIC_GAUGE, NULL, NULL, 0);
    t->m_stalls = metrics_register(mr, "agentbox_tunnel_window_stalls_total",
                                   "Times a stream ran out of send credit with data queued.",
                                   METRIC_COUNTER, NULL, NULL, 0);

    t->raw = !o->framing || strcmp(o->framing, "wslay") == 0;
    if (!t->raw && strcmp(o->framing, "lws") != 0) {
        snprintf(err, errlen, "tunnel_framing '%s' must be wslay or lws", o->framing);
        explicit_bzero(t->auth, sizeof(t->auth));
        free(t);
        return AB_EINVAL;
    }
    /* wss:// on a raw socket: lws 4.1's raw client calls SSL_connect before
     * its socket exists (lws_client_connect_via_info fails at once), so the
     * raw client dials plain and TLS runs over it here (tls_client.h) */
    if (t->raw && t->tls &&
        tls_client_ctx_new(o->hub_ca ? t->ca : NULL, &t->tls_ctx, err, errlen) != 0) {
        explicit_bzero(t->auth, sizeof(t->auth));
        free(t);
        return AB_EIO;
    }
    if (t->tls_ctx && !(t->tls_buf = malloc(TLS_BUF))) {
        snprintf(err, errlen, "out of memory starting the tunnel client");
        tls_client_ctx_free(t->tls_ctx);
        explicit_bzero(t->auth, sizeof(t->auth));
        free(t);
        return AB_ENOMEM;
    }
    t->protocols[0].name = t->raw ? RAW_PROTOCOL : PROTOCOL;
    t->protocols[0].callback = t->raw ? raw_client_callback : client_callback;
    t->protocols[0].rx_buffer_size = 64 * 1024;
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    info.vhost_name = "tunnel-client";
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = t->protocols;
    /* lws builds a vhost's client TLS context only with this option */
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    if (o->hub_ca)
        info.client_ssl_ca_filepath = t->ca;
    t->vh = lws_create_vhost(loop_lws(loop), &info);
    if (!t->vh) {
        snprintf(err, errlen, "cannot set up the tunnel client (bad hub_ca '%s'?)",
                 o->hub_ca ? o->hub_ca : "");
        free(t);
        return AB_EIO;
    }
    loop_timer_start(t->loop, &t->retry_timer, 0, connect_now, t);
    loop_timer_start(t->loop, &t->stats_timer, STATS_INTERVAL_MS, stats_tick, t);
    *out = t;
    return 0;
}

void agent_tunnel_stop(struct agent_tunnel *t)
{
    if (!t)
        return;
    t->stopping = true;
    loop_timer_cancel(&t->retry_timer);
    loop_timer_cancel(&t->stats_timer);
    if (t->wsi) /* the context closes it later: it must not find us */
        lws_set_opaque_user_data(t->wsi, NULL);
    teardown(t);
    tls_client_ctx_free(t->tls_ctx);
    free(t->tls_buf);
    free(t);
}
