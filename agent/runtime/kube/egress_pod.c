/* The egress sidecar in the kube runtime's Pods (egress_pod.h). */
#include "agent/runtime/kube/egress_pod.h"

#include "agentbox/common.h"
#include "agentbox/json.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool kube_egress_env_enabled(const json_t *env)
{
    const json_t *ov = json_object_get(json_object_get(env, "spec"), "overrides");
    return json_is_true(json_object_get(json_object_get(ov, "gateway"), "enabled"));
}

static json_t *arr_at(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);
    if (!json_is_array(v)) {
        v = json_array();
        json_object_set_new(o, k, v);
    }
    return v;
}

static json_t *named(const json_t *list, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(list, i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (n && strcmp(n, name) == 0)
            return c;
    }
    return NULL;
}

static bool str_in(const json_t *list, const char *s)
{
    size_t i;
    json_t *v;
    json_array_foreach(list, i, v)
    {
        const char *x = json_string_value(v);
        if (x && strcasecmp(x, s) == 0)
            return true;
    }
    return false;
}

/* The sandbox container may not mark packets (NET_RAW) or touch the rules
 * (NET_ADMIN): dropped, and removed from what it adds. */
static int confine_sandbox(json_t *c0, char *err, size_t errlen)
{
    json_t *sc = json_child_object(c0, "securityContext");
    if (json_is_true(json_object_get(sc, "privileged"))) {
        snprintf(err, errlen,
                 "overrides.gateway.enabled: the sandbox container is privileged, so nothing "
                 "would hold its traffic inside the egress redirect; drop privileged or the "
                 "gateway");
        return AB_EINVAL;
    }
    json_t *caps = json_child_object(sc, "capabilities");
    json_t *add = json_object_get(caps, "add");
    if (json_is_array(add)) {
        for (size_t i = json_array_size(add); i-- > 0;) {
            const char *x = json_string_value(json_array_get(add, i));
            if (x && (!strcasecmp(x, "NET_ADMIN") || !strcasecmp(x, "NET_RAW") ||
                      !strcasecmp(x, "CAP_NET_ADMIN") || !strcasecmp(x, "CAP_NET_RAW") ||
                      !strcasecmp(x, "ALL")))
                json_array_remove(add, i);
        }
    }
    json_t *drop = arr_at(caps, "drop");
    static const char *const DROP[] = {"NET_ADMIN", "NET_RAW"};
    for (size_t i = 0; i < AB_ARRAY_LEN(DROP); i++)
        if (!str_in(drop, DROP[i]) && !str_in(drop, "ALL"))
            json_array_append_new(drop, json_string(DROP[i]));
    return 0;
}

