/* Secret values held for one sandbox (secrets.h). */
#include "agent/egress/secrets.h"

#include "agentbox/common.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct secret {
    char name[EGRESS_SECRET_NAME_MAX + 1];
    char *value; /* len bytes, NUL-terminated */
    size_t len;
};

struct egress_secrets {
    size_t n;
    struct secret v[EGRESS_SECRETS_MAX];
};

static const char NAME_CHARS[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";

struct egress_secrets *egress_secrets_new(void)
{
    return calloc(1, sizeof(struct egress_secrets));
}

static void wipe(struct secret *e)
{
    if (e->value) {
        OPENSSL_cleanse(e->value, e->len);
        free(e->value);
    }
    e->value = NULL;
    e->len = 0;
}

void egress_secrets_free(struct egress_secrets *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        wipe(&s->v[i]);
    OPENSSL_cleanse(s, sizeof(*s));
    free(s);
}

size_t egress_secrets_count(const struct egress_secrets *s)
{
    return s ? s->n : 0;
}

struct egress_secrets *egress_secrets_dup(const struct egress_secrets *s)
{
    struct egress_secrets *d = egress_secrets_new();
    for (size_t i = 0; d && s && i < s->n; i++) {
        char *v = malloc(s->v[i].len + 1);
        if (!v) {
            egress_secrets_free(d);
            return NULL;
        }
        memcpy(v, s->v[i].value, s->v[i].len + 1);
        d->v[i] = s->v[i];
        d->v[i].value = v;
        d->n++;
    }
    return d;
}

static int bad_byte(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

int egress_secrets_set(struct egress_secrets *s, const char *name, const char *value, size_t len,
                       char *err, size_t errlen)
{
    size_t nl = name ? strlen(name) : 0;
    if (nl == 0 || nl > EGRESS_SECRET_NAME_MAX || strspn(name, NAME_CHARS) != nl) {
        snprintf(err, errlen, "secret name must be 1-%d characters of [A-Za-z0-9_-]",
                 EGRESS_SECRET_NAME_MAX);
        return AB_EINVAL;
    }
    if (len > EGRESS_SECRET_VALUE_MAX) {
        snprintf(err, errlen, "secret %s is longer than %d bytes", name, EGRESS_SECRET_VALUE_MAX);
        return AB_ELIMIT;
    }
    for (size_t i = 0; i < len; i++)
        if (bad_byte((unsigned char)value[i])) {
            snprintf(err, errlen,
                     "secret %s holds a control character and cannot be sent in a header", name);
            return AB_EINVAL;
        }
    struct secret *e = NULL;
    for (size_t i = 0; i < s->n && !e; i++)
        if (strcasecmp(s->v[i].name, name) == 0)
            e = &s->v[i];
    if (!e && s->n == EGRESS_SECRETS_MAX) {
        snprintf(err, errlen, "a sandbox holds at most %d secrets", EGRESS_SECRETS_MAX);
        return AB_ELIMIT;
    }
    char *copy = malloc(len + 1);
    if (!copy)
        return AB_ENOMEM;
    memcpy(copy, value, len);
    copy[len] = '\0';
    if (!e) {
        e = &s->v[s->n++];
        memcpy(e->name, name, nl + 1);
    } else {
        wipe(e);
    }
    e->value = copy;
    e->len = len;
    return 0;
}

static const struct secret *find(const struct egress_secrets *s, const char *name, size_t nl)
{
    for (size_t i = 0; s && i < s->n; i++)
        if (strlen(s->v[i].name) == nl && strncasecmp(s->v[i].name, name, nl) == 0)
            return &s->v[i];
    return NULL;
}

int egress_secrets_fill(const struct egress_secrets *s, const char *tmpl, char *out, size_t cap,
                        size_t *outlen, char *err, size_t errlen)
{
    static const char REF[] = "${e2b.secrets.";
    size_t o = 0;
    int rc = 0;
    const char *p = tmpl;
    if (cap == 0)
        return AB_ELIMIT;
    while (*p) {
        const char *q = strstr(p, REF);
        size_t lit = q ? (size_t)(q - p) : strlen(p);
        if (lit >= cap - o) {
            rc = AB_ELIMIT;
            snprintf(err, errlen, "a header filled with its secrets is longer than %zu bytes",
                     cap - 1);
            goto fail;
        }
        memcpy(out + o, p, lit);
        o += lit;
        if (!q)
            break;
        const char *name = q + sizeof(REF) - 1;
        size_t nl = strspn(name, NAME_CHARS);
        if (nl == 0 || name[nl] != '}') {
            rc = AB_EINVAL;
            snprintf(err, errlen, "a header template has a malformed secret reference");
            goto fail;
        }
        const struct secret *e = find(s, name, nl);
        if (!e) {
            rc = AB_ENOENT;
            snprintf(err, errlen, "secret %.*s is not held for this sandbox", (int)nl, name);
            goto fail;
        }
        if (e->len >= cap - o) {
            rc = AB_ELIMIT;
            snprintf(err, errlen, "a header filled with its secrets is longer than %zu bytes",
                     cap - 1);
            goto fail;
        }
        memcpy(out + o, e->value, e->len);
        o += e->len;
        p = name + nl + 1;
    }
    for (size_t i = 0; i < o; i++)
        if (bad_byte((unsigned char)out[i])) {
            rc = AB_EINVAL;
            snprintf(err, errlen, "a header template holds a control character");
            goto fail;
        }
    out[o] = '\0';
    *outlen = o;
    return 0;
fail:
    OPENSSL_cleanse(out, cap);
    return rc;
}

size_t egress_secrets_fill_len(const struct egress_secrets *s, const char *tmpl)
{
    static const char REF[] = "${e2b.secrets.";
    size_t n = 0;
    const char *p = tmpl;
    for (;;) {
        const char *q = strstr(p, REF);
        if (!q)
            return n + strlen(p);
        n += (size_t)(q - p);
        const char *name = q + sizeof(REF) - 1;
        size_t nl = strspn(name, NAME_CHARS);
        const struct secret *e = name[nl] == '}' ? find(s, name, nl) : NULL;
        if (!e)
            return (size_t)-1;
        n += e->len;
        p = name + nl + 1;
    }
}
