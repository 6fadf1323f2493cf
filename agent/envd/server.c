/* envd's HTTP surface: routes, access checks, /health, /init, /envs,
 * /metrics, Connect RPC framing (unary and server streams). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agent/envd/auth.h"
#include "agent/envd/envd.h"
#include "agent/envd/envelope.h"
#include "agent/envd/trust.h"

#define CT_JSON "application/json"
#define CT_CONNECT_JSON "application/connect+json"

/* ---- Connect replies ---------------------------------------------------- */

static void respond_connect_error(struct http_exchange *ex, const char *code, const char *msg)
{
    json_t *v = json_pack("{s:s,s:s}", "code", code, "message", msg);
    char *s = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;

    json_decref(v);
    if (s == NULL) {
        http_respond(ex, 500, CT_JSON, "{\"code\":\"internal\",\"message\":\"out of memory\"}", 46,
                     NULL, 0);
        return;
    }
    http_respond(ex, envd_connect_status(code), CT_JSON, s, strlen(s), NULL, 0);
    free(s);
}

static void stream_fail(struct http_exchange *ex, const char *code, const char *msg)
{
    struct http_header h = {"Content-Type", CT_CONNECT_JSON};
    uint8_t *env;
    size_t n;

    if (envd_env_encode_end(code, msg, &env, &n) != 0) {
        http_abort(ex);
        return;
    }
    http_begin(ex, 200, &h, 1, (int64_t)n);
    http_write(ex, env, n);
    http_end(ex);
    free(env);
}

void envd_call_free(struct envd_call *c)
{
    if (c == NULL)
        return;
    json_decref(c->req);
    free(c->buf);
    free(c);
}

void envd_rpc_reply(struct envd_call *c, json_t *msg)
{
    char *s = msg != NULL ? json_dumps(msg, JSON_COMPACT) : NULL;

    json_decref(msg);
    if (s == NULL) {
        respond_connect_error(c->ex, "internal", "out of memory encoding the response");
    } else {
        http_respond(c->ex, 200, CT_JSON, s, strlen(s), NULL, 0);
        free(s);
    }
    envd_call_free(c);
}

void envd_rpc_error(struct envd_call *c, const char *code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->stream)
        stream_fail(c->ex, code, msg);
    else
        respond_connect_error(c->ex, code, msg);
    envd_call_free(c);
}

/* ---- streams ------------------------------------------------------------- */

static void stream_stop_timers(struct envd_stream *s)
{
    loop_timer_cancel(&s->ka_timer);
    loop_timer_cancel(&s->deadline_timer);
}

static void stream_on_abort(struct http_exchange *ex, void *arg)
{
    struct envd_stream *s = arg;

    stream_stop_timers(s);
    s->ex = NULL;
    http_abort(ex);
    if (s->on_gone != NULL)
        s->on_gone(s);
}

static void stream_on_drain(struct http_exchange *ex, void *arg)
{
    struct envd_stream *s = arg;

    if (s->on_drain != NULL)
        s->on_drain(s);
}

static void stream_ignore_data(struct http_exchange *ex, const void *d, size_t n, void *arg)
{
}

static void stream_ignore_end(struct http_exchange *ex, void *arg)
{
}

static const struct http_body_handler stream_bh = {
    stream_ignore_data,
    stream_ignore_end,
    stream_on_abort,
    stream_on_drain,
};

static void stream_keepalive(struct loop_timer *t)
{
    struct envd_stream *s = t->arg;
    int64_t idle = ab_now_ms() - s->last_ms;

    if (s->ex == NULL)
        return;
    if (idle >= s->ka_ms - 5) {
        json_t *v = s->ka_flat ? json_pack("{s:{}}", "keepalive")
                               : json_pack("{s:{s:{}}}", "event", "keepalive");
        envd_stream_send(s, v);
        idle = 0;
    }
    loop_timer_start(s->e->loop, &s->ka_timer, AB_MAX(s->ka_ms - idle, 10), stream_keepalive, s);
}

static void stream_deadline(struct loop_timer *t)
{
    struct envd_stream *s = t->arg;

    if (s->ex == NULL)
        return;
    envd_stream_close(s, "deadline_exceeded", "the stream's Connect-Timeout-Ms has passed");
    if (s->on_gone != NULL)
        s->on_gone(s);
}

