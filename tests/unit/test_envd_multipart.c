/* multipart/form-data stream parser: the SDK's bodies, split at every byte,
 * and the malformed bodies it must refuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "agentbox/common.h"
#include "agent/envd/multipart.h"

struct collect {
    char parts[8][2][256]; /* name, filename */
    char data[8][512];
    size_t dlen[8];
    int nparts;
    int ended;
    int fail_on_part; /* 1-based; 0 never */
};

static int on_part(void *arg, const char *name, const char *filename)
{
    struct collect *c = arg;

    if (c->nparts >= 8)
        return AB_ELIMIT;
    snprintf(c->parts[c->nparts][0], 256, "%s", name);
    snprintf(c->parts[c->nparts][1], 256, "%s", filename);
    c->nparts++;
    if (c->fail_on_part == c->nparts)
        return AB_EEXIST;
    return 0;
}

static int on_data(void *arg, const void *data, size_t len)
{
    struct collect *c = arg;
    size_t *n = &c->dlen[c->nparts - 1];

    assert_true(*n + len <= sizeof(c->data[0]));
    memcpy(c->data[c->nparts - 1] + *n, data, len);
    *n += len;
    return 0;
}

static int on_part_end(void *arg)
{
    ((struct collect *)arg)->ended++;
    return 0;
}

static const struct envd_mp_callbacks cbs = {on_part, on_data, on_part_end};

#define CT "multipart/form-data; boundary=----formdata-undici-011352283880"
#define B "------formdata-undici-011352283880"
/* The two-file body of e2b-protocol.md §3.1 request #7. */
static const char two_files[] =
    B "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/x/1.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\none\r\n" B
      "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/x/2.txt\"\r\n"
      "Content-Type: application/octet-stream\r\n\r\n\x00\x01\x02\r\n" B "--\r\n";

static int run(const char *ct, const char *body, size_t len, size_t step, struct collect *c,
               char *err)
{
    struct envd_mp *m;
    int rc = 0;

    memset(c, 0, sizeof(*c) - sizeof(int));
    m = envd_mp_new(ct, &cbs, c, err, 160);
    if (m == NULL)
        return -100;
    for (size_t i = 0; i < len && rc == 0; i += step)
        rc = envd_mp_feed(m, body + i, AB_MIN(step, len - i));
    if (rc == 0)
        rc = envd_mp_finish(m);
    if (rc != 0)
        snprintf(err, 160, "%s", envd_mp_error(m));
    envd_mp_free(m);
    return rc;
}

static void test_two_files_every_split(void **state)
{
    struct collect c;
    char err[160];

    for (size_t step = 1; step <= sizeof(two_files); step++) {
        c.fail_on_part = 0;
        assert_int_equal(run(CT, two_files, sizeof(two_files) - 1, step, &c, err), 0);
        assert_int_equal(c.nparts, 2);
        assert_int_equal(c.ended, 2);
        assert_string_equal(c.parts[0][0], "file");
        assert_string_equal(c.parts[0][1], "/x/1.txt");
        assert_string_equal(c.parts[1][1], "/x/2.txt");
        assert_int_equal(c.dlen[0], 3);
        assert_memory_equal(c.data[0], "one", 3);
        assert_int_equal(c.dlen[1], 3);
        assert_memory_equal(c.data[1], "\x00\x01\x02", 3);
    }
}

static void test_content_that_looks_like_a_boundary(void **state)
{
    /* CR, CRLF, "\r\n--" and a boundary prefix inside the content stay content. */
    static const char body[] = "--bnd\r\nContent-Disposition: form-data; name=\"file\"; "
                               "filename=\"a\"\r\n\r\n\r\r\n\r\n-\r\n--bn\r\n--bnX\r\n--bnd\r\n"
                               "Content-Disposition: form-data; name=\"other\"\r\n\r\nv\r\n"
                               "--bnd--";
    static const char want[] = "\r\r\n\r\n-\r\n--bn\r\n--bnX";
    struct collect c;
    char err[160];

    for (size_t step = 1; step < sizeof(body); step++) {
        c.fail_on_part = 0;
        assert_int_equal(
            run("multipart/form-data; boundary=\"bnd\"", body, sizeof(body) - 1, step, &c, err), 0);
        assert_int_equal(c.nparts, 2);
        assert_int_equal(c.dlen[0], sizeof(want) - 1);
        assert_memory_equal(c.data[0], want, sizeof(want) - 1);
        assert_string_equal(c.parts[1][0], "other");
        assert_string_equal(c.parts[1][1], "");
        assert_memory_equal(c.data[1], "v", 1);
    }
}

