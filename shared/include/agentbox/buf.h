/* A growable byte buffer with a hard maximum set at creation (curl's dynbuf).
 *
 * Every grow-with-limit loop in the tree is this type: the limit is chosen
 * once, where the buffer is made, and every append checks it. An append that
 * would cross the limit fails with AB_ELIMIT and leaves the buffer as it was
 * (content and length unchanged), so the caller can still answer with what it
 * has; buf_err() then names the buffer and its limit. The content is always
 * NUL-terminated (the NUL does not count towards the limit), so text can be
 * used as a C string while binary data may still hold NUL bytes.
 *
 * A struct buf is a value: embed it, buf_init() it, buf_free() it. Not
 * thread-safe; one owner at a time. */
#ifndef AGENTBOX_BUF_H
#define AGENTBOX_BUF_H

#include <stdarg.h>
#include <stddef.h>

#include "agentbox/common.h"

#define BUF_ERR_MAX 112

struct buf {
    char *data;       /* NULL until the first growth; NUL-terminated after it */
    size_t len;       /* bytes in use, excluding the terminating NUL */
    size_t cap;       /* bytes allocated, including room for the NUL */
    size_t max;       /* len never exceeds this */
    const char *what; /* static name used in error messages, e.g. "request body" */
    char err[BUF_ERR_MAX];
};

/* max is the largest content length the buffer may ever hold (at most
 * SIZE_MAX / 2); what must outlive the buffer (a string literal). Allocates
 * nothing. */
void buf_init(struct buf *b, size_t max, const char *what);
/* Releases the memory; the buffer is empty and may be reused with the same limit. */
void buf_free(struct buf *b);
/* Empties the buffer but keeps its memory for the next appends. */
void buf_reset(struct buf *b);

/* Makes room for add more bytes (plus the NUL) without changing the content.
 * AB_ELIMIT when len + add would exceed the limit, AB_ENOMEM when the
 * allocation fails; in both cases the buffer is unchanged and buf_err() says why. */
int buf_grow(struct buf *b, size_t add);
/* Appends len bytes (which may contain NULs). Errors as buf_grow. */
int buf_append(struct buf *b, const void *data, size_t len);
int buf_append_str(struct buf *b, const char *s);
/* Appends formatted text. Output that would cross the limit is refused whole
 * (AB_ELIMIT), never truncated; AB_EINVAL for an encoding error in fmt. */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* Drops the first n bytes (all of them when n >= len), for a buffer used as a
 * queue that is written out from the front. Keeps the memory. */
void buf_consume(struct buf *b, size_t n);

/* The content as a C string: "" (never NULL) while nothing was appended. The
 * pointer is valid until the next append, reset, take or free. */
const char *buf_str(const struct buf *b);
size_t buf_len(const struct buf *b);
/* Hands the content to the caller, who frees it; *len (when not NULL) gets its
 * length. NULL when nothing was ever allocated. The buffer is left empty,
 * with the same limit. */
char *buf_take(struct buf *b, size_t *len);
/* Why the last append failed ("request body is larger than 1048576 bytes"),
 * "" when none has. */
const char *buf_err(const struct buf *b);

#endif
