/* The kube runtime's start command and readiness checks (the same fields as
 * the local runtime: runtimes[].config.startCommand, runtimes[].readinessProbe;
 * run by agent/runtime/startcmd.h's runner), after a POST /init (envd
 * refuses processes before it): at claim, after the image swap (the swap
 * restarts the container, so nothing started on the idle image survives),
 * with the claim's token and user; or, for a pool claimed without a swap,
 * on each idle Ready Pod ahead of any claim (kube.c's prestart), so a warm
 * Pod is already ready:
 *
 *   1. process.Process/Start of `/bin/bash -c <startCommand>` through the
 *      Pod's envd (its output goes to the bounded ring error messages
 *      quote; envd keeps the process if the stream closes);
 *   2. every readinessProbe of a runtime other than envd, in order, at the
 *      Pod's IP: tcpSocket connects, httpGet answers 2xx, every
 *      periodSeconds (100 ms when unset), after initialDelaySeconds.
 *
 * A start command that exits non-zero before the checks pass fails at once;
 * the caller's startup timeout ends the rest, with kstart_describe saying
 * which check had not passed and why.
 *
 * Loop thread only. */
#ifndef AGENT_RUNTIME_KUBE_START_H
#define AGENT_RUNTIME_KUBE_START_H

#include <stddef.h>

#include "agent/runtime/startcmd.h"

/* On an idle Pod whose start command ran ahead (a pool claimed without a
 * swap): the envd token it was initialised with, sealed as in adopt.h with
 * the id "idle" ("-" when the agent has no seal key). */
#define KUBE_A_IDLE_TOKEN "agentbox.scitix.ai/idle-envd-token-sealed"

struct loop;
struct kstart;

/* err 0: ready; AB_EIO: msg names the check and quotes the output's tail. */
typedef void (*kstart_done_fn)(void *arg, int err, const char *msg);

struct kstart_deps {
    struct loop *loop;
    const struct rt_start_spec *spec; /* copied */
    const char *ip;                   /* the Pod's */
    int envd_port;
    const char *token; /* the claim's envd token */
    const char *user;  /* the claim's default user */
    kstart_done_fn done;
    void *arg;
};

/* Starts at once; done runs later on the loop thread, once, never from
 * inside kstart_new. NULL: out of memory. */
struct kstart *kstart_new(const struct kstart_deps *d);
/* Stops everything (the command's stream too); done does not run after. */
void kstart_free(struct kstart *k);
/* What it waits on now, with the command's state and output's tail. */
void kstart_describe(const struct kstart *k, char *out, size_t outlen);

#endif
