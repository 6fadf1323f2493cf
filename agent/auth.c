/* See auth.h. The cache is a small open hash keyed by the key's SHA-256. */
#include "agent/auth.h"

#include "agent/hub_link.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/metrics.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define CACHE_SLOTS 4096 /* power of two; entries beyond are evicted */
#define HIT_TTL_MS 60000
#define MISS_TTL_MS 5000
#define GRACE_MS (5 * 60 * 1000) /* cached keys stay valid this long with the hub unreachable */
#define KEY_MAX 256

struct cache_entry {
    bool used;
    bool valid;
    int64_t fetched_ms; /* when the hub last answered for it */
    char reason[48];    /* for misses: revoked, expired, unknown */
    struct agent_principal p;
};

struct pending;

struct agent_auth {
    struct hub_link *hub; /* not owned */
    struct cache_entry cache[CACHE_SLOTS];
    struct asrt_keyring *kr; /* the hub's assertion keys (last WELCOME); NULL: none accepted */
    /* verified assertions: the hub reuses a caller's for minutes, so a repeat
     * costs a hash, not an Ed25519 verify (NULL: no cache, still correct) */
    struct asrt_cache *vcache;
    struct metric_family *m_result;
    struct metric_family *m_verify; /* assertion verifications by cache=hit|miss */
};

static unsigned slot_of(const char *hash)
{
    unsigned h = 0;
    for (int i = 0; i < 8 && hash[i]; i++)
        h = h * 16 + (unsigned)(hash[i] <= '9' ? hash[i] - '0' : hash[i] - 'a' + 10);
    return h & (CACHE_SLOTS - 1);
}

static struct cache_entry *find(struct agent_auth *au, const char *hash)
{
    struct cache_entry *e = &au->cache[slot_of(hash)];
    return e->used && strcmp(e->p.key_hash, hash) == 0 ? e : NULL;
}

int agent_auth_new(struct hub_link *hub, struct agent_auth **out)
{
    struct agent_auth *au = calloc(1, sizeof(*au));
    if (!au)
        return AB_ENOMEM;
    au->hub = hub;
    /* an invalid cluster id (a standalone agent) leaves kr NULL: assertions refused */
    au->kr = asrt_keyring_new(hub_link_cluster(hub));
    au->vcache = asrt_cache_new(ASRT_CACHE_SLOTS);
    static const char *const labels[] = {"result", NULL};
    au->m_result =
        metrics_register(metrics_default(), "agentbox_auth_requests_total",
                         "API-key checks on the agent by result.", METRIC_COUNTER, labels, NULL, 0);
    static const char *const vlabels[] = {"cache", NULL};
    au->m_verify = metrics_register(metrics_default(), "agentbox_agent_assertion_verifies_total",
                                    "Assertions verified on the agent: cache=miss a full "
                                    "verification (Ed25519), hit a token verified before.",
                                    METRIC_COUNTER, vlabels, NULL, 0);
    *out = au;
    return 0;
}

void agent_auth_free(struct agent_auth *au)
{
    if (!au)
        return;
    asrt_keyring_free(au->kr);
    asrt_cache_free(au->vcache);
    free(au);
}

static void count(struct agent_auth *au, const char *result)
{
    const char *v[] = {result};
    metrics_add(au->m_result, v, 1);
}

const char *agent_auth_presented_key(const struct http_request *r)
{
    const char *k = http_header_get(r, "X-API-Key");
    if (!k || !*k)
        k = http_header_get(r, "AGENTBOX-API-KEY");
    if (!k || !*k) {
        const char *auth = http_header_get(r, "Authorization");
        if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
            k = auth + 7;
    }
    return k && *k ? k : NULL;
}

static void refuse_miss(struct http_exchange *ex, const char *reason)
{
    if (strcmp(reason, "revoked") == 0)
        http_respond_error(ex, 401, "API key has been revoked: create a new one");
    else if (strcmp(reason, "expired") == 0)
        http_respond_error(ex, 401, "API key has expired: create a new one");
    else
        http_respond_error(ex, 401, "invalid API key: check X-API-Key (keys start with agbx_)");
}

struct pending {
    struct agent_auth *au;
    struct http_exchange *ex;
    agent_auth_fn done;
    void *arg;
    char hash[65];
};

