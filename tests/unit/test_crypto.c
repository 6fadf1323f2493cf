/* Known-answer tests for the OpenSSL wrappers, tamper detection and encodings. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"

/* Test-local hex decoder, independent of crypto_hex_decode. */
static size_t unhex(const char *hex, uint8_t *out, size_t outlen)
{
    size_t n = strlen(hex) / 2;

    assert_true(n <= outlen);
    for (size_t i = 0; i < n; i++) {
        unsigned int b;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &b), 1);
        out[i] = (uint8_t)b;
    }
    return n;
}

static void assert_hex(const uint8_t *got, size_t len, const char *want)
{
    char buf[512];

    assert_true(2 * len < sizeof(buf));
    for (size_t i = 0; i < len; i++)
        snprintf(buf + 2 * i, 3, "%02x", got[i]);
    assert_string_equal(buf, want);
}

/* ---- SHA-256 (FIPS 180-2 appendix B) ---- */

static void test_sha256_abc(void **state)
{
    uint8_t d[CRYPTO_SHA256_LEN];

    crypto_sha256("abc", 3, d);
    assert_hex(d, sizeof(d), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

static void test_sha256_448_bits(void **state)
{
    const char *m = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    uint8_t d[CRYPTO_SHA256_LEN];

    assert_int_equal(strlen(m) * 8, 448);
    crypto_sha256(m, strlen(m), d);
    assert_hex(d, sizeof(d), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

static void test_sha256_million_a(void **state)
{
    size_t n = 1000000;
    char *m = malloc(n);
    uint8_t d[CRYPTO_SHA256_LEN];

    assert_non_null(m);
    memset(m, 'a', n);
    crypto_sha256(m, n, d);
    free(m);
    assert_hex(d, sizeof(d), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static void test_sha256_hex(void **state)
{
    char out[65];

    crypto_sha256_hex("abc", out);
    assert_string_equal(out, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    crypto_sha256_hex("", out);
    assert_string_equal(out, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

/* ---- HMAC-SHA256 (RFC 4231) ---- */

static void hmac_case(const uint8_t *key, size_t keylen, const void *data, size_t len,
                      const char *want)
{
    uint8_t mac[CRYPTO_SHA256_LEN];

    crypto_hmac_sha256(key, keylen, data, len, mac);
    assert_hex(mac, sizeof(mac), want);
}

static void test_hmac_rfc4231(void **state)
{
    uint8_t key[131];
    uint8_t data[50];
    const char *long_data = "This is a test using a larger than block-size key and a larger "
                            "than block-size data. The key needs to be hashed before being "
                            "used by the HMAC algorithm.";
    const char *tc6 = "Test Using Larger Than Block-Size Key - Hash Key First";

    /* 1 */
    memset(key, 0x0b, 20);
    hmac_case(key, 20, "Hi There", 8,
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    /* 2: key shorter than the output */
    hmac_case((const uint8_t *)"Jefe", 4, "what do ya want for nothing?", 28,
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    /* 3 */
    memset(key, 0xaa, 20);
    memset(data, 0xdd, 50);
    hmac_case(key, 20, data, 50,
              "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    /* 4 */
    for (int i = 0; i < 25; i++)
        key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, 50);
    hmac_case(key, 25, data, 50,
              "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    /* 6: key larger than the block */
    memset(key, 0xaa, 131);
    hmac_case(key, 131, tc6, strlen(tc6),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    /* 7: key and data larger than the block */
    hmac_case(key, 131, long_data, strlen(long_data),
              "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

static void test_hmac_empty_key_and_data(void **state)
{
    /* HMAC-SHA256("", "") is a well-known constant. */
    hmac_case(NULL, 0, NULL, 0, "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");
}

/* ---- HKDF-SHA256 (RFC 5869) ---- */

static void test_hkdf_rfc5869_1(void **state)
{
    uint8_t ikm[22], salt[13], info[10], okm[42];

    memset(ikm, 0x0b, sizeof(ikm));
    for (int i = 0; i < 13; i++)
        salt[i] = (uint8_t)i;
    for (int i = 0; i < 10; i++)
        info[i] = (uint8_t)(0xf0 + i);
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), salt, sizeof(salt), info, sizeof(info),
                                        okm, sizeof(okm)),
                     0);
    assert_hex(okm, sizeof(okm),
               "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b8"
               "87185865");
}

static void test_hkdf_rfc5869_2(void **state)
{
    uint8_t ikm[80], salt[80], info[80], okm[82];

    for (int i = 0; i < 80; i++) {
        ikm[i] = (uint8_t)i;
        salt[i] = (uint8_t)(0x60 + i);
        info[i] = (uint8_t)(0xb0 + i);
    }
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), salt, sizeof(salt), info, sizeof(info),
                                        okm, sizeof(okm)),
                     0);
    assert_hex(okm, sizeof(okm),
               "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c59045a99cac7"
               "827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71cc30c58179ec3e87c14c01d5"
               "c1f3434f1d87");
}

static void test_hkdf_rfc5869_3(void **state)
{
    uint8_t ikm[22], okm[42];

    memset(ikm, 0x0b, sizeof(ikm));
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), NULL, 0, NULL, 0, okm, sizeof(okm)), 0);
    assert_hex(okm, sizeof(okm),
               "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4"
               "b61a96c8");
}

static void test_hkdf_output_limits(void **state)
{
    uint8_t ikm[16] = {1};
    uint8_t *big = malloc(255 * 32 + 1);

    assert_non_null(big);
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), NULL, 0, NULL, 0, big, 0), AB_ELIMIT);
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), NULL, 0, NULL, 0, big, 255 * 32), 0);
    assert_int_equal(crypto_hkdf_sha256(ikm, sizeof(ikm), NULL, 0, NULL, 0, big, 255 * 32 + 1),
                     AB_ELIMIT);
    free(big);
}

