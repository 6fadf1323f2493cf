/* Data-plane target extraction. See dataplane_target.h. */
#include "agent/dataplane_target.h"

#include "agentbox/common.h"
#include "agentbox/sbxid.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

int dp_target_port(const char *s, size_t len)
{
    int port = 0;
    if (len == 0 || len > 5)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        port = port * 10 + (s[i] - '0');
    }
    return port >= 1 && port <= 65535 ? port : 0;
}

static int copy_target(const char *target, struct dp_target *t, char *err, size_t errlen)
{
    if (ab_strlcpy(t->path, target, sizeof(t->path)) >= sizeof(t->path)) {
        snprintf(err, errlen, "request target is longer than %zu bytes", sizeof(t->path) - 1);
        return AB_EINVAL;
    }
    return 0;
}

static int from_headers(const struct dp_target_req *req, const char *target, struct dp_target *t,
                        char *err, size_t errlen)
{
    const struct {
        const char *id_name, *port_name, *id, *port;
    } pairs[] = {
        {"E2b-Sandbox-Id", "E2b-Sandbox-Port", req->e2b_id, req->e2b_port},
        {"X-Sandbox-Id", "X-Sandbox-Port", req->x_id, req->x_port},
    };
    for (size_t i = 0; i < AB_ARRAY_LEN(pairs); i++) {
        const char *id = pairs[i].id, *port = pairs[i].port;
        if ((!id || !id[0]) && !port)
            continue;
        if (!id || !id[0]) {
            snprintf(err, errlen, "missing %s header when %s is set", pairs[i].id_name,
                     pairs[i].port_name);
            return AB_EINVAL;
        }
        if (!port) {
            snprintf(err, errlen, "missing %s header when %s is set", pairs[i].port_name,
                     pairs[i].id_name);
            return AB_EINVAL;
        }
        if (!(t->port = dp_target_port(port, strlen(port)))) {
            snprintf(err, errlen, "invalid port in %s header: must be an integer from 1 to 65535",
                     pairs[i].port_name);
            return AB_EINVAL;
        }
        if (ab_strlcpy(t->id, id, sizeof(t->id)) >= sizeof(t->id)) {
            snprintf(err, errlen, "%s is longer than %zu characters", pairs[i].id_name,
                     sizeof(t->id) - 1);
            return AB_EINVAL;
        }
        return copy_target(target, t, err, errlen);
    }
    return AB_ENOENT;
}

/* label = "<port>-<id>"; with a domain a mismatch is an error, without one the
 * request simply names no sandbox. */
static int from_label(const char *label, size_t len, const char *host, const char *domain,
                      const char *target, struct dp_target *t, char *err, size_t errlen)
{
    const char *dash = memchr(label, '-', len);
    char cluster[SBXID_CLUSTER_MAX + 1];
    size_t idlen = dash ? len - (size_t)(dash + 1 - label) : 0;

    t->port = dash ? dp_target_port(label, (size_t)(dash - label)) : 0;
    if (t->port && idlen > 0 && idlen < sizeof(t->id)) {
        memcpy(t->id, dash + 1, idlen);
        t->id[idlen] = '\0';
        if (!domain && sbxid_cluster_of(t->id, cluster) != 0)
            return AB_ENOENT; /* not ours to read without a configured domain */
        return copy_target(target, t, err, errlen);
    }
    if (!domain)
        return AB_ENOENT;
    snprintf(err, errlen, "host '%.200s' must be <port>-<sandbox id>.%s", host, domain);
    return AB_EINVAL;
}

