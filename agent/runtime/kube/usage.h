/* Usage and logs of the kube runtime's sandboxes (runtime.h "Usage and
 * logs"): logs from the Pod log API (GET .../pods/{pod}/log?container=
 * &sinceTime=<claim>&tailLines=), parsed by agent/runtime/log_text.c; usage
 * from the resource metrics API (metrics.k8s.io/v1beta1 PodMetrics, what
 * metrics-server serves: the container's CPU rate and working set).
 *
 * The reads run on a worker from the probe alone, while the runtime (and its
 * API client) may be freed: the probe names the client by a registration
 * number, and the client is freed by whichever of kube_usage_unregister and
 * the last read in flight comes last.
 *
 * Limits: PodMetrics gives a rate, not a counter, so cpu_seconds is that rate
 * times the time since the claim (two reads a moment apart give the rate
 * back, which is all the E2B metrics ask of it); no network counters, no
 * disk use. A log read asks for the last RT_LOG_LINES_MAX lines and keeps
 * their last RT_LOG_TAIL_MAX bytes. */
#ifndef AGENT_RUNTIME_KUBE_USAGE_H
#define AGENT_RUNTIME_KUBE_USAGE_H

#include "agent/runtime/runtime.h"

#include <stdint.h>

struct kube_client;

/* Registers the runtime's client for reads; its number (never 0). 0 when the
 * table is full (then reads answer as if the sandbox were gone). */
uint64_t kube_usage_register(struct kube_client *c);
/* The runtime goes: the client is freed now, or by the last read in flight. */
void kube_usage_unregister(uint64_t id, struct kube_client *c);

/* Loop thread: fills p for the Pod of a claimed sandbox. */
void kube_usage_probe_fill(struct rt_probe *p, const struct rt_ops *ops, uint64_t client,
                           const char *id, const char *ns, const char *pod, const char *container,
                           int64_t claimed_ms, int64_t cpu_milli, int64_t mem_limit);

void kube_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out);
int kube_log_read(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out);

/* Parses Kubernetes quantities: CPU ("250m", "1", "123456n", "5u") into
 * cores, memory ("128Mi", "1Gi", "1000k", "512") into bytes. 0 or AB_EINVAL. */
int kube_quantity_cpu(const char *s, double *cores);
int kube_quantity_bytes(const char *s, double *bytes);

#endif
