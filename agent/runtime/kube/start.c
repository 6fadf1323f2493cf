/* Start command and readiness checks on a claimed Pod (start.h): the runner
 * of agent/runtime/startcmd.h at the Pod's IP, and what a late one waits on
 * in the kube runtime's words. Loop thread only. */
#include "agent/runtime/kube/start.h"

#include "agent/runtime/runtime.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>

struct kstart {
    struct rt_start_run *run;
};

struct kstart *kstart_new(const struct kstart_deps *d)
{
    struct kstart *k = calloc(1, sizeof(*k));
    char envd[RT_ADDR_MAX];
    struct rt_start_run_deps rd = {
        .loop = d->loop,
        .spec = d->spec,
        .envd = envd,
        .token = d->token,
        .user = d->user,
        .host = d->ip,
        .log_k1 = "pod_ip",
        .log_v1 = d->ip,
        .done = d->done,
        .arg = d->arg,
    };

    if (!k)
        return NULL;
    snprintf(envd, sizeof(envd), "%s:%d", d->ip, d->envd_port);
    if (!(k->run = rt_start_run_new(&rd))) {
        free(k);
        return NULL;
    }
    return k;
}

void kstart_free(struct kstart *k)
{
    if (!k)
        return;
    rt_start_run_free(k->run);
    free(k);
}

void kstart_describe(const struct kstart *k, char *out, size_t outlen)
{
    char what[256], now[600];
    const char *last;

    /* FAILED: rt_start_run_describe says the failure */
    if (rt_start_run_where(k->run, what, sizeof(what), &last) == RT_START_STARTING)
        snprintf(now, sizeof(now), "envd has not started the start command");
    else if (what[0])
        snprintf(now, sizeof(now), "the %s has not passed (last try: %s)", what, last);
    else
        snprintf(now, sizeof(now), "the sandbox is ready");
    rt_start_run_describe(k->run, now, out, outlen);
}
