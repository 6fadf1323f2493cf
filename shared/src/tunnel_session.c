/* One tunnel session per WebSocket: the stream table, per-stream credit in
 * both directions, the output scheduler (control FIFO first, then DATA
 * round-robin) and SYNC reaping. The rules are in agentbox/tunnel.h; this
 * file keeps the invariants they rely on:
 *   - control frames leave in the order they were queued;
 *   - OPEN ids increase;
 *   - a stream's END enters the control FIFO only once its DATA is gone;
 *   - callbacks never nest, and a stream is freed only by gc, after its
 *     on_closed, outside any callback. */
#include "agentbox/tunnel.h"
#include "agentbox/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_BUF_DEFAULT (1024 * 1024)
#define LOW_WATER_DEFAULT (64 * 1024)
#define BUSY_DEFAULT (8 * 1024 * 1024)
#define BUF_MAX_DEFAULT (16 * 1024 * 1024)
#define CTL_MAX_DEFAULT (4 * 1024 * 1024)
#define STREAM_BUF_MIN_ALLOC (16 * 1024)
#define STREAM_BUF_KEEP (64 * 1024) /* an emptied buffer above this is freed */

/* Intrusive circular list with a sentinel; an unlinked node points to itself. */
struct tun_link {
    struct tun_link *prev, *next;
};

#define LINK_OWNER(ptr, field)                                                                     \
    ((struct tun_stream *)((char *)(ptr)-offsetof(struct tun_stream, field)))

static void link_init(struct tun_link *l)
{
    l->prev = l->next = l;
}

static bool link_is_linked(const struct tun_link *l)
{
    return l->next != l;
}

static void link_push_back(struct tun_link *head, struct tun_link *l)
{
    l->prev = head->prev;
    l->next = head;
    head->prev->next = l;
    head->prev = l;
}

static void link_remove(struct tun_link *l)
{
    l->prev->next = l->next;
    l->next->prev = l->prev;
    link_init(l);
}

/* A queued control frame, already encoded. */
struct tun_ctl {
    struct tun_ctl *next;
    size_t len;
    uint8_t bytes[];
};

struct tun_stream {
    struct tun_session *s;
    uint32_t id;
    void *user;
    bool local;     /* we opened it */
    bool responded; /* local: RESPONSE received; remote: RESPONSE queued */
    bool end_requested;
    bool end_sent; /* END is in the control FIFO */
    bool remote_end;
    bool closed;
    bool drain_wanted;
    bool notify_reset; /* a batch close still owes on_reset */
    uint32_t sync_gen;
    int64_t send_credit;
    int64_t recv_credit;     /* what the peer may still send */
    uint32_t recv_base;      /* our window for this stream: WINDOW threshold */
    size_t unconsumed;       /* received, not yet consumed */
    size_t consumed_pending; /* consumed, not yet granted back */
    uint8_t *buf;            /* output bytes [off, off + len) */
    size_t off, len, cap;
    struct tun_stream *hnext; /* hash chain */
    struct tun_link link;     /* live list, then dead list */
    struct tun_link rlink;    /* ready for DATA */
    struct tun_link blink;    /* refused a write with AB_EBUSY */
};

struct tun_session {
    struct tun_config cfg;
    struct tun_callbacks cb;
    bool hello_done; /* agent: HELLO queued; hub: HELLO received */
    bool established;
    bool closing; /* tun_session_free is running: no new streams */
    int failed;
    int in_cb;
    uint64_t next_id;     /* next id we open; > UINT32_MAX when exhausted */
    uint32_t peer_max_id; /* highest peer OPEN processed */
    uint32_t sync_gen;
    struct tun_stream **buckets;
    uint32_t nbuckets;
    struct tun_link live, ready, blocked, dead;
    uint32_t nstreams; /* live + dead: what the table holds */
    uint32_t nlive;
    uint32_t nblocked;
    struct tun_ctl *ctl_head, *ctl_tail;
    size_t ctl_bytes;
    size_t data_bytes;
    struct tun_stats stats;
    /* streaming input (tun_session_input_begin/more): the message being read */
    bool in_active;
    uint8_t in_mode; /* IN_HEAD, IN_DATA, IN_SKIP, IN_ASM */
    uint8_t in_hdr[TUN_HDR_LEN];
    uint8_t in_hlen;
    size_t in_len;    /* the whole message */
    size_t in_left;   /* its bytes still to come */
    uint32_t in_id;   /* IN_DATA: the stream (looked up per piece: it may close meanwhile) */
    uint8_t *asm_buf; /* IN_ASM: the frame so far; freed when over STREAM_BUF_KEEP */
    size_t asm_len, asm_cap;
    char err[256];
};

enum { IN_HEAD, IN_DATA, IN_SKIP, IN_ASM };

#define CALL(s, fn, ...)                                                                           \
    do {                                                                                           \
        if ((s)->cb.fn != NULL) {                                                                  \
            (s)->in_cb++;                                                                          \
            (s)->cb.fn(__VA_ARGS__);                                                               \
            (s)->in_cb--;                                                                          \
        }                                                                                          \
    } while (0)

