/* DNS on the egress gateway's DNS port (agent/egress/dns.c): queries a
 * sandbox may send (and the ones refused), the fail-fast refusal built from
 * them, and the addresses read from an upstream answer, including answers
 * that lie about their lengths. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/egress/dns.h"
#include "agentbox/common.h"

/* A query for name (dotted) of type, id 0x1234, RD set. */
static size_t query(uint8_t *out, const char *name, uint16_t type)
{
    size_t n = 0;
    const uint8_t hdr[12] = {0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0};
    memcpy(out, hdr, 12), n = 12;
    for (const char *p = name; *p;) {
        const char *dot = strchr(p, '.');
        size_t l = dot ? (size_t)(dot - p) : strlen(p);
        out[n++] = (uint8_t)l;
        memcpy(out + n, p, l), n += l;
        p += l + (dot ? 1 : 0);
    }
    out[n++] = 0;
    out[n++] = (uint8_t)(type >> 8), out[n++] = (uint8_t)type;
    out[n++] = 0, out[n++] = 1;
    return n;
}

static void test_query(void **state)
{
    uint8_t m[512], r[512];
    struct egress_dns_question q;
    size_t n = query(m, "API.Example.com", EGRESS_DNS_TYPE_A);
    assert_int_equal(egress_dns_parse_query(m, n, &q), 0);
    assert_string_equal(q.name, "api.example.com");
    assert_int_equal(q.id, 0x1234);
    assert_int_equal(q.qtype, EGRESS_DNS_TYPE_A);
    assert_int_equal(q.end, n);
    /* every truncation is refused */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(egress_dns_parse_query(m, k, &q), AB_EINVAL);

    /* the refusal: same id and question, QR + RA + RD, rcode, no records */
    assert_int_equal(egress_dns_parse_query(m, n, &q), 0);
    size_t rn = egress_dns_reply_rcode(m, &q, EGRESS_DNS_RCODE_REFUSED, r, sizeof(r));
    assert_int_equal(rn, n);
    assert_int_equal(r[0], 0x12);
    assert_int_equal(r[1], 0x34);
    assert_int_equal(r[2], 0x81);
    assert_int_equal(r[3], 0x85);
    assert_memory_equal(r + 12, m + 12, n - 12);
    assert_int_equal(egress_dns_reply_rcode(m, &q, 5, r, n - 1), 0);
    /* and it reads back as an answer with no address */
    struct egress_addr a[4];
    size_t na;
    uint32_t ttl;
    assert_int_equal(egress_dns_parse_answer(r, rn, &q, a, 4, &na, &ttl), 0);
    assert_int_equal(na, 0);

    /* refused queries */
    uint8_t b[512];
    memcpy(b, m, n);
    b[2] |= 0x80; /* a response */
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
    memcpy(b, m, n);
    b[2] |= 0x28; /* opcode 5 (UPDATE) */
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
    memcpy(b, m, n);
    b[5] = 2; /* two questions */
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
    memcpy(b, m, n);
    b[7] = 1; /* an answer in a query */
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
    memcpy(b, m, 12);
    b[12] = 0xc0, b[13] = 12; /* a compressed (self-pointing) question name */
    memset(b + 14, 0, 4);
    assert_int_equal(egress_dns_parse_query(b, 18, &q), AB_EINVAL);
    memcpy(b, m, n);
    b[13] = '.'; /* a dot inside a label would read as two labels */
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
    /* a name over 253 characters */
    char longname[300];
    memset(longname, 'a', sizeof(longname));
    for (int i = 60; i < 299; i += 61)
        longname[i] = '.';
    longname[299] = '\0';
    n = query(b, longname, 1);
    assert_int_equal(egress_dns_parse_query(b, n, &q), AB_EINVAL);
}

static void test_answer(void **state)
{
    uint8_t m[512];
    struct egress_dns_question q;
    size_t n = query(m, "api.example.com", EGRESS_DNS_TYPE_A), qn = n;
    assert_int_equal(egress_dns_parse_query(m, n, &q), 0);
    m[2] = 0x81, m[3] = 0x80;
    m[7] = 3; /* CNAME, A, A */
    /* CNAME api.example.com -> edge (pointer to the question name) */
    const uint8_t cname[] = {0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60, 0, 6, 4, 'e', 'd', 'g', 'e', 0};
    memcpy(m + n, cname, sizeof(cname)), n += sizeof(cname);
    const uint8_t a1[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 93, 184, 215, 14};
    memcpy(m + n, a1, sizeof(a1)), n += sizeof(a1);
    const uint8_t a2[] = {0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 93, 184, 215, 15};
    memcpy(m + n, a2, sizeof(a2)), n += sizeof(a2);
    struct egress_addr a[4];
    size_t na;
    uint32_t ttl;
    assert_int_equal(egress_dns_parse_answer(m, n, &q, a, 4, &na, &ttl), 0);
    assert_int_equal(na, 2);
    assert_int_equal(ttl, 30);
    char ip[INET_ADDRSTRLEN];
    assert_string_equal(inet_ntop(AF_INET, a[0].a, ip, sizeof(ip)), "93.184.215.14");
    assert_string_equal(inet_ntop(AF_INET, a[1].a, ip, sizeof(ip)), "93.184.215.15");
    assert_int_equal(egress_dns_parse_answer(m, n, &q, a, 1, &na, &ttl), 0);
    assert_int_equal(na, 1); /* bounded by max */
    /* any truncation of the records is refused */
    for (size_t k = qn; k < n; k++)
        assert_int_equal(egress_dns_parse_answer(m, k, &q, a, 4, &na, &ttl), AB_EINVAL);
    /* a record claiming more data than there is */
    uint8_t b[512];
    memcpy(b, m, n);
    b[qn + sizeof(cname) + 10] = 0xff;
    assert_int_equal(egress_dns_parse_answer(b, n, &q, a, 4, &na, &ttl), AB_EINVAL);
    /* an answer to another question */
    struct egress_dns_question other = q;
    strcpy(other.name, "evil.example");
    assert_int_equal(egress_dns_parse_answer(m, n, &other, a, 4, &na, &ttl), AB_EINVAL);
    other = q;
    other.qtype = EGRESS_DNS_TYPE_AAAA;
    assert_int_equal(egress_dns_parse_answer(m, n, &other, a, 4, &na, &ttl), AB_EINVAL);
    /* a query is not an answer */
    n = query(b, "api.example.com", 1);
    assert_int_equal(egress_dns_parse_answer(b, n, &q, a, 4, &na, &ttl), AB_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query),
        cmocka_unit_test(test_answer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
