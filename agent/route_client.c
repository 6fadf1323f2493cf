/* The origin's side of the placement. See route_client.h. */
#include "agent/route_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/json.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/metrics.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agent/auth.h"
#include "agent/hub_link.h"
#include "agent/reporter.h"
#include "agent/runtime/runtime.h"

#define NAME_MAX_LEN 63
#define HUB_ANSWER_MAX 8192

struct fed_call {
    struct fed *f; /* NULL once fed_free let go of a call whose hub answer is still due */
    fed_route_fn done;
    void *arg;
    struct loop_timer timer; /* delivers a local decision on the next loop turn */
    struct fed_decision d;   /* what the timer delivers */
    bool hub_pending;        /* the hub link's callback still to come */
    bool finished;           /* done ran, or the call was dropped */
    char ns[NAME_MAX_LEN + 1], env[NAME_MAX_LEN + 1], group[NAME_MAX_LEN + 1];
    struct fed_call *prev, *next;
};

struct fed {
    struct fed_deps d;
    struct fed_reporter *reporter;
    struct fed_call *calls; /* in flight */
    struct http_route routes[1];
};

/* --- bookkeeping ------------------------------------------------------------------------ */

static void call_unlink(struct fed_call *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (c->f && c->f->calls == c)
        c->f->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
}

static void call_unlink_free(struct fed_call *c)
{
    call_unlink(c);
    free(c);
}

static void count(const struct fed_call *c)
{
    static const char *const labels[] = {"step", NULL};
    struct metric_family *m =
        metrics_register(metrics_default(), "agentbox_route_decisions_total",
                         "Bare-name placement decisions, by step of DESIGN section 6 (1..5).",
                         METRIC_COUNTER, labels, NULL, 0);
    char step[4];
    snprintf(step, sizeof(step), "%d", c->d.step);
    const char *lv[] = {step};
    metrics_add(m, lv, 1);
    const char *act = c->d.action == FED_FORWARD ? "forward"
                      : c->d.action == FED_QUEUE ? "queue"
                                                 : "local";
    LOG_DEBUG("route decision", "namespace", c->ns, "env", c->env, "group", c->group, "step", step,
              "action", act, "cluster", c->d.cluster, "pool", c->d.pool, "hub",
              c->d.from_hub ? "yes" : "no", "reason", c->d.reason);
}

static void finish(struct fed_call *c)
{
    if (!c->finished) {
        c->finished = true;
        count(c);
        c->done(&c->d, c->arg);
    }
    if (!c->hub_pending)
        call_unlink_free(c);
}

static void local_decision(struct fed_call *c, int step, const char *fmt, const char *detail)
{
    memset(&c->d, 0, sizeof(c->d));
    c->d.step = step;
    c->d.action = step == 5 ? FED_QUEUE : FED_LOCAL;
    ab_strlcpy(c->d.cluster, c->f->d.cluster, sizeof(c->d.cluster));
    snprintf(c->d.reason, sizeof(c->d.reason), fmt, detail);
}

/* A decision made here, delivered on the next loop turn (never inside fed_route). */
static void timer_fired(struct loop_timer *t)
{
    finish(t->arg);
}

/* --- the hub's answer -------------------------------------------------------------------- */

