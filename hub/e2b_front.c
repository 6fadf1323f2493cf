/* The hub's front doors /e2b and /data. See e2b_front.h. */
#include "hub/e2b_front.h"

#include "hub/auth.h"
#include "hub/federation.h"
#include "hub/hub.h"
#include "hub/tunnel_server.h"

#include "agentbox/assertion.h"
#include "agentbox/pagetoken.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/ref.h"
#include "agentbox/sbxid.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MD_GROUP "agentbox.scitix.ai/scaling-group"
#define TARGET_MAX 8192
#define FAN_CLUSTERS_MAX 4096
#define ENVS_MAX 100000

typedef void (*front_fn)(struct e2b_front *fr, struct http_exchange *ex,
                         const struct keys_principal *p);

/* One authenticated route: the operation and the front it runs on. */
struct front_route {
    struct e2b_front *fr;
    front_fn fn;
};

enum { OP_ID, OP_METRICS, OP_CREATE, OP_LIST, OP_LIST_V2, OP_TEMPLATES, OP_ANY, OP_COUNT };

struct e2b_front {
    struct e2b_front_deps d;
    struct tunnel_server *tunnel; /* e2b_front_set_tunnel; NULL until the hub started */
    struct front_route ops[OP_COUNT];
};

/* The request target below /e2b or /data (prefix_len bytes), as "/...". */
static void sub_target(const struct http_request *r, size_t prefix_len, char *out, size_t len)
{
    const char *rest = strlen(r->target) >= prefix_len ? r->target + prefix_len : "";
    snprintf(out, len, "%s%s", rest[0] == '/' ? "" : "/", rest);
}

/* The headers a relayed request carries (DESIGN §6, §11): its Content-Type
 * and an assertion of p made for cluster (tok, ASRT_TOKEN_MAX + 1 bytes),
 * never the caller's key. Returns how many, or -1 with tok holding the
 * reason when signing failed. */
static int keep_headers(struct e2b_front *fr, const struct http_request *r,
                        const struct keys_principal *p, const char *cluster, const char *target,
                        struct tun_header *h, char *tok, size_t toklen)
{
    char err[200];
    int n = 0;
    const char *ct = http_header_get(r, "Content-Type");
    /* a create earns the cluster one claim row under the assertion (hub/auth.h) */
    bool create = strcmp(r->method, "POST") == 0 && strncmp(target, "/sandboxes", 10) == 0 &&
                  (target[10] == '\0' || target[10] == '?');
    if (ct)
        h[n++] = (struct tun_header){"Content-Type", ct};
    if (auth_assertion_for(fr->d.auth, p, cluster, NULL, create, tok, toklen, err, sizeof(err)) !=
        0) {
        ab_strlcpy(tok, err, toklen);
        return -1;
    }
    h[n++] = (struct tun_header){ASRT_HEADER, tok};
    return n;
}

/* --- one request to one cluster ----------------------------------------------------- */

struct one {
    struct http_exchange *ex;
    const char *data_domain; /* the front's; NULL when unset */
    char cluster[AB_CLUSTER_ID_BUF];
};

/* A sandbox answer (create, GET /sandboxes/{id}, connect) names the
 * cluster's own data domain; the SDK builds every envd and signed URL from
 * it, so through the hub it must name the hub's. NULL: keep the body. */
static char *with_hub_domain(const struct one *o, const struct tun_call_result *res)
{
    if (!o->data_domain || res->status / 100 != 2 || !res->body_len)
        return NULL;
    json_t *b = json_loadb(res->body, res->body_len, 0, NULL);
    char *txt = NULL;
    if (json_is_object(b) && json_object_get(b, "domain") &&
        json_object_set_new(b, "domain", json_string(o->data_domain)) == 0)
        txt = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return txt;
}

static void one_done(const struct tun_call_result *res, void *arg)
{
    struct one *o = arg;
    char *txt = res->status == 0 ? NULL : with_hub_domain(o, res);
    if (res->status == 0)
        http_respond_error(o->ex, 503, "cluster '%s' did not answer through the hub: %s; retry",
                           o->cluster, res->error ? res->error : "tunnel error");
    else if (txt)
        http_respond(o->ex, res->status, "application/json", txt, strlen(txt), NULL, 0);
    else
        http_respond(o->ex, res->status, res->body_len ? "application/json" : NULL,
                     res->body ? res->body : "", res->body_len, NULL, 0);
    free(txt);
    free(o);
}

