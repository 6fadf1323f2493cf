/* The hub–agent tunnel, protocol v1 (DESIGN §5): frame codec, JSON heads,
 * the per-WebSocket session with its streams and flow control, and the
 * reconnect backoff.
 *
 * Transport independent: nothing here calls libwebsockets. The lws glue
 * feeds each received binary message to tun_session_input() and, in its
 * WRITEABLE callback, writes what tun_session_next_frame() produces. Every
 * function runs on the loop thread that owns the WebSocket; none is
 * thread-safe.
 *
 * Wire format. One frame = one WebSocket binary message:
 *
 *   u8 version (1) | u8 type | u8 flags | u8 reserved | u32 stream id (BE) | payload
 *
 * The payload runs to the end of the message. Flags and reserved are sent as
 * 0 and ignored on receipt (no flag is defined in v1). Stream 0 is the
 * connection: HELLO, WELCOME, REPORT, EVENT and SYNC use it; OPEN, RESPONSE,
 * DATA, END, RESET and WINDOW never do. The agent opens odd stream ids, the
 * hub even ones, each side in increasing order.
 *
 *   HELLO    agent→hub, first frame.  JSON object (cluster, versions, …)
 *   WELCOME  hub→agent, first frame.  JSON object (epoch, report interval, …)
 *   OPEN     JSON {service, method, path, headers, window}
 *   RESPONSE JSON {status, headers, window}
 *   DATA     body bytes, at most 32 KiB
 *   END      empty: the sender's direction is complete
 *   RESET    JSON {code, message}: aborts both directions
 *   WINDOW   u32 BE credit increment, 1 .. 2^31-1
 *   REPORT   agent→hub, JSON object, at most 1 MiB
 *   EVENT    hub→agent, JSON object
 *   SYNC     u32 BE watermark, then u32 BE live stream ids (see below)
 * JSON payloads are objects of at most 64 KiB (REPORT: 1 MiB). `headers` is
 * an array of [name, value] string pairs, so order and repeats survive.
 *
 * Flow control. Each direction of each stream has a credit. The opener's
 * OPEN `window` is what the responder may send before any WINDOW; until the
 * RESPONSE arrives the opener may send TUN_INITIAL_WINDOW bytes of request
 * body; the RESPONSE `window` (never below TUN_INITIAL_WINDOW) is the
 * responder's window counted from the start of the stream. WINDOW frames add
 * credit as the receiver consumes. DATA beyond the credit is a protocol error
 * and the receiver resets that stream with code "flow_control". This caps
 * what one stream can make the peer buffer exactly.
 *
 * Scheduling. Control frames (everything but DATA) go out first, in the order
 * they were queued; DATA goes round-robin over the streams that have both
 * data and credit, one chunk (≤ 32 KiB) per turn, so a stalled stream never
 * blocks the others nor the control traffic. A stream's END is queued behind
 * its last DATA.
 *
 * SYNC (every 60 s, the glue's timer calls tun_session_send_sync). Payload:
 * W = the highest stream id of the *receiver's* parity whose OPEN the sender
 * has processed, then the ids of every stream the sender still holds open.
 * On receipt a side resets (RESET "unknown_stream", and on_reset locally)
 * every stream it holds that the peer did not list and that the peer must
 * know about:
 *   - streams the peer opened (peer parity): all of them, because their OPEN
 *     came before the SYNC on the wire;
 *   - streams we opened with id ≤ W; streams above W may still have their
 *     OPEN in flight and are left alone.
 * This is exact, with no grace round, because of three invariants this
 * session keeps: control frames leave in FIFO order, OPEN ids increase, and
 * a stream's END enters that FIFO only after its last DATA. Any stream the
 * peer closed properly was therefore already closed here (its RESET or END
 * came earlier on the wire); what is left is a leak. Ids the peer lists that
 * we do not hold are the peer's leaks, and our SYNC reaps them there.
 *
 * Protocol errors. A malformed frame, a frame of the wrong direction (e.g. a
 * WELCOME sent to the hub), a handshake out of order, an OPEN of the wrong
 * parity or a non-increasing id, or a frame naming a stream id that was never
 * opened makes tun_session_input() return a negative code; the glue closes
 * the WebSocket with tun_session_error() as reason. Frames for streams that
 * existed but are closed here are ignored (they were in flight). Errors that
 * concern one stream (DATA past the credit, DATA after END, a bad RESPONSE
 * head) reset only that stream.
 *
 * Stream lifetime. A stream is created by tun_stream_open() or announced by
 * on_open(). It closes when both ENDs have passed, or on a RESET either way,
 * a SYNC reap, or tun_session_free(). Once closed no callback comes for it
 * except on_closed, which is delivered later, from tun_session_gc() (called
 * at the start of tun_session_input and tun_session_next_frame), never from
 * inside another callback; the stream memory is freed right after on_closed
 * returns. So a struct tun_stream * stays valid from creation until the
 * on_closed call, and tun_stream_* calls on a closed stream return
 * AB_ECLOSED.
 *
 * Callbacks never run re-entrantly: calling tun_session_input,
 * tun_session_next_frame, tun_session_gc or tun_session_free from inside a
 * callback is refused (AB_EBUSY, or a no-op for gc/free). Inside callbacks
 * the tun_stream_* calls and the send functions are fine.
 *
 * Memory is bounded: at most max_streams streams (live or awaiting
 * on_closed), stream_buf_max queued bytes per stream, buf_max queued DATA
 * and control bytes per session, ctl_max control bytes. */
