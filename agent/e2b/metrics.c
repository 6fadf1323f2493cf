/* Sandbox metrics (reference §2.7), two halves:
 *
 * 1. The E2B routes read a Prometheus-compatible backend (--prometheus-url,
 *    bearer token from PROMETHEUS_TOKEN) with cAdvisor series scoped by
 *    namespace="<ns>",pod="<sandbox id>" and container!="",container!="POD":
 *      GET /sandboxes/{id}/metrics?start=&end=  (unix s; default the last 15 min;
 *          step = window/120 clamped to [15 s, 5 min]) → [SandboxMetric]
 *      GET /sandboxes/metrics?sandbox_ids=a,b   → {"sandboxes": {id: SandboxMetric}}
 *    Without a backend both answer from the runtime's own usage (the seam's
 *    rt_usage_probe / rt_usage_read, what the exporter below reads): one
 *    SandboxMetric of now per sandbox, CPU from two readings LIVE_CPU_MS
 *    apart on a worker; 501 naming the flag only for a runtime without
 *    RT_CAP_USAGE.
 *
 * 2. The agent exports those cAdvisor-named series for its own sandboxes on
 *    /metrics, so a Prometheus scraping the agent can answer (1): every 10 s
 *    the exporter (metrics.h) asks the runtime for each running sandbox's
 *    usage through the seam (rt_usage_probe on the loop, rt_usage_read on a
 *    worker). How the runtime measures it (cgroup, /proc, the directory's
 *    size) is its business.
 *
 * State lives in struct e2b_metrics, one per E2B instance (e->metrics),
 * freed by e2b_metrics_free. */
#include "agent/e2b/e2b.h"
#include "agent/e2b/metrics.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/sbxid.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PROM_BODY_MAX (4 * 1024 * 1024)
#define PROM_IDS_MAX 100
#define EXPORT_INTERVAL_MS 10000
#define EXPORT_MAX 512
#define PROM_TOKEN_MAX 1023
/* The selector holds the namespace and up to PROM_IDS_MAX ids joined by '|'. */
#define PROM_SEL_MAX (128 + RT_NAME_MAX + PROM_IDS_MAX * (SBXID_MAX + 1))
/* The base URL plus the escaped query (each byte at most "%XX"). */
#define PROM_URL_MAX (64 * 1024)

struct e2b_metrics {
    char prom_token[PROM_TOKEN_MAX + 1]; /* PROMETHEUS_TOKEN, "" when unset */
    struct e2b_exporter *exporter;
};

/* --- Prometheus queries ------------------------------------------------------------------ */

enum { Q_CPU, Q_MEM, Q_CACHE, Q_DISK, Q_DISK_TOTAL, Q_N };
static const char *const q_fmt[Q_N] = {
    "sum by (pod) (rate(container_cpu_usage_seconds_total{%s}[2m]))",
    "sum by (pod) (container_memory_working_set_bytes{%s})",
    "sum by (pod) (container_memory_cache{%s})",
    "sum by (pod) (container_fs_usage_bytes{%s})",
    "max by (pod) (container_fs_limit_bytes{%s})",
};

struct sbx_ref {
    char id[SBXID_MAX + 1];
    int64_t cpu_count;
    int64_t mem_total;
};

/* One query job; everything the worker reads is a copy (base, token). */
struct prom {
    struct http_exchange *ex;
    char *base; /* the Prometheus URL */
    char token[PROM_TOKEN_MAX + 1];
    bool range;
    int64_t start, end, step;
    char ns[64];
    struct sbx_ref ids[PROM_IDS_MAX];
    size_t nids;
    json_t *res[Q_N]; /* parsed "data.result" arrays */
    char err[512];
};

/* Refusing a write makes curl stop with CURLE_WRITE_ERROR; buf_err says why. */
static size_t body_write(char *d, size_t sz, size_t n, void *arg)
{
    return buf_append(arg, d, sz * n) == 0 ? sz * n : 0;
}