static void set_error(struct tun_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_error(struct tun_session *s, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(s->err, sizeof(s->err), fmt, ap);
    va_end(ap);
}

static int session_fail(struct tun_session *s, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The session is unusable from here on; the first reason sticks. */
static int session_fail(struct tun_session *s, int rc, const char *fmt, ...)
{
    va_list ap;

    if (s->failed != 0)
        return s->failed;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof(s->err), fmt, ap);
    va_end(ap);
    s->failed = rc;
    return rc;
}

static bool is_local_id(const struct tun_session *s, uint32_t id)
{
    return (id & 1u) == (s->cfg.role == TUN_ROLE_AGENT ? 1u : 0u);
}

static const char *peer_name(const struct tun_session *s)
{
    return s->cfg.role == TUN_ROLE_AGENT ? "hub" : "agent";
}

static size_t buffered(const struct tun_session *s)
{
    return s->data_bytes + s->ctl_bytes;
}

static void wake(struct tun_session *s)
{
    CALL(s, want_write, s, s->cfg.arg);
}

/* ---- stream table ---------------------------------------------------- */

static struct tun_stream *lookup(const struct tun_session *s, uint32_t id)
{
    struct tun_stream *st = s->buckets[id & (s->nbuckets - 1)];

    while (st != NULL && st->id != id)
        st = st->hnext;
    return st;
}

static void hash_insert(struct tun_session *s, struct tun_stream *st)
{
    struct tun_stream **b = &s->buckets[st->id & (s->nbuckets - 1)];

    st->hnext = *b;
    *b = st;
}

static void hash_remove(struct tun_session *s, struct tun_stream *st)
{
    struct tun_stream **p = &s->buckets[st->id & (s->nbuckets - 1)];

    while (*p != NULL && *p != st)
        p = &(*p)->hnext;
    if (*p == st)
        *p = st->hnext;
    st->hnext = NULL;
}

static struct tun_stream *stream_new(struct tun_session *s, uint32_t id, bool local)
{
    struct tun_stream *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return NULL;
    st->s = s;
    st->id = id;
    st->local = local;
    link_init(&st->link);
    link_init(&st->rlink);
    link_init(&st->blink);
    hash_insert(s, st);
    link_push_back(&s->live, &st->link);
    s->nstreams++;
    s->nlive++;
    return st;
}

/* ---- control FIFO ---------------------------------------------------- */

/* Queues one control frame. AB_EBUSY when the control queue is full. */
static int ctl_push(struct tun_session *s, uint8_t type, uint32_t id, const void *payload,
                    size_t len)
{
    struct tun_frame f = {.type = type, .stream_id = id, .payload = payload, .len = len};
    struct tun_ctl *c;
    size_t flen = TUN_HDR_LEN + len;
    int rc;

    if (s->ctl_bytes + flen > s->cfg.ctl_max) {
        set_error(s, "control queue full (%zu bytes queued, limit %zu): the peer is not reading",
                  s->ctl_bytes, s->cfg.ctl_max);
        return AB_EBUSY;
    }
    c = malloc(sizeof(*c) + flen);
    if (c == NULL)
        return AB_ENOMEM;
    rc = tun_frame_encode(c->bytes, flen, &f, &c->len);
    if (rc < 0) {
        free(c);
        set_error(s, "cannot encode %s: %s", tun_type_name(type), tun_frame_strerror(rc));
        return AB_EINVAL;
    }
    c->next = NULL;
    if (s->ctl_tail != NULL)
        s->ctl_tail->next = c;
    else
        s->ctl_head = c;
    s->ctl_tail = c;
    s->ctl_bytes += c->len;
    wake(s);
    return 0;
}

/* Control frames the protocol owes the peer: failing to queue one breaks
 * the session, since credit or stream state would diverge. */
static void ctl_push_owed(struct tun_session *s, uint8_t type, uint32_t id, const void *payload,
                          size_t len)
{
    int rc = ctl_push(s, type, id, payload, len);

    if (rc < 0)
        session_fail(s, rc == AB_EBUSY ? AB_ELIMIT : rc, "cannot queue %s for stream %u: %s",
                     tun_type_name(type), id, s->err);
}

static void queue_reset(struct tun_session *s, uint32_t id, const char *code, const char *msg)
{
    char *text;
    size_t len;

    if (tun_reset_encode(code, msg, &text, &len) < 0) {
        session_fail(s, AB_ENOMEM, "cannot encode RESET for stream %u", id);
        return;
    }
    ctl_push_owed(s, TUN_RESET, id, text, len);
    free(text);
    s->stats.resets_out++;
}

static void queue_window(struct tun_session *s, uint32_t id, uint32_t inc)
{
    uint8_t p[4] = {(uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8), (uint8_t)inc};

    ctl_push_owed(s, TUN_WINDOW, id, p, sizeof(p));
}

/* ---- stream state ---------------------------------------------------- */

static bool stream_is_ready(const struct tun_stream *st)
{
    return !st->closed && st->len > 0 && st->send_credit > 0 && (st->local || st->responded);
}

static void update_ready(struct tun_stream *st)
{
    struct tun_session *s = st->s;

    if (stream_is_ready(st)) {
        if (!link_is_linked(&st->rlink)) {
            link_push_back(&s->ready, &st->rlink);
            wake(s);
        }
    } else if (link_is_linked(&st->rlink)) {
        link_remove(&st->rlink);
    }
}

static void unblock(struct tun_stream *st)
{
    if (link_is_linked(&st->blink)) {
        link_remove(&st->blink);
        st->s->nblocked--;
    }
}

/* Moves a stream to the dead list. No callback here: callers decide. */
static void stream_close(struct tun_stream *st)
{
    struct tun_session *s = st->s;

    if (st->closed)
        return;
    st->closed = true;
    s->data_bytes -= st->len;
    free(st->buf);
    st->buf = NULL;
    st->off = st->len = st->cap = 0;
    st->drain_wanted = false;
    if (link_is_linked(&st->rlink))
        link_remove(&st->rlink);
    unblock(st);
    hash_remove(s, st);
    link_remove(&st->link);
    link_push_back(&s->dead, &st->link);
    s->nlive--;
}

static void maybe_finish(struct tun_stream *st)
{
    if (!st->closed && st->end_sent && st->remote_end)
        stream_close(st);
}

/* A reset the session decides (not the glue): tell the peer and the glue. */
static void session_reset_stream(struct tun_stream *st, const char *code, const char *msg)
{
    struct tun_session *s = st->s;

    queue_reset(s, st->id, code, msg);
    stream_close(st);
    CALL(s, on_reset, st, code, msg, s->cfg.arg);
}

static void send_end(struct tun_stream *st)
{
    ctl_push_owed(st->s, TUN_END, st->id, NULL, 0);
    st->end_sent = true;
    maybe_finish(st);
}

/* After output left the session: streams refused with AB_EBUSY may go on
 * once a quarter of buf_max is free again. */
static void after_room(struct tun_session *s)
{
    /* At most one turn per stream blocked now: an on_drain that writes too
     * much blocks again and waits for the next room. */
    for (uint32_t n = s->nblocked;
         n > 0 && s->nblocked > 0 && buffered(s) <= s->cfg.buf_max - s->cfg.buf_max / 4; n--) {
        struct tun_stream *st = LINK_OWNER(s->blocked.next, blink);
        unblock(st);
        CALL(s, on_drain, st, s->cfg.arg);
    }
}

/* ---- lifecycle ------------------------------------------------------- */

int tun_session_new(const struct tun_config *cfg, struct tun_session **out, char *err,
                    size_t errlen)
{
    struct tun_session *s;
    struct tun_config c = *cfg;
    uint32_t nb = 16;

    *out = NULL;
#define REFUSE(...)                                                                                \
    do {                                                                                           \
        if (err != NULL && errlen > 0)                                                             \
            snprintf(err, errlen, __VA_ARGS__);                                                    \
        return AB_EINVAL;                                                                          \
    } while (0)
    if (c.role != TUN_ROLE_AGENT && c.role != TUN_ROLE_HUB)
        REFUSE("tunnel role must be agent or hub");
    if (c.window == 0)
        c.window = TUN_INITIAL_WINDOW;
    if (c.window < TUN_WINDOW_MIN || c.window > TUN_WINDOW_MAX)
        REFUSE("tunnel window must be between %d and %d bytes", TUN_WINDOW_MIN, TUN_WINDOW_MAX);
    if (c.max_streams == 0)
        c.max_streams = TUN_MAX_STREAMS_DEFAULT;
    if (c.max_streams > TUN_MAX_STREAMS_LIMIT)
        REFUSE("tunnel max_streams must be at most %d", TUN_MAX_STREAMS_LIMIT);
    if (c.stream_buf_max == 0)
        c.stream_buf_max = STREAM_BUF_DEFAULT;
    if (c.low_water == 0)
        c.low_water = AB_MIN((size_t)LOW_WATER_DEFAULT, c.stream_buf_max / 2);
    if (c.low_water >= c.stream_buf_max)
        REFUSE("tunnel low_water must be below stream_buf_max (%zu)", c.stream_buf_max);
    if (c.buf_max == 0)
        c.buf_max = BUF_MAX_DEFAULT;
    if (c.busy_bytes == 0)
        c.busy_bytes = AB_MIN((size_t)BUSY_DEFAULT, c.buf_max);
    if (c.busy_bytes > c.buf_max)
        REFUSE("tunnel busy_bytes must not exceed buf_max (%zu)", c.buf_max);
    if (c.ctl_max == 0)
        c.ctl_max = CTL_MAX_DEFAULT;
    if (c.ctl_max < TUN_FRAME_MAX)
        REFUSE("tunnel ctl_max must be at least %d bytes (one REPORT)", TUN_FRAME_MAX);
#undef REFUSE

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory creating a tunnel session");
        return AB_ENOMEM;
    }
    /* Chains of about four when the table is full: a hub holds thousands
     * of sessions, most of them nearly idle. */
    while (nb < c.max_streams / 4)
        nb <<= 1;
    s->buckets = calloc(nb, sizeof(*s->buckets));
    if (s->buckets == NULL) {
        free(s);
        if (err != NULL && errlen > 0)
            snprintf(err, errlen, "out of memory creating a tunnel session of %zu streams",
                     (size_t)c.max_streams);
        return AB_ENOMEM;
    }
    s->nbuckets = nb;
    if (c.cb != NULL)
        s->cb = *c.cb;
    c.cb = NULL;
    s->cfg = c;
    s->next_id = c.role == TUN_ROLE_AGENT ? 1 : 2;
    link_init(&s->live);
    link_init(&s->ready);
    link_init(&s->blocked);
    link_init(&s->dead);
    ab_strlcpy(s->err, "no error", sizeof(s->err));
    *out = s;
    return 0;
}