#ifndef AGENTBOX_TUNNEL_H
#define AGENTBOX_TUNNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- frames ----------------------------------------------------------- */

#define TUN_VERSION 1
#define TUN_HDR_LEN 8
#define TUN_DATA_MAX (32 * 1024)                     /* DATA payload */
#define TUN_CONTROL_MAX (64 * 1024)                  /* JSON payloads and SYNC */
#define TUN_REPORT_MAX (1024 * 1024)                 /* REPORT payload */
#define TUN_FRAME_MAX (TUN_HDR_LEN + TUN_REPORT_MAX) /* a buffer this big fits any frame */
#define TUN_WINDOW_INCREMENT_MAX 0x7fffffffu

enum tun_type {
    TUN_HELLO = 1,
    TUN_WELCOME = 2,
    TUN_OPEN = 3,
    TUN_RESPONSE = 4,
    TUN_DATA = 5,
    TUN_END = 6,
    TUN_RESET = 7,
    TUN_WINDOW = 8,
    TUN_REPORT = 9,
    TUN_EVENT = 10,
    TUN_SYNC = 11,
};
#define TUN_TYPE_MAX TUN_SYNC

/* Why a frame was refused. Negative and distinct from enum ab_err, so they
 * can travel through the same int returns. */
enum tun_frame_err {
    TUN_FRAME_ESHORT = -100,   /* fewer than TUN_HDR_LEN bytes */
    TUN_FRAME_EVERSION = -101, /* version byte is not TUN_VERSION */
    TUN_FRAME_ETYPE = -102,    /* unknown type */
    TUN_FRAME_ETOOBIG = -103,  /* payload over the type's limit */
    TUN_FRAME_ESTREAM0 = -104, /* stream frame on stream 0 */
    TUN_FRAME_ECONNID = -105,  /* connection frame on a non-zero stream */
    TUN_FRAME_EWINDOW = -106,  /* WINDOW payload not 4 bytes, or increment 0 / > 2^31-1 */
    TUN_FRAME_ESYNC = -107,    /* SYNC payload empty or not a multiple of 4 */
    TUN_FRAME_EEND = -108,     /* END with a payload */
    TUN_FRAME_ECAP = -109,     /* encode: the caller's buffer is too small */
};

/* A decoded frame; payload points into the decoded buffer (borrowed). */
struct tun_frame {
    uint8_t type; /* enum tun_type */
    uint8_t flags;
    uint32_t stream_id;
    const uint8_t *payload;
    size_t len;
};

/* Validates and splits one received message. Returns 0 or a tun_frame_err. */
int tun_frame_decode(const void *buf, size_t len, struct tun_frame *out);
/* Checks an 8-byte header for a payload of payload_len bytes still to come
 * (streaming input), by the rules of tun_frame_decode that need no payload
 * byte: version, type, stream id, the type's length. out->payload is NULL.
 * Returns 0 or a tun_frame_err. */
