/* What the E2B surface refuses, and how (reference §2.3, §2.9, §5.5):
 *   - create fields AgentBox cannot honour → 400 naming the alternative;
 *   - egress filtering on a runtime without an egress gateway → the
 *     fail-closed 400 (never run a sandbox unfiltered that asked for a filter);
 *   - operations of the E2B OpenAPI surface AgentBox does not offer → 501 with
 *     the catalogue text, counted in agentbox_e2b_unsupported_total. */
#include "agent/e2b/e2b.h"

#include "agent/auth.h"
#include "agent/egress/policy.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/metrics.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* --- create: the 400 list ------------------------------------------------------------- */

static bool is_true(json_t *v)
{
    return v && json_is_true(v);
}

static bool non_empty(json_t *v)
{
    if (!v || json_is_null(v))
        return false;
    if (json_is_object(v))
        return json_object_size(v) > 0;
    if (json_is_array(v))
        return json_array_size(v) > 0;
    if (json_is_string(v))
        return json_string_length(v) > 0;
    if (json_is_boolean(v))
        return json_is_true(v);
    return true;
}

/* The network object is judged by the one parser the gateway's policy comes
 * from (agent/egress/policy.c): the same 400s for a create and an update,
 * naming the field. Then what this agent cannot honour yet, failing closed. */
int e2b_refuse_network(struct e2b *e, json_t *net, bool internet, bool live, char *err,
                       size_t errlen)
{
    json_t *rules;

    if (!net || json_is_null(net))
        return 0;
    if (!json_is_object(net)) {
        snprintf(err, errlen, "network must be an object");
        return AB_EINVAL;
    }
    if (non_empty(json_object_get(net, "egressProxy"))) {
        snprintf(err, errlen,
                 "network.egressProxy is not supported: AgentBox filters egress with its own "
                 "in-sandbox gateway, not a bring-your-own SOCKS5 proxy; use network.allowOut, "
                 "network.denyOut and network.rules");
        return AB_EINVAL;
    }
    if (non_empty(json_object_get(net, "httpsPorts"))) {
        snprintf(err, errlen,
                 "network.httpsPorts is not supported: the egress gateway inspects TLS on every "
                 "port it allows; drop the field");
        return AB_EINVAL;
    }
    if (json_object_get(net, "maskRequestHost") &&
        !json_is_null(json_object_get(net, "maskRequestHost"))) {
        snprintf(err, errlen,
                 "network.maskRequestHost is not supported: the data plane forwards the Host "
                 "header as sent; drop the field");
        return AB_EINVAL;
    }
    /* allow-private-networks only widens what a rule's host may be, and rules
     * are refused below either way */
    const struct egress_opts opts = {.internet = internet};
    struct egress_policy *p = NULL;
    int rc = egress_policy_parse(net, &opts, &p, err, errlen);
    egress_policy_free(p);
    if (rc != 0)
        return rc;
    rules = json_object_get(net, "rules");
    bool lists =
        non_empty(json_object_get(net, "allowOut")) || non_empty(json_object_get(net, "denyOut"));
    if (non_empty(rules) && rt_has(e2b_rt(e), RT_CAP_EGRESS)) {
        /* egress-secrets: once the gateway intercepts TLS for hosts with rules
         * (agent/egress/gateway.c, conn_decide), this refusal goes */
        snprintf(err, errlen,
                 "network.rules (vault secrets injected into requests) needs the egress "
                 "gateway's TLS interception, which this agent does not have yet, so AgentBox "
                 "refuses rather than send the requests without them; drop network.rules "
                 "(network.allowOut and network.denyOut are enforced)");
        return AB_EDENIED;
    }
    if ((lists || non_empty(rules)) && !rt_has(e2b_rt(e), RT_CAP_EGRESS)) {
        snprintf(err, errlen,
                 "egress filtering (network.allowOut, network.denyOut, network.rules) needs an "
                 "egress gateway, and the %s runtime has none, so AgentBox refuses rather than "
                 "run the sandbox unfiltered; %s use allow_internet_access=false to cut all "
                 "egress, or run on the kube runtime with overrides.gateway.enabled on the "
                 "SandboxEnv",
                 e2b_runtime_kind(e),
                 live ? "PUT /sandboxes/{sandboxID}/network cannot add it either;" : "");
        return AB_EDENIED;
    }
    return 0;
}

