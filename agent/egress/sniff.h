/* The name a connection asks for, read from its first bytes: the TLS SNI of a
 * ClientHello, or the Host header of an HTTP/1.x request. The gateway calls
 * these on what it has buffered so far (from the first byte, up to
 * EGRESS_SNIFF_MAX) and decides on ports 80 and 443 with the name (policy.h).
 *
 * Pure and bounded: no allocation, reads only buf[0..len), never more than
 * EGRESS_SNIFF_MAX of it. Any thread. A name is only a claim of the sandbox;
 * the caller checks it against the destination address before trusting it. */
#ifndef AGENTBOX_AGENT_EGRESS_SNIFF_H
#define AGENTBOX_AGENT_EGRESS_SNIFF_H

#include "agent/egress/policy.h"

#include <stddef.h>
#include <stdint.h>

/* The most the gateway buffers before it must decide: a ClientHello with
 * post-quantum key shares fits well inside, and so does a request head. */
#define EGRESS_SNIFF_MAX 16384

enum egress_sniff {
    EGRESS_SNIFF_MORE,  /* a longer prefix could still give an answer */
    EGRESS_SNIFF_FOUND, /* name holds the host, lower case, no port, no trailing dot */
    EGRESS_SNIFF_NONE,  /* not this protocol, malformed, no name, or over the limit */
};

/* TLS: records of type handshake (reassembled across records) carrying a
 * ClientHello; the first host_name of the server_name extension. An IP
 * literal, an empty or malformed name, or a second server_name extension is
 * NONE (a caller then decides on the address alone). */
enum egress_sniff egress_sniff_tls(const uint8_t *buf, size_t len, char name[EGRESS_HOST_MAX + 1]);

/* HTTP/1.x: a request line "METHOD SP target SP HTTP/1.x" and headers up to
 * the blank line; the one Host header (its port and a v6 literal's brackets
 * dropped). Two Host headers, a folded header line, or a head longer than
 * EGRESS_SNIFF_MAX is NONE. */
enum egress_sniff egress_sniff_http(const uint8_t *buf, size_t len, char name[EGRESS_HOST_MAX + 1]);

#endif