int envd_stream_open(struct envd_stream *s, struct envd *e, struct http_exchange *ex,
                     int64_t keepalive_ms, int64_t timeout_ms)
{
    struct http_header h = {"Content-Type", CT_CONNECT_JSON};
    int rc;

    s->e = e;
    s->ex = ex;
    s->ka_ms = keepalive_ms > 0 ? keepalive_ms : ENVD_KEEPALIVE_DEFAULT_MS;
    s->last_ms = ab_now_ms();
    http_set_body_handler(ex, &stream_bh, s);
    rc = http_begin(ex, 200, &h, 1, -1);
    if (rc != 0)
        return rc;
    loop_timer_start(e->loop, &s->ka_timer, s->ka_ms, stream_keepalive, s);
    if (timeout_ms > 0)
        loop_timer_start(e->loop, &s->deadline_timer, timeout_ms, stream_deadline, s);
    return 0;
}

int envd_stream_send(struct envd_stream *s, json_t *msg)
{
    uint8_t *env;
    size_t n;
    int rc;

    if (msg == NULL)
        return AB_ENOMEM;
    if (s->ex == NULL) {
        json_decref(msg);
        return AB_ECLOSED;
    }
    rc = envd_env_encode_json(msg, &env, &n);
    json_decref(msg);
    if (rc != 0)
        return rc;
    rc = http_write(s->ex, env, n);
    free(env);
    s->last_ms = ab_now_ms();
    return rc;
}

void envd_stream_close(struct envd_stream *s, const char *code, const char *message)
{
    uint8_t *env;
    size_t n;

    stream_stop_timers(s);
    if (s->ex == NULL)
        return;
    if (envd_env_encode_end(code, message, &env, &n) == 0) {
        http_write(s->ex, env, n);
        free(env);
        http_end(s->ex);
    } else {
        http_abort(s->ex);
    }
    s->ex = NULL;
}

bool envd_stream_is_open(const struct envd_stream *s)
{
    return s->ex != NULL;
}

bool envd_stream_is_congested(const struct envd_stream *s)
{
    return s->ex != NULL && http_pending(s->ex) > HTTP_STREAM_HIGH_WATER;
}

/* ---- access -------------------------------------------------------------- */

static bool token_ok(struct envd *e, struct http_exchange *ex)
{
    return e->token == NULL ||
           envd_token_matches(e->token, http_header_get(http_req(ex), "X-Access-Token"));
}

static const char unauthorized_msg[] =
    "unauthorized access, please provide a valid access token or method signing if supported";

int envd_request_user(struct envd *e, const char *username, struct envd_user *u, char *err,
                      size_t errlen)
{
    const char *name = username;

    if (name == NULL || name[0] == '\0')
        name = e->default_user[0] != '\0' ? e->default_user : "root";
    return envd_user_lookup(name, u, err, errlen);
}

/* ---- Connect RPC routes --------------------------------------------------- */

static void call_on_data(struct http_exchange *ex, const void *data, size_t len, void *arg)
{
    struct envd_call *c = arg;

    if (c->buf == NULL && c->cap == SIZE_MAX)
        return; /* already answered */
    if (c->len + len > ENVD_RPC_BODY_MAX) {
        char msg[128];
        snprintf(msg, sizeof(msg), "request message is larger than %d bytes",
                 ENVD_RPC_BODY_MAX - 5);
        c->cap = SIZE_MAX;
        free(c->buf);
        c->buf = NULL;
        if (c->stream)
            stream_fail(ex, "resource_exhausted", msg);
        else
            respond_connect_error(ex, "resource_exhausted", msg);
        return;
    }
    if (c->len + len > c->cap) {
        size_t cap = c->cap != 0 ? c->cap : 1024;
        uint8_t *nb;
        while (cap < c->len + len)
            cap *= 2;
        nb = realloc(c->buf, AB_MIN(cap, (size_t)ENVD_RPC_BODY_MAX));
        if (nb == NULL) {
            c->cap = SIZE_MAX;
            free(c->buf);
            c->buf = NULL;
            respond_connect_error(ex, "resource_exhausted", "out of memory reading the request");
            return;
        }
        c->buf = nb;
        c->cap = AB_MIN(cap, (size_t)ENVD_RPC_BODY_MAX);
    }
    memcpy(c->buf + c->len, data, len);
    c->len += len;
}

