/* The egress gateway's DNS handling on arbitrary datagrams: a query it
 * accepts gives a refusal that reads back as an answer to the same question
 * with no address; an answer never yields more addresses than asked, and only
 * A/AAAA ones. Never crashes or reads past the input (ASan). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/egress/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct egress_dns_question q;
    static uint8_t out[EGRESS_DNS_MSG_MAX];
    struct egress_addr a[3];
    size_t n;
    uint32_t ttl;

    if (egress_dns_parse_query(data, size, &q) == 0) {
        if (q.end > size || !memchr(q.name, '\0', sizeof(q.name)))
            abort();
        size_t r = egress_dns_reply_rcode(data, &q, 5, out, sizeof(out));
        if (r != q.end || egress_dns_parse_answer(out, r, &q, a, 3, &n, &ttl) != 0 || n != 0)
            abort();
        if (egress_dns_parse_query(out, r, &q) == 0)
            abort(); /* a reply is never taken for a query */
    }
    struct egress_dns_question fixed = {.name = "a.example", .qtype = 1, .qclass = 1};
    if (egress_dns_parse_answer(data, size, &fixed, a, 3, &n, &ttl) == 0) {
        if (n > 3)
            abort();
        for (size_t i = 0; i < n; i++)
            if (a[i].family != AF_INET && a[i].family != AF_INET6)
                abort();
    }
    return 0;
}
