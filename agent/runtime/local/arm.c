/* Arming a claimed sandbox: its egress policy into the gateway's table
 * first (the veth has been there since spawn), then envd POST /init with
 * token, env vars, user and workdir; only then is the claim reported. Also
 * the claim's end: lifetime and idle timer, startup timeout of waiting
 * claims, failures.
 *
 * Loop thread only. */
#include "agent/runtime/local/lrt.h"

#include "agent/egress/policy.h"
#include "agent/egress/table.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/trace.h"
#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- the egress policy -------------------------------------------------------------- */

int lrt_egress_apply(struct lsb *s, char *err, size_t errlen)
{
    struct egress_policy *p = NULL;
    const struct egress_opts opts = {.internet = s->x.internet, .allow_private = s->allow_private};
    int rc;

    if (!s->rt->egress_table || s->uid_slot <= 0)
        return 0; /* no egress namespace: loopback only, nothing to enforce */
    if ((rc = egress_policy_parse(s->network, &opts, &p, err, errlen)) != 0)
        return rc;
    return egress_table_set(s->rt->egress_table, (uint32_t)(s->uid_slot - 1),
                            s->id[0] ? s->id : s->sid, p);
}

void lrt_egress_clear(struct lsb *s)
{
    if (s->rt->egress_table && s->uid_slot > 0)
        egress_table_clear(s->rt->egress_table, (uint32_t)(s->uid_slot - 1));
}

/* ---- claims finishing ------------------------------------------------------------ */

void lrt_claim_fail(struct lrt_waiter *w, int err, const char *msg)
{
    if (!w->cancelled && w->cb)
        w->cb(w->arg, err, msg, NULL);
    lrt_waiter_free(w);
}

static void end_timer(struct loop_timer *t);

void lrt_update_end(struct lsb *s)
{
    int64_t end = s->life_end_ms > 0 ? s->life_end_ms : INT64_MAX;

    if (s->idle_ms > 0)
        end = AB_MIN(end, s->last_active_ms + s->idle_ms);
    s->end_ms = end == INT64_MAX ? s->claimed_ms + DEFAULT_TIMEOUT_S * 1000 : end;
}

/* Activity moves end_ms without touching the timer (op_touch runs for each
 * second of data-plane traffic): the timer fires at the end it knew and
 * sleeps again when the end moved meanwhile. */
void lrt_schedule_end(struct lsb *s)
{
    int64_t now = ab_wall_ms(), at = s->end_ms;

    if (s->timer_on)
        loop_timer_cancel(&s->timer);
    s->timer_on = true;
    loop_timer_start(s->rt->loop, &s->timer, AB_MAX(at - now, 0), end_timer, s);
}

static void end_timer(struct loop_timer *t)
{
    struct lsb *s = t->arg;
    int64_t now = ab_wall_ms();

    s->timer_on = false;
    if (now >= s->end_ms) {
        char idle[32];
        snprintf(idle, sizeof(idle), "%lld", (long long)(now - s->last_active_ms));
        LOG_INFO("sandbox timed out", "id", s->id, "pool", s->pool->name, "idle_ms", idle);
        lrt_destroy(s);
        return;
    }
    lrt_schedule_end(s);
}

/* envd is armed. The claim was recorded in its state record (on a worker: a write
 * on the loop thread held every other claim back, and an ext4 journal commit
 * made it tens of ms) while envd handled /init; it is reported once both are
 * done — never before the record, or a restarted agent could take a claimed
 * sandbox for an idle one. The sandbox stays PH_ARMING until then. */
static void armed(struct lsb *s)
{
    s->init_ok = true;
    if (s->w_done_gen >= s->report_gen) { /* the record is on disk already */
        s->report_gen = 0;
        lrt_claim_written(s, 0);
    }
    /* else state_done (pool.c) reports it once written */
}

/* What a claim gives the sandbox, recorded in the state record while envd is
 * armed (post_init) and reported once both are done. */
