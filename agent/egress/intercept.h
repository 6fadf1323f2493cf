/* One intercepted connection (issue 12 "Secrets on the way out"): a
 * connection from a sandbox to a host with rules, as a pure bytes-in /
 * bytes-out state machine. The gateway owns the sockets and pumps: it feeds
 * what it read from each side, takes what is to be written to each side, and
 * reports end of stream; no sockets, no lws, no clock in here.
 *
 * TLS (port 443): a TLS server toward the sandbox with the per-sandbox CA's
 * leaf (ca.h), and a TLS client toward the real host that verifies the
 * upstream's certificate against the trust store the caller's client context
 * carries (egress_intercept_client_ctx: the system store plus an optional
 * extra bundle), sends SNI = host and checks the host name. Plain HTTP (port
 * 80): the same without TLS. Both ways every request head of the connection
 * (keep-alive) is parsed (http_head.h) and rewritten with the rule's headers,
 * secrets filled in; bodies (Content-Length, chunked) pass through as they
 * are; responses are not read. A request whose Host is not the rule's host,
 * or that http_head refuses, ends the connection (fail closed).
 *
 * Memory: every queue is bounded (EGRESS_INTERCEPT_QUEUE_MAX per direction
 * plus one rewritten head); plaintext that held secrets is wiped with
 * OPENSSL_cleanse as it leaves and on free. One thread (the loop's). */
#ifndef AGENTBOX_AGENT_EGRESS_INTERCEPT_H
#define AGENTBOX_AGENT_EGRESS_INTERCEPT_H

#include "agent/egress/policy.h"
#include "agent/egress/secrets.h"

#include <openssl/ssl.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EGRESS_INTERCEPT_QUEUE_MAX (64 * 1024)
#define EGRESS_INTERCEPT_ERR_MAX 256

enum egress_side {
    EGRESS_SIDE_SANDBOX,
    EGRESS_SIDE_UPSTREAM,
};

struct egress_intercept_deps {
    const char *host; /* the rule's host, lower case; borrowed, outlives the intercept */
    const struct egress_rule *rule;       /* borrowed, outlives the intercept */
    const struct egress_secrets *secrets; /* borrowed, outlives the intercept */
    bool tls;
    SSL_CTX *server_ctx; /* tls: egress_ca_server_ctx of the sandbox's CA */
    SSL_CTX *client_ctx; /* tls: egress_intercept_client_ctx */
};

struct egress_intercept;

/* The upstream-facing TLS client context: TLS 1.2+, peer verification on, the
 * system's default trust store plus the PEM bundle at extra_ca (NULL: none;
 * --egress-upstream-ca). NULL on failure with err naming the file. The caller
 * frees it with SSL_CTX_free after its last intercept. */
SSL_CTX *egress_intercept_client_ctx(const char *extra_ca, char *err, size_t errlen);

/* NULL on allocation failure or a missing dependency. The upstream's TLS
 * ClientHello is ready to take at once. */
struct egress_intercept *egress_intercept_new(const struct egress_intercept_deps *deps);
/* Wipes every buffer, then frees. NULL is a no-op. */
void egress_intercept_free(struct egress_intercept *x);

/* How many more bytes from side `from` the intercept takes now (0: stop
 * reading that socket until the other side's output was taken). */
size_t egress_intercept_room(const struct egress_intercept *x, enum egress_side from);
/* Bytes read from side `from`. AB_ELIMIT past the room (nothing taken); a
 * protocol failure is AB_EIO / AB_EINVAL and egress_intercept_error says what;
 * the connection is then dead and the gateway resets both sides. */
int egress_intercept_feed(struct egress_intercept *x, enum egress_side from, const uint8_t *p,
                          size_t n);
/* Side `from` will send nothing more (its socket read EOF). */
int egress_intercept_eof(struct egress_intercept *x, enum egress_side from);

/* Bytes waiting to be written to side `to`. */
size_t egress_intercept_pending(const struct egress_intercept *x, enum egress_side to);
/* Moves up to cap pending bytes for side `to` into out; returns how many. */
size_t egress_intercept_take(struct egress_intercept *x, enum egress_side to, uint8_t *out,
                             size_t cap);
/* Nothing more will ever be written to side `to` (after what is pending):
 * the gateway shuts down writing on that socket. */
bool egress_intercept_is_finished(const struct egress_intercept *x, enum egress_side to);

/* NULL while all is well; otherwise why the connection died (never a secret). */
const char *egress_intercept_error(const struct egress_intercept *x);
/* Requests rewritten so far (metrics, tests). */
uint64_t egress_intercept_requests(const struct egress_intercept *x);

#endif