/* Sends the request (method of ex, target, body) to cluster's e2b service and
 * answers ex with its answer; 503 naming the cluster when it has no session. */
static void send_to(struct e2b_front *fr, struct http_exchange *ex, const struct keys_principal *p,
                    const char *cluster, const char *target, const char *body, size_t len)
{
    const struct http_request *r = http_req(ex);
    struct tun_session *s = tunnel_server_session(fr->tunnel, cluster);
    struct tun_header h[8];
    char tok[ASRT_TOKEN_MAX + 1];
    int n = keep_headers(fr, r, p, cluster, target, h, tok, sizeof(tok));
    struct one *o;

    if (n < 0) {
        http_respond_error(ex, 500, "cannot sign an assertion for cluster '%s': %s", cluster, tok);
        return;
    }
    if (!s) {
        http_respond_error(ex, 503,
                           "cluster '%s' is not connected to the hub: retry once its agent is "
                           "back, or create on another cluster",
                           cluster);
        return;
    }
    if (!(o = calloc(1, sizeof(*o)))) {
        http_respond_error(ex, 503, "out of memory while relaying to cluster '%s'", cluster);
        return;
    }
    o->ex = ex;
    o->data_domain = fr->d.data_domain && fr->d.data_domain[0] ? fr->d.data_domain : NULL;
    ab_strlcpy(o->cluster, cluster, sizeof(o->cluster));
    int rc =
        tun_call(s, "e2b", r->method, target, h, n, body, len, E2B_FRONT_BODY_MAX, one_done, o);
    if (rc != 0) {
        free(o);
        http_respond_error(ex, 503, "cannot open a stream to cluster '%s': %s", cluster,
                           ab_strerror(rc));
    }
}

/* --- authentication ------------------------------------------------------------------ */

static void authed(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct front_route *r = arg;
    r->fn(r->fr, ex, p);
}

static void h_auth(struct http_exchange *ex, void *arg)
{
    struct front_route *r = arg;
    struct auth_ctx *a = r->fr->d.auth;
    if (!a || !r->fr->tunnel) {
        http_respond_error(ex, 503, "the hub is starting: retry shortly");
        return;
    }
    auth_request(a, ex, AUTH_SURFACE_E2B, authed, arg);
}

/* --- id-addressed calls ----------------------------------------------------------------- */

static void id_op(struct e2b_front *fr, struct http_exchange *ex, const struct keys_principal *p)
{
    const struct http_request *r = http_req(ex);
    const char *id = http_param(ex, "id");
    char cluster[AB_CLUSTER_ID_BUF], target[TARGET_MAX];
    if (!id || sbxid_cluster_of(id, cluster) != 0) {
        http_respond_error(ex, 404, "sandbox \"%.80s\" not found", id ? id : "");
        return;
    }
    sub_target(r, 4, target, sizeof(target));
    send_to(fr, ex, p, cluster, target, r->body, r->body_len);
}

/* GET /sandboxes/metrics?sandbox_ids=a,b: every id must be of one cluster. */
static void metrics_op(struct e2b_front *fr, struct http_exchange *ex,
                       const struct keys_principal *p)
{
    const struct http_request *r = http_req(ex);
    char ids[4096], first[AB_CLUSTER_ID_BUF] = "", c[AB_CLUSTER_ID_BUF];
    char target[TARGET_MAX];
    if (http_query_get(r, "sandbox_ids", ids, sizeof(ids)) != 0 || !ids[0]) {
        http_respond_error(ex, 400, "sandbox_ids is required: a comma-separated list of ids");
        return;
    }
    for (char *save = NULL, *id = strtok_r(ids, ",", &save); id; id = strtok_r(NULL, ",", &save)) {
        if (sbxid_cluster_of(id, c) != 0) {
            http_respond_error(ex, 400, "sandbox id '%.80s' is malformed", id);
            return;
        }
        if (first[0] && strcmp(first, c) != 0) {
            http_respond_error(ex, 400,
                               "sandbox_ids name clusters '%s' and '%s': at the hub ask one "
                               "cluster per request, or use GET /sandboxes/{id}/metrics",
                               first, c);
            return;
        }
        ab_strlcpy(first, c, sizeof(first));
    }
    sub_target(r, 4, target, sizeof(target));
    send_to(fr, ex, p, first, target, NULL, 0);
}

