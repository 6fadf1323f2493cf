/* A transport that records what a handler answered, for unit tests that
 * drive routes through http_exchange_new without a socket: the status, the
 * body (NUL-terminated; bytes past CAPTURE_BODY_MAX are dropped) and whether
 * the exchange finished. Header-only, like fake_rt.h. */
#ifndef AGENTBOX_TESTS_UNIT_CAPTURE_H
#define AGENTBOX_TESTS_UNIT_CAPTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "agentbox/http.h"

#define CAPTURE_BODY_MAX 16384

struct capture {
    int status;
    char body[CAPTURE_BODY_MAX];
    size_t len;
    bool finished;
};

static int c_head(void *t, int status, const struct http_header *h, int n, int64_t len)
{
    (void)h, (void)n, (void)len;
    ((struct capture *)t)->status = status;
    return 0;
}

static int c_body(void *t, const void *d, size_t n)
{
    struct capture *c = t;
    if (c->len + n < sizeof(c->body)) {
        memcpy(c->body + c->len, d, n);
        c->len += n;
        c->body[c->len] = '\0';
    }
    return 0;
}

static int c_end(void *t)
{
    (void)t;
    return 0;
}

static size_t c_pending(void *t)
{
    (void)t;
    return 0;
}

static void c_pause(void *t, bool p)
{
    (void)t, (void)p;
}

static void c_abort(void *t)
{
    (void)t;
}

static void c_finished(void *t)
{
    ((struct capture *)t)->finished = true;
}

static const struct http_transport_ops cap_ops = {
    .send_head = c_head,
    .send_body = c_body,
    .send_end = c_end,
    .pending = c_pending,
    .pause_body = c_pause,
    .abort = c_abort,
    .finished = c_finished,
};

#endif
