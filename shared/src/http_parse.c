/* libhttp-parser glue: see http_parse.h. The whole head (target + header
 * names and values) must fit in head_max bytes, else 431. */
#include "http_parse.h"
#include "agentbox/common.h"
#include "agentbox/pct.h"

#include <http_parser.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct http_parse {
    http_parser hp;
    http_parser_settings settings;
    enum http_parse_kind kind;
    const struct http_parse_callbacks *cb;
    void *arg;

    char *arena; /* head_max bytes: target, names, values, decoded path */
    size_t arena_cap, arena_len;
    bool too_big;  /* head over head_max → 431 */
    bool bad_head; /* e.g. too many headers, bad escape → 400 */
    const char *bad_why;
    bool head_done, in_message, paused_at_end;
    int last_was_value; /* 0 none, 1 field, 2 value: folds split callbacks */
    size_t cur_off;     /* arena offset of the piece being appended to */
    size_t target_off;
    bool have_target;
    size_t name_off[HTTP_MAX_HEADERS], value_off[HTTP_MAX_HEADERS];
    int nheaders;

    struct http_request req;
    int status;
};

/* Appends to the arena piece that started at cur_off; pieces are NUL-terminated. */
/* The configured head limit; the arena has half as much again for the decoded path. */
static size_t head_limit(struct http_parse *p)
{
    return p->arena_cap - p->arena_cap / 3;
}

static int arena_append(struct http_parse *p, const char *at, size_t len, bool start)
{
    if (start) {
        if (p->arena_len + 1 > p->arena_cap) {
            p->too_big = true;
            return -1;
        }
        p->cur_off = p->arena_len;
        p->arena[p->arena_len++] = '\0';
    }
    /* the current piece is the last one: overwrite its NUL and re-terminate */
    if (p->arena_len + len > p->arena_cap) {
        p->too_big = true;
        return -1;
    }
    memcpy(p->arena + p->arena_len - 1, at, len);
    p->arena_len += len;
    p->arena[p->arena_len - 1] = '\0';
    return 0;
}

static struct http_parse *self(http_parser *hp)
{
    return hp->data;
}

static int on_message_begin(http_parser *hp)
{
    struct http_parse *p = self(hp);
    p->in_message = true;
    return 0;
}

static int on_url(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = self(hp);
    bool start = !p->have_target;
    p->have_target = true;
    if (start)
        p->target_off = p->arena_len;
    return arena_append(p, at, len, start);
}

static int on_status(http_parser *hp, const char *at, size_t len)
{
    return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = self(hp);
    bool start = p->last_was_value != 1;
    if (start) {
        if (p->nheaders >= HTTP_MAX_HEADERS) {
            p->bad_head = true;
            p->bad_why = "too many headers (at most 64)";
            return -1;
        }
        p->name_off[p->nheaders] = p->arena_len;
        p->value_off[p->nheaders] = 0;
        p->nheaders++;
    }
    p->last_was_value = 1;
    return arena_append(p, at, len, start);
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = self(hp);
    bool start = p->last_was_value != 2;
    if (start)
        p->value_off[p->nheaders - 1] = p->arena_len;
    p->last_was_value = 2;
    return arena_append(p, at, len, start);
}

static int on_headers_complete(http_parser *hp)
{
    struct http_parse *p = self(hp);
    struct http_request *r = &p->req;
    memset(r, 0, sizeof(*r));
    if (p->arena_len > head_limit(p)) {
        p->too_big = true;
        return -1;
    }
    for (int i = 0; i < p->nheaders; i++) {
        r->headers[i].name = p->arena + p->name_off[i];
        r->headers[i].value = p->value_off[i] ? p->arena + p->value_off[i] : "";
    }
    r->nheaders = p->nheaders;
    if (p->kind == HTTP_PARSE_REQUEST) {
        r->method = http_method_str((enum http_method)hp->method);
        r->target = p->have_target ? p->arena + p->target_off : "/";
        const char *q = strchr(r->target, '?');
        size_t plen = q ? (size_t)(q - r->target) : strlen(r->target);
        r->query = q ? q + 1 : "";
        /* decoded path goes after everything else in the arena */
        size_t room = p->arena_cap - p->arena_len;
        char *dst = p->arena + p->arena_len;
        size_t n;
        int rc = pct_decode(r->target, plen, dst, room, 0, &n);
        if (rc == AB_ELIMIT) {
            p->too_big = true;
            return -1;
        }
        if (rc != 0) {
            p->bad_head = true;
            p->bad_why = "request path has a malformed percent-escape or a NUL byte";
            return -1;
        }
        p->arena_len += n + 1;
        r->path = dst;
        if (r->path[0] != '/' && strcmp(r->method, "OPTIONS") != 0) {
            p->bad_head = true;
            p->bad_why = "request target must start with '/'";
            return -1;
        }
    } else {
        p->status = hp->status_code;
    }
    if (hp->flags & F_CHUNKED)
        r->content_length = -1;
    else if (hp->content_length != ULLONG_MAX)
        r->content_length = (int64_t)hp->content_length;
    else
        r->content_length = p->kind == HTTP_PARSE_REQUEST ? 0 : -1;
    p->head_done = true;
    int rc = p->cb->on_head ? p->cb->on_head(p->arg) : 0;
    return rc == 1 ? 1 : 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    struct http_parse *p = self(hp);
    if (p->cb->on_body)
        p->cb->on_body(p->arg, at, len);
    return 0;
}

