/* HTTP/1.1 request heads on an intercepted connection (issue 12 "Secrets on
 * the way out"): parsed strictly enough that the gateway and the upstream can
 * never disagree on where a request ends (no smuggling past the rewrite), and
 * rewritten with a rule's headers.
 *
 * Pure and bounded: reads only buf[0..len), never more than EGRESS_HEAD_MAX;
 * no allocation. Any thread. tests/fuzz/fuzz_egress_http_head.c. */
#ifndef AGENTBOX_AGENT_EGRESS_HTTP_HEAD_H
#define AGENTBOX_AGENT_EGRESS_HTTP_HEAD_H

#include "agent/egress/policy.h"
#include "agent/egress/secrets.h"

#include <stddef.h>
#include <stdint.h>

#define EGRESS_HEAD_MAX 16384      /* request line and headers, through the blank line */
#define EGRESS_HEAD_FIELDS_MAX 128 /* header lines in one head */
/* A rewritten head: the original plus a rule's headers with secrets filled in. */
#define EGRESS_HEAD_OUT_MAX (EGRESS_HEAD_MAX + EGRESS_HEADERS_MAX * (EGRESS_FILLED_MAX + 160))

enum egress_head_res {
    EGRESS_HEAD_MORE, /* no blank line yet, under the limit */
    EGRESS_HEAD_OK,
    EGRESS_HEAD_BAD, /* h->why says what (a static string) */
};

enum egress_body {
    EGRESS_BODY_NONE,    /* no body: the next byte starts the next request */
    EGRESS_BODY_LENGTH,  /* content_length bytes */
    EGRESS_BODY_CHUNKED, /* Transfer-Encoding: chunked */
    EGRESS_BODY_TUNNEL,  /* Upgrade: everything after the head is opaque */
};

struct egress_head_field {
    uint16_t name, name_len, value, value_len; /* offsets into the head */
};

struct egress_http_head {
    size_t head_len; /* through the blank line */
    size_t line_len; /* the request line with its CRLF */
    enum egress_body body;
    uint64_t content_length;
    char host[EGRESS_HOST_MAX + 1]; /* the Host header, lower case, no port */
    size_t n_fields;
    struct egress_head_field fields[EGRESS_HEAD_FIELDS_MAX];
    const char *why;
};

/* Parses the request head at the start of buf. Refused (BAD): a head over
 * EGRESS_HEAD_MAX, lines not ended by CRLF, a bare CR or LF, folded lines,
 * space before a colon, a method that is not a token, CONNECT, a target that
 * is not origin-form ("/...") or "*", a version other than HTTP/1.0 or 1.1,
 * no Host or two, a Host that is not a DNS name, Content-Length that is not
 * digits or given twice differently, Transfer-Encoding other than exactly
 * "chunked", both of them, more than EGRESS_HEAD_FIELDS_MAX lines. */
enum egress_head_res egress_http_head_parse(const uint8_t *buf, size_t len,
                                            struct egress_http_head *h);

/* Writes the head h parsed from buf into out (cap bytes), with every header
 * the rule names removed and the rule's headers appended, their templates
 * filled from s. A rule may not set Host, Content-Length, Transfer-Encoding,
 * Connection or Upgrade (they decide framing): AB_EINVAL. Fill errors as
 * egress_secrets_fill (err never holds a value). On failure out is wiped. */
int egress_http_head_rewrite(const uint8_t *buf, const struct egress_http_head *h,
                             const struct egress_rule *rule, const struct egress_secrets *s,
                             uint8_t *out, size_t cap, size_t *outlen, char *err, size_t errlen);

/* Chunked bodies: the state of a parser that passes bytes through unchanged
 * and says where the body ends. */
struct egress_chunked {
    int state;
    uint64_t left; /* bytes of chunk data still to pass */
    size_t line;   /* bytes of the current size or trailer line */
    int saw_digit;
};

void egress_chunked_init(struct egress_chunked *c);
/* Scans buf[0..len): returns how many bytes belong to the body (all of len
 * while it goes on), *done set when the body ended within them; AB_EINVAL for
 * a malformed chunk size line or trailer (*why set). */
long egress_chunked_scan(struct egress_chunked *c, const uint8_t *buf, size_t len, int *done,
                         const char **why);

#endif
