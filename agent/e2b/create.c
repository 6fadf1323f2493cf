/* POST /sandboxes and POST /v2/sandboxes (reference §2.3, e2b-protocol §1.5),
 * the E2B surface of agent/claim.h's orchestration.
 *
 * Order: templateID → the 400 list (refusals.c) → field types → reserved
 * metadata (consumed and removed) → where the reference goes (claim_where):
 * a prefix naming another cluster is forwarded verbatim through the hub; a
 * bare name asks the placement (claim_place: local idle → here; else the hub
 * may pick another cluster, and the create goes there rewritten as
 * `cluster::pool[//image]`, one hop, claim_forward) → an image override is
 * refused unless the runtime can (claim_image_ok) → claim (claim_start).
 * The answer (201, the Sandbox shape; errors by claim_status(CLAIM_E2B, …))
 * waits until the runtime armed the sandbox (envd /init took the token and
 * env vars) unless agentbox.scitix.ai/no-wait is "true". */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/claim.h"
#include "agent/egress/secrets.h"
#include "agent/egress/table.h"
#include "agent/hub_link.h"
#include "agent/route_client.h"
#include "agent/runtime/runtime.h"
#include "agent/secret_resolve.h"

#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/loop.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"
#include "agentbox/ref.h"
#include "agentbox/sbxid.h"
#include "agentbox/trace.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MD_PREFIX "agentbox.scitix.ai/"
#define MAX_TIMEOUT_S (366LL * 24 * 3600)

struct create {
    struct e2b *e;
    struct http_exchange *ex; /* NULL once answered (no-wait) */
    int64_t t0_us;
    char id[SBXID_MAX + 1];
    char ns[RT_NAME_MAX + 1];
    char name[RT_NAME_MAX + 1];
    char group[RT_NAME_MAX + 1];
    char team[RT_NAME_MAX + 1];
    char user[RT_NAME_MAX + 1];
    /* network.rules' secrets: resolved from the hub's vault once the sandbox
     * is armed (the hub answers for a claim it has recorded), with the
     * principal's assertion; the create answers after that */
    size_t n_names;
    char names[SECRET_RESOLVE_NAMES_MAX][EGRESS_SECRET_NAME_MAX + 1];
    char assertion[ASRT_TOKEN_MAX + 1];
    json_t *answer; /* the 201 body, kept while the secrets are resolved */
    struct egress_secrets *secrets;
    int tries;
    struct loop_timer retry;
};

#define RESOLVE_TRIES 40     /* the hub may not have recorded the claim yet ... */
#define RESOLVE_RETRY_MS 250 /* ... so a "no live claim" is asked again, for 10 s */

static void count(struct e2b *e, const char *result)
{
    const char *l[] = {result};
    metrics_add(e->m_creates, l, 1);
}

static int status_of(int err)
{
    return claim_status(CLAIM_E2B, err);
}

static struct claim_deps deps_of(struct e2b *e)
{
    return (struct claim_deps){e->d.rt, e->d.fed, e->d.hub, e->cluster};
}

static void create_free(struct create *c)
{
    json_decref(c->answer);
    egress_secrets_free(c->secrets);
    free(c);
}

static void resolve_start(struct create *c);

/* The secrets could not be had: the sandbox goes (its requests would be
 * refused without them) and the create says why, naming the secret. */
static void resolve_failed(struct create *c, int rc, const char *why)
{
    struct e2b *e = c->e;
    count(e, "failed");
    LOG_WARN("e2b create: secrets not resolved", "sandbox", c->id, "error", why);
    rt_release(e2b_rt(e), c->id);
    e2b_event_ids(e, "failed", c->id, c->ns, c->name, "", c->team, c->user, NULL, why, NULL);
    if (c->ex)
        http_respond_error(c->ex,
                           rc == AB_ENOENT || rc == AB_EINVAL ? 400
                           : rc == AB_EDENIED                 ? 403
                                                              : 503,
                           "sandbox %s could not be started: %s", c->id, why);
    create_free(c);
}

