/* The egress gateway on the agent's lws loop (gateway.h): the listener and
 * both ends of every connection are lws raw-file wsis on a vhost of our own;
 * each direction has one bounded buffer, and a full buffer stops reading from
 * its source (lws_rx_flow_control) until the far side took the bytes. */
#include "agent/egress/gateway.h"

#include "agent/egress/ca.h"
#include "agent/egress/dns.h"
#include "agent/egress/intercept.h"
#include "agent/egress/secrets.h"
#include "agent/egress/sniff.h"
#include "agent/egress/socks5.h"

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libwebsockets.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST                                                                       \
    80 /* linux/netfilter_ipv6/ip6_tables.h, which clashes with netinet/in.h */
#endif

#define GW_PROTOCOL "agentbox-egress"
#define GW_BUF (64 * 1024) /* per direction; 128 KiB per connection; holds EGRESS_SNIFF_MAX */
#define GW_READ_ROUNDS 8   /* buffers moved per read wakeup, at most */
#define GW_SNIFF_MS 5000   /* a client that says nothing is judged on its address */
#define GW_NAMES_MAX 4096  /* DNS answers remembered, all sandboxes together */
#define GW_NAME_TTL_MIN_S 60
#define GW_NAME_TTL_MAX_S 86400

enum gw_kind { GW_LISTENER, GW_SIDE, GW_DNS_IN, GW_DNS_UP };

struct gw_conn;

/* What a wsi's opaque user data points at. */
struct gw_handle {
    enum gw_kind kind;
    struct egress_gateway *g; /* GW_LISTENER */
    struct gw_conn *c;        /* GW_SIDE */
    int idx;                  /* GW_SIDE: 0 the sandbox, 1 the upstream */
};

struct gw_count {
    uint64_t key;
    int n;
};

struct gw_conn {
    struct egress_gateway *g;
    uint64_t key;
    struct gw_handle h[2];
    struct lws *wsi[2];
    int fd[2];
    uint8_t buf[2][GW_BUF]; /* buf[i]: read from side i, to be written to side 1 - i */
    size_t len[2], off[2];
    bool eof[2];                /* side i's read half is done */
    bool shut[2];               /* side i's write half was shut down */
    bool paused[2];             /* reading side i is stopped */
    bool orphan[2];             /* lws let go of side i (hang-up); what is left is read on demand */
    bool connecting;            /* the upstream's connect has not completed */
    struct loop_timer rearm[2]; /* asks for WRITEABLE on side i from outside its callback */
    bool sniffing;              /* reading the first bytes for a name; not dialled yet */
    struct loop_timer sniff_timer;
    struct egress_addr from; /* the sandbox's veth address */
    struct egress_dest dest; /* the original destination (no name) */
    struct sockaddr_storage dst;
    socklen_t dst_len;
    bool dying;
    /* A host with rules: every byte of both sides passes through x, which
     * fills buf[] with what each side is to be sent (intercept.h). x has its
     * own copies of the rule and the secrets. */
    struct egress_intercept *x;
    struct egress_rule *rule;
    struct egress_secrets *secrets;
    struct egress_ca *ca; /* a reference: the leaf picker needs it during x's handshake */
    /* egressProxy: the SOCKS5 handshake on side 1, until it is done (then NULL). */
    struct egress_socks5 *socks;
    struct gw_conn *prev, *next;
};

struct egress_gateway {
    struct egress_gateway_deps deps;
    struct egress_addr *self;
    struct lws_vhost *vh;
    struct lws *listener;
    struct gw_handle lh;
    struct gw_conn *conns;
    size_t n_conns;
    struct gw_count *counts; /* open connections per sandbox */
    size_t n_counts, cap_counts;
    bool freeing;
    /* DNS relay */
    struct lws *dns_in, *dns_up; /* the sandboxes' side, the resolver's side */
    struct gw_handle dh_in, dh_up;
    int dns_in_fd, dns_up_fd;
    struct gw_dns_pending *pending; /* EGRESS_DNS_PENDING_MAX slots, indexed by relayed id */
    uint16_t next_id;
    struct gw_name *names; /* GW_NAMES_MAX, a ring: which name resolved to what, per sandbox */
    size_t names_next;
};

struct gw_name {
    uint64_t key;
    int64_t expires_ms; /* 0: unused */
    struct egress_addr addr;
    char name[EGRESS_HOST_MAX + 1];
};

/* A relayed query: who asked, with which id, about what. */
struct gw_dns_pending {
    bool used;
    int64_t sent_ms;
    uint16_t their_id;
    uint64_t key;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    struct egress_dns_question q;
};

static struct gw_count *count_of(struct egress_gateway *g, uint64_t key, bool create)
{
    for (size_t i = 0; i < g->n_counts; i++)
        if (g->counts[i].key == key)
            return &g->counts[i];
    if (!create)
        return NULL;
    if (g->n_counts == g->cap_counts) {
        size_t cap = g->cap_counts ? g->cap_counts * 2 : 16;
        struct gw_count *n = realloc(g->counts, cap * sizeof(*n));
        if (!n)
            return NULL;
        g->counts = n;
        g->cap_counts = cap;
    }
    g->counts[g->n_counts] = (struct gw_count){.key = key};
    return &g->counts[g->n_counts++];
}

static void count_drop(struct egress_gateway *g, uint64_t key)
{
    struct gw_count *c = count_of(g, key, false);
    if (c && --c->n <= 0)
        *c = g->counts[--g->n_counts];
}

