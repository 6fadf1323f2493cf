/* Sandbox metrics (reference §2.7), two halves:
 *
 * 1. The E2B routes read a Prometheus-compatible backend (--prometheus-url,
 *    bearer token from PROMETHEUS_TOKEN) with cAdvisor series scoped by
 *    namespace="<ns>",pod="<sandbox id>" and container!="",container!="POD":
 *      GET /sandboxes/{id}/metrics?start=&end=  (unix s; default the last 15 min;
 *          step = window/120 clamped to [15 s, 5 min]) → [SandboxMetric]
 *      GET /sandboxes/metrics?sandbox_ids=a,b   → {"sandboxes": {id: SandboxMetric}}
 *    Without a backend both answer 501 naming the flag.
 *
 * 2. The agent exports those cAdvisor-named series for its own local
 *    sandboxes on /metrics, so a Prometheus scraping the agent can answer
 *    (1): every 10 s a worker walks /proc for the processes in each
 *    sandbox's pid namespace (pid 1 from <dir>/state.json) and sums CPU time
 *    and resident memory, and sizes the sandbox directory:
 *      container_cpu_usage_seconds_total, container_memory_working_set_bytes,
 *      container_memory_rss, container_memory_cache (0: not separable here),
 *      container_fs_usage_bytes, labelled namespace, pod, container="sandbox". */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/sbxid.h"

#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PROM_BODY_MAX (4 * 1024 * 1024)
#define PROM_IDS_MAX 100
#define EXPORT_INTERVAL_MS 10000
#define EXPORT_MAX 512
#define DU_FILES_MAX 200000

static char g_prom_token[1024];

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

struct prom {
    struct e2b *e;
    struct http_exchange *ex;
    bool range;
    int64_t start, end, step;
    char ns[64];
    struct sbx_ref ids[PROM_IDS_MAX];
    size_t nids;
    json_t *res[Q_N]; /* parsed "data.result" arrays */
    char err[512];
};

struct buf {
    char *d;
    size_t n;
};

static size_t buf_write(char *p, size_t sz, size_t n, void *arg)
{
    struct buf *b = arg;
    size_t add = sz * n;
    if (b->n + add > PROM_BODY_MAX)
        return 0;
    char *nd = realloc(b->d, b->n + add + 1);
    if (!nd)
        return 0;
    memcpy(nd + b->n, p, add);
    b->d = nd;
    b->n += add;
    b->d[b->n] = '\0';
    return add;
}

static json_t *prom_get(CURL *c, const char *base, const struct prom *p, const char *query,
                        char *err, size_t errlen)
{
    char *eq = curl_easy_escape(c, query, 0);
    char url[8192];
    struct buf b = {0};
    struct curl_slist *h = NULL;
    long status = 0;
    json_t *out = NULL;

    if (p->range)
        snprintf(url, sizeof(url), "%s/api/v1/query_range?query=%s&start=%lld&end=%lld&step=%lld",
                 base, eq, (long long)p->start, (long long)p->end, (long long)p->step);
    else
        snprintf(url, sizeof(url), "%s/api/v1/query?query=%s", base, eq);
    curl_free(eq);
    if (g_prom_token[0]) {
        char auth[1100];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", g_prom_token);
        h = curl_slist_append(h, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        snprintf(err, errlen, "Prometheus at %s did not answer: %s", base, curl_easy_strerror(rc));
    } else if (status != 200) {
        snprintf(err, errlen, "Prometheus at %s answered HTTP %ld", base, status);
    } else {
        json_t *j = json_loadb(b.d ? b.d : "", b.n, 0, NULL);
        json_t *r = json_object_get(json_object_get(j, "data"), "result");
        if (json_is_array(r))
            out = json_incref(r);
        else
            snprintf(err, errlen, "Prometheus at %s answered without data.result", base);
        json_decref(j);
    }
    free(b.d);
    return out;
}

static void prom_work(void *arg)
{
    struct prom *p = arg;
    CURL *c = curl_easy_init();
    char sel[4096];
    size_t off;

    if (!c) {
        snprintf(p->err, sizeof(p->err), "cannot start a request to Prometheus");
        return;
    }
    off = (size_t)snprintf(sel, sizeof(sel),
                           "namespace=\"%s\",container!=\"\",container!=\"POD\","
                           "pod=~\"",
                           p->ns);
    for (size_t i = 0; i < p->nids && off < sizeof(sel) - 64; i++)
        off += (size_t)snprintf(sel + off, sizeof(sel) - off, "%s%s", i ? "|" : "", p->ids[i].id);
    snprintf(sel + off, sizeof(sel) - off, "\"");
    for (int q = 0; q < Q_N && !p->err[0]; q++) {
        char query[8192];
        snprintf(query, sizeof(query), q_fmt[q], sel);
        p->res[q] = prom_get(c, e2b_prometheus_url(p->e), p, query, p->err, sizeof(p->err));
    }
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
    for (int q = 0; q < Q_N; q++)
        json_decref(p->res[q]);
    free(p);
}

static void sbx_ref_of(const struct rt_sandbox *s, struct sbx_ref *r)
{
    int64_t cpu, mem_mb;
    ab_strlcpy(r->id, s->id, sizeof(r->id));
    e2b_pool_size(s->pool, &cpu, &mem_mb);
    r->cpu_count = cpu;
    r->mem_total = mem_mb * 1048576;
}

static void submit(struct e2b *e, struct http_exchange *ex, struct prom *p)
{
    if (loop_submit(e2b_loop(e), prom_work, prom_done, p) != 0) {
        free(p);
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
        e2b_unsupported(e, ex, "GetSandboxesSandboxIDMetrics", "unimplemented",
                        "metrics are not enabled: the agent has no metrics backend; start it "
                        "with --prometheus-url (and PROMETHEUS_TOKEN if the backend needs one)");
        return;
    }
    struct prom *p = calloc(1, sizeof(*p));
    if (!p) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    p->e = e;
    p->ex = ex;
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

    if (!e2b_prometheus_url(e)) {
        e2b_unsupported(e, ex, "GetSandboxesMetrics", "unimplemented",
                        "metrics are not enabled: the agent has no metrics backend; start it "
                        "with --prometheus-url (and PROMETHEUS_TOKEN if the backend needs one)");
        return;
    }
    if (http_query_get(r, "sandbox_ids", ids, sizeof(ids)) != 0) {
        http_respond_error(ex, 400,
                           "sandbox_ids is required: a comma-separated list of at most "
                           "%d sandbox ids",
                           PROM_IDS_MAX);
        return;
    }
    struct prom *p = calloc(1, sizeof(*p));
    if (!p) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    p->e = e;
    p->ex = ex;
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
        free(p);
        http_respond_json(ex, 200, json_pack("{s:{}}", "sandboxes"));
        return;
    }
    submit(e, ex, p);
}

