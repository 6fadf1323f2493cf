/* The E2B surface's glue: the route table with its authentication wrapper,
 * the shared response shapes, envd access tokens and forwarding of
 * id-addressed calls to the owning cluster. */
#include "agent/e2b/e2b.h"
#include "agent/e2b/metrics.h"

#include "agent/auth.h"
#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"
#include "agentbox/relay.h"
#include "agentbox/sbxid.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rt *e2b_rt(struct e2b *e)
{
    return e->d.rt;
}

struct loop *e2b_loop(struct e2b *e)
{
    return e->d.loop;
}

struct hub_link *e2b_hub(struct e2b *e)
{
    return e->d.hub;
}

const char *e2b_runtime_kind(struct e2b *e)
{
    return e->d.rt && e->d.rt->kind ? e->d.rt->kind : "current";
}

const char *e2b_domain(struct e2b *e)
{
    const char *d = e->d.data_domain;
    return d && d[0] ? d : NULL;
}

const char *e2b_prometheus_url(struct e2b *e)
{
    const char *u = e->d.prometheus_url;
    return u && u[0] ? u : NULL;
}

const char *e2b_log_service_url(struct e2b *e)
{
    const char *u = e->d.log_service_url;
    return u && u[0] ? u : NULL;
}

void e2b_token(struct e2b *e, const char *id, char *out)
{
    uint8_t mac[CRYPTO_SHA256_LEN];
    crypto_hmac_sha256(e->token_key, sizeof(e->token_key), id, strlen(id), mac);
    crypto_hex_encode(mac, sizeof(mac), out);
}

bool e2b_owns(const struct agent_principal *p, const struct rt_sandbox *s)
{
    return strcmp(p->namespace, s->ns) == 0 && strcmp(p->team, s->team) == 0 &&
           strcmp(p->user, s->owner) == 0;
}

void e2b_time(int64_t wall_ms, char *out, size_t len)
{
    time_t t = (time_t)(wall_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Pools are named <env>-<ceil cpu>c<floor GiB>gi (reference §6.4): the
 * sandbox's size as the E2B shapes want it, 0 when the name says nothing. */
void e2b_pool_size(const char *pool, int64_t *cpu, int64_t *mem_mb)
{
    const char *dash = strrchr(pool, '-');
    long long c = 0, g = 0;
    char tail[4] = "";
    *cpu = 0;
    *mem_mb = 0;
    if (dash && sscanf(dash + 1, "%lldc%lld%3s", &c, &g, tail) == 3 && strcmp(tail, "gi") == 0 &&
        c >= 0 && g >= 0 && c < 100000 && g < 100000000) {
        *cpu = c;
        *mem_mb = g * 1024;
    }
}

json_t *e2b_sandbox_json(struct e2b *e, const struct rt_sandbox *s)
{
    const char *domain = e2b_domain(e);
    /* the runtime's random per-sandbox token (runtime.h), never derived from the id */
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:o,s:s}", "sandboxID", s->id, "templateID", s->pool,
                     "alias", s->env[0] ? s->env : s->pool, "clientID", s->ns, "envdVersion",
                     E2B_ENVD_VERSION, "envdAccessToken", s->envd_token, "domain",
                     domain ? json_string(domain) : json_null(), "trafficAccessToken", "");
}

json_t *e2b_detail_json(struct e2b *e, const struct rt_sandbox *s, bool one)
{
    char started[32], end[32];
    int64_t cpu, mem;
    const char *domain = e2b_domain(e);
    e2b_time(s->claimed_ms, started, sizeof(started));
    e2b_time(s->end_ms > 0 ? s->end_ms : s->claimed_ms + 300000, end, sizeof(end));
    e2b_pool_size(s->pool, &cpu, &mem);
    if (s->cpu_milli > 0) /* the runtime's real sizing wins over the pool name's */
        cpu = (s->cpu_milli + 999) / 1000;
    if (s->mem_bytes > 0)
        mem = s->mem_bytes / (1024 * 1024);
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s,s:I,s:I,s:i,s:s,s:s}", "sandboxID", s->id, "templateID",
                  s->pool, "alias", s->env[0] ? s->env : s->pool, "clientID", s->ns, "startedAt",
                  started, "endAt", end, "cpuCount", (json_int_t)cpu, "memoryMB", (json_int_t)mem,
                  "diskSizeMB", 0, "envdVersion", E2B_ENVD_VERSION, "state", "running");
    if (!o)
        return NULL;
    if (s->metadata && json_object_size(s->metadata) > 0)
        json_object_set_new(o, "metadata", json_deep_copy(s->metadata));
    if (one) {
        json_object_set_new(o, "domain", domain ? json_string(domain) : json_null());
        json_object_set_new(o, "envdAccessToken", json_string(s->envd_token));
    }
    return o;
}

