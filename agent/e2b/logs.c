/* Sandbox logs (reference §2.6).
 *
 * A live sandbox's logs are what its runtime's log reader returns (runtime.h:
 * rt_log_probe on the loop, rt_log_read on a worker; on the local runtime,
 * the output its envd writes), at most RT_LOG_LINES_MAX lines of the last
 * RT_LOG_TAIL_MAX bytes. A sandbox that is gone is asked
 * of the central log service when --log-service-url is set:
 *   GET <url>/sandboxes/<id>/logs?<the caller's query> with
 *   X-AgentBox-Namespace / -Team / -User naming the caller (the service
 *   scopes), answered as it comes; without the flag → 501 naming it.
 *
 * v1  GET /sandboxes/{id}/logs?start=<ms>&limit=<n>
 *     → {"logs": [{timestamp, line}], "logEntries": [{timestamp, message, level, fields}]}
 * v2  GET /v2/sandboxes/{id}/logs?cursor=<ms>&limit=&direction=forward|backward&level=&search=
 *     → {"logs": [entries]}
 * Levels are inferred by the seam (rt_log_infer_level) from the line's
 * leading token (after an optional RFC 3339 timestamp): TRACE/DEBUG debug,
 * WARN/WARNING warn, ERROR/ERR/FATAL/CRITICAL error, anything else info. */
#include "agent/e2b/e2b.h"
#include "agent/e2b/logs.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/buf.h"
#include "agentbox/common.h"
#include "agentbox/sbxid.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "agentbox/loop.h"

#define LOG_SERVICE_BODY_MAX (8 * 1024 * 1024)

static const char *const lvl_name[] = {"debug", "info", "warn", "error"};

static int lvl_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, lvl_name[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return RT_LOG_WARN;
    return -1;
}

/* The E2B shape of the runtime's entries (a new array). */
static json_t *entries_json(const struct rt_log *l)
{
    json_t *out = json_array();

    for (size_t k = 0; k < l->n && out; k++) {
        const struct rt_log_entry *en = &l->entries[k];
        int64_t ms = en->ms;
        char ts[40];
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        size_t w = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(ts + w, sizeof(ts) - w, ".%03dZ", (int)(ms % 1000));
        json_array_append_new(out, json_pack("{s:s,s:s,s:s,s:{s:s,s:s}}", "timestamp", ts,
                                             "message", en->line, "level", lvl_name[en->level],
                                             "fields", "container", "envd", "source", "stdout"));
    }
    return out;
}

/* --- live sandboxes: the runtime's log reader ------------------------------------------- */

struct live {
    struct http_exchange *ex;
    bool v2;
    bool probed; /* false: the runtime cannot read this log, answer [] */
    struct rt_probe probe;
    struct rt_log_query q;
    struct rt_log log;
};

/* Worker: the runtime's blocking read, from the probe alone. */
static void live_work(void *arg)
{
    struct live *l = arg;
    if (l->probed)
        rt_log_read(&l->probe, &l->q, &l->log); /* on error l->log is empty: [] */
}

static void live_answer(struct live *l)
{
    json_t *entries = entries_json(&l->log);

    if (l->v2) {
        http_respond_json(l->ex, 200, json_pack("{s:o}", "logs", entries));
        return;
    }
    json_t *plain = json_array();
    size_t i;
    json_t *en;
    json_array_foreach(entries, i, en) json_array_append_new(
        plain, json_pack("{s:O,s:O}", "timestamp", json_object_get(en, "timestamp"), "line",
                         json_object_get(en, "message")));
    http_respond_json(l->ex, 200, json_pack("{s:o,s:o}", "logs", plain, "logEntries", entries));
}

static void live_done(void *arg, int status)
{
    struct live *l = arg;

    if (status != 0)
        http_respond_error(l->ex, 503, "the agent is shutting down");
    else
        live_answer(l);
    rt_log_free(&l->log);
    free(l);
}

void e2b_logs_live(struct loop *loop, struct rt *rt, struct http_exchange *ex, const char *id,
                   const struct rt_log_query *q, bool v2)
{
    struct live *l = calloc(1, sizeof(*l));

    if (!l) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    l->ex = ex;
    l->v2 = v2;
    l->q = *q;
    l->probed = rt_log_probe(rt, id, &l->probe) == 0;
    if (!l->probed) {
        live_done(l, 0);
        return;
    }
    if (loop_submit(loop, live_work, live_done, l) != 0) {
        free(l);
        http_respond_error(ex, 503, "too many requests in flight; retry shortly");
    }
}

/* --- the central log service (ended sandboxes) ------------------------------------------ */

struct remote {
    struct http_exchange *ex;
    char url[2048];
    char hdr[3][160];
    long status;
    struct buf body; /* at most LOG_SERVICE_BODY_MAX */
    char err[CURL_ERROR_SIZE];
};

/* Refusing a write (returning less than given) makes curl stop with
 * CURLE_WRITE_ERROR; buf_err then says why. */
static size_t on_body(char *d, size_t sz, size_t n, void *arg)
{
    struct remote *r = arg;
    return buf_append(&r->body, d, sz * n) == 0 ? sz * n : 0;
}

