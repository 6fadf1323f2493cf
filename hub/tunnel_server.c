/* The hub's tunnel listener and its sessions. See tunnel_server.h.
 *
 * Two framings of one wire (RFC 6455, subprotocol agentbox.tunnel.v1),
 * chosen by --tunnel-framing: "wslay" (default) carries the connection on an
 * lws raw socket, parses the upgrade request itself (tunnel_upgrade.h) and
 * frames with wslay (tunnel_wsl.h); "lws" is lws's WebSocket role
 * (tunnel_ws.h), kept as the fallback. Agents of either framing connect to
 * a hub of either.
 *
 * Handshake: the token is checked before the upgrade (wslay: when the
 * request head is complete; lws: in FILTER_PROTOCOL_CONNECTION) against the
 * in-memory cluster registry (clusters.c), so the decision is synchronous; a
 * refusal is answered 401/403 with a JSON reason. After the upgrade the
 * agent sends HELLO; the hub allocates the session's epoch in PostgreSQL,
 * supersedes an older session of the same cluster, and answers WELCOME. */
#include "hub/tunnel_server.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agentbox/tunnel_upgrade.h"
#include "agentbox/tunnel_ws.h"
#include "agentbox/tunnel_wsl.h"
#include "agentbox/version.h"
#include "agentbox/assertion.h"
#include "agentbox/relay.h"
#include "agentbox/timerwheel.h"
#include "agentbox/trace.h"
#include "hub/auth.h"
#include "hub/clusters.h"

#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define TS_BUCKETS 4096
#define TS_PROTOCOL "agentbox.tunnel.v1"
#define STATS_INTERVAL_MS 5000
#define RAW_PROTOCOL "ab-tunnel-raw"
#define RAW_RX_BUF (64 * 1024)
#define HANDSHAKE_TIMEOUT_S 10 /* a connection that has not upgraded by then is dropped */

struct hub_session {
    struct tunnel_server *ts;
    struct lws *wsi; /* from the handshake on */
    bool raw;        /* wslay framing on a raw socket (else lws's WebSocket role) */
    struct tun_ws ws;
    struct tun_wsl wsl;
    struct tun_upgrade_reader *rd; /* raw: until the upgrade request is complete */
    bool upgraded;                 /* raw: 101 queued */
    bool refusing;                 /* raw: an HTTP refusal is queued; close once it is out */
    struct tun_session *s;
    char cluster[AB_CLUSTER_ID_BUF];
    char peer[40]; /* "tunnel:<cluster>" */
    char agent_version[64];
    int64_t epoch;
    bool established;   /* WELCOME sent */
    bool registered;    /* in the by-cluster table */
    bool closed;        /* the WebSocket is gone */
    bool begin_pending; /* an epoch allocation is in flight */
    const char *close_reason;
    uint64_t stalls_seen;
    struct tw_timer ping; /* on ts->wheel: the next ping and liveness check */
    /* input that came after the loop turn's budget (rx_defer): read by lws,
     * kept here with the socket's reading paused until its turn comes */
    char *stash;
    size_t stash_len;
    bool deferred;                     /* on ts's deferred list */
    bool rx_paused;                    /* its socket's reading paused meanwhile (plain TCP) */
    struct hub_session *dprev, *dnext; /* the deferred list, oldest first */
    struct hub_session *hnext;         /* bucket chain */
    struct hub_session *prev, *next;   /* all sessions */
};

struct tunnel_server {
    struct loop *loop;
    struct clusters *clusters;
    struct http_router *internal;
    struct auth_ctx *auth;
    struct lws_vhost *vh;
    struct lws_protocols protocols[3];
    bool raw; /* --tunnel-framing=wslay */
    struct tun_callbacks cb;
    int64_t timeout_ms, sync_interval_ms;
    struct hub_session *buckets[TS_BUCKETS];
    struct hub_session *all;
    size_t online;
    struct loop_timer sync_timer, stats_timer, wheel_timer;
    /* the sliced stats and SYNC passes go on here; NULL between passes */
    struct hub_session *stats_next, *sync_next;
    struct timerwheel *wheel; /* every session's ping timer (lws timers are O(N) each) */
    /* the input budget (rx_over_budget): when this turn's tunnel input began
     * (0: none yet), and the sessions whose input waits for a later turn */
    int64_t rx_turn_us;
    struct hub_session *defer_head, *defer_tail;
    struct loop_timer rx_turn_timer;
    uint32_t ping_seq; /* spreads first pings over the interval */
    int64_t ping_interval_ms;
    int64_t last_forced_refresh_ms;
    char iface[128];
    struct metric_family *m_online, *m_streams, *m_buffered, *m_stalls, *m_sessions_total;
    struct metric_family *m_rx_deferred;
    tunnel_server_report_fn report_fn; /* federation */
    void *report_arg;
    tunnel_server_session_end_fn end_fn;
    void *end_arg;
};

static void schedule_first_ping(struct tunnel_server *ts, struct hub_session *hs);

/* --- the two framings, one set of verbs ----------------------------------------- */

static void sess_want_write(struct hub_session *hs)
{
    if (hs->raw)
        tun_wsl_want_write(&hs->wsl);
    else
        tun_ws_want_write(&hs->ws);
}

static bool sess_closing(struct hub_session *hs)
{
    return hs->raw ? hs->wsl.closing : hs->ws.closing;
}

static int64_t sess_last_rx_ms(struct hub_session *hs)
{
    return hs->raw ? hs->wsl.last_rx_ms : hs->ws.last_rx_ms;
}

static void sess_fini(struct hub_session *hs)
{
    if (hs->raw) {
        tun_wsl_fini(&hs->wsl);
        tun_upgrade_reader_free(hs->rd);
        hs->rd = NULL;
    } else {
        tun_ws_fini(&hs->ws);
    }
}

/* --- registry ------------------------------------------------------------------- */

static unsigned bucket_of(const char *id)
{
    unsigned h = 2166136261u;
    for (; *id; id++)
        h = (h ^ (unsigned char)*id) * 16777619u;
    return h % TS_BUCKETS;
}

static struct hub_session *lookup(struct tunnel_server *ts, const char *id)
{
    for (struct hub_session *hs = ts->buckets[bucket_of(id)]; hs; hs = hs->hnext)
        if (strcmp(hs->cluster, id) == 0)
            return hs;
    return NULL;
}

