/* Bounded growable buffer: the one place that grows memory up to a limit. */
#include "agentbox/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first allocation; small bodies and short texts fit without a second one. */
#define BUF_FIRST_ALLOC 256

void buf_init(struct buf *b, size_t max, const char *what)
{
    memset(b, 0, sizeof(*b));
    /* Doubling and the NUL must not overflow size_t. */
    b->max = AB_MIN(max, SIZE_MAX / 2);
    b->what = what ? what : "buffer";
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err[0] = '\0';
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
    b->err[0] = '\0';
}

int buf_grow(struct buf *b, size_t add)
{
    size_t want, ncap;
    char *nd;

    if (add > b->max - b->len) {
        snprintf(b->err, sizeof(b->err), "%s is larger than %zu bytes", b->what, b->max);
        return AB_ELIMIT;
    }
    want = b->len + add + 1;
    if (want <= b->cap)
        return 0;
    ncap = b->cap ? b->cap : BUF_FIRST_ALLOC;
    while (ncap < want)
        ncap *= 2;
    /* Never allocate beyond what the limit can use. */
    ncap = AB_MIN(ncap, b->max + 1);
    nd = realloc(b->data, ncap);
    if (!nd) {
        snprintf(b->err, sizeof(b->err), "out of memory growing %s to %zu bytes", b->what, ncap);
        return AB_ENOMEM;
    }
    if (!b->data)
        nd[0] = '\0';
    b->data = nd;
    b->cap = ncap;
    return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
    int rc = buf_grow(b, len);

    if (rc != 0)
        return rc;
    if (len > 0)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
    return 0;
}

int buf_append_str(struct buf *b, const char *s)
{
    return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    int n, rc;

    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        snprintf(b->err, sizeof(b->err), "cannot format text for %s", b->what);
        return AB_EINVAL;
    }
    rc = buf_grow(b, (size_t)n);
    if (rc != 0)
        return rc;
    /* grow left room for n bytes and the NUL, so this cannot truncate. */
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int rc;

    va_start(ap, fmt);
    rc = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void buf_consume(struct buf *b, size_t n)
{
    if (n >= b->len) {
        buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}

const char *buf_str(const struct buf *b)
{
    return b->data ? b->data : "";
}

size_t buf_len(const struct buf *b)
{
    return b->len;
}

char *buf_take(struct buf *b, size_t *len)
{
    char *d = b->data;

    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    b->err[0] = '\0';
    return d;
}

const char *buf_err(const struct buf *b)
{
    return b->err;
}