static void remote_work(void *arg)
{
    struct remote *r = arg;
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    if (!c) {
        snprintf(r->err, sizeof(r->err), "cannot start a request");
        return;
    }
    for (int i = 0; i < 3; i++)
        h = curl_slist_append(h, r->hdr[i]);
    curl_easy_setopt(c, CURLOPT_URL, r->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->err);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 15000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    else if (buf_err(&r->body)[0])
        snprintf(r->err, sizeof(r->err), "%s", buf_err(&r->body));
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

static void remote_done(void *arg, int status)
{
    struct remote *r = arg;
    if (status != 0 || r->status == 0)
        http_respond_error(r->ex, 502, "the log service did not answer: %s",
                           status ? "the agent is shutting down" : r->err);
    else if (r->status == 404)
        http_respond_error(r->ex, 404, "sandbox \"%s\" not found (no logs kept for it)",
                           http_param(r->ex, "id"));
    else if (r->status >= 200 && r->status < 300)
        http_respond(r->ex, 200, "application/json", buf_len(&r->body) ? buf_str(&r->body) : "{}",
                     buf_len(&r->body) ? buf_len(&r->body) : 2, NULL, 0);
    else
        http_respond_error(r->ex, 502, "the log service answered HTTP %ld", r->status);
    buf_free(&r->body);
    free(r);
}

static void ended(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                  const char *id, bool v2)
{
    const char *base = e2b_log_service_url(e);
    const struct http_request *req = http_req(ex);
    if (!base) {
        e2b_unsupported(e, ex, v2 ? "GetV2SandboxesSandboxIDLogs" : "GetSandboxesSandboxIDLogs",
                        "unimplemented",
                        "log retrieval for sandboxes that have ended is not enabled: sandbox is "
                        "not running here, and the agent has no central log service; start the "
                        "agent with --log-service-url");
        return;
    }
    struct remote *r = calloc(1, sizeof(*r));
    if (!r) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    r->ex = ex;
    buf_init(&r->body, LOG_SERVICE_BODY_MAX, "log service answer");
    /* A cut URL would ask for another sandbox's or another query's logs. */
    int w = snprintf(r->url, sizeof(r->url), "%s/sandboxes/%s/logs%s%s", base, id,
                     req->query[0] ? "?" : "", req->query);
    if (w < 0 || (size_t)w >= sizeof(r->url)) {
        free(r);
        http_respond_error(ex, 400,
                           "the log service URL for this request (--log-service-url, sandbox id "
                           "and query) is longer than %zu bytes",
                           sizeof(r->url) - 1);
        return;
    }
    /* The principal's fields are at most 63 bytes each: these always fit. */
    snprintf(r->hdr[0], sizeof(r->hdr[0]), "X-AgentBox-Namespace: %s", p->namespace);
    snprintf(r->hdr[1], sizeof(r->hdr[1]), "X-AgentBox-Team: %s", p->team);
    snprintf(r->hdr[2], sizeof(r->hdr[2]), "X-AgentBox-User: %s", p->user);
    if (loop_submit(e2b_loop(e), remote_work, remote_done, r) != 0) {
        free(r);
        http_respond_error(ex, 503, "too many requests in flight; retry shortly");
    }
}

static int64_t q_int(const struct http_request *r, const char *name, int64_t dflt)
{
    char b[32];
    if (http_query_get(r, name, b, sizeof(b)) != 0 || !b[0])
        return dflt;
    char *end = NULL;
    long long v = strtoll(b, &end, 10);
    return end && *end == '\0' ? v : dflt;
}

int e2b_log_query(struct http_exchange *ex, bool v2, struct rt_log_query *q)
{
    const struct http_request *r = http_req(ex);
    char b[64];

    memset(q, 0, sizeof(*q));
    q->start_ms = q_int(r, v2 ? "cursor" : "start", 0);
    q->limit = q_int(r, "limit", 1000);
    if (q->limit <= 0 || q->limit > RT_LOG_LINES_MAX)
        q->limit = RT_LOG_LINES_MAX;
    q->min_level = RT_LOG_DEBUG;
    if (v2) {
        if (http_query_get(r, "direction", b, sizeof(b)) == 0)
            q->backward = strcmp(b, "backward") == 0;
        if (http_query_get(r, "level", b, sizeof(b)) == 0 && b[0]) {
            int l = lvl_parse(b);
            if (l < 0) {
                http_respond_error(ex, 400, "level must be debug, info, warn or error");
                return AB_EINVAL;
            }
            q->min_level = (enum rt_log_level)l;
        }
        if (http_query_get(r, "search", q->search, sizeof(q->search)) != 0)
            q->search[0] = '\0';
    }
    return 0;
}

static void logs(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p, bool v2)
{
    const struct http_request *r = http_req(ex);
    const char *id = http_param(ex, "id");
    char cluster[SBXID_CLUSTER_MAX + 1];
    struct rt_sandbox s;
    struct rt_log_query q;
    struct rt *rt = e2b_rt(e);

    if (e2b_log_query(ex, v2, &q) != 0)
        return;
    if (!id || sbxid_cluster_of(id, cluster) != 0) {
        http_respond_error(ex, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return;
    }
    if (strcmp(cluster, e->cluster) != 0) {
        e2b_forward(e, ex, p, cluster, r->target);
        return;
    }
    memset(&s, 0, sizeof(s));
    if (!rt || rt_get(rt, id, &s) != 0 || s.state == RT_IDLE) {
        json_decref(s.metadata);
        ended(e, ex, p, id, v2);
        return;
    }
    json_decref(s.metadata);
    if (!e2b_owns(p, &s)) {
        http_respond_error(ex, 404, "sandbox \"%s\" not found", id);
        return;
    }
    e2b_logs_live(e2b_loop(e), rt, ex, id, &q, v2);
}

static void logs_v1(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    logs(e, ex, p, false);
}

static void logs_v2(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    logs(e, ex, p, true);
}

int e2b_log_routes(struct e2b *e, char *err, size_t errlen)
{
    int rc = e2b_route(e, "GET", "/sandboxes/{id}/logs", logs_v1, 0, err, errlen);
    if (rc == 0)
        rc = e2b_route(e, "GET", "/v2/sandboxes/{id}/logs", logs_v2, 0, err, errlen);
    return rc;
}
