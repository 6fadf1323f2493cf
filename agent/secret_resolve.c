/* A claim's secrets from the hub's vault (secret_resolve.h). */
#include "agent/secret_resolve.h"

#include "agent/hub_link.h"
#include "agentbox/assertion.h"
#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct op {
    struct egress_secrets *s;
    secret_resolve_cb cb;
    void *arg;
    size_t n;
    char names[SECRET_RESOLVE_NAMES_MAX][EGRESS_SECRET_NAME_MAX + 1];
};

json_t *secret_resolve_names_json(const struct egress_policy *p, size_t *n)
{
    char names[SECRET_RESOLVE_NAMES_MAX][EGRESS_SECRET_NAME_MAX + 1];
    *n = egress_policy_secret_names(p, names, SECRET_RESOLVE_NAMES_MAX);
    if (*n == 0 || *n > SECRET_RESOLVE_NAMES_MAX)
        return NULL;
    json_t *a = json_array();
    for (size_t i = 0; a && i < *n; i++)
        json_array_append_new(a, json_string(names[i]));
    return a;
}

/* jansson keeps its own copies of strings; wipe them before json_decref. */
static void wipe_json(json_t *j)
{
    size_t i;
    const char *k;
    json_t *v;
    if (json_is_string(j)) {
        OPENSSL_cleanse((char *)json_string_value(j), json_string_length(j));
    } else if (json_is_array(j)) {
        json_array_foreach(j, i, v) wipe_json(v);
    } else if (json_is_object(j)) {
        json_object_foreach(j, k, v) wipe_json(v);
    }
}

int secret_resolve_parse(const char *body, size_t len,
                         const char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t n,
                         struct egress_secrets *s, char *err, size_t errlen)
{
    json_t *b = body ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *arr = json_object_get(b, "secrets");
    int rc = 0;
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "the hub's vault answer has no secrets array");
        rc = AB_EIO;
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        json_t *hit = NULL, *e;
        size_t k;
        json_array_foreach(arr, k, e)
        {
            const char *nm = json_string_value(json_object_get(e, "name"));
            if (nm && strcasecmp(nm, names[i]) == 0) /* the vault keeps names lower case */
                hit = e;
        }
        json_t *v = json_object_get(hit, "value");
        if (!hit || !json_is_true(json_object_get(hit, "found"))) {
            snprintf(err, errlen, "unknown secret \"%s\": the vault has no secret of that name",
                     names[i]);
            rc = AB_ENOENT;
        } else if (!json_is_string(v)) {
            snprintf(err, errlen, "the hub's vault answer for secret \"%s\" has no string value",
                     names[i]);
            rc = AB_EIO;
        } else {
            rc = egress_secrets_set(s, names[i], json_string_value(v), json_string_length(v), err,
                                    errlen);
        }
    }
out:
    wipe_json(b);
    json_decref(b);
    return rc;
}

static void answered(const struct tun_call_result *res, void *arg)
{
    struct op *o = arg;
    char err[SECRET_RESOLVE_ERR_MAX] = "";
    int rc;
    if (res->status == 200) {
        rc = secret_resolve_parse(res->body, res->body_len,
                                  (const char(*)[EGRESS_SECRET_NAME_MAX + 1]) o->names, o->n, o->s,
                                  err, sizeof(err));
    } else if (res->status == 0) {
        snprintf(err, sizeof(err), "the hub's vault could not be asked: %s",
                 res->error ? res->error : "no answer");
        rc = AB_EIO;
    } else {
        /* The hub's refusal words name the claim or the secret, never a value. */
        json_t *b = json_loadb(res->body, res->body_len, 0, NULL);
        const char *m = json_string_value(json_object_get(b, "message"));
        snprintf(err, sizeof(err), "the hub's vault refused (%d): %.400s", res->status,
                 m ? m : "no message");
        json_decref(b);
        rc = res->status == 401 || res->status == 403 ? AB_EDENIED : AB_EIO;
    }
    /* The answer held the values; it is freed by the tunnel right after this. */
    if (res->body && res->body_len)
        OPENSSL_cleanse((char *)res->body, res->body_len);
    o->cb(rc, o->s, rc ? err : NULL, o->arg);
    free(o);
}

int secret_resolve(struct hub_link *hl, const char *sandbox_id, const char *assertion,
                   const char (*names)[EGRESS_SECRET_NAME_MAX + 1], size_t n,
                   struct egress_secrets *s, secret_resolve_cb cb, void *arg, char *err,
                   size_t errlen)
{
    if (n == 0 || n > SECRET_RESOLVE_NAMES_MAX) {
        snprintf(err, errlen, "a resolve asks for 1 to %d secret names, not %zu",
                 SECRET_RESOLVE_NAMES_MAX, n);
        return AB_EINVAL;
    }
    if (!assertion || !assertion[0]) {
        snprintf(err, errlen,
                 "secrets are resolved with the principal's assertion, and this request has "
                 "none: authenticate with an API key the hub knows");
        return AB_EDENIED;
    }
    struct op *o = calloc(1, sizeof(*o));
    json_t *a = json_array(), *b = NULL;
    char *body = NULL;
    int rc = AB_ENOMEM;
    if (!o || !a)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        memcpy(o->names[i], names[i], sizeof(o->names[i]));
        json_array_append_new(a, json_string(names[i]));
    }
    b = json_pack("{s:s,s:O}", "sandboxId", sandbox_id, "names", a);
    body = b ? json_dumps(b, JSON_COMPACT) : NULL;
    if (!body)
        goto fail;
    o->n = n;
    o->s = s;
    o->cb = cb;
    o->arg = arg;
    struct tun_header h[] = {{"Content-Type", "application/json"}, {ASRT_HEADER, assertion}};
    rc = hub_link_call_within(hl, SECRET_RESOLVE_TIMEOUT_MS, "POST", SECRET_RESOLVE_PATH, h, 2,
                              body, strlen(body), SECRET_RESOLVE_BODY_MAX, answered, o);
    if (rc != 0) {
        hub_link_unreachable(hl, NULL, err, errlen);
        goto fail;
    }
    free(body);
    json_decref(b);
    json_decref(a);
    return 0;
fail:
    if (rc == AB_ENOMEM)
        snprintf(err, errlen, "out of memory asking the hub's vault");
    free(body);
    json_decref(b);
    json_decref(a);
    free(o);
    return rc;
}
