/* The SOCKS5 client handshake (agent/egress/socks5.c): the exact bytes of
 * RFC 1928 / RFC 1929 for no-auth and username/password, IPv4, IPv6 and name
 * destinations, replies fed whole and byte by byte with the destination's
 * first bytes handed back, and every way a proxy can fail: not SOCKS5 (an
 * HTTP server, SOCKS4), no acceptable method, a refused login, each CONNECT
 * error code, malformed replies. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <sys/socket.h>

#include "agent/egress/socks5.h"
#include "agentbox/common.h"

static size_t take_all(struct egress_socks5 *s, uint8_t *out, size_t cap)
{
    size_t n = egress_socks5_take(s, out, cap);
    assert_int_equal(egress_socks5_pending(s), 0);
    return n;
}

static struct egress_addr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
    struct egress_addr x = {.family = AF_INET, .a = {a, b, c, d}};
    return x;
}

static void test_noauth_v4(void **state)
{
    (void)state;
    struct egress_addr a = v4(203, 0, 113, 7);
    struct egress_socks5_deps d = {.addr = &a, .port = 443};
    struct egress_socks5 *s = egress_socks5_new(&d);
    assert_non_null(s);
    uint8_t out[600];
    size_t used;
    assert_int_equal(take_all(s, out, sizeof(out)), 3);
    assert_memory_equal(out, "\x05\x01\x00", 3);
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x05\x00", 2, &used),
                     EGRESS_SOCKS5_MORE);
    assert_int_equal(used, 2);
    assert_int_equal(take_all(s, out, sizeof(out)), 10);
    assert_memory_equal(out, "\x05\x01\x00\x01\xcb\x00\x71\x07\x01\xbb", 10);
    const uint8_t reply[] = "\x05\x00\x00\x01\x0a\x00\x00\x01\x12\x34HTTP/1.1 200";
    assert_int_equal(egress_socks5_feed(s, reply, sizeof(reply) - 1, &used), EGRESS_SOCKS5_DONE);
    assert_int_equal(used, 10); /* the rest is the destination's */
    assert_null(egress_socks5_error(s));
    egress_socks5_free(s);
}

static void test_userpass_v6_bytewise(void **state)
{
    (void)state;
    struct egress_addr a = {.family = AF_INET6, .a = {0x20, 0x01, 0x0d, 0xb8, [15] = 1}};
    struct egress_socks5_deps d = {.addr = &a, .port = 80, .username = "u1", .password = "p@ss"};
    struct egress_socks5 *s = egress_socks5_new(&d);
    uint8_t out[600];
    size_t used;
    assert_int_equal(take_all(s, out, sizeof(out)), 4);
    assert_memory_equal(out, "\x05\x02\x00\x02", 4);
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x05\x02", 2, &used),
                     EGRESS_SOCKS5_MORE);
    assert_int_equal(take_all(s, out, sizeof(out)), 9);
    assert_memory_equal(out, "\x01\x02u1\x04p@ss", 9);
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x01", 1, &used), EGRESS_SOCKS5_MORE);
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x00", 1, &used), EGRESS_SOCKS5_MORE);
    assert_int_equal(take_all(s, out, sizeof(out)), 22);
    assert_memory_equal(out, "\x05\x01\x00\x04\x20\x01\x0d\xb8", 8);
    assert_memory_equal(out + 20, "\x00\x50", 2);
    /* A reply with a bound name, one byte at a time. */
    const uint8_t reply[] = "\x05\x00\x00\x03\x04prox\x00\x50";
    for (size_t i = 0; i + 1 < sizeof(reply) - 1; i++)
        assert_int_equal(egress_socks5_feed(s, reply + i, 1, &used), EGRESS_SOCKS5_MORE);
    assert_int_equal(egress_socks5_feed(s, reply + sizeof(reply) - 2, 1, &used),
                     EGRESS_SOCKS5_DONE);
    assert_int_equal(used, 1);
    egress_socks5_free(s);
}

static void test_name_destination_and_noauth_pick(void **state)
{
    (void)state;
    struct egress_socks5_deps d = {
        .host = "api.example.com", .port = 443, .username = "u", .password = "p"};
    struct egress_socks5 *s = egress_socks5_new(&d);
    uint8_t out[600];
    size_t used;
    take_all(s, out, sizeof(out));
    /* The proxy needs no login even though we offered one. */
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x05\x00", 2, &used),
                     EGRESS_SOCKS5_MORE);
    size_t n = take_all(s, out, sizeof(out));
    assert_int_equal(n, 5 + 15 + 2);
    assert_memory_equal(out,
                        "\x05\x01\x00\x03\x0f"
                        "api.example.com\x01\xbb",
                        n);
    egress_socks5_free(s);
}

/* Runs a handshake whose proxy answers with the given messages in turn; the
 * last must fail with f and an error containing why. */
static void refused(const struct egress_socks5_deps *d, const char *const *answers,
                    const size_t *lens, size_t n, enum egress_socks5_fail f, const char *why)
{
    struct egress_socks5 *s = egress_socks5_new(d);
    assert_non_null(s);
    uint8_t out[600];
    size_t used;
    enum egress_socks5_res r = EGRESS_SOCKS5_MORE;
    for (size_t i = 0; i < n; i++) {
        take_all(s, out, sizeof(out));
        r = egress_socks5_feed(s, (const uint8_t *)answers[i], lens[i], &used);
        if (i + 1 < n)
            assert_int_equal(r, EGRESS_SOCKS5_MORE);
    }
    assert_int_equal(r, EGRESS_SOCKS5_FAIL);
    assert_int_equal(egress_socks5_failure(s), f);
    assert_non_null(egress_socks5_error(s));
    if (!strstr(egress_socks5_error(s), why))
        fail_msg("error \"%s\" does not say \"%s\"", egress_socks5_error(s), why);
    /* Failed stays failed. */
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x05\x00", 2, &used),
                     EGRESS_SOCKS5_FAIL);
    egress_socks5_free(s);
}

