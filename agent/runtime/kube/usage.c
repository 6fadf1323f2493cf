/* Usage and logs on the kube runtime (usage.h). */
#include "agent/runtime/kube/usage.h"

#include "agent/runtime/kube/client.h"
#include "agent/runtime/kube/reconcile.h"

#include "agentbox/common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define READERS_MAX 16

struct reader {
    uint64_t id; /* 0: free */
    struct kube_client *c;
    int refs;
    bool dead; /* unregistered: the last read frees c */
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reader g_readers[READERS_MAX];
static uint64_t g_next = 1;

uint64_t kube_usage_register(struct kube_client *c)
{
    uint64_t id = 0;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < READERS_MAX; i++)
        if (!g_readers[i].id) {
            g_readers[i] = (struct reader){.id = id = g_next++, .c = c};
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return id;
}

void kube_usage_unregister(uint64_t id, struct kube_client *c)
{
    bool free_now = true;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; id && i < READERS_MAX; i++)
        if (g_readers[i].id == id) {
            if (g_readers[i].refs > 0) {
                g_readers[i].dead = true;
                free_now = false;
            } else {
                memset(&g_readers[i], 0, sizeof(g_readers[i]));
            }
            break;
        }
    pthread_mutex_unlock(&g_mu);
    if (free_now)
        kube_client_free(c);
}

static struct kube_client *reader_get(uint64_t id)
{
    struct kube_client *c = NULL;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; id && i < READERS_MAX; i++)
        if (g_readers[i].id == id && !g_readers[i].dead) {
            g_readers[i].refs++;
            c = g_readers[i].c;
            break;
        }
    pthread_mutex_unlock(&g_mu);
    return c;
}

static void reader_put(uint64_t id)
{
    struct kube_client *gone = NULL;
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < READERS_MAX; i++)
        if (g_readers[i].id == id) {
            if (--g_readers[i].refs == 0 && g_readers[i].dead) {
                gone = g_readers[i].c;
                memset(&g_readers[i], 0, sizeof(g_readers[i]));
            }
            break;
        }
    pthread_mutex_unlock(&g_mu);
    if (gone)
        kube_client_free(gone);
}

struct kprobe {
    uint64_t client;
    char pod[254];
    char container[64];
    int64_t cpu_milli, mem_limit;
};
_Static_assert(sizeof(struct kprobe) <= RT_PROBE_DATA_MAX, "kube probe fits rt_probe");

void kube_usage_probe_fill(struct rt_probe *p, const struct rt_ops *ops, uint64_t client,
                           const char *id, const char *ns, const char *pod, const char *container,
                           int64_t claimed_ms, int64_t cpu_milli, int64_t mem_limit)
{
    struct kprobe d;
    memset(p, 0, sizeof(*p));
    memset(&d, 0, sizeof(d));
    p->ops = ops;
    ab_strlcpy(p->id, id, sizeof(p->id));
    ab_strlcpy(p->ns, ns, sizeof(p->ns));
    p->claimed_ms = claimed_ms;
    d.client = client;
    ab_strlcpy(d.pod, pod, sizeof(d.pod));
    ab_strlcpy(d.container, container, sizeof(d.container));
    d.cpu_milli = cpu_milli;
    d.mem_limit = mem_limit;
    memcpy(p->data, &d, sizeof(d));
}

/* A quantity's number and suffix: "250m" → 250, "m". */
static int split_quantity(const char *s, double *v, const char **suffix)
{
    char *end;
    if (!s || !*s)
        return AB_EINVAL;
    *v = strtod(s, &end);
    if (end == s || *v < 0)
        return AB_EINVAL;
    *suffix = end;
    return 0;
}

int kube_quantity_cpu(const char *s, double *cores)
{
    const char *suf;
    double v;
    if (split_quantity(s, &v, &suf) != 0)
        return AB_EINVAL;
    if (!*suf)
        *cores = v;
    else if (!strcmp(suf, "m"))
        *cores = v / 1e3;
    else if (!strcmp(suf, "u"))
        *cores = v / 1e6;
    else if (!strcmp(suf, "n"))
        *cores = v / 1e9;
    else
        return AB_EINVAL;
    return 0;
}

int kube_quantity_bytes(const char *s, double *bytes)
{
    static const struct {
        const char *suf;
        double mul;
    } T[] = {{"", 1},           {"k", 1e3},
             {"M", 1e6},        {"G", 1e9},
             {"T", 1e12},       {"Ki", 1024.0},
             {"Mi", 1048576.0}, {"Gi", 1073741824.0},
             {"m", 1e-3},       {"Ti", 1099511627776.0}};
    const char *suf;
    double v;
    if (split_quantity(s, &v, &suf) != 0)
        return AB_EINVAL;
    for (size_t i = 0; i < AB_ARRAY_LEN(T); i++)
        if (!strcmp(suf, T[i].suf)) {
            *bytes = v * T[i].mul;
            return 0;
        }
    return AB_EINVAL;
}

/* GET one PodMetrics (pod non-NULL) or the list of the namespace's
 * agent-managed Pods. NULL when there is no metrics API (no metrics-server),
 * no sample yet, or no answer: then the readings are zeros, not "gone". */