/* ---- AES-256-GCM (GCM spec test cases 13-16) ---- */

static const char *k15 = "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308";
static const char *iv15 = "cafebabefacedbaddecaf888";
static const char *p15 = "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
                         "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255";
static const char *c15 = "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa"
                         "8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662898015ad";
static const char *a16 = "feedfacedeadbeeffeedfacedeadbeefabaddad2";

static void test_gcm_zero_key_empty_and_block(void **state)
{
    uint8_t key[32] = {0}, iv[12] = {0}, pt[16] = {0}, ct[16], tag[16], back[16];

    assert_int_equal(crypto_aes_gcm_encrypt(key, iv, NULL, 0, NULL, 0, ct, tag), 0);
    assert_hex(tag, 16, "530f8afbc74536b9a963b4f1c4cb738b");
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, NULL, 0, NULL, 0, tag, back), 0);

    assert_int_equal(crypto_aes_gcm_encrypt(key, iv, NULL, 0, pt, 16, ct, tag), 0);
    assert_hex(ct, 16, "cea7403d4d606b6e074ec5d3baf39d18");
    assert_hex(tag, 16, "d0d1c8a799996bf0265b98b5d48ab919");
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, NULL, 0, ct, 16, tag, back), 0);
    assert_memory_equal(back, pt, 16);
}

static void test_gcm_case15(void **state)
{
    uint8_t key[32], iv[12], pt[64], ct[64], tag[16], back[64];

    unhex(k15, key, sizeof(key));
    unhex(iv15, iv, sizeof(iv));
    assert_int_equal(unhex(p15, pt, sizeof(pt)), 64);
    assert_int_equal(crypto_aes_gcm_encrypt(key, iv, NULL, 0, pt, 64, ct, tag), 0);
    assert_hex(ct, 64, c15);
    assert_hex(tag, 16, "b094dac5d93471bdec1a502270e3cc6c");
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, NULL, 0, ct, 64, tag, back), 0);
    assert_memory_equal(back, pt, 64);
}

/* Case 16: 60 bytes of plaintext and 20 bytes of AAD. */
static void test_gcm_case16_aad(void **state)
{
    uint8_t key[32], iv[12], pt[64], aad[20], ct[60], tag[16], back[60];
    char want[121];

    unhex(k15, key, sizeof(key));
    unhex(iv15, iv, sizeof(iv));
    unhex(p15, pt, sizeof(pt));
    assert_int_equal(unhex(a16, aad, sizeof(aad)), 20);
    assert_int_equal(crypto_aes_gcm_encrypt(key, iv, aad, 20, pt, 60, ct, tag), 0);
    memcpy(want, c15, 120);
    want[120] = '\0';
    assert_hex(ct, 60, want);
    assert_hex(tag, 16, "76fc6ece0f4e1768cddf8853bb2d551b");
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, aad, 20, ct, 60, tag, back), 0);
    assert_memory_equal(back, pt, 60);
}

