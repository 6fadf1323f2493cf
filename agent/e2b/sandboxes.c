/* Sandboxes after create (reference §2.2): list, paginated list with
 * filters, get, kill, timeout, refreshes, connect, live network update.
 * Every call is scoped to the caller (namespace + team + user): another
 * principal's sandbox is 404, exactly like one that never existed. An id of
 * another cluster goes to that cluster through the hub (e2b_lookup). */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/runtime/runtime.h"

#include "agentbox/pagetoken.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/json.h"
#include "agentbox/pct.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_MAX 4096 /* sandboxes one principal can list */
#define MD_FILTER_MAX 32

struct collect {
    const struct agent_principal *p;
    struct rt_sandbox *v;
    size_t n, cap;
    bool oom;
};

static void collect_cb(void *arg, const struct rt_sandbox *s)
{
    struct collect *c = arg;
    if (c->n >= LIST_MAX || !e2b_owns(c->p, s) || s->state == RT_STOPPING || s->state == RT_IDLE)
        return;
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        struct rt_sandbox *nv = realloc(c->v, cap * sizeof(*nv));
        if (!nv) {
            c->oom = true;
            return;
        }
        c->v = nv;
        c->cap = cap;
    }
    c->v[c->n] = *s;
    c->v[c->n].metadata = s->metadata ? json_incref(s->metadata) : NULL;
    c->n++;
}

static int by_start(const void *a, const void *b)
{
    const struct rt_sandbox *x = a, *y = b;
    if (x->claimed_ms != y->claimed_ms)
        return x->claimed_ms < y->claimed_ms ? -1 : 1;
    return strcmp(x->id, y->id);
}

static void collect_free(struct collect *c)
{
    for (size_t i = 0; i < c->n; i++)
        json_decref(c->v[i].metadata);
    free(c->v);
}

/* The caller's live sandboxes, oldest first (a stable order for pagination). */
static int collect(struct e2b *e, const struct agent_principal *p, struct collect *c)
{
    struct rt *rt = e2b_rt(e);
    struct rt_filter f = {.ns = p->namespace, .team = p->team};
    memset(c, 0, sizeof(*c));
    c->p = p;
    if (!rt)
        return 0;
    rt_list(rt, &f, collect_cb, c);
    if (c->oom) {
        collect_free(c);
        return AB_ENOMEM;
    }
    if (c->n > 1)
        qsort(c->v, c->n, sizeof(*c->v), by_start);
    return 0;
}

struct md_pair {
    char k[256];
    char v[1024];
};

/* "k=v&k2=v2" (each part URL-encoded once more by the SDK) → pairs. Refuses,
 * naming the pair in err: a part without '=', more than MD_FILTER_MAX pairs,
 * a key or value that does not fit, and any escape pct.h refuses ("%00"
 * would cut the key or value short and match another one). */
static int parse_md_filter(const char *q, struct md_pair *pairs, size_t *n, char *err,
                           size_t errlen)
{
    *n = 0;
    while (*q) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        const char *eq = memchr(q, '=', len);
        int rc;
        if (!eq || eq == q) {
            snprintf(err, errlen, "pair %zu is not k=v", *n + 1);
            return AB_EINVAL;
        }
        if (*n >= MD_FILTER_MAX) {
            snprintf(err, errlen, "more than %d pairs", MD_FILTER_MAX);
            return AB_EINVAL;
        }
        struct md_pair *m = &pairs[(*n)++];
        rc = pct_decode(q, (size_t)(eq - q), m->k, sizeof(m->k), PCT_PLUS_IS_SPACE, NULL);
        if (rc != 0) {
            snprintf(err, errlen, "the key of pair %zu is %s", *n,
                     rc == AB_ELIMIT ? "longer than 255 bytes"
                                     : "not validly percent-encoded (or holds %00)");
            return rc;
        }
        rc = pct_decode(eq + 1, len - (size_t)(eq - q) - 1, m->v, sizeof(m->v), PCT_PLUS_IS_SPACE,
                        NULL);
        if (rc != 0) {
            snprintf(err, errlen, "the value of \"%.64s\" is %s", m->k,
                     rc == AB_ELIMIT ? "longer than 1023 bytes"
                                     : "not validly percent-encoded (or holds %00)");
            return rc;
        }
        q += len;
        if (*q == '&')
            q++;
    }
    return 0;
}

