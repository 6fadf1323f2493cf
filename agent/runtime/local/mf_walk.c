/* The YAML walker behind the manifest parsers: a path of the field being
 * read for error messages, bounded descent into mappings and sequences, and
 * typed scalar readers that fail with "field 'spec.x' must be ...".
 *
 * The walker only descends into fields it knows, and every list it walks is
 * bounded, so aliases (even cyclic ones) cannot make it loop or explode:
 * schemaless parts (template, status, config) are checked for shape and then
 * left alone. */
#include "agent/runtime/local/mf_walk.h"

#include "agentbox/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- errors and paths --------------------------------------------------- */

__attribute__((format(printf, 3, 4))) int mfw_fail(struct mf_walk *w, yaml_node_t *at,
                                                   const char *fmt, ...)
{
    va_list ap;

    if (w->failed)
        return AB_EINVAL;
    w->failed = true;
    w->line = at ? (int)at->start_mark.line + 1 : 0;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof(w->msg), fmt, ap);
    va_end(ap);
    return AB_EINVAL;
}

/* "field 'spec.replicas' must be ..." at node at. */
__attribute__((format(printf, 3, 4))) int mfw_fail_field(struct mf_walk *w, yaml_node_t *at,
                                                         const char *fmt, ...)
{
    char what[MF_ERR_MAX / 2];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return mfw_fail(w, at, "field '%s' %s", w->path, what);
}

size_t mfw_path_push(struct mf_walk *w, const char *key)
{
    size_t old = w->plen;
    int n = snprintf(w->path + w->plen, sizeof(w->path) - w->plen, "%s%s", w->plen ? "." : "", key);

    if (n > 0)
        w->plen = AB_MIN(w->plen + (size_t)n, sizeof(w->path) - 1);
    return old;
}

size_t mfw_path_push_index(struct mf_walk *w, int i)
{
    size_t old = w->plen;
    int n = snprintf(w->path + w->plen, sizeof(w->path) - w->plen, "[%d]", i);

    if (n > 0)
        w->plen = AB_MIN(w->plen + (size_t)n, sizeof(w->path) - 1);
    return old;
}

void mfw_path_pop(struct mf_walk *w, size_t old)
{
    w->plen = old;
    w->path[old] = '\0';
}

int mfw_unknown(struct mf_walk *w)
{
    return mfw_fail(w, w->key, "unknown field '%s' in %s", w->path, w->kind);
}

int mfw_unsupported(struct mf_walk *w)
{
    return mfw_fail(w, w->key, "field '%s' is not supported by the local runtime", w->path);
}

/* ---- node access -------------------------------------------------------- */

bool mfw_is_null(const yaml_node_t *n)
{
    const char *v;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    v = (const char *)n->data.scalar.value;
    return !strcmp(v, "") || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

int mfw_visit(struct mf_walk *w, yaml_node_t *n)
{
    if (++w->visits > WALK_VISITS_MAX)
        return mfw_fail(w, n, "document has more than %d nodes", WALK_VISITS_MAX);
    return 0;
}

/* Calls fn for each pair; val is NULL when the value is YAML null. */
int mfw_each_pair(struct mf_walk *w, yaml_node_t *map, mfw_pair_fn fn, void *ctx)
{
    yaml_node_pair_t *p;
    int rc;

    if (map->type != YAML_MAPPING_NODE)
        return mfw_fail_field(w, map, "must be a mapping");
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        yaml_node_t *saved = w->key;
        const char *ks;
        size_t old;

        if (!k || !v)
            return mfw_fail(w, map, "malformed mapping");
        if ((rc = mfw_visit(w, k)) != 0)
            return rc;
        if (k->type != YAML_SCALAR_NODE)
            return mfw_fail(w, k, "keys under '%s' must be strings", w->plen ? w->path : "(root)");
        ks = (const char *)k->data.scalar.value;
        if (strlen(ks) != k->data.scalar.length)
            return mfw_fail(w, k, "a key under '%s' contains a NUL byte",
                            w->plen ? w->path : "(root)");
        old = mfw_path_push(w, ks);
        w->key = k;
        rc = fn(w, ks, mfw_is_null(v) ? NULL : v, ctx);
        w->key = saved;
        mfw_path_pop(w, old);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int mfw_each_item(struct mf_walk *w, yaml_node_t *seq, int max, mfw_item_fn fn, void *ctx)
{
    yaml_node_item_t *it;
    int i = 0, rc;

    if (seq->type != YAML_SEQUENCE_NODE)
        return mfw_fail_field(w, seq, "must be a list");
    if (seq->data.sequence.items.top - seq->data.sequence.items.start > max)
        return mfw_fail_field(w, seq, "has more than %d entries", max);
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++, i++) {
        yaml_node_t *v = yaml_document_get_node(w->doc, *it);
        size_t old;

        if (!v)
            return mfw_fail(w, seq, "malformed list");
        if ((rc = mfw_visit(w, v)) != 0)
            return rc;
        old = mfw_path_push_index(w, i);
        rc = fn(w, i, v, ctx);
        mfw_path_pop(w, old);
        if (rc != 0)
            return rc;
    }
    return 0;
}

const char *mfw_scalar(struct mf_walk *w, yaml_node_t *n)
{
    const char *s;

    if (n->type != YAML_SCALAR_NODE) {
        mfw_fail_field(w, n, "must be a single value, not a %s",
                       n->type == YAML_MAPPING_NODE ? "mapping" : "list");
        return NULL;
    }
    s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        mfw_fail_field(w, n, "contains a NUL byte");
        return NULL;
    }
    return s;
}