static int from_host(const char *h, const char *domain, const char *target, struct dp_target *t,
                     char *err, size_t errlen)
{
    char host[256];
    size_t n;

    if (!h || !h[0] || strlen(h) >= sizeof(host))
        return AB_ENOENT;
    ab_strlcpy(host, h, sizeof(host));
    if (host[0] != '[') { /* drop :port (not from an IPv6 literal) */
        char *colon = strrchr(host, ':');
        if (colon)
            *colon = '\0';
    }
    n = strlen(host);
    if (n && host[n - 1] == '.')
        host[--n] = '\0';
    if (domain && domain[0]) {
        /* the domain the SDK is given may carry the port its URLs need
         * ("sandboxes.example:8443"); hosts are compared without it */
        const char *dc = domain[0] != '[' ? strrchr(domain, ':') : NULL;
        size_t dl = dc ? (size_t)(dc - domain) : strlen(domain);
        if (n <= dl + 1 || host[n - dl - 1] != '.' || strncasecmp(host + n - dl, domain, dl) != 0)
            return AB_ENOENT;
        size_t ll = n - dl - 1;
        if (memchr(host, '.', ll)) {
            snprintf(err, errlen, "host '%.200s' must be <port>-<sandbox id>.%s (one label)", host,
                     domain);
            return AB_EINVAL;
        }
        return from_label(host, ll, host, domain, target, t, err, errlen);
    }
    const char *dot = strchr(host, '.');
    if (!dot)
        return AB_ENOENT;
    return from_label(host, (size_t)(dot - host), host, NULL, target, t, err, errlen);
}

static int from_path(const char *target, struct dp_target *t, char *err, size_t errlen)
{
    const char *q = strpbrk(target, "?#");
    size_t plen = q ? (size_t)(q - target) : strlen(target);
    const char *at = NULL;

    for (const char *p = target; p + 11 <= target + plen; p++) {
        if (memcmp(p, "/sandboxes/", 11) == 0) {
            at = p + 11;
            break;
        }
    }
    if (!at)
        return AB_ENOENT;
    const char *end = target + plen;
    const char *s1 = memchr(at, '/', (size_t)(end - at));
    if (!s1 || s1 == at) {
        snprintf(err, errlen,
                 "URL path after sandboxes/ must contain at least sandbox ID and port");
        return AB_EINVAL;
    }
    const char *pstart = s1 + 1;
    const char *s2 = memchr(pstart, '/', (size_t)(end - pstart));
    const char *pend = s2 ? s2 : end;
    if (pend == pstart) {
        snprintf(err, errlen,
                 "URL path after sandboxes/ must contain at least sandbox ID and port");
        return AB_EINVAL;
    }
    if (!(t->port = dp_target_port(pstart, (size_t)(pend - pstart)))) {
        snprintf(err, errlen, "invalid port number \"%.*s\" in URL path",
                 (int)AB_MIN(pend - pstart, 16), pstart);
        return AB_EINVAL;
    }
    size_t idlen = (size_t)(s1 - at);
    if (idlen >= sizeof(t->id)) {
        snprintf(err, errlen, "sandbox id in the URL path is longer than %zu characters",
                 sizeof(t->id) - 1);
        return AB_EINVAL;
    }
    memcpy(t->id, at, idlen);
    t->id[idlen] = '\0';
    /* "/" + the rest of the path, then the original query */
    int k = snprintf(t->path, sizeof(t->path), "/%.*s%s", s2 ? (int)(end - s2 - 1) : 0,
                     s2 ? s2 + 1 : "", q ? q : "");
    if (k < 0 || (size_t)k >= sizeof(t->path)) {
        snprintf(err, errlen, "request target is longer than %zu bytes", sizeof(t->path) - 1);
        return AB_EINVAL;
    }
    return 0;
}

int dp_target_cluster(const struct dp_target *t, char *cluster, char *err, size_t errlen)
{
    if (sbxid_cluster_of(t->id, cluster) == 0)
        return 0;
    snprintf(err, errlen,
             "sandbox id '%.100s' is malformed: expected <cluster>-<%d "
             "characters [a-z0-9]>",
             t->id, SBXID_SUFFIX_LEN);
    return AB_EINVAL;
}

int dp_target_parse(const struct dp_target_req *req, const char *domain, struct dp_target *t,
                    char *err, size_t errlen)
{
    const char *target = req->target ? req->target : "";
    int rc;

    memset(t, 0, sizeof(*t));
    if ((rc = from_headers(req, target, t, err, errlen)) != AB_ENOENT)
        return rc;
    if ((rc = from_host(req->host, domain, target, t, err, errlen)) != AB_ENOENT)
        return rc;
    return from_path(target, t, err, errlen);
}