static void test_gcm_tamper(void **state)
{
    uint8_t key[32], iv[12], pt[64], aad[20], ct[60], tag[16], back[60];
    uint8_t bad[60], badtag[16], badaad[20], badkey[32], badiv[12];

    unhex(k15, key, sizeof(key));
    unhex(iv15, iv, sizeof(iv));
    unhex(p15, pt, sizeof(pt));
    unhex(a16, aad, sizeof(aad));
    assert_int_equal(crypto_aes_gcm_encrypt(key, iv, aad, 20, pt, 60, ct, tag), 0);

    memcpy(bad, ct, 60);
    bad[17] ^= 0x01;
    memset(back, 0x55, sizeof(back));
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, aad, 20, bad, 60, tag, back), AB_EDENIED);
    /* Unauthenticated plaintext is not handed out. */
    for (size_t i = 0; i < sizeof(back); i++)
        assert_int_equal(back[i], 0);

    memcpy(badaad, aad, 20);
    badaad[0] ^= 0x80;
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, badaad, 20, ct, 60, tag, back), AB_EDENIED);
    /* Dropping the AAD altogether is a change too. */
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, NULL, 0, ct, 60, tag, back), AB_EDENIED);

    memcpy(badtag, tag, 16);
    badtag[15] ^= 0x01;
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, aad, 20, ct, 60, badtag, back), AB_EDENIED);

    memcpy(badkey, key, 32);
    badkey[31] ^= 0x01;
    assert_int_equal(crypto_aes_gcm_decrypt(badkey, iv, aad, 20, ct, 60, tag, back), AB_EDENIED);

    memcpy(badiv, iv, 12);
    badiv[0] ^= 0x01;
    assert_int_equal(crypto_aes_gcm_decrypt(key, badiv, aad, 20, ct, 60, tag, back), AB_EDENIED);

    /* And the untouched message still opens. */
    assert_int_equal(crypto_aes_gcm_decrypt(key, iv, aad, 20, ct, 60, tag, back), 0);
    assert_memory_equal(back, pt, 60);
}

/* ---- hex ---- */

static void test_hex_round_trip(void **state)
{
    uint8_t data[256], back[256];
    char hex[513];
    size_t n = 0;

    for (int i = 0; i < 256; i++)
        data[i] = (uint8_t)i;
    crypto_hex_encode(data, sizeof(data), hex);
    assert_int_equal(strlen(hex), 512);
    assert_memory_equal(hex, "000102030405060708090a0b0c0d0e0f10", 34);
    assert_string_equal(hex + 500, "fafbfcfdfeff");
    assert_int_equal(crypto_hex_decode(hex, back, sizeof(back), &n), 0);
    assert_int_equal(n, 256);
    assert_memory_equal(back, data, 256);

    crypto_hex_encode(data, 0, hex);
    assert_string_equal(hex, "");
    assert_int_equal(crypto_hex_decode("", back, sizeof(back), &n), 0);
    assert_int_equal(n, 0);
}

static void test_hex_upper_case_accepted(void **state)
{
    uint8_t out[4];
    size_t n = 0;

    assert_int_equal(crypto_hex_decode("DEADbeef", out, sizeof(out), &n), 0);
    assert_int_equal(n, 4);
    assert_hex(out, 4, "deadbeef");
}

