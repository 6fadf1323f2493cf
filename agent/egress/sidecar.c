/* The Pod's egress sidecar (sidecar.h). */
#include "agent/egress/sidecar.h"

#include "agent/egress/gateway.h"
#include "agent/egress/wiring.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define LOG_PER_SEC 20

struct egress_sidecar {
    struct loop *loop;
    char token[EGRESS_SIDECAR_TOKEN_MAX + 1];
    struct egress_policy *policy; /* NULL: refuse everything */
    uint64_t key;                 /* a new one per sandbox (after DELETE) */
    struct egress_gateway *gw;
    struct http_router *router;
    struct http_server *srv;
    int64_t log_window_ms;
    int log_lines;
};

static int sandbox_of(void *arg, const struct egress_addr *peer, struct egress_sandbox_ref *ref)
{
    struct egress_sidecar *s = arg;
    (void)peer; /* one sandbox per Pod: whoever was redirected is it */
    memset(ref, 0, sizeof(*ref));
    ref->policy = s->policy;
    ref->key = s->key;
    return 0;
}

/* At most LOG_PER_SEC lines a second: a sandbox hammering a refused address
 * cannot flood the Pod's log. Addresses and names only, never a secret. */
static void on_denied(void *arg, uint64_t key, enum egress_reason why, const struct egress_dest *d)
{
    struct egress_sidecar *s = arg;
    char ip[INET6_ADDRSTRLEN] = "-", port[8] = "-";
    int64_t now = ab_now_ms();
    (void)key;
    if (now - s->log_window_ms >= 1000) {
        s->log_window_ms = now;
        s->log_lines = 0;
    }
    if (s->log_lines++ >= LOG_PER_SEC)
        return;
    if (d) {
        inet_ntop(d->addr.family, d->addr.a, ip, sizeof(ip));
        snprintf(port, sizeof(port), "%u", d->port);
    }
    LOG_INFO("egress refused", "destination", ip, "port", port, "host",
             d && d->name ? d->name : "-", "reason", egress_reason_label(why));
}