size_t e2b_rule_secrets(json_t *net, char (*names)[E2B_SECRET_NAME_MAX + 1], size_t max)
{
    json_t *rules = json_object_get(net, "rules");
    const char *host;
    json_t *list;
    size_t n = 0;

    json_object_foreach(rules, host, list)
    {
        size_t i;
        json_t *rule;
        json_array_foreach(list, i, rule)
        {
            json_t *hdrs = json_object_get(json_object_get(rule, "transform"), "headers");
            const char *hn;
            json_t *v;
            json_object_foreach(hdrs, hn, v)
            {
                const char *p = json_string_value(v);
                for (p = p ? strstr(p, "${e2b.secrets.") : NULL; p;
                     p = strstr(p + 1, "${e2b.secrets.")) {
                    const char *q = p + 14;
                    size_t len = strcspn(q, "}");
                    char name[E2B_SECRET_NAME_MAX + 1];
                    bool dup = false;
                    if (len == 0 || len > E2B_SECRET_NAME_MAX)
                        continue;
                    for (size_t k = 0; k < len; k++)
                        name[k] = (char)tolower((unsigned char)q[k]);
                    name[len] = '\0';
                    if (strncmp(name, "sec_", 4) == 0)
                        memmove(name, name + 4, len - 3);
                    for (size_t k = 0; k < n && !dup; k++)
                        dup = strcmp(names[k], name) == 0;
                    if (!dup && n < max)
                        memcpy(names[n++], name, sizeof(name));
                }
            }
        }
    }
    return n;
}

int e2b_refuse_create(struct e2b *e, json_t *b, char *err, size_t errlen)
{
    json_t *v;

    if (is_true(json_object_get(b, "autoPause"))) {
        snprintf(err, errlen,
                 "autoPause is not supported: AgentBox has no pause (a sandbox is claimed from "
                 "a pre-warmed pool, with no snapshot storage); set a longer timeout or call "
                 "POST /sandboxes/{sandboxID}/timeout");
        return AB_EINVAL;
    }
    v = json_object_get(b, "autoResume");
    if (v && is_true(json_object_get(v, "enabled"))) {
        snprintf(err, errlen,
                 "autoResume is not supported: AgentBox has no pause, so nothing is ever "
                 "resumed; set a longer timeout or call POST /sandboxes/{sandboxID}/timeout");
        return AB_EINVAL;
    }
    v = json_object_get(b, "iam");
    if (v && non_empty(json_object_get(v, "tokens"))) {
        snprintf(err, errlen,
                 "iam.tokens is not supported: store the credential with POST /secrets and "
                 "reference it as ${e2b.secrets.<name>} in a network.rules header");
        return AB_EINVAL;
    }
    v = json_object_get(b, "mcp");
    if (v && !json_is_null(v)) {
        snprintf(err, errlen,
                 "mcp is not supported: run the MCP server as a command inside the sandbox "
                 "(commands.run)");
        return AB_EINVAL;
    }
    if (non_empty(json_object_get(b, "volumeMounts"))) {
        snprintf(err, errlen,
                 "volumeMounts is not supported: storage is declared on the SandboxEnv (a "
                 "volume every sandbox of the env gets), not per sandbox");
        return AB_EINVAL;
    }
    v = json_object_get(b, "allow_internet_access");
    bool internet = !(v && json_is_false(v));
    return e2b_refuse_network(e, json_object_get(b, "network"), internet, false, err, errlen);
}

/* --- the 501 catalogue ---------------------------------------------------------------- */

static const char MSG_PAUSE[] =
    "pause and resume are not supported: a sandbox is claimed from a pre-warmed pool and "
    "there is no snapshot storage; keep it alive with POST /sandboxes/{sandboxID}/timeout or "
    "create a new one";