static void resolve_retry(struct loop_timer *t)
{
    resolve_start(t->arg);
}

static void resolved(int rc, struct egress_secrets *s, const char *err, void *arg)
{
    struct create *c = arg;
    struct e2b *e = c->e;
    (void)s;
    if (rc == AB_EDENIED && err && strstr(err, "no live claim") && ++c->tries < RESOLVE_TRIES) {
        loop_timer_start(e2b_loop(e), &c->retry, RESOLVE_RETRY_MS, resolve_retry, c);
        return;
    }
    if (rc != 0) {
        resolve_failed(c, rc, err ? err : ab_strerror(rc));
        return;
    }
    /* the values live only in the gateway's table, for this sandbox */
    struct egress_secrets *mine = c->secrets;
    c->secrets = NULL;
    if (!e->d.egress_table || egress_table_set_secrets(e->d.egress_table, c->id, mine) != 0) {
        resolve_failed(c, AB_EIO, "the sandbox's egress record is gone");
        return;
    }
    count(e, "armed");
    metrics_observe(e->m_create_seconds, NULL, (double)(ab_now_us() - c->t0_us) / 1e6);
    if (c->ex) {
        http_respond_json(c->ex, 201, c->answer);
        c->answer = NULL;
    }
    create_free(c);
}

static void resolve_start(struct create *c)
{
    char err[SECRET_RESOLVE_ERR_MAX];
    egress_secrets_free(c->secrets);
    c->secrets = egress_secrets_new();
    int rc = c->secrets ? secret_resolve(e2b_hub(c->e), c->id, c->assertion,
                                         (const char(*)[EGRESS_SECRET_NAME_MAX + 1]) c->names,
                                         c->n_names, c->secrets, resolved, c, err, sizeof(err))
                        : AB_ENOMEM;
    if (rc != 0)
        resolve_failed(c, rc, rc == AB_ENOMEM ? "out of memory" : err);
}

static void claimed(void *arg, int err, const char *msg, const struct rt_sandbox *s)
{
    struct create *c = arg;
    struct e2b *e = c->e;

    if (err == 0 && c->n_names > 0) {
        /* the row's metadata keeps the names the vault may resolve (an event's
         * metadata replaces the row's) */
        json_t *md = json_deep_copy(s->metadata ? s->metadata : NULL);
        if (!md)
            md = json_object();
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < c->n_names; i++)
            json_array_append_new(arr, json_string(c->names[i]));
        json_object_set_new(md, MD_PREFIX "secret-names", arr);
        e2b_event_ids(e, "armed", s->id, s->ns, s->env, s->pool, s->team, s->owner, md, NULL, NULL);
        json_decref(md);
        c->answer = e2b_sandbox_json(e, s);
        resolve_start(c);
        return;
    }
    if (err == 0) {
        count(e, "armed");
        metrics_observe(e->m_create_seconds, NULL, (double)(ab_now_us() - c->t0_us) / 1e6);
        e2b_event(e, "armed", s, NULL);
        if (c->ex)
            http_respond_json(c->ex, 201, e2b_sandbox_json(e, s));
    } else {
        count(e, "failed");
        LOG_WARN("e2b create failed", "sandbox", c->id, "env", c->name, "error",
                 msg ? msg : ab_strerror(err));
        e2b_event_ids(e, "failed", c->id, c->ns, c->name, "", c->team, c->user, NULL,
                      msg ? msg : ab_strerror(err), NULL);
        if (c->ex)
            http_respond_error(c->ex, status_of(err), "sandbox %s could not be started: %s", c->id,
                               msg ? msg : ab_strerror(err));
    }
    create_free(c);
}

static bool env_exists(struct rt *rt, const char *ns, const char *name);

struct env_find {
    const char *name;
    bool found;
    bool here; /* with a member pool on this cluster */
};

static void env_cb(void *arg, const struct rt_env *en)
{
    struct env_find *f = arg;
    if (strcmp(en->name, f->name) == 0) {
        f->found = true;
        f->here = f->here || en->npools > 0;
    }
}

