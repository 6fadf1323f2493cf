/* Name sniffing (agent/egress/sniff.c): a real ClientHello byte by byte and
 * split across records, hand-built hellos that lie in their length fields or
 * carry two server_name extensions, and HTTP request heads, each with what a
 * prefix of it must give (more / found / not this protocol). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/egress/sniff.h"
#include "agentbox/common.h"

/* openssl s_client -servername API.Example.COM (OpenSSL 3, TLS 1.3) */
static const uint8_t real_hello[] = {
    0x16, 0x03, 0x01, 0x01, 0x3c, 0x01, 0x00, 0x01, 0x38, 0x03, 0x03, 0xa7, 0xa6, 0x3a, 0x64, 0xee,
    0x2a, 0x94, 0x6f, 0x18, 0x7d, 0xb6, 0xc6, 0x45, 0xa0, 0x69, 0x28, 0x84, 0x67, 0x39, 0x55, 0x9c,
    0x8a, 0xf1, 0xf0, 0xc3, 0x57, 0xdf, 0x1b, 0xed, 0xf7, 0xef, 0xa5, 0x20, 0x9e, 0x30, 0xec, 0xa6,
    0x4b, 0x8a, 0x01, 0x21, 0xa3, 0xa5, 0x31, 0xcb, 0x92, 0xdc, 0x0f, 0x36, 0x51, 0xd4, 0x8e, 0x06,
    0xff, 0x9d, 0x3f, 0xfb, 0x76, 0xe1, 0x9b, 0x8d, 0x90, 0xf5, 0x88, 0x4f, 0x00, 0x3e, 0x13, 0x02,
    0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
    0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27,
    0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d,
    0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0xb1,
    0x00, 0x00, 0x00, 0x14, 0x00, 0x12, 0x00, 0x00, 0x0f, 0x41, 0x50, 0x49, 0x2e, 0x45, 0x78, 0x61,
    0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x43, 0x4f, 0x4d, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02,
    0x00, 0x0a, 0x00, 0x16, 0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18,
    0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16,
    0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03,
    0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05,
    0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02,
    0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03,
    0x01, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00,
    0x20, 0x7a, 0x13, 0xa3, 0x41, 0x3d, 0x58, 0xf3, 0xae, 0x30, 0xcc, 0x8c, 0x63, 0x19, 0x73, 0x49,
    0x7a, 0x97, 0x3f, 0x21, 0xb0, 0x38, 0xbb, 0xda, 0xa0, 0x5d, 0x93, 0xde, 0x1c, 0x87, 0x2e, 0xe6,
    0x2e,
};

/* A ClientHello around the given extensions block (without its length). */
static size_t build_hello(uint8_t *out, size_t cap, const uint8_t *ext, size_t ext_len)
{
    uint8_t body[4096];
    size_t n = 0;
    assert_true(ext_len + 128 < sizeof(body));
    body[n++] = 3, body[n++] = 3;
    memset(body + n, 0xab, 32), n += 32;
    body[n++] = 0;                                                    /* session id */
    body[n++] = 0, body[n++] = 2, body[n++] = 0x13, body[n++] = 0x01; /* one suite */
    body[n++] = 1, body[n++] = 0;                                     /* null compression */
    body[n++] = (uint8_t)(ext_len >> 8), body[n++] = (uint8_t)ext_len;
    memcpy(body + n, ext, ext_len), n += ext_len;
    size_t total = 5 + 4 + n;
    assert_true(total <= cap);
    out[0] = 0x16, out[1] = 3, out[2] = 1;
    out[3] = (uint8_t)((n + 4) >> 8), out[4] = (uint8_t)(n + 4);
    out[5] = 1, out[6] = 0, out[7] = (uint8_t)(n >> 8), out[8] = (uint8_t)n;
    memcpy(out + 9, body, n);
    return total;
}