static void conn_kill(struct gw_conn *c)
{
    c->dying = true;
    for (int i = 0; i < 2; i++)
        if (c->wsi[i])
            lws_set_timeout(c->wsi[i], PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
}

static void set_paused(struct gw_conn *c, int i, bool paused)
{
    if (!c->wsi[i] || c->paused[i] == paused)
        return;
    c->paused[i] = paused;
    lws_rx_flow_control(c->wsi[i], paused ? 0 : 1);
}

static enum egress_side side_of(int i)
{
    return i == 0 ? EGRESS_SIDE_SANDBOX : EGRESS_SIDE_UPSTREAM;
}

/* Whether side i's socket may be read now: room in its buffer, or in the
 * intercept for its bytes. */
static bool can_read(const struct gw_conn *c, int i)
{
    if (c->eof[i])
        return false;
    if (i == 1 && c->socks)
        return true;
    if (c->x && !c->sniffing)
        return egress_intercept_room(c->x, side_of(i)) > 0;
    return c->len[i] < GW_BUF;
}

static void x_failed(struct gw_conn *c);

/* Moves what the intercept has for each side into that side's buffer
 * (buf[1 - j] is written to side j) and asks to write it. Taking output lets
 * the intercept go on, which may fail it (then the connection is reset). */
static void x_fill(struct gw_conn *c)
{
    for (int j = 0; j < 2; j++) {
        int src = 1 - j;
        if (c->off[src] == c->len[src])
            c->off[src] = c->len[src] = 0;
        size_t n = egress_intercept_take(c->x, side_of(j), c->buf[src] + c->len[src],
                                         GW_BUF - c->len[src]);
        c->len[src] += n;
        if (n && c->wsi[j] && !(j == 1 && (c->connecting || c->socks)))
            lws_callback_on_writable(c->wsi[j]);
    }
    if (egress_intercept_error(c->x) && !c->dying)
        x_failed(c);
}

static void conn_free_extras(struct gw_conn *c)
{
    egress_intercept_free(c->x);
    egress_socks5_free(c->socks);
    egress_secrets_free(c->secrets);
    egress_ca_free(c->ca);
    free(c->rule);
    c->x = NULL;
    c->socks = NULL;
    c->secrets = NULL;
    c->ca = NULL;
    c->rule = NULL;
}

/* What a connection holds besides its list links: timers, extras, both
 * descriptors, itself. */
static void conn_release(struct gw_conn *c)
{
    loop_timer_cancel(&c->rearm[0]);
    loop_timer_cancel(&c->rearm[1]);
    loop_timer_cancel(&c->sniff_timer);
    conn_free_extras(c);
    close(c->fd[0]);
    if (c->fd[1] >= 0)
        close(c->fd[1]);
    free(c);
}

/* Both directions are finished once each write half was shut. */
static void maybe_done(struct gw_conn *c)
{
    if (c->shut[0] && c->shut[1])
        conn_kill(c);
}

/* The far side of i finished sending and everything it sent was written to
 * i: pass the end on. */
static void pass_eof(struct gw_conn *c, int to)
{
    if (to == 1 && (c->connecting || c->socks || c->fd[1] < 0))
        return;
    bool done =
        c->x && !c->sniffing ? egress_intercept_is_finished(c->x, side_of(to)) : c->eof[1 - to];
    if (c->shut[to] || c->len[1 - to] > c->off[1 - to] || !done)
        return;
    shutdown(c->fd[to], SHUT_WR);
    c->shut[to] = true;
    maybe_done(c);
}

static void conn_sniffed(struct gw_conn *c);
static void conn_refuse(struct gw_conn *c, enum egress_reason why);
static int x_read(struct gw_conn *c, int i);
static int socks_read(struct gw_conn *c);

static int side_write(struct gw_conn *c, int j);

static int side_read(struct gw_conn *c, int i)
{
    if (i == 1 && c->socks)
        return socks_read(c);
    if (c->x && !c->sniffing)
        return x_read(c, i);
    /* a bulk transfer drains several buffers per wakeup (read, write at once,
     * read again) instead of one per loop turn; bounded, so one connection
     * cannot hold the loop */
    for (int round = 0; round < GW_READ_ROUNDS; round++) {
        if (c->eof[i] || c->len[i] == GW_BUF) {
            set_paused(c, i, true);
            return 0;
        }
        ssize_t r = read(c->fd[i], c->buf[i] + c->len[i], GW_BUF - c->len[i]);
        if (r < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        if (r == 0) {
            c->eof[i] = true;
            set_paused(c, i, true);
            if (c->sniffing)
                conn_sniffed(c);
            else if (!c->connecting)
                pass_eof(c, 1 - i);
            return 0;
        }
        c->len[i] += (size_t)r;
        if (c->sniffing) {
            conn_sniffed(c);
            return 0;
        }
        if (c->connecting || !c->wsi[1 - i] || c->orphan[i]) {
            if (c->len[i] == GW_BUF)
                set_paused(c, i, true); /* backpressure: wait for the far side */
            if (!c->connecting && c->wsi[1 - i])
                lws_callback_on_writable(c->wsi[1 - i]);
            return 0;
        }
        /* write at once rather than a loop turn later: the far side is nearly
         * always writable, and the round trip through WRITEABLE halved the
         * throughput; EAGAIN leaves the rest to side_write's re-arm. Reads
         * are held back only if the buffer stays full (each pause is an
         * epoll_ctl, twice per buffer when done up front) */
        if (side_write(c, 1 - i) < 0)
            return -1;
        if (c->dying)
            return 0;
        if (c->len[i] == GW_BUF)
            set_paused(c, i, true);
        if (c->len[i] > 0)
            return 0;
    }
    return 0;
}

/* A raw-file wsi drops a writeable request made inside its own WRITEABLE
 * callback, so a side that must write again asks from a zero-delay timer. */
static void rearm_fn(struct loop_timer *t)
{
    struct gw_conn *c = t->arg;
    int j = t == &c->rearm[0] ? 0 : 1;
    if (c->wsi[j] && !c->dying)
        lws_callback_on_writable(c->wsi[j]);
}

static void want_write_later(struct gw_conn *c, int j)
{
    loop_timer_start(c->g->deps.loop, &c->rearm[j], 0, rearm_fn, c);
}

static int socks_write(struct gw_conn *c);

static int side_write(struct gw_conn *c, int j)
{
    int src = 1 - j;
    if (j == 1 && c->connecting) {
        int e = 0;
        socklen_t el = sizeof(e);
        if (getsockopt(c->fd[1], SOL_SOCKET, SO_ERROR, &e, &el) != 0 || e != 0) {
            if (c->socks) {
                conn_refuse(c, EGRESS_DENY_PROXY_UNREACHABLE);
                return 0;
            }
            return -1; /* the sandbox sees its connection reset */
        }
        c->connecting = false;
        set_paused(c, 1, false);
        if (c->socks)
            return socks_write(c); /* nothing of the sandbox's goes before the CONNECT */
        set_paused(c, 0, !can_read(c, 0));
        if (c->len[1] && c->wsi[0])
            lws_callback_on_writable(c->wsi[0]);
        pass_eof(c, 1);
    }
    if (j == 1 && c->socks)
        return socks_write(c);
    for (;;) {
        while (c->len[src] > c->off[src]) {
            ssize_t w =
                send(c->fd[j], c->buf[src] + c->off[src], c->len[src] - c->off[src], MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EAGAIN || errno == EINTR) {
                    want_write_later(c, j);
                    return 0;
                }
                return -1;
            }
            c->off[src] += (size_t)w;
        }
        c->len[src] = c->off[src] = 0;
        if (!c->orphan[src] || c->eof[src])
            break;
        /* a hung-up socket holds all it will ever get: read the next part now */
        if (side_read(c, src) < 0)
            return -1;
        if (!c->len[src])
            break;
    }
    if (c->x) {
        x_fill(c);
        if (c->len[src] > c->off[src])
            want_write_later(c, j); /* a request made here would be dropped */
        for (int k = 0; k < 2; k++)
            if (!c->orphan[k])
                set_paused(c, k, !can_read(c, k));
        pass_eof(c, 1 - j);
    } else if (!c->orphan[src] && !c->eof[src]) {
        set_paused(c, src, false);
    }
    pass_eof(c, j);
    return 0;
}

/* --- interception and the proxy ----------------------------------------------------- */

static void x_failed(struct gw_conn *c)
{
    const char *why = egress_intercept_error(c->x);
    /* the intercept's words name the host and the failure, never a value */
    LOG_WARN("egress intercepted connection refused", "host", c->rule ? c->rule->host : "-", "why",
             why ? why : "-");
    conn_refuse(c, EGRESS_DENY_INTERCEPT);
}

static int x_read(struct gw_conn *c, int i)
{
    uint8_t tmp[16384];
    size_t room = egress_intercept_room(c->x, side_of(i));
    if (c->eof[i] || room == 0) {
        set_paused(c, i, true);
        return 0;
    }
    ssize_t r = read(c->fd[i], tmp, room < sizeof(tmp) ? room : sizeof(tmp));
    if (r < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    int rc;
    if (r == 0) {
        c->eof[i] = true;
        set_paused(c, i, true);
        rc = egress_intercept_eof(c->x, side_of(i));
    } else {
        rc = egress_intercept_feed(c->x, side_of(i), tmp, (size_t)r);
    }
    if (rc != 0) {
        x_failed(c);
        return 0;
    }
    x_fill(c);
    if (!can_read(c, i))
        set_paused(c, i, true);
    pass_eof(c, 0);
    pass_eof(c, 1);
    return 0;
}

/* A verified name with a rule: the intercept takes over the connection,
 * starting with the bytes read while the name was sniffed. */
static int x_start(struct gw_conn *c, const struct egress_sandbox_ref *ref,
                   const struct egress_rule *rule)
{
    bool tls = c->dest.port == 443;
    if (tls && (!ref->ca || !c->g->deps.upstream_ctx))
        return -1;
    c->rule = malloc(sizeof(*c->rule));
    c->secrets = egress_secrets_dup(ref->secrets);
    if (!c->rule || !c->secrets)
        return -1;
    *c->rule = *rule;
    c->ca = tls ? egress_ca_ref(ref->ca) : NULL;
    struct egress_intercept_deps xd = {.host = c->rule->host,
                                       .rule = c->rule,
                                       .secrets = c->secrets,
                                       .tls = tls,
                                       .server_ctx = tls ? egress_ca_server_ctx(ref->ca) : NULL,
                                       .client_ctx = c->g->deps.upstream_ctx};
    c->x = egress_intercept_new(&xd);
    if (!c->x)
        return -1;
    size_t n = c->len[0] - c->off[0];
    int rc = n ? egress_intercept_feed(c->x, EGRESS_SIDE_SANDBOX, c->buf[0] + c->off[0], n) : 0;
    c->len[0] = c->off[0] = 0;
    if (rc == 0 && c->eof[0])
        rc = egress_intercept_eof(c->x, EGRESS_SIDE_SANDBOX);
    if (rc != 0) {
        LOG_WARN("egress intercepted connection refused", "host", c->rule->host, "why",
                 egress_intercept_error(c->x) ? egress_intercept_error(c->x) : "-");
        return -1;
    }
    x_fill(c);
    set_paused(c, 0, !can_read(c, 0));
    return 0;
}

static void proxy_timeout(struct loop_timer *t)
{
    struct gw_conn *c = t->arg;
    if (c->socks && !c->dying)
        conn_refuse(c, EGRESS_DENY_PROXY_UNREACHABLE);
}

static enum egress_reason socks_reason(enum egress_socks5_fail f)
{
    switch (f) {
    case EGRESS_SOCKS5_NOT_SOCKS5:
        return EGRESS_DENY_PROXY_NOT_SOCKS;
    case EGRESS_SOCKS5_AUTH:
        return EGRESS_DENY_PROXY_AUTH;
    default:
        return EGRESS_DENY_PROXY_REFUSED;
    }
}

/* The handshake's next message; they are small enough for a fresh socket's
 * send buffer, so a short write means the proxy is gone. */
static int socks_write(struct gw_conn *c)
{
    uint8_t m[600];
    size_t n = egress_socks5_take(c->socks, m, sizeof(m));
    if (n && send(c->fd[1], m, n, MSG_NOSIGNAL) != (ssize_t)n)
        conn_refuse(c, EGRESS_DENY_PROXY_UNREACHABLE);
    OPENSSL_cleanse(m, sizeof(m)); /* a login carries the password */
    return 0;
}

static int socks_read(struct gw_conn *c)
{
    uint8_t tmp[1024];
    size_t used;
    ssize_t r = read(c->fd[1], tmp, sizeof(tmp));
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (r <= 0) {
        conn_refuse(c, EGRESS_DENY_PROXY_UNREACHABLE);
        return 0;
    }
    enum egress_socks5_res res = egress_socks5_feed(c->socks, tmp, (size_t)r, &used);
    if (res == EGRESS_SOCKS5_FAIL) {
        LOG_WARN("egress proxy refused a connection", "why",
                 egress_socks5_error(c->socks) ? egress_socks5_error(c->socks) : "-");
        conn_refuse(c, socks_reason(egress_socks5_failure(c->socks)));
        return 0;
    }
    if (res == EGRESS_SOCKS5_MORE) {
        if (egress_socks5_pending(c->socks))
            socks_write(c);
        return 0;
    }
    /* The tunnel is open: what came after the reply is the destination's. */
    egress_socks5_free(c->socks);
    c->socks = NULL;
    loop_timer_cancel(&c->sniff_timer);
    size_t rest = (size_t)r - used;
    if (c->x) {
        if (rest && egress_intercept_feed(c->x, EGRESS_SIDE_UPSTREAM, tmp + used, rest) != 0) {
            x_failed(c);
            return 0;
        }
        x_fill(c);
    } else if (rest) {
        memcpy(c->buf[1] + c->len[1], tmp + used, rest); /* empty until now */
        c->len[1] += rest;
    }
    set_paused(c, 0, !can_read(c, 0));
    if (c->len[1] > c->off[1] && c->wsi[0])
        lws_callback_on_writable(c->wsi[0]);
    if (c->wsi[1])
        lws_callback_on_writable(c->wsi[1]);
    pass_eof(c, 1);
    return 0;
}

/* egressProxy: where to dial instead, and the handshake to run there. A
 * proxy named by host name is not resolved by the gateway (refused as
 * unreachable); an address in the always-denied tier, one of this machine's,
 * or a private one without allow-private-networks is refused. */
static enum egress_reason proxy_start(struct gw_conn *c, const struct egress_policy *p,
                                      struct sockaddr_storage *ss, socklen_t *sl)
{
    struct egress_addr a;
    enum egress_reason why = EGRESS_ALLOW;
    if (egress_addr_parse(p->proxy.host, &a) != 0)
        return EGRESS_DENY_PROXY_UNREACHABLE;
    enum egress_tier tier = egress_addr_tier(&a, &why);
    if (tier == EGRESS_TIER_DENIED)
        return why;
    for (size_t i = 0; i < c->g->deps.n_self; i++)
        if (c->g->self[i].family == a.family &&
            memcmp(c->g->self[i].a, a.a, a.family == AF_INET ? 4 : 16) == 0)
            return EGRESS_DENY_HOST_ADDRESS;
    if (tier == EGRESS_TIER_PRIVATE && !p->allow_private)
        return EGRESS_DENY_PRIVATE;
    struct egress_socks5_deps sd = {.addr = &c->dest.addr,
                                    .port = c->dest.port,
                                    .username = p->proxy.username,
                                    .password = p->proxy.password};
    c->socks = egress_socks5_new(&sd);
    if (!c->socks)
        return EGRESS_DENY_PROXY_UNREACHABLE;
    memset(ss, 0, sizeof(*ss));
    if (a.family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(p->proxy.port);
        memcpy(&s4->sin_addr, a.a, 4);
        *sl = sizeof(*s4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(p->proxy.port);
        memcpy(&s6->sin6_addr, a.a, 16);
        *sl = sizeof(*s6);
    }
    loop_timer_start(c->g->deps.loop, &c->sniff_timer, EGRESS_PROXY_TIMEOUT_MS, proxy_timeout, c);
    return EGRESS_ALLOW;
}

/* lws let go of side i. The wsi held a dup of our descriptor, so the socket
 * itself is still ours. lws gives up a socket on a hang-up even while we hold
 * its reads back for backpressure, when both halves are shut but unread bytes
 * remain; those bytes are still owed to the other side, so a side we no longer
 * write to lives on as an orphan, read on demand. Anything else ends the
 * connection. */
static void conn_side_closed(struct gw_conn *c, int i)
{
    struct egress_gateway *g = c->g;
    c->wsi[i] = NULL;
    if (c->wsi[1 - i]) {
        if (!c->dying && c->shut[i] && !c->connecting) {
            c->orphan[i] = true;
            c->paused[i] = false;
            if (!c->eof[i] && c->len[i] == 0 && side_read(c, i) < 0) {
                conn_kill(c);
                return;
            }
            if (c->len[i])
                lws_callback_on_writable(c->wsi[1 - i]);
            pass_eof(c, 1 - i);
            return;
        }
        conn_kill(c);
        return;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        g->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    g->n_conns--;
    count_drop(g, c->key);
    conn_release(c);
}

static void addr_from_sa(const struct sockaddr_storage *ss, struct egress_addr *a, uint16_t *port)
{
    memset(a, 0, sizeof(*a));
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)ss;
        a->family = AF_INET;
        memcpy(a->a, &s->sin_addr, 4);
        if (port)
            *port = ntohs(s->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)ss;
        a->family = AF_INET6;
        memcpy(a->a, &s->sin6_addr, 16);
        if (port)
            *port = ntohs(s->sin6_port);
    }
}

static struct lws *adopt(struct egress_gateway *g, int fd, struct gw_handle *h)
{
    lws_sock_file_fd_type d;
    d.filefd = fd;
    struct lws *w =
        lws_adopt_descriptor_vhost(g->vh, LWS_ADOPT_RAW_FILE_DESC, d, GW_PROTOCOL, NULL);
    if (w)
        lws_set_opaque_user_data(w, h);
    return w;
}

static void refuse(struct egress_gateway *g, int fd, uint64_t key, enum egress_reason why,
                   const struct egress_dest *d)
{
    /* a reset, so the sandbox's connect fails at once rather than hangs */
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    close(fd);
    if (g->deps.denied && why != EGRESS_ALLOW)
        g->deps.denied(g->deps.arg, key, why, d);
}

/* --- names: what each sandbox's DNS answers said --------------------------------------- */

static void names_put(struct egress_gateway *g, uint64_t key, const char *name,
                      const struct egress_addr *addrs, size_t n, uint32_t ttl)
{
    if (!g->names && !(g->names = calloc(GW_NAMES_MAX, sizeof(*g->names))))
        return;
    if (ttl < GW_NAME_TTL_MIN_S) /* clients cache past short TTLs */
        ttl = GW_NAME_TTL_MIN_S;
    if (ttl > GW_NAME_TTL_MAX_S)
        ttl = GW_NAME_TTL_MAX_S;
    for (size_t i = 0; i < n; i++) {
        struct gw_name *e = &g->names[g->names_next++ % GW_NAMES_MAX];
        e->key = key;
        e->expires_ms = ab_now_ms() + (int64_t)ttl * 1000;
        e->addr = addrs[i];
        ab_strlcpy(e->name, name, sizeof(e->name));
    }
}

/* Did this sandbox's own DNS, through us, resolve name to a? */
static bool names_has(const struct egress_gateway *g, uint64_t key, const char *name,
                      const struct egress_addr *a)
{
    int64_t now = ab_now_ms();
    size_t len = a->family == AF_INET ? 4 : 16;
    for (size_t i = 0; g->names && i < GW_NAMES_MAX; i++) {
        const struct gw_name *e = &g->names[i];
        if (e->expires_ms > now && e->key == key && e->addr.family == a->family &&
            memcmp(e->addr.a, a->a, len) == 0 && strcmp(e->name, name) == 0)
            return true;
    }
    return false;
}

static bool uses_names(const struct egress_policy *p)
{
    if (p && p->n_rules > 0) /* a rule's host is found by its name */
        return true;
    for (size_t i = 0; p && i < p->n_allow; i++)
        if (p->allow[i].kind == EGRESS_ENTRY_HOST || p->allow[i].kind == EGRESS_ENTRY_SUFFIX)
            return true;
    for (size_t i = 0; p && i < p->n_deny; i++)
        if (p->deny[i].kind == EGRESS_ENTRY_HOST || p->deny[i].kind == EGRESS_ENTRY_SUFFIX)
            return true;
    return false;
}

/* --- deciding and dialling ----------------------------------------------------------- */

static void conn_refuse(struct gw_conn *c, enum egress_reason why)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};
    setsockopt(c->fd[0], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    if (c->g->deps.denied && why != EGRESS_ALLOW)
        c->g->deps.denied(c->g->deps.arg, c->key, why, &c->dest);
    conn_kill(c);
}

/* Dialled from the agent's own namespace: this thread's. */
static int conn_dial(struct gw_conn *c, const struct sockaddr_storage *to, socklen_t to_len)
{
    int up = socket(to->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (up < 0)
        return -1;
    c->fd[1] = up;
    if (c->g->deps.out_mark &&
        setsockopt(up, SOL_SOCKET, SO_MARK, &c->g->deps.out_mark, sizeof(c->g->deps.out_mark)) != 0)
        return -1;
    if (connect(up, (const struct sockaddr *)to, to_len) != 0 && errno != EINPROGRESS)
        return -1;
    int d1 = fcntl(up, F_DUPFD_CLOEXEC, 0);
    c->wsi[1] = d1 >= 0 ? adopt(c->g, d1, &c->h[1]) : NULL; /* lws closes d1 on failure */
    if (!c->wsi[1])
        return -1;
    c->connecting = true;
    lws_callback_on_writable(c->wsi[1]); /* connect completion */
    return 0;
}

/* The decision, with the name the first bytes gave (or NULL). The policy is
 * asked for again here: it may have changed while the name was awaited. */
static void conn_decide(struct gw_conn *c, const char *name)
{
    struct egress_gateway *g = c->g;
    struct egress_sandbox_ref ref = {0};
    struct egress_dest d = c->dest;
    enum egress_reason why = EGRESS_DENY_INTERNET_OFF;

    c->sniffing = false;
    loop_timer_cancel(&c->sniff_timer);
    if (g->deps.sandbox_of(g->deps.arg, &c->from, &ref) == 0) {
        d.name = name;
        d.name_verified = name && names_has(g, c->key, name, &d.addr);
        why = egress_decide(ref.policy, &d, g->self, g->deps.n_self);
    }
    if (why != EGRESS_ALLOW) {
        conn_refuse(c, why);
        return;
    }
    /* A rule's host, by a name this sandbox resolved to this address: intercepted. */
    const struct egress_rule *rule = name && d.name_verified && (d.port == 80 || d.port == 443)
                                         ? egress_policy_rule_for(ref.policy, name)
                                         : NULL;
    if (rule && x_start(c, &ref, rule) != 0) {
        conn_refuse(c, EGRESS_DENY_INTERCEPT);
        return;
    }
    if (c->dying) /* the intercept refused the first bytes */
        return;
    struct sockaddr_storage to = c->dst;
    socklen_t to_len = c->dst_len;
    if (ref.policy->has_proxy && (why = proxy_start(c, ref.policy, &to, &to_len)) != EGRESS_ALLOW) {
        conn_refuse(c, why);
        return;
    }
    if (conn_dial(c, &to, to_len) != 0) /* the sandbox sees a reset; not a policy refusal */
        conn_refuse(c, c->socks ? EGRESS_DENY_PROXY_UNREACHABLE : EGRESS_ALLOW);
}

static void conn_sniffed(struct gw_conn *c)
{
    char name[EGRESS_HOST_MAX + 1];
    enum egress_sniff r = c->dest.port == 443 ? egress_sniff_tls(c->buf[0], c->len[0], name)
                                              : egress_sniff_http(c->buf[0], c->len[0], name);
    if (r == EGRESS_SNIFF_MORE && !c->eof[0] && c->len[0] < GW_BUF)
        return;
    conn_decide(c, r == EGRESS_SNIFF_FOUND ? name : NULL);
}

static void sniff_timeout(struct loop_timer *t)
{
    struct gw_conn *c = t->arg;
    if (c->sniffing && !c->dying)
        conn_decide(c, NULL);
}

/* One accepted connection: who, where to, within the limit; then the
 * decision, at once or after the first bytes named a host (ports 80, 443,
 * when the policy has names in it). */
static void on_accept(struct egress_gateway *g, int fd)
{
    struct sockaddr_storage peer, dst;
    socklen_t pl = sizeof(peer), dl = sizeof(dst);
    struct egress_sandbox_ref ref = {0};
    struct egress_dest d = {0};
    struct egress_addr from;

    if (getpeername(fd, (struct sockaddr *)&peer, &pl) != 0) {
        close(fd);
        return;
    }
    addr_from_sa(&peer, &from, NULL);
    if (g->deps.sandbox_of(g->deps.arg, &from, &ref) != 0) {
        refuse(g, fd, 0, EGRESS_DENY_INTERNET_OFF, NULL);
        return;
    }
    memset(&dst, 0, sizeof(dst));
    int got = peer.ss_family == AF_INET6 ? getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &dl)
                                         : getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &dl);
    if (got != 0) { /* not redirected: someone dialled the gateway port itself */
        refuse(g, fd, ref.key, EGRESS_DENY_RESERVED, NULL);
        return;
    }
    addr_from_sa(&dst, &d.addr, &d.port);
    bool sniff = (d.port == 80 || d.port == 443) && uses_names(ref.policy);
    if (!sniff) { /* refuse cheaply, before any state */
        enum egress_reason why = egress_decide(ref.policy, &d, g->self, g->deps.n_self);
        if (why != EGRESS_ALLOW) {
            refuse(g, fd, ref.key, why, &d);
            return;
        }
    }
    struct gw_count *cnt = count_of(g, ref.key, true);
    int limit = g->deps.max_conns_per_sandbox > 0 ? g->deps.max_conns_per_sandbox
                                                  : EGRESS_CONNS_PER_SANDBOX;
    if (!cnt || cnt->n >= limit) {
        if (cnt && cnt->n == 0)
            count_drop(g, ref.key);
        refuse(g, fd, ref.key, EGRESS_DENY_CONN_LIMIT, &d);
        return;
    }
    struct gw_conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    cnt->n++;
    c->g = g;
    c->key = ref.key;
    c->from = from;
    c->dest = d;
    c->dst = dst;
    c->dst_len = dl;
    for (int i = 0; i < 2; i++)
        c->h[i] = (struct gw_handle){.kind = GW_SIDE, .c = c, .idx = i};
    c->fd[0] = fd;
    c->fd[1] = -1;
    c->next = g->conns;
    if (g->conns)
        g->conns->prev = c;
    g->conns = c;
    g->n_conns++;
    /* lws watches dups, so a socket it gives up on stays open for us (conn_side_closed) */
    int d0 = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    c->wsi[0] = d0 >= 0 ? adopt(g, d0, &c->h[0]) : NULL;
    if (!c->wsi[0]) {
        conn_side_closed(c, 0); /* frees c and closes the socket */
        return;
    }
    if (sniff) {
        c->sniffing = true;
        loop_timer_start(g->deps.loop, &c->sniff_timer, GW_SNIFF_MS, sniff_timeout, c);
        return;
    }
    conn_decide(c, NULL);
}