static json_t *prom_get(CURL *c, const char *base, const struct prom *p, const char *query,
                        char *err, size_t errlen)
{
    char *eq = curl_easy_escape(c, query, 0);
    struct buf url, b;
    struct curl_slist *h = NULL;
    long status = 0;
    json_t *out = NULL;
    int rc;

    buf_init(&url, PROM_URL_MAX, "Prometheus query URL");
    buf_init(&b, PROM_BODY_MAX, "Prometheus answer");
    if (!eq)
        rc = AB_ENOMEM;
    else if (p->range)
        rc = buf_printf(&url, "%s/api/v1/query_range?query=%s&start=%lld&end=%lld&step=%lld", base,
                        eq, (long long)p->start, (long long)p->end, (long long)p->step);
    else
        rc = buf_printf(&url, "%s/api/v1/query?query=%s", base, eq);
    curl_free(eq);
    if (rc != 0) {
        snprintf(err, errlen, "cannot ask Prometheus at %s: %s", base,
                 buf_err(&url)[0] ? buf_err(&url) : "out of memory");
        buf_free(&url);
        return NULL;
    }
    if (p->token[0]) {
        /* "Authorization: Bearer " and a token of at most PROM_TOKEN_MAX bytes always fit. */
        char auth[PROM_TOKEN_MAX + 32];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", p->token);
        h = curl_slist_append(h, auth);
        explicit_bzero(auth, sizeof(auth));
    }
    curl_easy_setopt(c, CURLOPT_URL, buf_str(&url));
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode crc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    if (crc != CURLE_OK) {
        snprintf(err, errlen, "Prometheus at %s did not answer: %s", base,
                 buf_err(&b)[0] ? buf_err(&b) : curl_easy_strerror(crc));
    } else if (status != 200) {
        snprintf(err, errlen, "Prometheus at %s answered HTTP %ld", base, status);
    } else {
        json_t *j = json_loadb(buf_str(&b), buf_len(&b), 0, NULL);
        json_t *r = json_object_get(json_object_get(j, "data"), "result");
        if (json_is_array(r))
            out = json_incref(r);
        else
            snprintf(err, errlen, "Prometheus at %s answered without data.result", base);
        json_decref(j);
    }
    buf_free(&url);
    buf_free(&b);
    return out;
}

static void prom_work(void *arg)
{
    struct prom *p = arg;
    CURL *c = curl_easy_init();
    struct buf sel, query;
    int rc;

    if (!c) {
        snprintf(p->err, sizeof(p->err), "cannot start a request to Prometheus");
        return;
    }
    /* Sized for PROM_IDS_MAX ids and the longest namespace: a refusal here
     * is a bug, never a shorter list of pods. */
    buf_init(&sel, PROM_SEL_MAX, "Prometheus series selector");
    buf_init(&query, PROM_SEL_MAX + 128, "Prometheus query");
    rc = buf_printf(&sel, "namespace=\"%s\",container!=\"\",container!=\"POD\",pod=~\"", p->ns);
    for (size_t i = 0; i < p->nids && rc == 0; i++)
        rc = buf_printf(&sel, "%s%s", i ? "|" : "", p->ids[i].id);
    if (rc == 0)
        rc = buf_append_str(&sel, "\"");
    if (rc != 0)
        snprintf(p->err, sizeof(p->err), "%s", buf_err(&sel));
    for (int q = 0; q < Q_N && !p->err[0]; q++) {
        buf_reset(&query);
        rc = buf_printf(&query, q_fmt[q], buf_str(&sel));
        if (rc != 0)
            snprintf(p->err, sizeof(p->err), "%s", buf_err(&query));
        else
            p->res[q] = prom_get(c, p->base, p, buf_str(&query), p->err, sizeof(p->err));
    }
    buf_free(&sel);
    buf_free(&query);
    curl_easy_cleanup(c);
}

static double num(json_t *v)
{
    const char *s = json_string_value(v);
    return s ? atof(s) : 0;
}

/* The value of series pod at time t (range) or now (instant); 0 when missing. */
static double value_at(json_t *res, const char *pod, int64_t t, bool range)
{
    size_t i;
    json_t *s;
    json_array_foreach(res, i, s)
    {
        const char *sp = json_string_value(json_object_get(json_object_get(s, "metric"), "pod"));
        if (!sp || strcmp(sp, pod) != 0)
            continue;
        if (!range)
            return num(json_array_get(json_object_get(s, "value"), 1));
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(s, "values"), k, v)
        {
            if ((int64_t)json_number_value(json_array_get(v, 0)) == t)
                return num(json_array_get(v, 1));
        }
    }
    return 0;
}