/* --- creates ------------------------------------------------------------------------------ */

static void create_op(struct e2b_front *fr, struct http_exchange *ex,
                      const struct keys_principal *p)
{
    const struct http_request *r = http_req(ex);
    char err[512], target[TARGET_MAX], tmpl[REF_MAX];
    struct ref ref, to;
    json_t *b = json_parse_object(r->body, r->body_len, 0, err, sizeof(err));
    const char *t = b ? json_string_value(json_object_get(b, "templateID")) : NULL;

    if (!b) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    sub_target(r, 4, target, sizeof(target));
    if (!t || ref_parse(t, &ref) != 0 || !ref.name[0]) {
        http_respond_error(ex, 400,
                           "templateID is required: pass an env name (GET /templates lists them), "
                           "optionally as <cluster>::<name>");
        goto out;
    }
    if (ref.cluster[0]) { /* pinned: verbatim, the cluster resolves it */
        if (!sbxid_cluster_is_valid(ref.cluster, NULL, 0))
            http_respond_error(ex, 400, "templateID prefix '%.64s' is not a cluster id",
                               ref.cluster);
        else
            send_to(fr, ex, p, ref.cluster, target, r->body, r->body_len);
        goto out;
    }
    const char *group =
        json_string_value(json_object_get(json_object_get(b, "metadata"), MD_GROUP));
    if (strlen(ref.name) > ROUTE_NAME_MAX || (group && strlen(group) > ROUTE_NAME_MAX)) {
        http_respond_error(ex, 400, "templateID name and the scaling group are at most %d bytes",
                           ROUTE_NAME_MAX);
        goto out;
    }
    struct federation *f = fr->d.fed;
    struct route_query q = {
        .ns = p->namespace,
        .env = ref.name,
        .group = group,
        .local = NULL,
        .local_idle = -1,
        .local_can_grow = -1,
        .now_ms = federation_now_ms(),
    };
    struct route_decision d;
    federation_place(f, &q, &d);
    if (!d.cluster[0]) { /* the agent's E2B create answers an unknown env 400 too */
        http_respond_error(ex, 400,
                           "sandbox env \"%s\" is not offered in namespace %s by any cluster "
                           "connected to the hub: GET /templates lists the envs you can use",
                           ref.name, p->namespace);
        goto out;
    }
    memset(&to, 0, sizeof(to));
    ab_strlcpy(to.cluster, d.cluster, sizeof(to.cluster));
    /* forward: the pinned member pool; parked: the env, resolved by its cluster */
    ab_strlcpy(to.name, d.action == ROUTE_FORWARD && d.pool[0] ? d.pool : ref.name,
               sizeof(to.name));
    ab_strlcpy(to.image, ref.image, sizeof(to.image));
    int k = ref_format(&to, tmpl, sizeof(tmpl));
    char *txt = NULL;
    if (k > 0 && (size_t)k < sizeof(tmpl) &&
        json_object_set_new(b, "templateID", json_string(tmpl)) == 0)
        txt = json_dumps(b, JSON_COMPACT);
    if (!txt) {
        http_respond_error(ex, 503, "out of memory while placing the create");
        goto out;
    }
    send_to(fr, ex, p, to.cluster, target, txt, strlen(txt));
    free(txt);
out:
    json_decref(b);
}

/* --- merged lists ----------------------------------------------------------------------- */

enum fan_kind { FAN_LIST, FAN_LIST_V2, FAN_TEMPLATES };