static void unregister(struct hub_session *hs)
{
    if (!hs->registered)
        return;
    struct tunnel_server *ts = hs->ts;
    struct hub_session **pp = &ts->buckets[bucket_of(hs->cluster)];
    while (*pp && *pp != hs)
        pp = &(*pp)->hnext;
    if (*pp)
        *pp = hs->hnext;
    hs->registered = false;
    if (ts->end_fn)
        ts->end_fn(ts->end_arg, hs->cluster);
    ts->online--;
    metrics_set(ts->m_online, NULL, (double)ts->online);
    const char *lv[] = {hs->cluster};
    metrics_remove(ts->m_streams, lv);
    metrics_remove(ts->m_buffered, lv);
}

struct tun_session *tunnel_server_session(struct tunnel_server *ts, const char *cluster_id)
{
    if (!ts)
        return NULL;
    struct hub_session *hs = lookup(ts, cluster_id);
    return hs && hs->established && !hs->closed ? hs->s : NULL;
}

size_t tunnel_server_online(struct tunnel_server *ts)
{
    return ts ? ts->online : 0;
}

void tunnel_server_each_online(struct tunnel_server *ts,
                               void (*fn)(void *arg, const char *cluster_id), void *arg)
{
    for (struct hub_session *hs = ts ? ts->all : NULL; hs; hs = hs->next)
        if (hs->established && !hs->closed && hs->registered &&
            tunnel_server_session(ts, hs->cluster) == hs->s)
            fn(arg, hs->cluster);
}

/* Closes a session with a WebSocket close reason (agents log it). */
static void close_session(struct hub_session *hs, const char *reason)
{
    if (hs->closed || hs->close_reason)
        return;
    hs->close_reason = reason;
    LOG_INFO("closing tunnel session", "cluster", hs->cluster, "reason", reason);
    unregister(hs);
    if (hs->wsi)
        lws_callback_on_writable(hs->wsi);
}

static void defer_unlink(struct tunnel_server *ts, struct hub_session *hs)
{
    if (!hs->deferred)
        return;
    if (hs->dprev)
        hs->dprev->dnext = hs->dnext;
    else
        ts->defer_head = hs->dnext;
    if (hs->dnext)
        hs->dnext->dprev = hs->dprev;
    else
        ts->defer_tail = hs->dprev;
    hs->dprev = hs->dnext = NULL;
    hs->deferred = false;
    free(hs->stash);
    hs->stash = NULL;
    hs->stash_len = 0;
}

static void session_free_if_done(struct hub_session *hs)
{
    if (!hs->closed || hs->begin_pending)
        return;
    struct tunnel_server *ts = hs->ts;
    defer_unlink(ts, hs);
    if (ts->stats_next == hs)
        ts->stats_next = hs->next;
    if (ts->sync_next == hs)
        ts->sync_next = hs->next;
    if (hs->prev)
        hs->prev->next = hs->next;
    else
        ts->all = hs->next;
    if (hs->next)
        hs->next->prev = hs->prev;
    free(hs);
}

/* --- session callbacks ------------------------------------------------------------- */

static void epoch_done(void *arg, int status, int64_t epoch)
{
    struct hub_session *hs = arg;
    struct tunnel_server *ts = hs->ts;
    hs->begin_pending = false;
    if (hs->closed) {
        if (status == 0)
            clusters_session_end(ts->clusters, hs->cluster, epoch);
        session_free_if_done(hs);
        return;
    }
    if (status != 0) {
        LOG_WARN("cannot record the tunnel session; dropping it", "cluster", hs->cluster, "error",
                 ab_strerror(status));
        close_session(hs, status == AB_EDENIED ? "cluster disabled" : "hub database unavailable");
        return;
    }
    hs->epoch = epoch;
    struct hub_session *old = lookup(ts, hs->cluster);
    if (old && old->epoch > epoch) {
        close_session(hs, "superseded");
        return;
    }
    if (old)
        close_session(old, "superseded");
    hs->registered = true;
    hs->hnext = ts->buckets[bucket_of(hs->cluster)];
    ts->buckets[bucket_of(hs->cluster)] = hs;
    ts->online++;
    metrics_set(ts->m_online, NULL, (double)ts->online);
    metrics_add(ts->m_sessions_total, NULL, 1);
    clusters_session_online(ts->clusters, hs->cluster, epoch);

    json_t *w = json_pack("{s:s,s:I,s:i,s:i,s:s,s:i,s:o}", "cluster", hs->cluster, "epoch",
                          (json_int_t)epoch, "reportIntervalMs", 5000, "ttlMs", 30000, "hubVersion",
                          AGENTBOX_VERSION, "protocol", 1, "assertionKeys",
                          ts->auth ? auth_assertion_keys_json(ts->auth) : json_array());
    tun_session_send_json(hs->s, TUN_WELCOME, w);
    json_decref(w);
    hs->established = true;
    sess_want_write(hs);
    char ep[24];
    snprintf(ep, sizeof(ep), "%lld", (long long)epoch);
    LOG_INFO("tunnel session up", "cluster", hs->cluster, "epoch", ep, "agent_version",
             hs->agent_version);
}

static void on_hello(struct tun_session *s, json_t *msg, void *arg)
{
    struct hub_session *hs = tun_session_arg(s);
    const char *cluster = json_string_value(json_object_get(msg, "cluster"));
    const char *ver = json_string_value(json_object_get(msg, "version"));
    if (!cluster || strcmp(cluster, hs->cluster) != 0) {
        LOG_WARN("HELLO names another cluster than the token's; dropping", "cluster", hs->cluster,
                 "hello_cluster", cluster ? cluster : "(none)");
        close_session(hs, "HELLO cluster does not match X-AgentBox-Cluster");
        return;
    }
    ab_strlcpy(hs->agent_version, ver ? ver : "unknown", sizeof(hs->agent_version));
    int rc =
        clusters_session_begin(hs->ts->clusters, hs->cluster, hs->agent_version, epoch_done, hs);
    if (rc != 0) {
        LOG_WARN("cannot start the tunnel session", "cluster", hs->cluster, "error",
                 ab_strerror(rc));
        close_session(hs, "hub database unavailable");
        return;
    }
    hs->begin_pending = true;
}