static json_t *metric_json(const struct prom *p, const struct sbx_ref *r, int64_t t)
{
    char ts[32];
    double cpu = value_at(p->res[Q_CPU], r->id, t, p->range);
    e2b_time(t * 1000, ts, sizeof(ts));
    return json_pack("{s:s,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp", ts, "timestampUnix",
                     (json_int_t)t, "cpuCount", (json_int_t)r->cpu_count, "cpuUsedPct",
                     r->cpu_count ? cpu / (double)r->cpu_count * 100.0 : cpu * 100.0, "memUsed",
                     (json_int_t)value_at(p->res[Q_MEM], r->id, t, p->range), "memTotal",
                     (json_int_t)r->mem_total, "memCache",
                     (json_int_t)value_at(p->res[Q_CACHE], r->id, t, p->range), "diskUsed",
                     (json_int_t)value_at(p->res[Q_DISK], r->id, t, p->range), "diskTotal",
                     (json_int_t)value_at(p->res[Q_DISK_TOTAL], r->id, t, p->range));
}

static void prom_free(struct prom *p)
{
    for (int q = 0; q < Q_N; q++)
        json_decref(p->res[q]);
    free(p->base);
    free(p);
}

static void prom_done(void *arg, int status)
{
    struct prom *p = arg;
    if (status != 0 || p->err[0]) {
        http_respond_error(p->ex, 502, "%s", status ? "the agent is shutting down" : p->err);
    } else if (p->range) {
        json_t *arr = json_array();
        for (int64_t t = p->start; t <= p->end; t += p->step)
            json_array_append_new(arr, metric_json(p, &p->ids[0], t));
        http_respond_json(p->ex, 200, arr);
    } else {
        json_t *m = json_object();
        int64_t now = ab_wall_ms() / 1000;
        for (size_t i = 0; i < p->nids; i++)
            json_object_set_new(m, p->ids[i].id, metric_json(p, &p->ids[i], now));
        http_respond_json(p->ex, 200, json_pack("{s:o}", "sandboxes", m));
    }
    prom_free(p);
}

static void sbx_ref_of(const struct rt_sandbox *s, struct sbx_ref *r)
{
    int64_t cpu, mem_mb;
    ab_strlcpy(r->id, s->id, sizeof(r->id));
    e2b_pool_size(s->pool, &cpu, &mem_mb);
    r->cpu_count = cpu;
    r->mem_total = mem_mb * 1048576;
}

/* --- live usage (no Prometheus) ------------------------------------------------------------ */

#define LIVE_CPU_MS 250 /* between the two readings the CPU share is taken from */

struct live_item {
    struct sbx_ref ref;
    int64_t disk_total;
};

/* One read of the runtime's usage; the worker touches only the probes. */
struct live {
    struct http_exchange *ex;
    bool one; /* GET /sandboxes/{id}/metrics: an array; else {"sandboxes": {...}} */
    size_t n;
    struct live_item items[PROM_IDS_MAX];
    struct rt_probe probes[PROM_IDS_MAX];
    struct rt_usage u0[PROM_IDS_MAX], u1[PROM_IDS_MAX];
    int64_t t_ms; /* wall clock of the second reading */
};

static void live_work(void *arg)
{
    struct live *l = arg;
    struct timespec ts = {0, LIVE_CPU_MS * 1000000L};

    rt_usage_read(l->probes, l->n, l->u0);
    nanosleep(&ts, NULL);
    rt_usage_read(l->probes, l->n, l->u1);
    l->t_ms = ab_wall_ms();
}