int tun_frame_check_head(const void *hdr, size_t payload_len, struct tun_frame *out);
/* Checks f by the same rules, then writes header + payload into buf. Returns
 * 0 with *out_len set, a tun_frame_err, or TUN_FRAME_ECAP when cap is short. */
int tun_frame_encode(void *buf, size_t cap, const struct tun_frame *f, size_t *out_len);
/* The payload limit for a type (0 for an unknown type). */
size_t tun_frame_max_payload(uint8_t type);
/* True for the types that use stream 0. */
bool tun_type_is_connection(uint8_t type);
/* "DATA", "OPEN", …, or "unknown". */
const char *tun_type_name(uint8_t type);
/* Message for a tun_frame_err, or ab_strerror() for anything else. */
const char *tun_frame_strerror(int err);

/* WINDOW increment of a decoded WINDOW frame. */
uint32_t tun_frame_window(const struct tun_frame *f);
/* SYNC: the watermark and the count of listed ids; id i is tun_frame_sync_id(f, i). */
uint32_t tun_frame_sync_watermark(const struct tun_frame *f);
size_t tun_frame_sync_count(const struct tun_frame *f);
uint32_t tun_frame_sync_id(const struct tun_frame *f, size_t i);

/* ---- JSON heads ------------------------------------------------------- */

#define TUN_MAX_HEADERS 64
#define TUN_HEADER_NAME_MAX 256
#define TUN_HEADER_VALUE_MAX (8 * 1024)
#define TUN_PATH_MAX (8 * 1024)
#define TUN_METHOD_MAX 32
#define TUN_SERVICE_MAX 32
#define TUN_RESET_CODE_MAX 64
#define TUN_RESET_MESSAGE_MAX 1024
#define TUN_INITIAL_WINDOW (256 * 1024)
/* The window the hub and the agent grant per stream, sized for bulk over a
 * relay's three hops. Measured alpha → hub → beta, 256 MiB, Release, on the
 * loaded 2-core machine: 256 KiB 69-88 MB/s (load 11), 512 KiB 113-129 MB/s
 * (load 23), 1 MiB 105-107 MB/s (load 12); 512 KiB keeps what a stalled
 * stream holds on the hub at half of 1 MiB's. */
#define TUN_BULK_WINDOW (512 * 1024)
#define TUN_WINDOW_MIN (4 * 1024)
#define TUN_WINDOW_MAX (16 * 1024 * 1024)

/* Codes for RESET. Peers may send others; treat unknown codes as failures. */
#define TUN_RESET_FLOW_CONTROL "flow_control"     /* DATA beyond the granted credit */
#define TUN_RESET_BUSY "busy"                     /* session buffer or stream count full */
#define TUN_RESET_UNKNOWN_STREAM "unknown_stream" /* reaped by SYNC */
#define TUN_RESET_NOT_FOUND "not_found"           /* no such service */
#define TUN_RESET_PROTOCOL "protocol_error"       /* a frame broke the stream's rules */
#define TUN_RESET_CANCEL "cancel"                 /* the local side gave up */
#define TUN_RESET_TUNNEL_CLOSED "tunnel_closed"   /* local only: the session went away */

struct tun_header {
    const char *name;
    const char *value;
};

/* An OPEN or RESPONSE head. Parsed heads point into json, which they own. */
struct tun_head {
    const char *service; /* OPEN: "e2b", "data", "native", "hub", "relay" */
    const char *method;  /* OPEN */
    const char *path;    /* OPEN: request target, starts with '/' */
    int status;          /* RESPONSE: 100..599 */
    struct tun_header headers[TUN_MAX_HEADERS];
    int nheaders;
    uint32_t window; /* parse: TUN_INITIAL_WINDOW when absent */
    json_t *json;    /* parse: the whole object (extra fields too); NULL when built */
};

/* Serialise a head into a malloc'd JSON text (*out, caller frees), checking
 * every bound; the window field is h->window. Returns 0, AB_EINVAL or
 * AB_ELIMIT with the field named in err. */
int tun_open_head_encode(const struct tun_head *h, char **out, size_t *out_len, char *err,
                         size_t errlen);