static void on_report(struct tun_session *s, json_t *msg, void *arg)
{
    struct hub_session *hs = tun_session_arg(s);
    /* only a live session speaks for its cluster (a superseded one is draining) */
    if (hs && hs->registered && hs->ts->report_fn)
        hs->ts->report_fn(hs->ts->report_arg, hs->cluster, msg);
}

void tunnel_server_set_report_hook(struct tunnel_server *ts, tunnel_server_report_fn fn, void *arg)
{
    ts->report_fn = fn;
    ts->report_arg = arg;
}

void tunnel_server_set_session_end_hook(struct tunnel_server *ts, tunnel_server_session_end_fn fn,
                                        void *arg)
{
    ts->end_fn = fn;
    ts->end_arg = arg;
}

/* Relay header names, in one place (the lead swaps them for relay.h). */
#define H_TARGET_CLUSTER "X-AgentBox-Target-Cluster"
#define H_TARGET_SERVICE "X-AgentBox-Target-Service"
#define H_SOURCE_CLUSTER "X-Source-Cluster"

static const char *header_of(const struct tun_head *h, const char *name)
{
    for (int i = 0; i < h->nheaders; i++)
        if (strcasecmp(h->headers[i].name, name) == 0)
            return h->headers[i].value;
    return NULL;
}

/* An E2B create: the one relayed request that earns the target a create
 * credit (a claim row, hub/auth.h). */
static bool relay_is_create(const char *service, const struct tun_head *head)
{
    const char *p = head->path ? head->path : "";
    return strcmp(service, "e2b") == 0 && head->method && strcmp(head->method, "POST") == 0 &&
           strncmp(p, "/sandboxes", 10) == 0 && (p[10] == '\0' || p[10] == '?');
}

static void relay(struct hub_session *hs, struct tun_stream *st, const struct tun_head *head)
{
    const char *target = header_of(head, H_TARGET_CLUSTER);
    const char *service = header_of(head, H_TARGET_SERVICE);
    const char *trace = ab_trace_enabled() ? header_of(head, AB_TRACE_HEADER) : NULL;
    char msg[200];
    ab_trace(trace, "relay.open");
    if (!target || !service) {
        tun_stream_respond_json(st, 400,
                                "{\"code\":400,\"message\":\"a relay stream needs " H_TARGET_CLUSTER
                                " and " H_TARGET_SERVICE "\"}");
        return;
    }
    if (strcmp(service, "e2b") != 0 && strcmp(service, "data") != 0 &&
        strcmp(service, "native") != 0) {
        tun_stream_respond_json(st, 400,
                                "{\"code\":400,\"message\":\"" H_TARGET_SERVICE " must be "
                                "e2b, data or native\"}");
        return;
    }
    /* The principal travels as an assertion made for the sender; the target
     * gets one made for itself (same principal and rid, from the hub's cache
     * per principal and target), so an assertion is never valid on a cluster
     * it was not made for. */
    char tok[ASRT_TOKEN_MAX + 1] = "", why[200], rid[ASRT_RID_MAX + 1];
    const char *in_tok = header_of(head, ASRT_HEADER);
    if (in_tok) {
        struct keys_principal p;
        if (!hs->ts->auth ||
            auth_verify_from(hs->ts->auth, hs->cluster, in_tok, &p, rid, why, sizeof(why)) != 0 ||
            auth_assertion_for(hs->ts->auth, &p, target, rid, relay_is_create(service, head), tok,
                               sizeof(tok), why, sizeof(why)) != 0) {
            LOG_WARN("relay refused: bad assertion", "cluster", hs->cluster, "target", target,
                     "error", hs->ts->auth ? why : "no signer");
            char m[260];
            snprintf(m, sizeof(m), "invalid assertion: %s", hs->ts->auth ? why : "no signer");
            json_t *e = json_pack("{s:i,s:s}", "code", 401, "message", m);
            char *txt = json_dumps(e, JSON_COMPACT);
            tun_stream_respond_json(st, 401, txt ? txt : "{\"code\":401}");
            free(txt);
            json_decref(e);
            return;
        }
        memset(&p, 0, sizeof(p));
    }
    struct tun_head out;
    memset(&out, 0, sizeof(out));
    out.service = service;
    out.method = head->method;
    out.path = head->path;
    for (int i = 0; i < head->nheaders && out.nheaders < TUN_MAX_HEADERS - 2; i++) {
        const char *n = head->headers[i].name;
        if (strcasecmp(n, H_TARGET_CLUSTER) == 0 || strcasecmp(n, H_TARGET_SERVICE) == 0 ||
            strcasecmp(n, H_SOURCE_CLUSTER) == 0 || strcasecmp(n, ASRT_HEADER) == 0 ||
            strcasecmp(n, RELAY_HDR_KEY_HASH) == 0)
            continue;
        /* a raw API key is never delivered to another cluster (issue 13) */
        if (strcasecmp(n, "X-API-Key") == 0 || strcasecmp(n, "AGENTBOX-API-KEY") == 0 ||
            (strcasecmp(n, "Authorization") == 0 &&
             strncasecmp(head->headers[i].value, "Bearer agbx_", 12) == 0))
            continue;
        out.headers[out.nheaders++] = head->headers[i];
    }
    out.headers[out.nheaders].name = H_SOURCE_CLUSTER;
    out.headers[out.nheaders].value = hs->cluster;
    out.nheaders++;
    if (tok[0]) {
        out.headers[out.nheaders].name = ASRT_HEADER;
        out.headers[out.nheaders].value = tok;
        out.nheaders++;
    }
    snprintf(msg, sizeof(msg), "cluster '%.64s' is not connected to the hub", target);
    ab_trace(trace, "relay.spliced");
    tun_splice(st, tunnel_server_session(hs->ts, target), &out, msg);
}

static void on_open(struct tun_stream *st, const struct tun_head *head, void *arg)
{
    struct hub_session *hs = tun_session_arg(tun_stream_session(st));
    if (strcmp(head->service, "hub") == 0)
        tun_http_serve(st, head, hs->ts->internal, hs->peer, hs->cluster);
    else if (strcmp(head->service, "relay") == 0)
        relay(hs, st, head);
    else
        tun_stream_reset(st, TUN_RESET_NOT_FOUND, "the hub serves only 'hub' and 'relay'");
}