void tun_session_gc(struct tun_session *s)
{
    if (s == NULL || s->in_cb > 0)
        return;
    while (link_is_linked(&s->dead)) {
        struct tun_stream *st = LINK_OWNER(s->dead.next, link);
        link_remove(&st->link);
        CALL(s, on_closed, st, s->cfg.arg);
        free(st->buf);
        free(st);
        s->nstreams--;
    }
}

/* Closes every live stream that matches, then tells the glue with on_reset;
 * in two passes, because an on_reset may close other streams. */
static unsigned close_batch(struct tun_session *s, bool (*match)(struct tun_stream *, void *),
                            void *arg, bool tell_peer, const char *code, const char *msg)
{
    struct tun_link *l, *next;
    unsigned n = 0;

    for (l = s->live.next; l != &s->live; l = next) {
        struct tun_stream *st = LINK_OWNER(l, link);
        next = l->next;
        if (!match(st, arg))
            continue;
        if (tell_peer)
            queue_reset(s, st->id, code, msg);
        stream_close(st);
        st->notify_reset = true;
        n++;
    }
    /* Streams closed by the callbacks below are appended behind; nothing
     * leaves the dead list outside gc, which cannot run in a callback. */
    for (l = s->dead.next; l != &s->dead; l = l->next) {
        struct tun_stream *st = LINK_OWNER(l, link);
        if (st->notify_reset) {
            st->notify_reset = false;
            CALL(s, on_reset, st, code, msg, s->cfg.arg);
        }
    }
    return n;
}

static bool match_all(struct tun_stream *st, void *arg)
{
    return true;
}

void tun_session_free(struct tun_session *s)
{
    if (s == NULL || s->in_cb > 0)
        return;
    s->closing = true;
    close_batch(s, match_all, NULL, false, TUN_RESET_TUNNEL_CLOSED, "the tunnel session closed");
    tun_session_gc(s);
    while (s->ctl_head != NULL) {
        struct tun_ctl *c = s->ctl_head;
        s->ctl_head = c->next;
        free(c);
    }
    free(s->asm_buf);
    free(s->buckets);
    free(s);
}

/* ---- input ----------------------------------------------------------- */

static json_t *load_message(struct tun_session *s, const struct tun_frame *f)
{
    json_error_t jerr;
    json_t *msg = json_loadb((const char *)f->payload, f->len, JSON_REJECT_DUPLICATES, &jerr);

    if (msg == NULL) {
        session_fail(s, AB_EINVAL, "%s payload is not valid JSON: %s", tun_type_name(f->type),
                     jerr.text);
        return NULL;
    }
    if (!json_is_object(msg)) {
        json_decref(msg);
        session_fail(s, AB_EINVAL, "%s payload must be a JSON object", tun_type_name(f->type));
        return NULL;
    }
    return msg;
}