int tun_response_head_encode(const struct tun_head *h, char **out, size_t *out_len, char *err,
                             size_t errlen);
/* Parse and validate a received head. On success *out owns a reference
 * (release with tun_head_release); on failure *out holds nothing. */
int tun_open_head_parse(const void *buf, size_t len, struct tun_head *out, char *err,
                        size_t errlen);
int tun_response_head_parse(const void *buf, size_t len, struct tun_head *out, char *err,
                            size_t errlen);
void tun_head_release(struct tun_head *h);

/* RESET payload. The message is cut to TUN_RESET_MESSAGE_MAX when encoding. */
int tun_reset_encode(const char *code, const char *message, char **out, size_t *out_len);
int tun_reset_parse(const void *buf, size_t len, char *code, size_t codelen, char *message,
                    size_t msglen, char *err, size_t errlen);

/* ---- session ---------------------------------------------------------- */

enum tun_role {
    TUN_ROLE_AGENT = 1, /* dials, sends HELLO/REPORT, opens odd ids */
    TUN_ROLE_HUB = 2,   /* accepts, sends WELCOME/EVENT, opens even ids */
};

enum tun_stream_state {
    TUN_STREAM_OPEN = 0,
    TUN_STREAM_HALF_CLOSED_LOCAL,  /* we ended (END may still sit behind queued DATA) */
    TUN_STREAM_HALF_CLOSED_REMOTE, /* the peer ended */
    TUN_STREAM_CLOSED,
};

struct tun_session;
struct tun_stream;

/* All optional. arg is tun_config.arg. JSON and head arguments are borrowed
 * for the duration of the call. */
struct tun_callbacks {
    /* Connection messages (already checked to be JSON objects). */
    void (*on_hello)(struct tun_session *s, json_t *msg, void *arg);   /* hub */
    void (*on_welcome)(struct tun_session *s, json_t *msg, void *arg); /* agent */
    void (*on_report)(struct tun_session *s, json_t *msg, void *arg);  /* hub */
    void (*on_event)(struct tun_session *s, json_t *msg, void *arg);   /* agent */
    /* After a received SYNC was applied; reaped = streams reset by it. */
    void (*on_sync)(struct tun_session *s, unsigned reaped, void *arg);
    /* The peer opened a stream. Accept by keeping it (respond now or later),
     * refuse with tun_stream_reset (e.g. TUN_RESET_NOT_FOUND). Without this
     * callback every OPEN is refused with not_found. */
    void (*on_open)(struct tun_stream *st, const struct tun_head *head, void *arg);
    void (*on_response)(struct tun_stream *st, const struct tun_head *head, void *arg);
    /* Body bytes. Call tun_stream_consumed() once they are processed (may be
     * later); credit only comes back for consumed bytes. */
    void (*on_data)(struct tun_stream *st, const uint8_t *data, size_t len, void *arg);
    void (*on_end)(struct tun_stream *st, void *arg);
    /* The peer reset the stream, or the session did (flow_control,
     * protocol_error, unknown_stream, tunnel_closed). Not called for
     * tun_stream_reset() the glue asked for. */
    void (*on_reset)(struct tun_stream *st, const char *code, const char *message, void *arg);
    /* A WINDOW (or RESPONSE) lifted the send credit above zero. */
    void (*on_window_opened)(struct tun_stream *st, void *arg);
    /* Queued output fell to the low-water mark after a write left it above,
     * or after a write was refused with AB_EBUSY: produce more. */
    void (*on_drain)(struct tun_stream *st, void *arg);
    /* Last call for a stream; free what user points to. */
    void (*on_closed)(struct tun_stream *st, void *arg);
    /* Output became available: ask the transport for a WRITEABLE callback. */
    void (*want_write)(struct tun_session *s, void *arg);
};