static json_t *live_json(const struct live *l, size_t i)
{
    const struct live_item *it = &l->items[i];
    const struct rt_usage *u = &l->u1[i];
    int64_t cpus = u->cpu_count > 0 ? u->cpu_count : it->ref.cpu_count;
    int64_t mem_total = u->mem_limit > 0 ? u->mem_limit : it->ref.mem_total;
    double busy = (u->cpu_seconds - l->u0[i].cpu_seconds) / (LIVE_CPU_MS / 1000.0);
    double pct = busy / (double)(cpus > 0 ? cpus : 1) * 100.0;
    char ts[32];

    e2b_time(l->t_ms, ts, sizeof(ts));
    return json_pack("{s:s,s:I,s:I,s:f,s:I,s:I,s:I,s:I,s:I}", "timestamp", ts, "timestampUnix",
                     (json_int_t)(l->t_ms / 1000), "cpuCount", (json_int_t)cpus, "cpuUsedPct",
                     pct < 0 ? 0.0 : pct, "memUsed", (json_int_t)u->mem_working_set, "memTotal",
                     (json_int_t)mem_total, "memCache", (json_int_t)u->mem_cache, "diskUsed",
                     (json_int_t)u->disk_used, "diskTotal", (json_int_t)it->disk_total);
}

static void live_done(void *arg, int status)
{
    struct live *l = arg;

    if (status != 0) {
        http_respond_error(l->ex, 503, "the agent is shutting down");
    } else if (l->one) {
        json_t *arr = json_array();
        if (l->n == 1 && l->u1[0].err == 0)
            json_array_append_new(arr, live_json(l, 0));
        http_respond_json(l->ex, 200, arr);
    } else {
        json_t *m = json_object();
        for (size_t i = 0; i < l->n; i++)
            if (l->u1[i].err == 0) /* gone meanwhile: left out, like an unknown id */
                json_object_set_new(m, l->items[i].ref.id, live_json(l, i));
        http_respond_json(l->ex, 200, json_pack("{s:o}", "sandboxes", m));
    }
    free(l);
}

/* Adds sandbox s to l when the runtime can measure it. */
static void live_add(struct e2b *e, struct live *l, const struct rt_sandbox *s)
{
    if (l->n >= PROM_IDS_MAX || rt_usage_probe(e2b_rt(e), s->id, &l->probes[l->n]) != 0)
        return;
    sbx_ref_of(s, &l->items[l->n].ref);
    if (s->cpu_milli > 0)
        l->items[l->n].ref.cpu_count = (s->cpu_milli + 999) / 1000;
    if (s->mem_bytes > 0)
        l->items[l->n].ref.mem_total = s->mem_bytes;
    l->items[l->n].disk_total = s->disk_bytes;
    l->n++;
}

static void live_submit(struct e2b *e, struct http_exchange *ex, struct live *l)
{
    if (l->n == 0) { /* nothing to read: answer at once */
        live_done(l, 0);
        return;
    }
    if (loop_submit(e2b_loop(e), live_work, live_done, l) != 0) {
        free(l);
        http_respond_error(ex, 503, "too many requests in flight; retry shortly");
    }
}

static struct live *live_new(struct http_exchange *ex, bool one)
{
    struct live *l = calloc(1, sizeof(*l));
    if (!l) {
        http_respond_error(ex, 503, "out of memory");
        return NULL;
    }
    l->ex = ex;
    l->one = one;
    return l;
}

static bool no_backend(struct e2b *e, struct http_exchange *ex, const char *operation)
{
    if (rt_has(e2b_rt(e), RT_CAP_USAGE))
        return false;
    e2b_unsupported(e, ex, operation, "unimplemented",
                    "metrics are not enabled: the agent has no metrics backend and its runtime "
                    "measures no usage; start it with --prometheus-url (and PROMETHEUS_TOKEN if "
                    "the backend needs one)");
    return true;
}

/* A new job for ex against e's backend (NULL after answering 503). */
static struct prom *prom_new(struct e2b *e, struct http_exchange *ex)
{
    struct prom *p = calloc(1, sizeof(*p));

    if (!p || !(p->base = strdup(e2b_prometheus_url(e)))) {
        free(p);
        http_respond_error(ex, 503, "out of memory");
        return NULL;
    }
    p->ex = ex;
    if (e->metrics)
        ab_strlcpy(p->token, e->metrics->prom_token, sizeof(p->token));
    return p;
}

static void submit(struct e2b *e, struct http_exchange *ex, struct prom *p)
{
    if (loop_submit(e2b_loop(e), prom_work, prom_done, p) != 0) {
        prom_free(p);
        http_respond_error(ex, 503, "too many requests in flight; retry shortly");
    }
}