static const char MSG_SNAPSHOT[] =
    "snapshots are not supported: sandboxes are processes or Pods, not Firecracker microVMs; "
    "persist state to a volume declared on the SandboxEnv";
static const char MSG_FORK[] =
    "fork is not supported (it needs a snapshot): create a second sandbox and copy the files "
    "you need";
static const char MSG_VOLUMES[] =
    "per-sandbox volumes cannot be created here: storage is a volume declared on the "
    "SandboxEnv";
static const char MSG_ADMIN[] =
    "cluster and team administration is not exposed on the E2B API: use the native API or "
    "the console";
static const char MSG_TOKENS[] =
    "access tokens are not supported: send X-API-Key: agbx_..., and create keys with POST "
    "/api-keys";
static const char MSG_BUILDS[] =
    "template builds are not supported here: a template is a SandboxEnv over a prebuilt image; "
    "build the image with your CI and create the Env in the console; GET /templates and GET "
    "/templates/{templateID} work";
static const char MSG_TAGS[] =
    "template tags are not supported: an Env is versioned by its pool image; point the Env at "
    "a new image tag";
static const char MSG_ALIAS[] =
    "alias lookup is not implemented: GET /templates/{templateID} accepts an Env name";
static const char MSG_V2_TEMPLATES[] = "GET /v2/templates is not implemented: use GET /templates";
static const char MSG_PATCH_KEY[] =
    "renaming an API key is not supported: delete it (DELETE /api-keys/{apiKeyID}) and create "
    "a new one";

struct unsup {
    const char *method, *pattern, *operation, *category, *message;
};