static bool env_exists(struct rt *rt, const char *ns, const char *name)
{
    struct env_find f = {name, false, false};
    rt_list_envs(rt, ns, env_cb, &f);
    return f.found;
}

/* An env of this cluster: the manifests also hold envs whose members are
 * all on other clusters. */
static bool env_here(struct rt *rt, const char *ns, const char *name)
{
    struct env_find f = {name, false, false};
    rt_list_envs(rt, ns, env_cb, &f);
    return f.here;
}

/* Takes the reserved keys out of md (a copy the caller owns). */
struct reserved {
    char image[REF_MAX];
    int64_t startup_ms;
    char group[RT_NAME_MAX + 1];
    bool no_wait;
    bool private_networks;
    const json_t *network; /* the body's network object (borrowed: the body outlives the claim's
                              start), already accepted by e2b_refuse_create */
};

static int take_reserved(json_t *md, struct reserved *r, char *err, size_t errlen)
{
    const char *v;
    json_t *j;

    memset(r, 0, sizeof(*r));
    if ((j = json_object_get(md, MD_PREFIX "image")) && (v = json_string_value(j)))
        ab_strlcpy(r->image, v, sizeof(r->image));
    if ((j = json_object_get(md, MD_PREFIX "startup-timeout")) && (v = json_string_value(j))) {
        char *end = NULL;
        long long s = strtoll(v, &end, 10);
        if (end && *end == '\0' && s > 0 && s <= 3600)
            r->startup_ms = s * 1000; /* not a positive integer: ignored (reference §2.3) */
    }
    if ((j = json_object_get(md, MD_PREFIX "scaling-group")) && (v = json_string_value(j))) {
        if (strlen(v) > RT_NAME_MAX) {
            snprintf(err, errlen,
                     "metadata '" MD_PREFIX "scaling-group' is longer than %d "
                     "characters",
                     RT_NAME_MAX);
            return AB_EINVAL;
        }
        ab_strlcpy(r->group, v, sizeof(r->group));
    }
    if ((j = json_object_get(md, MD_PREFIX "no-wait")) && (v = json_string_value(j)))
        r->no_wait = strcmp(v, "true") == 0;
    if ((j = json_object_get(md, MD_PREFIX "allow-private-networks")) && (v = json_string_value(j)))
        r->private_networks = strcmp(v, "true") == 0;
    /* secret-names is the hub's claim record of the names a sandbox may resolve
     * (hub/vault_api.c): only the agent writes it, never the caller */
    static const char *const keys[] = {"image",   "startup-timeout",        "scaling-group",
                                       "no-wait", "allow-private-networks", "secret-names"};
    for (size_t i = 0; i < AB_ARRAY_LEN(keys); i++) {
        char k[64];
        snprintf(k, sizeof(k), MD_PREFIX "%s", keys[i]);
        json_object_del(md, k);
    }
    return 0;
}

static int check_strings(json_t *obj, const char *what, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    if (!json_is_object(obj)) {
        snprintf(err, errlen, "%s must be an object of string values", what);
        return AB_EINVAL;
    }
    json_object_foreach(obj, k, v)
    {
        if (!json_is_string(v)) {
            snprintf(err, errlen, "%s[\"%.64s\"] must be a string", what, k);
            return AB_EINVAL;
        }
    }
    return 0;
}

/* --- unknown secret names (reference §5.5) ----------------------------------------------- */

#define RULE_SECRETS_MAX 32

struct secret_check {
    struct e2b *e;
    struct http_exchange *ex;
    char names[RULE_SECRETS_MAX][E2B_SECRET_NAME_MAX + 1];
    size_t n;
    char refusal[1024];       /* the fail-closed answer when every name exists ("": go on) */
    struct agent_principal p; /* for going on with the create */
};

static void create_body(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                        bool names_checked);

