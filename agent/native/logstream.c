/* GET /v1/sandboxes/{id}/logs/stream[?lines=N] (reference §4.1): the
 * sandbox's log as NDJSON, one {"timestamp","line"} object per line, the last
 * N (default 100, 0..10000) first and then each new line as it is written,
 * until the sandbox goes away (the stream ends) or the client leaves. API key
 * auth, ungated (§4.5: the log stream is deliberately not a gated write).
 *
 * The runtime's log reader is a snapshot of the log's tail (rt_log_read on a
 * worker), so the stream polls it every LOGSTREAM_POLL_MS and sends what
 * follows the line it sent last (by position, not time: a log's times need
 * not be in order); a client that reads slower
 * than the log grows is not polled for (at most LOGSTREAM_PENDING_MAX bytes
 * wait). Loop thread only, reads on loop workers. */
#include "agent/native/native.h"
#include "agent/native/sandboxes.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOGSTREAM_POLL_MS 250
#define LOGSTREAM_LINES_MAX 10000
#define LOGSTREAM_PENDING_MAX (1024 * 1024)

struct native_lstream {
    struct native_lstream *prev, *next; /* n->streams */
    struct native *n;
    struct http_exchange *ex;
    char id[RT_ID_MAX + 1];
    struct loop_timer timer;
    bool timer_on;
    bool reading; /* a read on a worker: it frees the stream when it comes back */
    bool first;
    bool orphan;     /* native_free ran during a read: the read's end frees it */
    long backlog;    /* lines of the first read to send */
    char *last_line; /* the line sent last (owned), NULL before any */
    size_t prev_n;   /* lines in the previous read */
    struct rt_probe probe;
    struct rt_log_query q;
    struct rt_log out;
    int rc;
};

static void ls_free(struct native_lstream *l)
{
    if (!l->orphan) {
        if (l->prev)
            l->prev->next = l->next;
        else if (l->n->streams == l)
            l->n->streams = l->next;
        if (l->next)
            l->next->prev = l->prev;
    }
    if (l->timer_on)
        loop_timer_cancel(&l->timer);
    free(l->last_line);
    free(l);
}

/* The client left or the sandbox is gone: finish the exchange, free l. */
static void ls_end(struct native_lstream *l)
{
    if (http_is_aborted(l->ex))
        http_abort(l->ex);
    else
        http_end(l->ex);
    ls_free(l);
}

static void ls_work(void *arg)
{
    struct native_lstream *l = arg;
    l->rc = rt_log_read(&l->probe, &l->q, &l->out);
}

static void ls_emit(struct native_lstream *l, const struct rt_log_entry *e)
{
    char when[40];

    native_iso_time(e->ms, when, sizeof(when));
    json_t *j = json_pack("{s:s,s:s}", "timestamp", when, "line", e->line);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (text) {
        http_write(l->ex, text, strlen(text));
        http_write(l->ex, "\n", 1);
    }
    free(text);
}

static void ls_poll(struct loop_timer *t);

/* Where the new lines of this read start: after the last line sent. The
 * reader returns a window (the log's tail), so the line sent last is looked
 * for where it was, then anywhere (the window slid); not found, every line
 * is new (more was written between two polls than the window holds). */
static size_t ls_new_from(const struct native_lstream *l)
{
    const struct rt_log *o = &l->out;

    if (!l->last_line)
        return 0;
    if (l->prev_n > 0 && l->prev_n <= o->n &&
        strcmp(o->entries[l->prev_n - 1].line, l->last_line) == 0)
        return l->prev_n;
    for (size_t j = o->n; j-- > 0;)
        if (strcmp(o->entries[j].line, l->last_line) == 0)
            return j + 1;
    return 0;
}

static void ls_done(void *arg, int status)
{
    struct native_lstream *l = arg;

    l->reading = false;
    if (l->orphan) {
        rt_log_free(&l->out);
        ls_free(l);
        return;
    }
    if (http_is_aborted(l->ex)) {
        rt_log_free(&l->out);
        ls_end(l);
        return;
    }
    if (status == 0 && l->rc == 0 && l->out.n > 0) {
        size_t from = ls_new_from(l);
        if (l->first && l->out.n - from > (size_t)l->backlog)
            from = l->out.n - (size_t)l->backlog;
        for (size_t i = from; i < l->out.n; i++)
            ls_emit(l, &l->out.entries[i]);
        free(l->last_line);
        l->last_line = strdup(l->out.entries[l->out.n - 1].line);
        l->prev_n = l->out.n;
    }
    if (status == 0 && l->rc == 0)
        l->first = false;
    rt_log_free(&l->out);
    memset(&l->out, 0, sizeof(l->out));
    l->timer_on = true;
    loop_timer_start(l->n->d.loop, &l->timer, LOGSTREAM_POLL_MS, ls_poll, l);
}

