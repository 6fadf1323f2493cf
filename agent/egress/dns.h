/* DNS messages as the egress gateway handles them on its DNS port: the one
 * question of a sandbox's query, a refusal built from it (internet off: answer
 * at once rather than let the resolver time out), and the addresses of an
 * upstream answer (which names resolved to what, so a TLS SNI or HTTP Host can
 * later be checked against the address it was sent to).
 *
 * Pure and bounded: reads only msg[0..len), writes only out[0..cap); any
 * thread. RFC 1035 §4.1. */
#ifndef AGENTBOX_AGENT_EGRESS_DNS_H
#define AGENTBOX_AGENT_EGRESS_DNS_H

#include "agent/egress/policy.h"

#include <stddef.h>
#include <stdint.h>

#define EGRESS_DNS_MSG_MAX 4096 /* the largest message read or relayed over UDP */
#define EGRESS_DNS_RCODE_SERVFAIL 2
#define EGRESS_DNS_RCODE_REFUSED 5
#define EGRESS_DNS_TYPE_A 1
#define EGRESS_DNS_TYPE_AAAA 28

struct egress_dns_question {
    uint16_t id;
    char name[EGRESS_HOST_MAX + 1]; /* lower case, no trailing dot; "" for the root */
    uint16_t qtype, qclass;
    size_t end; /* offset just past the question in the message */
};

/* A query: QR 0, opcode QUERY, exactly one question with an uncompressed
 * name, no answer or authority records (one additional, the EDNS OPT, is
 * allowed). 0 or AB_EINVAL. */
int egress_dns_parse_query(const uint8_t *msg, size_t len, struct egress_dns_question *q);

/* A response to the query msg (parsed into q) with rcode and no records: the
 * header's id, RD and the question copied. Returns its length, or 0 when cap
 * is too small. */
size_t egress_dns_reply_rcode(const uint8_t *msg, const struct egress_dns_question *q,
                              uint8_t rcode, uint8_t *out, size_t cap);

/* The A and AAAA records in the answer section of a response whose question
 * is q's (same name, type and class; id not compared: the caller rewrites
 * ids). Up to max addresses into addrs; *n how many, *ttl the smallest TTL
 * among them. 0, or AB_EINVAL for a message that is not such a response. */
int egress_dns_parse_answer(const uint8_t *msg, size_t len, const struct egress_dns_question *q,
                            struct egress_addr *addrs, size_t max, size_t *n, uint32_t *ttl);

#endif
