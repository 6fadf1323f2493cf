/* The per-sandbox usage exporter behind the agent's /metrics (metrics.c),
 * with narrow deps so it runs without the rest of the E2B API (tests drive
 * it against a fake runtime).
 *
 * Every interval it lists the runtime's running sandboxes, probes their
 * usage on the loop thread (rt_usage_probe), reads it on a loop worker
 * (rt_usage_read) and sets the cAdvisor-named series on the loop thread:
 *   container_cpu_usage_seconds_total, container_memory_working_set_bytes,
 *   container_memory_rss, container_memory_cache, container_fs_usage_bytes,
 * labelled namespace, pod (the sandbox id), container="sandbox". Series of
 * sandboxes that are gone are removed. A runtime without RT_CAP_USAGE
 * exports nothing. Loop thread only. */
#ifndef AGENTBOX_AGENT_E2B_METRICS_H
#define AGENTBOX_AGENT_E2B_METRICS_H

struct e2b;
struct loop;
struct metrics_registry;
struct rt;
struct e2b_exporter;

struct e2b_exporter_deps {
    struct loop *loop;
    struct metrics_registry *registry; /* the families are registered there */
    /* The runtime now, or NULL (the agent creates it after the routes). */
    struct rt *(*rt)(void *arg);
    void *arg;
    int first_ms;    /* first round after this; 0 → 1000 */
    int interval_ms; /* between rounds; 0 → 10000 */
};

/* 0 or AB_ENOMEM. The first round starts after d->first_ms. */
int e2b_exporter_new(const struct e2b_exporter_deps *d, struct e2b_exporter **out);
/* Stops the rounds; call before loop_free. A round on a worker finishes
 * first, then the exporter is freed from its completion. NULL is fine. */
void e2b_exporter_free(struct e2b_exporter *x);

/* Frees what e2b_metric_routes made (e->metrics, the Prometheus token and the
 * exporter). Call before loop_free; NULL or a never-wired e is fine. */
void e2b_metrics_free(struct e2b *e);

#endif