static bool md_match(const struct rt_sandbox *s, const struct md_pair *pairs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = json_string_value(json_object_get(s->metadata, pairs[i].k));
        if (!v || strcmp(v, pairs[i].v) != 0)
            return false;
    }
    return true;
}

/* The metadata query parameter of both lists into pairs; false after
 * answering 400. */
static bool md_filter(struct http_exchange *ex, struct md_pair *pairs, size_t *npairs)
{
    char q[8192], why[160];
    int rc = http_query_get(http_req(ex), "metadata", q, sizeof(q));

    *npairs = 0;
    if (rc == AB_ELIMIT) {
        http_respond_error(ex, 400,
                           "invalid metadata filter: the metadata parameter is longer than %zu "
                           "bytes or not validly percent-encoded; pass metadata=<url-encoded "
                           "k=v&k2=v2> (at most %d pairs)",
                           sizeof(q) - 1, MD_FILTER_MAX);
        return false;
    }
    if (rc == 0 && parse_md_filter(q, pairs, npairs, why, sizeof(why)) != 0) {
        http_respond_error(ex, 400,
                           "invalid metadata filter: %s; pass metadata=<url-encoded k=v&k2=v2> "
                           "(at most %d pairs)",
                           why, MD_FILTER_MAX);
        return false;
    }
    return true;
}

/* GET /sandboxes (the 1.x SDK's list): every running one of the caller's,
 * on every cluster (e2b_hub_list), metadata filter honoured as in
 * /v2/sandboxes. */
static void list_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct md_pair *pairs = calloc(MD_FILTER_MAX, sizeof(*pairs));
    size_t npairs = 0;
    struct collect c;

    if (!pairs) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    if (!md_filter(ex, pairs, &npairs) || e2b_hub_list(e, ex, p))
        goto out;
    if (collect(e, p, &c) != 0) {
        http_respond_error(ex, 503, "out of memory while listing sandboxes");
        goto out;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < c.n; i++)
        if (md_match(&c.v[i], pairs, npairs))
            json_array_append_new(arr, e2b_detail_json(e, &c.v[i], false));
    collect_free(&c);
    http_respond_json(ex, 200, arr);
out:
    free(pairs);
}

static void list_v2_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    const struct http_request *r = http_req(ex);
    char state[256], tmpl[256], lim[32], tok[64];
    struct md_pair *pairs = NULL;
    size_t npairs = 0;
    int64_t limit = 0, offset = 0;
    bool running = true;
    struct collect c;

    pairs = calloc(MD_FILTER_MAX, sizeof(*pairs));
    if (!pairs) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    if (!md_filter(ex, pairs, &npairs))
        goto out;
    if (http_query_get(r, "state", state, sizeof(state)) == 0 && state[0]) {
        /* only running exists here; a filter without it matches nothing */
        running = false;
        for (char *s = strtok(state, ","); s; s = strtok(NULL, ","))
            if (strcmp(s, "running") == 0)
                running = true;
    }
    if (http_query_get(r, "template", tmpl, sizeof(tmpl)) != 0)
        tmpl[0] = '\0';
    if (http_query_get(r, "limit", lim, sizeof(lim)) == 0 && lim[0]) {
        char *end = NULL;
        long long l = strtoll(lim, &end, 10);
        if (!end || *end || l < 0 || l > 1000000) {
            http_respond_error(ex, 400, "limit must be a non-negative integer");
            goto out;
        }
        limit = l;
    }
    if (http_query_get(r, "nextToken", tok, sizeof(tok)) == 0)
        offset = pagetoken_decode(tok);
    if (e2b_hub_list(e, ex, p)) /* every cluster's, paged by the hub */
        goto out;
    if (collect(e, p, &c) != 0) {
        http_respond_error(ex, 503, "out of memory while listing sandboxes");
        goto out;
    }
    json_t *arr = json_array();
    int64_t total = 0, shown = 0;
    bool more = false;
    for (size_t i = 0; running && i < c.n; i++) {
        const struct rt_sandbox *s = &c.v[i];
        if (!md_match(s, pairs, npairs))
            continue;
        if (tmpl[0] && strcmp(tmpl, s->pool) != 0 && strcmp(tmpl, s->env) != 0)
            continue;
        total++;
        if (total <= offset)
            continue;
        if (limit > 0 && shown >= limit) {
            more = true;
            continue;
        }
        json_array_append_new(arr, e2b_detail_json(e, s, false));
        shown++;
    }
    collect_free(&c);
    char next[64] = "", tot[32];
    if (more)
        pagetoken_encode(offset + shown, next);
    snprintf(tot, sizeof(tot), "%lld", (long long)total);
    char *body = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    struct http_header h[2] = {{"X-Total-Running", tot}, {"X-Next-Token", next}};
    http_respond(ex, 200, "application/json", body ? body : "[]", body ? strlen(body) : 2, h,
                 more ? 2 : 1);
    free(body);