static void want_write(struct tun_session *s, void *arg)
{
    struct hub_session *hs = tun_session_arg(s);
    if (!hs->closed)
        sess_want_write(hs);
}

/* --- WebSocket callbacks ---------------------------------------------------------- */

static int refuse(struct lws *wsi, unsigned status, const char *message)
{
    json_t *j = json_pack("{s:i,s:s}", "code", (int)status, "message", message);
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    size_t len = body ? strlen(body) : 0;
    uint8_t buf[LWS_PRE + 1024], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof(buf) - 1;
    if (lws_add_http_common_headers(wsi, status, "application/json", len, &p, end) == 0 &&
        lws_finalize_write_http_header(wsi, start, &p, end) == 0 && body)
        lws_write(wsi, (unsigned char *)body, len, LWS_WRITE_HTTP_FINAL);
    free(body);
    return 1;
}

/* The agent's credentials, for both framings: 0, or the refusal's status
 * (401, 403) with why. */
static int check_agent(struct tunnel_server *ts, const char *cluster, const char *auth, char *why,
                       size_t whylen)
{
    if (!cluster[0]) {
        snprintf(why, whylen, "missing X-AgentBox-Cluster header: send the cluster id");
        return 401;
    }
    if (strncmp(auth, "Bearer ", 7) != 0) {
        snprintf(why, whylen, "missing 'Authorization: Bearer <join token>'");
        return 401;
    }
    int rc = clusters_check_token(ts->clusters, cluster, auth + 7, why, whylen);
    if (rc == AB_EDENIED) {
        LOG_WARN("tunnel refused: cluster disabled", "cluster", cluster);
        return 403;
    }
    if (rc != 0) {
        /* a cluster added a moment ago: look again now rather than at the next refresh */
        int64_t now = ab_now_ms();
        if (now - ts->last_forced_refresh_ms > 1000) {
            ts->last_forced_refresh_ms = now;
            clusters_refresh_now(ts->clusters);
        }
        LOG_WARN("tunnel refused: unknown cluster or wrong token", "cluster", cluster, "reason",
                 why);
        return 401;
    }
    return 0;
}

static struct hub_session *session_new(struct tunnel_server *ts, struct lws *wsi)
{
    struct hub_session *hs = calloc(1, sizeof(*hs));
    if (!hs)
        return NULL;
    hs->ts = ts;
    hs->wsi = wsi;
    hs->next = ts->all;
    if (ts->all)
        ts->all->prev = hs;
    ts->all = hs;
    return hs;
}

static void session_name(struct hub_session *hs, const char *cluster)
{
    ab_strlcpy(hs->cluster, cluster, sizeof(hs->cluster));
    snprintf(hs->peer, sizeof(hs->peer), "tunnel:%s", hs->cluster);
}

static int filter(struct tunnel_server *ts, struct lws *wsi)
{
    char uri[64] = "", auth[256] = "", cluster[64] = "", why[256];
    lws_hdr_copy(wsi, uri, sizeof(uri), WSI_TOKEN_GET_URI);
    if (strcmp(uri, "/v1/tunnel") != 0)
        return refuse(wsi, 404, "the tunnel lives at /v1/tunnel");
    lws_hdr_copy(wsi, auth, sizeof(auth), WSI_TOKEN_HTTP_AUTHORIZATION);
    lws_hdr_custom_copy(wsi, cluster, sizeof(cluster),
                        "x-agentbox-cluster:", (int)strlen("x-agentbox-cluster:"));
    int status = check_agent(ts, cluster, auth, why, sizeof(why));
    if (status)
        return refuse(wsi, (unsigned)status, why);
    struct hub_session *hs = session_new(ts, wsi);
    if (!hs)
        return 1;
    session_name(hs, cluster);
    lws_set_opaque_user_data(wsi, hs);
    return 0;
}

static int session_start(struct tunnel_server *ts, struct hub_session *hs, char *err, size_t errlen)
{
    struct tun_config cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.role = TUN_ROLE_HUB;
    cfg.cb = &ts->cb;
    cfg.arg = hs;
    cfg.window = TUN_BULK_WINDOW;
    return tun_session_new(&cfg, &hs->s, err, errlen);
}

static void established(struct tunnel_server *ts, struct lws *wsi, struct hub_session *hs)
{
    char err[128] = "out of memory for the tunnel's frame buffers";
    if (session_start(ts, hs, err, sizeof(err)) != 0 || tun_ws_init(&hs->ws, wsi, hs->s) != 0) {
        LOG_ERROR("cannot create a tunnel session", "error", err);
        close_session(hs, "hub out of memory");
        return;
    }
    schedule_first_ping(ts, hs);
}

static void closed(struct hub_session *hs)
{
    struct tunnel_server *ts = hs->ts;
    hs->closed = true;
    defer_unlink(ts, hs);
    bool was_live = hs->registered;
    unregister(hs);
    if (hs->epoch && !hs->begin_pending)
        clusters_session_end(ts->clusters, hs->cluster, hs->epoch);
    if (was_live)
        LOG_INFO("tunnel session down", "cluster", hs->cluster);
    timerwheel_cancel(ts->wheel, &hs->ping);
    if (hs->s) {
        tun_session_free(hs->s); /* resets its streams: relays and proxies fail fast */
        hs->s = NULL;
    }
    sess_fini(hs);
    session_free_if_done(hs);
}

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct tunnel_server *ts = lws_vhost_user(lws_get_vhost(wsi));
    struct hub_session *hs = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        return ts ? filter(ts, wsi) : 1;
    case LWS_CALLBACK_ESTABLISHED:
        if (hs)
            established(ts, wsi, hs);
        return 0;
    case LWS_CALLBACK_RECEIVE: {
        if (!hs || !hs->s || hs->closed || hs->close_reason)
            return 0;
        if (!lws_frame_is_binary(wsi)) {
            close_session(hs, "text frames are not part of the protocol");
            return 0;
        }
        int rc = tun_ws_receive(&hs->ws, in, len, lws_is_first_fragment(wsi),
                                lws_is_final_fragment(wsi));
        if (hs->registered)
            clusters_touch(ts->clusters, hs->cluster, hs->epoch);
        if (rc < 0) {
            LOG_WARN("tunnel protocol error; dropping the session", "cluster", hs->cluster, "error",
                     rc == AB_ELIMIT ? "message over 1 MiB" : tun_session_error(hs->s));
            close_session(hs, "protocol error");
        }
        return 0;
    }
    case LWS_CALLBACK_RECEIVE_PONG:
        if (hs)
            tun_ws_pong(&hs->ws);
        return 0;
    case LWS_CALLBACK_SERVER_WRITEABLE:
        if (!hs || !hs->s)
            return -1;
        if (hs->close_reason) {
            lws_close_reason(wsi, LWS_CLOSE_STATUS_POLICY_VIOLATION,
                             (unsigned char *)hs->close_reason, strlen(hs->close_reason));
            return -1;
        }
        return tun_ws_writeable(&hs->ws);
    case LWS_CALLBACK_CLOSED:
    case LWS_CALLBACK_WSI_DESTROY:
        if (hs) {
            lws_set_opaque_user_data(wsi, NULL);
            closed(hs);
        }
        return 0;
    default:
        return 0;
    }
}