static bool parse_answer(struct fed_call *c, const struct tun_call_result *res, char *why,
                         size_t whylen)
{
    if (res->status != 200) {
        snprintf(why, whylen, "the hub answered %d", res->status);
        return false;
    }
    json_t *j = json_loadb(res->body, res->body_len, 0, NULL);
    const char *action = json_string_value(json_object_get(j, "action"));
    const char *cluster = json_string_value(json_object_get(j, "cluster"));
    const char *pool = json_string_value(json_object_get(j, "pool"));
    const char *reason = json_string_value(json_object_get(j, "reason"));
    json_int_t step = json_integer_value(json_object_get(j, "step"));
    bool ok = j && action && cluster && pool && step >= 1 && step <= 5 &&
              strlen(cluster) < sizeof(c->d.cluster) && strlen(pool) < sizeof(c->d.pool);
    if (ok && strcmp(action, "forward") == 0) {
        /* a forward must name another cluster and a pool, or it is no forward */
        const char *self = c->f->d.cluster;
        ok = cluster[0] && pool[0] && strcmp(cluster, self) != 0;
    } else if (ok) {
        ok = strcmp(action, "local") == 0 || strcmp(action, "queue") == 0;
    }
    if (!ok) {
        snprintf(why, whylen, "the hub's route answer is malformed");
        json_decref(j);
        return false;
    }
    memset(&c->d, 0, sizeof(c->d));
    c->d.step = (int)step;
    c->d.from_hub = true;
    c->d.idle = (int)json_integer_value(json_object_get(j, "idle"));
    ab_strlcpy(c->d.reason, reason ? reason : "", sizeof(c->d.reason));
    if (strcmp(action, "forward") == 0) {
        c->d.action = FED_FORWARD;
        ab_strlcpy(c->d.cluster, cluster, sizeof(c->d.cluster));
        ab_strlcpy(c->d.pool, pool, sizeof(c->d.pool));
    } else {
        c->d.action = strcmp(action, "queue") == 0 ? FED_QUEUE : FED_LOCAL;
        ab_strlcpy(c->d.cluster, c->f->d.cluster, sizeof(c->d.cluster));
    }
    json_decref(j);
    return true;
}

static void on_hub(const struct tun_call_result *res, void *arg)
{
    struct fed_call *c = arg;
    char why[128];
    c->hub_pending = false;
    if (c->finished) { /* dropped by fed_free */
        call_unlink_free(c);
        return;
    }
    if (!parse_answer(c, res, why, sizeof(why))) {
        if (res->status == 0)
            snprintf(why, sizeof(why), "the hub is unreachable (%.100s)",
                     res->error ? res->error : "no answer");
        local_decision(c, 5, "%s; queued locally", why);
        LOG_WARN("route decision fell back to local", "env", c->env, "reason", why);
    }
    finish(c);
}

/* --- fed_route ------------------------------------------------------------------------- */

struct idle_sum {
    const char *env, *group;
    int idle;
};

static void sum_idle(void *arg, const struct rt_pool *p)
{
    struct idle_sum *s = arg;
    if (strcmp(p->env, s->env) != 0 || (s->group[0] && strcmp(p->scaling_group, s->group) != 0))
        return;
    if (p->status.idle > 0 && s->idle < 1000000)
        s->idle += p->status.idle;
}

static bool name_ok(const char *s, bool may_be_empty)
{
    return s && (may_be_empty || s[0]) && strlen(s) <= NAME_MAX_LEN;
}

int fed_route(struct fed *f, const char *ns, const char *env, const char *group, fed_route_fn done,
              void *arg)
{
    if (!group)
        group = "";
    if (!f || !done || !name_ok(ns, false) || !name_ok(env, false) || !name_ok(group, true))
        return AB_EINVAL;
    struct fed_call *c = calloc(1, sizeof(*c));
    if (!c)
        return AB_ENOMEM;
    c->f = f;
    c->done = done;
    c->arg = arg;
    ab_strlcpy(c->ns, ns, sizeof(c->ns));
    ab_strlcpy(c->env, env, sizeof(c->env));
    ab_strlcpy(c->group, group, sizeof(c->group));
    c->next = f->calls;
    if (f->calls)
        f->calls->prev = c;
    f->calls = c;

    struct idle_sum s = {env, group, 0};
    if (f->d.rt)
        rt_list_pools(f->d.rt, ns, sum_idle, &s);
    struct tun_session *ts = hub_link_session(f->d.hub);
    if (s.idle > 0) {
        char n[16];
        snprintf(n, sizeof(n), "%d", s.idle);
        local_decision(c, 1, "this cluster has %s idle", n);
    } else if (!ts) {
        local_decision(c, 5, "%s; queued locally",
                       hub_link_configured(f->d.hub) ? "the tunnel to the hub is down"
                                                     : "no hub configured");
    } else {
        json_t *b = json_pack("{s:s,s:s,s:i}", "namespace", ns, "env", env, "localIdle", 0);
        if (b && group[0])
            json_object_set_new(b, "scalingGroup", json_string(group));
        char *body = b ? json_dumps(b, JSON_COMPACT) : NULL;
        json_decref(b);
        const struct tun_header h[] = {{"Content-Type", "application/json"}};
        /* the hub link answers at the deadline itself (status 0: fallback local) */
        int rc = body ? hub_link_call_within(f->d.hub, FED_ROUTE_TIMEOUT_MS, "POST",
                                             "/internal/v1/route", h, 1, body, strlen(body),
                                             HUB_ANSWER_MAX, on_hub, c)
                      : AB_ENOMEM;
        free(body);
        if (rc == 0) {
            c->hub_pending = true;
            return 0;
        }
        local_decision(c, 5, "cannot ask the hub (%s); queued locally", ab_strerror(rc));
    }
    loop_timer_start(f->d.loop, &c->timer, 0, timer_fired, c);
    return 0;
}