static void claim_fields(struct lsb *s, struct lrt_waiter *w)
{
    ab_strlcpy(s->id, w->id, sizeof(s->id));
    json_decref(s->metadata);
    s->metadata = w->metadata;
    w->metadata = NULL;
    ab_strlcpy(s->team, w->team, sizeof(s->team));
    ab_strlcpy(s->owner, w->owner, sizeof(s->owner));
    s->claimed_ms = s->last_active_ms = ab_wall_ms();
    if (w->timeout_is_idle) {
        s->life_end_ms = 0;
        s->idle_ms = w->timeout_s * 1000;
    } else {
        s->life_end_ms = s->claimed_ms + w->timeout_s * 1000;
        s->idle_ms = s->pool->idle_ms;
    }
    lrt_update_end(s);
}

void lrt_claim_written(struct lsb *s, int rc)
{
    struct lrt_waiter *w = s->armer;
    struct rt_sandbox snap;

    (void)rc; /* a failed write was logged; the claim goes on, as it always did */
    s->armer = NULL;
    if (w->cancelled || w->killed) {
        lrt_claim_fail(w, AB_ECLOSED, "the sandbox was killed before it was armed");
        lrt_destroy(s);
        return;
    }
    s->phase = PH_RUNNING;
    lrt_schedule_end(s);
    lrt_fill(s, &snap, false);
    ab_trace(w->trace, "claim.reported");
    w->cb(w->arg, 0, NULL, &snap);
    lrt_waiter_free(w);
}

static void arm_failed(struct lsb *s, const char *msg)
{
    struct lrt_waiter *w = s->armer;

    s->armer = NULL;
    LOG_WARN("arming a sandbox failed", "pool", s->pool->name, "error", msg);
    lrt_claim_fail(w, AB_EIO, msg);
    lrt_destroy(s);
}

static void init_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    struct lsb *s = arg;

    (void)c;
    (void)h;
    (void)n;
    s->http_status = status;
}

static void init_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

/* ---- what a start command's server learns of the claim -------------------------- */

/* A start command ran before the claim (start.c), so it never saw the
 * claim's env vars nor its access token; envd's /envs, where E2B's servers
 * read the former, is not reachable from inside our sandboxes (the socket is
 * root's). Both are written, as user, to this file before the claim is
 * reported: {"envVars": {...}, "accessTokenSha256": "<hex>"}. Servers started
 * by a start command read it (images/code-interpreter/server.py applies the
 * env vars and refuses code from callers without the sandbox's token: the
 * data plane does not authenticate ports other than envd's). */
#define CLAIM_FILE_TARGET "/files?path=/home/user/.agentbox/claim.json&username=user"

static void claim_file_end(struct http_client *c, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    s->hc = NULL;
    if (s->http_status >= 200 && s->http_status < 300) {
        armed(s);
        return;
    }
    snprintf(msg, sizeof(msg), "sandbox envd answered %d to writing the claim file",
             s->http_status);
    arm_failed(s, msg);
}

static void claim_file_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    (void)err;
    s->hc = NULL;
    snprintf(msg, sizeof(msg), "sandbox envd did not answer writing the claim file: %s",
             m ? m : "error");
    arm_failed(s, msg);
}

static const struct http_client_handler claim_file_handler = {
    .on_head = init_head,
    .on_data = init_data,
    .on_end = claim_file_end,
    .on_error = claim_file_error,
};