/* --- raw connections: our upgrade, wslay framing ---------------------------------- */

/* Answers the upgrade request with an HTTP refusal and closes once it is out. */
static int raw_refuse(struct hub_session *hs, int status, const char *why)
{
    char buf[1024];
    int n = tun_upgrade_refusal(buf, sizeof(buf), status, why);
    hs->refusing = true;
    if (n < 0 || tun_wsl_send_raw(&hs->wsl, buf, (size_t)n) != 0)
        return -1;
    return 0;
}

/* Tunnel input one loop turn may take before the rest waits for the next:
 * 10,000 agents' reports come in bursts (a hub restart lines them up), and
 * the loop reads every ready socket before it looks at its timers: 200
 * reports in one turn were 40 ms of parsing ahead of every timer and HTTP
 * answer (DESIGN §12: loop lag p99 <= 20 ms). Past the budget a session's
 * input is kept as lws read it, its socket paused (plain TCP; see rx_defer), and taken in order on
 * a later turn: nothing is dropped, and one session's bytes stay in order. */
#define RX_TURN_BUDGET_US 3000
/* A stash past this (lws read more after the pause) is taken at once. */
#define RX_STASH_MAX (4u << 20)

static void rx_input(struct tunnel_server *ts, struct hub_session *hs, void *in, size_t len)
{
    if (!hs->s || hs->close_reason || hs->wsl.closing)
        return;
    int rc = tun_wsl_rx_inplace(&hs->wsl, in, len); /* lws's buffer: unmasked in place */
    if (hs->registered)
        clusters_touch(ts->clusters, hs->cluster, hs->epoch);
    if (rc == AB_ECLOSED) {
        LOG_INFO("tunnel closed by the agent", "cluster", hs->cluster, "reason",
                 hs->wsl.peer_reason);
        unregister(hs);
    } else if (rc < 0) {
        LOG_WARN("tunnel protocol error; dropping the session", "cluster", hs->cluster, "error",
                 hs->wsl.err ? hs->wsl.err : "?");
        close_session(hs, hs->wsl.rx_text ? hs->wsl.err : "protocol error");
    }
}

static void rx_turn_end(struct loop_timer *t);

static bool rx_over_budget(struct tunnel_server *ts)
{
    int64_t now = ab_now_us();
    if (!ts->rx_turn_us) {
        /* runs after this turn's socket callbacks: the next turn's budget is new */
        ts->rx_turn_us = now;
        loop_timer_start(ts->loop, &ts->rx_turn_timer, 0, rx_turn_end, ts);
        return false;
    }
    return now - ts->rx_turn_us > RX_TURN_BUDGET_US;
}

static int rx_defer(struct tunnel_server *ts, struct hub_session *hs, const void *in, size_t len)
{
    if (hs->stash_len + len > RX_STASH_MAX)
        return -1; /* taken now by the caller */
    char *grown = realloc(hs->stash, hs->stash_len + len);
    if (!grown)
        return -1;
    hs->stash = grown;
    memcpy(hs->stash + hs->stash_len, in, len);
    hs->stash_len += len;
    if (!hs->deferred) {
        hs->deferred = true;
        hs->dprev = ts->defer_tail;
        hs->dnext = NULL;
        if (ts->defer_tail)
            ts->defer_tail->dnext = hs;
        else
            ts->defer_head = hs;
        ts->defer_tail = hs;
        /* TLS is not paused: OpenSSL may hold decrypted bytes that no POLLIN
         * would announce after a resume; what lws reads meanwhile queues here
         * in order (up to RX_STASH_MAX) */
        hs->rx_paused = !lws_is_ssl(hs->wsi);
        if (hs->rx_paused)
            lws_rx_flow_control(hs->wsi, 0);
        metrics_add(ts->m_rx_deferred, NULL, 1);
    }
    return 0;
}

/* Takes a deferred session's kept input, then lets its socket be read again. */
static void rx_take_stash(struct tunnel_server *ts, struct hub_session *hs)
{
    char *stash = hs->stash;
    size_t n = hs->stash_len;
    hs->stash = NULL;
    hs->stash_len = 0;
    defer_unlink(ts, hs);
    if (hs->rx_paused && hs->wsi && !hs->closed)
        lws_rx_flow_control(hs->wsi, 1);
    hs->rx_paused = false;
    rx_input(ts, hs, stash, n);
    free(stash);
}

/* A new turn's budget; deferred input first, oldest first, within it. */
static void rx_turn_end(struct loop_timer *t)
{
    struct tunnel_server *ts = t->arg;
    int64_t start = ab_now_us();
    ts->rx_turn_us = 0;
    while (ts->defer_head && ab_now_us() - start <= RX_TURN_BUDGET_US)
        rx_take_stash(ts, ts->defer_head);
    if (ts->defer_head) {
        /* the rest next turn; input arriving meanwhile queues behind it */
        ts->rx_turn_us = start;
        loop_timer_start(ts->loop, &ts->rx_turn_timer, 0, rx_turn_end, ts);
    }
}

