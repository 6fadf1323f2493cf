/* For runtimes (startcmd.c): a start command and its readiness checks
 * (runtimes[].config.startCommand, runtimes[].readinessProbe), shared by the
 * local runtime (local/start.c, in the sandbox's namespaces) and the kube
 * runtime (kube/start.c, at the Pod's IP). The pure parts (any thread, no
 * I/O): the envd Start request, the decoding of its Connect stream, the
 * bounded ring of the command's output with the tail error messages quote,
 * and the words every failure uses ("<what>; the start command of runtime
 * 'x' exited with code 3; its output ends: ..."). The runner
 * (rt_start_run_*, loop thread only) drives them: the command through envd,
 * then every check in order. */
#ifndef AGENTBOX_RUNTIME_STARTCMD_H
#define AGENTBOX_RUNTIME_STARTCMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/runtime/local/manifest.h"

struct loop;

#define RT_START_RING 8192            /* bytes of the command's output kept */
#define RT_START_TAIL_MAX 360         /* bytes of it an error message quotes */
#define RT_START_TAIL_LINES 8         /* ... and at most this many lines */
#define RT_START_ENVELOPE_MAX 1048576 /* envd's data events are far smaller */
#define RT_PROBE_PERIOD_MS 100        /* periodSeconds unset: poll fast, creates wait on it */
#define RT_PROBE_TIMEOUT_MS 1000      /* timeoutSeconds unset (Kubernetes' default) */

/* The start command and the probes a pool's sandboxes pass before they are
 * ready: from the pool's runtimes (rt_start_spec_from), envd's own probe
 * left out (the runtime already waits for envd). */
struct rt_start_spec {
    char cmd[MF_CMD_MAX]; /* "" none */
    char cmd_rt[MF_NAME_MAX + 1];
    struct {
        struct mf_probe p;
        char rt[MF_NAME_MAX + 1];
    } probes[MF_RUNTIMES_MAX];
    int nprobes;
};

void rt_start_spec_from(struct rt_start_spec *s, const struct mf_runtime *rts, int n);
bool rt_start_spec_needed(const struct rt_start_spec *s);

/* The Start stream of one command: its Connect envelopes decoded, the
 * output kept in a ring. Zero it to begin; rt_start_stream_clear frees. */
struct rt_start_stream {
    int status;    /* the HTTP status of the Start answer */
    uint8_t *ebuf; /* a partial envelope */
    size_t elen, ecap;
    char ring[RT_START_RING];
    size_t rpos, rlen; /* next write, bytes held */
    bool started, exited;
    int exit_code;
    char err[200]; /* envd's refusal of Start, or the stream's end error */
};

/* process.Process/Start of `/bin/bash -c cmd` in /home/user, as one Connect
 * envelope (malloc'ed into *out). 0 or AB_ENOMEM. */
int rt_start_request(const char *cmd, uint8_t **out, size_t *len);

enum { RT_START_EV_STARTED = 1, RT_START_EV_EXITED = 2 };
/* Feeds len bytes of the Start answer's body; returns the RT_START_EV_*
 * bits that became true in this chunk. */
int rt_start_feed(struct rt_start_stream *st, const void *d, size_t len);
void rt_start_stream_clear(struct rt_start_stream *st);

/* The last lines of the command's output (control bytes and non-ASCII as
 * '?': the text goes into JSON error bodies). */
void rt_start_tail(const struct rt_start_stream *st, char *out, size_t outlen);

/* "readiness check httpGet http://<host>:<port><path> of runtime 'x'" (or
 * tcpSocket <host>:<port>). */
void rt_start_probe_name(const struct rt_start_spec *s, int i, const char *host, char *out,
                         size_t outlen);

/* "<what>; the start command of runtime 'x' <state>; its output ends: <tail>"
 * (just what when the spec has no command). */
void rt_start_describe(const struct rt_start_spec *s, const struct rt_start_stream *st,
                       const char *what, char *out, size_t outlen);

/* ---- the runner (loop thread only) -------------------------------------------------- */

/* Once envd listens (and has had its /init: it refuses processes before):
 *
 *   1. process.Process/Start of `/bin/bash -c <cmd>` through envd, kept
 *      streaming for the sandbox's life (its output goes to the ring error
 *      messages quote; a command that ends after ready is only logged);
 *   2. every check in order, after the first one's initialDelaySeconds, every
 *      periodSeconds (RT_PROBE_PERIOD_MS when unset): tcpSocket connects
 *      (without blocking the loop: a connect in progress is looked at again
 *      a period later, up to timeoutSeconds), httpGet answers 2xx.
 *
 * A command that exits non-zero before the checks pass fails at once (exit 0
 * may have started a daemon: the checks go on). State changes that close an
 * http client run from the runner's timer, never inside that client's own
 * callback. */
struct rt_start_run;

/* err 0: ready; AB_EIO: msg names the check and quotes the output's tail
 * (msg lives in the runner: copy it before freeing the runner). */
typedef void (*rt_start_done_fn)(void *arg, int err, const char *msg);

struct rt_start_run_deps {
    struct loop *loop;
    const struct rt_start_spec *spec; /* copied */
    const char *envd;                 /* envd's address for http_client ("unix:/p", "ip:port") */
    const char *token;                /* envd's access token */
    const char *user;                 /* the command's user; NULL or "": "user" */
    const char *host;                 /* the IPv4 address the checks connect to */
    const char *netns;                /* the checks' network namespace file; NULL: the agent's */
    /* ab_now_ms() after which waiting for the command or a check fails, naming
     * startup_ms; 0: none (the caller bounds the wait and asks
     * rt_start_run_where). */
    int64_t deadline_ms, startup_ms;
    /* up to two log fields naming the sandbox (a key NULL: fewer) */
    const char *log_k1, *log_v1, *log_k2, *log_v2;
    rt_start_done_fn done;
    void *arg;
};

/* Starts at once (strings copied); done runs later on the loop thread, once,
 * never from inside rt_start_run_new, and may free the runner. NULL: out of
 * memory. */
struct rt_start_run *rt_start_run_new(const struct rt_start_run_deps *d);
/* Stops everything (the command's stream too); done does not run after. */
void rt_start_run_free(struct rt_start_run *r);

enum rt_start_phase { RT_START_STARTING = 1, RT_START_CHECKING, RT_START_READY, RT_START_FAILED };
/* Where the runner is. RT_START_CHECKING with a check still to pass: its
 * name into check and why its last try failed ("not tried yet") into *last;
 * otherwise check is "". */
enum rt_start_phase rt_start_run_where(const struct rt_start_run *r, char *check, size_t checklen,
                                       const char **last);
/* The failure once RT_START_FAILED; else rt_start_describe of now with the
 * command's state and output's tail. */
void rt_start_run_describe(const struct rt_start_run *r, const char *now, char *out, size_t outlen);

#endif