static void on_connection_message(struct tun_session *s, const struct tun_frame *f)
{
    json_t *msg;

    if ((f->type == TUN_REPORT && s->cfg.role != TUN_ROLE_HUB) ||
        (f->type == TUN_EVENT && s->cfg.role != TUN_ROLE_AGENT)) {
        session_fail(s, AB_EINVAL, "%s is not allowed from the %s", tun_type_name(f->type),
                     peer_name(s));
        return;
    }
    msg = load_message(s, f);
    if (msg == NULL)
        return;
    switch (f->type) {
    case TUN_HELLO:
        s->hello_done = true;
        CALL(s, on_hello, s, msg, s->cfg.arg);
        break;
    case TUN_WELCOME:
        s->established = true;
        CALL(s, on_welcome, s, msg, s->cfg.arg);
        break;
    case TUN_REPORT:
        CALL(s, on_report, s, msg, s->cfg.arg);
        break;
    case TUN_EVENT:
        CALL(s, on_event, s, msg, s->cfg.arg);
        break;
    }
    json_decref(msg);
}

static void on_open_frame(struct tun_session *s, const struct tun_frame *f)
{
    struct tun_head head;
    struct tun_stream *st;
    char err[200];
    uint32_t id = f->stream_id;

    if (is_local_id(s, id)) {
        session_fail(s, AB_EINVAL, "OPEN on stream %u: ids of that parity are ours to open", id);
        return;
    }
    if (id <= s->peer_max_id) {
        session_fail(s, AB_EINVAL, "OPEN on stream %u: ids must increase (last was %u)", id,
                     s->peer_max_id);
        return;
    }
    s->peer_max_id = id;
    if (tun_open_head_parse(f->payload, f->len, &head, err, sizeof(err)) < 0) {
        queue_reset(s, id, TUN_RESET_PROTOCOL, err);
        return;
    }
    if (s->cb.on_open == NULL) {
        queue_reset(s, id, TUN_RESET_NOT_FOUND, "this side serves no streams");
        goto done;
    }
    if (s->nstreams >= s->cfg.max_streams) {
        s->stats.refused_busy++;
        snprintf(err, sizeof(err), "stream table full (%u streams)", s->cfg.max_streams);
        queue_reset(s, id, TUN_RESET_BUSY, err);
        goto done;
    }
    if (buffered(s) >= s->cfg.busy_bytes) {
        s->stats.refused_busy++;
        snprintf(err, sizeof(err), "tunnel has %zu bytes queued, over its %zu-byte threshold",
                 buffered(s), s->cfg.busy_bytes);
        queue_reset(s, id, TUN_RESET_BUSY, err);
        goto done;
    }
    st = stream_new(s, id, false);
    if (st == NULL) {
        queue_reset(s, id, TUN_RESET_BUSY, "out of memory");
        goto done;
    }
    st->send_credit = head.window;
    st->recv_credit = TUN_INITIAL_WINDOW;
    st->recv_base = TUN_INITIAL_WINDOW;
    CALL(s, on_open, st, &head, s->cfg.arg);
done:
    tun_head_release(&head);
}

/* The stream a stream frame names; NULL when the frame is to be ignored
 * (stream closed here) or the session failed (id never opened). */
static struct tun_stream *frame_stream(struct tun_session *s, const struct tun_frame *f)
{
    struct tun_stream *st = lookup(s, f->stream_id);
    uint32_t id = f->stream_id;

    if (st != NULL)
        return st;
    if (is_local_id(s, id) ? id >= s->next_id : id > s->peer_max_id) {
        session_fail(s, AB_EINVAL, "%s on stream %u, which was never opened",
                     tun_type_name(f->type), id);
        return NULL;
    }
    s->stats.ignored_frames++;
    return NULL;
}