/* --- DNS ------------------------------------------------------------------------------ */

static void dns_reply(struct egress_gateway *g, const uint8_t *query,
                      const struct egress_dns_question *q, uint8_t rcode,
                      const struct sockaddr_storage *peer, socklen_t pl)
{
    uint8_t out[EGRESS_DNS_MSG_MAX];
    size_t n = egress_dns_reply_rcode(query, q, rcode, out, sizeof(out));
    if (n)
        sendto(g->dns_in_fd, out, n, MSG_DONTWAIT, (const struct sockaddr *)peer, pl);
}

/* A free slot for a relayed query; stale ones (the sandbox has retried by
 * then) are reused. The relayed id is the slot plus a rolling high part, so a
 * late answer to a reused slot does not match. */
static int dns_slot(struct egress_gateway *g)
{
    int64_t now = ab_now_ms();
    for (int k = 0; k < EGRESS_DNS_PENDING_MAX; k++) {
        int i = (g->next_id + k) % EGRESS_DNS_PENDING_MAX;
        struct gw_dns_pending *p = &g->pending[i];
        if (!p->used || now - p->sent_ms > EGRESS_DNS_TIMEOUT_MS) {
            g->next_id = (uint16_t)(i + 1);
            return i;
        }
    }
    return -1;
}