/* --- the diagnostic route ---------------------------------------------------------------- */

static void diag_done(const struct fed_decision *d, void *arg)
{
    struct http_exchange *ex = arg;
    const char *act = d->action == FED_FORWARD ? "forward"
                      : d->action == FED_QUEUE ? "queue"
                                               : "local";
    http_respond_json(ex, 200,
                      json_pack("{s:i,s:s,s:s,s:s,s:i,s:b,s:s}", "step", d->step, "action", act,
                                "cluster", d->cluster, "pool", d->pool, "idle", d->idle, "fromHub",
                                d->from_hub, "reason", d->reason));
}

static void diag_authed(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    struct fed *f = arg;
    const struct http_request *r = http_req(ex);
    char env[NAME_MAX_LEN + 2] = "", group[NAME_MAX_LEN + 2] = "", ns[NAME_MAX_LEN + 2] = "";
    if (http_query_get(r, "env", env, sizeof(env)) != 0 || !env[0] || strlen(env) > NAME_MAX_LEN) {
        http_respond_error(ex, 400, "query env is required: the bare env name (at most 63 bytes)");
        return;
    }
    if (http_query_get(r, "scalingGroup", group, sizeof(group)) == AB_ELIMIT ||
        http_query_get(r, "namespace", ns, sizeof(ns)) == AB_ELIMIT || strlen(ns) > NAME_MAX_LEN ||
        strlen(group) > NAME_MAX_LEN) {
        http_respond_error(ex, 400, "query scalingGroup and namespace are at most 63 bytes");
        return;
    }
    if (ns[0] && strcmp(ns, p->namespace) != 0 && !p->admin) {
        http_respond_error(ex, 403, "namespace '%s' is not yours: your key routes in '%s'", ns,
                           p->namespace);
        return;
    }
    if (fed_route(f, ns[0] ? ns : p->namespace, env, group, diag_done, ex) != 0)
        http_respond_error(ex, 400, "env, scalingGroup and namespace must be 1..63 bytes");
}

static void h_diag(struct http_exchange *ex, void *arg)
{
    struct fed *f = arg;
    agent_auth_request(f->d.auth, ex, diag_authed, f);
}

int fed_new(const struct fed_deps *deps, struct fed **out, char *err, size_t errlen)
{
    struct fed *f = calloc(1, sizeof(*f));
    int rc;

    *out = NULL;
    if (!f) {
        snprintf(err, errlen, "out of memory starting the placement");
        return AB_ENOMEM;
    }
    f->d = *deps;
    f->routes[0] = (struct http_route){"GET", "/v1/federation/route", h_diag, f, 0};
    struct fed_reporter_deps rd = {.loop = deps->loop, .rt = deps->rt, .hub = deps->hub};
    if ((rc = fed_reporter_start(&rd, &f->reporter, err, errlen)) != 0) {
        free(f);
        return rc;
    }
    *out = f;
    return 0;
}

const struct http_route *fed_routes(const struct fed *f, size_t *n)
{
    *n = AB_ARRAY_LEN(f->routes);
    return f->routes;
}

void fed_free(struct fed *f)
{
    if (!f)
        return;
    fed_reporter_stop(f->reporter);
    for (struct fed_call *c = f->calls, *next; c; c = next) {
        next = c->next;
        loop_timer_cancel(&c->timer);
        c->finished = true;
        if (!c->hub_pending) {
            call_unlink_free(c);
        } else {
            /* tun_call's callback frees it (the session's end delivers it), after f is gone */
            call_unlink(c);
            c->f = NULL;
        }
    }
    free(f);
}