static int listen_lo(int type, uint16_t port, char *err, size_t errlen)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    int one = 1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        (type == SOCK_STREAM && listen(fd, 4096) != 0)) {
        snprintf(err, errlen, "127.0.0.1:%u: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

int egress_sidecar_apply(struct egress_sidecar *s, const char *body, size_t len, char *err,
                         size_t errlen)
{
    json_error_t je;
    json_t *b = json_loadb(body ? body : "", len, 0, &je);
    struct egress_policy *p = NULL;
    int rc = AB_EINVAL;

    if (!json_is_object(b)) {
        snprintf(err, errlen,
                 "the body must be a JSON object {network, internet, "
                 "allowPrivateNetworks}");
        goto out;
    }
    json_t *net = json_object_get(b, "network");
    json_t *inet = json_object_get(b, "internet");
    json_t *priv = json_object_get(b, "allowPrivateNetworks");
    if (!json_is_boolean(inet)) {
        snprintf(err, errlen, "internet must be a boolean");
        goto out;
    }
    if (priv && !json_is_boolean(priv)) {
        snprintf(err, errlen, "allowPrivateNetworks must be a boolean");
        goto out;
    }
    json_t *rules = json_object_get(net, "rules");
    if (json_is_object(rules) && json_object_size(rules) > 0) {
        snprintf(err, errlen,
                 "network.rules: secret injection is not available in the Pod sidecar yet");
        goto out;
    }
    const struct egress_opts o = {.internet = json_is_true(inet),
                                  .allow_private = priv && json_is_true(priv)};
    if ((rc = egress_policy_parse(json_is_null(net) ? NULL : net, &o, &p, err, errlen)) != 0)
        goto out;
    if (!o.internet) { /* nothing leaves: as if no policy */
        egress_policy_free(p);
        p = NULL;
    }
    egress_policy_free(s->policy);
    s->policy = p;
    rc = 0;
out:
    json_decref(b);
    return rc;
}

static bool authorised(struct egress_sidecar *s, struct http_exchange *ex)
{
    const char *h = http_header_get(http_req(ex), "Authorization");
    size_t n = strlen(s->token);
    if (!h || strncmp(h, "Bearer ", 7) != 0 || strlen(h + 7) != n ||
        !crypto_equal(h + 7, s->token, n)) {
        http_respond_error(ex, 401, "the control API needs the Pod's egress token");
        return false;
    }
    return true;
}

static void put_policy(struct http_exchange *ex, void *arg)
{
    struct egress_sidecar *s = arg;
    const struct http_request *r = http_req(ex);
    char err[512];
    if (!authorised(s, ex))
        return;
    if (egress_sidecar_apply(s, r->body, r->body_len, err, sizeof(err)) != 0) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    LOG_INFO("egress policy set", "internet", s->policy ? "true" : "false");
    http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
}

static void delete_policy(struct http_exchange *ex, void *arg)
{
    struct egress_sidecar *s = arg;
    if (!authorised(s, ex))
        return;
    egress_policy_free(s->policy);
    s->policy = NULL;
    egress_gateway_drop_sandbox(s->gw, s->key);
    s->key++;
    LOG_INFO("egress policy cleared");
    http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
}

static void healthz(struct http_exchange *ex, void *arg)
{
    (void)arg;
    http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
}

int egress_sidecar_new(const struct egress_sidecar_deps *deps, struct egress_sidecar **out,
                       char *err, size_t errlen)
{
    struct egress_sidecar *s = calloc(1, sizeof(*s));
    struct egress_gateway_deps gd = {0};
    char why[512];
    int lfd = -1, dfd = -1, rc = AB_EINVAL;

    *out = NULL;
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    size_t tl = deps->token ? strlen(deps->token) : 0;
    if (tl < EGRESS_SIDECAR_TOKEN_MIN || tl > EGRESS_SIDECAR_TOKEN_MAX) {
        snprintf(err, errlen, "egress_token (AGENTBOX_EGRESS_TOKEN) must be %d-%d characters",
                 EGRESS_SIDECAR_TOKEN_MIN, EGRESS_SIDECAR_TOKEN_MAX);
        goto fail;
    }
    memcpy(s->token, deps->token, tl + 1);
    s->loop = deps->loop;
    s->key = 1;
    if (!deps->control_listen || !deps->control_listen[0] ||
        strncmp(deps->control_listen, "127.", 4) == 0 ||
        strncmp(deps->control_listen, ":", 1) == 0 ||
        strncmp(deps->control_listen, "0.0.0.0", 7) == 0) {
        snprintf(err, errlen,
                 "control_listen must be <Pod IP>:port (the sandbox shares the Pod's loopback "
                 "and wildcard addresses)");
        goto fail;
    }
    if (deps->resolver && deps->resolver[0]) {
        if (egress_resolver_parse(deps->resolver, &gd.resolver, &gd.resolver_port) != 0) {
            snprintf(err, errlen, "resolver '%s' must be IP, IP:port or [IPv6]:port",
                     deps->resolver);
            goto fail;
        }
    } else if (egress_resolver_from_file("/etc/resolv.conf", &gd.resolver) != 0) {
        memset(&gd.resolver, 0, sizeof(gd.resolver));
        LOG_WARN("no nameserver in /etc/resolv.conf: the sandbox cannot resolve names");
    }
    if ((lfd = listen_lo(SOCK_STREAM, deps->tcp_port, why, sizeof(why))) < 0 ||
        (dfd = listen_lo(SOCK_DGRAM, deps->dns_port, why, sizeof(why))) < 0) {
        snprintf(err, errlen, "gateway listener %s", why);
        rc = AB_EIO;
        goto fail;
    }
    gd.loop = deps->loop;
    gd.sandbox_of = sandbox_of;
    gd.denied = on_denied;
    gd.arg = s;
    gd.max_conns_per_sandbox = deps->max_conns;
    gd.out_mark = deps->mark;
    rc = egress_start_gateway(&gd, lfd, dfd, deps->extra_self, deps->n_extra_self, &s->gw, err,
                              errlen);
    lfd = dfd = -1;
    if (rc != 0)
        goto fail;
    const struct http_route routes[] = {
        {"PUT", "/policy", put_policy, s, 0},
        {"DELETE", "/policy", delete_policy, s, 0},
        {"GET", "/healthz", healthz, s, 0},
    };
    if (!(s->router = http_router_new(routes, AB_ARRAY_LEN(routes)))) {
        snprintf(err, errlen, "out of memory");
        rc = AB_ENOMEM;
        goto fail;
    }
    struct http_server_options so = {.listen = deps->control_listen,
                                     .router = s->router,
                                     .body_max = EGRESS_SIDECAR_BODY_MAX,
                                     .name = "egress-control"};
    why[0] = '\0';
    if ((rc = http_server_start(deps->loop, &so, &s->srv, why, sizeof(why))) != 0) {
        snprintf(err, errlen, "control_listen %s: %s", deps->control_listen,
                 why[0] ? why : ab_strerror(rc));
        goto fail;
    }
    *out = s;
    return 0;
fail:
    if (lfd >= 0)
        close(lfd);
    if (dfd >= 0)
        close(dfd);
    egress_sidecar_free(s);
    return rc ? rc : AB_EIO;
}

void egress_sidecar_free(struct egress_sidecar *s)
{
    if (!s)
        return;
    if (s->srv)
        http_server_stop(s->srv);
    egress_gateway_free(s->gw);
    if (s->router)
        http_router_free(s->router);
    egress_policy_free(s->policy);
    explicit_bzero(s->token, sizeof(s->token));
    free(s);
}