/* A big part: exact bytes whatever the split, and in runs as long as the
 * feeds (no per-CR or per-byte callbacks: the SDK's default upload path). */
struct big {
    uint8_t *data;
    size_t len;
    int calls;
    int parts;
    int ended;
};

static int big_part(void *arg, const char *name, const char *filename)
{
    (void)name;
    (void)filename;
    ((struct big *)arg)->parts++;
    return 0;
}

static int big_data(void *arg, const void *data, size_t len)
{
    struct big *b = arg;

    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->calls++;
    return 0;
}

static int big_end(void *arg)
{
    ((struct big *)arg)->ended++;
    return 0;
}

#define BIG_CONTENT (256 * 1024)

static void test_big_part_in_long_runs_and_split_boundaries(void **state)
{
    static const struct envd_mp_callbacks bcb = {big_part, big_data, big_end};
    static const char head[] = "--bnd\r\nContent-Disposition: form-data; name=\"file\"; "
                               "filename=\"a\"\r\n\r\n";
    static const char tail[] = "\r\n--bnd--\r\n";
    size_t hl = sizeof(head) - 1, tl = sizeof(tail) - 1;
    size_t total = hl + BIG_CONTENT + tl;
    uint8_t *body = malloc(total);
    uint8_t *content = body + hl;
    struct big b;
    char err[160];

    assert_non_null(body);
    memcpy(body, head, hl);
    /* random bytes (a CR every 256 on average) and delimiter prefixes */
    srand(7);
    for (size_t i = 0; i < BIG_CONTENT; i++)
        content[i] = (uint8_t)rand();
    for (size_t i = 1000; i + 8 < BIG_CONTENT; i += 4099)
        memcpy(content + i, "\r\n--bn", (i / 4099) % 7 + 1);
    memcpy(body + hl + BIG_CONTENT, tail, tl);
    memset(&b, 0, sizeof(b));
    b.data = malloc(BIG_CONTENT);
    assert_non_null(b.data);

    /* 64 KiB feeds: a handful of callbacks, not one per CR */
    {
        struct envd_mp *m = envd_mp_new("multipart/form-data; boundary=bnd", &bcb, &b, err, 160);
        assert_non_null(m);
        for (size_t i = 0; i < total; i += 65536)
            assert_int_equal(envd_mp_feed(m, body + i, AB_MIN(65536, total - i)), 0);
        assert_int_equal(envd_mp_finish(m), 0);
        envd_mp_free(m);
        assert_int_equal(b.len, BIG_CONTENT);
        assert_memory_equal(b.data, content, BIG_CONTENT);
        assert_int_equal(b.parts, 1);
        assert_int_equal(b.ended, 1);
        assert_true(b.calls <= 3 * ((int)(total / 65536) + 1) + 2 * (BIG_CONTENT / 4099 + 1));
    }
    /* two feeds, split at every byte of the closing delimiter and around it */
    for (size_t cut = hl + BIG_CONTENT - 12; cut <= total; cut++) {
        struct envd_mp *m = envd_mp_new("multipart/form-data; boundary=bnd", &bcb, &b, err, 160);
        assert_non_null(m);
        b.len = 0;
        b.parts = b.ended = 0;
        assert_int_equal(envd_mp_feed(m, body, cut), 0);
        assert_int_equal(envd_mp_feed(m, body + cut, total - cut), 0);
        assert_int_equal(envd_mp_finish(m), 0);
        envd_mp_free(m);
        assert_int_equal(b.len, BIG_CONTENT);
        assert_memory_equal(b.data, content, BIG_CONTENT);
        assert_int_equal(b.ended, 1);
    }
    /* three feeds around a delimiter prefix inside the content */
    for (size_t cut = hl + 1000 - 3; cut <= hl + 1000 + 4; cut++) {
        struct envd_mp *m = envd_mp_new("multipart/form-data; boundary=bnd", &bcb, &b, err, 160);
        assert_non_null(m);
        b.len = 0;
        assert_int_equal(envd_mp_feed(m, body, cut), 0);
        assert_int_equal(envd_mp_feed(m, body + cut, 2), 0);
        assert_int_equal(envd_mp_feed(m, body + cut + 2, total - cut - 2), 0);
        assert_int_equal(envd_mp_finish(m), 0);
        envd_mp_free(m);
        assert_int_equal(b.len, BIG_CONTENT);
        assert_memory_equal(b.data, content, BIG_CONTENT);
    }
    free(b.data);
    free(body);
}