/* A server_name extension for name. */
static size_t sni_ext(uint8_t *out, const char *name)
{
    size_t nl = strlen(name);
    out[0] = 0, out[1] = 0;
    out[2] = (uint8_t)((nl + 5) >> 8), out[3] = (uint8_t)(nl + 5);
    out[4] = (uint8_t)((nl + 3) >> 8), out[5] = (uint8_t)(nl + 3);
    out[6] = 0;
    out[7] = (uint8_t)(nl >> 8), out[8] = (uint8_t)nl;
    memcpy(out + 9, name, nl);
    return 9 + nl;
}

static void test_real_hello(void **state)
{
    char name[EGRESS_HOST_MAX + 1];
    assert_int_equal(egress_sniff_tls(real_hello, sizeof(real_hello), name), EGRESS_SNIFF_FOUND);
    assert_string_equal(name, "api.example.com");
    /* every shorter prefix asks for more, and says nothing yet */
    for (size_t n = 0; n < sizeof(real_hello); n++) {
        assert_int_equal(egress_sniff_tls(real_hello, n, name), EGRESS_SNIFF_MORE);
        assert_string_equal(name, "");
    }
    /* bytes after the hello (the next flight) change nothing */
    uint8_t more[sizeof(real_hello) + 40];
    memcpy(more, real_hello, sizeof(real_hello));
    memset(more + sizeof(real_hello), 0x17, 40);
    assert_int_equal(egress_sniff_tls(more, sizeof(more), name), EGRESS_SNIFF_FOUND);
    /* not TLS at all */
    assert_int_equal(egress_sniff_tls((const uint8_t *)"GET / HTTP/1.1\r\n", 16, name),
                     EGRESS_SNIFF_NONE);
    assert_int_equal(egress_sniff_tls((const uint8_t *)"\x16\x04", 2, name), EGRESS_SNIFF_NONE);
    assert_int_equal(egress_sniff_tls((const uint8_t *)"\x16", 1, name), EGRESS_SNIFF_MORE);
}

/* The same handshake message cut into records of `frag` bytes each. */
static size_t fragment(const uint8_t *hello, size_t n, size_t frag, uint8_t *out, size_t cap)
{
    const uint8_t *msg = hello + 5;
    size_t mlen = n - 5, o = 0;
    for (size_t off = 0; off < mlen; off += frag) {
        size_t k = AB_MIN(frag, mlen - off);
        assert_true(o + 5 + k <= cap);
        out[o++] = 0x16, out[o++] = 3, out[o++] = 3;
        out[o++] = (uint8_t)(k >> 8), out[o++] = (uint8_t)k;
        memcpy(out + o, msg + off, k), o += k;
    }
    return o;
}

static void test_records_split(void **state)
{
    static uint8_t out[sizeof(real_hello) * 6 + 64];
    char name[EGRESS_HOST_MAX + 1];
    const size_t frags[] = {1, 3, 4, 5, 64, 200};
    for (size_t f = 0; f < AB_ARRAY_LEN(frags); f++) {
        size_t n = fragment(real_hello, sizeof(real_hello), frags[f], out, sizeof(out));
        for (size_t k = 0; k < n; k++)
            assert_int_equal(egress_sniff_tls(out, k, name), EGRESS_SNIFF_MORE);
        assert_int_equal(egress_sniff_tls(out, n, name), EGRESS_SNIFF_FOUND);
        assert_string_equal(name, "api.example.com");
    }
    /* an alert record in the middle of the handshake is not a hello */
    size_t n = fragment(real_hello, sizeof(real_hello), 64, out, sizeof(out));
    out[69] = 0x15;
    assert_int_equal(egress_sniff_tls(out, n, name), EGRESS_SNIFF_NONE);
}

struct tls_case {
    const char *what;
    const char *sni; /* NULL: no server_name extension */
    int twice;       /* two server_name extensions */
    enum egress_sniff want;
    const char *name;
};

static const struct tls_case tls_cases[] = {
    {"plain", "a.example", 0, EGRESS_SNIFF_FOUND, "a.example"},
    {"trailing dot", "a.example.", 0, EGRESS_SNIFF_FOUND, "a.example"},
    {"no sni", NULL, 0, EGRESS_SNIFF_NONE, ""},
    {"ip literal", "10.0.0.1", 0, EGRESS_SNIFF_NONE, ""},
    {"ipv6 literal", "::1", 0, EGRESS_SNIFF_NONE, ""},
    {"nul inside", "a.example\0evil", 0, EGRESS_SNIFF_NONE, ""},
    {"space", "a example", 0, EGRESS_SNIFF_NONE, ""},
    {"two server_name extensions", "a.example", 1, EGRESS_SNIFF_NONE, ""},
};