int kube_egress_inject(json_t *pool_spec, const struct kube_egress_config *c, char *err,
                       size_t errlen)
{
    const char *img = c && c->image && c->image[0]
                          ? c->image
                          : json_string_value(json_object_get(pool_spec, "idleImage"));
    json_t *ps = json_child_object(json_child_object(pool_spec, "template"), "spec");
    json_t *cs = json_object_get(ps, "containers");
    int rc;

    if (!img) {
        json_t *c0 = json_array_get(cs, 0);
        img = json_string_value(json_object_get(c0, "image"));
    }
    if (!img || !img[0]) {
        snprintf(err, errlen,
                 "overrides.gateway.enabled: no image for the egress sidecar (set the agent's "
                 "--egress-image, or the pool's idleImage)");
        return AB_EINVAL;
    }
    if (json_is_array(cs) && json_array_size(cs) > 0 &&
        (rc = confine_sandbox(json_array_get(cs, 0), err, errlen)) != 0)
        return rc;
    json_t *ics = arr_at(ps, "initContainers");
    if (named(ics, KUBE_EGRESS_SIDECAR))
        return 0;
    json_t *init = json_pack(
        "{s:s,s:s,s:[s,s],s:{s:i,s:b,s:b,s:{s:[s],s:[s]}}}", "name", KUBE_EGRESS_INIT, "image", img,
        "command", KUBE_EGRESS_BINARY, "--init", "securityContext", "runAsUser", 0, "runAsNonRoot",
        0, "allowPrivilegeEscalation", 0, "capabilities", "drop", "ALL", "add", "NET_ADMIN");
    json_t *env = json_pack("[{s:s,s:{s:{s:s}}},{s:s,s:{s:{s:s}}}]", "name", "POD_IP", "valueFrom",
                            "fieldRef", "fieldPath", "status.podIP", "name", "HOST_IP", "valueFrom",
                            "fieldRef", "fieldPath", "status.hostIP");
    if (c && c->resolver && c->resolver[0])
        json_array_append_new(
            env, json_pack("{s:s,s:s}", "name", "AGENTBOX_EGRESS_RESOLVER", "value", c->resolver));
    json_t *side =
        json_pack("{s:s,s:s,s:s,s:[s],s:o,s:[{s:s,s:i}],s:{s:{s:s,s:i},s:i},"
                  "s:{s:i,s:b,s:b,s:b,s:{s:[s],s:[s]}}}",
                  "name", KUBE_EGRESS_SIDECAR, "image", img, "restartPolicy", "Always", "command",
                  KUBE_EGRESS_BINARY, "env", env, "ports", "name", "egress-control",
                  "containerPort", KUBE_EGRESS_CONTROL_PORT, "readinessProbe", "httpGet", "path",
                  "/healthz", "port", KUBE_EGRESS_CONTROL_PORT, "periodSeconds", 2,
                  "securityContext", "runAsUser", 0, "runAsNonRoot", 0, "allowPrivilegeEscalation",
                  0, "readOnlyRootFilesystem", 1, "capabilities", "drop", "ALL", "add", "NET_RAW");
    if (!init || !side) {
        json_decref(init);
        json_decref(side);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    /* the redirect first (init containers run in order), then the gateway,
     * both before the template's own init containers and the sandbox */
    json_array_insert_new(ics, 0, side);
    json_array_insert_new(ics, 0, init);
    return 0;
}

bool kube_egress_spec_has(const json_t *pod_spec)
{
    return named(json_object_get(pod_spec, "initContainers"), KUBE_EGRESS_SIDECAR) != NULL;
}

static json_t *token_var(const json_t *pod)
{
    json_t *side =
        named(json_object_get(json_object_get(pod, "spec"), "initContainers"), KUBE_EGRESS_SIDECAR);
    return side ? named(json_object_get(side, "env"), KUBE_EGRESS_TOKEN_ENV) : NULL;
}

int kube_egress_pod_token(json_t *pod)
{
    json_t *side =
        named(json_object_get(json_object_get(pod, "spec"), "initContainers"), KUBE_EGRESS_SIDECAR);
    unsigned char r[24];
    char tok[2 * sizeof(r) + 1];

    if (!side)
        return AB_ENOENT;
    if (crypto_random(r, sizeof(r)) != 0)
        return AB_EIO;
    crypto_hex_encode(r, sizeof(r), tok);
    explicit_bzero(r, sizeof(r));
    json_t *env = arr_at(side, "env");
    json_t *v = named(env, KUBE_EGRESS_TOKEN_ENV);
    if (v)
        json_object_set_new(v, "value", json_string(tok));
    else
        json_array_append_new(env,
                              json_pack("{s:s,s:s}", "name", KUBE_EGRESS_TOKEN_ENV, "value", tok));
    explicit_bzero(tok, sizeof(tok));
    return 0;
}

int kube_egress_token_of(const json_t *pod, char *out, size_t n)
{
    const char *t = json_string_value(json_object_get(token_var(pod), "value"));
    if (!t || !t[0] || ab_strlcpy(out, t, n) >= n)
        return AB_ENOENT;
    return 0;
}

json_t *kube_egress_policy_body(const json_t *network, bool internet, bool allow_private)
{
    return json_pack("{s:O,s:b,s:b}", "network",
                     network && !json_is_null(network) ? network : json_null(), "internet",
                     internet, "allowPrivateNetworks", allow_private);
}

static bool non_empty(const json_t *v)
{
    if (!v || json_is_null(v))
        return false;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_string(v))
        return json_string_length(v) > 0;
    return true;
}

