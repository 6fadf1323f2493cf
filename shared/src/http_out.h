/* Private: a bounded-by-caller chain of output buffers for raw sockets. */
#ifndef AGENTBOX_HTTP_OUT_H
#define AGENTBOX_HTTP_OUT_H

#include <stddef.h>

struct http_out_chunk;
struct http_out {
    struct http_out_chunk *head, *tail;
    size_t bytes;
};

/* Copies len bytes; returns 0 or AB_ENOMEM. */
int http_out_append(struct http_out *o, const void *data, size_t len);
int http_out_printf(struct http_out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Front bytes: pointer and length of the first chunk (0 when empty). */
size_t http_out_peek(struct http_out *o, const char **data);
void http_out_consume(struct http_out *o, size_t n);
void http_out_clear(struct http_out *o);

/* Writes an HTTP/1.1 response or request head; close 1 adds "Connection:
 * close", 2 "Connection: Upgrade" (a 101). */
int http_out_head(struct http_out *o, const char *first_line, const struct http_header *h, int n,
                  long long content_length, int close);

#endif