static void post_claim_file(struct lsb *s)
{
    struct http_header h[] = {{"Content-Type", "application/octet-stream"},
                              {"X-Access-Token", s->x.token}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX], digest[65];
    json_t *doc;
    char *body;
    size_t len;

    crypto_sha256_hex(s->x.token, digest);
    doc = json_pack("{s:o, s:s}", "envVars",
                    s->armer->env_vars ? json_deep_copy(s->armer->env_vars) : json_object(),
                    "accessTokenSha256", digest);
    body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    len = body ? strlen(body) : 0;
    if (!body || len > INIT_BODY_MAX) {
        if (body)
            explicit_bzero(body, len);
        free(body);
        arm_failed(s, "the claim file could not be built (too large or out of memory)");
        return;
    }
    snprintf(addr, sizeof(addr), "unix:%s", s->x.socket);
    o.addr = addr;
    o.method = "POST";
    o.target = CLAIM_FILE_TARGET;
    o.headers = h;
    o.nheaders = 2;
    o.content_length = (int64_t)len;
    o.timeout_ms = 10000;
    s->http_status = 0;
    s->hc = http_client_start(s->rt->loop, &o, &claim_file_handler, s);
    if (!s->hc) {
        explicit_bzero(body, len);
        free(body);
        arm_failed(s, "cannot start the request to the sandbox's envd");
        return;
    }
    http_client_write(s->hc, body, len);
    http_client_end(s->hc);
    explicit_bzero(body, len);
    free(body);
}

static void init_end(struct http_client *c, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    s->hc = NULL;
    if (s->http_status >= 200 && s->http_status < 300) {
        ab_trace(s->armer->trace, "claim.init_done");
        if (lrt_start_needed(s->pool))
            post_claim_file(s);
        else
            armed(s);
        return;
    }
    snprintf(msg, sizeof(msg), "sandbox envd answered %d to POST /init", s->http_status);
    arm_failed(s, msg);
}

static void init_error(struct http_client *c, int err, const char *m, void *arg)
{
    struct lsb *s = arg;
    char msg[RT_ERR_MAX];

    (void)c;
    (void)err;
    s->hc = NULL;
    snprintf(msg, sizeof(msg), "sandbox envd did not answer POST /init: %s", m ? m : "error");
    arm_failed(s, msg);
}

static const struct http_client_handler init_handler = {
    .on_head = init_head,
    .on_data = init_data,
    .on_end = init_end,
    .on_error = init_error,
};

static char *init_body(const struct lrt_waiter *w, const struct lsb *s)
{
    json_t *b = json_object();
    char ts[40];
    time_t now = (time_t)(ab_wall_ms() / 1000);
    struct tm tm;
    char *out;

    if (!b)
        return NULL;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(b, "envVars", w->env_vars ? json_deep_copy(w->env_vars) : json_object());
    json_object_set_new(b, "accessToken", json_string(s->x.token));
    json_object_set_new(b, "defaultUser", json_string(w->user));
    json_object_set_new(b, "defaultWorkdir", json_string(w->workdir));
    json_object_set_new(b, "timestamp", json_string(ts));
    json_object_set_new(b, "lifecycleID", json_string(w->id));
    /* the egress gateway's CA for this sandbox (certificate only), when its
     * rules make the gateway intercept TLS: envd puts it in the trust store */
    const char *ca = s->rt->egress_table && s->uid_slot > 0
                         ? egress_table_ca_pem(s->rt->egress_table, (uint32_t)(s->uid_slot - 1))
                         : NULL;
    if (ca)
        json_object_set_new(b, "egressCa", json_string(ca));
    out = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return out;
}

static void post_init(struct lsb *s)
{
    /* a sandbox whose start command ran had its /init already: the second
     * one must carry the token that one set (the sandbox's own) */
    char old[sizeof(s->x.token)];
    struct http_header h[] = {{"Content-Type", "application/json"}, {"X-Access-Token", old}};
    struct http_client_options o = {0};
    char addr[RT_ADDR_MAX];
    char *body;
    size_t len;

    ab_strlcpy(old, s->x.token, sizeof(old));
    /* the caller's token when it brought one, else the sandbox's own */
    if (s->armer->token)
        ab_strlcpy(s->x.token, s->armer->token, sizeof(s->x.token));
    /* the record (with the token envd will hold) is written while envd
     * handles /init; a crash in between leaves a running record of a claim
     * never reported, which ends at its timeout: never an idle one */
    s->phase = PH_RUNNING; /* as recorded */
    lrt_persist(s);
    s->phase = PH_ARMING;
    s->report_gen = s->w_gen;
    body = init_body(s->armer, s);

    if (!body || (len = strlen(body)) > INIT_BODY_MAX) {
        free(body);
        arm_failed(s, "the /init body could not be built (too large or out of memory)");
        return;
    }
    snprintf(addr, sizeof(addr), "unix:%s", s->x.socket);
    o.addr = addr;
    o.method = "POST";
    o.target = "/init";
    o.headers = h;
    o.nheaders = 2;
    o.content_length = (int64_t)len;
    o.timeout_ms = 10000;
    s->phase = PH_ARMING;
    s->http_status = 0;
    s->hc = http_client_start(s->rt->loop, &o, &init_handler, s);
    if (!s->hc) {
        explicit_bzero(body, len);
        free(body);
        arm_failed(s, "cannot start the request to the sandbox's envd");
        return;
    }
    http_client_write(s->hc, body, len);
    http_client_end(s->hc);
    ab_trace(s->armer->trace, "claim.init_sent");
    explicit_bzero(old, sizeof(old));
    explicit_bzero(body, len);
    free(body);
}

