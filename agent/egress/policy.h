/* The egress policy of one sandbox: what the E2B create's `network` object
 * (and the internet / allow-private-networks switches) allow, and the one
 * function that decides whether a connection may be dialled (DESIGN §10a
 * "Network", issue 12 "Policy, fail closed").
 *
 * Pure: JSON in, a struct out, a decision out. No sockets, no DNS, no loop;
 * any thread. The gateway resolves, sniffs and dials; this module only says
 * yes or no and why, so the security boundary is one function with one table
 * of tests (tests/unit/test_agent_egress_policy.c).
 *
 * Tiers, checked on the resolved address (IPv4-mapped IPv6 is unwrapped):
 *   always denied  loopback, link-local (169.254/16, fe80::/10), the cloud
 *                  metadata addresses (169.254.169.254, 100.100.100.200,
 *                  fd00:ec2::254), multicast, unspecified/reserved/broadcast,
 *                  the host's own addresses. Nothing opens these.
 *   default denied RFC 1918, CGNAT 100.64/10, ULA fc00::/7 (and deprecated
 *                  site-local fec0::/10). Opened by allow-private-networks, or
 *                  for one destination by an allowOut IP/CIDR containing it or
 *                  an exact allowOut host name matching its verified name.
 *   public         everything else.
 */
#ifndef AGENTBOX_AGENT_EGRESS_POLICY_H
#define AGENTBOX_AGENT_EGRESS_POLICY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Limits on what a create may ask for; crossing one is a 400 naming it. */
#define EGRESS_LIST_MAX 256         /* entries in allowOut, and in denyOut */
#define EGRESS_HOST_MAX 253         /* a DNS name, without the trailing dot */
#define EGRESS_RULE_HOSTS_MAX 64    /* hosts in network.rules */
#define EGRESS_RULES_PER_HOST_MAX 8 /* rules listed under one host */
#define EGRESS_HEADERS_MAX 16       /* headers injected into one host's requests */
#define EGRESS_HEADER_NAME_MAX 128
#define EGRESS_HEADER_VALUE_MAX 4096 /* the template, before secrets are filled */
#define EGRESS_SECRET_NAME_MAX 128
#define EGRESS_PROXY_CRED_MAX 255 /* RFC 1929: one length byte */

/* An IP address; a[0..3] for AF_INET, a[0..15] for AF_INET6. */
struct egress_addr {
    int family; /* AF_INET or AF_INET6 */
    uint8_t a[16];
};

struct egress_cidr {
    struct egress_addr net; /* host bits cleared */
    uint8_t bits;
};

enum egress_entry_kind {
    EGRESS_ENTRY_CIDR,   /* an IP (promoted to /32 or /128) or a CIDR */
    EGRESS_ENTRY_HOST,   /* an exact host name */
    EGRESS_ENTRY_SUFFIX, /* "*.example.com": strict sub-domains of example.com */
    EGRESS_ENTRY_ANY,    /* "*": every public address */
};

struct egress_entry {
    enum egress_entry_kind kind;
    struct egress_cidr cidr;        /* EGRESS_ENTRY_CIDR */
    char host[EGRESS_HOST_MAX + 1]; /* HOST: the name; SUFFIX: "example.com"; lower case */
};

/* One header the gateway sets on requests to a rule's host. The value is the
 * template as sent (e.g. "Bearer ${e2b.secrets.OPENAI}"); the secrets are
 * filled in by the gateway, never stored here. */
struct egress_header {
    char name[EGRESS_HEADER_NAME_MAX + 1];
    char value[EGRESS_HEADER_VALUE_MAX + 1];
};

struct egress_rule {
    char host[EGRESS_HOST_MAX + 1]; /* exact, lower case */
    size_t n_headers;
    struct egress_header headers[EGRESS_HEADERS_MAX];
};

/* network.egressProxy: a SOCKS5 proxy the gateway tunnels allowed TCP through. */
struct egress_proxy {
    char host[EGRESS_HOST_MAX + 1]; /* a name or an IP literal (no brackets) */
    uint16_t port;
    char username[EGRESS_PROXY_CRED_MAX + 1]; /* "" = no authentication */
    char password[EGRESS_PROXY_CRED_MAX + 1];
};

/* A parsed policy. Read-only once parsed; owned by whoever parsed it. */
struct egress_policy {
    bool internet;      /* allow_internet_access */
    bool allow_private; /* agentbox.scitix.ai/allow-private-networks */
    bool filtering;     /* allowOut had at least one entry: everything else is a deny */
    size_t n_allow, n_deny, n_rules;
    struct egress_entry *allow; /* n_allow */
    struct egress_entry *deny;  /* n_deny (CIDR, HOST or SUFFIX; never ANY) */
    struct egress_rule *rules;  /* n_rules, sorted by host */
    bool has_proxy;
    struct egress_proxy proxy;
};

/* Why a connection was refused; EGRESS_ALLOW when it was not. Each value is a
 * label of agentbox_egress_denied_total{reason} (egress_reason_label). */