static void test_tls_cases(void **state)
{
    uint8_t ext[1024], hello[2048];
    char name[EGRESS_HOST_MAX + 1];
    for (size_t i = 0; i < AB_ARRAY_LEN(tls_cases); i++) {
        const struct tls_case *c = &tls_cases[i];
        size_t n = 0;
        /* an unrelated extension first: supported_versions */
        memcpy(ext, "\x00\x2b\x00\x03\x02\x03\x04", 7), n = 7;
        if (c->sni) {
            n += sni_ext(ext + n, c->sni);
            if (strcmp(c->what, "nul inside") == 0) {
                n = 7;
                n += sni_ext(ext + n, "a.example_evil");
                ext[7 + 9 + 9] = '\0';
            }
        }
        if (c->twice)
            n += sni_ext(ext + n, "b.example");
        size_t hn = build_hello(hello, sizeof(hello), ext, n);
        enum egress_sniff got = egress_sniff_tls(hello, hn, name);
        if (got != c->want || strcmp(name, c->name) != 0)
            fail_msg("%s: got %d \"%s\"", c->what, got, name);
    }
}

static void test_tls_lies(void **state)
{
    uint8_t ext[64], hello[256], bad[256];
    char name[EGRESS_HOST_MAX + 1];
    size_t hn = build_hello(hello, sizeof(hello), ext, sni_ext(ext, "a.example"));
    assert_int_equal(egress_sniff_tls(hello, hn, name), EGRESS_SNIFF_FOUND);
    /* every single-byte change in a length field is refused or waits, never overreads
     * (ASan watches); and a flipped byte anywhere never yields a different name */
    for (size_t i = 0; i < hn; i++) {
        for (int delta = 1; delta < 256; delta += 37) {
            memcpy(bad, hello, hn);
            bad[i] = (uint8_t)(bad[i] + delta);
            enum egress_sniff got = egress_sniff_tls(bad, hn, name);
            if (got == EGRESS_SNIFF_FOUND && i < hn - 9)
                assert_string_equal(name, "a.example");
        }
    }
    /* a good server_name followed by a malformed extension: no name at all
     * (found by fuzz_egress_sniff) */
    uint8_t ext2[64];
    size_t en = sni_ext(ext2, "a.example");
    memcpy(ext2 + en, "\x00\x0b\x00\x09\x01", 5); /* claims 9 bytes, has 1 */
    size_t bn = build_hello(bad, sizeof(bad), ext2, en + 5);
    assert_int_equal(egress_sniff_tls(bad, bn, name), EGRESS_SNIFF_NONE);
    assert_string_equal(name, "");
    /* a record that claims more than a record may hold */
    memcpy(bad, hello, hn);
    bad[3] = 0x50, bad[4] = 0x00;
    assert_int_equal(egress_sniff_tls(bad, hn, name), EGRESS_SNIFF_NONE);
    /* a hello longer than the sniff limit cannot be read to the end: NONE */
    static uint8_t huge[EGRESS_SNIFF_MAX + 64];
    memcpy(huge, hello, 9);
    huge[3] = 0x40, huge[4] = 0x00; /* a full 16 KiB record */
    huge[6] = 0x00, huge[7] = 0xff, huge[8] = 0xff;
    assert_int_equal(egress_sniff_tls(huge, 9, name), EGRESS_SNIFF_NONE);
    size_t n = fragment(hello, hn, 4000, huge, sizeof(huge));
    assert_int_equal(egress_sniff_tls(huge, n, name), EGRESS_SNIFF_FOUND);
}

struct http_case {
    const char *what;
    const char *head;
    enum egress_sniff want;
    const char *name;
};

