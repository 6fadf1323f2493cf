/* Sandbox logs (reference §2.6).
 *
 * A live sandbox's logs are the output its envd writes (<sandbox dir>/envd.log
 * on the local runtime, found from the socket path the runtime reports), at
 * most the last LOG_TAIL_BYTES / 1000 lines. A sandbox that is gone is asked
 * of the central log service when --log-service-url is set:
 *   GET <url>/sandboxes/<id>/logs?<the caller's query> with
 *   X-AgentBox-Namespace / -Team / -User naming the caller (the service
 *   scopes), answered as it comes; without the flag → 501 naming it.
 *
 * v1  GET /sandboxes/{id}/logs?start=<ms>&limit=<n>
 *     → {"logs": [{timestamp, line}], "logEntries": [{timestamp, message, level, fields}]}
 * v2  GET /v2/sandboxes/{id}/logs?cursor=<ms>&limit=&direction=forward|backward&level=&search=
 *     → {"logs": [entries]}
 * Levels are inferred from the line's leading token (after an optional RFC
 * 3339 timestamp): TRACE/DEBUG debug, WARN/WARNING warn, ERROR/ERR/FATAL/
 * CRITICAL error, anything else info. */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/sbxid.h"

#include <ctype.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agentbox/loop.h"

#define LOG_TAIL_BYTES (1024 * 1024)
#define LOG_LINES_MAX 1000
#define LOG_SERVICE_BODY_MAX (8 * 1024 * 1024)

enum lvl { L_DEBUG, L_INFO, L_WARN, L_ERROR };
static const char *const lvl_name[] = {"debug", "info", "warn", "error"};

static int lvl_parse(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcasecmp(s, lvl_name[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return L_WARN;
    return -1;
}

/* Parses a leading RFC 3339 timestamp; returns its length (0 when none). */
static size_t leading_time(const char *s, int64_t *ms)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!p)
        return 0;
    int64_t frac = 0;
    if (*p == '.') {
        int digits = 0;
        p++;
        while (isdigit((unsigned char)*p)) {
            if (digits < 3)
                frac = frac * 10 + (*p - '0');
            digits++;
            p++;
        }
        while (digits < 3) {
            frac *= 10;
            digits++;
        }
    }
    if (*p == 'Z')
        p++;
    *ms = (int64_t)timegm(&tm) * 1000 + frac;
    return (size_t)(p - s);
}

/* reference §2.6 level inference on s (already without its timestamp). */
static int infer_level(const char *s)
{
    char tok[16];
    size_t n = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '[' || *s == '(' || *s == '<')
        s++;
    while (n < sizeof(tok) - 1 && isalpha((unsigned char)s[n])) {
        tok[n] = (char)toupper((unsigned char)s[n]);
        n++;
    }
    tok[n] = '\0';
    char after = s[n];
    if (!(after == '\0' || after == ' ' || after == '\t' || after == ']' || after == ')' ||
          after == '>' || after == ':'))
        return L_INFO;
    if (!strcmp(tok, "TRACE") || !strcmp(tok, "DEBUG"))
        return L_DEBUG;
    if (!strcmp(tok, "WARN") || !strcmp(tok, "WARNING"))
        return L_WARN;
    if (!strcmp(tok, "ERROR") || !strcmp(tok, "ERR") || !strcmp(tok, "FATAL") ||
        !strcmp(tok, "CRITICAL"))
        return L_ERROR;
    return L_INFO;
}

struct query {
    int64_t start_ms;
    int64_t limit;
    bool backward;
    int min_level;
    char search[512];
};

/* The sandbox's log file from its envd address "unix:<dir>/run/envd.sock". */
static bool log_path(const struct rt_sandbox *s, char *out, size_t len)
{
    const char *a = s->envd_addr;
    if (strncmp(a, "unix:", 5) != 0)
        return false;
    a += 5;
    const char *suffix = "/run/envd.sock";
    size_t n = strlen(a), m = strlen(suffix);
    if (n <= m || strcmp(a + n - m, suffix) != 0 || n - m + 10 >= len)
        return false;
    snprintf(out, len, "%.*s/envd.log", (int)(n - m), a);
    return true;
}

