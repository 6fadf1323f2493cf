/* Private: an HTTP/1.1 message parser over libhttp-parser that collects the
 * head into one bounded arena. Kept apart from libwebsockets.h (DESIGN §4):
 * this header exposes no http_parser type. */
#ifndef AGENTBOX_HTTP_PARSE_H
#define AGENTBOX_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agentbox/http.h"

enum http_parse_kind { HTTP_PARSE_REQUEST, HTTP_PARSE_RESPONSE };

struct http_parse;

struct http_parse_callbacks {
    /* The head is complete: read it with http_parse_head(). Return 0 to go on,
     * 1 (responses only) when the message has no body (HEAD request). */
    int (*on_head)(void *arg);
    void (*on_body)(void *arg, const char *data, size_t len);
    /* The message is complete; the parser pauses itself until http_parse_next. */
    void (*on_complete)(void *arg);
};

struct http_parse *http_parse_new(enum http_parse_kind kind, size_t head_max,
                                  const struct http_parse_callbacks *cb, void *arg);
void http_parse_free(struct http_parse *p);

/* Feeds bytes; returns how many were consumed (fewer than len when the
 * parser paused at the end of a message), or -1 on a malformed message, with
 * *status set to the HTTP status to answer (400, 431, 501, 505) and *why to
 * a message. */
ssize_t http_parse_feed(struct http_parse *p, const char *data, size_t len, int *status,
                        const char **why);
/* Tells the parser the connection closed (ends close-delimited responses).
 * Returns 0, or -1 when a message was cut short. */
int http_parse_eof(struct http_parse *p);
/* After on_complete: prepare for the next message on the connection. */
void http_parse_next(struct http_parse *p);
bool http_parse_is_paused(struct http_parse *p);
/* True while a message has started but not completed. */
bool http_parse_in_message(struct http_parse *p);

/* The head of the current message (valid until http_parse_next). For a
 * request: method, target, path (decoded), query, headers, content_length.
 * For a response, status holds the code. */
const struct http_request *http_parse_head(struct http_parse *p, int *status);
bool http_parse_keep_alive(struct http_parse *p);

#endif
