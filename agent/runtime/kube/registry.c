/* Registry host rewrite (see registry.h for the rule format). */
#include "agent/runtime/kube/registry.h"

#include "agentbox/common.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* host[:port]: DNS characters, a port of digits. */
static bool host_ok(const char *s, size_t n)
{
    const char *colon = memchr(s, ':', n);
    size_t hn = colon ? (size_t)(colon - s) : n;

    if (hn == 0 || n >= KUBE_REWRITE_HOST_MAX || s[0] == '-' || s[0] == '.')
        return false;
    for (size_t i = 0; i < hn; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.')
            return false;
    if (colon) {
        size_t pn = n - hn - 1;
        if (pn == 0 || pn > 5)
            return false;
        for (size_t i = hn + 1; i < n; i++)
            if (!isdigit((unsigned char)s[i]))
                return false;
    }
    return true;
}

/* TO: host[:port] then an optional /path of repository characters, no empty
 * component and no trailing '/' (the image's path is appended after one). */
static bool target_ok(const char *s, size_t n)
{
    const char *slash = memchr(s, '/', n);
    if (!host_ok(s, slash ? (size_t)(slash - s) : n))
        return false;
    if (!slash)
        return true;
    for (const char *p = slash; p < s + n; p++) {
        if (*p == '/') {
            if (p + 1 == s + n || p[1] == '/')
                return false;
        } else if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '.' &&
                   *p != '_' && *p != '-') {
            return false;
        }
    }
    return true;
}

int kube_rewrite_parse(struct kube_rewrite *rw, const char *spec, const char *what, char *err,
                       size_t errlen)
{
    struct kube_rewrite tmp = *rw;
    const char *p = spec ? spec : "";
    int idx = 0;

    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *a = p, *b = p + len;
        idx++;
        while (a < b && isspace((unsigned char)*a))
            a++;
        while (b > a && isspace((unsigned char)b[-1]))
            b--;
        if (a == b) {
            /* "a=b," or ",": an empty item is a typo worth naming, not a rule. */
            snprintf(err, errlen, "%s: rule %d is empty (want FROM=TO[,FROM=TO...])", what, idx);
            return AB_EINVAL;
        }
        const char *eq = memchr(a, '=', (size_t)(b - a));
        if (!eq) {
            snprintf(err, errlen, "%s: rule %d '%.*s' must be FROM=TO (registry hosts)", what, idx,
                     (int)AB_MIN(b - a, 120), a);
            return AB_EINVAL;
        }
        if (!host_ok(a, (size_t)(eq - a))) {
            snprintf(err, errlen,
                     "%s: rule %d: FROM '%.*s' must be a registry host[:port] (letters, digits, "
                     "'.', '-')",
                     what, idx, (int)AB_MIN(eq - a, 120), a);
            return AB_EINVAL;
        }
        if (!target_ok(eq + 1, (size_t)(b - eq - 1))) {
            snprintf(err, errlen,
                     "%s: rule %d: TO '%.*s' must be a registry host[:port] with an optional "
                     "/path (lowercase, digits, '.', '_', '-'; no trailing '/')",
                     what, idx, (int)AB_MIN(b - eq - 1, 120), eq + 1);
            return AB_EINVAL;
        }
        if (tmp.n >= KUBE_REWRITE_RULES_MAX) {
            snprintf(err, errlen,
                     "%s: at most %d rules (annotation and --registry-rewrite together)", what,
                     KUBE_REWRITE_RULES_MAX);
            return AB_EINVAL;
        }
        struct kube_rewrite_rule *r = &tmp.r[tmp.n++];
        snprintf(r->from, sizeof(r->from), "%.*s", (int)(eq - a), a);
        snprintf(r->to, sizeof(r->to), "%.*s", (int)(b - eq - 1), eq + 1);
        if (!end)
            break;
        p = end + 1;
        if (!*p) {
            snprintf(err, errlen, "%s: rule %d is empty (trailing ',')", what, idx + 1);
            return AB_EINVAL;
        }
    }
    *rw = tmp;
    return 0;
}

/* The distribution reference rule: the first '/'-separated component is a
 * registry host when it has a '.' or ':' or is "localhost"; otherwise the
 * name is on Docker Hub. */
void kube_image_host(const char *image, char *host, size_t hostlen, const char **rest)
{
    const char *slash = strchr(image, '/');
    if (slash) {
        size_t n = (size_t)(slash - image);
        const char *dot = memchr(image, '.', n), *colon = memchr(image, ':', n);
        if (dot || colon || (n == 9 && strncmp(image, "localhost", 9) == 0)) {
            snprintf(host, hostlen, "%.*s", (int)n, image);
            *rest = slash + 1;
            return;
        }
    }
    snprintf(host, hostlen, "docker.io");
    *rest = image;
}

int kube_rewrite_image(const struct kube_rewrite *rw, const char *image, char *out, size_t outlen,
                       bool *changed)
{
    char host[KUBE_REWRITE_HOST_MAX];
    const char *rest;
    int n = -1;

    if (changed)
        *changed = false;
    kube_image_host(image, host, sizeof(host), &rest);
    for (int i = 0; rw && i < rw->n; i++) {
        if (strcasecmp(rw->r[i].from, host) != 0)
            continue;
        /* Docker Hub's one-component names live under library/; a mirror
         * does not imply it. */
        bool hub = strcasecmp(host, "docker.io") == 0 || strcasecmp(host, "index.docker.io") == 0;
        const char *first_slash = strchr(rest, '/');
        n = snprintf(out, outlen, "%s/%s%s", rw->r[i].to, hub && !first_slash ? "library/" : "",
                     rest);
        if (changed)
            *changed = true;
        break;
    }
    if (n < 0)
        n = snprintf(out, outlen, "%s", image);
    if (n < 0 || (size_t)n >= outlen) {
        if (outlen)
            out[0] = '\0';
        return AB_EINVAL;
    }
    return 0;
}
