/* Fuzzes the HTTP/1.1 request parser: arbitrary bytes, fed whole and then in
 * two pieces split at a data-dependent point, must never crash, and a parse
 * must either fail with a 4xx/5xx status or produce a head whose strings are
 * consistent (path decoded, within limits). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/http.h"
#include "http_parse.h"

struct state {
    struct http_parse *p;
    int heads, completes;
    size_t body;
};

static int on_head(void *arg)
{
    struct state *st = arg;
    const struct http_request *r = http_parse_head(st->p, NULL);
    if (!r->method || !r->target || !r->path || !r->query)
        abort();
    if (strlen(r->target) > HTTP_HEAD_MAX || r->nheaders > HTTP_MAX_HEADERS)
        abort();
    for (int i = 0; i < r->nheaders; i++)
        if (!r->headers[i].name || !r->headers[i].value)
            abort();
    http_header_get(r, "content-length");
    char buf[64];
    http_query_get(r, "path", buf, sizeof(buf));
    st->heads++;
    return 0;
}

static void on_body(void *arg, const char *data, size_t len)
{
    ((struct state *)arg)->body += len;
}

static void on_complete(void *arg)
{
    ((struct state *)arg)->completes++;
}

static const struct http_parse_callbacks cbs = {on_head, on_body, on_complete};

static void run(const uint8_t *data, size_t size, size_t split)
{
    struct state st = {0};
    st.p = http_parse_new(HTTP_PARSE_REQUEST, 0, &cbs, &st);
    size_t off = 0;
    size_t stops[2] = {split, size};
    for (int k = 0; k < 2 && off < size; k++) {
        while (off < stops[k]) {
            int status = 0;
            const char *why = NULL;
            ssize_t n =
                http_parse_feed(st.p, (const char *)data + off, stops[k] - off, &status, &why);
            if (n < 0) {
                if (status < 400 || status > 599 || !why)
                    abort();
                http_parse_free(st.p);
                return;
            }
            off += (size_t)n;
            if (http_parse_is_paused(st.p))
                http_parse_next(st.p); /* pipelined: go on with the next message */
            else if (n == 0)
                break;
        }
    }
    if (st.completes > st.heads)
        abort();
    http_parse_free(st.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run(data, size, size);
    if (size > 1)
        run(data, size, data[0] % size);
    return 0;
}