static void dns_from_sandbox(struct egress_gateway *g)
{
    for (int k = 0; k < 64; k++) {
        uint8_t msg[EGRESS_DNS_MSG_MAX];
        struct sockaddr_storage peer;
        socklen_t pl = sizeof(peer);
        struct egress_dns_question q;
        struct egress_sandbox_ref ref = {0};
        struct egress_addr from;
        ssize_t r =
            recvfrom(g->dns_in_fd, msg, sizeof(msg), MSG_DONTWAIT, (struct sockaddr *)&peer, &pl);
        if (r < 0)
            return;
        if (egress_dns_parse_query(msg, (size_t)r, &q) != 0)
            continue; /* not a query: no answer at all */
        addr_from_sa(&peer, &from, NULL);
        if (g->deps.sandbox_of(g->deps.arg, &from, &ref) != 0 || !ref.policy ||
            !ref.policy->internet || !g->deps.resolver.family) {
            /* internet off: fail fast rather than let the resolver time out */
            dns_reply(g, msg, &q, EGRESS_DNS_RCODE_REFUSED, &peer, pl);
            continue;
        }
        int slot = dns_slot(g);
        if (slot < 0) {
            dns_reply(g, msg, &q, EGRESS_DNS_RCODE_SERVFAIL, &peer, pl);
            continue;
        }
        struct gw_dns_pending *p = &g->pending[slot];
        uint16_t id = (uint16_t)(slot | ((uint16_t)(ab_now_ms() & 0x3f) << 10));
        *p = (struct gw_dns_pending){.used = true,
                                     .key = ref.key,
                                     .sent_ms = ab_now_ms(),
                                     .their_id = q.id,
                                     .peer = peer,
                                     .peer_len = pl,
                                     .q = q};
        msg[0] = (uint8_t)(id >> 8);
        msg[1] = (uint8_t)id;
        if (send(g->dns_up_fd, msg, (size_t)r, MSG_DONTWAIT) < 0) {
            p->used = false;
            msg[0] = (uint8_t)(q.id >> 8);
            msg[1] = (uint8_t)q.id;
            dns_reply(g, msg, &q, EGRESS_DNS_RCODE_SERVFAIL, &peer, pl);
        }
    }
}