json_t *e2b_body(struct http_exchange *ex, bool empty_ok)
{
    const struct http_request *r = http_req(ex);
    char err[256];
    size_t i = 0;
    while (i < r->body_len &&
           (r->body[i] == ' ' || r->body[i] == '\n' || r->body[i] == '\r' || r->body[i] == '\t'))
        i++;
    if (i == r->body_len) {
        if (empty_ok)
            return json_object();
        http_respond_error(ex, 400, "request body required: send a JSON object");
        return NULL;
    }
    json_t *b = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    if (!b)
        http_respond_error(ex, 400, "%s", err);
    return b;
}

/* --- forwarding --------------------------------------------------------------------- */

void e2b_forward(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                 const char *cluster, const char *target)
{
    hub_link_forward(e->d.hub, ex, cluster, RELAY_SVC_E2B, target, NULL, 0, NULL, p->assertion);
}

bool e2b_lookup(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                struct rt_sandbox *s)
{
    const char *id = http_param(ex, "id");
    char cluster[SBXID_CLUSTER_MAX + 1];
    struct rt *rt = e2b_rt(e);

    memset(s, 0, sizeof(*s));
    if (!id || sbxid_cluster_of(id, cluster) != 0) {
        http_respond_error(ex, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return false;
    }
    if (strcmp(cluster, e->cluster) != 0) {
        e2b_forward(e, ex, p, cluster, http_req(ex)->target);
        return false;
    }
    if (!rt || rt_get(rt, id, s) != 0 || s->state == RT_STOPPING || s->state == RT_IDLE ||
        !e2b_owns(p, s)) {
        json_decref(s->metadata);
        s->metadata = NULL;
        http_respond_error(ex, 404, "sandbox \"%s\" not found", id);
        return false;
    }
    return true;
}

/* --- routes and authentication ------------------------------------------------------- */

static void auth_done(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct e2b_op *op = arg;
    op->fn(op->e, ex, p);
}

static void h_auth(struct http_exchange *ex, void *arg)
{
    struct e2b_op *op = arg;
    agent_auth_request(op->e->d.auth, ex, auth_done, op);
}

int e2b_route_raw(struct e2b *e, const struct http_route *r, char *err, size_t errlen)
{
    if (e->nroutes >= E2B_ROUTES_MAX) {
        snprintf(err, errlen, "e2b: more than %d routes", E2B_ROUTES_MAX);
        return AB_ELIMIT;
    }
    e->routes[e->nroutes++] = *r;
    return 0;
}

int e2b_route(struct e2b *e, const char *method, const char *pattern, e2b_fn fn, int flags,
              char *err, size_t errlen)
{
    if (e->nops >= E2B_ROUTES_MAX) {
        snprintf(err, errlen, "e2b: more than %d routes", E2B_ROUTES_MAX);
        return AB_ELIMIT;
    }
    struct e2b_op *op = &e->ops[e->nops++];
    op->e = e;
    op->fn = fn;
    struct http_route r = {method, pattern, h_auth, op, flags};
    return e2b_route_raw(e, &r, err, errlen);
}

static void h_health(struct http_exchange *ex, void *arg)
{
    (void)arg;
    http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
}

/* The token key survives restarts so re-adopted sandboxes keep their tokens. */
/* AB_EINVAL when the key's path does not fit (a cut path would keep the key
 * in another file); a key that cannot be kept is only a warning. */
static int load_token_key(struct e2b *e, const char *state_dir, char *err, size_t errlen)
{
    char path[1024], hex[65] = "";
    size_t n = 0;
    int fd;

    if ((size_t)snprintf(path, sizeof(path), "%s/e2b-token.key", state_dir ? state_dir : ".") >=
        sizeof(path)) {
        snprintf(err, errlen,
                 "state_dir is too long: <state_dir>/e2b-token.key must fit in %zu "
                 "bytes",
                 sizeof(path) - 1);
        return AB_EINVAL;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t got = read(fd, hex, 64);
        close(fd);
        if (got == 64 && crypto_hex_decode(hex, e->token_key, sizeof(e->token_key), &n) == 0 &&
            n == sizeof(e->token_key)) {
            explicit_bzero(hex, sizeof(hex));
            return 0;
        }
    }
    crypto_random(e->token_key, sizeof(e->token_key));
    crypto_hex_encode(e->token_key, sizeof(e->token_key), hex);
    if (state_dir)
        mkdir(state_dir, 0700);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, hex, 64) != 64)
        LOG_WARN("cannot keep the envd token key; tokens change on restart", "path", path, "error",
                 strerror(errno));
    if (fd >= 0)
        close(fd);
    explicit_bzero(hex, sizeof(hex));
    return 0;
}

