/* The agent's one way to the hub (DESIGN §5, §6): every call to the hub's
 * own API (`hub` service) and every relay to another cluster's service goes
 * through here, so the session lookup, the relay headers, the body limits
 * and the answer when the tunnel is down live in one place.
 *
 * When the tunnel is down (or no hub is configured) every entry point fails
 * at once, without waiting: calls return AB_ECLOSED, forwards and proxies
 * answer 503 with hub_link_unreachable's message (the data plane keeps its
 * documented 502; it asks hub_link_unreachable for the words).
 *
 * Owner: struct agent (agent_init creates it, agent_fini frees it last of
 * the users). May call: the tunnel client (agent_tunnel_session/_epoch),
 * tunnel_http. Loop thread only. */
#ifndef AGENTBOX_AGENT_HUB_LINK_H
#define AGENTBOX_AGENT_HUB_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct agent_tunnel;
struct loop;
struct http_exchange;
struct tun_session;
struct tun_header;
struct tun_head;
struct tun_endpoint;
struct tun_stream;
struct tun_call_result;

/* The largest buffered answer a forward accepts. */
#define HUB_LINK_FORWARD_MAX (4 * 1024 * 1024)
/* Headers hub_link_relay_headers appends. */
#define HUB_LINK_RELAY_HEADERS 3

struct hub_link_deps {
    struct loop *loop;   /* deadlines of hub_link_call_within */
    const char *cluster; /* this cluster's id; must outlive the link */
    bool hub_configured; /* --hub-url is set (else: standalone, say so in errors) */
};

/* NULL when out of memory. */
struct hub_link *hub_link_new(const struct hub_link_deps *deps);
/* NULL is fine. The tunnel must be stopped (or never set) first: its end
 * delivered every call's answer. */
void hub_link_free(struct hub_link *hl);
/* The tunnel client once agent_start made it; NULL before it is stopped. */
void hub_link_set_tunnel(struct hub_link *hl, struct agent_tunnel *t);

/* The established session, or NULL while the tunnel is down. */
struct tun_session *hub_link_session(const struct hub_link *hl);
bool hub_link_configured(const struct hub_link *hl);
/* This cluster's id (deps.cluster; "" when none). */
const char *hub_link_cluster(const struct hub_link *hl);
/* The tunnel's epoch (0 while never up): changes on every reconnect. */
int64_t hub_link_epoch(const struct hub_link *hl);
/* Why cluster cannot be reached now ("cluster 'x' is not reachable: the tunnel to the hub is
 * down; ..."), into msg. cluster NULL: "the hub is not reachable: ...". */
void hub_link_unreachable(const struct hub_link *hl, const char *cluster, char *msg, size_t len);

/* tun_call on the `hub` service (path on the hub's internal API). Returns 0
 * (done runs once, later), AB_ECLOSED while the tunnel is down, or
 * tun_call's error; done does not run on a non-zero return. */
int hub_link_call(struct hub_link *hl, const char *method, const char *path,
                  const struct tun_header *h, int n, const void *body, size_t len, size_t max_body,
                  void (*done)(const struct tun_call_result *res, void *arg), void *arg);
/* hub_link_call with a deadline: done runs exactly once, with the hub's
 * answer or, timeout_ms after the call, with status 0 and error "the hub did
 * not answer within …" (a later answer is dropped). Same returns. */
int hub_link_call_within(struct hub_link *hl, int64_t timeout_ms, const char *method,
                         const char *path, const struct tun_header *h, int n, const void *body,
                         size_t len, size_t max_body,
                         void (*done)(const struct tun_call_result *res, void *arg), void *arg);
/* Opens a raw stream with head (service set by the caller). AB_ECLOSED while down. */
int hub_link_open(struct hub_link *hl, const struct tun_head *head, struct tun_endpoint *ep,
                  struct tun_stream **out);

/* Appends the relay headers (target cluster and service, source cluster)
 * to h[0..n); h must have room for HUB_LINK_RELAY_HEADERS more. Returns the
 * new count. Strings are borrowed. */
int hub_link_relay_headers(const struct hub_link *hl, const char *cluster, const char *service,
                           struct tun_header *h, int n);

/* Forwards the exchange to cluster's service as one buffered call: method
 * and target as given, body (NULL: the request's buffered body), the
 * caller's principal assertion (made for this cluster: the hub checks that
 * and re-signs it for the target) and Content-Type — never the caller's
 * key — and answers ex with what comes back. what names the request in
 * errors ("this create", NULL: "this request"). assertion "" or NULL: 401
 * without forwarding. Always answers ex. */
void hub_link_forward(struct hub_link *hl, struct http_exchange *ex, const char *cluster,
                      const char *service, const char *target, const char *body, size_t len,
                      const char *what, const char *assertion);
/* Proxies the exchange to cluster's service as a stream (bodies both ways,
 * with backpressure; a HTTP_ROUTE_STREAM route). assertion: the caller's
 * principal assertion (made for this cluster; the hub re-signs it for the
 * target), sent in place of any the request carries; NULL for traffic that
 * carries its own credential (the data plane's envd tokens). Always answers ex. */
void hub_link_proxy(struct hub_link *hl, struct http_exchange *ex, const char *cluster,
                    const char *service, const char *target, const char *assertion);

#endif
