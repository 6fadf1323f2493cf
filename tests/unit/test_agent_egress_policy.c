/* The egress policy (agent/egress/policy.c): one table with every row of issue
 * 12's "Policy, fail closed" paragraph (a network object, the switches, a
 * destination, the decision and its metric label), then the 400s of parsing,
 * each checked for the field its message names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/egress/policy.h"
#include "agentbox/common.h"

struct row {
    const char *name;
    const char *network; /* JSON or NULL */
    bool internet, allow_private;
    const char *addr;
    uint16_t port;
    const char *sni; /* Host / SNI the gateway read, verified against addr */
    bool unverified; /* the name was not checked against the address */
    enum egress_reason want;
};

#define PUB "93.184.215.14"
#define PUB6 "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
#define SELF "203.0.113.7" /* one of "the host's own addresses" below */

static const struct row rows[] = {
    /* internet off: nothing leaves, not even what a list would allow */
    {"internet off", NULL, false, false, PUB, 443, NULL, false, EGRESS_DENY_INTERNET_OFF},
    {"internet off beats allowOut", "{\"allowOut\":[\"" PUB "\"]}", false, false, PUB, 443, NULL,
     false, EGRESS_DENY_INTERNET_OFF},
    {"internet off, DNS", NULL, false, false, "8.8.8.8", 53, NULL, false, EGRESS_DENY_INTERNET_OFF},
    /* internet on, no list: the public internet */
    {"no list, public v4", NULL, true, false, PUB, 443, NULL, false, EGRESS_ALLOW},
    {"no list, public v6", NULL, true, false, PUB6, 80, NULL, false, EGRESS_ALLOW},
    {"no list, other port", "{}", true, false, PUB, 5432, NULL, false, EGRESS_ALLOW},
    {"network null", "null", true, false, PUB, 22, NULL, false, EGRESS_ALLOW},
    /* the always-denied tier: nothing opens it */
    {"loopback v4", NULL, true, false, "127.0.0.1", 7700, NULL, false, EGRESS_DENY_LOOPBACK},
    {"loopback 127/8", NULL, true, true, "127.9.9.9", 80, NULL, false, EGRESS_DENY_LOOPBACK},
    {"loopback v6", NULL, true, true, "::1", 80, NULL, false, EGRESS_DENY_LOOPBACK},
    {"loopback v4-mapped", NULL, true, true, "::ffff:127.0.0.1", 80, NULL, false,
     EGRESS_DENY_LOOPBACK},
    {"loopback nat64", NULL, true, true, "64:ff9b::7f00:1", 80, NULL, false, EGRESS_DENY_LOOPBACK},
    {"loopback named in allowOut", "{\"allowOut\":[\"127.0.0.1\"]}", true, true, "127.0.0.1", 80,
     NULL, false, EGRESS_DENY_LOOPBACK},
    {"loopback host name in allowOut", "{\"allowOut\":[\"localhost\"]}", true, true, "127.0.0.1",
     80, "localhost", false, EGRESS_DENY_LOOPBACK},
    {"metadata v4", NULL, true, true, "169.254.169.254", 80, NULL, false, EGRESS_DENY_METADATA},
    {"metadata v4 in allowOut CIDR", "{\"allowOut\":[\"169.254.0.0/16\"]}", true, true,
     "169.254.169.254", 80, NULL, false, EGRESS_DENY_METADATA},
    {"metadata alibaba", NULL, true, true, "100.100.100.200", 80, NULL, false,
     EGRESS_DENY_METADATA},
    {"metadata alibaba in allowOut", "{\"allowOut\":[\"100.64.0.0/10\"]}", true, true,
     "100.100.100.200", 80, NULL, false, EGRESS_DENY_METADATA},
    {"metadata aws v6", NULL, true, true, "fd00:ec2::254", 80, NULL, false, EGRESS_DENY_METADATA},
    {"metadata aws v6 in allowOut ULA", "{\"allowOut\":[\"fc00::/7\"]}", true, true,
     "fd00:ec2::254", 80, NULL, false, EGRESS_DENY_METADATA},
    {"link-local v4", NULL, true, true, "169.254.1.1", 80, NULL, false, EGRESS_DENY_LINK_LOCAL},
    {"link-local v6 fe80::/10", NULL, true, true, "fe80::1", 80, NULL, false,
     EGRESS_DENY_LINK_LOCAL},
    {"link-local v6 top of /10", NULL, true, true, "febf::1", 80, NULL, false,
     EGRESS_DENY_LINK_LOCAL},
    {"multicast v4", NULL, true, true, "224.0.0.251", 5353, NULL, false, EGRESS_DENY_MULTICAST},
    {"multicast v6", NULL, true, true, "ff02::fb", 5353, NULL, false, EGRESS_DENY_MULTICAST},
    {"unspecified v4", NULL, true, true, "0.0.0.0", 80, NULL, false, EGRESS_DENY_RESERVED},
    {"unspecified v6", NULL, true, true, "::", 80, NULL, false, EGRESS_DENY_RESERVED},
    {"broadcast", NULL, true, true, "255.255.255.255", 80, NULL, false, EGRESS_DENY_RESERVED},
    {"host's own address", NULL, true, true, SELF, 7700, NULL, false, EGRESS_DENY_HOST_ADDRESS},
    {"host's own address in allowOut", "{\"allowOut\":[\"" SELF "\"]}", true, true, SELF, 7700,
     NULL, false, EGRESS_DENY_HOST_ADDRESS},
    {"host's own address v4-mapped", NULL, true, true, "::ffff:" SELF, 80, NULL, false,
     EGRESS_DENY_HOST_ADDRESS},
    {"host's own private address", "{\"allowOut\":[\"10.1.2.3\"]}", true, true, "10.1.2.3", 80,
     NULL, false, EGRESS_DENY_HOST_ADDRESS},
    /* the default-denied tier */
    {"rfc1918 10/8", NULL, true, false, "10.0.0.1", 80, NULL, false, EGRESS_DENY_PRIVATE},
    {"rfc1918 172.16/12", NULL, true, false, "172.31.255.1", 80, NULL, false, EGRESS_DENY_PRIVATE},
    {"172.32 is public", NULL, true, false, "172.32.0.1", 80, NULL, false, EGRESS_ALLOW},
    {"rfc1918 192.168/16", NULL, true, false, "192.168.1.1", 80, NULL, false, EGRESS_DENY_PRIVATE},
    {"cgnat 100.64/10", NULL, true, false, "100.127.255.254", 80, NULL, false, EGRESS_DENY_PRIVATE},
    {"100.128 is public", NULL, true, false, "100.128.0.1", 80, NULL, false, EGRESS_ALLOW},
    {"ula fc00::/7", NULL, true, false, "fd12:3456::1", 80, NULL, false, EGRESS_DENY_PRIVATE},
    {"private v4-mapped", NULL, true, false, "::ffff:10.0.0.1", 80, NULL, false,
     EGRESS_DENY_PRIVATE},
    {"a name resolving to a private address", NULL, true, false, "10.0.0.1", 443,
     "intranet.example.com", false, EGRESS_DENY_PRIVATE},
    {"allow-private-networks opens rfc1918", NULL, true, true, "10.0.0.1", 80, NULL, false,
     EGRESS_ALLOW},
    {"allow-private-networks opens cgnat", NULL, true, true, "100.64.0.1", 80, NULL, false,
     EGRESS_ALLOW},
    {"allow-private-networks opens ula", NULL, true, true, "fd12::1", 80, NULL, false,
     EGRESS_ALLOW},
    {"allowOut IP opens a private address", "{\"allowOut\":[\"10.0.0.5\"]}", true, false,
     "10.0.0.5", 5432, NULL, false, EGRESS_ALLOW},
    {"allowOut CIDR opens a private range", "{\"allowOut\":[\"192.168.0.0/16\"]}", true, false,
     "192.168.7.7", 22, NULL, false, EGRESS_ALLOW},
    {"allowOut host opens its private address", "{\"allowOut\":[\"db.corp.example\"]}", true, false,
     "10.0.0.5", 443, "db.corp.example", false, EGRESS_ALLOW},
    {"allowOut wildcard does not open a private address", "{\"allowOut\":[\"*.corp.example\"]}",
     true, false, "10.0.0.5", 443, "db.corp.example", false, EGRESS_DENY_PRIVATE},
    {"allowOut IP opens only itself", "{\"allowOut\":[\"10.0.0.5\"]}", true, false, "10.0.0.6", 80,
     NULL, false, EGRESS_DENY_PRIVATE},
    /* allowOut: everything else is a deny */
    {"allowOut IP", "{\"allowOut\":[\"" PUB "\"]}", true, false, PUB, 443, NULL, false,
     EGRESS_ALLOW},
    {"allowOut IP, another", "{\"allowOut\":[\"" PUB "\"]}", true, false, "1.1.1.1", 443, NULL,
     false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut CIDR", "{\"allowOut\":[\"93.184.0.0/16\"]}", true, false, PUB, 8080, NULL, false,
     EGRESS_ALLOW},
    {"allowOut v6 CIDR", "{\"allowOut\":[\"2606:2800::/32\"]}", true, false, PUB6, 443, NULL, false,
     EGRESS_ALLOW},
    {"allowOut v6 IP vs v4", "{\"allowOut\":[\"2606:2800::/32\"]}", true, false, PUB, 443, NULL,
     false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut host on 443 via SNI", "{\"allowOut\":[\"api.openai.com\"]}", true, false, PUB, 443,
     "api.openai.com", false, EGRESS_ALLOW},
    {"allowOut host on 80 via Host", "{\"allowOut\":[\"API.OpenAI.com.\"]}", true, false, PUB, 80,
     "api.openai.com", false, EGRESS_ALLOW},
    {"allowOut host, other name", "{\"allowOut\":[\"api.openai.com\"]}", true, false, PUB, 443,
     "evil.example", false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut host, no name (no SNI)", "{\"allowOut\":[\"api.openai.com\"]}", true, false, PUB,
     443, NULL, false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut host, unverified name", "{\"allowOut\":[\"api.openai.com\"]}", true, false, PUB, 443,
     "api.openai.com", true, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut host, other port is CIDR-only", "{\"allowOut\":[\"api.openai.com\"]}", true, false,
     PUB, 8443, "api.openai.com", false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut wildcard, sub-domain", "{\"allowOut\":[\"*.github.com\"]}", true, false, PUB, 443,
     "api.github.com", false, EGRESS_ALLOW},
    {"allowOut wildcard, deeper sub-domain", "{\"allowOut\":[\"*.github.com\"]}", true, false, PUB,
     443, "a.b.github.com", false, EGRESS_ALLOW},
    {"allowOut wildcard, not the apex", "{\"allowOut\":[\"*.github.com\"]}", true, false, PUB, 443,
     "github.com", false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut wildcard, look-alike", "{\"allowOut\":[\"*.github.com\"]}", true, false, PUB, 443,
     "evilgithub.com", false, EGRESS_DENY_NOT_ALLOWED},
    {"allowOut mixed list", "{\"allowOut\":[\"1.1.1.1\",\"*.github.com\",\"pypi.org\"]}", true,
     false, PUB, 443, "pypi.org", false, EGRESS_ALLOW},
    /* denyOut subtracts */
    {"denyOut IP with no allowOut", "{\"denyOut\":[\"" PUB "\"]}", true, false, PUB, 443, NULL,
     false, EGRESS_DENY_DENY_OUT},
    {"denyOut IP, another passes", "{\"denyOut\":[\"" PUB "\"]}", true, false, "1.1.1.1", 443, NULL,
     false, EGRESS_ALLOW},
    {"denyOut CIDR inside allowOut CIDR",
     "{\"allowOut\":[\"93.184.0.0/16\"],\"denyOut\":[\"93.184.215.0/24\"]}", true, false, PUB, 443,
     NULL, false, EGRESS_DENY_DENY_OUT},
    {"denyOut CIDR, rest of allowOut",
     "{\"allowOut\":[\"93.184.0.0/16\"],\"denyOut\":[\"93.184.215.0/24\"]}", true, false,
     "93.184.1.1", 443, NULL, false, EGRESS_ALLOW},
    {"denyOut host under allowOut wildcard",
     "{\"allowOut\":[\"*.github.com\"],\"denyOut\":[\"gist.github.com\"]}", true, false, PUB, 443,
     "gist.github.com", false, EGRESS_DENY_DENY_OUT},
    {"denyOut wildcard", "{\"denyOut\":[\"*.evil.example\"]}", true, false, PUB, 80,
     "x.evil.example", false, EGRESS_DENY_DENY_OUT},
    {"denyOut beats an opened private address",
     "{\"allowOut\":[\"10.0.0.0/8\"],\"denyOut\":[\"10.0.0.1\"]}", true, false, "10.0.0.1", 80,
     NULL, false, EGRESS_DENY_DENY_OUT},
    /* allowOut [] is no filtering; ["*"] is the public internet only */
    {"allowOut [] public", "{\"allowOut\":[]}", true, false, PUB, 22, NULL, false, EGRESS_ALLOW},
    {"allowOut [] private", "{\"allowOut\":[]}", true, false, "10.0.0.1", 22, NULL, false,
     EGRESS_DENY_PRIVATE},
    {"allowOut * public", "{\"allowOut\":[\"*\"]}", true, false, PUB, 22, NULL, false,
     EGRESS_ALLOW},
    {"allowOut * private", "{\"allowOut\":[\"*\"]}", true, false, "192.168.1.1", 80, NULL, false,
     EGRESS_DENY_PRIVATE},
    {"allowOut * metadata", "{\"allowOut\":[\"*\"]}", true, true, "169.254.169.254", 80, NULL,
     false, EGRESS_DENY_METADATA},
    {"allowOut * with denyOut", "{\"allowOut\":[\"*\"],\"denyOut\":[\"1.1.1.0/24\"]}", true, false,
     "1.1.1.1", 53, NULL, false, EGRESS_DENY_DENY_OUT},
};

static const char *self_text[] = {SELF, "10.1.2.3", "2001:db8::7"};

static void test_rows(void **state)
{
    struct egress_addr self[AB_ARRAY_LEN(self_text)];
    int failures = 0;

    for (size_t i = 0; i < AB_ARRAY_LEN(self_text); i++)
        assert_int_equal(egress_addr_parse(self_text[i], &self[i]), 0);
    for (size_t i = 0; i < AB_ARRAY_LEN(rows); i++) {
        const struct row *r = &rows[i];
        json_t *net = NULL;
        struct egress_policy *p = NULL;
        struct egress_opts o = {.internet = r->internet, .allow_private = r->allow_private};
        struct egress_dest d = {.port = r->port, .name = r->sni, .name_verified = !r->unverified};
        char err[512] = "";

        if (r->network) {
            net = json_loads(r->network, JSON_DECODE_ANY, NULL);
            assert_non_null(net);
        }
        assert_int_equal(egress_addr_parse(r->addr, &d.addr), 0);
        int rc = egress_policy_parse(net, &o, &p, err, sizeof(err));
        if (rc != 0) {
            fprintf(stderr, "row \"%s\": parse failed: %s\n", r->name, err);
            failures++;
        } else {
            enum egress_reason got = egress_decide(p, &d, self, AB_ARRAY_LEN(self));
            if (got != r->want) {
                fprintf(stderr, "row \"%s\": got %s, want %s\n", r->name, egress_reason_label(got),
                        egress_reason_label(r->want));
                failures++;
            }
        }
        egress_policy_free(p);
        json_decref(net);
    }
    assert_int_equal(failures, 0);
}

static void test_null_policy_is_internet_off(void **state)
{
    struct egress_dest d = {.port = 443};
    assert_int_equal(egress_addr_parse(PUB, &d.addr), 0);
    assert_int_equal(egress_decide(NULL, &d, NULL, 0), EGRESS_DENY_INTERNET_OFF);
}

static void test_labels(void **state)
{
    /* every reason has a distinct, metric-safe label */
    for (int i = 0; i < EGRESS_REASON_COUNT; i++) {
        const char *l = egress_reason_label((enum egress_reason)i);
        assert_non_null(l);
        assert_true(strlen(l) > 0);
        assert_int_equal(strspn(l, "abcdefghijklmnopqrstuvwxyz_"), strlen(l));
        for (int k = 0; k < i; k++)
            assert_string_not_equal(l, egress_reason_label((enum egress_reason)k));
    }
    assert_string_equal(egress_reason_label(EGRESS_DENY_METADATA), "metadata");
    assert_string_equal(egress_reason_label(EGRESS_REASON_COUNT), "unknown");
}

static void test_cidr_parse(void **state)
{
    struct egress_cidr c;
    struct egress_addr a;
    assert_int_equal(egress_cidr_parse("10.1.2.3/8", &c), 0);
    assert_int_equal(c.bits, 8);
    assert_int_equal(c.net.a[1], 0); /* host bits cleared */
    assert_int_equal(egress_cidr_parse("2001:db8::/33", &c), 0);
    assert_int_equal(egress_addr_parse("2001:db8:7fff::1", &a), 0);
    assert_true(egress_cidr_contains(&c, &a));
    assert_int_equal(egress_addr_parse("2001:db8:8000::1", &a), 0);
    assert_false(egress_cidr_contains(&c, &a));
    assert_int_equal(egress_cidr_parse("0.0.0.0/0", &c), 0);
    assert_int_equal(egress_addr_parse("8.8.8.8", &a), 0);
    assert_true(egress_cidr_contains(&c, &a));
    const char *bad[] = {"10.0.0.0/33", "::/129", "10.0.0.0/", "10.0.0.0/08", "/8", "10.0.0/8",
                         "1.2.3.4/-1",  "x::y",   "",          "10.0.0.0/8/8"};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
        assert_int_not_equal(egress_cidr_parse(bad[i], &c), 0);
}

struct refusal {
    const char *network;
    bool internet, allow_private;
    const char *msg; /* a substring the 400 message must hold */
};

static char big_list[EGRESS_LIST_MAX * 12 + 64];
static char big_rules[EGRESS_RULE_HOSTS_MAX * 96 + 64];

static const struct refusal refusals[] = {
    {"[]", true, false, "network must be an object"},
    {"{\"allowOut\":\"1.1.1.1\"}", true, false, "network.allowOut must be an array"},
    {"{\"allowOut\":[1]}", true, false, "network.allowOut[0] must be a string"},
    {"{\"allowOut\":[\"ok.example\",\"bad host\"]}", true, false,
     "network.allowOut[1] \"bad host\" is not a host name"},
    {"{\"allowOut\":[\"*.com\"]}", true, false, "network.allowOut[0]"},
    {"{\"allowOut\":[\"a.*.example\"]}", true, false, "network.allowOut[0]"},
    {"{\"allowOut\":[\"10.0.0.0/40\"]}", true, false, "network.allowOut[0]"},
    {"{\"denyOut\":[\"*\"]}", true, false, "network.denyOut[0] is \"*\""},
    {"{\"denyOut\":{}}", true, false, "network.denyOut must be an array"},
    {NULL /* big_list */, true, false, "network.allowOut has 257 entries; at most 256"},
    {"{\"rules\":\"x\"}", true, false, "network.rules must be an object"},
    {"{\"rules\":{\"*.openai.com\":[]}}", true, false,
     "network.rules host \"*.openai.com\" is a wildcard"},
    {"{\"rules\":{\"api.openai.com\":{}}}", true, false,
     "network.rules[\"api.openai.com\"] must be a list"},
    {"{\"rules\":{\"api.openai.com\":[{\"transform\":{\"headers\":{\"Authorization\":\"Bearer "
     "sk-live-123\"}}}]}}",
     true, false, "header \"Authorization\" is a literal value"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"{{ secrets.K }}\"}}}]}}",
     true, false, "old {{ }} syntax"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"${e2b.identity.t}\"}}}]}}",
     true, false, "${e2b.identity...} is not supported"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"${env.HOME}\"}}}]}}", true,
     false, "reference other than ${e2b.secrets.<name>}"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"${e2b.secrets.}\"}}}]}}",
     true, false, "malformed secret reference"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"${e2b.secrets.K\"}}}]}}",
     true, false, "malformed secret reference"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":7}}}]}}", true, false,
     "header \"X\" must be a string"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"Bad Name\":\"${e2b.secrets.K}\"}}}"
     "]}}",
     true, false, "invalid header name \"Bad Name\""},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":[]}}]}}", true, false,
     "network.rules[\"a.example\"][0].transform.headers must be an object"},
    {"{\"rules\":{\"a.example\":[7]}}", true, false, "network.rules[\"a.example\"][0] must be an"},
    {"{\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":\"${e2b.secrets.K}\"}}}]}}",
     false, false, "allow_internet_access=false"},
    {"{\"allowOut\":[\"b.example\"],\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":"
     "\"${e2b.secrets.K}\"}}}]}}",
     true, false, "network.rules host \"a.example\" is not allowed"},
    {"{\"denyOut\":[\"*.example\"],\"rules\":{\"a.example\":[{\"transform\":{\"headers\":{\"X\":"
     "\"${e2b.secrets.K}\"}}}]}}",
     true, false, "network.rules host \"a.example\" is not allowed"},
    {"{\"rules\":{\"A.example\":[],\"a.example\":[]}}", true, false, "twice"},
    {"{\"rules\":[[\"a.example\"]]}", true, false, "network.rules[0] must be a [host, [rules]]"},
    {NULL /* big_rules */, true, false, "network.rules names 65 hosts; at most 64"},
    {"{\"egressProxy\":7}", true, false, "network.egressProxy must be an object"},
    {"{\"egressProxy\":{}}", true, false, "network.egressProxy.address is required"},
    {"{\"egressProxy\":{\"address\":\"proxy.example\"}}", true, false,
     "network.egressProxy.address \"proxy.example\" must be host:port"},
    {"{\"egressProxy\":{\"address\":\"proxy.example:70000\"}}", true, false, "port of 1-65535"},
    {"{\"egressProxy\":{\"address\":\"127.0.0.1:1080\"}}", true, true,
     "network.egressProxy.address 127.0.0.1 is a loopback address"},
    {"{\"egressProxy\":{\"address\":\"[fd00:ec2::254]:1080\"}}", true, true,
     "is a metadata address"},
    {"{\"egressProxy\":{\"address\":\"10.0.0.1:1080\"}}", true, false, "is a private address"},
    {"{\"egressProxy\":{\"address\":\"p.example:1080\",\"password\":\"x\"}}", true, false,
     "network.egressProxy.password needs a username"},
    {"{\"egressProxy\":{\"address\":\"p.example:1080\",\"username\":7}}", true, false,
     "network.egressProxy.username must be a string"},
};

static void fill_big(void)
{
    size_t n = 0;
    n += (size_t)snprintf(big_list + n, sizeof(big_list) - n, "{\"allowOut\":[");
    for (int i = 0; i <= EGRESS_LIST_MAX; i++)
        n += (size_t)snprintf(big_list + n, sizeof(big_list) - n, "%s\"1.1.%d.%d\"", i ? "," : "",
                              i / 256, i % 256);
    snprintf(big_list + n, sizeof(big_list) - n, "]}");
    n = (size_t)snprintf(big_rules, sizeof(big_rules), "{\"rules\":{");
    for (int i = 0; i <= EGRESS_RULE_HOSTS_MAX; i++)
        n += (size_t)snprintf(big_rules + n, sizeof(big_rules) - n, "%s\"h%d.example\":[]",
                              i ? "," : "", i);
    snprintf(big_rules + n, sizeof(big_rules) - n, "}}");
}

static void test_refusals(void **state)
{
    int failures = 0;
    fill_big();
    for (size_t i = 0; i < AB_ARRAY_LEN(refusals); i++) {
        const struct refusal *r = &refusals[i];
        const char *text = r->network;
        if (!text)
            text = strstr(r->msg, "allowOut") ? big_list : big_rules;
        json_t *net = json_loads(text, JSON_DECODE_ANY, NULL);
        struct egress_policy *p = (struct egress_policy *)1;
        struct egress_opts o = {.internet = r->internet, .allow_private = r->allow_private};
        char err[512] = "";
        assert_non_null(net);
        int rc = egress_policy_parse(net, &o, &p, err, sizeof(err));
        if (rc != AB_EINVAL || p != NULL || !strstr(err, r->msg)) {
            fprintf(stderr, "refusal %zu (%.60s): rc %d, err \"%s\", want \"%s\"\n", i, text, rc,
                    err, r->msg);
            failures++;
        }
        if (rc == 0)
            egress_policy_free(p);
        json_decref(net);
    }
    assert_int_equal(failures, 0);
}

static struct egress_policy *parse_ok(const char *text, bool internet)
{
    json_t *net = json_loads(text, 0, NULL);
    struct egress_policy *p = NULL;
    struct egress_opts o = {.internet = internet};
    char err[512] = "";
    assert_non_null(net);
    int rc = egress_policy_parse(net, &o, &p, err, sizeof(err));
    if (rc)
        fprintf(stderr, "parse: %s\n", err);
    assert_int_equal(rc, 0);
    json_decref(net);
    return p;
}

static void test_rules_and_secrets(void **state)
{
    struct egress_policy *p = parse_ok(
        "{\"allowOut\":[\"*.openai.com\",\"api.anthropic.com\"],"
        "\"rules\":{\"api.openai.com\":[{\"transform\":{\"headers\":{\"Authorization\":"
        "\"Bearer ${e2b.secrets.OPENAI}\"}}},{\"transform\":{\"headers\":{\"authorization\":"
        "\"Bearer ${e2b.secrets.OPENAI_2}\",\"X-Org\":\"${e2b.secrets.ORG}\"}}}],"
        "\"API.anthropic.com\":[{\"transform\":{\"headers\":{\"x-api-key\":"
        "\"${e2b.secrets.OPENAI}${e2b.secrets.ANTH}\"}}}]}}",
        true);
    assert_int_equal(p->n_rules, 2);
    const struct egress_rule *r = egress_policy_rule_for(p, "api.openai.com");
    assert_non_null(r);
    assert_int_equal(r->n_headers, 2); /* the later Authorization replaced the earlier */
    assert_string_equal(r->headers[0].name, "authorization");
    assert_string_equal(r->headers[0].value, "Bearer ${e2b.secrets.OPENAI_2}");
    assert_non_null(egress_policy_rule_for(p, "api.anthropic.com")); /* normalised */
    assert_null(egress_policy_rule_for(p, "openai.com"));
    char names[8][EGRESS_SECRET_NAME_MAX + 1];
    size_t n = egress_policy_secret_names(p, names, 8);
    assert_int_equal(n, 4);
    /* rules are sorted by host: anthropic first */
    assert_string_equal(names[0], "OPENAI");
    assert_string_equal(names[1], "ANTH");
    assert_string_equal(names[2], "OPENAI_2");
    assert_string_equal(names[3], "ORG");
    assert_int_equal(egress_policy_secret_names(p, names, 1), 4);
    egress_policy_free(p);

    /* a JS Map sent as [host, rules] pairs means the same */
    p = parse_ok("{\"rules\":[[\"a.example\",[{\"transform\":{\"headers\":{\"X\":"
                 "\"${e2b.secrets.K}\"}}}]]]}",
                 true);
    assert_non_null(egress_policy_rule_for(p, "a.example"));
    assert_false(p->filtering);
    egress_policy_free(p);
}

static void test_proxy(void **state)
{
    struct egress_policy *p =
        parse_ok("{\"egressProxy\":{\"address\":\"socks.example:1080\",\"username\":\"u\","
                 "\"password\":\"pw\"}}",
                 true);
    assert_true(p->has_proxy);
    assert_string_equal(p->proxy.host, "socks.example");
    assert_int_equal(p->proxy.port, 1080);
    assert_string_equal(p->proxy.username, "u");
    assert_string_equal(p->proxy.password, "pw");
    egress_policy_free(p);
    p = parse_ok("{\"egressProxy\":\"[2606:2800::1]:9050\"}", true);
    assert_string_equal(p->proxy.host, "2606:2800::1");
    assert_int_equal(p->proxy.port, 9050);
    assert_string_equal(p->proxy.username, "");
    egress_policy_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows),     cmocka_unit_test(test_null_policy_is_internet_off),
        cmocka_unit_test(test_labels),   cmocka_unit_test(test_cidr_parse),
        cmocka_unit_test(test_refusals), cmocka_unit_test(test_rules_and_secrets),
        cmocka_unit_test(test_proxy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