static void test_preamble_epilogue_and_quoted_filename(void **state)
{
    static const char body[] =
        "ignored preamble\r\n--b\r\nContent-Disposition: form-data; name=file; "
        "filename=\"we\\\"ird;name.txt\"\r\n\r\nx\r\n--b--\r\nepilogue junk";
    struct collect c;
    char err[160];

    c.fail_on_part = 0;
    assert_int_equal(run("Multipart/Form-Data;boundary=b", body, sizeof(body) - 1, 7, &c, err), 0);
    assert_int_equal(c.nparts, 1);
    assert_string_equal(c.parts[0][0], "file");
    assert_string_equal(c.parts[0][1], "we\"ird;name.txt");
}

static void test_bad_content_types(void **state)
{
    struct collect c;
    char err[160];
    char ct[200];

    assert_int_equal(run("application/json", "", 0, 1, &c, err), -100);
    assert_non_null(strstr(err, "multipart/form-data"));
    assert_int_equal(run("multipart/form-data", "", 0, 1, &c, err), -100);
    assert_non_null(strstr(err, "boundary"));
    snprintf(ct, sizeof(ct), "multipart/form-data; boundary=%071d", 0);
    assert_int_equal(run(ct, "", 0, 1, &c, err), -100);
    assert_non_null(strstr(err, "70"));
    assert_int_equal(run("multipart/form-data; boundary=\"unterminated", "", 0, 1, &c, err), -100);
}

static void test_malformed_bodies(void **state)
{
    struct collect c;
    char err[160];
    char big[ENVD_MP_HEAD_MAX + 64];

    assert_int_equal(run("multipart/form-data; boundary=b", "no boundary here", 16, 3, &c, err),
                     AB_EINVAL);
    assert_non_null(strstr(err, "no boundary"));
    static const char trunc[] = "--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nabc";
    assert_int_equal(run("multipart/form-data; boundary=b", trunc, sizeof(trunc) - 1, 5, &c, err),
                     AB_EINVAL);
    assert_non_null(strstr(err, "closing boundary"));
    static const char junk[] = "--bXY";
    assert_int_equal(run("multipart/form-data; boundary=b", junk, 5, 1, &c, err), AB_EINVAL);
    static const char nocolon[] = "--b\r\nthis is not a header\r\n\r\nx\r\n--b--";
    assert_int_equal(
        run("multipart/form-data; boundary=b", nocolon, sizeof(nocolon) - 1, 4, &c, err),
        AB_EINVAL);
    assert_non_null(strstr(err, "':'"));
    /* headers past 16 KiB */
    memset(big, 'a', sizeof(big));
    memcpy(big, "--b\r\nX-Long: ", 13);
    assert_int_equal(run("multipart/form-data; boundary=b", big, sizeof(big), 1000, &c, err),
                     AB_ELIMIT);
    assert_non_null(strstr(err, "16 KiB"));
}

static void test_callback_error_stops_parsing(void **state)
{
    struct collect c;
    char err[160];
    struct envd_mp *m;

    memset(&c, 0, sizeof(c));
    c.fail_on_part = 2;
    m = envd_mp_new(CT, &cbs, &c, err, sizeof(err));
    assert_non_null(m);
    assert_int_equal(envd_mp_feed(m, two_files, sizeof(two_files) - 1), AB_EEXIST);
    assert_int_equal(envd_mp_feed(m, "more", 4), AB_EEXIST);
    assert_int_equal(envd_mp_finish(m), AB_EEXIST);
    assert_int_equal(c.nparts, 2);
    assert_int_equal(c.dlen[1], 0);
    envd_mp_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_files_every_split),
        cmocka_unit_test(test_content_that_looks_like_a_boundary),
        cmocka_unit_test(test_big_part_in_long_runs_and_split_boundaries),
        cmocka_unit_test(test_preamble_epilogue_and_quoted_filename),
        cmocka_unit_test(test_bad_content_types),
        cmocka_unit_test(test_malformed_bodies),
        cmocka_unit_test(test_callback_error_stops_parsing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