static void dns_from_resolver(struct egress_gateway *g)
{
    for (int k = 0; k < 64; k++) {
        uint8_t msg[EGRESS_DNS_MSG_MAX];
        struct egress_addr addrs[16];
        size_t n;
        uint32_t ttl;
        ssize_t r = recv(g->dns_up_fd, msg, sizeof(msg), MSG_DONTWAIT);
        if (r < 0)
            return;
        if (r < 12)
            continue;
        uint16_t id = (uint16_t)(msg[0] << 8 | msg[1]);
        struct gw_dns_pending *p = &g->pending[(id & 0x3ff) % EGRESS_DNS_PENDING_MAX];
        /* only an answer to the question we relayed under this id */
        if (!p->used || egress_dns_parse_answer(msg, (size_t)r, &p->q, addrs, 16, &n, &ttl) != 0)
            continue;
        names_put(g, p->key, p->q.name, addrs, n, ttl);
        msg[0] = (uint8_t)(p->their_id >> 8);
        msg[1] = (uint8_t)p->their_id;
        sendto(g->dns_in_fd, msg, (size_t)r, MSG_DONTWAIT, (struct sockaddr *)&p->peer,
               p->peer_len);
        p->used = false;
    }
}

static int gw_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len)
{
    struct gw_handle *h = wsi ? lws_get_opaque_user_data(wsi) : NULL;
    if (!h)
        return 0;
    switch (reason) {
    case LWS_CALLBACK_RAW_RX_FILE:
        if (h->kind == GW_DNS_IN) {
            dns_from_sandbox(h->g);
            return 0;
        }
        if (h->kind == GW_DNS_UP) {
            dns_from_resolver(h->g);
            return 0;
        }
        if (h->kind == GW_LISTENER) {
            for (int k = 0; k < 64; k++) { /* bounded, so one sandbox cannot starve the loop */
                int fd = accept4(lws_get_socket_fd(wsi), NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    break;
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                on_accept(h->g, fd);
            }
            return 0;
        }
        if (h->c->dying)
            return 0;
        if (side_read(h->c, h->idx) < 0)
            conn_kill(h->c);
        return 0;
    case LWS_CALLBACK_RAW_WRITEABLE_FILE:
        if (h->kind == GW_SIDE && !h->c->dying && side_write(h->c, h->idx) < 0)
            conn_kill(h->c);
        return 0;
    case LWS_CALLBACK_RAW_CLOSE_FILE:
        lws_set_opaque_user_data(wsi, NULL);
        if (h->kind == GW_LISTENER)
            h->g->listener = NULL;
        else if (h->kind == GW_DNS_IN)
            h->g->dns_in = NULL;
        else if (h->kind == GW_DNS_UP)
            h->g->dns_up = NULL;
        else
            conn_side_closed(h->c, h->idx);
        return 0;
    default:
        return 0;
    }
}

static const struct lws_protocols gw_protocols[] = {
    {GW_PROTOCOL, gw_callback, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* A socket of the egress namespace of c into *fd (-1 with errno set when
 * socket() failed). 0, or what entering the namespace returned. */
static int socket_in(const struct egress_netns_config *c, int type, int *fd, char *err,
                     size_t errlen)
{
    int saved, rc, e;

    if ((rc = egress_netns_enter(c, &saved, err, errlen)))
        return rc;
    *fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    e = errno;
    if (egress_netns_leave(saved) != 0) {
        /* a thread stuck in the egress namespace would dial from it: stop here */
        snprintf(err, errlen, "could not return from the egress namespace");
        abort();
    }
    errno = e;
    return 0;
}

int egress_gateway_listen(const struct egress_netns_config *c, uint16_t port, char *err,
                          size_t errlen)
{
    int fd, one = 1, rc;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

    if ((rc = socket_in(c, SOCK_STREAM, &fd, err, errlen)))
        return rc;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
        bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 1024) != 0) {
        snprintf(err, errlen, "egress gateway listener on port %u: %s", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return AB_EIO;
    }
    return fd;
}

int egress_gateway_listen_dns(const struct egress_netns_config *c, uint16_t port, char *err,
                              size_t errlen)
{
    int fd, rc;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};

    if ((rc = socket_in(c, SOCK_DGRAM, &fd, err, errlen)))
        return rc;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        snprintf(err, errlen, "egress gateway DNS socket on port %u: %s", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return AB_EIO;
    }
    return fd;
}

/* The resolver's side: one connected UDP socket in the agent's namespace. */
static int open_resolver(struct egress_gateway *g, char *err, size_t errlen)
{
    struct sockaddr_storage ss;
    socklen_t sl;
    memset(&ss, 0, sizeof(ss));
    if (g->deps.resolver.family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons(g->deps.resolver_port ? g->deps.resolver_port : 53);
        memcpy(&s4->sin_addr, g->deps.resolver.a, 4);
        sl = sizeof(*s4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(g->deps.resolver_port ? g->deps.resolver_port : 53);
        memcpy(&s6->sin6_addr, g->deps.resolver.a, 16);
        sl = sizeof(*s6);
    }
    int fd = socket(ss.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0 && g->deps.out_mark &&
        setsockopt(fd, SOL_SOCKET, SO_MARK, &g->deps.out_mark, sizeof(g->deps.out_mark)) != 0) {
        snprintf(err, errlen, "egress gateway resolver socket: SO_MARK: %s (needs CAP_NET_RAW)",
                 strerror(errno));
        close(fd);
        return -1;
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl) != 0) {
        snprintf(err, errlen, "egress gateway resolver socket: %s", strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

struct egress_gateway *egress_gateway_new(const struct egress_gateway_deps *deps, int listen_fd,
                                          char *err, size_t errlen)
{
    int dns_fd = deps->dns_fd > 0 ? deps->dns_fd : -1;
    struct lws_context_creation_info info;
    struct egress_gateway *g = calloc(1, sizeof(*g));

    if (g)
        g->dns_in_fd = g->dns_up_fd = -1;
    if (!g || !deps->loop || !deps->sandbox_of) {
        snprintf(err, errlen, "egress gateway needs a loop and a sandbox lookup");
        goto fail;
    }
    g->deps = *deps;
    if (deps->n_self) {
        g->self = calloc(deps->n_self, sizeof(*g->self));
        if (!g->self) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        memcpy(g->self, deps->self, deps->n_self * sizeof(*g->self));
    }
    g->deps.self = g->self;
    memset(&info, 0, sizeof(info));
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = gw_protocols;
    info.vhost_name = "agentbox-egress";
    g->vh = lws_create_vhost(loop_lws(deps->loop), &info);
    if (!g->vh) {
        snprintf(err, errlen, "cannot create the lws vhost of the egress gateway");
        goto fail;
    }
    if (dns_fd >= 0) {
        g->pending = calloc(EGRESS_DNS_PENDING_MAX, sizeof(*g->pending));
        if (!g->pending) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        if (deps->resolver.family && (g->dns_up_fd = open_resolver(g, err, errlen)) < 0)
            goto fail;
        g->dns_in_fd = dns_fd;
    }
    g->lh = (struct gw_handle){.kind = GW_LISTENER, .g = g};
    g->listener = adopt(g, listen_fd, &g->lh);
    listen_fd = -1; /* lws owns it now, or closed it */
    if (!g->listener) {
        snprintf(err, errlen, "cannot watch the egress gateway's listener");
        goto fail;
    }
    if (dns_fd >= 0) {
        /* lws watches dups; the sockets we send and receive on stay ours */
        g->dh_in = (struct gw_handle){.kind = GW_DNS_IN, .g = g};
        g->dh_up = (struct gw_handle){.kind = GW_DNS_UP, .g = g};
        int d = fcntl(g->dns_in_fd, F_DUPFD_CLOEXEC, 0);
        g->dns_in = d >= 0 ? adopt(g, d, &g->dh_in) : NULL;
        if (g->dns_up_fd >= 0) {
            d = fcntl(g->dns_up_fd, F_DUPFD_CLOEXEC, 0);
            g->dns_up = d >= 0 ? adopt(g, d, &g->dh_up) : NULL;
        }
        if (!g->dns_in || (g->dns_up_fd >= 0 && !g->dns_up)) {
            snprintf(err, errlen, "cannot watch the egress gateway's DNS sockets");
            egress_gateway_free(g);
            return NULL;
        }
    }
    return g;
fail:
    if (listen_fd >= 0)
        close(listen_fd);
    if (dns_fd >= 0)
        close(dns_fd);
    if (g) {
        if (g->dns_up_fd >= 0)
            close(g->dns_up_fd);
        free(g->pending);
        free(g->self);
        free(g);
    }
    return NULL;
}

void egress_gateway_free(struct egress_gateway *g)
{
    if (!g)
        return;
    /* detach every wsi from us; lws closes the descriptors with the vhost or context */
    for (struct gw_conn *c = g->conns, *n; c; c = n) {
        n = c->next;
        for (int i = 0; i < 2; i++)
            if (c->wsi[i]) {
                lws_set_opaque_user_data(c->wsi[i], NULL);
                lws_set_timeout(c->wsi[i], PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
            }
        conn_release(c);
    }
    free(g->names);
    struct lws *own[] = {g->listener, g->dns_in, g->dns_up};
    for (size_t i = 0; i < AB_ARRAY_LEN(own); i++)
        if (own[i]) {
            lws_set_opaque_user_data(own[i], NULL);
            lws_set_timeout(own[i], PENDING_TIMEOUT_USER_OK, LWS_TO_KILL_ASYNC);
        }
    if (g->dns_in_fd >= 0)
        close(g->dns_in_fd);
    if (g->dns_up_fd >= 0)
        close(g->dns_up_fd);
    free(g->pending);
    free(g->counts);
    free(g->self);
    free(g);
}

void egress_gateway_drop_sandbox(struct egress_gateway *g, uint64_t key)
{
    for (struct gw_conn *c = g ? g->conns : NULL; c; c = c->next)
        if (c->key == key && !c->dying) {
            struct linger lg = {.l_onoff = 1, .l_linger = 0};
            setsockopt(c->fd[0], SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
            conn_kill(c);
        }
}

size_t egress_gateway_conns(const struct egress_gateway *g)
{
    return g ? g->n_conns : 0;
}