static void secrets_listed(const struct tun_call_result *res, void *arg)
{
    struct secret_check *c = arg;
    json_t *arr = res->status == 200 ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;

    if (json_is_array(arr)) {
        for (size_t i = 0; i < c->n; i++) {
            bool found = false;
            size_t k;
            json_t *s;
            json_array_foreach(arr, k, s)
            {
                const char *nm = json_string_value(json_object_get(s, "name"));
                if (nm && strcmp(nm, c->names[i]) == 0)
                    found = true;
            }
            if (found)
                continue;
            char have[1024] = "";
            size_t off = 0;
            json_array_foreach(arr, k, s)
            {
                const char *nm = json_string_value(json_object_get(s, "name"));
                if (!nm || k >= 20 || off >= sizeof(have) - 1)
                    continue;
                off += (size_t)snprintf(have + off, sizeof(have) - off, "%s%s", k ? ", " : "", nm);
            }
            if (json_array_size(arr) == 0)
                http_respond_error(c->ex, 400,
                                   "unknown secret \"%s\": this user has no secrets yet; create "
                                   "it with POST /secrets",
                                   c->names[i]);
            else
                http_respond_error(c->ex, 400,
                                   "unknown secret \"%s\". Existing secrets: %s%s; create it with "
                                   "POST /secrets",
                                   c->names[i], have, json_array_size(arr) > 20 ? ", …" : "");
            json_decref(arr);
            free(c);
            return;
        }
    }
    bool listed = json_is_array(arr);
    json_decref(arr);
    if (listed && !c->refusal[0]) /* every name exists: the create goes on */
        create_body(c->e, c->ex, &c->p, true);
    else if (!c->refusal[0])
        http_respond_error(c->ex, 503,
                           "the hub's vault could not list this user's secrets to check the names "
                           "network.rules reference; retry");
    else
        http_respond_error(c->ex, 400, "%s", c->refusal);
    free(c);
}

/* When the rules name secrets and the hub is there to ask, checks the names
 * before refusing (an unknown name is the more useful answer). Returns true
 * when it took over answering ex. */
static bool check_secrets(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                          json_t *net, const char *refusal)
{
    struct secret_check *c;

    if (!hub_link_configured(e2b_hub(e)) || !(c = calloc(1, sizeof(*c))))
        return false;
    c->n = e2b_rule_secrets(net, c->names, RULE_SECRETS_MAX);
    if (c->n == 0) {
        free(c);
        return false;
    }
    c->e = e;
    c->ex = ex;
    c->p = *p;
    ab_strlcpy(c->refusal, refusal ? refusal : "", sizeof(c->refusal));
    /* the vault is asked with the caller's assertion: the raw key stays on this agent */
    if (e2b_hub_public_call(e, p, "GET", "/e2b/secrets?limit=1000", NULL, 0, 4 * 1024 * 1024,
                            secrets_listed, c) != 0) {
        free(c);
        return false;
    }
    return true;
}

/* Claims on this cluster: the explicit `<this cluster>::x`, and a bare name
 * that the placement kept here (steps 1, 3, 5 and every fallback). md is
 * borrowed (the claim copies what it keeps); envs is borrowed from the body. */