/* Zero fields take the defaults in brackets. */
struct tun_config {
    enum tun_role role;
    uint32_t window;       /* receive window granted per stream [TUN_INITIAL_WINDOW],
                              TUN_WINDOW_MIN..TUN_WINDOW_MAX; streams the peer opens
                              get at least TUN_INITIAL_WINDOW */
    uint32_t max_streams;  /* [4096], at most TUN_MAX_STREAMS_LIMIT */
    size_t stream_buf_max; /* queued output per stream [1 MiB]; a write past it: AB_ELIMIT */
    size_t low_water;      /* on_drain threshold per stream [64 KiB] */
    size_t busy_bytes;     /* queued output per session from which peer OPENs get
                              RESET busy [8 MiB] */
    size_t buf_max;        /* queued output per session; writes past it: AB_EBUSY [16 MiB] */
    size_t ctl_max;        /* queued control bytes [4 MiB], at least TUN_FRAME_MAX */
    const struct tun_callbacks *cb; /* copied */
    void *arg;
};

#define TUN_MAX_STREAMS_DEFAULT 4096
#define TUN_MAX_STREAMS_LIMIT 16000        /* so one SYNC lists them all within 64 KiB */
#define TUN_STREAM_HIGH_WATER (256 * 1024) /* producers: stop writing above this pending */

struct tun_stats {
    uint64_t frames_in, frames_out;
    uint64_t bytes_in, bytes_out; /* DATA payload bytes */
    uint64_t resets_in, resets_out;
    uint64_t ignored_frames; /* for streams already closed */
    uint64_t credit_stalls;  /* a stream ran out of credit with data queued */
    uint64_t refused_busy;   /* peer OPENs refused with busy */
    uint64_t reaped;         /* streams reset by SYNC */
    uint32_t streams;        /* live streams */
    size_t buffered;         /* queued output bytes (DATA + control) */
};

/* Creates a session. Returns 0, AB_EINVAL (bad config, message names the
 * field in err) or AB_ENOMEM. The caller owns *out. */
int tun_session_new(const struct tun_config *cfg, struct tun_session **out, char *err,
                    size_t errlen);
/* Resets every live stream locally (on_reset "tunnel_closed", then
 * on_closed), drops queued output and frees. Not from inside a callback. */
void tun_session_free(struct tun_session *s);

/* Consumes one received message. Returns 0, or a negative code when the
 * session must be dropped (tun_frame_err for a malformed frame, AB_EINVAL
 * for a protocol violation, AB_ELIMIT when our control queue overflowed);
 * tun_session_error() says what happened. Once failed, it stays failed. */
int tun_session_input(struct tun_session *s, const void *data, size_t len);
/* The same, for a message that arrives in pieces and whose length is known
 * from its start (an unfragmented WebSocket frame): begin with the length,
 * then feed every byte, in order, in pieces of any size. A DATA frame's
 * payload goes to on_data piece by piece as it arrives, without being
 * reassembled (its checks, stream and credit, run on its header with the
 * whole length; consume what on_data was given); another frame is decoded
 * in place when one piece holds it whole, else reassembled (≤ TUN_FRAME_MAX,
 * refused from its header when over its type's limit).
 * tun_session_input(d, n) is begin(n) + more(d, n). Returns as
 * tun_session_input; begin before the last message ended, or more past the
 * message's length: AB_EINVAL. */
int tun_session_input_begin(struct tun_session *s, size_t msg_len);
int tun_session_input_more(struct tun_session *s, const void *data, size_t len);
/* Writes the next frame into buf (cap ≥ TUN_FRAME_MAX always suffices).
 * Returns 0 with *len > 0 for a frame, 0 with *len == 0 when there is
 * nothing to send, TUN_FRAME_ECAP when the next control frame does not fit
 * (it stays queued), or the session's error once failed. */
int tun_session_next_frame(struct tun_session *s, void *buf, size_t cap, size_t *len);
bool tun_session_has_output(const struct tun_session *s);
/* Frees closed streams after their on_closed. No-op inside a callback. */
void tun_session_gc(struct tun_session *s);

/* Connection messages. The type must fit the role (agent: HELLO, REPORT;
 * hub: WELCOME, EVENT). HELLO/WELCOME once, first; the hub may send WELCOME
 * only after on_hello. msg is borrowed. Returns 0, AB_EINVAL (wrong type,
 * order, or not an object), AB_ELIMIT (too big) or AB_EBUSY (control queue
 * full). */