int kube_egress_claim_check(bool has_sidecar, const json_t *network, bool internet, char *err,
                            size_t errlen)
{
    bool lists = non_empty(json_object_get(network, "allowOut")) ||
                 non_empty(json_object_get(network, "denyOut")) ||
                 non_empty(json_object_get(network, "egressProxy"));
    bool rules = non_empty(json_object_get(network, "rules"));

    if (!has_sidecar && (lists || rules || !internet)) {
        snprintf(err, errlen,
                 "a network policy was requested but this environment has no egress gateway; "
                 "set overrides.gateway.enabled on the SandboxEnv, or create the sandbox without "
                 "network.allowOut, network.denyOut, network.rules, network.egressProxy and "
                 "with allow_internet_access");
        return AB_EINVAL;
    }
    if (rules) {
        snprintf(err, errlen,
                 "network.rules (secret injection) is not available in the kube runtime's egress "
                 "sidecar yet; network.allowOut, network.denyOut and network.egressProxy are");
        return AB_EINVAL;
    }
    return 0;
}

/* --- the push ---------------------------------------------------------------------- */

struct kube_egress_push {
    struct http_client *hc;
    kube_egress_push_cb cb;
    void *arg;
    int status;
};

static void push_head(struct http_client *c, int status, const struct http_header *h, int n,
                      void *arg)
{
    (void)c;
    (void)h;
    (void)n;
    ((struct kube_egress_push *)arg)->status = status;
}

static void push_data(struct http_client *c, const void *d, size_t len, void *arg)
{
    (void)c;
    (void)d;
    (void)len;
    (void)arg;
}

static void push_done(struct kube_egress_push *p, const char *why)
{
    char msg[256];
    kube_egress_push_cb cb = p->cb;
    void *arg = p->arg;
    int status = p->status;
    free(p);
    if (why)
        snprintf(msg, sizeof(msg), "the egress sidecar did not answer: %.200s", why);
    else if (status != 204)
        snprintf(msg, sizeof(msg), "the egress sidecar answered %d to the policy", status);
    cb(arg, why || status != 204 ? msg : NULL);
}

static void push_end(struct http_client *c, void *arg)
{
    (void)c;
    push_done(arg, NULL);
}

static void push_error(struct http_client *c, int err, const char *m, void *arg)
{
    (void)c;
    (void)err;
    push_done(arg, m ? m : "error");
}

static const struct http_client_handler push_handler = {
    .on_head = push_head,
    .on_data = push_data,
    .on_end = push_end,
    .on_error = push_error,
};

struct kube_egress_push *kube_egress_push(struct loop *l, const char *ip, const char *token,
                                          const json_t *body, kube_egress_push_cb cb, void *arg)
{
    char addr[128], auth[KUBE_EGRESS_TOKEN_MAX + 16];
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    size_t len = text ? strlen(text) : 0;
    struct kube_egress_push *p = calloc(1, sizeof(*p));

    if (!p || (body && !text) || strlen(token) > KUBE_EGRESS_TOKEN_MAX) {
        free(p);
        free(text);
        return NULL;
    }
    snprintf(addr, sizeof(addr), strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip,
             KUBE_EGRESS_CONTROL_PORT);
    snprintf(auth, sizeof(auth), "Bearer %s", token);
    struct http_header h[] = {{"Content-Type", "application/json"}, {"Authorization", auth}};
    struct http_client_options o = {.addr = addr,
                                    .method = body ? "PUT" : "DELETE",
                                    .target = "/policy",
                                    .headers = h,
                                    .nheaders = 2,
                                    .content_length = (int64_t)len,
                                    .timeout_ms = 10000};
    p->cb = cb;
    p->arg = arg;
    p->hc = http_client_start(l, &o, &push_handler, p);
    explicit_bzero(auth, sizeof(auth));
    if (!p->hc) {
        free(p);
        free(text);
        return NULL;
    }
    if (len)
        http_client_write(p->hc, text, len);
    http_client_end(p->hc);
    free(text);
    return p;
}

void kube_egress_push_cancel(struct kube_egress_push *p)
{
    if (!p)
        return;
    http_client_close(p->hc);
    free(p);
}