static void claim_local(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                        const struct ref *rf, struct reserved *rs, json_t *md, json_t *envs,
                        int64_t timeout, bool internet)
{
    char err[1024];
    struct rt *rt = e2b_rt(e);
    struct claim_deps d = deps_of(e);
    struct create *c = NULL;
    const struct ref ref = *rf;
    struct reserved res = *rs;
    int rc;

    if (res.image[0] == '\0')
        ab_strlcpy(res.image, ref.image, sizeof(res.image));
    if (res.image[0] && !claim_image_ok(rt)) {
        count(e, "refused");
        http_respond_error(ex, 400,
                           "image overrides need the kube runtime: cluster '%s' runs the %s "
                           "runtime, where a sandbox runs its env's own image; drop '//%.200s' "
                           "(or the " MD_PREFIX "image metadata) or create on a cluster running "
                           "--runtime kube",
                           e->cluster, e2b_runtime_kind(e), res.image);
        return;
    }
    if (!rt) {
        http_respond_error(ex, 503, "no sandbox runtime is running on cluster '%s'", e->cluster);
        return;
    }
    if (strlen(ref.name) > RT_NAME_MAX) {
        http_respond_error(ex, 400, "templateID name is longer than %d characters", RT_NAME_MAX);
        return;
    }
    if (!(c = calloc(1, sizeof(*c)))) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    c->e = e;
    c->ex = ex;
    c->t0_us = ab_now_us();
    ab_strlcpy(c->ns, p->namespace, sizeof(c->ns));
    ab_strlcpy(c->name, ref.name, sizeof(c->name));
    ab_strlcpy(c->group, res.group, sizeof(c->group));
    ab_strlcpy(c->team, p->team, sizeof(c->team));
    ab_strlcpy(c->user, p->user, sizeof(c->user));
    claim_new_id(&d, c->id, sizeof(c->id));
    if (res.network) {
        char names[SECRET_RESOLVE_NAMES_MAX + 1][E2B_SECRET_NAME_MAX + 1];
        size_t n = e2b_rule_secrets((json_t *)res.network, names, SECRET_RESOLVE_NAMES_MAX + 1);
        if (n > SECRET_RESOLVE_NAMES_MAX) {
            http_respond_error(ex, 400, "network.rules reference more than %d secrets",
                               SECRET_RESOLVE_NAMES_MAX);
            free(c);
            return;
        }
        for (size_t i = 0; i < n; i++)
            ab_strlcpy(c->names[i], names[i], sizeof(c->names[i]));
        c->n_names = n;
        ab_strlcpy(c->assertion, p->assertion, sizeof(c->assertion));
    }

    struct claim_request req = {
        .ns = p->namespace,
        .name = ref.name,
        .group = res.group,
        /* cluster::name is an env first, then a pool (reference §1.8); a bare name an env */
        .target = ref.cluster[0] ? RT_TARGET_ENV_OR_POOL : RT_TARGET_ENV,
    };
    /* no access_token: the runtime arms the sandbox with its own random one */
    req.o = (struct rt_claim_options){
        .id = c->id,
        .timeout_s = timeout,
        .timeout_is_idle = true, /* E2B's timeout is the idle timeout (DESIGN §7) */
        .startup_timeout_ms = res.startup_ms,
        .env_vars = envs,
        .metadata = md,
        .allow_internet = internet,
        .network = res.network,
        .allow_private_networks = res.private_networks,
        .team = p->team,
        .owner = p->user,
        .image = res.image[0] ? res.image : NULL,
        .trace = http_header_get(http_req(ex), AB_TRACE_HEADER),
    };
    rc = claim_start(&d, &req, claimed, c, err, sizeof(err));
    if (rc != 0) {
        int status = status_of(rc);
        count(e, "failed");
        if (rc == AB_ENOENT && res.group[0] && env_exists(rt, p->namespace, ref.name)) {
            http_respond_error(ex, 503,
                               "sandbox env %s/%s has no eligible members in scaling group "
                               "\"%s\": drop the " MD_PREFIX "scaling-group metadata or use a "
                               "group the env declares",
                               p->namespace, ref.name, res.group);
        } else if (rc == AB_ENOENT) {
            http_respond_error(ex, status, "%s: GET /templates lists the envs you can use", err);
        } else {
            http_respond_error(ex, status, "%s", err);
        }
        free(c);
        return;
    }
    /* the hub records the claim only with the assertion it made for this create,
     * and with it the secret names the vault may resolve for it (hub/vault_api.c) */
    json_t *emd = md;
    if (c->n_names > 0 && md && (emd = json_deep_copy(md))) {
        json_t *arr = json_array();
        for (size_t i = 0; arr && i < c->n_names; i++)
            json_array_append_new(arr, json_string(c->names[i]));
        json_object_set_new(emd, MD_PREFIX "secret-names", arr);
    }
    e2b_event_ids(e, "claimed", c->id, c->ns, c->name, "", c->team, c->user, emd ? emd : md, NULL,
                  p->assertion);
    if (emd != md)
        json_decref(emd);
    if (res.no_wait) {
        /* answer now; the claim finishes in the background */
        struct rt_sandbox s;
        memset(&s, 0, sizeof(s));
        ab_strlcpy(s.id, c->id, sizeof(s.id));
        ab_strlcpy(s.ns, c->ns, sizeof(s.ns));
        ab_strlcpy(s.pool, c->name, sizeof(s.pool));
        c->ex = NULL;
        http_respond_json(ex, 201, e2b_sandbox_json(e, &s));
    }
}