/* Takes the oldest idle sandbox of p for w. */
static void arm(struct lsb *s, struct lrt_waiter *w)
{
    ab_trace(w->trace, "claim.arm");
    s->armer = w;
    if (w->timer_on) {
        loop_timer_cancel(&w->timer);
        w->timer_on = false;
    }
    /* the policy is in force before any code of the claim runs */
    char why[RT_ERR_MAX];
    ab_strlcpy(s->id, w->id, sizeof(s->id));
    s->x.internet = w->internet && !s->pool->disable_egress;
    s->allow_private = w->allow_private;
    json_decref(s->network);
    s->network = w->network;
    w->network = NULL;
    if (lrt_egress_apply(s, why, sizeof(why)) != 0) {
        s->phase = PH_ARMING;
        arm_failed(s, why);
        return;
    }
    claim_fields(s, w);
    post_init(s);
}

void lrt_serve_waiters(struct lrt *rt, struct lpool *p)
{
    while (p->w_head) {
        struct lsb *s, *best = NULL;
        struct lrt_waiter *w;

        for (s = rt->sbxs; s; s = s->next)
            if (s->pool == p && s->phase == PH_IDLE && !s->doomed && (!best || s->seq < best->seq))
                best = s;
        if (!best)
            return;
        w = p->w_head;
        lrt_waiter_unlink(p, w);
        arm(best, w);
    }
}

void lrt_waiter_timeout(struct loop_timer *t)
{
    struct lrt_waiter *w = t->arg;
    struct lrt *rt = w->rt;
    struct lpool *p = w->pool;
    char msg[LRT_START_MSG_MAX], why[LRT_START_MSG_MAX];

    w->timer_on = false;
    lrt_waiter_unlink(w->pool, w);
    if (p->replicas == 0)
        snprintf(msg, sizeof(msg),
                 "pool '%s' has replicas 0 and never starts a sandbox: none became free within "
                 "%lld ms; raise the pool's replicas",
                 p->name, (long long)w->startup_ms);
    else if (lrt_count(rt, p, PH_ATTACHING, PH_RUNNING) >= p->replicas)
        snprintf(msg, sizeof(msg),
                 "no sandbox of pool '%s' became free within %lld ms: all %d of its replicas "
                 "are in use; release one, raise the pool's replicas or wait longer "
                 "(startup timeout)",
                 p->name, (long long)w->startup_ms, p->replicas);
    else if (lrt_start_describe(p, rt, why, sizeof(why)))
        /* a pool with start commands says which check holds its sandboxes back */
        snprintf(msg, sizeof(msg), "no sandbox of pool '%s' became ready within %lld ms: %s",
                 p->name, (long long)w->startup_ms, why);
    else
        snprintf(msg, sizeof(msg),
                 "no sandbox of pool '%s' became ready within %lld ms; the pool "
                 "may be at its sandbox limit or failing to start sandboxes",
                 p->name, (long long)w->startup_ms);
    lrt_claim_fail(w, AB_ETIMEOUT, msg); /* frees w */
    lrt_reconcile(rt, p);
}
