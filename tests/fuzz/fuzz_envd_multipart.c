/* multipart/form-data: the first input byte picks a chunk size, the rest is
 * the body. Feeding in chunks must give the same parts and content as
 * feeding all at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/envd/multipart.h"

struct sink {
    uint64_t hash;
    size_t bytes;
    int parts;
};

static int on_part(void *arg, const char *name, const char *filename)
{
    struct sink *s = arg;
    s->parts++;
    for (const char *c = filename; *c; c++)
        s->hash = s->hash * 31 + (uint8_t)*c;
    (void)name;
    return 0;
}

static int on_data(void *arg, const void *data, size_t len)
{
    struct sink *s = arg;
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        s->hash = s->hash * 131 + p[i];
    s->bytes += len;
    return 0;
}

static int on_end(void *arg)
{
    ((struct sink *)arg)->hash ^= 0x9e3779b97f4a7c15ull;
    return 0;
}

static int run(const uint8_t *body, size_t len, size_t step, struct sink *s)
{
    static const struct envd_mp_callbacks cb = {on_part, on_data, on_end};
    char err[160];
    struct envd_mp *m = envd_mp_new("multipart/form-data; boundary=xB", &cb, s, err, sizeof(err));
    int rc = 0;

    if (m == NULL)
        abort();
    for (size_t i = 0; i < len && rc == 0; i += step)
        rc = envd_mp_feed(m, body + i, len - i < step ? len - i : step);
    if (rc == 0)
        rc = envd_mp_finish(m);
    envd_mp_free(m);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sink a = {0}, b = {0};
    size_t step;
    int ra, rb;

    if (size < 1)
        return 0;
    step = (size_t)data[0] % 17 + 1;
    ra = run(data + 1, size - 1, size, &a);
    rb = run(data + 1, size - 1, step, &b);
    if (ra != rb || (ra == 0 && (a.hash != b.hash || a.bytes != b.bytes || a.parts != b.parts)))
        abort();
    return 0;
}
