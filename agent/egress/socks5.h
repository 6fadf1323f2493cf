/* The SOCKS5 client handshake the gateway runs toward network.egressProxy
 * before it splices an allowed connection through it (issue 12
 * "network.egressProxy"): RFC 1928 CONNECT with no authentication or RFC 1929
 * username/password, as a pure state machine. The gateway dials the proxy,
 * writes what egress_socks5_take gives, feeds what the proxy answers, and
 * splices once egress_socks5_feed says DONE (bytes after the reply are the
 * destination's and are handed back).
 *
 * Fails closed: a reply that is not SOCKS5, a method we did not offer, a
 * refused login, any CONNECT reply but "succeeded", or a malformed reply is an
 * error with a reason; the gateway then resets the sandbox's connection. Pure:
 * no sockets, no clock (the gateway times the handshake out). Any thread. */
#ifndef AGENTBOX_AGENT_EGRESS_SOCKS5_H
#define AGENTBOX_AGENT_EGRESS_SOCKS5_H

#include "agent/egress/policy.h"

#include <stddef.h>
#include <stdint.h>

#define EGRESS_SOCKS5_ERR_MAX 160

/* Why a proxied connection failed (a label for the gateway's refusal count). */
enum egress_socks5_fail {
    EGRESS_SOCKS5_OK = 0,
    EGRESS_SOCKS5_NOT_SOCKS5, /* "proxy_not_socks": wrong version or a malformed reply */
    EGRESS_SOCKS5_AUTH,       /* "proxy_auth": no acceptable method, or the login refused */
    EGRESS_SOCKS5_REFUSED,    /* "proxy_refused": CONNECT answered with an error code */
};

const char *egress_socks5_fail_label(enum egress_socks5_fail f);

struct egress_socks5_deps {
    /* The destination: the address the policy allowed (preferred: the proxy
     * then cannot resolve a name to somewhere else), or, when addr is NULL, a
     * host name the proxy resolves. */
    const struct egress_addr *addr;
    const char *host;
    uint16_t port;
    /* RFC 1929 credentials, "" or NULL for none; each at most 255 bytes. */
    const char *username;
    const char *password;
};

struct egress_socks5;

/* NULL on allocation failure or bad deps (no destination, a credential over
 * 255 bytes, a username without a password or the reverse is allowed: an
 * empty password is sent as such). Free with egress_socks5_free (wipes the
 * password). */
struct egress_socks5 *egress_socks5_new(const struct egress_socks5_deps *deps);
void egress_socks5_free(struct egress_socks5 *s);

/* Bytes to write to the proxy now (the greeting at first). */
size_t egress_socks5_pending(const struct egress_socks5 *s);
size_t egress_socks5_take(struct egress_socks5 *s, uint8_t *out, size_t cap);

enum egress_socks5_res {
    EGRESS_SOCKS5_MORE, /* write what is pending, read more */
    EGRESS_SOCKS5_DONE, /* tunnel open: *used bytes were the handshake's, the rest is payload */
    EGRESS_SOCKS5_FAIL, /* egress_socks5_error / egress_socks5_failure say why */
};

/* Bytes the proxy sent. Consumes only handshake bytes (*used); on DONE the
 * remaining n - *used are the destination's first bytes. */
enum egress_socks5_res egress_socks5_feed(struct egress_socks5 *s, const uint8_t *p, size_t n,
                                          size_t *used);
const char *egress_socks5_error(const struct egress_socks5 *s);
enum egress_socks5_fail egress_socks5_failure(const struct egress_socks5 *s);

/* The CONNECT reply parser on its own (for the fuzz target): MORE until a
 * whole reply is in buf; DONE with *used its length when it says succeeded;
 * FAIL otherwise (*why set, *fail the reason). */
enum egress_socks5_res egress_socks5_parse_reply(const uint8_t *buf, size_t len, size_t *used,
                                                 enum egress_socks5_fail *fail, const char **why);

#endif