/* --- bare names: the placement of DESIGN §6 ------------------------------------------- */

/* A bare-name create waiting for fed_route's answer. Owns body and md. */
struct routed_create {
    struct e2b *e;
    struct http_exchange *ex;
    struct agent_principal p;
    json_t *body; /* the request as parsed: forwarded with templateID rewritten */
    json_t *md;   /* metadata without the reserved keys */
    json_t *envs; /* borrowed from body */
    struct ref ref;
    struct reserved res;
    int64_t timeout;
    bool internet;
};

static void routed_free(struct routed_create *rc)
{
    json_decref(rc->body);
    json_decref(rc->md);
    free(rc);
}

static void routed(const struct fed_decision *d, void *arg)
{
    struct routed_create *rc = arg;
    struct e2b *e = rc->e;

    if (d->action == FED_FORWARD) {
        char tmpl[REF_MAX];
        struct ref to = {0};
        ab_strlcpy(to.cluster, d->cluster, sizeof(to.cluster));
        ab_strlcpy(to.name, d->pool, sizeof(to.name));
        ab_strlcpy(to.image, rc->ref.image, sizeof(to.image));
        int k = ref_format(&to, tmpl, sizeof(tmpl));
        char *txt = NULL;
        if (k > 0 && (size_t)k < sizeof(tmpl) &&
            json_object_set_new(rc->body, "templateID", json_string(tmpl)) == 0)
            txt = json_dumps(rc->body, JSON_COMPACT);
        if (!txt) {
            http_respond_error(rc->ex, 503, "out of memory while forwarding to cluster '%s'",
                               d->cluster);
        } else {
            count(e, "forwarded");
            LOG_DEBUG("e2b create forwarded", "env", rc->ref.name, "to", tmpl, "step",
                      d->step == 2 ? "2" : "4");
            struct claim_deps cd = deps_of(e);
            claim_forward(&cd, rc->ex, d->cluster, txt, strlen(txt), rc->p.assertion);
            free(txt);
        }
    } else {
        claim_local(e, rc->ex, &rc->p, &rc->ref, &rc->res, rc->md, rc->envs, rc->timeout,
                    rc->internet);
    }
    routed_free(rc);
}

/* Asks the placement for a bare name (the body is kept for a forward).
 * Returns true when it took over answering ex. */
static bool route_bare(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                       json_t *b, json_t *md, json_t *envs, const struct ref *ref,
                       const struct reserved *res, int64_t timeout, bool internet)
{
    struct routed_create *rc = calloc(1, sizeof(*rc));
    if (!rc)
        return false;
    rc->e = e;
    rc->ex = ex;
    rc->p = *p;
    rc->body = json_incref(b);
    rc->md = json_incref(md);
    rc->envs = envs;
    rc->ref = *ref;
    rc->res = *res;
    rc->timeout = timeout;
    rc->internet = internet;
    struct claim_deps d = deps_of(e);
    if (claim_place(&d, p->namespace, ref->name, res->group, routed, rc) != 0) {
        routed_free(rc);
        return false; /* a name fed_route refuses: the local path answers it */
    }
    return true;
}

static void create_op(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p)
{
    create_body(e, ex, p, false);
}

/* names_checked: the rules' secret names were found in the caller's vault
 * (check_secrets went first, then called this again). */
