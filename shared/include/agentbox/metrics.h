/* Counters, gauges and histograms with labels, rendered in the Prometheus
 * text exposition format (version 0.0.4).
 *
 * A metric family is registered once (name, help, type, label names); a
 * series is looked up by label values. Series updates are atomic and safe
 * from any thread; registration and rendering take a mutex. Label values
 * are escaped (\\, \", \n) on rendering. Bounded: a family holds at most
 * METRICS_MAX_SERIES series; past that, updates go to no series and bump
 * agentbox_metrics_dropped_series_total. */
#ifndef AGENTBOX_METRICS_H
#define AGENTBOX_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 6
#define METRICS_MAX_SERIES 10000

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metrics_registry;
struct metric_family;

struct metrics_registry *metrics_registry_new(void);
void metrics_registry_free(struct metrics_registry *r);
/* The process-wide registry, created on first use. */
struct metrics_registry *metrics_default(void);

/* labels: NULL-terminated array of label names (may be NULL for none).
 * buckets: histogram upper bounds, ascending (NULL → default latency buckets
 * in seconds: .0005 .001 .0025 .005 .01 .025 .05 .1 .25 .5 1 2.5 5 10).
 * Registering the same name twice returns the existing family. */
struct metric_family *metrics_register(struct metrics_registry *r, const char *name,
                                       const char *help, enum metric_type type,
                                       const char *const *labels, const double *buckets,
                                       size_t nbuckets);

/* values: one per label name, in order (NULL when the family has no labels). */
void metrics_add(struct metric_family *f, const char *const *values, double delta);
void metrics_set(struct metric_family *f, const char *const *values, double value);
void metrics_observe(struct metric_family *f, const char *const *values, double value);
/* Removes a series (e.g. a cluster that went away). */
void metrics_remove(struct metric_family *f, const char *const *values);

/* Renders the whole registry; returns a malloc'd NUL-terminated string. */
char *metrics_render(struct metrics_registry *r, size_t *len);

#endif