static const struct http_case http_cases[] = {
    {"simple", "GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n", EGRESS_SNIFF_FOUND,
     "api.example.com"},
    {"port and case", "POST /v1 HTTP/1.1\r\nUser-Agent: x\r\nhOsT:  API.Example.com:8080 \r\n\r\n",
     EGRESS_SNIFF_FOUND, "api.example.com"},
    {"bare LF", "GET / HTTP/1.0\nHost: a.example\n\n", EGRESS_SNIFF_FOUND, "a.example"},
    {"body after head", "PUT / HTTP/1.1\r\nHost: a.example\r\n\r\nHost: b.example\r\n\r\n",
     EGRESS_SNIFF_FOUND, "a.example"},
    {"no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"two hosts", "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n", EGRESS_SNIFF_NONE,
     ""},
    {"folded", "GET / HTTP/1.1\r\nHost: a.example\r\n b.example\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"space before colon", "GET / HTTP/1.1\r\nHost : a.example\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"v6 literal", "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"bad port", "GET / HTTP/1.1\r\nHost: a.example:80x\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"empty host", "GET / HTTP/1.1\r\nHost:\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"lower-case method", "get / HTTP/1.1\r\nHost: a.example\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"no target", "GET HTTP/1.1\r\nHost: a.example\r\n\r\n", EGRESS_SNIFF_NONE, ""},
    {"control byte in target", "GET /\x01 HTTP/1.1\r\nHost: a.example\r\n\r\n", EGRESS_SNIFF_NONE,
     ""},
    {"ssh banner", "SSH-2.0-OpenSSH_9.2\r\n", EGRESS_SNIFF_NONE, ""},
    {"tls", "\x16\x03\x01\x00\x05", EGRESS_SNIFF_NONE, ""},
};

static void test_http_cases(void **state)
{
    char name[EGRESS_HOST_MAX + 1];
    for (size_t i = 0; i < AB_ARRAY_LEN(http_cases); i++) {
        const struct http_case *c = &http_cases[i];
        size_t n = strlen(c->head);
        enum egress_sniff got = egress_sniff_http((const uint8_t *)c->head, n, name);
        if (got != c->want || strcmp(name, c->name) != 0)
            fail_msg("%s: got %d \"%s\"", c->what, got, name);
        /* a prefix never claims a name the whole does not give */
        for (size_t k = 0; k < n; k++) {
            got = egress_sniff_http((const uint8_t *)c->head, k, name);
            if (got == EGRESS_SNIFF_FOUND &&
                (c->want != EGRESS_SNIFF_FOUND || strcmp(name, c->name) != 0))
                fail_msg("%s: prefix %zu found \"%s\"", c->what, k, name);
        }
    }
    /* a found request waits for the end of the head (a second Host may follow) */
    const char *h = "GET / HTTP/1.1\r\nHost: a.example\r\n";
    assert_int_equal(egress_sniff_http((const uint8_t *)h, strlen(h), name), EGRESS_SNIFF_MORE);
}

static void test_http_limit(void **state)
{
    static char head[EGRESS_SNIFF_MAX + 100];
    char name[EGRESS_HOST_MAX + 1];
    size_t n = (size_t)snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nHost: a.example\r\n");
    while (n + 20 < sizeof(head))
        n += (size_t)snprintf(head + n, sizeof(head) - n, "X-Pad: 0123456789\r\n");
    /* below the limit it waits; at the limit it gives up, whatever follows */
    assert_int_equal(egress_sniff_http((const uint8_t *)head, EGRESS_SNIFF_MAX - 1, name),
                     EGRESS_SNIFF_MORE);
    assert_int_equal(egress_sniff_http((const uint8_t *)head, n, name), EGRESS_SNIFF_NONE);
    /* an endless method */
    memset(head, 'A', 100);
    assert_int_equal(egress_sniff_http((const uint8_t *)head, 100, name), EGRESS_SNIFF_NONE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_real_hello), cmocka_unit_test(test_records_split),
        cmocka_unit_test(test_tls_cases),  cmocka_unit_test(test_tls_lies),
        cmocka_unit_test(test_http_cases), cmocka_unit_test(test_http_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