int tun_session_send_json(struct tun_session *s, enum tun_type type, json_t *msg);
/* Queues a SYNC listing the live streams. Requires the handshake. */
int tun_session_send_sync(struct tun_session *s);
/* True once HELLO/WELCOME have been exchanged (agent: WELCOME received;
 * hub: WELCOME queued). Streams can only be opened then. */
bool tun_session_is_established(const struct tun_session *s);
enum tun_role tun_session_role(const struct tun_session *s);
void *tun_session_arg(const struct tun_session *s);
/* Last error or refusal, for logs and the close reason. Never NULL. */
const char *tun_session_error(const struct tun_session *s);
void tun_session_stats(const struct tun_session *s, struct tun_stats *out);

/* ---- streams ---------------------------------------------------------- */

/* Opens a stream: queues OPEN with head's service, method, path and headers
 * (head->window is ignored: the session grants its configured window).
 * user is the glue's pointer, returned by tun_stream_user(). Returns 0,
 * AB_EBUSY (handshake not done, or control queue full), AB_ELIMIT (stream
 * table full or ids exhausted: reconnect), AB_EINVAL (bad head; see
 * tun_session_error). The stream belongs to the session. */
int tun_stream_open(struct tun_session *s, const struct tun_head *head, void *user,
                    struct tun_stream **out);
/* Answers a peer-opened stream, once, before any DATA or END of ours. */
int tun_stream_respond(struct tun_stream *st, int status, const struct tun_header *h, int n);
/* Copies len bytes to the stream's output. Returns 0, AB_ECLOSED (reset or
 * already ended), AB_EINVAL (a peer-opened stream not yet responded),
 * AB_ELIMIT (over stream_buf_max: keep tun_stream_pending() under
 * TUN_STREAM_HIGH_WATER), AB_EBUSY (session over buf_max; on_drain follows
 * once it has room). */
int tun_stream_write(struct tun_stream *st, const void *data, size_t len);
/* Ends our direction; END leaves after the queued DATA. */
int tun_stream_end(struct tun_stream *st);
/* Aborts both directions now: drops queued output, queues RESET{code,
 * message}. No on_reset follows; on_closed does. */
int tun_stream_reset(struct tun_stream *st, const char *code, const char *message);
/* Reports n received bytes as processed; queues WINDOW once at least half a
 * window is due. n beyond what was received and not yet consumed: AB_EINVAL. */
int tun_stream_consumed(struct tun_stream *st, size_t n);

uint32_t tun_stream_id(const struct tun_stream *st);
struct tun_session *tun_stream_session(const struct tun_stream *st);
void *tun_stream_user(const struct tun_stream *st);
void tun_stream_set_user(struct tun_stream *st, void *user);
enum tun_stream_state tun_stream_state(const struct tun_stream *st);
bool tun_stream_is_open(const struct tun_stream *st); /* not closed */
/* Bytes queued for sending on this stream. */
size_t tun_stream_pending(const struct tun_stream *st);
/* Bytes we may still send before the next WINDOW (may be ≤ 0). */
int64_t tun_stream_credit(const struct tun_stream *st);
/* True for streams this side opened. */
bool tun_stream_is_local(const struct tun_stream *st);

/* ---- reconnect backoff ------------------------------------------------ */

/* Exponential backoff with full jitter: the n-th consecutive failed attempt
 * waits a uniform draw in [0, min(cap, base · 2^n)]. A session that stayed
 * up at least reset_after_ms starts the sequence again. Pure: no clock, no
 * randomness of its own. */
struct tun_backoff {
    uint32_t base_ms;        /* [500] */
    uint32_t cap_ms;         /* [30000] */
    uint32_t reset_after_ms; /* [60000] */
    uint32_t attempt;        /* consecutive failures so far */
};

void tun_backoff_init(struct tun_backoff *b, uint32_t base_ms, uint32_t cap_ms,
                      uint32_t reset_after_ms);
/* Delay before the next attempt. connected_ms is how long the last session
 * was up (0 when the dial failed); rnd is a uniformly random 32-bit value. */
uint32_t tun_backoff_next(struct tun_backoff *b, int64_t connected_ms, uint32_t rnd);
/* The current upper bound of the draw (before jitter), for logs. */
uint32_t tun_backoff_ceiling(const struct tun_backoff *b);

#endif