static void one_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *pr)
{
    const struct http_request *r = http_req(ex);
    struct rt_sandbox s;
    char b[32];
    int64_t now = ab_wall_ms() / 1000, start = now - 900, end = now;

    if (http_query_get(r, "start", b, sizeof(b)) == 0 && b[0])
        start = strtoll(b, NULL, 10);
    if (http_query_get(r, "end", b, sizeof(b)) == 0 && b[0])
        end = strtoll(b, NULL, 10);
    if (start >= end) {
        http_respond_error(ex, 400, "start must be earlier than end");
        return;
    }
    if (!e2b_lookup(e, ex, pr, &s)) /* forwards other clusters' ids first */
        return;
    json_decref(s.metadata);
    if (!e2b_prometheus_url(e)) {
        struct live *l;
        if (no_backend(e, ex, "GetSandboxesSandboxIDMetrics") || !(l = live_new(ex, true)))
            return;
        live_add(e, l, &s);
        live_submit(e, ex, l);
        return;
    }
    struct prom *p = prom_new(e, ex);
    if (!p)
        return;
    p->range = true;
    p->start = start;
    p->end = end;
    p->step = (end - start) / 120;
    p->step = p->step < 15 ? 15 : p->step > 300 ? 300 : p->step;
    ab_strlcpy(p->ns, s.ns, sizeof(p->ns));
    sbx_ref_of(&s, &p->ids[0]);
    p->nids = 1;
    submit(e, ex, p);
}

static void many_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *pr)
{
    const struct http_request *r = http_req(ex);
    char ids[PROM_IDS_MAX * (SBXID_MAX + 1) + 1];
    struct rt *rt = e2b_rt(e);

    if (!e2b_prometheus_url(e) && no_backend(e, ex, "GetSandboxesMetrics"))
        return;
    if (http_query_get(r, "sandbox_ids", ids, sizeof(ids)) != 0) {
        http_respond_error(ex, 400,
                           "sandbox_ids is required: a comma-separated list of at most "
                           "%d sandbox ids",
                           PROM_IDS_MAX);
        return;
    }
    if (!e2b_prometheus_url(e)) {
        struct live *l = live_new(ex, false);
        if (!l)
            return;
        for (char *save = NULL, *id = strtok_r(ids, ",", &save); id;
             id = strtok_r(NULL, ",", &save)) {
            struct rt_sandbox s;
            memset(&s, 0, sizeof(s));
            /* ids that no longer resolve (or are not the caller's) are skipped */
            if (rt && rt_get(rt, id, &s) == 0 && e2b_owns(pr, &s) && s.state == RT_RUNNING)
                live_add(e, l, &s);
            json_decref(s.metadata);
        }
        live_submit(e, ex, l);
        return;
    }
    struct prom *p = prom_new(e, ex);
    if (!p)
        return;
    ab_strlcpy(p->ns, pr->namespace, sizeof(p->ns));
    for (char *save = NULL, *id = strtok_r(ids, ",", &save); id && p->nids < PROM_IDS_MAX;
         id = strtok_r(NULL, ",", &save)) {
        struct rt_sandbox s;
        memset(&s, 0, sizeof(s));
        /* ids that no longer resolve (or are not the caller's) are skipped */
        if (rt && rt_get(rt, id, &s) == 0 && e2b_owns(pr, &s) && s.state != RT_IDLE)
            sbx_ref_of(&s, &p->ids[p->nids++]);
        json_decref(s.metadata);
    }
    if (p->nids == 0) {
        prom_free(p);
        http_respond_json(ex, 200, json_pack("{s:{}}", "sandboxes"));
        return;
    }
    submit(e, ex, p);
}

/* --- the exporter ------------------------------------------------------------------------ */