/* --- the exporter ------------------------------------------------------------------------ */

struct exp_item {
    char id[RT_ID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    char dir[512];
    double cpu_s, rss, fs;
    bool ok;
};

struct exporter {
    struct e2b *e;
    struct loop_timer timer;
    struct metric_family *cpu, *ws, *rss, *cache, *fs;
    struct exp_item *items; /* of the job in flight */
    size_t n;
    struct exp_item *last; /* series exported by the previous round */
    size_t nlast;
    bool busy;
};

static struct exporter g_exp;

static bool dir_of(const char *addr, char *out, size_t len)
{
    const char *suffix = "/run/envd.sock";
    if (strncmp(addr, "unix:", 5) != 0)
        return false;
    addr += 5;
    size_t n = strlen(addr), m = strlen(suffix);
    if (n <= m || strcmp(addr + n - m, suffix) != 0 || n - m >= len)
        return false;
    memcpy(out, addr, n - m);
    out[n - m] = '\0';
    return true;
}

static void collect_cb(void *arg, const struct rt_sandbox *s)
{
    struct exporter *x = arg;
    if (x->n >= EXPORT_MAX || s->state != RT_RUNNING)
        return;
    struct exp_item *it = &x->items[x->n];
    memset(it, 0, sizeof(*it));
    if (!dir_of(s->envd_addr, it->dir, sizeof(it->dir)))
        return;
    ab_strlcpy(it->id, s->id, sizeof(it->id));
    ab_strlcpy(it->ns, s->ns, sizeof(it->ns));
    x->n++;
}

static long pid_of(const char *dir)
{
    char path[600], buf[4096];
    snprintf(path, sizeof(path), "%s/state.json", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    json_t *j = json_loads(buf, 0, NULL);
    long pid = (long)json_integer_value(json_object_get(j, "pid"));
    json_decref(j);
    return pid;
}

static bool ns_inode(long pid, unsigned long *ino)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%ld/ns/pid", pid);
    if (stat(path, &st) != 0)
        return false;
    *ino = (unsigned long)st.st_ino;
    return true;
}

static void du(const char *dir, double *bytes, int *budget)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    if (!d)
        return;
    while ((de = readdir(d)) && *budget > 0) {
        char p[1024];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0)
            continue;
        (*budget)--;
        *bytes += (double)st.st_blocks * 512.0;
        if (S_ISDIR(st.st_mode))
            du(p, bytes, budget);
    }
    closedir(d);
}