static void fill_principal(struct agent_principal *p, json_t *j, const char *hash,
                           const char *assertion)
{
    memset(p, 0, sizeof(*p));
    ab_strlcpy(p->key_hash, hash, sizeof(p->key_hash));
#define COPY(field, key)                                                                           \
    ab_strlcpy(p->field,                                                                           \
               json_string_value(json_object_get(j, key))                                          \
                   ? json_string_value(json_object_get(j, key))                                    \
                   : "",                                                                           \
               sizeof(p->field))
    COPY(key_id, "keyId");
    COPY(name, "name");
    COPY(team, "team");
    COPY(user, "user");
    COPY(namespace, "namespace");
#undef COPY
    const char *role = json_string_value(json_object_get(j, "role"));
    const char *mode = json_string_value(json_object_get(j, "mode"));
    p->admin = role && strcmp(role, "admin") == 0;
    p->agent_mode = mode && strcmp(mode, "agent") == 0;
    if (assertion && strlen(assertion) <= ASRT_TOKEN_MAX)
        ab_strlcpy(p->assertion, assertion, sizeof(p->assertion));
}

static void validated(const struct tun_call_result *res, void *arg)
{
    struct pending *pd = arg;
    struct agent_auth *au = pd->au;
    struct cache_entry *stale = find(au, pd->hash);
    json_t *body = res->status == 200 ? json_loadb(res->body, res->body_len, 0, NULL) : NULL;
    if (!body) {
        /* the hub could not be asked: a cached key within its grace still works */
        if (stale && stale->valid && ab_now_ms() - stale->fetched_ms < GRACE_MS) {
            count(au, "grace");
            struct agent_principal p = stale->p;
            pd->done(pd->ex, &p, pd->arg);
        } else {
            count(au, "unreachable");
            LOG_WARN("cannot validate an API key with the hub", "error",
                     res->error ? res->error : "bad answer");
            http_respond_error(pd->ex, 503,
                               "control plane unreachable: the agent cannot validate API keys "
                               "right now; retry shortly");
        }
        free(pd);
        return;
    }
    struct cache_entry *e = &au->cache[slot_of(pd->hash)];
    memset(e, 0, sizeof(*e));
    e->used = true;
    e->fetched_ms = ab_now_ms();
    if (json_is_true(json_object_get(body, "valid"))) {
        e->valid = true;
        fill_principal(&e->p, json_object_get(body, "principal"), pd->hash,
                       json_string_value(json_object_get(body, "assertion")));
        count(au, "valid");
        struct agent_principal p = e->p;
        json_decref(body);
        pd->done(pd->ex, &p, pd->arg);
    } else {
        const char *reason = json_string_value(json_object_get(body, "reason"));
        ab_strlcpy(e->p.key_hash, pd->hash, sizeof(e->p.key_hash));
        ab_strlcpy(e->reason, reason ? reason : "unknown", sizeof(e->reason));
        count(au, "invalid");
        refuse_miss(pd->ex, e->reason);
        json_decref(body);
    }
    free(pd);
}

/* A request that came over the tunnel with an assertion: the principal is
 * the verified claims, nothing else in the request. */
static void by_assertion(struct agent_auth *au, struct http_exchange *ex, const char *tok,
                         agent_auth_fn done, void *arg)
{
    const struct http_request *r = http_req(ex);
    struct asrt_claims c;
    char err[200];
    int rc;

    if (!r->peer || strcmp(r->peer, "tunnel:hub") != 0) {
        count(au, "invalid");
        http_respond_error(ex, 401,
                           "an " ASRT_HEADER " is accepted only from the hub over the tunnel; "
                           "send your API key in X-API-Key");
        return;
    }
    if (agent_auth_presented_key(r)) {
        count(au, "invalid");
        http_respond_error(ex, 400, "a request carries an assertion or an API key, not both");
        return;
    }
    uint64_t hits0 = 0, hits1 = 0, misses;
    asrt_cache_stats(au->vcache, &hits0, &misses);
    rc = au->kr ? asrt_verify_cached(au->kr, au->vcache, NULL, tok, strlen(tok),
                                     (int64_t)time(NULL), &c, err, sizeof(err))
                : ASRT_EKID;
    asrt_cache_stats(au->vcache, &hits1, &misses);
    {
        const char *v[] = {hits1 > hits0 ? "hit" : "miss"};
        metrics_add(au->m_verify, v, 1);
    }
    if (rc != 0) {
        count(au, "invalid");
        LOG_WARN("assertion refused", "error", au->kr ? err : "no assertion keys");
        http_respond_error(ex, 401, "invalid assertion: %s",
                           au->kr ? err : "this agent has no assertion keys");
        return;
    }
    struct agent_principal *p = calloc(1, sizeof(*p));
    if (!p) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    ab_strlcpy(p->key_id, c.key, sizeof(p->key_id));
    ab_strlcpy(p->team, c.team, sizeof(p->team));
    ab_strlcpy(p->user, c.user, sizeof(p->user));
    ab_strlcpy(p->namespace, c.ns, sizeof(p->namespace));
    p->admin = strcmp(c.role, "admin") == 0;
    p->agent_mode = strcmp(c.mode, "agent") == 0;
    /* made for this cluster: valid for this cluster's own calls to the hub */
    ab_strlcpy(p->assertion, tok, sizeof(p->assertion));
    count(au, "assertion");
    done(ex, p, arg);
    free(p);
}

