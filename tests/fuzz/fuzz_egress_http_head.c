/* egress_http_head_parse, egress_http_head_rewrite and egress_chunked_scan on
 * arbitrary bytes. Never crashes or reads past the input (ASan), and what they
 * return holds: an OK head ends in a blank line within the input and the
 * limit, a prefix of it is MORE (the answer of a complete head never changes
 * with where the bytes were split), its Host is a normal name; the rewritten
 * head parses again with the same Host and framing and carries the rule's
 * header exactly once (when it fits the parser's own limits); the chunked scanner never claims more
 * than it was given, and gives the same answer fed in two pieces. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "agent/egress/http_head.h"
#include "agent/egress/secrets.h"

static struct egress_secrets *g_secrets;
static uint8_t g_out[EGRESS_HEAD_OUT_MAX];

static void check_chunked(const uint8_t *data, size_t size)
{
    struct egress_chunked a, b;
    int da, db;
    const char *why;
    egress_chunked_init(&a);
    egress_chunked_init(&b);
    long ra = egress_chunked_scan(&a, data, size, &da, &why);
    if (ra > (long)size)
        abort();
    if (ra >= 0 && !da && ra != (long)size)
        abort();
    size_t half = size / 2;
    long rb = egress_chunked_scan(&b, data, half, &db, &why);
    if (rb >= 0 && !db) {
        long rc = egress_chunked_scan(&b, data + half, size - half, &db, &why);
        if ((ra < 0) != (rc < 0))
            abort();
        if (ra >= 0 && (db != da || (size_t)rc + half != (size_t)ra))
            abort();
    } else if (rb >= 0 && db) {
        if (ra != rb || !da)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_secrets) {
        char err[128];
        g_secrets = egress_secrets_new();
        if (egress_secrets_set(g_secrets, "K", "s3cr3t", 6, err, sizeof(err)) != 0)
            abort();
    }
    struct egress_http_head h, h2, hp;
    enum egress_head_res r = egress_http_head_parse(data, size, &h);
    if (r == EGRESS_HEAD_OK) {
        if (h.head_len > size || h.head_len > EGRESS_HEAD_MAX || h.head_len < 4 ||
            memcmp(data + h.head_len - 4, "\r\n\r\n", 4) != 0 || !h.host[0])
            abort();
        if (egress_http_head_parse(data, h.head_len - 1, &hp) != EGRESS_HEAD_MORE)
            abort();
        struct egress_rule rule = {.n_headers = 1};
        memcpy(rule.headers[0].name, "X-Key", 6);
        memcpy(rule.headers[0].value, "k ${e2b.secrets.K}", 19);
        size_t n;
        char err[160];
        if (egress_http_head_rewrite(data, &h, &rule, g_secrets, g_out, sizeof(g_out), &n, err,
                                     sizeof(err)) == 0 &&
            n <= EGRESS_HEAD_MAX && h.n_fields < EGRESS_HEAD_FIELDS_MAX) {
            if (egress_http_head_parse(g_out, n, &h2) != EGRESS_HEAD_OK || h2.head_len != n ||
                strcmp(h2.host, h.host) != 0 || h2.body != h.body ||
                h2.content_length != h.content_length)
                abort();
            size_t seen = 0;
            for (size_t i = 0; i < h2.n_fields; i++)
                if (h2.fields[i].name_len == 5 &&
                    memcmp(g_out + h2.fields[i].name, "X-Key", 5) == 0)
                    seen++;
                else if (h2.fields[i].name_len == 5 &&
                         strncasecmp((const char *)g_out + h2.fields[i].name, "x-key", 5) == 0)
                    abort(); /* the sandbox's own copy must be gone */
            if (seen != 1)
                abort();
        }
    } else if (r == EGRESS_HEAD_MORE) {
        if (size >= EGRESS_HEAD_MAX)
            abort(); /* at the limit the answer must be final */
    }
    check_chunked(data, size);
    return 0;
}