static void call_on_end(struct http_exchange *ex, void *arg)
{
    struct envd_call *c = arg;
    char err[256] = "out of memory"; /* what is left when json_object() fails */

    if (c->cap == SIZE_MAX) { /* answered from on_data */
        envd_call_free(c);
        return;
    }
    http_set_body_handler(ex, NULL, NULL);
    if (c->stream) {
        int rc = envd_env_parse_request(c->buf, c->len, &c->req, err, sizeof(err));
        if (rc != 0) {
            envd_rpc_error(c, rc == AB_ELIMIT ? "resource_exhausted" : "invalid_argument", "%s",
                           err);
            return;
        }
    } else {
        c->req = c->len == 0 ? json_object()
                             : json_parse_object((const char *)c->buf, c->len, ENVD_RPC_BODY_MAX,
                                                 err, sizeof(err));
        if (c->req == NULL) {
            envd_rpc_error(c, "invalid_argument", "%s", err);
            return;
        }
    }
    free(c->buf);
    c->buf = NULL;
    if (strcmp(c->service, "process") == 0)
        envd_proc_rpc(c);
    else
        envd_fs_rpc(c);
}

static void call_on_abort(struct http_exchange *ex, void *arg)
{
    struct envd_call *c = arg;

    if (c->cap != SIZE_MAX)
        http_abort(ex);
    envd_call_free(c);
}

static const struct http_body_handler call_bh = {call_on_data, call_on_end, call_on_abort, NULL};

static int64_t header_int(const struct http_request *r, const char *name, int64_t def, int64_t max)
{
    const char *v = http_header_get(r, name);
    char *end;
    long long n;

    if (v == NULL || v[0] == '\0')
        return def;
    errno = 0;
    n = strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || n < 0)
        return def;
    return n > max ? max : n;
}

static bool media_is(const char *ct, const char *want)
{
    size_t n = strlen(want);

    return ct != NULL && strncasecmp(ct, want, n) == 0 && (ct[n] == '\0' || ct[n] == ';');
}

static void rpc_route(struct http_exchange *ex, struct envd *e, const char *service)
{
    const struct http_request *r = http_req(ex);
    const char *ct = http_header_get(r, "Content-Type");
    const char *method = http_param(ex, "method");
    char basic_user[40] = "";
    char err[160];
    struct envd_call *c;
    int rc;

    if (!token_ok(e, ex)) {
        respond_connect_error(ex, "unauthenticated", unauthorized_msg);
        return;
    }
    if (!media_is(ct, CT_JSON) && !media_is(ct, CT_CONNECT_JSON)) {
        http_respond_error(ex, 415,
                           "Content-Type %s is not served: envd speaks Connect with the JSON "
                           "codec (application/json or application/connect+json)",
                           ct != NULL ? ct : "(none)");
        return;
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        respond_connect_error(ex, "resource_exhausted", "out of memory");
        return;
    }
    c->e = e;
    c->ex = ex;
    c->stream = media_is(ct, CT_CONNECT_JSON);
    ab_strlcpy(c->service, service, sizeof(c->service));
    ab_strlcpy(c->method, method != NULL ? method : "", sizeof(c->method));
    c->timeout_ms = header_int(r, "Connect-Timeout-Ms", 0, 10LL * 365 * 86400 * 1000);
    c->keepalive_ms = header_int(r, "Keepalive-Ping-Interval", 0, 86400) * 1000;
    if (!e->armed) {
        envd_rpc_error(c, "failed_precondition",
                       "envd is not initialised yet: the control plane must call POST /init "
                       "before %s.%s calls",
                       c->service, c->method);
        return;
    }
    rc = envd_basic_user(http_header_get(r, "Authorization"), basic_user, sizeof(basic_user));
    if (rc == AB_EINVAL) {
        envd_rpc_error(c, "unauthenticated",
                       "invalid username in the Authorization header: send Basic "
                       "base64(<user>:)");
        return;
    }
    if (envd_request_user(e, basic_user, &c->user, err, sizeof(err)) != 0) {
        envd_rpc_error(c, "unauthenticated", "%s", err);
        return;
    }
    http_set_body_handler(ex, &call_bh, c);
}