/* Worker: one pass over /proc for all sandboxes. */
static void export_work(void *arg)
{
    struct exporter *x = arg;
    unsigned long *inos = calloc(x->n ? x->n : 1, sizeof(*inos));
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    if (!inos)
        return;
    for (size_t i = 0; i < x->n; i++) {
        long pid = pid_of(x->items[i].dir);
        x->items[i].ok = pid > 0 && ns_inode(pid, &inos[i]);
        int budget = DU_FILES_MAX;
        if (x->items[i].ok)
            du(x->items[i].dir, &x->items[i].fs, &budget);
    }
    DIR *d = opendir("/proc");
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        unsigned long ino;
        if (*end || pid <= 0 || !ns_inode(pid, &ino))
            continue;
        for (size_t i = 0; i < x->n; i++) {
            if (!x->items[i].ok || inos[i] != ino)
                continue;
            char path[64], buf[1024];
            snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
            if (fd >= 0)
                close(fd);
            if (n > 0) {
                buf[n] = '\0';
                char *rp = strrchr(buf, ')');
                unsigned long ut = 0, st = 0;
                long rss = 0;
                /* fields after the comm: state(3) ... utime(14) stime(15) ... rss(24) */
                if (rp && sscanf(rp + 2,
                                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu "
                                 "%*d %*d %*d %*d %*d %*d %*u %*u %ld",
                                 &ut, &st, &rss) == 3) {
                    x->items[i].cpu_s += (double)(ut + st) / (double)tck;
                    x->items[i].rss += (double)rss * (double)page;
                }
            }
            break;
        }
    }
    if (d)
        closedir(d);
    free(inos);
}

static void export_schedule(struct exporter *x);

static void export_done(void *arg, int status)
{
    struct exporter *x = arg;
    x->busy = false;
    if (status != 0) {
        free(x->items);
        x->items = NULL;
        return;
    }
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
        const char *l[] = {it->ns, it->id, "sandbox"};
        if (!it->ok)
            continue;
        metrics_set(x->cpu, l, it->cpu_s);
        metrics_set(x->ws, l, it->rss);
        metrics_set(x->rss, l, it->rss);
        metrics_set(x->cache, l, 0);
        metrics_set(x->fs, l, it->fs);
    }
    free(x->last);
    x->last = x->items;
    x->nlast = x->n;
    x->items = NULL;
    x->n = 0;
    export_schedule(x);
}

static void export_tick(struct loop_timer *t)
{
    struct exporter *x = t->arg;
    struct rt *rt = e2b_rt(x->e);
    struct rt_filter f = {0};
    if (x->busy || !rt) {
        export_schedule(x);
        return;
    }
    x->items = calloc(EXPORT_MAX, sizeof(*x->items));
    x->n = 0;
    if (!x->items) {
        export_schedule(x);
        return;
    }
    rt_list(rt, &f, collect_cb, x);
    x->busy = true;
    if (loop_submit(e2b_loop(x->e), export_work, export_done, x) != 0) {
        x->busy = false;
        free(x->items);
        x->items = NULL;
        export_schedule(x);
    }
}

static void export_schedule(struct exporter *x)
{
    loop_timer_start(e2b_loop(x->e), &x->timer, EXPORT_INTERVAL_MS, export_tick, x);
}

int e2b_metric_routes(struct e2b *e, char *err, size_t errlen)
{
    static const char *const labels[] = {"namespace", "pod", "container", NULL};
    struct metrics_registry *m = metrics_default();
    const char *tok = getenv("PROMETHEUS_TOKEN");
    ab_strlcpy(g_prom_token, tok ? tok : "", sizeof(g_prom_token));

    memset(&g_exp, 0, sizeof(g_exp));
    g_exp.e = e;
    g_exp.cpu = metrics_register(m, "container_cpu_usage_seconds_total",
                                 "CPU time of a local sandbox's processes (cAdvisor name)",
                                 METRIC_COUNTER, labels, NULL, 0);
    g_exp.ws = metrics_register(m, "container_memory_working_set_bytes",
                                "Resident memory of a local sandbox's processes (cAdvisor name)",
                                METRIC_GAUGE, labels, NULL, 0);
    g_exp.rss = metrics_register(m, "container_memory_rss",
                                 "Resident memory of a local sandbox's processes (cAdvisor name)",
                                 METRIC_GAUGE, labels, NULL, 0);
    g_exp.cache = metrics_register(m, "container_memory_cache",
                                   "Page cache of a local sandbox (not separable here: 0)",
                                   METRIC_GAUGE, labels, NULL, 0);
    g_exp.fs = metrics_register(m, "container_fs_usage_bytes",
                                "Disk used by a local sandbox's directory (cAdvisor name)",
                                METRIC_GAUGE, labels, NULL, 0);
    loop_timer_start(e2b_loop(e), &g_exp.timer, 1000, export_tick, &g_exp);

    int rc = e2b_route(e, "GET", "/sandboxes/metrics", many_op, 0, err, errlen);
    if (rc == 0)
        rc = e2b_route(e, "GET", "/sandboxes/{id}/metrics", one_op, 0, err, errlen);
    return rc;
}
