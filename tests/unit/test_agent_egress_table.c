/* The slot table the gateway asks "which sandbox is this peer?"
 * (agent/egress/table.c) and the resolver parsing of wiring.c: only a
 * sandbox end of a set slot maps to a sandbox; an update keeps the key (the
 * connection count), a reused slot never does; policies are owned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/egress/table.h"
#include "agent/egress/wiring.h"
#include "agentbox/common.h"

static struct egress_netns_config cfg(void)
{
    struct egress_netns_config c = {.name = "t", .tcp_port = 1, .dns_port = 2};
    assert_int_equal(egress_cidr_parse("10.200.0.0/24", &c.range), 0);
    return c;
}

static struct egress_addr addr(const char *s)
{
    struct egress_addr a;
    assert_int_equal(egress_addr_parse(s, &a), 0);
    return a;
}

static struct egress_policy *policy(bool internet)
{
    struct egress_policy *p = NULL;
    const struct egress_opts o = {.internet = internet};
    char err[256];
    assert_int_equal(egress_policy_parse(NULL, &o, &p, err, sizeof(err)), 0);
    return p;
}

static void test_peer_to_slot(void **state)
{
    (void)state;
    struct egress_netns_config c = cfg();
    struct egress_table *t = egress_table_new(&c);
    struct egress_sandbox_ref ref;
    struct egress_addr a;
    assert_non_null(t);
    /* nothing set: every address is nobody's */
    a = addr("10.200.0.6");
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), -1);
    struct egress_policy *p = policy(true);
    assert_int_equal(egress_table_set(t, 1, "sbx-1", p), 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), 0); /* slot 1's sandbox end: .6 */
    assert_ptr_equal(ref.policy, p);
    assert_string_equal(egress_table_id_of(t, ref.key), "sbx-1");
    /* the gateway end, the network and broadcast of the /30, another range, IPv6: nobody */
    static const char *const nobody[] = {"10.200.0.5", "10.200.0.4",     "10.200.0.7",
                                         "10.201.0.6", "10.199.255.254", "::ffff:10.200.0.6"};
    for (size_t i = 0; i < AB_ARRAY_LEN(nobody); i++) {
        a = addr(nobody[i]);
        assert_int_equal(egress_table_sandbox_of(t, &a, &ref), -1);
    }
    /* beyond the range's 64 slots */
    assert_int_equal(egress_table_set(t, 64, "x", policy(true)), AB_ELIMIT);
    egress_table_free(t);
}

static void test_update_keeps_key_reuse_does_not(void **state)
{
    (void)state;
    struct egress_netns_config c = cfg();
    struct egress_table *t = egress_table_new(&c);
    struct egress_sandbox_ref ref;
    struct egress_addr a = addr("10.200.0.2");
    assert_int_equal(egress_table_set(t, 0, "a", policy(true)), 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), 0);
    uint64_t k1 = ref.key;
    assert_true(ref.policy->internet);
    /* a live update (PUT network): same key, new policy, the old one freed (ASan) */
    assert_int_equal(egress_table_set(t, 0, "a", policy(false)), 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), 0);
    assert_true(ref.key == k1);
    assert_false(ref.policy->internet);
    /* internet off may also be no policy at all: still this sandbox */
    assert_int_equal(egress_table_set(t, 0, "a", NULL), 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), 0);
    assert_null(ref.policy);
    /* gone, then a new sandbox in the same slot: a new key */
    egress_table_clear(t, 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), -1);
    assert_null(egress_table_id_of(t, k1));
    assert_int_equal(egress_table_set(t, 0, "b", policy(true)), 0);
    assert_int_equal(egress_table_sandbox_of(t, &a, &ref), 0);
    assert_true(ref.key != k1);
    assert_string_equal(egress_table_id_of(t, ref.key), "b");
    egress_table_free(t); /* frees b's policy */
}

static void test_resolver_parse(void **state)
{
    (void)state;
    struct egress_addr a;
    uint16_t port;
    assert_int_equal(egress_resolver_parse("10.0.0.53", &a, &port), 0);
    assert_int_equal(port, 53);
    assert_int_equal(egress_resolver_parse("198.18.0.2:5353", &a, &port), 0);
    assert_int_equal(port, 5353);
    assert_int_equal(egress_resolver_parse("[fd00::53]:54", &a, &port), 0);
    assert_int_equal(a.family, AF_INET6);
    assert_int_equal(port, 54);
    assert_int_equal(egress_resolver_parse("2001:db8::1", &a, &port), 0);
    assert_int_equal(port, 53);
    static const char *const bad[] = {"",          "dns.example", "1.2.3.4:0", "1.2.3.4:65536",
                                      "1.2.3.4:x", "[::1",        "[::1]x"};
    for (size_t i = 0; i < AB_ARRAY_LEN(bad); i++)
        assert_int_equal(egress_resolver_parse(bad[i], &a, &port), AB_EINVAL);
    char path[] = "/tmp/abx-resolv-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char text[] = "# comment\nsearch example\nnameserver fe80::1%eth0\nnameserver 9.9.9.9\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    assert_int_equal(egress_resolver_from_file(path, &a), 0); /* the first one, zone dropped */
    assert_int_equal(a.family, AF_INET6);
    unlink(path);
    assert_int_equal(egress_resolver_from_file(path, &a), AB_ENOENT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peer_to_slot),
        cmocka_unit_test(test_update_keeps_key_reuse_does_not),
        cmocka_unit_test(test_resolver_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