static int raw_rx(struct tunnel_server *ts, struct hub_session *hs, void *in, size_t len)
{
    if (!hs->s || hs->close_reason || hs->wsl.closing)
        return 0;
    if ((hs->deferred || rx_over_budget(ts)) && rx_defer(ts, hs, in, len) == 0)
        return 0;
    if (hs->deferred)
        rx_take_stash(ts, hs); /* the stash is full: in order, all of it now */
    rx_input(ts, hs, in, len);
    return 0;
}

/* Reads the upgrade request; once complete, checks it and the agent's
 * credentials and answers 101 (the rest of in is WebSocket data) or a
 * refusal. */
static int raw_handshake(struct tunnel_server *ts, struct hub_session *hs, char *in, size_t len)
{
    size_t used = 0;
    int status = 0;
    const char *why = NULL;
    int rc = tun_upgrade_reader_feed(hs->rd, in, len, &used, &status, &why);
    if (rc == 0)
        return 0;
    if (rc < 0)
        return raw_refuse(hs, status, why);
    const struct http_request *r = tun_upgrade_reader_head(hs->rd, NULL);
    char accept[TUN_UPGRADE_ACCEPT_LEN + 1], reason[256];
    if (tun_upgrade_check_request(r, accept, &status, &why) != 0)
        return raw_refuse(hs, status, why);
    /* the same bounds as the lws path's header copies */
    char auth[256] = "", cluster[64] = "";
    const char *a = http_header_get(r, "Authorization");
    const char *c = http_header_get(r, "X-AgentBox-Cluster");
    if (a && strlen(a) < sizeof(auth))
        ab_strlcpy(auth, a, sizeof(auth));
    if (c && strlen(c) < sizeof(cluster))
        ab_strlcpy(cluster, c, sizeof(cluster));
    status = check_agent(ts, cluster, auth, reason, sizeof(reason));
    if (status)
        return raw_refuse(hs, status, reason);
    session_name(hs, cluster);
    char err[128] = "out of memory";
    if (session_start(ts, hs, err, sizeof(err)) != 0) {
        LOG_ERROR("cannot create a tunnel session", "error", err);
        return raw_refuse(hs, 503, "hub out of memory");
    }
    tun_wsl_start(&hs->wsl, hs->s);
    char resp[512];
    int n = tun_upgrade_response(resp, sizeof(resp), accept);
    if (n < 0 || tun_wsl_send_raw(&hs->wsl, resp, (size_t)n) != 0)
        return -1;
    hs->upgraded = true;
    tun_upgrade_reader_free(hs->rd);
    hs->rd = NULL;
    lws_set_timeout(hs->wsi, NO_PENDING_TIMEOUT, 0);
    schedule_first_ping(ts, hs);
    if (used < len)
        return raw_rx(ts, hs, in + used, len - used);
    return 0;
}

static int raw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len)
{
    struct tunnel_server *ts = lws_vhost_user(lws_get_vhost(wsi));
    struct hub_session *hs = lws_get_opaque_user_data(wsi);
    switch (reason) {
    case LWS_CALLBACK_RAW_ADOPT:
        if (!ts || !(hs = session_new(ts, wsi)))
            return -1;
        hs->raw = true;
        lws_set_opaque_user_data(wsi, hs);
        if (tun_wsl_init(&hs->wsl, wsi, true) != 0 || !(hs->rd = tun_upgrade_reader_new(false))) {
            LOG_ERROR("cannot accept a tunnel connection", "error", "out of memory");
            return -1;
        }
        lws_set_timeout(wsi, PENDING_TIMEOUT_USER_OK, HANDSHAKE_TIMEOUT_S);
        return 0;
    case LWS_CALLBACK_RAW_RX:
        if (!hs || hs->closed || hs->refusing)
            return 0;
        if (!hs->upgraded)
            return raw_handshake(ts, hs, in, len);
        return raw_rx(ts, hs, in, len);
    case LWS_CALLBACK_RAW_WRITEABLE: {
        if (!hs)
            return -1;
        if (hs->close_reason)
            tun_wsl_close(&hs->wsl, LWS_CLOSE_STATUS_POLICY_VIOLATION, hs->close_reason);
        int rc = tun_wsl_writeable(&hs->wsl);
        if (rc == 0 && hs->refusing && hs->wsl.outlen == 0 && !lws_send_pipe_choked(wsi))
            return -1; /* the refusal is out */
        return rc;
    }
    case LWS_CALLBACK_RAW_CLOSE:
        if (hs) {
            lws_set_opaque_user_data(wsi, NULL);
            closed(hs);
        }
        return 0;
    default:
        return 0;
    }
}