static json_t *metrics_get(struct kube_client *c, const char *ns, const char *pod)
{
    struct kube_response resp = {0};
    char url[KUBE_URL_MAX], err[128];
    const struct kube_ref r = {
        .group = "metrics.k8s.io", .version = "v1beta1", .ns = ns, .resource = "pods", .name = pod};
    const struct kube_query q = {.label_selector = KUBE_POD_SELECTOR};
    json_t *m = NULL;
    if (kube_url(url, sizeof(url), kube_client_server(c), &r, pod ? NULL : &q, err, sizeof(err)) ==
            0 &&
        kube_request(c, "GET", url, NULL, NULL, 0, &resp) == 0 && resp.code == 200)
        m = json_loadb(resp.body, resp.len, 0, NULL);
    kube_response_clear(&resp);
    return m;
}

/* u from the PodMetrics m of probe p's Pod (m may be NULL). */
static void usage_apply(const json_t *m, const struct rt_probe *p, struct rt_usage *u)
{
    struct kprobe d;
    memcpy(&d, p->data, sizeof(d));
    memset(u, 0, sizeof(*u));
    u->cpu_count = d.cpu_milli > 0 ? (d.cpu_milli + 999) / 1000 : 0;
    u->mem_limit = d.mem_limit;
    size_t i;
    json_t *ct;
    json_array_foreach(json_object_get(m, "containers"), i, ct)
    {
        const char *name = json_string_value(json_object_get(ct, "name"));
        if (!name || strcmp(name, d.container) != 0)
            continue;
        const json_t *us = json_object_get(ct, "usage");
        double cores = 0, mem = 0;
        if (kube_quantity_cpu(json_string_value(json_object_get(us, "cpu")), &cores) == 0) {
            double since = (double)(ab_wall_ms() - p->claimed_ms) / 1000.0;
            u->cpu_seconds = cores * (since > 0 ? since : 0);
        }
        if (kube_quantity_bytes(json_string_value(json_object_get(us, "memory")), &mem) == 0)
            u->mem_working_set = u->mem_rss = mem;
    }
}

static const json_t *item_named(const json_t *list, const char *name)
{
    size_t i;
    json_t *it;
    json_array_foreach(json_object_get(list, "items"), i, it)
    {
        const char *n = json_string_value(json_object_get(json_object_get(it, "metadata"), "name"));
        if (n && strcmp(n, name) == 0)
            return it;
    }
    return NULL;
}

/* One request per namespace, not per sandbox: the exporter reads every
 * running sandbox every 10 s, and the API client's QPS is the reconciler's
 * too. A single probe asks for its own Pod. */
void kube_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out)
{
    bool *done = n > 1 ? calloc(n, sizeof(*done)) : NULL;

    for (size_t i = 0; i < n; i++) {
        struct kprobe d;
        if (done && done[i])
            continue;
        memcpy(&d, p[i].data, sizeof(d));
        struct kube_client *c = reader_get(d.client);
        if (!c) {
            memset(&out[i], 0, sizeof(out[i]));
            out[i].err = AB_ENOENT;
            continue;
        }
        if (!done) { /* one sandbox (or no memory for the grouping) */
            json_t *m = metrics_get(c, p[i].ns, d.pod);
            usage_apply(m, &p[i], &out[i]);
            json_decref(m);
            reader_put(d.client);
            continue;
        }
        json_t *list = metrics_get(c, p[i].ns, NULL);
        for (size_t k = i; k < n; k++) {
            struct kprobe dk;
            memcpy(&dk, p[k].data, sizeof(dk));
            if (done[k] || dk.client != d.client || strcmp(p[k].ns, p[i].ns) != 0)
                continue;
            usage_apply(item_named(list, dk.pod), &p[k], &out[k]);
            done[k] = true;
        }
        json_decref(list);
        reader_put(d.client);
    }
    free(done);
}

int kube_log_read(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out)
{
    struct kprobe d;
    struct kube_response resp = {0};
    char url[KUBE_URL_MAX], err[128], since[32];
    int rc = AB_EIO;

    memset(out, 0, sizeof(*out));
    memcpy(&d, p->data, sizeof(d));
    struct kube_client *c = reader_get(d.client);
    if (!c)
        return AB_EIO;
    const struct kube_ref r = {
        .version = "v1", .ns = p->ns, .resource = "pods", .name = d.pod, .sub = "log"};
    kube_time_format(p->claimed_ms, false, since);
    size_t n;
    if (kube_url(url, sizeof(url), kube_client_server(c), &r, NULL, err, sizeof(err)) == 0 &&
        (n = strlen(url)) + 128 < sizeof(url)) {
        /* container: a DNS label; since: RFC 3339 digits, '-', ':', 'T', 'Z' */
        snprintf(url + n, sizeof(url) - n, "?container=%s&sinceTime=%s&tailLines=%d", d.container,
                 since, RT_LOG_LINES_MAX);
        if (kube_request(c, "GET", url, NULL, NULL, 0, &resp) == 0 && resp.code == 200) {
            size_t len = resp.len, from = len > RT_LOG_TAIL_MAX ? len - RT_LOG_TAIL_MAX : 0;
            char *text = malloc(len - from + 1);
            if (text) {
                memcpy(text, resp.body + from, len - from);
                text[len - from] = '\0';
                rc = rt_log_from_text(text, len - from, from > 0, p->claimed_ms, q, out);
            } else {
                rc = AB_ENOMEM;
            }
        }
    }
    kube_response_clear(&resp);
    reader_put(d.client);
    return rc;
}