out:
    free(pairs);
}

static void get_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct rt_sandbox s;
    if (!e2b_lookup(e, ex, p, &s))
        return;
    http_respond_json(ex, 200, e2b_detail_json(e, &s, true));
    json_decref(s.metadata);
}

/* A kill in flight: answered once the sandbox's processes are gone. */
struct kill_ctx {
    struct e2b *e;
    struct http_exchange *ex;
    struct rt_sandbox s; /* metadata owned */
};

static void kill_done(void *arg, int err, const char *msg)
{
    struct kill_ctx *k = arg;

    if (err != AB_ECLOSED)
        e2b_event(k->e, "released", &k->s, "killed"); /* released, even if processes linger */
    if (err == 0)
        http_respond(k->ex, 204, NULL, NULL, 0, NULL, 0);
    else
        http_respond_error(k->ex, err == AB_ECLOSED ? 503 : 500, "%s",
                           msg ? msg : ab_strerror(err));
    json_decref(k->s.metadata);
    free(k);
}

static void kill_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct kill_ctx *k = calloc(1, sizeof(*k));

    if (!k) {
        http_respond_error(ex, 500, "out of memory");
        return;
    }
    if (!e2b_lookup(e, ex, p, &k->s)) {
        free(k);
        return;
    }
    k->e = e;
    k->ex = ex;
    if (rt_release_wait(e2b_rt(e), k->s.id, RT_RELEASE_WAIT_MS, kill_done, k) != 0) {
        http_respond_error(ex, 404, "sandbox \"%s\" not found", k->s.id);
        json_decref(k->s.metadata);
        free(k);
    }
}

/* timeout: validated before anything else, forwarding included (reference §2.2). */
static void timeout_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct rt_sandbox s;
    int64_t t = 0;
    char err[256];
    json_t *b = e2b_body(ex, true);
    if (!b)
        return;
    json_t *v = json_object_get(b, "timeout");
    if (!json_is_integer(v) || (t = json_integer_value(v)) <= 0 || t > 366LL * 24 * 3600) {
        json_decref(b);
        http_respond_error(ex, 400, "timeout must be a positive integer number of seconds");
        return;
    }
    json_decref(b);
    (void)err;
    if (!e2b_lookup(e, ex, p, &s))
        return;
    if (rt_set_timeout(e2b_rt(e), s.id, t) != 0)
        http_respond_error(ex, 404, "sandbox \"%s\" not found", s.id);
    else
        http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
    json_decref(s.metadata);
}

static void refreshes_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct rt_sandbox s;
    json_t *b = e2b_body(ex, true);
    if (!b)
        return;
    json_t *v = json_object_get(b, "duration");
    int64_t d = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(b);
    if (!e2b_lookup(e, ex, p, &s))
        return;
    if (d > 0 && d <= 366LL * 24 * 3600 && rt_set_timeout(e2b_rt(e), s.id, d) != 0)
        http_respond_error(ex, 404, "sandbox \"%s\" not found", s.id);
    else
        http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
    json_decref(s.metadata);
}