enum egress_reason {
    EGRESS_ALLOW = 0,
    EGRESS_DENY_INTERNET_OFF, /* "internet_off" */
    EGRESS_DENY_LOOPBACK,     /* "loopback" */
    EGRESS_DENY_LINK_LOCAL,   /* "link_local" */
    EGRESS_DENY_METADATA,     /* "metadata": a cloud metadata address */
    EGRESS_DENY_MULTICAST,    /* "multicast" */
    EGRESS_DENY_RESERVED,     /* "reserved": unspecified, broadcast, 240/4 */
    EGRESS_DENY_HOST_ADDRESS, /* "host_address": one of this machine's addresses */
    EGRESS_DENY_PRIVATE,      /* "private": RFC 1918, CGNAT, ULA, not opened */
    EGRESS_DENY_NOT_ALLOWED,  /* "not_allowed": allowOut names something else */
    EGRESS_DENY_DENY_OUT,     /* "deny_out": a denyOut entry matched */
    EGRESS_DENY_CONN_LIMIT,   /* "conn_limit": the sandbox has too many open (gateway) */
    /* Refusals after the policy allowed the destination (gateway): */
    EGRESS_DENY_INTERCEPT,         /* "intercept": the upstream's certificate did not verify,
                                      or a request on an intercepted connection was refused */
    EGRESS_DENY_PROXY_UNREACHABLE, /* "proxy_unreachable": egressProxy did not accept or answer */
    EGRESS_DENY_PROXY_NOT_SOCKS,   /* "proxy_not_socks": egressProxy does not speak SOCKS5 */
    EGRESS_DENY_PROXY_AUTH,        /* "proxy_auth": egressProxy refused our login or methods */
    EGRESS_DENY_PROXY_REFUSED,     /* "proxy_refused": egressProxy refused the CONNECT */
    EGRESS_REASON_COUNT
};

/* The label value for r ("allow" for EGRESS_ALLOW); never NULL. */
const char *egress_reason_label(enum egress_reason r);

enum egress_tier {
    EGRESS_TIER_PUBLIC,
    EGRESS_TIER_PRIVATE, /* default denied */
    EGRESS_TIER_DENIED,  /* always denied; *why says which */
};

/* The tier of a (as given; IPv4-mapped and IPv4-compatible IPv6 are judged as
 * the IPv4 address they carry). why, when not NULL, gets the refusal reason for
 * the private and denied tiers and EGRESS_ALLOW for public. */
enum egress_tier egress_addr_tier(const struct egress_addr *a, enum egress_reason *why);

/* Parses an IPv4 or IPv6 literal (no brackets, no port). 0 or AB_EINVAL. */
int egress_addr_parse(const char *s, struct egress_addr *out);
/* "a.b.c.d/n", "x::/n" or a bare IP (promoted to a full-length prefix). 0 or AB_EINVAL. */
int egress_cidr_parse(const char *s, struct egress_cidr *out);
bool egress_cidr_contains(const struct egress_cidr *c, const struct egress_addr *a);

/* A DNS name (s, n bytes, not necessarily terminated) in letters, digits, '-'
 * and '_', labels of 1-63, at most EGRESS_HOST_MAX, into out in lower case
 * without a trailing dot. 0 or AB_EINVAL. */
int egress_host_normalise(const char *s, size_t n, char out[EGRESS_HOST_MAX + 1]);

/* What the create asked for besides `network`. */
struct egress_opts {
    bool internet;      /* allow_internet_access (the SDK's default is true) */
    bool allow_private; /* allow-private-networks metadata was "true" */
};

/* Parses an E2B `network` object (NULL or JSON null: no list, no rules):
 *   allowOut, denyOut: arrays of strings (host, "*.suffix", "*", IP, CIDR;
 *                      denyOut takes no "*");
 *   rules:             { host: [ {transform: {headers: {name: template}}} ] },
 *                      or the same as an array of [host, [rules]] pairs (a JS Map);
 *   egressProxy:       {address: "host:port", username?, password?} or "host:port".
 * Unknown fields are left to the caller (allowPublicTraffic, maskRequestHost,
 * httpsPorts are the E2B surface's business). Refuses with AB_EINVAL and a 400
 * message naming the field: wrong shapes, over-limit lists, malformed entries,
 * a wildcard host in rules, a literal (non-${e2b.secrets.NAME}) header value,
 * a rule for a host the lists do not allow, rules with internet off, a proxy
 * whose IP literal is in a denied tier. AB_ENOMEM on allocation failure.
 * On success *out is a new policy the caller frees with egress_policy_free. */
int egress_policy_parse(const json_t *network, const struct egress_opts *opts,
                        struct egress_policy **out, char *err, size_t errlen);
void egress_policy_free(struct egress_policy *p);

/* One connection as the gateway sees it. */
struct egress_dest {
    struct egress_addr addr; /* the original destination (SO_ORIGINAL_DST) */
    uint16_t port;
    /* The HTTP Host / TLS SNI name, lower case, no port; NULL if none. Used only
     * on ports 80 and 443 and only when name_verified: the caller vouches that
     * the name resolves to addr (the gateway's own DNS answer for this
     * sandbox), since the sandbox writes the name and the address separately. */
    const char *name;
    bool name_verified;
};

/* The decision for d under p. self lists this machine's own addresses (n_self
 * entries; may be NULL when n_self is 0). p NULL is read as internet off.
 * Order: internet off; always-denied tier; own addresses; denyOut; then
 * allowOut (when filtering) or the default-denied tier. */
enum egress_reason egress_decide(const struct egress_policy *p, const struct egress_dest *d,
                                 const struct egress_addr *self, size_t n_self);

/* The rule for an exact host (lower case), or NULL. */
const struct egress_rule *egress_policy_rule_for(const struct egress_policy *p, const char *host);

/* The distinct secret names the rules reference, in order of first use, into
 * names (max entries). Returns how many there are (may exceed max: only max
 * were written). The caller checks them against the vault ("unknown secret"). */
size_t egress_policy_secret_names(const struct egress_policy *p,
                                  char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t max);

#endif