static void test_hex_bad_input(void **state)
{
    uint8_t out[8];
    size_t n = 99;

    assert_int_equal(crypto_hex_decode("abc", out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(crypto_hex_decode("zz", out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_hex_decode("0g", out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_hex_decode("00 1", out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_hex_decode("0x00", out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_hex_decode("000102", out, 2, &n), AB_ELIMIT);
    assert_int_equal(crypto_hex_decode("0001", out, 2, NULL), 0);
}

/* ---- base64 (RFC 4648 §10 vectors) ---- */

static void test_base64_rfc4648(void **state)
{
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    char out[16];
    uint8_t back[16];
    size_t n;

    for (size_t i = 0; i < AB_ARRAY_LEN(plain); i++) {
        crypto_base64_encode(plain[i], strlen(plain[i]), out);
        assert_string_equal(out, enc[i]);
        n = 99;
        assert_int_equal(crypto_base64_decode(enc[i], strlen(enc[i]), back, sizeof(back), &n), 0);
        assert_int_equal(n, strlen(plain[i]));
        assert_memory_equal(back, plain[i], n);
    }
}

static void test_base64_round_trip_all_lengths(void **state)
{
    uint8_t data[300], back[300];
    char enc[4 * 100 + 1];
    size_t n;

    for (int i = 0; i < 300; i++)
        data[i] = (uint8_t)(i * 7 + 3);
    for (size_t len = 0; len <= 300; len++) {
        crypto_base64_encode(data, len, enc);
        assert_int_equal(strlen(enc), 4 * ((len + 2) / 3));
        assert_int_equal(crypto_base64_decode(enc, strlen(enc), back, len, &n), 0);
        assert_int_equal(n, len);
        assert_memory_equal(back, data, len);
    }
    /* Every alphabet character, including + and /. */
    crypto_base64_encode("\xfb\xff\xbf", 3, enc);
    assert_string_equal(enc, "+/+/");
}

static void test_base64_bad_input(void **state)
{
    uint8_t out[16];
    size_t n = 99;

    assert_int_equal(crypto_base64_decode("Zg=", 3, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(n, 0);
    assert_int_equal(crypto_base64_decode("Zg", 2, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Z===", 4, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("====", 4, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zg==Zg==", 8, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zm9*", 4, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zm9v\n", 5, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zm 9", 4, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zm9-", 4, out, sizeof(out), &n), AB_EINVAL);
    /* Non-zero bits past the last byte: a second spelling of "f" is refused. */
    assert_int_equal(crypto_base64_decode("Zh==", 4, out, sizeof(out), &n), AB_EINVAL);
    assert_int_equal(crypto_base64_decode("Zm9=", 4, out, sizeof(out), &n), AB_EINVAL);
    /* Output too small. */
    assert_int_equal(crypto_base64_decode("Zm9vYmFy", 8, out, 5, &n), AB_ELIMIT);
    assert_int_equal(crypto_base64_decode("Zm9vYmFy", 8, out, 6, &n), 0);
    assert_int_equal(n, 6);
    /* Length is taken from b64len, not from a NUL. */
    assert_int_equal(crypto_base64_decode("Zm9vGARBAGE", 4, out, sizeof(out), &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "foo", 3);
}

/* ---- compare, random, token ---- */

static void test_equal(void **state)
{
    assert_true(crypto_equal("abcd", "abcd", 4));
    assert_false(crypto_equal("abcd", "abce", 4));
    assert_false(crypto_equal("xbcd", "abcd", 4));
    assert_true(crypto_equal("abcd", "abce", 3));
    assert_true(crypto_equal("", "", 0));
}

static void test_random(void **state)
{
    uint8_t a[64] = {0}, b[64] = {0}, zero[64] = {0};

    assert_int_equal(crypto_random(a, sizeof(a)), 0);
    assert_int_equal(crypto_random(b, sizeof(b)), 0);
    /* 2^-512 odds of a false failure. */
    assert_memory_not_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, zero, sizeof(a));
    assert_int_equal(crypto_random(a, 0), 0);
}

static void test_token(void **state)
{
    char t1[80], t2[80];
    uint8_t raw[32];
    size_t n;

    assert_int_equal(crypto_token("agbx_", t1, sizeof(t1)), 0);
    assert_int_equal(crypto_token("agbx_", t2, sizeof(t2)), 0);
    assert_int_equal(strlen(t1), 5 + 64);
    assert_memory_equal(t1, "agbx_", 5);
    for (size_t i = 5; i < strlen(t1); i++)
        assert_non_null(strchr("0123456789abcdef", t1[i]));
    assert_int_equal(crypto_hex_decode(t1 + 5, raw, sizeof(raw), &n), 0);
    assert_int_equal(n, 32);
    assert_string_not_equal(t1, t2);

    /* Exactly enough room, and one byte short. */
    assert_int_equal(crypto_token("abxc_", t1, 5 + 64 + 1), 0);
    assert_int_equal(crypto_token("abxc_", t1, 5 + 64), AB_ELIMIT);
    assert_int_equal(crypto_token("", t1, 65), 0);
    assert_int_equal(strlen(t1), 64);
    assert_int_equal(crypto_token(NULL, t1, 65), 0);
    assert_int_equal(strlen(t1), 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sha256_abc),
        cmocka_unit_test(test_sha256_448_bits),
        cmocka_unit_test(test_sha256_million_a),
        cmocka_unit_test(test_sha256_hex),
        cmocka_unit_test(test_hmac_rfc4231),
        cmocka_unit_test(test_hmac_empty_key_and_data),
        cmocka_unit_test(test_hkdf_rfc5869_1),
        cmocka_unit_test(test_hkdf_rfc5869_2),
        cmocka_unit_test(test_hkdf_rfc5869_3),
        cmocka_unit_test(test_hkdf_output_limits),
        cmocka_unit_test(test_gcm_zero_key_empty_and_block),
        cmocka_unit_test(test_gcm_case15),
        cmocka_unit_test(test_gcm_case16_aad),
        cmocka_unit_test(test_gcm_tamper),
        cmocka_unit_test(test_hex_round_trip),
        cmocka_unit_test(test_hex_upper_case_accepted),
        cmocka_unit_test(test_hex_bad_input),
        cmocka_unit_test(test_base64_rfc4648),
        cmocka_unit_test(test_base64_round_trip_all_lengths),
        cmocka_unit_test(test_base64_bad_input),
        cmocka_unit_test(test_equal),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_token),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