void agent_auth_request(struct agent_auth *au, struct http_exchange *ex, agent_auth_fn done,
                        void *arg)
{
    const char *tok = http_header_get(http_req(ex), ASRT_HEADER);
    if (tok && *tok) {
        by_assertion(au, ex, tok, done, arg);
        return;
    }
    const char *key = agent_auth_presented_key(http_req(ex));
    if (!key) {
        count(au, "missing");
        http_respond_error(ex, 401, "missing API key: send it in the X-API-Key header");
        return;
    }
    if (strlen(key) > KEY_MAX) {
        count(au, "invalid");
        http_respond_error(ex, 401, "invalid API key: longer than %d characters", KEY_MAX);
        return;
    }
    char hash[65];
    crypto_sha256_hex(key, hash);
    struct cache_entry *e = find(au, hash);
    int64_t now = ab_now_ms();
    if (e && now - e->fetched_ms < (e->valid ? HIT_TTL_MS : MISS_TTL_MS)) {
        if (e->valid) {
            count(au, "cached");
            struct agent_principal p = e->p;
            done(ex, &p, arg);
        } else {
            count(au, "invalid");
            refuse_miss(ex, e->reason);
        }
        return;
    }
    struct pending *pd = calloc(1, sizeof(*pd));
    if (!pd) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    pd->au = au;
    pd->ex = ex;
    pd->done = done;
    pd->arg = arg;
    memcpy(pd->hash, hash, sizeof(hash));
    char body[96];
    int n = snprintf(body, sizeof(body), "{\"hash\":\"%s\"}", hash);
    struct tun_header h[] = {{"Content-Type", "application/json"}};
    if (hub_link_call(au->hub, "POST", "/internal/v1/keys/validate", h, 1, body, (size_t)n,
                      16 * 1024, validated, pd) != 0) {
        struct tun_call_result res = {.status = 0, .error = "tunnel down"};
        validated(&res, pd); /* grace or 503 */
    }
}

static void on_welcome(struct agent_auth *au, json_t *event)
{
    json_t *keys = json_object_get(event, "assertionKeys");
    const char *texts[ASRT_KEYRING_MAX];
    size_t n = 0, i;
    json_t *v;
    char err[200];

    if (!au->kr)
        return;
    json_array_foreach(keys, i, v)
    {
        if (n < ASRT_KEYRING_MAX && json_string_value(v))
            texts[n++] = json_string_value(v);
    }
    if (asrt_keyring_replace(au->kr, texts, n, err, sizeof(err)) != 0)
        LOG_WARN("WELCOME carried unusable assertion keys; keeping the previous ones", "error",
                 err);
}

void agent_auth_on_event(struct agent_auth *au, json_t *event)
{
    const char *type = json_string_value(json_object_get(event, "type"));
    const char *hash = json_string_value(json_object_get(event, "hash"));
    const char *key_id = json_string_value(json_object_get(event, "keyId"));
    /* a WELCOME's keys, or the hub's rotation told while connected */
    if (type && (strcmp(type, "welcome") == 0 || strcmp(type, "assertion_keys") == 0)) {
        on_welcome(au, event);
        return;
    }
    if (!type || strcmp(type, "key_revoked") != 0)
        return;
    if (au->kr && key_id && *key_id) {
        int rc = asrt_keyring_revoke(au->kr, key_id, (int64_t)time(NULL));
        if (rc == 1)
            LOG_WARN("revoked key ids overflow one bucket: its keys' assertions are refused "
                     "for a lifetime",
                     "key_id", key_id);
        else if (rc != 0)
            LOG_WARN("cannot record a revoked key id", "key_id", key_id);
    }
    if (!hash)
        return;
    struct cache_entry *e = find(au, hash);
    if (e) {
        memset(e, 0, sizeof(*e));
        LOG_INFO("API key revoked by the hub; dropped from the cache");
    }
}