int e2b_new(const struct e2b_deps *deps, struct e2b **out, char *err, size_t errlen)
{
    static const char *const op_labels[] = {"operation", "category", NULL};
    static const char *const result_labels[] = {"result", NULL};
    struct e2b *e = calloc(1, sizeof(*e));
    int rc;

    *out = NULL;
    if (!e) {
        snprintf(err, errlen, "e2b: out of memory");
        return AB_ENOMEM;
    }
    e->d = *deps;
    e->cluster = deps->cluster;
    e->started_ms = ab_wall_ms();
    if ((rc = load_token_key(e, deps->state_dir, err, errlen)) != 0) {
        e2b_free(e);
        return rc;
    }
    e->m_unsupported =
        metrics_register(metrics_default(), "agentbox_e2b_unsupported_total",
                         "E2B operations answered 501 because AgentBox does not offer them",
                         METRIC_COUNTER, op_labels, NULL, 0);
    e->m_creates =
        metrics_register(metrics_default(), "agentbox_e2b_creates_total",
                         "E2B sandbox creates by result", METRIC_COUNTER, result_labels, NULL, 0);
    e->m_create_seconds = metrics_register(metrics_default(), "agentbox_e2b_create_seconds",
                                           "E2B create latency until the sandbox is armed (201)",
                                           METRIC_HISTOGRAM, NULL, NULL, 0);

    const struct http_route health = {"GET", "/health", h_health, e, 0};
    rc = e2b_route_raw(e, &health, err, errlen);
    if (rc == 0 && (rc = e2b_events_new(e, &e->events)) != 0)
        snprintf(err, errlen, "e2b: out of memory for the event queue");
    if (rc == 0)
        rc = e2b_create_routes(e, err, errlen);
    /* first match wins: /sandboxes/metrics before /sandboxes/{id} */
    if (rc == 0)
        rc = e2b_metric_routes(e, err, errlen);
    if (rc == 0)
        rc = e2b_log_routes(e, err, errlen);
    if (rc == 0)
        rc = e2b_sandbox_routes(e, err, errlen);
    if (rc == 0)
        rc = e2b_template_routes(e, err, errlen);
    if (rc == 0)
        rc = e2b_key_routes(e, err, errlen);
    if (rc == 0)
        rc = e2b_unsupported_routes(e, err, errlen);
    if (rc != 0) {
        e2b_free(e);
        return rc;
    }
    *out = e;
    return 0;
}

void e2b_free(struct e2b *e)
{
    if (!e)
        return;
    e2b_metrics_free(e);
    e2b_events_free(e->events);
    explicit_bzero(e->token_key, sizeof(e->token_key));
    free(e);
}

const struct http_route *e2b_routes(const struct e2b *e, size_t *n)
{
    *n = e->nroutes;
    return e->routes;
}