static void ls_poll(struct loop_timer *t)
{
    struct native_lstream *l = t->arg;
    struct rt_sandbox s;

    l->timer_on = false;
    if (http_is_aborted(l->ex) || rt_get(l->n->d.rt, l->id, &s) != 0) {
        ls_end(l); /* the client left, or the sandbox is gone: the stream ends */
        return;
    }
    json_decref(s.metadata);
    explicit_bzero(s.envd_token, sizeof(s.envd_token));
    if (s.state != RT_RUNNING || rt_log_probe(l->n->d.rt, l->id, &l->probe) != 0) {
        ls_end(l);
        return;
    }
    if (http_pending(l->ex) > LOGSTREAM_PENDING_MAX) {
        l->timer_on = true; /* the client reads slower than the log grows: wait for it */
        loop_timer_start(l->n->d.loop, &l->timer, LOGSTREAM_POLL_MS, ls_poll, l);
        return;
    }
    memset(&l->q, 0, sizeof(l->q));
    l->q.limit = RT_LOG_LINES_MAX;
    l->reading = true;
    if (loop_submit(l->n->d.loop, ls_work, ls_done, l) != 0) {
        l->reading = false;
        l->timer_on = true; /* workers busy: try on the next tick */
        loop_timer_start(l->n->d.loop, &l->timer, LOGSTREAM_POLL_MS, ls_poll, l);
    }
}

static void stream_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct native *n = arg;
    char buf[32], *end;
    long lines = 100;
    struct rt_sandbox s;
    struct native_lstream *l;

    if (http_query_get(http_req(ex), "lines", buf, sizeof(buf)) == 0) {
        lines = strtol(buf, &end, 10);
        if (!buf[0] || *end || lines < 0 || lines > LOGSTREAM_LINES_MAX) {
            native_error(ex, 400, NULL, NULL, "lines must be an integer from 0 to %d",
                         LOGSTREAM_LINES_MAX);
            return;
        }
    }
    if (!native_own_sandbox(ex, n, p, &s))
        return;
    explicit_bzero(s.envd_token, sizeof(s.envd_token));
    if (!rt_has(n->d.rt, RT_CAP_LOGS) || !n->d.loop) {
        native_error(ex, 501, NULL, NULL, "the %s runtime keeps no sandbox logs", n->d.rt->kind);
        return;
    }
    if (s.state != RT_RUNNING) {
        native_error(ex, 409, "NOT_RUNNING", NULL, "sandbox '%s' is not Running", s.id);
        return;
    }
    if (!(l = calloc(1, sizeof(*l)))) {
        native_error(ex, 503, NULL, NULL, "out of memory");
        return;
    }
    l->n = n;
    l->ex = ex;
    l->first = true;
    l->backlog = lines;
    ab_strlcpy(l->id, s.id, sizeof(l->id));
    const struct http_header h[] = {{"Content-Type", "application/x-ndjson"},
                                    {"Cache-Control", "no-cache"}};
    http_begin(ex, 200, h, (int)AB_ARRAY_LEN(h), -1);
    l->next = n->streams;
    if (n->streams)
        n->streams->prev = l;
    n->streams = l;
    l->timer_on = true;
    loop_timer_start(n->d.loop, &l->timer, 0, ls_poll, l);
}

static void h_stream(struct http_exchange *ex, void *arg)
{
    struct native *n = arg;
    agent_auth_request(n->d.auth, ex, stream_authed, n);
}

void native_logstream_close_all(struct native *n)
{
    while (n->streams) {
        struct native_lstream *l = n->streams;
        n->streams = l->next;
        if (n->streams)
            n->streams->prev = NULL;
        l->orphan = true; /* unlinked */
        http_abort(l->ex);
        if (!l->reading)
            ls_free(l);
    }
}

int native_logstream_add_routes(struct native *n, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/v1/sandboxes/{id}/logs/stream", h_stream, n, 0},
    };
    return native_add(n, routes, AB_ARRAY_LEN(routes), err, errlen);
}