static void connect_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct rt_sandbox s;
    json_t *b = e2b_body(ex, true);
    if (!b)
        return;
    json_t *v = json_object_get(b, "timeout");
    int64_t t = json_is_integer(v) ? json_integer_value(v) : 0;
    json_decref(b);
    if (!e2b_lookup(e, ex, p, &s))
        return;
    /* a connect is its owner coming back: activity, like its envd traffic
     * (reading the sandbox's info or list is not) */
    rt_touch(e2b_rt(e), s.id);
    if (t > 0 && t <= 366LL * 24 * 3600 && rt_set_timeout(e2b_rt(e), s.id, t) != 0)
        http_respond_error(ex, 404, "sandbox \"%s\" not found", s.id);
    else
        http_respond_json(ex, 200, e2b_sandbox_json(e, &s));
    json_decref(s.metadata);
}

/* PUT /sandboxes/{id}/network: the body is the sandbox's whole new egress
 * policy (allowOut, denyOut, ...; allow_internet_access absent keeps the
 * current switch), judged as a create's. Open connections keep going. */
static void network_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    struct rt_sandbox s;
    char err[1024];
    json_t *b = e2b_body(ex, true);
    if (!b)
        return;
    if (!e2b_lookup(e, ex, p, &s)) {
        json_decref(b);
        return;
    }
    json_t *inet = json_object_get(b, "allow_internet_access");
    int rc = 0;
    if (inet && !json_is_null(inet) && !json_is_boolean(inet)) {
        snprintf(err, sizeof(err), "allow_internet_access must be a boolean");
        rc = AB_EINVAL;
    }
    bool internet = inet && json_is_boolean(inet) ? json_is_true(inet) : s.internet;
    if (rc == 0)
        rc = e2b_refuse_network(e, b, internet, true, err, sizeof(err));
    if (rc == 0 && rt_has(e2b_rt(e), RT_CAP_NETWORK_UPDATE)) {
        json_t *net = json_deep_copy(b);
        if (net)
            json_object_del(net, "allow_internet_access");
        rc = net ? rt_set_network(e2b_rt(e), s.id, net, internet, err, sizeof(err)) : AB_ENOMEM;
        if (rc == AB_ENOENT)
            snprintf(err, sizeof(err), "sandbox \"%s\" not found", s.id);
        else if (rc == AB_ENOMEM)
            snprintf(err, sizeof(err), "out of memory");
        json_decref(net);
    } else if (rc == 0 && inet && json_is_boolean(inet) && json_is_true(inet) != s.internet) {
        snprintf(err, sizeof(err),
                 "allow_internet_access cannot change on a running sandbox of the %s runtime: "
                 "create a new sandbox with allow_internet_access=%s",
                 e2b_runtime_kind(e), json_is_true(inet) ? "true" : "false");
        rc = AB_EINVAL;
    }
    if (rc != 0)
        http_respond_error(ex, rc == AB_ENOENT ? 404 : rc == AB_ENOMEM ? 503 : 400, "%s", err);
    else
        http_respond(ex, 204, NULL, NULL, 0, NULL, 0);
    json_decref(s.metadata);
    json_decref(b);
}

int e2b_sandbox_routes(struct e2b *e, char *err, size_t errlen)
{
    static const struct {
        const char *method, *pattern;
        e2b_fn fn;
    } t[] = {
        {"GET", "/sandboxes", list_op},
        {"GET", "/v2/sandboxes", list_v2_op},
        {"GET", "/sandboxes/{id}", get_op},
        {"DELETE", "/sandboxes/{id}", kill_op},
        {"POST", "/sandboxes/{id}/timeout", timeout_op},
        {"POST", "/sandboxes/{id}/refreshes", refreshes_op},
        {"POST", "/sandboxes/{id}/connect", connect_op},
        {"POST", "/v2/sandboxes/{id}/connect", connect_op},
        {"PUT", "/sandboxes/{id}/network", network_op},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(t); i++) {
        int rc = e2b_route(e, t[i].method, t[i].pattern, t[i].fn, 0, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}