static int on_message_complete(http_parser *hp)
{
    struct http_parse *p = self(hp);
    p->in_message = false;
    p->paused_at_end = true;
    http_parser_pause(hp, 1);
    if (p->cb->on_complete)
        p->cb->on_complete(p->arg);
    return 0;
}

static void reset(struct http_parse *p)
{
    p->arena_len = 0;
    p->too_big = p->bad_head = false;
    p->bad_why = NULL;
    p->head_done = p->in_message = p->paused_at_end = false;
    p->last_was_value = 0;
    p->have_target = false;
    p->nheaders = 0;
    p->status = 0;
    memset(&p->req, 0, sizeof(p->req));
}

struct http_parse *http_parse_new(enum http_parse_kind kind, size_t head_max,
                                  const struct http_parse_callbacks *cb, void *arg)
{
    struct http_parse *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->arena_cap = head_max ? head_max : HTTP_HEAD_MAX;
    /* room for the decoded path copy as well */
    p->arena_cap += p->arena_cap / 2;
    p->arena = malloc(p->arena_cap);
    if (!p->arena) {
        free(p);
        return NULL;
    }
    p->kind = kind;
    p->cb = cb;
    p->arg = arg;
    http_parser_settings_init(&p->settings);
    p->settings.on_message_begin = on_message_begin;
    p->settings.on_url = on_url;
    p->settings.on_status = on_status;
    p->settings.on_header_field = on_header_field;
    p->settings.on_header_value = on_header_value;
    p->settings.on_headers_complete = on_headers_complete;
    p->settings.on_body = on_body;
    p->settings.on_message_complete = on_message_complete;
    http_parser_init(&p->hp, kind == HTTP_PARSE_REQUEST ? HTTP_REQUEST : HTTP_RESPONSE);
    p->hp.data = p;
    reset(p);
    return p;
}

void http_parse_free(struct http_parse *p)
{
    if (!p)
        return;
    free(p->arena);
    free(p);
}

ssize_t http_parse_feed(struct http_parse *p, const char *data, size_t len, int *status,
                        const char **why)
{
    if (p->paused_at_end)
        return 0;
    size_t n = http_parser_execute(&p->hp, &p->settings, data, len);
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    if (e == HPE_OK || e == HPE_PAUSED) {
        /* head still incomplete and already over the limit (no callback fired yet) */
        if (!p->head_done && p->in_message && p->arena_len > head_limit(p)) {
            *status = 431;
            *why = "request head is larger than 16 KiB; send fewer or shorter headers";
            return -1;
        }
        return (ssize_t)n;
    }
    if (p->too_big || p->arena_len > head_limit(p)) {
        *status = 431;
        *why = "request head is larger than 16 KiB; send fewer or shorter headers";
    } else if (p->bad_head) {
        *status = 400;
        *why = p->bad_why;
    } else if (e == HPE_INVALID_VERSION) {
        *status = 505;
        *why = "only HTTP/1.x is supported";
    } else if (e == HPE_INVALID_METHOD) {
        *status = 501;
        *why = "unknown HTTP method";
    } else {
        *status = 400;
        *why = http_errno_description(e);
    }
    return -1;
}

int http_parse_eof(struct http_parse *p)
{
    if (p->paused_at_end)
        return 0;
    http_parser_execute(&p->hp, &p->settings, NULL, 0);
    if (HTTP_PARSER_ERRNO(&p->hp) != HPE_OK && HTTP_PARSER_ERRNO(&p->hp) != HPE_PAUSED)
        return -1;
    return p->in_message ? -1 : 0;
}

void http_parse_next(struct http_parse *p)
{
    reset(p);
    http_parser_pause(&p->hp, 0);
}

bool http_parse_is_paused(struct http_parse *p)
{
    return p->paused_at_end;
}

bool http_parse_in_message(struct http_parse *p)
{
    return p->in_message;
}

const struct http_request *http_parse_head(struct http_parse *p, int *status)
{
    if (status)
        *status = p->status;
    return &p->req;
}

bool http_parse_keep_alive(struct http_parse *p)
{
    return http_should_keep_alive(&p->hp) != 0;
}