/* Order matters where patterns overlap: first match wins. */
static const struct unsup catalogue[] = {
    {"POST", "/sandboxes/{id}/pause", "PostSandboxesSandboxIDPause", "architectural", MSG_PAUSE},
    {"POST", "/sandboxes/{id}/resume", "PostSandboxesSandboxIDResume", "architectural", MSG_PAUSE},
    {"POST", "/sandboxes/{id}/snapshots", "PostSandboxesSandboxIDSnapshots", "architectural",
     MSG_SNAPSHOT},
    {"GET", "/snapshots", "GetSnapshots", "architectural", MSG_SNAPSHOT},
    {"POST", "/sandboxes/{id}/fork", "PostSandboxesSandboxIDFork", "architectural", MSG_FORK},
    {"GET", "/volumes", "GetVolumes", "architectural", MSG_VOLUMES},
    {"POST", "/volumes", "PostVolumes", "architectural", MSG_VOLUMES},
    {"GET", "/volumes/{id}", "GetVolumesVolumeID", "architectural", MSG_VOLUMES},
    {"DELETE", "/volumes/{id}", "DeleteVolumesVolumeID", "architectural", MSG_VOLUMES},
    {"GET", "/nodes", "GetNodes", "architectural", MSG_ADMIN},
    {"GET", "/nodes/{id}", "GetNodesNodeID", "architectural", MSG_ADMIN},
    {"POST", "/nodes/{id}", "PostNodesNodeID", "architectural", MSG_ADMIN},
    {"GET", "/teams", "GetTeams", "architectural", MSG_ADMIN},
    {"GET", "/teams/{id}/metrics", "GetTeamsTeamIDMetrics", "architectural", MSG_ADMIN},
    {"GET", "/teams/{id}/metrics/max", "GetTeamsTeamIDMetricsMax", "architectural", MSG_ADMIN},
    {"GET", "/admin/sandboxes/running-counts", "GetAdminSandboxesRunningCounts", "architectural",
     MSG_ADMIN},
    {"POST", "/admin/teams/{id}/builds/cancel", "PostAdminTeamsTeamIDBuildsCancel", "architectural",
     MSG_ADMIN},
    {"POST", "/admin/teams/{id}/api-keys", "PostAdminTeamsTeamIDApiKeys", "architectural",
     MSG_ADMIN},
    {"DELETE", "/admin/teams/{id}/api-keys/{key}", "DeleteAdminTeamsTeamIDApiKeysApiKeyID",
     "architectural", MSG_ADMIN},
    {"POST", "/admin/teams/{id}/sandboxes/kill", "PostAdminTeamsTeamIDSandboxesKill",
     "architectural", MSG_ADMIN},
    {"POST", "/access-tokens", "PostAccessTokens", "architectural", MSG_TOKENS},
    {"DELETE", "/access-tokens/{id}", "DeleteAccessTokensAccessTokenID", "architectural",
     MSG_TOKENS},
    {"POST", "/templates/tags", "PostTemplatesTags", "platform", MSG_TAGS},
    {"DELETE", "/templates/tags", "DeleteTemplatesTags", "platform", MSG_TAGS},
    {"GET", "/templates/aliases/{alias}", "GetTemplatesAliasesAlias", "unimplemented", MSG_ALIAS},
    {"GET", "/templates/{id}/tags", "GetTemplatesTemplateIDTags", "platform", MSG_TAGS},
    {"POST", "/templates", "PostTemplates", "platform", MSG_BUILDS},
    {"POST", "/templates/{id}", "PostTemplatesTemplateID", "platform", MSG_BUILDS},
    {"PATCH", "/templates/{id}", "PatchTemplatesTemplateID", "platform", MSG_BUILDS},
    {"DELETE", "/templates/{id}", "DeleteTemplatesTemplateID", "platform", MSG_BUILDS},
    {"POST", "/templates/{id}/builds/{build}", "PostTemplatesTemplateIDBuildsBuildID", "platform",
     MSG_BUILDS},
    {"GET", "/templates/{id}/builds/{build}/logs", "GetTemplatesTemplateIDBuildsBuildIDLogs",
     "platform", MSG_BUILDS},
    {"GET", "/templates/{id}/builds/{build}/status", "GetTemplatesTemplateIDBuildsBuildIDStatus",
     "platform", MSG_BUILDS},
    {"GET", "/templates/{id}/files/{hash}", "GetTemplatesTemplateIDFilesHash", "platform",
     MSG_BUILDS},
    {"POST", "/v2/templates", "PostV2Templates", "platform", MSG_BUILDS},
    {"PATCH", "/v2/templates/{id}", "PatchV2TemplatesTemplateID", "platform", MSG_BUILDS},
    {"POST", "/v2/templates/{id}/builds/{build}", "PostV2TemplatesTemplateIDBuildsBuildID",
     "platform", MSG_BUILDS},
    {"POST", "/v3/templates", "PostV3Templates", "platform", MSG_BUILDS},
    {"GET", "/v2/templates", "GetV2Templates", "unimplemented", MSG_V2_TEMPLATES},
    {"PATCH", "/api-keys/{id}", "PatchApiKeysApiKeyID", "unimplemented", MSG_PATCH_KEY},
};

void e2b_unsupported(struct e2b *e, struct http_exchange *ex, const char *operation,
                     const char *category, const char *message)
{
    const char *labels[] = {operation, category};
    metrics_add(e->m_unsupported, labels, 1);
    json_t *b = json_pack("{s:i,s:s}", "code", 501, "message", message);
    http_respond_json(ex, 501, b);
}

static void unsup_done(struct http_exchange *ex, const struct agent_principal *p, void *arg)
{
    const struct e2b_unsup_op *o = arg;
    const struct unsup *u = o->entry;
    (void)p;
    e2b_unsupported(o->e, ex, u->operation, u->category, u->message);
}

static void h_unsup(struct http_exchange *ex, void *arg)
{
    const struct e2b_unsup_op *o = arg;
    agent_auth_request(o->e->d.auth, ex, unsup_done, arg);
}

int e2b_unsupported_routes(struct e2b *e, char *err, size_t errlen)
{
    _Static_assert(AB_ARRAY_LEN(catalogue) <= E2B_UNSUP_MAX, "E2B_UNSUP_MAX is too small");
    for (size_t i = 0; i < AB_ARRAY_LEN(catalogue); i++) {
        const struct unsup *u = &catalogue[i];
        struct http_route r = {u->method, u->pattern, h_unsup, &e->unsup_ops[i], 0};
        e->unsup_ops[i] = (struct e2b_unsup_op){e, u};
        int rc = e2b_route_raw(e, &r, err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}
