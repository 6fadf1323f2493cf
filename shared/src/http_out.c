#include "agentbox/http.h"
#include "agentbox/common.h"
#include "http_out.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define CHUNK_MIN 4096

struct http_out_chunk {
    struct http_out_chunk *next;
    size_t len, off, cap;
    char data[];
};

int http_out_append(struct http_out *o, const void *data, size_t len)
{
    if (len == 0)
        return 0;
    struct http_out_chunk *t = o->tail;
    if (t && t->cap - t->len >= len) {
        memcpy(t->data + t->len, data, len);
        t->len += len;
        o->bytes += len;
        return 0;
    }
    size_t cap = len < CHUNK_MIN ? CHUNK_MIN : len;
    struct http_out_chunk *c = malloc(sizeof(*c) + cap);
    if (!c)
        return AB_ENOMEM;
    c->next = NULL;
    c->len = len;
    c->off = 0;
    c->cap = cap;
    memcpy(c->data, data, len);
    if (t)
        t->next = c;
    else
        o->head = c;
    o->tail = c;
    o->bytes += len;
    return 0;
}

int http_out_printf(struct http_out *o, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(buf))
        return AB_ELIMIT;
    return http_out_append(o, buf, (size_t)n);
}

size_t http_out_peek(struct http_out *o, const char **data)
{
    if (!o->head)
        return 0;
    *data = o->head->data + o->head->off;
    return o->head->len - o->head->off;
}

void http_out_consume(struct http_out *o, size_t n)
{
    while (n && o->head) {
        struct http_out_chunk *c = o->head;
        size_t avail = c->len - c->off;
        size_t k = n < avail ? n : avail;
        c->off += k;
        n -= k;
        o->bytes -= k;
        if (c->off == c->len) {
            o->head = c->next;
            if (!o->head)
                o->tail = NULL;
            free(c);
        }
    }
}

void http_out_clear(struct http_out *o)
{
    http_out_consume(o, o->bytes);
    while (o->head) { /* zero-length leftovers */
        struct http_out_chunk *c = o->head;
        o->head = c->next;
        free(c);
    }
    o->tail = NULL;
    o->bytes = 0;
}

/* Header values must not smuggle a line break into the head. */
static bool safe(const char *s)
{
    return strpbrk(s, "\r\n") == NULL;
}

int http_out_head(struct http_out *o, const char *first_line, const struct http_header *h, int n,
                  long long content_length, int close)
{
    char buf[HTTP_HEAD_MAX];
    size_t len = 0;
    int k = snprintf(buf, sizeof(buf), "%s\r\n", first_line);
    if (k < 0 || (size_t)k >= sizeof(buf))
        return AB_ELIMIT;
    len = (size_t)k;
    for (int i = 0; i < n; i++) {
        if (strcasecmp(h[i].name, "Content-Length") == 0 ||
            strcasecmp(h[i].name, "Transfer-Encoding") == 0 ||
            strcasecmp(h[i].name, "Connection") == 0 || !safe(h[i].name) || !safe(h[i].value))
            continue;
        k = snprintf(buf + len, sizeof(buf) - len, "%s: %s\r\n", h[i].name, h[i].value);
        if (k < 0 || (size_t)k >= sizeof(buf) - len)
            return AB_ELIMIT;
        len += (size_t)k;
    }
    if (content_length >= 0)
        k = snprintf(buf + len, sizeof(buf) - len, "Content-Length: %lld\r\n", content_length);
    else if (content_length == -1)
        k = snprintf(buf + len, sizeof(buf) - len, "Transfer-Encoding: chunked\r\n");
    else
        k = 0; /* -2: no body framing (e.g. 204/304) */
    if (k < 0 || (size_t)k >= sizeof(buf) - len)
        return AB_ELIMIT;
    len += (size_t)k;
    k = snprintf(buf + len, sizeof(buf) - len, "%s\r\n",
                 close == 2 ? "Connection: Upgrade\r\n"
                 : close    ? "Connection: close\r\n"
                            : "");
    if (k < 0 || (size_t)k >= sizeof(buf) - len)
        return AB_ELIMIT;
    len += (size_t)k;
    return http_out_append(o, buf, len);
}