static json_t *read_entries(const struct rt_sandbox *s, const struct query *q)
{
    char path[512];
    json_t *out = json_array();
    if (!log_path(s, path, sizeof(path)))
        return out;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return out;
    struct stat st;
    char *buf = NULL;
    off_t from = 0;
    ssize_t got = 0;
    if (fstat(fd, &st) == 0) {
        from = st.st_size > LOG_TAIL_BYTES ? st.st_size - LOG_TAIL_BYTES : 0;
        buf = malloc(LOG_TAIL_BYTES + 1);
        if (buf)
            got = pread(fd, buf, LOG_TAIL_BYTES, from);
    }
    close(fd);
    if (!buf || got <= 0) {
        free(buf);
        return out;
    }
    buf[got] = '\0';
    /* split into lines; skip a partial first line when we started mid-file */
    char *lines[LOG_LINES_MAX];
    size_t nl = 0, head = 0;
    char *p = buf;
    if (from > 0) {
        char *nlp = strchr(p, '\n');
        p = nlp ? nlp + 1 : buf + got;
    }
    while (*p) {
        char *e = strchr(p, '\n');
        if (e)
            *e = '\0';
        if (*p) {
            lines[(head + nl) % LOG_LINES_MAX] = p;
            if (nl < LOG_LINES_MAX)
                nl++;
            else
                head = (head + 1) % LOG_LINES_MAX;
        }
        if (!e)
            break;
        p = e + 1;
    }
    int64_t n_out = 0;
    for (size_t k = 0; k < nl && (q->limit <= 0 || n_out < q->limit); k++) {
        size_t idx = q->backward ? (head + nl - 1 - k) % LOG_LINES_MAX : (head + k) % LOG_LINES_MAX;
        const char *line = lines[idx];
        int64_t ms = s->claimed_ms;
        size_t tl = leading_time(line, &ms);
        const char *msg = line + tl;
        int lvl = infer_level(msg);
        if (q->start_ms > 0 && ms < q->start_ms)
            continue;
        if (lvl < q->min_level)
            continue;
        if (q->search[0] && !strstr(line, q->search))
            continue;
        char ts[40];
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        gmtime_r(&t, &tm);
        size_t w = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(ts + w, sizeof(ts) - w, ".%03dZ", (int)(ms % 1000));
        json_array_append_new(out, json_pack("{s:s,s:s,s:s,s:{s:s,s:s}}", "timestamp", ts,
                                             "message", line, "level", lvl_name[lvl], "fields",
                                             "container", "envd", "source", "stdout"));
        n_out++;
    }
    free(buf);
    return out;
}

/* --- the central log service (ended sandboxes) ------------------------------------------ */

struct remote {
    struct http_exchange *ex;
    char url[2048];
    char hdr[3][160];
    long status;
    char *body;
    size_t len;
    bool too_big;
    char err[CURL_ERROR_SIZE];
};

static size_t on_body(char *d, size_t sz, size_t n, void *arg)
{
    struct remote *r = arg;
    size_t add = sz * n;
    if (r->len + add > LOG_SERVICE_BODY_MAX) {
        r->too_big = true;
        return 0;
    }
    char *nb = realloc(r->body, r->len + add + 1);
    if (!nb)
        return 0;
    r->body = nb;
    memcpy(r->body + r->len, d, add);
    r->len += add;
    r->body[r->len] = '\0';
    return add;
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
    else if (r->too_big)
        snprintf(r->err, sizeof(r->err), "answer larger than %d bytes", LOG_SERVICE_BODY_MAX);
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
        http_respond(r->ex, 200, "application/json", r->body ? r->body : "{}", r->body ? r->len : 2,
                     NULL, 0);
    else
        http_respond_error(r->ex, 502, "the log service answered HTTP %ld", r->status);
    free(r->body);
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
    snprintf(r->url, sizeof(r->url), "%s/sandboxes/%s/logs%s%s", base, id, req->query[0] ? "?" : "",
             req->query);
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

static void logs(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p, bool v2)
{
    const struct http_request *r = http_req(ex);
    const char *id = http_param(ex, "id");
    char cluster[SBXID_CLUSTER_MAX + 1], b[64];
    struct rt_sandbox s;
    struct query q;
    struct rt *rt = e2b_rt(e);

    memset(&q, 0, sizeof(q));
    q.start_ms = q_int(r, v2 ? "cursor" : "start", 0);
    q.limit = q_int(r, "limit", 1000);
    if (q.limit <= 0 || q.limit > LOG_LINES_MAX)
        q.limit = LOG_LINES_MAX;
    q.min_level = L_DEBUG;
    if (v2) {
        if (http_query_get(r, "direction", b, sizeof(b)) == 0)
            q.backward = strcmp(b, "backward") == 0;
        if (http_query_get(r, "level", b, sizeof(b)) == 0 && b[0]) {
            int l = lvl_parse(b);
            if (l < 0) {
                http_respond_error(ex, 400, "level must be debug, info, warn or error");
                return;
            }
            q.min_level = l;
        }
        if (http_query_get(r, "search", q.search, sizeof(q.search)) != 0)
            q.search[0] = '\0';
    }
    if (!id || sbxid_cluster_of(id, cluster) != 0) {
        http_respond_error(ex, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return;
    }
    if (strcmp(cluster, e->cluster) != 0) {
        e2b_forward(e, ex, cluster, r->target);
        return;
    }
    memset(&s, 0, sizeof(s));
    if (!rt || rt_get(rt, id, &s) != 0 || s.state == RT_IDLE) {
        json_decref(s.metadata);
        ended(e, ex, p, id, v2);
        return;
    }
    if (!e2b_owns(p, &s)) {
        json_decref(s.metadata);
        http_respond_error(ex, 404, "sandbox \"%s\" not found", id);
        return;
    }
    json_t *entries = read_entries(&s, &q);
    json_decref(s.metadata);
    if (v2) {
        http_respond_json(ex, 200, json_pack("{s:o}", "logs", entries));
        return;
    }
    json_t *plain = json_array();
    size_t i;
    json_t *en;
    json_array_foreach(entries, i, en) json_array_append_new(
        plain, json_pack("{s:O,s:O}", "timestamp", json_object_get(en, "timestamp"), "line",
                         json_object_get(en, "message")));
    http_respond_json(ex, 200, json_pack("{s:o,s:o}", "logs", plain, "logEntries", entries));
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