int mfw_str(struct mf_walk *w, yaml_node_t *n, char *out, size_t size)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    if (strlen(s) >= size)
        return mfw_fail_field(w, n, "is longer than %zu characters", size - 1);
    ab_strlcpy(out, s, size);
    return 0;
}

/* Integers are plain YAML scalars (a quoted "2" is a string, as on Kubernetes). */
int mfw_int(struct mf_walk *w, yaml_node_t *n, int64_t min, int64_t max, int64_t *out)
{
    const char *s, *p;
    char *end;
    long long v;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    p = s + (*s == '-');
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE || !*p ||
        strspn(p, "0123456789") != strlen(p) || strlen(p) > 12)
        goto bad;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || *end || v < min || v > max)
        goto bad;
    *out = v;
    return 0;
bad:
    if (min == 0 && max == INT32_MAX)
        return mfw_fail_field(w, n, "must be a non-negative integer (got '%.40s')", s);
    if (min == INT32_MIN && max == INT32_MAX)
        return mfw_fail_field(w, n, "must be an integer (got '%.40s')", s);
    return mfw_fail_field(w, n, "must be an integer from %lld to %lld (got '%.40s')",
                          (long long)min, (long long)max, s);
}

int mfw_i32(struct mf_walk *w, yaml_node_t *n, int64_t min, int32_t *out)
{
    int64_t v = 0;
    int rc;

    if (!n)
        return 0;
    if ((rc = mfw_int(w, n, min, INT32_MAX, &v)) != 0)
        return rc;
    *out = (int32_t)v;
    return 0;
}

int mfw_bool(struct mf_walk *w, yaml_node_t *n, bool *out)
{
    static const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    const char *s;
    size_t i;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        for (i = 0; i < AB_ARRAY_LEN(yes); i++) {
            if (!strcmp(s, yes[i])) {
                *out = true;
                return 0;
            }
            if (!strcmp(s, no[i])) {
                *out = false;
                return 0;
            }
        }
    }
    return mfw_fail_field(w, n, "must be true or false (got '%.40s')", s);
}

int mfw_duration(struct mf_walk *w, yaml_node_t *n, int64_t *ms)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    if (mf_duration_ms(s, ms) != 0)
        return mfw_fail_field(w, n, "must be a duration such as 90s, 2m or 1h30m (got '%.40s')", s);
    return 0;
}

int mfw_image_policy(struct mf_walk *w, yaml_node_t *n, enum mf_image_policy *out)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    if (!strcmp(s, "IdleImage"))
        *out = MF_IMAGE_IDLE;
    else if (!strcmp(s, "PoolDefaultImage"))
        *out = MF_IMAGE_POOL_DEFAULT;
    else
        return mfw_fail_field(w, n, "must be IdleImage or PoolDefaultImage (got '%.40s')", s);
    return 0;
}

/* int-or-string: a count (>= 0) or "N%". */
int mfw_check_int_or_percent(struct mf_walk *w, yaml_node_t *n)
{
    const char *s;
    size_t len;

    if (!n)
        return 0;
    if (!(s = mfw_scalar(w, n)))
        return AB_EINVAL;
    len = strlen(s);
    if (len > 0 && len < 12 && strspn(s, "0123456789") == len)
        return 0;
    if (len > 1 && len < 12 && s[len - 1] == '%' && strspn(s, "0123456789") == len - 1)
        return 0;
    return mfw_fail_field(w, n, "must be a count or a percentage such as \"20%%\" (got '%.40s')",
                          s);
}

int mfw_need_mapping(struct mf_walk *w, yaml_node_t *n)
{
    if (n && n->type != YAML_MAPPING_NODE)
        return mfw_fail_field(w, n, "must be a mapping");
    return 0;
}

static int str_item(struct mf_walk *w, int i, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)i;
    (void)ctx;
    if (mfw_is_null(v))
        return mfw_fail_field(w, v, "must be a string");
    return mfw_str(w, v, buf, sizeof(buf));
}

int mfw_check_str_list(struct mf_walk *w, yaml_node_t *n)
{
    return n ? mfw_each_item(w, n, LIST_ITEMS_MAX, str_item, NULL) : 0;
}

static int map_pair(struct mf_walk *w, const char *key, yaml_node_t *v, void *ctx)
{
    json_t *obj = ctx;
    const char *s = "";

    if (json_object_size(obj) >= LIST_ITEMS_MAX)
        return mfw_fail(w, w->key, "more than %d entries before '%s'", LIST_ITEMS_MAX, w->path);
    if (strlen(key) > MF_TEMPLATE_NAME_MAX)
        return mfw_fail(w, w->key, "key '%.60s...' is longer than %d characters", key,
                        MF_TEMPLATE_NAME_MAX);
    if (v && !(s = mfw_scalar(w, v)))
        return AB_EINVAL;
    if (strlen(s) > ANNOTATION_MAX)
        return mfw_fail_field(w, v, "is longer than %d bytes", ANNOTATION_MAX);
    if (json_object_set_new(obj, key, json_string(s)) != 0)
        return mfw_fail_field(w, v, "is not valid UTF-8");
    return 0;
}

/* A string→string map into *obj (created on first use). */
int mfw_map(struct mf_walk *w, yaml_node_t *n, json_t **obj)
{
    if (!n)
        return 0;
    if (!*obj && !(*obj = json_object()))
        return AB_ENOMEM;
    return mfw_each_pair(w, n, map_pair, *obj);
}
