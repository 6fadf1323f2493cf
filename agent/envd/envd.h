/* agentbox-envd internals shared by its files: the daemon state, one RPC
 * call, and Connect server streams. Everything here runs on the loop
 * thread. */
#ifndef ENVD_ENVD_H
#define ENVD_ENVD_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>

#include "agentbox/http.h"
#include "agentbox/loop.h"
#include "agent/envd/path.h"

/* The version we report: the highest whose SDK feature gates
 * (e2b-protocol.md §2.8) this envd satisfies; see README.md. */
#define ENVD_VERSION "0.6.13"

#define ENVD_RPC_BODY_MAX (4 * 1024 * 1024 + 5)
#define ENVD_PROCS_MAX 1024
#define ENVD_WATCHES_MAX 256
#define ENVD_SUBS_MAX 64 /* stream subscribers per process */
#define ENVD_STDIN_PENDING_MAX (1024 * 1024)
#define ENVD_KEEPALIVE_DEFAULT_MS 90000
#define ENVD_ENDED_KEEP_MS 30000 /* a late Connect still gets start + end */
/* Descriptors the loop may hold (loop_options.fd_limit): every process's
 * pty or stdin/stdout/stderr, every watch, and 2,048 connections. */
#define ENVD_FD_LIMIT (ENVD_PROCS_MAX * 4 + ENVD_WATCHES_MAX + 2048)

struct envd_proc;
struct envd_watch;

struct envd {
    struct loop *loop;
    struct http_router *router;
    bool armed;       /* POST /init has been called */
    bool stopping;    /* loop ended: watch callbacks only let go */
    char *token;      /* NULL: no access token */
    json_t *env_vars; /* from /init envVars: object of strings */
    char default_user[33];
    char default_workdir[PATH_MAX];
    struct envd_proc *procs;
    int nprocs;
    struct envd_watch *watches;
    int nwatches;
    unsigned long long cpu_total, cpu_idle; /* last /metrics sample */
};

/* One Connect RPC from route to reply. The body is buffered here (bounded by
 * ENVD_RPC_BODY_MAX) so that streaming methods keep on_abort/on_drain. */
struct envd_call {
    struct envd *e;
    struct http_exchange *ex;
    char service[16]; /* "process" | "filesystem" */
    char method[32];
    bool stream; /* application/connect+json */
    uint8_t *buf;
    size_t len;
    size_t cap;
    json_t *req; /* the request message */
    struct envd_user user;
    int64_t timeout_ms;   /* Connect-Timeout-Ms; 0 none */
    int64_t keepalive_ms; /* Keepalive-Ping-Interval */
};

/* Finish a call: a unary reply (takes msg), or an error in the form the
 * call's kind needs (unary: HTTP status + JSON; stream: 200 + end-stream
 * envelope). Both free c. */
void envd_rpc_reply(struct envd_call *c, json_t *msg);
void envd_rpc_error(struct envd_call *c, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Frees c without touching the exchange (a stream took it over). */
void envd_call_free(struct envd_call *c);

/* A Connect server stream on an exchange. Embedded in its owner. */
struct envd_stream {
    struct envd *e;
    struct http_exchange *ex; /* NULL once finished or gone */
    struct loop_timer ka_timer;
    int64_t ka_ms;
    int64_t last_ms;
    int64_t deadline_ms; /* monotonic; 0 none */
    struct loop_timer deadline_timer;
    bool ka_flat; /* WatchDir: {"keepalive":{}}; else {"event":{"keepalive":{}}} */
    void (*on_gone)(struct envd_stream *s);  /* peer went away: owner unlinks */
    void (*on_drain)(struct envd_stream *s); /* output fell below the high water */
    void *owner;
};
/* Sends the 200 head and arms keepalives; the stream then owns ex. */
int envd_stream_open(struct envd_stream *s, struct envd *e, struct http_exchange *ex,
                     int64_t keepalive_ms, int64_t timeout_ms);
/* Sends one message (takes msg). */
int envd_stream_send(struct envd_stream *s, json_t *msg);
/* End-stream envelope ({} when code is NULL) and the end of the response. */
void envd_stream_close(struct envd_stream *s, const char *code, const char *message);
bool envd_stream_is_open(const struct envd_stream *s);
bool envd_stream_is_congested(const struct envd_stream *s);

/* proc.c */
int envd_proc_init(struct envd *e);
void envd_proc_shutdown(struct envd *e);
/* After loop_free: frees what is left. */
void envd_proc_free_all(struct envd *e);
void envd_proc_rpc(struct envd_call *c);

/* fs.c */
void envd_fs_rpc(struct envd_call *c);
void envd_fs_shutdown(struct envd *e);
void envd_fs_free_all(struct envd *e);

/* files.c: GET and POST /files (HTTP_ROUTE_STREAM routes). */
void envd_files_get(struct http_exchange *ex, void *arg);
void envd_files_post(struct http_exchange *ex, void *arg);

/* server.c helpers */
/* The user a request runs as: Basic auth, else /init's default user, else
 * root. AB_EINVAL for a malformed name (answer unauthenticated). */
int envd_request_user(struct envd *e, const char *username, struct envd_user *u, char *err,
                      size_t errlen);
/* Builds the server's router. */
struct http_router *envd_router_new(struct envd *e);

#endif