struct exp_item {
    char id[RT_ID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    bool ok; /* read this round */
};

struct e2b_exporter {
    struct e2b_exporter_deps d;
    struct loop_timer timer;
    struct metric_family *cpu, *ws, *rss, *cache, *fs;
    /* the round in flight (busy): items[i] was measured with probes[i] into usage[i] */
    struct exp_item *items;
    struct rt_probe *probes;
    struct rt_usage *usage;
    size_t n;
    struct exp_item *last; /* series exported by the previous round */
    size_t nlast;
    bool busy;
    bool closing; /* freed by the round's completion */
};

static void round_free(struct e2b_exporter *x)
{
    free(x->items);
    free(x->probes);
    free(x->usage);
    x->items = NULL;
    x->probes = NULL;
    x->usage = NULL;
    x->n = 0;
}

static void exporter_destroy(struct e2b_exporter *x)
{
    round_free(x);
    free(x->last);
    free(x);
}

static void collect_cb(void *arg, const struct rt_sandbox *s)
{
    struct e2b_exporter *x = arg;
    if (x->n >= EXPORT_MAX || s->state != RT_RUNNING)
        return;
    struct exp_item *it = &x->items[x->n++];
    memset(it, 0, sizeof(*it));
    ab_strlcpy(it->id, s->id, sizeof(it->id));
    ab_strlcpy(it->ns, s->ns, sizeof(it->ns));
}

/* Worker: the runtime's blocking read, from the probes alone. */
static void export_work(void *arg)
{
    struct e2b_exporter *x = arg;
    rt_usage_read(x->probes, x->n, x->usage);
}

static void export_schedule(struct e2b_exporter *x);

static void export_done(void *arg, int status)
{
    struct e2b_exporter *x = arg;
    x->busy = false;
    if (x->closing) {
        exporter_destroy(x);
        return;
    }
    if (status != 0) {
        round_free(x);
        return;
    }
    for (size_t i = 0; i < x->n; i++)
        x->items[i].ok = x->usage[i].err == 0;
    /* drop series of sandboxes that are gone */
    for (size_t i = 0; i < x->nlast; i++) {
        bool still = false;
        for (size_t k = 0; k < x->n && !still; k++)
            still = x->items[k].ok && !strcmp(x->items[k].id, x->last[i].id);
        if (!still) {
            const char *l[] = {x->last[i].ns, x->last[i].id, "sandbox"};
            metrics_remove(x->cpu, l);
            metrics_remove(x->ws, l);
            metrics_remove(x->rss, l);
            metrics_remove(x->cache, l);
            metrics_remove(x->fs, l);
        }
    }
    for (size_t i = 0; i < x->n; i++) {
        const struct exp_item *it = &x->items[i];
        const struct rt_usage *u = &x->usage[i];
        const char *l[] = {it->ns, it->id, "sandbox"};
        if (!it->ok)
            continue;
        metrics_set(x->cpu, l, u->cpu_seconds);
        metrics_set(x->ws, l, u->mem_working_set);
        metrics_set(x->rss, l, u->mem_rss);
        metrics_set(x->cache, l, u->mem_cache);
        metrics_set(x->fs, l, u->disk_used);
    }
    free(x->last);
    x->last = x->items;
    x->nlast = x->n;
    x->items = NULL;
    round_free(x);
    export_schedule(x);
}

static void export_tick(struct loop_timer *t)
{
    struct e2b_exporter *x = t->arg;
    struct rt *rt = x->d.rt(x->d.arg);
    struct rt_filter f = {0};
    size_t k = 0;

    if (x->busy || !rt_has(rt, RT_CAP_USAGE)) {
        export_schedule(x);
        return;
    }
    x->items = calloc(EXPORT_MAX, sizeof(*x->items));
    x->probes = calloc(EXPORT_MAX, sizeof(*x->probes));
    x->usage = calloc(EXPORT_MAX, sizeof(*x->usage));
    x->n = 0;
    if (!x->items || !x->probes || !x->usage) {
        round_free(x);
        export_schedule(x);
        return;
    }
    rt_list(rt, &f, collect_cb, x);
    /* keep the sandboxes the runtime can measure, in order */
    for (size_t i = 0; i < x->n; i++) {
        if (rt_usage_probe(rt, x->items[i].id, &x->probes[k]) != 0)
            continue;
        if (k != i)
            x->items[k] = x->items[i];
        k++;
    }
    x->n = k;
    x->busy = true;
    if (loop_submit(x->d.loop, export_work, export_done, x) != 0) {
        x->busy = false;
        round_free(x);
        export_schedule(x);
    }
}

static void export_schedule(struct e2b_exporter *x)
{
    loop_timer_start(x->d.loop, &x->timer, x->d.interval_ms, export_tick, x);
}

int e2b_exporter_new(const struct e2b_exporter_deps *d, struct e2b_exporter **out)
{
    static const char *const labels[] = {"namespace", "pod", "container", NULL};
    struct e2b_exporter *x = calloc(1, sizeof(*x));

    *out = NULL;
    if (!x)
        return AB_ENOMEM;
    x->d = *d;
    if (x->d.first_ms <= 0)
        x->d.first_ms = 1000;
    if (x->d.interval_ms <= 0)
        x->d.interval_ms = EXPORT_INTERVAL_MS;
    x->cpu = metrics_register(d->registry, "container_cpu_usage_seconds_total",
                              "CPU time of a local sandbox's processes (cAdvisor name)",
                              METRIC_COUNTER, labels, NULL, 0);
    x->ws = metrics_register(d->registry, "container_memory_working_set_bytes",
                             "Resident memory of a local sandbox's processes (cAdvisor name)",
                             METRIC_GAUGE, labels, NULL, 0);
    x->rss = metrics_register(d->registry, "container_memory_rss",
                              "Resident memory of a local sandbox's processes (cAdvisor name)",
                              METRIC_GAUGE, labels, NULL, 0);
    x->cache = metrics_register(d->registry, "container_memory_cache",
                                "Page cache charged to a local sandbox's cgroup (cAdvisor name)",
                                METRIC_GAUGE, labels, NULL, 0);
    x->fs = metrics_register(d->registry, "container_fs_usage_bytes",
                             "Disk used by a local sandbox's directory (cAdvisor name)",
                             METRIC_GAUGE, labels, NULL, 0);
    if (!x->cpu || !x->ws || !x->rss || !x->cache || !x->fs) {
        free(x);
        return AB_ENOMEM;
    }
    loop_timer_start(x->d.loop, &x->timer, x->d.first_ms, export_tick, x);
    *out = x;
    return 0;
}

void e2b_exporter_free(struct e2b_exporter *x)
{
    if (!x)
        return;
    loop_timer_cancel(&x->timer);
    if (x->busy) {
        x->closing = true; /* the worker still reads x->probes */
        return;
    }
    exporter_destroy(x);
}

/* --- the E2B instance's metrics state ---------------------------------------------------- */

static struct rt *rt_of(void *e)
{
    return e2b_rt(e);
}

int e2b_metric_routes(struct e2b *e, char *err, size_t errlen)
{
    const char *tok = getenv("PROMETHEUS_TOKEN");
    struct e2b_metrics *m;
    int rc;

    if (!(m = calloc(1, sizeof(*m)))) {
        snprintf(err, errlen, "out of memory for the metrics state");
        return AB_ENOMEM;
    }
    e->metrics = m;
    if (tok && strlen(tok) > PROM_TOKEN_MAX) {
        snprintf(err, errlen, "PROMETHEUS_TOKEN is longer than %d bytes", PROM_TOKEN_MAX);
        return AB_EINVAL;
    }
    ab_strlcpy(m->prom_token, tok ? tok : "", sizeof(m->prom_token));
    struct e2b_exporter_deps d = {
        .loop = e2b_loop(e),
        .registry = metrics_default(),
        .rt = rt_of,
        .arg = e,
    };
    if ((rc = e2b_exporter_new(&d, &m->exporter)) != 0) {
        snprintf(err, errlen, "out of memory for the sandbox usage exporter");
        return rc;
    }
    rc = e2b_route(e, "GET", "/sandboxes/metrics", many_op, 0, err, errlen);
    if (rc == 0)
        rc = e2b_route(e, "GET", "/sandboxes/{id}/metrics", one_op, 0, err, errlen);
    return rc;
}

void e2b_metrics_free(struct e2b *e)
{
    if (!e || !e->metrics)
        return;
    e2b_exporter_free(e->metrics->exporter);
    explicit_bzero(e->metrics->prom_token, sizeof(e->metrics->prom_token));
    free(e->metrics);
    e->metrics = NULL;
}