static void stream_protocol_error(struct tun_stream *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void stream_protocol_error(struct tun_stream *st, const char *fmt, ...)
{
    char msg[200];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    session_reset_stream(st, TUN_RESET_PROTOCOL, msg);
}

static void on_response_frame(struct tun_session *s, struct tun_stream *st,
                              const struct tun_frame *f)
{
    struct tun_head head;
    char err[200];
    int64_t before = st->send_credit;

    if (!st->local) {
        stream_protocol_error(st, "RESPONSE on stream %u, which the %s opened", st->id,
                              peer_name(s));
        return;
    }
    if (st->responded) {
        stream_protocol_error(st, "second RESPONSE on stream %u", st->id);
        return;
    }
    if (tun_response_head_parse(f->payload, f->len, &head, err, sizeof(err)) < 0) {
        stream_protocol_error(st, "%s", err);
        return;
    }
    st->responded = true;
    /* The RESPONSE window counts from the start of the stream and never
     * retracts the initial credit the request body may already have used. */
    st->send_credit +=
        (int64_t)AB_MAX(head.window, (uint32_t)TUN_INITIAL_WINDOW) - TUN_INITIAL_WINDOW;
    update_ready(st);
    CALL(s, on_response, st, &head, s->cfg.arg);
    tun_head_release(&head);
    if (!st->closed && before <= 0 && st->send_credit > 0)
        CALL(s, on_window_opened, st, s->cfg.arg);
}

/* The checks a DATA frame of len payload bytes passes before any of its
 * payload is delivered; false when it reset the stream. Counts the credit. */
static bool data_admit(struct tun_session *s, struct tun_stream *st, size_t len)
{
    char msg[120];

    if (st->local && !st->responded) {
        stream_protocol_error(st, "DATA on stream %u before its RESPONSE", st->id);
        return false;
    }
    if (st->remote_end) {
        stream_protocol_error(st, "DATA on stream %u after its END", st->id);
        return false;
    }
    if ((int64_t)len > st->recv_credit) {
        snprintf(msg, sizeof(msg), "DATA of %zu bytes on stream %u exceeds the %lld-byte credit",
                 len, st->id, (long long)st->recv_credit);
        session_reset_stream(st, TUN_RESET_FLOW_CONTROL, msg);
        return false;
    }
    st->recv_credit -= (int64_t)len;
    return true;
}

static void data_deliver(struct tun_session *s, struct tun_stream *st, const uint8_t *p, size_t n)
{
    st->unconsumed += n;
    s->stats.bytes_in += n;
    if (n > 0)
        CALL(s, on_data, st, p, n, s->cfg.arg);
}

static void on_data_frame(struct tun_session *s, struct tun_stream *st, const struct tun_frame *f)
{
    if (data_admit(s, st, f->len))
        data_deliver(s, st, f->payload, f->len);
}

static void on_end_frame(struct tun_session *s, struct tun_stream *st)
{
    if (st->local && !st->responded) {
        stream_protocol_error(st, "END on stream %u before its RESPONSE", st->id);
        return;
    }
    if (st->remote_end) {
        stream_protocol_error(st, "second END on stream %u", st->id);
        return;
    }
    st->remote_end = true;
    CALL(s, on_end, st, s->cfg.arg);
    maybe_finish(st);
}

static void on_reset_frame(struct tun_session *s, struct tun_stream *st, const struct tun_frame *f)
{
    char code[TUN_RESET_CODE_MAX + 1], msg[TUN_RESET_MESSAGE_MAX + 1], err[160];

    /* A reset whose payload is broken still aborts the stream. */
    if (tun_reset_parse(f->payload, f->len, code, sizeof(code), msg, sizeof(msg), err,
                        sizeof(err)) < 0) {
        ab_strlcpy(code, TUN_RESET_PROTOCOL, sizeof(code));
        ab_strlcpy(msg, err, sizeof(msg));
    }
    s->stats.resets_in++;
    stream_close(st);
    CALL(s, on_reset, st, code, msg, s->cfg.arg);
}

static void on_window_frame(struct tun_session *s, struct tun_stream *st, const struct tun_frame *f)
{
    int64_t before = st->send_credit;

    st->send_credit += tun_frame_window(f);
    if (st->send_credit > (int64_t)TUN_WINDOW_INCREMENT_MAX) {
        session_reset_stream(st, TUN_RESET_FLOW_CONTROL, "WINDOW took the credit past 2^31-1");
        return;
    }
    update_ready(st);
    if (before <= 0 && st->send_credit > 0)
        CALL(s, on_window_opened, st, s->cfg.arg);
}

struct sync_match {
    uint32_t gen;
    uint32_t watermark;
};

static bool match_unlisted(struct tun_stream *st, void *arg)
{
    const struct sync_match *m = arg;

    return st->sync_gen != m->gen && (!st->local || st->id <= m->watermark);
}

static void on_sync_frame(struct tun_session *s, const struct tun_frame *f)
{
    struct sync_match m = {.gen = ++s->sync_gen, .watermark = tun_frame_sync_watermark(f)};
    size_t n = tun_frame_sync_count(f);
    unsigned reaped;

    if (m.watermark != 0 && (!is_local_id(s, m.watermark) || m.watermark >= s->next_id)) {
        session_fail(s, AB_EINVAL, "SYNC watermark %u is not a stream we opened", m.watermark);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t id = tun_frame_sync_id(f, i);
        struct tun_stream *st;
        if (id == 0) {
            session_fail(s, AB_EINVAL, "SYNC lists stream 0");
            return;
        }
        st = lookup(s, id);
        if (st != NULL)
            st->sync_gen = m.gen;
    }
    reaped = close_batch(s, match_unlisted, &m, true, TUN_RESET_UNKNOWN_STREAM,
                         "the peer's SYNC does not list this stream");
    s->stats.reaped += reaped;
    CALL(s, on_sync, s, reaped, s->cfg.arg);
}

/* The checks every decoded frame passes before its type's handler: the
 * handshake order. 0 or the session's error. */
static int frame_admit(struct tun_session *s, const struct tun_frame *f)
{
    s->stats.frames_in++;
    if (!s->established) {
        uint8_t want = s->cfg.role == TUN_ROLE_HUB ? TUN_HELLO : TUN_WELCOME;
        if (f->type != want || s->hello_done != (s->cfg.role == TUN_ROLE_AGENT))
            return session_fail(s, AB_EINVAL, "%s received before the handshake completed",
                                tun_type_name(f->type));
    } else if (f->type == TUN_HELLO || f->type == TUN_WELCOME) {
        return session_fail(s, AB_EINVAL, "second handshake frame (%s)", tun_type_name(f->type));
    }
    return 0;
}

/* One whole frame. */
static int input_whole(struct tun_session *s, const void *data, size_t len)
{
    struct tun_frame f;
    struct tun_stream *st;
    int rc;

    rc = tun_frame_decode(data, len, &f);
    if (rc < 0)
        return session_fail(s, rc, "frame of %zu bytes refused: %s", len, tun_frame_strerror(rc));
    if (frame_admit(s, &f) < 0)
        return s->failed;

    switch (f.type) {
    case TUN_HELLO:
    case TUN_WELCOME:
    case TUN_REPORT:
    case TUN_EVENT:
        on_connection_message(s, &f);
        break;
    case TUN_SYNC:
        on_sync_frame(s, &f);
        break;
    case TUN_OPEN:
        on_open_frame(s, &f);
        break;
    default:
        st = frame_stream(s, &f);
        if (st == NULL)
            break;
        if (f.type == TUN_RESPONSE)
            on_response_frame(s, st, &f);
        else if (f.type == TUN_DATA)
            on_data_frame(s, st, &f);
        else if (f.type == TUN_END)
            on_end_frame(s, st);
        else if (f.type == TUN_RESET)
            on_reset_frame(s, st, &f);
        else if (f.type == TUN_WINDOW)
            on_window_frame(s, st, &f);
        break;
    }
    return s->failed;
}

/* The header of a streamed message is complete: a DATA frame goes to its
 * stream piece by piece (IN_DATA, or IN_SKIP when it is to be dropped),
 * anything else is reassembled (IN_ASM). */
static int input_head(struct tun_session *s)
{
    struct tun_frame f;
    struct tun_stream *st;
    size_t plen = s->in_len - TUN_HDR_LEN;
    int rc = tun_frame_check_head(s->in_hdr, plen, &f);

    if (rc < 0)
        return session_fail(s, rc, "frame of %zu bytes refused: %s", s->in_len,
                            tun_frame_strerror(rc));
    if (f.type != TUN_DATA) {
        if (s->asm_cap < s->in_len) {
            uint8_t *nb = realloc(s->asm_buf, s->in_len);
            if (nb == NULL)
                return session_fail(s, AB_ENOMEM, "out of memory reading a %zu-byte %s", s->in_len,
                                    tun_type_name(f.type));
            s->asm_buf = nb;
            s->asm_cap = s->in_len;
        }
        memcpy(s->asm_buf, s->in_hdr, TUN_HDR_LEN);
        s->asm_len = TUN_HDR_LEN;
        s->in_mode = IN_ASM;
        return 0;
    }
    if (frame_admit(s, &f) < 0)
        return s->failed;
    s->in_mode = IN_SKIP;
    st = frame_stream(s, &f);
    if (st != NULL && data_admit(s, st, plen)) {
        s->in_mode = IN_DATA;
        s->in_id = st->id;
    }
    return s->failed;
}

int tun_session_input_begin(struct tun_session *s, size_t msg_len)
{
    if (s->in_cb > 0)
        return AB_EBUSY;
    if (s->failed != 0)
        return s->failed;
    if (s->in_active) {
        set_error(s, "a message of %zu bytes began with %zu bytes of the last one missing", msg_len,
                  s->in_left);
        return AB_EINVAL;
    }
    /* on_closed at a message's start only, as for whole messages */
    tun_session_gc(s);
    s->in_active = true;
    s->in_mode = IN_HEAD;
    s->in_hlen = 0;
    s->in_len = s->in_left = msg_len;
    return 0;
}

int tun_session_input_more(struct tun_session *s, const void *data, size_t len)
{
    const uint8_t *p = data;
    int rc = 0;

    if (s->in_cb > 0)
        return AB_EBUSY;
    if (s->failed != 0)
        return s->failed;
    if (!s->in_active || len > s->in_left) {
        set_error(s, "%zu bytes fed past the message's end", len - (s->in_active ? s->in_left : 0));
        return AB_EINVAL;
    }
    /* the whole message in one piece: decoded in place */
    if (s->in_mode == IN_HEAD && s->in_hlen == 0 && len == s->in_left) {
        s->in_active = false;
        s->in_left = 0;
        return input_whole(s, data, len);
    }
    s->in_left -= len;
    while (len > 0 && rc == 0) {
        size_t n;
        switch (s->in_mode) {
        case IN_HEAD:
            n = AB_MIN(len, (size_t)TUN_HDR_LEN - s->in_hlen);
            memcpy(s->in_hdr + s->in_hlen, p, n);
            s->in_hlen = (uint8_t)(s->in_hlen + n);
            if (s->in_hlen == TUN_HDR_LEN)
                rc = input_head(s);
            break;
        case IN_DATA: {
            struct tun_stream *st = lookup(s, s->in_id);
            n = len;
            if (st != NULL) /* else closed by a callback meanwhile: the rest is dropped */
                data_deliver(s, st, p, n);
            rc = s->failed;
            break;
        }
        case IN_ASM:
            n = len;
            memcpy(s->asm_buf + s->asm_len, p, n);
            s->asm_len += n;
            break;
        default: /* IN_SKIP */
            n = len;
            break;
        }
        p += n;
        len -= n;
    }
    if (rc != 0 || s->in_left > 0)
        return rc;
    s->in_active = false;
    if (s->in_mode == IN_HEAD) /* shorter than a header */
        return input_whole(s, s->in_hdr, s->in_hlen);
    if (s->in_mode == IN_ASM) {
        rc = input_whole(s, s->asm_buf, s->asm_len);
        if (s->asm_cap > STREAM_BUF_KEEP) {
            free(s->asm_buf);
            s->asm_buf = NULL;
            s->asm_cap = 0;
        }
    }
    return rc;
}

int tun_session_input(struct tun_session *s, const void *data, size_t len)
{
    int rc = tun_session_input_begin(s, len);

    return rc < 0 ? rc : tun_session_input_more(s, data, len);
}

/* ---- output ---------------------------------------------------------- */

bool tun_session_has_output(const struct tun_session *s)
{
    return s->failed == 0 && (s->ctl_head != NULL || link_is_linked(&s->ready));
}

static void put_header(uint8_t *p, uint8_t type, uint32_t id)
{
    p[0] = TUN_VERSION;
    p[1] = type;
    p[2] = 0;
    p[3] = 0;
    p[4] = (uint8_t)(id >> 24);
    p[5] = (uint8_t)(id >> 16);
    p[6] = (uint8_t)(id >> 8);
    p[7] = (uint8_t)id;
}

int tun_session_next_frame(struct tun_session *s, void *buf, size_t cap, size_t *len)
{
    struct tun_stream *st;
    size_t n;

    *len = 0;
    if (s->in_cb > 0)
        return AB_EBUSY;
    if (s->failed != 0)
        return s->failed;
    tun_session_gc(s);

    if (s->ctl_head != NULL) {
        struct tun_ctl *c = s->ctl_head;
        if (c->len > cap)
            return TUN_FRAME_ECAP;
        memcpy(buf, c->bytes, c->len);
        *len = c->len;
        s->ctl_head = c->next;
        if (s->ctl_head == NULL)
            s->ctl_tail = NULL;
        s->ctl_bytes -= c->len;
        free(c);
        s->stats.frames_out++;
        after_room(s);
        return 0;
    }
    if (!link_is_linked(&s->ready))
        return 0;
    if (cap <= TUN_HDR_LEN)
        return TUN_FRAME_ECAP;

    /* Round-robin: take the head, send one chunk, requeue it at the tail. */
    st = LINK_OWNER(s->ready.next, rlink);
    link_remove(&st->rlink);
    n = AB_MIN(st->len, (size_t)TUN_DATA_MAX);
    n = AB_MIN(n, (size_t)st->send_credit);
    n = AB_MIN(n, cap - TUN_HDR_LEN);
    put_header(buf, TUN_DATA, st->id);
    memcpy((uint8_t *)buf + TUN_HDR_LEN, st->buf + st->off, n);
    *len = TUN_HDR_LEN + n;
    st->off += n;
    st->len -= n;
    st->send_credit -= (int64_t)n;
    s->data_bytes -= n;
    s->stats.bytes_out += n;
    s->stats.frames_out++;
    if (st->len == 0) {
        st->off = 0;
        if (st->cap > STREAM_BUF_KEEP) {
            free(st->buf);
            st->buf = NULL;
            st->cap = 0;
        }
        if (st->end_requested && !st->end_sent)
            send_end(st);
    } else if (st->send_credit <= 0) {
        s->stats.credit_stalls++;
    }
    update_ready(st);
    if (!st->closed && st->drain_wanted && st->len <= s->cfg.low_water) {
        st->drain_wanted = false;
        CALL(s, on_drain, st, s->cfg.arg);
    }
    after_room(s);
    return 0;
}

/* ---- sending --------------------------------------------------------- */

int tun_session_send_json(struct tun_session *s, enum tun_type type, json_t *msg)
{
    bool agent = s->cfg.role == TUN_ROLE_AGENT;
    char *text;
    size_t len;
    int rc;

    if (s->failed != 0)
        return s->failed;
    switch (type) {
    case TUN_HELLO:
        if (!agent || s->hello_done) {
            set_error(s, "HELLO is sent once, by the agent, first");
            return AB_EINVAL;
        }
        break;
    case TUN_WELCOME:
        if (agent || !s->hello_done || s->established) {
            set_error(s, "WELCOME is sent once, by the hub, after the agent's HELLO");
            return AB_EINVAL;
        }
        break;
    case TUN_REPORT:
    case TUN_EVENT:
        if (agent != (type == TUN_REPORT) || !s->established) {
            set_error(s, "%s is sent by the %s once the handshake is done", tun_type_name(type),
                      type == TUN_REPORT ? "agent" : "hub");
            return AB_EINVAL;
        }
        break;
    default:
        set_error(s, "%s is not a connection message", tun_type_name(type));
        return AB_EINVAL;
    }
    if (!json_is_object(msg)) {
        set_error(s, "%s payload must be a JSON object", tun_type_name(type));
        return AB_EINVAL;
    }
    text = json_dumps(msg, JSON_COMPACT);
    if (text == NULL)
        return AB_ENOMEM;
    len = strlen(text);
    if (len > tun_frame_max_payload(type)) {
        set_error(s, "%s of %zu bytes is over its %zu-byte limit", tun_type_name(type), len,
                  tun_frame_max_payload(type));
        free(text);
        return AB_ELIMIT;
    }
    rc = ctl_push(s, type, 0, text, len);
    free(text);
    if (rc < 0)
        return rc;
    if (type == TUN_HELLO)
        s->hello_done = true;
    else if (type == TUN_WELCOME)
        s->established = true;
    return 0;
}

int tun_session_send_sync(struct tun_session *s)
{
    uint8_t *p;
    size_t n = 0;
    int rc;

    if (s->failed != 0)
        return s->failed;
    if (!s->established) {
        set_error(s, "SYNC before the handshake completed");
        return AB_EBUSY;
    }
    p = malloc(4 + 4 * (size_t)s->nlive);
    if (p == NULL)
        return AB_ENOMEM;
    p[0] = (uint8_t)(s->peer_max_id >> 24);
    p[1] = (uint8_t)(s->peer_max_id >> 16);
    p[2] = (uint8_t)(s->peer_max_id >> 8);
    p[3] = (uint8_t)s->peer_max_id;
    n = 4;
    for (struct tun_link *l = s->live.next; l != &s->live; l = l->next) {
        uint32_t id = LINK_OWNER(l, link)->id;
        p[n++] = (uint8_t)(id >> 24);
        p[n++] = (uint8_t)(id >> 16);
        p[n++] = (uint8_t)(id >> 8);
        p[n++] = (uint8_t)id;
    }
    rc = ctl_push(s, TUN_SYNC, 0, p, n);
    free(p);
    return rc;
}

/* ---- streams --------------------------------------------------------- */

int tun_stream_open(struct tun_session *s, const struct tun_head *head, void *user,
                    struct tun_stream **out)
{
    struct tun_head h = *head;
    struct tun_stream *st;
    char *text;
    size_t len;
    int rc;

    *out = NULL;
    if (s->failed != 0)
        return s->failed;
    if (s->closing)
        return AB_ECLOSED;
    if (!s->established) {
        set_error(s, "cannot open a stream before the handshake completed");
        return AB_EBUSY;
    }
    if (s->next_id > UINT32_MAX) {
        set_error(s, "stream ids exhausted on this session: reconnect");
        return AB_ELIMIT;
    }
    if (s->nstreams >= s->cfg.max_streams) {
        set_error(s, "stream table full (%u streams)", s->cfg.max_streams);
        return AB_ELIMIT;
    }
    h.window = s->cfg.window;
    h.json = NULL;
    rc = tun_open_head_encode(&h, &text, &len, s->err, sizeof(s->err));
    if (rc < 0)
        return rc;
    rc = ctl_push(s, TUN_OPEN, (uint32_t)s->next_id, text, len);
    free(text);
    if (rc < 0)
        return rc;
    st = stream_new(s, (uint32_t)s->next_id, true);
    if (st == NULL) /* the OPEN is queued: the peer must hear that it is gone */
        return session_fail(s, AB_ENOMEM, "out of memory opening stream %u", (uint32_t)s->next_id);
    s->next_id += 2;
    st->user = user;
    st->send_credit = TUN_INITIAL_WINDOW;
    st->recv_credit = s->cfg.window;
    st->recv_base = s->cfg.window;
    *out = st;
    return 0;
}

int tun_stream_respond(struct tun_stream *st, int status, const struct tun_header *hdrs, int n)
{
    struct tun_session *s = st->s;
    struct tun_head h = {.status = status, .nheaders = n};
    uint32_t w = AB_MAX(s->cfg.window, (uint32_t)TUN_INITIAL_WINDOW);
    char *text;
    size_t len;
    int rc;

    if (st->closed)
        return AB_ECLOSED;
    if (st->local || st->responded) {
        set_error(s, "stream %u: RESPONSE is sent once, on a stream the %s opened", st->id,
                  peer_name(s));
        return AB_EINVAL;
    }
    if (n < 0 || n > TUN_MAX_HEADERS || (n > 0 && hdrs == NULL)) {
        set_error(s, "headers: at most %d allowed", TUN_MAX_HEADERS);
        return AB_ELIMIT;
    }
    if (n > 0)
        memcpy(h.headers, hdrs, (size_t)n * sizeof(*hdrs));
    h.window = w;
    rc = tun_response_head_encode(&h, &text, &len, s->err, sizeof(s->err));
    if (rc < 0)
        return rc;
    rc = ctl_push(s, TUN_RESPONSE, st->id, text, len);
    free(text);
    if (rc < 0)
        return rc;
    st->responded = true;
    st->recv_credit += (int64_t)w - TUN_INITIAL_WINDOW;
    st->recv_base = w;
    update_ready(st);
    return 0;
}

/* Makes room for add more bytes at the end of the output buffer. The
 * queued bytes move to the front only once at least as many were sent
 * (off >= len), so each byte moves at most once on average: compacting on
 * every write made a stream kept near its high water copy its whole queue
 * per 32 KiB chunk (perf: most of a bulk sender's CPU). */
static int reserve(struct tun_stream *st, size_t add)
{
    size_t want = st->len + add, ncap;
    uint8_t *nb;

    if (st->off + want <= st->cap)
        return 0;
    if (want <= st->cap && (st->off >= st->len || st->cap >= st->s->cfg.stream_buf_max)) {
        memmove(st->buf, st->buf + st->off, st->len);
        st->off = 0;
        return 0;
    }
    /* grow (never past stream_buf_max, which the caller keeps want under),
     * keeping the offset while it fits */
    ncap = AB_MAX(st->cap * 2, (size_t)STREAM_BUF_MIN_ALLOC);
    ncap = AB_MAX(ncap, want);
    ncap = AB_MIN(ncap, st->s->cfg.stream_buf_max);
    nb = realloc(st->buf, ncap);
    if (nb == NULL)
        return AB_ENOMEM;
    st->buf = nb;
    st->cap = ncap;
    if (st->off + want > st->cap) {
        memmove(st->buf, st->buf + st->off, st->len);
        st->off = 0;
    }
    return 0;
}

int tun_stream_write(struct tun_stream *st, const void *data, size_t len)
{
    struct tun_session *s = st->s;
    int rc;

    if (st->closed || st->end_requested)
        return AB_ECLOSED;
    if (s->failed != 0)
        return s->failed;
    if (!st->local && !st->responded) {
        set_error(s, "stream %u: respond before writing a body", st->id);
        return AB_EINVAL;
    }
    if (len == 0)
        return 0;
    if (len > s->cfg.stream_buf_max - st->len) {
        set_error(s, "stream %u: %zu bytes queued plus %zu is over the %zu-byte stream buffer",
                  st->id, st->len, len, s->cfg.stream_buf_max);
        return AB_ELIMIT;
    }
    if (buffered(s) + len > s->cfg.buf_max) {
        if (!link_is_linked(&st->blink)) {
            link_push_back(&s->blocked, &st->blink);
            s->nblocked++;
        }
        set_error(s, "tunnel output full (%zu bytes queued, limit %zu)", buffered(s),
                  s->cfg.buf_max);
        return AB_EBUSY;
    }
    rc = reserve(st, len);
    if (rc < 0)
        return rc;
    memcpy(st->buf + st->off + st->len, data, len);
    st->len += len;
    s->data_bytes += len;
    if (st->len > s->cfg.low_water)
        st->drain_wanted = true;
    update_ready(st);
    return 0;
}

int tun_stream_end(struct tun_stream *st)
{
    struct tun_session *s = st->s;

    if (st->closed || st->end_requested)
        return AB_ECLOSED;
    if (s->failed != 0)
        return s->failed;
    if (!st->local && !st->responded) {
        set_error(s, "stream %u: respond before ending it", st->id);
        return AB_EINVAL;
    }
    st->end_requested = true;
    if (st->len == 0)
        send_end(st);
    return s->failed;
}

int tun_stream_reset(struct tun_stream *st, const char *code, const char *message)
{
    struct tun_session *s = st->s;
    size_t clen;

    if (st->closed)
        return AB_ECLOSED;
    if (code == NULL || (clen = strlen(code)) == 0 || clen > TUN_RESET_CODE_MAX)
        code = TUN_RESET_CANCEL;
    queue_reset(s, st->id, code, message);
    stream_close(st);
    return s->failed;
}

int tun_stream_consumed(struct tun_stream *st, size_t n)
{
    struct tun_session *s = st->s;

    if (st->closed)
        return AB_ECLOSED;
    if (n > st->unconsumed) {
        set_error(s, "stream %u: consumed %zu bytes but only %zu were received", st->id, n,
                  st->unconsumed);
        return AB_EINVAL;
    }
    st->unconsumed -= n;
    st->consumed_pending += n;
    /* Grant in batches of half a window: fewer WINDOW frames, and the peer
     * never waits a full round trip with an empty credit. */
    if (!st->remote_end && st->consumed_pending > 0 &&
        st->consumed_pending >= AB_MAX(st->recv_base / 2, 1u)) {
        uint32_t inc = (uint32_t)st->consumed_pending;
        queue_window(s, st->id, inc);
        st->recv_credit += inc;
        st->consumed_pending = 0;
    }
    return s->failed;
}

/* ---- accessors ------------------------------------------------------- */

bool tun_session_is_established(const struct tun_session *s)
{
    return s->established;
}

enum tun_role tun_session_role(const struct tun_session *s)
{
    return s->cfg.role;
}

void *tun_session_arg(const struct tun_session *s)
{
    return s->cfg.arg;
}

const char *tun_session_error(const struct tun_session *s)
{
    return s->err;
}

void tun_session_stats(const struct tun_session *s, struct tun_stats *out)
{
    *out = s->stats;
    out->streams = s->nlive;
    out->buffered = buffered(s);
}

uint32_t tun_stream_id(const struct tun_stream *st)
{
    return st->id;
}

struct tun_session *tun_stream_session(const struct tun_stream *st)
{
    return st->s;
}

void *tun_stream_user(const struct tun_stream *st)
{
    return st->user;
}

void tun_stream_set_user(struct tun_stream *st, void *user)
{
    st->user = user;
}

enum tun_stream_state tun_stream_state(const struct tun_stream *st)
{
    if (st->closed)
        return TUN_STREAM_CLOSED;
    if (st->end_requested)
        return TUN_STREAM_HALF_CLOSED_LOCAL;
    if (st->remote_end)
        return TUN_STREAM_HALF_CLOSED_REMOTE;
    return TUN_STREAM_OPEN;
}

bool tun_stream_is_open(const struct tun_stream *st)
{
    return !st->closed;
}

size_t tun_stream_pending(const struct tun_stream *st)
{
    return st->len;
}

int64_t tun_stream_credit(const struct tun_stream *st)
{
    return st->send_credit;
}

bool tun_stream_is_local(const struct tun_stream *st)
{
    return st->local;
}