static void process_route(struct http_exchange *ex, void *arg)
{
    rpc_route(ex, arg, "process");
}

static void filesystem_route(struct http_exchange *ex, void *arg)
{
    rpc_route(ex, arg, "filesystem");
}

/* ---- REST ---------------------------------------------------------------- */

static void health(struct http_exchange *ex, void *arg)
{
    struct http_header h = {"X-Envd-Version", ENVD_VERSION};

    http_respond(ex, 204, NULL, NULL, 0, &h, 1);
}

static void init_route(struct http_exchange *ex, void *arg)
{
    struct envd *e = arg;
    const struct http_request *r = http_req(ex);
    struct http_header h = {"X-Envd-Version", ENVD_VERSION};
    char err[256] = "out of memory"; /* what is left when json_object() fails */
    const char *token = NULL, *user = NULL, *workdir = NULL, *ca = NULL;
    json_t *body, *vars = NULL, *copy = NULL;
    const char *k;
    json_t *v;

    if (!token_ok(e, ex)) {
        http_respond_error(ex, 401, "%s", unauthorized_msg);
        return;
    }
    body = r->body_len == 0 ? json_object()
                            : json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    if (body == NULL) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    if (json_get_str(body, "accessToken", false, 1024, &token, err, sizeof(err)) != 0 ||
        json_get_str(body, "defaultUser", false, 32, &user, err, sizeof(err)) != 0 ||
        json_get_str(body, "defaultWorkdir", false, PATH_MAX - 1, &workdir, err, sizeof(err)) !=
            0 ||
        json_get_object(body, "envVars", false, &vars, err, sizeof(err)) != 0 ||
        json_get_str(body, "egressCa", false, ENVD_TRUST_PEM_MAX, &ca, err, sizeof(err)) != 0) {
        http_respond_error(ex, 400, "%s", err);
        goto out;
    }
    if (token != NULL && strchr(token, '\\') != NULL) {
        http_respond_error(ex, 400, "field 'accessToken' may not contain a backslash");
        goto out;
    }
    if (user != NULL && user[0] != '\0' && !envd_username_is_valid(user)) {
        http_respond_error(ex, 400, "field 'defaultUser' is not a valid user name");
        goto out;
    }
    if (workdir != NULL && workdir[0] != '\0' && workdir[0] != '/' && workdir[0] != '~') {
        http_respond_error(ex, 400, "field 'defaultWorkdir' must be an absolute path or ~/...");
        goto out;
    }
    if (vars != NULL) {
        if (!json_is_object(vars)) {
            http_respond_error(ex, 400, "field 'envVars' must be an object of strings");
            goto out;
        }
        json_object_foreach(vars, k, v)
        {
            if (!json_is_string(v) || k[0] == '\0' || strchr(k, '=') != NULL) {
                http_respond_error(ex, 400,
                                   "field 'envVars' must map names without '=' to strings "
                                   "(bad entry '%.64s')",
                                   k);
                goto out;
            }
        }
        copy = json_deep_copy(vars);
        json_decref(e->env_vars);
        e->env_vars = copy;
    }
    /* The egress gateway's CA for this sandbox (its certificate only; the key
     * stays in the agent): into the trust store before anything runs. */
    if (ca != NULL && ca[0] != '\0') {
        struct envd_trust_paths where;
        int rc = envd_trust_install("", ca, strlen(ca), &where, err, sizeof(err));
        if (rc != 0) {
            http_respond_error(ex, rc == AB_EIO ? 500 : 400, "%s", err);
            goto out;
        }
        if (e->env_vars == NULL)
            e->env_vars = json_object();
        if (e->env_vars != NULL)
            envd_trust_env(e->env_vars, &where);
    }
    if (token != NULL) {
        free(e->token);
        e->token = token[0] != '\0' ? strdup(token) : NULL;
    }
    if (user != NULL)
        ab_strlcpy(e->default_user, user, sizeof(e->default_user));
    if (workdir != NULL)
        ab_strlcpy(e->default_workdir, workdir, sizeof(e->default_workdir));
    if (!e->armed)
        LOG_INFO("envd armed", "user", e->default_user[0] ? e->default_user : "root");
    e->armed = true;
    http_respond(ex, 204, NULL, NULL, 0, &h, 1);
out:
    json_decref(body);
}