static void create_body(struct e2b *e, struct http_exchange *ex, const struct agent_principal *p,
                        bool names_checked)
{
    char err[1024];
    const char *tmpl = NULL;
    json_t *b, *md = NULL, *envs = NULL;
    struct ref ref;
    struct reserved res;
    int64_t timeout = 0;
    bool internet = true;
    int rc;

    if (!(b = e2b_body(ex, true)))
        return;
    rc = json_get_str(b, "templateID", false, REF_MAX - 1, &tmpl, err, sizeof(err));
    if (rc == 0 && (!tmpl || ref_parse(tmpl, &ref) != 0 || ref.name[0] == '\0')) {
        snprintf(err, sizeof(err),
                 "templateID is required: pass an env name (GET /templates lists them), "
                 "optionally as <cluster>::<name>");
        rc = AB_EINVAL;
    }
    if (rc == 0)
        rc = e2b_refuse_create(e, b, err, sizeof(err));
    if (rc == 0)
        rc = json_get_int(b, "timeout", false, 0, MAX_TIMEOUT_S, &timeout, err, sizeof(err));
    if (rc == 0)
        rc = json_get_bool(b, "allow_internet_access", false, &internet, err, sizeof(err));
    if (rc == 0 && (envs = json_object_get(b, "envVars")) && !json_is_null(envs))
        rc = check_strings(envs, "envVars", err, sizeof(err));
    else
        envs = NULL;
    if (rc == 0 && json_object_get(b, "metadata") &&
        !json_is_null(json_object_get(b, "metadata"))) {
        rc = check_strings(json_object_get(b, "metadata"), "metadata", err, sizeof(err));
        if (rc == 0)
            md = json_deep_copy(json_object_get(b, "metadata"));
    }
    if (rc == 0 && !md)
        md = json_object();
    if (rc == 0)
        rc = take_reserved(md, &res, err, sizeof(err));
    if (rc == 0)
        res.network = json_object_get(b, "network");
    if (rc == AB_EDENIED && check_secrets(e, ex, p, json_object_get(b, "network"), err)) {
        count(e, "refused");
        goto out; /* answered once the vault said which names exist */
    }
    /* rules the gateway will fill: an unknown secret is a 400 naming it before
     * anything is claimed; every name known, the create goes on from there */
    if (rc == 0 && !names_checked && check_secrets(e, ex, p, json_object_get(b, "network"), NULL))
        goto out;
    if (rc != 0) {
        count(e, "refused");
        http_respond_error(ex, 400, "%s", err);
        goto out;
    }
    int where = claim_where(e->cluster, &ref, err, sizeof(err));
    if (where < 0) {
        http_respond_error(ex, 400, "%s", err);
        goto out;
    }
    /* cluster::name: forwarded verbatim when the prefix is another cluster's */
    if (where == CLAIM_REMOTE) {
        count(e, "forwarded");
        e2b_forward(e, ex, p, ref.cluster, http_req(ex)->target);
        goto out;
    }
    /* a bare name is an env of this cluster (DESIGN §6), never forwarded
     * as it is: only the hub front door places one on any cluster */
    if (where == CLAIM_PLACE && e2b_rt(e) && !env_here(e2b_rt(e), p->namespace, ref.name)) {
        count(e, "refused");
        http_respond_error(ex, 400,
                           "sandbox env \"%s\" not found in namespace %s on cluster '%s': a bare "
                           "name is an env of this cluster; for another cluster's env or pool pass "
                           "CLUSTER_ID::%s, or create through the hub, which places a bare name "
                           "on any cluster (GET /templates lists the envs you can use)",
                           ref.name, p->namespace, e->cluster, ref.name);
        goto out;
    }
    /* a bare name: local idle serves here, else the hub places it (DESIGN §6) */
    if (where == CLAIM_PLACE && route_bare(e, ex, p, b, md, envs, &ref, &res, timeout, internet))
        goto out;
    claim_local(e, ex, p, &ref, &res, md, envs, timeout, internet);
out:
    json_decref(md);
    json_decref(b);
}

int e2b_create_routes(struct e2b *e, char *err, size_t errlen)
{
    int rc = e2b_route(e, "POST", "/sandboxes", create_op, 0, err, errlen);
    if (rc == 0)
        rc = e2b_route(e, "POST", "/v2/sandboxes", create_op, 0, err, errlen);
    return rc;
}