static int http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                         size_t len)
{
    if (reason == LWS_CALLBACK_HTTP) {
        refuse(wsi, 426,
               "this port speaks the agentbox tunnel: open a WebSocket to /v1/tunnel "
               "with subprotocol agentbox.tunnel.v1");
        return -1;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

/* --- timers -------------------------------------------------------------------------- */

/* SYNC to every session, SYNC_SLICE a loop turn (10,000 at once took 8 ms
 * of the loop's CPU); the next pass starts an interval after the last ends. */
#define SYNC_SLICE 256

static void sync_tick(struct loop_timer *t)
{
    struct tunnel_server *ts = t->arg;
    struct hub_session *hs = ts->sync_next ? ts->sync_next : ts->all;
    for (int k = 0; hs && k < SYNC_SLICE; hs = hs->next, k++)
        if (hs->established && !hs->closed && hs->s) {
            tun_session_send_sync(hs->s);
            sess_want_write(hs);
        }
    ts->sync_next = hs;
    loop_timer_start(ts->loop, &ts->sync_timer, hs ? 1 : ts->sync_interval_ms, sync_tick, ts);
}

/* The hub pings each agent too (lws answers the agent's pings without telling
 * us), so an idle session still proves it is alive, and drops the silent.
 * Each session has one timer on the wheel (lws's per-connection timers sit
 * in one sorted list, O(N) per reschedule); the first ping of a session is
 * placed by a golden-ratio sequence, so sessions that connect together (a
 * reconnect storm) still ping spread evenly over the interval, and every
 * later one an interval after the last. */
static void ping_due(struct tw_timer *t, void *arg)
{
    struct hub_session *hs = arg;
    struct tunnel_server *ts = hs->ts;
    if (!hs->s || hs->closed || sess_closing(hs))
        return;
    int64_t now = ab_now_ms();
    if (now - sess_last_rx_ms(hs) > ts->timeout_ms) {
        LOG_WARN("tunnel silent; dropping the session", "cluster", hs->cluster);
        if (hs->raw)
            tun_wsl_kill(&hs->wsl);
        else
            tun_ws_kill(&hs->ws, "silent");
        return;
    }
    if (hs->raw)
        tun_wsl_ping(&hs->wsl);
    else
        tun_ws_ping(&hs->ws);
    if (hs->registered)
        clusters_touch(ts->clusters, hs->cluster, hs->epoch);
    timerwheel_schedule(ts->wheel, t, now + ts->ping_interval_ms, ping_due, hs);
}

static void schedule_first_ping(struct tunnel_server *ts, struct hub_session *hs)
{
    /* frac(k * 0.618...) in 1/65536ths: any run of consecutive k is even */
    uint32_t frac = (ts->ping_seq++ * 2654435769u) >> 16;
    int64_t off = (int64_t)frac * ts->ping_interval_ms / 65536;
    timerwheel_schedule(ts->wheel, &hs->ping, ab_now_ms() + off, ping_due, hs);
}

/* Resolution of the wheel: pings are at most this late, and a tick fires
 * about (sessions / interval) * tick of them (20 at 10,000 sessions). */
#define WHEEL_TICK_MS 20
#define WHEEL_SLOTS 1024 /* 20.48 s a turn: the ping interval fits in one */

static void wheel_tick(struct loop_timer *t)
{
    struct tunnel_server *ts = t->arg;
    timerwheel_advance(ts->wheel, ab_now_ms());
    loop_timer_start(ts->loop, &ts->wheel_timer, WHEEL_TICK_MS, wheel_tick, ts);
}

/* Per-session gauges, STATS_SLICE sessions a loop turn: one pass over
 * 10,000 sessions at once held the loop for 20 ms. A pass starts every
 * STATS_INTERVAL_MS; sessions that arrive meanwhile wait for the next. */
#define STATS_SLICE 256

static void stats_tick(struct loop_timer *t)
{
    struct tunnel_server *ts = t->arg;
    struct hub_session *hs = ts->stats_next ? ts->stats_next : ts->all;
    for (int k = 0; hs && k < STATS_SLICE; hs = hs->next, k++) {
        if (!hs->registered || !hs->s)
            continue;
        struct tun_stats st;
        tun_session_stats(hs->s, &st);
        const char *lv[] = {hs->cluster};
        metrics_set(ts->m_streams, lv, st.streams);
        metrics_set(ts->m_buffered, lv, (double)st.buffered);
        if (st.credit_stalls > hs->stalls_seen) {
            metrics_add(ts->m_stalls, lv, (double)(st.credit_stalls - hs->stalls_seen));
            hs->stalls_seen = st.credit_stalls;
        }
    }
    ts->stats_next = hs;
    /* 1 ms between slices, so the loop serves sockets in between */
    loop_timer_start(ts->loop, &ts->stats_timer, hs ? 1 : STATS_INTERVAL_MS, stats_tick, ts);
}

/* --- revocation, events, lifecycle ----------------------------------------------------- */

static void on_revoke(void *arg, const char *cluster_id, const char *reason)
{
    struct tunnel_server *ts = arg;
    struct hub_session *hs = lookup(ts, cluster_id);
    if (hs)
        close_session(hs, reason);
}

/* A key stopped being valid: every agent drops it from its cache at once. */
void tunnel_server_on_key_revoked(void *arg, const char *key_id, const char *hash,
                                  const char *reason)
{
    /* keyId: agents refuse assertions made for the key for the rest of their life */
    json_t *ev = json_pack("{s:s,s:s,s:s,s:s}", "type", "key_revoked", "hash", hash, "keyId",
                           key_id ? key_id : "", "reason", reason ? reason : "revoked");
    tunnel_server_broadcast(arg, ev);
    json_decref(ev);
}

/* The signing keys changed (a rotation): every agent replaces its keyring
 * now, as on a WELCOME, without reconnecting. */
void tunnel_server_on_assertion_keys(void *arg, json_t *keys)
{
    json_t *ev = json_pack("{s:s,s:O}", "type", "assertion_keys", "assertionKeys", keys);
    if (ev)
        tunnel_server_broadcast(arg, ev);
    json_decref(ev);
}

void tunnel_server_broadcast(struct tunnel_server *ts, json_t *msg)
{
    for (struct hub_session *hs = ts->all; hs; hs = hs->next)
        if (hs->established && !hs->closed && hs->s) {
            tun_session_send_json(hs->s, TUN_EVENT, msg);
            sess_want_write(hs);
        }
}

int tunnel_server_start(const struct tunnel_server_deps *d, const struct tunnel_server_options *o,
                        struct tunnel_server **out, char *err, size_t errlen)
{
    struct tunnel_server *ts = calloc(1, sizeof(*ts));
    if (!ts) {
        snprintf(err, errlen, "out of memory creating the tunnel server");
        return AB_ENOMEM;
    }
    ts->loop = d->loop;
    ts->clusters = d->clusters;
    ts->internal = d->internal;
    ts->auth = d->auth;
    ts->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    ts->sync_interval_ms = o->sync_interval_ms > 0 ? o->sync_interval_ms : 60000;
    ts->ping_interval_ms = AB_MIN(10000, ts->timeout_ms / 3);
    tun_ep_callbacks_init(&ts->cb);
    ts->cb.on_hello = on_hello;
    ts->cb.on_report = on_report;
    ts->cb.on_open = on_open;
    ts->cb.want_write = want_write;

    struct metrics_registry *mr = metrics_default();
    static const char *const cl[] = {"cluster", NULL};
    ts->m_online =
        metrics_register(mr, "agentbox_tunnel_sessions_online",
                         "Clusters with a live tunnel session.", METRIC_GAUGE, NULL, NULL, 0);
    ts->m_sessions_total =
        metrics_register(mr, "agentbox_tunnel_sessions_total",
                         "Tunnel sessions established since start.", METRIC_COUNTER, NULL, NULL, 0);
    ts->m_streams = metrics_register(mr, "agentbox_tunnel_streams",
                                     "Open streams per tunnel session.", METRIC_GAUGE, cl, NULL, 0);
    ts->m_buffered =
        metrics_register(mr, "agentbox_tunnel_buffered_bytes",
                         "Bytes queued for sending per tunnel session.", METRIC_GAUGE, cl, NULL, 0);
    ts->m_rx_deferred = metrics_register(
        mr, "agentbox_tunnel_rx_deferred_total",
        "Times a session's input waited for a later loop turn (the turn's input budget was spent).",
        METRIC_COUNTER, NULL, NULL, 0);
    ts->m_stalls = metrics_register(mr, "agentbox_tunnel_window_stalls_total",
                                    "Times a stream ran out of send credit with data queued.",
                                    METRIC_COUNTER, cl, NULL, 0);
    metrics_set(ts->m_online, NULL, 0);

    int rc = timerwheel_new(WHEEL_TICK_MS, WHEEL_SLOTS, ab_now_ms(), &ts->wheel, err, errlen);
    if (rc != 0) {
        free(ts);
        return rc;
    }

    const char *colon = strrchr(o->listen, ':');
    long port = colon ? strtol(colon + 1, NULL, 10) : 0;
    if (!colon || port <= 0 || port > 65535 || (size_t)(colon - o->listen) >= sizeof(ts->iface)) {
        snprintf(err, errlen, "tunnel_listen '%s' must be HOST:PORT or :PORT", o->listen);
        timerwheel_free(ts->wheel);
        free(ts);
        return AB_EINVAL;
    }
    memcpy(ts->iface, o->listen, (size_t)(colon - o->listen));

    ts->raw = !o->framing || strcmp(o->framing, "wslay") == 0;
    if (!ts->raw && strcmp(o->framing, "lws") != 0) {
        snprintf(err, errlen, "tunnel_framing '%s' must be wslay or lws", o->framing);
        timerwheel_free(ts->wheel);
        free(ts);
        return AB_EINVAL;
    }
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof(info));
    if (ts->raw) {
        ts->protocols[0].name = RAW_PROTOCOL;
        ts->protocols[0].callback = raw_callback;
        ts->protocols[0].rx_buffer_size = RAW_RX_BUF;
        info.options = LWS_SERVER_OPTION_ADOPT_APPLY_LISTEN_ACCEPT_CONFIG;
        info.listen_accept_role = "raw-skt";
        info.listen_accept_protocol = RAW_PROTOCOL;
    } else {
        ts->protocols[0].name = "http";
        ts->protocols[0].callback = http_callback;
        ts->protocols[1].name = TS_PROTOCOL;
        ts->protocols[1].callback = ws_callback;
        ts->protocols[1].rx_buffer_size = 64 * 1024;
    }
    info.vhost_name = "tunnel";
    info.protocols = ts->protocols;
    info.port = (int)port;
    info.iface = ts->iface[0] ? ts->iface : NULL;
    if (http_listen_host_is_ipv4(ts->iface))
        info.options |= LWS_SERVER_OPTION_DISABLE_IPV6; /* see http_listen_host_is_ipv4 */
    info.user = ts;
    /* No lws idle/validity timer per connection: the wheel pings and drops
     * the silent. lws's default policy would reschedule a timer in its one
     * sorted list on every frame received, a walk of all sessions each. */
    static const lws_retry_bo_t no_lws_validity = {.secs_since_valid_ping = 0,
                                                   .secs_since_valid_hangup = 0};
    info.retry_and_idle_policy = &no_lws_validity;
    if (o->tls_cert && o->tls_key) {
        info.ssl_cert_filepath = o->tls_cert;
        info.ssl_private_key_filepath = o->tls_key;
        /* lws sets up a vhost's TLS context only with this option */
        info.options |= LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    } else if (o->tls_cert || o->tls_key) {
        snprintf(err, errlen, "tls_cert and tls_key go together: set both or neither");
        timerwheel_free(ts->wheel);
        free(ts);
        return AB_EINVAL;
    }
    ts->vh = lws_create_vhost(loop_lws(ts->loop), &info);
    if (!ts->vh) {
        snprintf(err, errlen, "cannot listen on %s for the tunnel (in use? bad certificate?)",
                 o->listen);
        timerwheel_free(ts->wheel);
        free(ts);
        return AB_EIO;
    }
    clusters_set_revoke_hook(ts->clusters, on_revoke, ts);
    loop_timer_start(ts->loop, &ts->sync_timer, ts->sync_interval_ms, sync_tick, ts);
    loop_timer_start(ts->loop, &ts->stats_timer, STATS_INTERVAL_MS, stats_tick, ts);
    loop_timer_start(ts->loop, &ts->wheel_timer, WHEEL_TICK_MS, wheel_tick, ts);
    LOG_INFO("tunnel listening", "listen", o->listen, "tls", o->tls_cert ? "on" : "off", "framing",
             ts->raw ? "wslay" : "lws");
    *out = ts;
    return 0;
}

void tunnel_server_stop(struct tunnel_server *ts)
{
    if (!ts)
        return;
    loop_timer_cancel(&ts->sync_timer);
    loop_timer_cancel(&ts->stats_timer);
    loop_timer_cancel(&ts->wheel_timer);
    loop_timer_cancel(&ts->rx_turn_timer);
    clusters_set_revoke_hook(ts->clusters, NULL, NULL);
    /* sessions are closed by the context's destruction (CLOSED per wsi) */
    lws_vhost_destroy(ts->vh);
    while (ts->all) {
        struct hub_session *hs = ts->all;
        ts->all = hs->next;
        /* the context closes the sockets later: they must not find us */
        if (hs->wsi && !hs->closed)
            lws_set_opaque_user_data(hs->wsi, NULL);
        timerwheel_cancel(ts->wheel, &hs->ping);
        if (hs->s)
            tun_session_free(hs->s);
        sess_fini(hs);
        free(hs->stash);
        free(hs);
    }
    timerwheel_free(ts->wheel);
    free(ts);
}