static void envs_route(struct http_exchange *ex, void *arg)
{
    struct envd *e = arg;

    if (!token_ok(e, ex)) {
        http_respond_error(ex, 401, "%s", unauthorized_msg);
        return;
    }
    http_respond_json(ex, 200, e->env_vars != NULL ? json_deep_copy(e->env_vars) : json_object());
}

static unsigned long long meminfo_kib(const char *text, const char *key)
{
    const char *p = strstr(text, key);

    return p != NULL ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static void metrics_route(struct http_exchange *ex, void *arg)
{
    struct envd *e = arg;
    char buf[4096];
    unsigned long long total = 0, idle = 0, mem_total, mem_avail, mem_cache;
    double pct = 0;
    struct statvfs vfs;
    FILE *f;
    size_t n;

    if (!token_ok(e, ex)) {
        http_respond_error(ex, 401, "%s", unauthorized_msg);
        return;
    }
    f = fopen("/proc/stat", "r");
    if (f != NULL) {
        unsigned long long v[8] = {0};
        if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]) >= 4) {
            for (int i = 0; i < 8; i++)
                total += v[i];
            idle = v[3] + v[4];
        }
        fclose(f);
    }
    if (e->cpu_total != 0 && total > e->cpu_total)
        pct = 100.0 * (1.0 - (double)(idle - e->cpu_idle) / (double)(total - e->cpu_total));
    e->cpu_total = total;
    e->cpu_idle = idle;
    buf[0] = '\0';
    f = fopen("/proc/meminfo", "r");
    if (f != NULL) {
        n = fread(buf, 1, sizeof(buf) - 1, f);
        buf[n] = '\0';
        fclose(f);
    }
    mem_total = meminfo_kib(buf, "MemTotal:") * 1024;
    mem_avail = meminfo_kib(buf, "MemAvailable:") * 1024;
    mem_cache = meminfo_kib(buf, "\nCached:") * 1024;
    if (statvfs("/", &vfs) != 0)
        memset(&vfs, 0, sizeof(vfs));
    http_respond_json(
        ex, 200,
        json_pack("{s:I,s:i,s:f,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "ts", (json_int_t)time(NULL),
                  "cpu_count", (int)sysconf(_SC_NPROCESSORS_ONLN), "cpu_used_pct", pct, "mem_total",
                  (json_int_t)mem_total, "mem_used", (json_int_t)(mem_total - mem_avail),
                  "mem_cache", (json_int_t)mem_cache, "mem_total_mib",
                  (json_int_t)(mem_total >> 20), "mem_used_mib",
                  (json_int_t)((mem_total - mem_avail) >> 20), "disk_used",
                  (json_int_t)((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize), "disk_total",
                  (json_int_t)(vfs.f_blocks * vfs.f_frsize)));
}

struct http_router *envd_router_new(struct envd *e)
{
    struct http_router *r;

    const struct http_route routes[] = {
        {"GET", "/health", health, e, 0},
        {"POST", "/init", init_route, e, 0},
        {"GET", "/envs", envs_route, e, 0},
        {"GET", "/metrics", metrics_route, e, 0},
        {"GET", "/files", envd_files_get, e, HTTP_ROUTE_STREAM},
        {"POST", "/files", envd_files_post, e, HTTP_ROUTE_STREAM},
        {"POST", "/process.Process/{method}", process_route, e, HTTP_ROUTE_STREAM},
        {"POST", "/filesystem.Filesystem/{method}", filesystem_route, e, HTTP_ROUTE_STREAM},
    };
    r = http_router_new(routes, AB_ARRAY_LEN(routes));
    return r;
}