static void test_failures(void **state)
{
    (void)state;
    struct egress_addr a = v4(203, 0, 113, 7);
    struct egress_socks5_deps d = {.addr = &a, .port = 443};
    struct egress_socks5_deps du = {.addr = &a, .port = 443, .username = "u", .password = "bad"};
    const char *http[] = {"HTTP/1.1 400 Bad Request\r\n\r\n"};
    size_t http_l[] = {strlen(http[0])};
    refused(&d, http, http_l, 1, EGRESS_SOCKS5_NOT_SOCKS5, "does not speak SOCKS5");
    const char *s4[] = {"\x00\x5a"};
    size_t s4_l[] = {2};
    refused(&d, s4, s4_l, 1, EGRESS_SOCKS5_NOT_SOCKS5, "SOCKS5");
    const char *none[] = {"\x05\xff"};
    size_t two[] = {2, 2}, ten[] = {2, 10};
    refused(&d, none, two, 1, EGRESS_SOCKS5_AUTH, "none of our methods");
    /* userpass chosen though we offered none */
    const char *up[] = {"\x05\x02"};
    refused(&d, up, two, 1, EGRESS_SOCKS5_AUTH, "none of our methods");
    const char *login[] = {"\x05\x02", "\x01\x01"};
    refused(&du, login, two, 2, EGRESS_SOCKS5_AUTH, "refused the username/password");
    const char *login_ver[] = {"\x05\x02", "\x05\x00"};
    refused(&du, login_ver, two, 2, EGRESS_SOCKS5_NOT_SOCKS5, "RFC 1929");
    const char *conn_refused[] = {"\x05\x00", "\x05\x05\x00\x01\x00\x00\x00\x00\x00\x00"};
    refused(&d, conn_refused, ten, 2, EGRESS_SOCKS5_REFUSED, "connection refused");
    const char *ruleset[] = {"\x05\x00", "\x05\x02\x00\x01\x00\x00\x00\x00\x00\x00"};
    refused(&d, ruleset, ten, 2, EGRESS_SOCKS5_REFUSED, "not allowed by ruleset");
    const char *odd[] = {"\x05\x00", "\x05\x7f\x00\x01\x00\x00\x00\x00\x00\x00"};
    refused(&d, odd, ten, 2, EGRESS_SOCKS5_REFUSED, "unknown reply code");
    const char *ver[] = {"\x05\x00", "\x04\x00\x00\x01\x00\x00\x00\x00\x00\x00"};
    refused(&d, ver, ten, 2, EGRESS_SOCKS5_NOT_SOCKS5, "not SOCKS5");
    const char *rsv[] = {"\x05\x00", "\x05\x00\x01\x01\x00\x00\x00\x00\x00\x00"};
    refused(&d, rsv, ten, 2, EGRESS_SOCKS5_NOT_SOCKS5, "reserved");
    const char *atyp[] = {"\x05\x00", "\x05\x00\x00\x09\x00\x00\x00\x00\x00\x00"};
    refused(&d, atyp, ten, 2, EGRESS_SOCKS5_NOT_SOCKS5, "address type");
    const char *empty[] = {"\x05\x00", "\x05\x00\x00\x03\x00\x00\x00"};
    size_t el[] = {2, 7};
    refused(&d, empty, el, 2, EGRESS_SOCKS5_NOT_SOCKS5, "empty bound name");
    assert_string_equal(egress_socks5_fail_label(EGRESS_SOCKS5_REFUSED), "proxy_refused");
}

static void test_answer_before_asked(void **state)
{
    (void)state;
    struct egress_addr a = v4(203, 0, 113, 7);
    struct egress_socks5_deps d = {.addr = &a, .port = 443};
    struct egress_socks5 *s = egress_socks5_new(&d);
    size_t used;
    /* The greeting was never taken (written), yet the "proxy" answers. */
    assert_int_equal(egress_socks5_feed(s, (const uint8_t *)"\x05\x00", 2, &used),
                     EGRESS_SOCKS5_FAIL);
    egress_socks5_free(s);
}

static void test_bad_deps(void **state)
{
    (void)state;
    char longs[300];
    memset(longs, 'x', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    struct egress_addr a = v4(203, 0, 113, 7);
    struct egress_socks5_deps d = {.addr = &a, .port = 443, .username = longs, .password = "p"};
    assert_null(egress_socks5_new(&d));
    d.username = "u", d.password = longs;
    assert_null(egress_socks5_new(&d));
    struct egress_socks5_deps none = {.port = 443};
    assert_null(egress_socks5_new(&none));
    none.host = longs;
    assert_null(egress_socks5_new(&none));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_noauth_v4),
        cmocka_unit_test(test_userpass_v6_bytewise),
        cmocka_unit_test(test_name_destination_and_noauth_pick),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_answer_before_asked),
        cmocka_unit_test(test_bad_deps),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