struct fan {
    struct e2b_front *fr;
    struct keys_principal p;  /* each cluster gets an assertion of it made for itself */
    struct http_exchange *ex; /* NULL once answered */
    enum fan_kind kind;
    char target[TARGET_MAX]; /* sent to every cluster */
    char (*clusters)[AB_CLUSTER_ID_BUF];
    size_t n, next, inflight;
    json_t *items;
    json_t *seen; /* templates: templateID → true */
    char missing[512];
    int64_t limit, offset;
    struct loop_timer deadline;
};

static void fan_add_cluster(void *arg, const char *id)
{
    struct fan *f = arg;
    if (f->n < FAN_CLUSTERS_MAX)
        ab_strlcpy(f->clusters[f->n++], id, sizeof(f->clusters[0]));
}

static int by_cluster(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

static int by_sandbox_id(const void *a, const void *b)
{
    const char *x = json_string_value(json_object_get(*(json_t *const *)a, "sandboxID"));
    const char *y = json_string_value(json_object_get(*(json_t *const *)b, "sandboxID"));
    return strcmp(x ? x : "", y ? y : "");
}

static void fan_free(struct fan *f)
{
    json_decref(f->items);
    json_decref(f->seen);
    free(f->clusters);
    free(f);
}

static void fan_answer(struct fan *f)
{
    struct http_exchange *ex = f->ex;
    struct http_header h[3];
    int nh = 0;
    char next[64] = "", total[32];
    json_t *out = f->items;
    size_t n = json_array_size(f->items);

    f->ex = NULL;
    loop_timer_cancel(&f->deadline);
    if (f->missing[0])
        h[nh++] = (struct http_header){"X-AgentBox-Unreachable-Clusters", f->missing};
    if (f->kind == FAN_LIST_V2) {
        /* one order across clusters, so nextToken offsets stay meaningful */
        json_t **v = n ? calloc(n, sizeof(*v)) : NULL;
        for (size_t i = 0; v && i < n; i++)
            v[i] = json_array_get(f->items, i);
        if (v)
            qsort(v, n, sizeof(*v), by_sandbox_id);
        out = json_array();
        size_t from = (size_t)AB_MIN((int64_t)n, f->offset);
        size_t to = f->limit > 0 ? (size_t)AB_MIN((int64_t)n, f->offset + f->limit) : n;
        for (size_t i = from; v && out && i < to; i++)
            json_array_append(out, v[i]);
        free(v);
        snprintf(total, sizeof(total), "%zu", n);
        h[nh++] = (struct http_header){"X-Total-Running", total};
        if (to < n) {
            pagetoken_encode((int64_t)to, next);
            h[nh++] = (struct http_header){"X-Next-Token", next};
        }
    }
    char *body = out ? json_dumps(out, JSON_COMPACT) : NULL;
    if (out != f->items)
        json_decref(out);
    if (!body)
        http_respond_error(ex, 503, "out of memory while merging the clusters' lists");
    else
        http_respond(ex, 200, "application/json", body, strlen(body), h, nh);
    free(body);
}

static void fan_pump(struct fan *f);

static void fan_one_done(const struct tun_call_result *res, void *arg)
{
    struct fan *f = arg;
    f->inflight--;
    if (f->ex) {
        json_t *arr = res->status == 200 ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;
        if (!json_is_array(arr)) {
            LOG_WARN("a cluster's list is missing from a merged answer", "status",
                     res->status == 0 ? (res->error ? res->error : "tunnel error") : "not 200");
        }
        size_t i;
        json_t *it;
        json_array_foreach(arr, i, it)
        {
            if (f->kind == FAN_TEMPLATES) {
                const char *id = json_string_value(json_object_get(it, "templateID"));
                if (!id || json_object_get(f->seen, id))
                    continue;
                json_object_set_new(f->seen, id, json_true());
            }
            json_array_append(f->items, it);
        }
        json_decref(arr);
        fan_pump(f);
    }
    if (!f->ex && f->inflight == 0)
        fan_free(f);
}

/* Starts calls up to the concurrency bound; answers once all came back. */
static void fan_pump(struct fan *f)
{
    const struct http_request *r = http_req(f->ex);
    struct tun_header h[8];
    char tok[ASRT_TOKEN_MAX + 1];

    while (f->next < f->n && f->inflight < E2B_FRONT_FANOUT) {
        const char *c = f->clusters[f->next++];
        struct tun_session *s = tunnel_server_session(f->fr->tunnel, c);
        int nh = keep_headers(f->fr, r, &f->p, c, f->target, h, tok, sizeof(tok));
        if (s && nh >= 0 &&
            tun_call(s, "e2b", "GET", f->target, h, nh, NULL, 0, E2B_FRONT_BODY_MAX, fan_one_done,
                     f) == 0) {
            f->inflight++;
            continue;
        }
        size_t l = strlen(f->missing);
        snprintf(f->missing + l, sizeof(f->missing) - l, "%s%s", l ? "," : "", c);
    }
    if (f->inflight == 0 && f->next == f->n)
        fan_answer(f);
}

static void fan_deadline(struct loop_timer *t)
{
    struct fan *f = t->arg;
    if (!f->ex)
        return;
    /* what has not answered by now is left out and named */
    for (size_t i = f->next; i < f->n; i++) {
        size_t l = strlen(f->missing);
        snprintf(f->missing + l, sizeof(f->missing) - l, "%s%s", l ? "," : "", f->clusters[i]);
    }
    f->next = f->n;
    size_t l = strlen(f->missing);
    snprintf(f->missing + l, sizeof(f->missing) - l, "%s(%zu still answering)", l ? "," : "",
             f->inflight);
    fan_answer(f);
    if (f->inflight == 0)
        fan_free(f);
}

/* The caller's query without limit and nextToken: each cluster answers
 * everything that matches and the hub pages the merged list. */
static void strip_paging(const struct http_request *r, const char *path, char *out, size_t len)
{
    size_t o = (size_t)snprintf(out, len, "%s", path);
    char q[TARGET_MAX];
    ab_strlcpy(q, r->query ? r->query : "", sizeof(q));
    bool first = true;
    for (char *save = NULL, *kv = strtok_r(q, "&", &save); kv && o < len;
         kv = strtok_r(NULL, "&", &save)) {
        if (strncmp(kv, "limit=", 6) == 0 || strncmp(kv, "nextToken=", 10) == 0 ||
            strcmp(kv, "limit") == 0 || strcmp(kv, "nextToken") == 0)
            continue;
        o += (size_t)snprintf(out + o, len - o, "%c%s", first ? '?' : '&', kv);
        first = false;
    }
}

static void fan_start(struct e2b_front *fr, struct http_exchange *ex,
                      const struct keys_principal *p, enum fan_kind kind, const char *path)
{
    const struct http_request *r = http_req(ex);
    struct fan *f = calloc(1, sizeof(*f));
    char lim[32], tok[64];

    if (!f || !(f->clusters = calloc(FAN_CLUSTERS_MAX, sizeof(*f->clusters))) ||
        !(f->items = json_array()) || !(f->seen = json_object())) {
        if (f)
            fan_free(f);
        http_respond_error(ex, 503, "out of memory while listing");
        return;
    }
    f->fr = fr;
    f->ex = ex;
    f->p = *p;
    f->kind = kind;
    if (kind == FAN_LIST_V2) {
        if (http_query_get(r, "limit", lim, sizeof(lim)) == 0 && lim[0]) {
            char *end = NULL;
            long long l = strtoll(lim, &end, 10);
            if (!end || *end || l < 0 || l > 1000000) {
                fan_free(f);
                http_respond_error(ex, 400, "limit must be a non-negative integer");
                return;
            }
            f->limit = l;
        }
        if (http_query_get(r, "nextToken", tok, sizeof(tok)) == 0)
            f->offset = pagetoken_decode(tok);
        strip_paging(r, path, f->target, sizeof(f->target));
    } else {
        snprintf(f->target, sizeof(f->target), "%s%s%s", path, r->query[0] ? "?" : "", r->query);
    }
    tunnel_server_each_online(fr->tunnel, fan_add_cluster, f);
    qsort(f->clusters, f->n, sizeof(f->clusters[0]), by_cluster);
    loop_timer_start(fr->d.loop, &f->deadline, E2B_FRONT_DEADLINE_MS, fan_deadline, f);
    fan_pump(f);
    if (!f->ex && f->inflight == 0)
        fan_free(f);
}

static void list_op(struct e2b_front *fr, struct http_exchange *ex, const struct keys_principal *p)
{
    fan_start(fr, ex, p, FAN_LIST, "/sandboxes");
}

static void list_v2_op(struct e2b_front *fr, struct http_exchange *ex,
                       const struct keys_principal *p)
{
    fan_start(fr, ex, p, FAN_LIST_V2, "/v2/sandboxes");
}

static void templates_op(struct e2b_front *fr, struct http_exchange *ex,
                         const struct keys_principal *p)
{
    fan_start(fr, ex, p, FAN_TEMPLATES, "/templates");
}

/* GET /templates/{id} and whatever else the E2B surface has (the 501
 * catalogue, /api-keys): `cluster::x` ids go to that cluster, the rest to the
 * first connected cluster by id, which answers for the namespace as a whole. */
struct first_cluster {
    char id[AB_CLUSTER_ID_BUF];
};

static void pick_first(void *arg, const char *id)
{
    struct first_cluster *fc = arg;
    if (!fc->id[0] || strcmp(id, fc->id) < 0)
        ab_strlcpy(fc->id, id, sizeof(fc->id));
}

static void any_op(struct e2b_front *fr, struct http_exchange *ex, const struct keys_principal *p)
{
    const struct http_request *r = http_req(ex);
    const char *id = http_param(ex, "id");
    char target[TARGET_MAX];
    struct first_cluster fc = {""};
    struct ref ref;

    sub_target(r, 4, target, sizeof(target));
    if (id && ref_parse(id, &ref) == 0 && ref.cluster[0] &&
        sbxid_cluster_is_valid(ref.cluster, NULL, 0)) {
        send_to(fr, ex, p, ref.cluster, target, r->body, r->body_len);
        return;
    }
    tunnel_server_each_online(fr->tunnel, pick_first, &fc);
    if (!fc.id[0]) {
        http_respond_error(ex, 503, "no cluster is connected to the hub: retry once an agent is");
        return;
    }
    send_to(fr, ex, p, fc.id, target, r->body, r->body_len);
}

/* --- the data plane --------------------------------------------------------------------- */

static void data_error(struct http_exchange *ex, int status, const char *msg)
{
    http_respond_json(ex, status, json_pack("{s:s}", "error", msg));
}

/* The sandbox id a data-plane request names (the agent validates the rest);
 * port (DATA_PORT_BUF bytes) gets the port when the host named both, else "". */
#define DATA_PORT_BUF 8
static int data_target_id(const struct http_request *r, char *id, size_t len, char *port)
{
    static const char *const hdr[] = {"E2b-Sandbox-Id", "X-Sandbox-Id"};
    char cluster[AB_CLUSTER_ID_BUF];
    port[0] = '\0';
    for (size_t i = 0; i < AB_ARRAY_LEN(hdr); i++) {
        const char *v = http_header_get(r, hdr[i]);
        if (v && v[0])
            return ab_strlcpy(id, v, len) < len ? 0 : AB_ELIMIT;
    }
    const char *host = http_header_get(r, "Host");
    const char *dash = host ? strchr(host, '-') : NULL;
    const char *dot = host ? strchr(host, '.') : NULL;
    if (dash && dot && dash < dot && dash > host && (size_t)(dot - dash - 1) < len) {
        bool digits = true;
        for (const char *c = host; c < dash; c++)
            digits = digits && *c >= '0' && *c <= '9';
        memcpy(id, dash + 1, (size_t)(dot - dash - 1));
        id[dot - dash - 1] = '\0';
        if (digits && sbxid_cluster_of(id, cluster) == 0 && dash - host < DATA_PORT_BUF) {
            memcpy(port, host, (size_t)(dash - host));
            port[dash - host] = '\0';
            return 0;
        }
    }
    const char *q = strpbrk(r->target, "?#");
    size_t plen = q ? (size_t)(q - r->target) : strlen(r->target);
    for (const char *p = r->target; p + 11 <= r->target + plen; p++) {
        if (memcmp(p, "/sandboxes/", 11) != 0)
            continue;
        const char *s = p + 11, *e = memchr(s, '/', (size_t)(r->target + plen - s));
        size_t n = e ? (size_t)(e - s) : (size_t)(r->target + plen - s);
        if (n == 0 || n >= len)
            return AB_EINVAL;
        memcpy(id, s, n);
        id[n] = '\0';
        return 0;
    }
    return AB_ENOENT;
}

/* prefix: the bytes of r->target that are the hub's (5 for "/data", 0 on data_listen) */
static void data_relay(struct e2b_front *fr, struct http_exchange *ex, size_t prefix)
{
    const struct http_request *r = http_req(ex);
    char id[128], port[DATA_PORT_BUF], cluster[AB_CLUSTER_ID_BUF], target[TARGET_MAX], msg[256];
    if (data_target_id(r, id, sizeof(id), port) != 0) {
        data_error(ex, 400,
                   "missing sandbox id: set the E2b-Sandbox-Id and E2b-Sandbox-Port headers, use "
                   "the host <port>-<sandbox id>.<domain> or the path /data/sandboxes/<sandbox "
                   "id>/<port>/...");
        return;
    }
    if (sbxid_cluster_of(id, cluster) != 0) {
        snprintf(msg, sizeof(msg),
                 "sandbox id '%.60s' is malformed: expected <cluster>-<%d characters [a-z0-9]>", id,
                 SBXID_SUFFIX_LEN);
        data_error(ex, 400, msg);
        return;
    }
    struct tun_session *s = fr->tunnel ? tunnel_server_session(fr->tunnel, cluster) : NULL;
    snprintf(msg, sizeof(msg), "cluster '%s' is not connected to the hub", cluster);
    if (!s) {
        data_error(ex, 503, msg);
        return;
    }
    sub_target(r, prefix, target, sizeof(target));
    /* the host is under the hub's domain, not the cluster's (which would not
     * read it as a target): name the target in the headers the agent reads first */
    const struct tun_header hh[] = {{"E2b-Sandbox-Id", id}, {"E2b-Sandbox-Port", port}};
    tun_http_proxy(ex, s, "data", target, port[0] ? hh : NULL, port[0] ? 2 : 0, msg);
}

static void h_data(struct http_exchange *ex, void *arg)
{
    data_relay(arg, ex, 5);
}

static void h_data_host(struct http_exchange *ex, void *arg)
{
    data_relay(arg, ex, 0);
}

struct http_router *e2b_front_data_router(struct e2b_front *fr)
{
    struct http_router *r = http_router_new(NULL, 0);
    if (r)
        http_router_set_fallback(r, h_data_host, fr, HTTP_ROUTE_STREAM);
    return r;
}

/* --- internal: other clusters' envs of a namespace -------------------------------------- */

struct envs_collect {
    const char *ns, *origin;
    int64_t now_ms;
    json_t *map; /* "cluster::env" → {cluster, env, idle} */
};

static void envs_one(void *arg, const struct route_record *r)
{
    struct envs_collect *c = arg;
    char key[AB_CLUSTER_ID_MAX + ROUTE_NAME_MAX + 4];
    if (strcmp(r->ns, c->ns) != 0 || (c->origin && strcmp(r->cluster, c->origin) == 0) ||
        !route_is_fresh(r, c->now_ms, ROUTE_TTL_MS) || json_object_size(c->map) >= ENVS_MAX)
        return;
    snprintf(key, sizeof(key), "%s::%s", r->cluster, r->env);
    json_t *o = json_object_get(c->map, key);
    if (!o) {
        o = json_pack("{s:s,s:s,s:i}", "cluster", r->cluster, "env", r->env, "idle", 0);
        if (!o || json_object_set_new(c->map, key, o) != 0)
            return;
    }
    json_object_set_new(o, "idle",
                        json_integer(json_integer_value(json_object_get(o, "idle")) + r->idle));
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void h_envs(struct http_exchange *ex, void *arg)
{
    const struct http_request *r = http_req(ex);
    char ns[ROUTE_NAME_MAX + 2] = "";
    struct e2b_front *fr = arg;
    struct federation *f = fr->d.fed;
    if (http_query_get(r, "namespace", ns, sizeof(ns)) != 0 || !ns[0] ||
        strlen(ns) > ROUTE_NAME_MAX) {
        http_respond_error(ex, 400, "query namespace is required (at most %d bytes)",
                           ROUTE_NAME_MAX);
        return;
    }
    struct envs_collect c = {ns, r->transport_data, federation_now_ms(), json_object()};
    if (f && c.map)
        fed_registry_each(federation_registry(f), envs_one, &c);
    size_t n = json_object_size(c.map), k = 0;
    const char **keys = n ? calloc(n, sizeof(*keys)) : NULL;
    const char *key;
    json_t *v, *arr = json_array();
    json_object_foreach(c.map, key, v)
    {
        if (keys)
            keys[k++] = key;
    }
    if (keys)
        qsort(keys, k, sizeof(*keys), cmp_key);
    for (size_t i = 0; arr && i < k; i++)
        json_array_append(arr, json_object_get(c.map, keys[i]));
    free(keys);
    json_decref(c.map);
    http_respond_json(ex, 200, json_pack("{s:o}", "envs", arr ? arr : json_array()));
}

/* --- wiring -------------------------------------------------------------------------------- */

struct e2b_front *e2b_front_new(const struct e2b_front_deps *d)
{
    static const front_fn fns[OP_COUNT] = {
        [OP_ID] = id_op,     [OP_METRICS] = metrics_op, [OP_CREATE] = create_op,
        [OP_LIST] = list_op, [OP_LIST_V2] = list_v2_op, [OP_TEMPLATES] = templates_op,
        [OP_ANY] = any_op,
    };
    struct e2b_front *fr = calloc(1, sizeof(*fr));
    if (!fr)
        return NULL;
    fr->d = *d;
    for (int i = 0; i < OP_COUNT; i++)
        fr->ops[i] = (struct front_route){fr, fns[i]};
    return fr;
}

void e2b_front_set_tunnel(struct e2b_front *fr, struct tunnel_server *ts)
{
    fr->tunnel = ts;
}

void e2b_front_free(struct e2b_front *fr)
{
    free(fr);
}

int e2b_front_add_routes(struct e2b_front *fr, struct hub *h, char *err, size_t errlen)
{
    /* the router picks the most specific pattern: the order below does not matter */
    const struct http_route routes[] = {
        {"POST", "/e2b/sandboxes", h_auth, &fr->ops[OP_CREATE], 0},
        {"POST", "/e2b/v2/sandboxes", h_auth, &fr->ops[OP_CREATE], 0},
        {"GET", "/e2b/sandboxes", h_auth, &fr->ops[OP_LIST], 0},
        {"GET", "/e2b/v2/sandboxes", h_auth, &fr->ops[OP_LIST_V2], 0},
        {"GET", "/e2b/sandboxes/metrics", h_auth, &fr->ops[OP_METRICS], 0},
        {"*", "/e2b/sandboxes/{id}", h_auth, &fr->ops[OP_ID], 0},
        {"*", "/e2b/sandboxes/{id}/{*rest}", h_auth, &fr->ops[OP_ID], 0},
        {"*", "/e2b/v2/sandboxes/{id}", h_auth, &fr->ops[OP_ID], 0},
        {"*", "/e2b/v2/sandboxes/{id}/{*rest}", h_auth, &fr->ops[OP_ID], 0},
        {"GET", "/e2b/templates", h_auth, &fr->ops[OP_TEMPLATES], 0},
        {"*", "/e2b/templates/{id}", h_auth, &fr->ops[OP_ANY], 0},
        {"*", "/e2b/{*rest}", h_auth, &fr->ops[OP_ANY], 0},
        {"*", "/data", h_data, fr, HTTP_ROUTE_STREAM},
        {"*", "/data/{*rest}", h_data, fr, HTTP_ROUTE_STREAM},
    };
    const struct http_route internal[] = {
        {"GET", "/internal/v1/federation/envs", h_envs, fr, 0},
    };
    int rc = hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
    if (rc == 0)
        rc = hub_add_internal_routes(h, internal, AB_ARRAY_LEN(internal), err, errlen);
    return rc;
}
