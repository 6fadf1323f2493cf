/* SandboxTemplate / SandboxPool / SandboxEnv manifests (reference §6, CRD
 * field tables in crds-and-charts.md) parsed with the libyaml document API,
 * which keeps the line of every node for error messages.
 *
 * The walker only descends into fields it knows, and every list it walks is
 * bounded, so aliases (even cyclic ones) cannot make it loop or explode:
 * schemaless parts (template, status, config) are checked for shape and then
 * left alone. */
#include "agent/runtime/local/manifest.h"

#include "agentbox/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#define WALK_PATH_MAX 192
#define WALK_VISITS_MAX 200000
#define LIST_ITEMS_MAX 256 /* string lists, map entries */
#define ANNOTATION_MAX (64 * 1024)

struct walk {
    struct mf_set *set;
    const char *file;
    yaml_document_t *doc;
    char path[WALK_PATH_MAX];
    size_t plen;
    yaml_node_t *key; /* key node of the field being parsed */
    bool failed;
    int line;
    char msg[MF_ERR_MAX];
    long visits;
    const char *kind; /* for "unknown field ... in SandboxPool" */
};

typedef int (*pair_fn)(struct walk *w, const char *key, yaml_node_t *val, void *ctx);
typedef int (*item_fn)(struct walk *w, int index, yaml_node_t *val, void *ctx);

/* ---- errors and paths --------------------------------------------------- */

__attribute__((format(printf, 3, 4))) static int fail(struct walk *w, yaml_node_t *at,
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
__attribute__((format(printf, 3, 4))) static int fail_field(struct walk *w, yaml_node_t *at,
                                                            const char *fmt, ...)
{
    char what[MF_ERR_MAX / 2];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return fail(w, at, "field '%s' %s", w->path, what);
}

static size_t path_push(struct walk *w, const char *key)
{
    size_t old = w->plen;
    int n = snprintf(w->path + w->plen, sizeof(w->path) - w->plen, "%s%s", w->plen ? "." : "", key);

    if (n > 0)
        w->plen = AB_MIN(w->plen + (size_t)n, sizeof(w->path) - 1);
    return old;
}

static size_t path_push_index(struct walk *w, int i)
{
    size_t old = w->plen;
    int n = snprintf(w->path + w->plen, sizeof(w->path) - w->plen, "[%d]", i);

    if (n > 0)
        w->plen = AB_MIN(w->plen + (size_t)n, sizeof(w->path) - 1);
    return old;
}

static void path_pop(struct walk *w, size_t old)
{
    w->plen = old;
    w->path[old] = '\0';
}

static int unknown(struct walk *w)
{
    return fail(w, w->key, "unknown field '%s' in %s", w->path, w->kind);
}

/* ---- node access -------------------------------------------------------- */

static bool is_null(const yaml_node_t *n)
{
    const char *v;

    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    v = (const char *)n->data.scalar.value;
    return !strcmp(v, "") || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

static int visit(struct walk *w, yaml_node_t *n)
{
    if (++w->visits > WALK_VISITS_MAX)
        return fail(w, n, "document has more than %d nodes", WALK_VISITS_MAX);
    return 0;
}

/* Calls fn for each pair; val is NULL when the value is YAML null. */
static int each_pair(struct walk *w, yaml_node_t *map, pair_fn fn, void *ctx)
{
    yaml_node_pair_t *p;
    int rc;

    if (map->type != YAML_MAPPING_NODE)
        return fail_field(w, map, "must be a mapping");
    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(w->doc, p->key);
        yaml_node_t *v = yaml_document_get_node(w->doc, p->value);
        yaml_node_t *saved = w->key;
        const char *ks;
        size_t old;

        if (!k || !v)
            return fail(w, map, "malformed mapping");
        if ((rc = visit(w, k)) != 0)
            return rc;
        if (k->type != YAML_SCALAR_NODE)
            return fail(w, k, "keys under '%s' must be strings", w->plen ? w->path : "(root)");
        ks = (const char *)k->data.scalar.value;
        if (strlen(ks) != k->data.scalar.length)
            return fail(w, k, "a key under '%s' contains a NUL byte", w->plen ? w->path : "(root)");
        old = path_push(w, ks);
        w->key = k;
        rc = fn(w, ks, is_null(v) ? NULL : v, ctx);
        w->key = saved;
        path_pop(w, old);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int each_item(struct walk *w, yaml_node_t *seq, int max, item_fn fn, void *ctx)
{
    yaml_node_item_t *it;
    int i = 0, rc;

    if (seq->type != YAML_SEQUENCE_NODE)
        return fail_field(w, seq, "must be a list");
    if (seq->data.sequence.items.top - seq->data.sequence.items.start > max)
        return fail_field(w, seq, "has more than %d entries", max);
    for (it = seq->data.sequence.items.start; it < seq->data.sequence.items.top; it++, i++) {
        yaml_node_t *v = yaml_document_get_node(w->doc, *it);
        size_t old;

        if (!v)
            return fail(w, seq, "malformed list");
        if ((rc = visit(w, v)) != 0)
            return rc;
        old = path_push_index(w, i);
        rc = fn(w, i, v, ctx);
        path_pop(w, old);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static const char *scalar(struct walk *w, yaml_node_t *n)
{
    const char *s;

    if (n->type != YAML_SCALAR_NODE) {
        fail_field(w, n, "must be a single value, not a %s",
                   n->type == YAML_MAPPING_NODE ? "mapping" : "list");
        return NULL;
    }
    s = (const char *)n->data.scalar.value;
    if (strlen(s) != n->data.scalar.length) {
        fail_field(w, n, "contains a NUL byte");
        return NULL;
    }
    return s;
}

static int get_str(struct walk *w, yaml_node_t *n, char *out, size_t size)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
        return AB_EINVAL;
    if (strlen(s) >= size)
        return fail_field(w, n, "is longer than %zu characters", size - 1);
    ab_strlcpy(out, s, size);
    return 0;
}

/* Integers are plain YAML scalars (a quoted "2" is a string, as on Kubernetes). */
static int get_int(struct walk *w, yaml_node_t *n, int64_t min, int64_t max, int64_t *out)
{
    const char *s, *p;
    char *end;
    long long v;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
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
        return fail_field(w, n, "must be a non-negative integer (got '%.40s')", s);
    if (min == INT32_MIN && max == INT32_MAX)
        return fail_field(w, n, "must be an integer (got '%.40s')", s);
    return fail_field(w, n, "must be an integer from %lld to %lld (got '%.40s')", (long long)min,
                      (long long)max, s);
}

static int get_i32(struct walk *w, yaml_node_t *n, int64_t min, int32_t *out)
{
    int64_t v = 0;
    int rc;

    if (!n)
        return 0;
    if ((rc = get_int(w, n, min, INT32_MAX, &v)) != 0)
        return rc;
    *out = (int32_t)v;
    return 0;
}

static int get_bool(struct walk *w, yaml_node_t *n, bool *out)
{
    static const char *yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"};
    static const char *no[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"};
    const char *s;
    size_t i;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
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
    return fail_field(w, n, "must be true or false (got '%.40s')", s);
}

static int get_duration(struct walk *w, yaml_node_t *n, int64_t *ms)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
        return AB_EINVAL;
    if (mf_duration_ms(s, ms) != 0)
        return fail_field(w, n, "must be a duration such as 90s, 2m or 1h30m (got '%.40s')", s);
    return 0;
}

static int get_image_policy(struct walk *w, yaml_node_t *n, enum mf_image_policy *out)
{
    const char *s;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
        return AB_EINVAL;
    if (!strcmp(s, "IdleImage"))
        *out = MF_IMAGE_IDLE;
    else if (!strcmp(s, "PoolDefaultImage"))
        *out = MF_IMAGE_POOL_DEFAULT;
    else
        return fail_field(w, n, "must be IdleImage or PoolDefaultImage (got '%.40s')", s);
    return 0;
}

/* int-or-string: a count (>= 0) or "N%". */
static int check_int_or_percent(struct walk *w, yaml_node_t *n)
{
    const char *s;
    size_t len;

    if (!n)
        return 0;
    if (!(s = scalar(w, n)))
        return AB_EINVAL;
    len = strlen(s);
    if (len > 0 && len < 12 && strspn(s, "0123456789") == len)
        return 0;
    if (len > 1 && len < 12 && s[len - 1] == '%' && strspn(s, "0123456789") == len - 1)
        return 0;
    return fail_field(w, n, "must be a count or a percentage such as \"20%%\" (got '%.40s')", s);
}

static int need_mapping(struct walk *w, yaml_node_t *n)
{
    if (n && n->type != YAML_MAPPING_NODE)
        return fail_field(w, n, "must be a mapping");
    return 0;
}

static int str_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)i;
    (void)ctx;
    if (is_null(v))
        return fail_field(w, v, "must be a string");
    return get_str(w, v, buf, sizeof(buf));
}

static int check_str_list(struct walk *w, yaml_node_t *n)
{
    return n ? each_item(w, n, LIST_ITEMS_MAX, str_item, NULL) : 0;
}

static int map_pair(struct walk *w, const char *key, yaml_node_t *v, void *ctx)
{
    json_t *obj = ctx;
    const char *s = "";

    if (json_object_size(obj) >= LIST_ITEMS_MAX)
        return fail(w, w->key, "more than %d entries before '%s'", LIST_ITEMS_MAX, w->path);
    if (strlen(key) > MF_TEMPLATE_NAME_MAX)
        return fail(w, w->key, "key '%.60s...' is longer than %d characters", key,
                    MF_TEMPLATE_NAME_MAX);
    if (v && !(s = scalar(w, v)))
        return AB_EINVAL;
    if (strlen(s) > ANNOTATION_MAX)
        return fail_field(w, v, "is longer than %d bytes", ANNOTATION_MAX);
    if (json_object_set_new(obj, key, json_string(s)) != 0)
        return fail_field(w, v, "is not valid UTF-8");
    return 0;
}

/* A string→string map into *obj (created on first use). */
static int get_map(struct walk *w, yaml_node_t *n, json_t **obj)
{
    if (!n)
        return 0;
    if (!*obj && !(*obj = json_object()))
        return AB_ENOMEM;
    return each_pair(w, n, map_pair, *obj);
}

/* ---- quantities, durations, names ----------------------------------------- */

typedef unsigned __int128 u128;
#define U128_MAX (~(u128)0)

/* ceil(value * 10^scale), where value is the quantity s. */
static int quantity_scaled(const char *s, int scale, int64_t *out)
{
    static const struct {
        const char *sfx;
        int dec; /* power of ten */
        int bin; /* power of 1024 */
    } sfx[] = {{"Ki", 0, 1}, {"Mi", 0, 2}, {"Gi", 0, 3}, {"Ti", 0, 4}, {"Pi", 0, 5},
               {"Ei", 0, 6}, {"n", -9, 0}, {"u", -6, 0}, {"m", -3, 0}, {"k", 3, 0},
               {"M", 6, 0},  {"G", 9, 0},  {"T", 12, 0}, {"P", 15, 0}, {"E", 18, 0}};
    const char *p = s;
    u128 m = 0;
    int digits = 0, frac = 0, exp10 = 0, bin = 0;
    size_t i;

    if (*p == '+')
        p++;
    if (*p < '0' || *p > '9') {
        if (!(*p == '.' && p[1] >= '0' && p[1] <= '9'))
            return AB_EINVAL;
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        if (++digits > 30)
            return AB_EINVAL;
        m = m * 10 + (u128)(*p - '0');
    }
    if (*p == '.') {
        for (p++; *p >= '0' && *p <= '9'; p++, frac++) {
            if (++digits > 30)
                return AB_EINVAL;
            m = m * 10 + (u128)(*p - '0');
        }
    }
    if ((*p == 'e' || *p == 'E') && p[1] != '\0' &&
        (p[1] == '-' || p[1] == '+' || (p[1] >= '0' && p[1] <= '9'))) {
        int sign = 1, e = 0, ed = 0;

        p++;
        if (*p == '-' || *p == '+')
            sign = *p++ == '-' ? -1 : 1;
        for (; *p >= '0' && *p <= '9'; p++) {
            if (++ed > 3)
                return AB_EINVAL;
            e = e * 10 + (*p - '0');
        }
        if (ed == 0 || *p)
            return AB_EINVAL;
        exp10 = sign * e;
    } else if (*p) {
        for (i = 0; i < AB_ARRAY_LEN(sfx); i++)
            if (!strcmp(p, sfx[i].sfx))
                break;
        if (i == AB_ARRAY_LEN(sfx))
            return AB_EINVAL;
        exp10 = sfx[i].dec;
        bin = sfx[i].bin;
    }
    for (; bin > 0; bin--) {
        if (m > U128_MAX / 1024)
            return AB_EINVAL;
        m *= 1024;
    }
    exp10 += scale - frac;
    if (exp10 >= 0) {
        for (; exp10 > 0; exp10--) {
            if (m > U128_MAX / 10)
                return AB_EINVAL;
            m *= 10;
        }
    } else {
        u128 div = 1;

        if (exp10 < -38) {
            m = m ? 1 : 0;
        } else {
            for (; exp10 < 0; exp10++)
                div *= 10;
            m = m / div + (m % div ? 1 : 0);
        }
    }
    if (m > (u128)INT64_MAX)
        return AB_EINVAL;
    *out = (int64_t)m;
    return 0;
}

int mf_quantity_milli(const char *s, int64_t *milli)
{
    return quantity_scaled(s, 3, milli);
}

int mf_quantity_bytes(const char *s, int64_t *bytes)
{
    return quantity_scaled(s, 0, bytes);
}

int mf_duration_ms(const char *s, int64_t *ms)
{
    static const struct {
        const char *unit;
        int64_t ns;
    } units[] = {
        {"ns", 1},       {"us", 1000},        {"\xc2\xb5s", 1000},  {"\xce\xbcs", 1000},
        {"ms", 1000000}, {"s", 1000000000LL}, {"m", 60000000000LL}, {"h", 3600000000000LL}};
    const u128 cap = (u128)100 * 365 * 24 * 3600000000000LL; /* 100 years */
    const char *p = s;
    u128 total = 0;

    if (*p == '+')
        p++;
    if (!strcmp(p, "0")) {
        *ms = 0;
        return 0;
    }
    if (!*p)
        return AB_EINVAL;
    while (*p) {
        u128 ip = 0, fp = 0, fscale = 1;
        int digits = 0;
        size_t i, best = 0, bestlen = 0;

        for (; *p >= '0' && *p <= '9'; p++, digits++) {
            if (digits > 18)
                return AB_EINVAL;
            ip = ip * 10 + (u128)(*p - '0');
        }
        if (*p == '.') {
            for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
                if (fscale < (u128)1000000000000000000ULL) {
                    fp = fp * 10 + (u128)(*p - '0');
                    fscale *= 10;
                }
            }
        }
        if (digits == 0)
            return AB_EINVAL;
        for (i = 0; i < AB_ARRAY_LEN(units); i++) {
            size_t l = strlen(units[i].unit);
            if (!strncmp(p, units[i].unit, l) && l > bestlen) {
                best = i;
                bestlen = l;
            }
        }
        if (bestlen == 0)
            return AB_EINVAL;
        p += bestlen;
        total += ip * (u128)units[best].ns + (fp * (u128)units[best].ns + fscale - 1) / fscale;
        if (total > cap)
            return AB_EINVAL;
    }
    *ms = (int64_t)((total + 999999) / 1000000);
    return 0;
}

int mf_resource_key(int64_t cpu_milli, int64_t mem_bytes, char *out, size_t outlen)
{
    int64_t cpu = cpu_milli / 1000 + (cpu_milli % 1000 ? 1 : 0);
    int64_t gi = mem_bytes / (1LL << 30);

    if (cpu <= 0 && gi <= 0)
        return AB_EINVAL;
    if (snprintf(out, outlen, "%lldc%lldgi", (long long)cpu, (long long)gi) >= (int)outlen)
        return AB_ELIMIT;
    return 0;
}

bool mf_name_is_label(const char *s, size_t max, bool letter_first)
{
    size_t n = strlen(s), i;

    if (n == 0 || n > max)
        return false;
    if (!((s[0] >= 'a' && s[0] <= 'z') || (!letter_first && s[0] >= '0' && s[0] <= '9')))
        return false;
    for (i = 1; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
            return false;
    }
    return s[n - 1] != '-';
}

bool mf_name_is_subdomain(const char *s)
{
    char part[MF_TEMPLATE_NAME_MAX + 1];
    const char *p = s, *dot;
    size_t n = strlen(s);

    if (n == 0 || n > MF_TEMPLATE_NAME_MAX)
        return false;
    for (;;) {
        size_t l;
        dot = strchr(p, '.');
        l = dot ? (size_t)(dot - p) : strlen(p);
        if (l == 0 || l > 63)
            return false;
        memcpy(part, p, l);
        part[l] = '\0';
        if (!mf_name_is_label(part, 63, false))
            return false;
        if (!dot)
            return true;
        p = dot + 1;
    }
}

const char *mf_kind_name(enum mf_kind k)
{
    switch (k) {
    case MF_TEMPLATE:
        return "SandboxTemplate";
    case MF_POOL:
        return "SandboxPool";
    case MF_ENV:
        return "SandboxEnv";
    }
    return "?";
}

/* ---- shared spec pieces ----------------------------------------------------- */

struct runtimes_ctx {
    struct mf_runtime *rt;
    int *n;
    struct mf_runtime *cur;
    bool has_name;
};

static int runtime_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct runtimes_ctx *c = ctx;
    int64_t port = 0;
    char buf[MF_STR_MAX];
    int rc;

    if (!strcmp(k, "name")) {
        c->has_name = v != NULL;
        return get_str(w, v, c->cur->name, sizeof(c->cur->name));
    }
    if (!strcmp(k, "port")) {
        rc = get_int(w, v, 1, 65535, &port);
        c->cur->port = (int32_t)port;
        return rc;
    }
    if (!strcmp(k, "protocol"))
        return get_str(w, v, c->cur->protocol, sizeof(c->cur->protocol));
    if (!strcmp(k, "description") || !strcmp(k, "logDir"))
        return get_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "readinessProbe"))
        return need_mapping(w, v);
    if (!strcmp(k, "config"))
        return 0; /* runtime-specific, any JSON */
    return unknown(w);
}

static int runtime_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct runtimes_ctx *c = ctx;
    int j, rc;

    c->cur = &c->rt[*c->n];
    memset(c->cur, 0, sizeof(*c->cur));
    ab_strlcpy(c->cur->protocol, "TCP", sizeof(c->cur->protocol));
    c->has_name = false;
    if ((rc = each_pair(w, v, runtime_pair, c)) != 0)
        return rc;
    if (!c->has_name || !c->cur->name[0])
        return fail(w, v, "field '%s.name' is required", w->path);
    for (j = 0; j < *c->n; j++)
        if (!strcmp(c->rt[j].name, c->cur->name))
            return fail(w, v, "field '%s.name': runtime '%s' is listed twice", w->path,
                        c->cur->name);
    (*c->n)++;
    (void)i;
    return 0;
}

static int get_runtimes(struct walk *w, yaml_node_t *v, struct mf_runtime *rt, int *n)
{
    struct runtimes_ctx c = {rt, n, NULL, false};

    return v ? each_item(w, v, MF_RUNTIMES_MAX - *n, runtime_item, &c) : 0;
}

static int egress_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    (void)ctx;
    if (!strcmp(k, "allowedDomains") || !strcmp(k, "allowedCIDRs") || !strcmp(k, "deniedCIDRs"))
        return check_str_list(w, v);
    return unknown(w);
}

static int netpol_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    bool *disable = ctx, b = false;

    if (!strcmp(k, "disableEgress"))
        return get_bool(w, v, disable);
    if (!strcmp(k, "allowPrivateNetworks"))
        return get_bool(w, v, &b);
    if (!strcmp(k, "egress"))
        return v ? each_pair(w, v, egress_pair, NULL) : 0;
    if (!strcmp(k, "secretInjection"))
        return need_mapping(w, v);
    return unknown(w);
}

static int pool_spec_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_pool_spec *p = ctx;

    if (!strcmp(k, "replicas")) {
        p->has_replicas = v != NULL;
        return get_i32(w, v, 0, &p->replicas);
    }
    if (!strcmp(k, "minReplicas"))
        return get_i32(w, v, 0, &p->min_replicas);
    if (!strcmp(k, "maxReplicas"))
        return get_i32(w, v, 0, &p->max_replicas);
    if (!strcmp(k, "templateName"))
        return get_str(w, v, p->template_name, sizeof(p->template_name));
    if (!strcmp(k, "defaultStartupTimeout"))
        return get_duration(w, v, &p->startup_timeout_ms);
    if (!strcmp(k, "defaultIdleTimeout"))
        return get_duration(w, v, &p->idle_timeout_ms);
    if (!strcmp(k, "podCreationImagePolicy"))
        return get_image_policy(w, v, &p->image_policy);
    if (!strcmp(k, "maxUnavailable"))
        return check_int_or_percent(w, v);
    if (!strcmp(k, "networkPolicy"))
        return v ? each_pair(w, v, netpol_pair, &p->disable_egress) : 0;
    if (!strcmp(k, "autoscaling") || !strcmp(k, "template"))
        return need_mapping(w, v); /* deprecated / schemaless */
    if (!strcmp(k, "idleImage"))
        return get_str(w, v, p->idle_image, sizeof(p->idle_image));
    if (!strcmp(k, "runtimes"))
        return get_runtimes(w, v, p->runtimes, &p->nruntimes);
    return unknown(w);
}

static void pool_spec_init(struct mf_pool_spec *p)
{
    memset(p, 0, sizeof(*p));
    p->min_replicas = -1;
    p->max_replicas = -1;
}

/* ---- SandboxTemplate ----------------------------------------------------------- */

static int vis_rule_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)ctx;
    if (!strcmp(k, "team"))
        return get_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "users"))
        return check_str_list(w, v);
    return unknown(w);
}

static int vis_rule_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    return each_pair(w, v, vis_rule_pair, ctx);
}

static int vis_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    if (!strcmp(k, "rules"))
        return v ? each_item(w, v, LIST_ITEMS_MAX, vis_rule_item, ctx) : 0;
    return unknown(w);
}

static int tpl_spec_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_template *t = ctx;

    if (!strcmp(k, "template"))
        return need_mapping(w, v);
    if (!strcmp(k, "idleImage"))
        return get_str(w, v, t->idle_image, sizeof(t->idle_image));
    if (!strcmp(k, "runtimes"))
        return get_runtimes(w, v, t->runtimes, &t->nruntimes);
    if (!strcmp(k, "version"))
        return get_str(w, v, t->version, sizeof(t->version));
    if (!strcmp(k, "description"))
        return get_str(w, v, t->description, sizeof(t->description));
    if (!strcmp(k, "visibility"))
        return v ? each_pair(w, v, vis_pair, NULL) : 0;
    return unknown(w);
}

/* ---- SandboxEnv ------------------------------------------------------------------ */

/* Sizing of one member as written, before rendering. */
struct member_in {
    struct mf_member *m;
    bool has_name;
    bool has_group;
    bool has_inline;
    bool has_type;
    int64_t req_cpu, req_mem, lim_cpu, lim_mem;
    bool req_any, lim_any;
    yaml_node_t *node;
    char path[WALK_PATH_MAX];
};

struct res_ctx {
    struct member_in *mi;
    bool limits;
};

static int quantity_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct res_ctx *c = ctx;
    const char *s;
    int64_t x = 0;
    int rc;

    if (!v)
        return 0;
    if (!(s = scalar(w, v)))
        return AB_EINVAL;
    if (!strcmp(k, "cpu"))
        rc = mf_quantity_milli(s, &x);
    else
        rc = mf_quantity_bytes(s, &x);
    if (rc != 0)
        return fail_field(w, v,
                          "must be a non-negative quantity such as 500m, 2 or 8Gi (got "
                          "'%.40s')",
                          s);
    if (!strcmp(k, "cpu")) {
        *(c->limits ? &c->mi->lim_cpu : &c->mi->req_cpu) = x;
        *(c->limits ? &c->mi->lim_any : &c->mi->req_any) = true;
    } else if (!strcmp(k, "memory")) {
        *(c->limits ? &c->mi->lim_mem : &c->mi->req_mem) = x;
        *(c->limits ? &c->mi->lim_any : &c->mi->req_any) = true;
    }
    return 0;
}

static int claim_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];

    (void)ctx;
    if (!strcmp(k, "name") || !strcmp(k, "request"))
        return get_str(w, v, buf, sizeof(buf));
    return unknown(w);
}

static int claim_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    return each_pair(w, v, claim_pair, ctx);
}

static int resources_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct res_ctx c = {ctx, false};

    if (!strcmp(k, "requests") || !strcmp(k, "limits")) {
        c.limits = k[0] == 'l';
        return v ? each_pair(w, v, quantity_pair, &c) : 0;
    }
    if (!strcmp(k, "claims"))
        return v ? each_item(w, v, LIST_ITEMS_MAX, claim_item, NULL) : 0;
    return unknown(w);
}

static int update_strategy_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    bool b;

    (void)ctx;
    if (!strcmp(k, "autoUpdate"))
        return get_bool(w, v, &b);
    if (!strcmp(k, "maxUnavailable"))
        return check_int_or_percent(w, v);
    return unknown(w);
}

/* The sizing fields shared by `config` and the legacy flat member. */
static int member_sizing_pair(struct walk *w, const char *k, yaml_node_t *v, struct member_in *mi,
                              bool *handled)
{
    struct mf_member *m = mi->m;
    char buf[MF_STR_MAX];
    int32_t x = 0;

    *handled = true;
    if (!strcmp(k, "instanceType")) {
        mi->has_type = v != NULL;
        return get_str(w, v, buf, sizeof(buf));
    }
    if (!strcmp(k, "multiplier"))
        return get_i32(w, v, 0, &x);
    if (!strcmp(k, "inlineResources")) {
        mi->has_inline = v != NULL;
        return v ? each_pair(w, v, resources_pair, mi) : 0;
    }
    if (!strcmp(k, "scalingGroup")) {
        mi->has_group = v != NULL;
        return get_str(w, v, m->scaling_group, sizeof(m->scaling_group));
    }
    if (!strcmp(k, "minReplicas"))
        return get_i32(w, v, 0, &m->min_replicas);
    if (!strcmp(k, "maxReplicas"))
        return get_i32(w, v, 0, &m->max_replicas);
    if (!strcmp(k, "priority"))
        return get_i32(w, v, INT32_MIN, &m->priority);
    if (!strcmp(k, "scaleUpPriority") || !strcmp(k, "scaleDownPriority"))
        return get_i32(w, v, INT32_MIN, &x);
    *handled = false;
    return 0;
}

static int member_config_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct member_in *mi = ctx;
    json_t *scratch = NULL;
    bool handled;
    int rc;

    rc = member_sizing_pair(w, k, v, mi, &handled);
    if (handled)
        return rc;
    if (!strcmp(k, "labels") || !strcmp(k, "annotations")) {
        rc = get_map(w, v, &scratch);
        json_decref(scratch);
        return rc;
    }
    if (!strcmp(k, "updateStrategy"))
        return v ? each_pair(w, v, update_strategy_pair, NULL) : 0;
    return unknown(w);
}

static int member_meta_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    json_t *scratch = NULL;
    int rc;

    (void)ctx;
    if (!strcmp(k, "labels") || !strcmp(k, "annotations")) {
        rc = get_map(w, v, &scratch);
        json_decref(scratch);
        return rc;
    }
    return unknown(w);
}

static int member_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct member_in *mi = ctx;
    bool handled;
    int rc;

    if (!strcmp(k, "name")) {
        mi->has_name = v != NULL;
        return get_str(w, v, mi->m->name, sizeof(mi->m->name));
    }
    if (!strcmp(k, "config"))
        return v ? each_pair(w, v, member_config_pair, mi) : 0;
    if (!strcmp(k, "metadata"))
        return v ? each_pair(w, v, member_meta_pair, NULL) : 0;
    if (!strcmp(k, "spec")) {
        if (!v)
            return 0;
        mi->m->has_spec = true;
        if ((rc = each_pair(w, v, pool_spec_pair, &mi->m->spec)) != 0)
            return rc;
        if (!mi->m->spec.has_replicas)
            return fail(w, v, "field '%s.replicas' is required", w->path);
        return 0;
    }
    rc = member_sizing_pair(w, k, v, mi, &handled); /* legacy flat member */
    return handled ? rc : unknown(w);
}

struct env_ctx {
    struct mf_env *env;
    struct member_in *ins; /* parallel to the members of every cluster, in order */
    int nins, inscap;
    struct mf_cluster *cur;
    bool has_ref_name;
    bool has_id;
    struct mf_group *gcur;
    bool has_gname, has_gmax;
};

static int member_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    struct mf_member *m = &e->cur->members[e->cur->nmembers];
    struct member_in *mi;
    int j, rc;

    if (e->nins == e->inscap) {
        int cap = e->inscap ? e->inscap * 2 : 16;
        struct member_in *n = realloc(e->ins, (size_t)cap * sizeof(*n));
        if (!n)
            return AB_ENOMEM;
        e->ins = n;
        e->inscap = cap;
    }
    mi = &e->ins[e->nins];
    memset(mi, 0, sizeof(*mi));
    memset(m, 0, sizeof(*m));
    pool_spec_init(&m->spec);
    m->min_replicas = m->max_replicas = -1;
    m->line = (int)v->start_mark.line + 1;
    mi->m = m;
    mi->node = v;
    ab_strlcpy(mi->path, w->path, sizeof(mi->path));
    if ((rc = each_pair(w, v, member_pair, mi)) != 0)
        return rc;
    if (!mi->has_name || !m->name[0])
        return fail(w, v, "field '%s.name' is required", w->path);
    for (j = 0; j < e->cur->nmembers; j++)
        if (!strcmp(e->cur->members[j].name, m->name))
            return fail(w, v, "field '%s.name': member '%s' is listed twice", w->path, m->name);
    e->cur->nmembers++;
    e->nins++;
    (void)i;
    return 0;
}

static int cluster_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;

    if (!strcmp(k, "clusterID")) {
        e->has_id = v != NULL;
        return get_str(w, v, e->cur->id, sizeof(e->cur->id));
    }
    if (!strcmp(k, "members")) {
        if (!v)
            return 0;
        if (!e->cur->members &&
            !(e->cur->members = calloc(MF_MEMBERS_MAX, sizeof(*e->cur->members))))
            return AB_ENOMEM;
        return each_item(w, v, MF_MEMBERS_MAX - e->cur->nmembers, member_item, e);
    }
    return unknown(w);
}

static int cluster_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    int j, rc;

    e->cur = &e->env->clusters[e->env->nclusters];
    memset(e->cur, 0, sizeof(*e->cur));
    e->env->nclusters++; /* counted at once so the env frees its members on failure */
    e->has_id = false;
    if ((rc = each_pair(w, v, cluster_pair, e)) != 0)
        return rc;
    if (!e->has_id || !e->cur->id[0])
        return fail(w, v, "field '%s.clusterID' is required", w->path);
    for (j = 0; j < e->env->nclusters - 1; j++)
        if (!strcmp(e->env->clusters[j].id, e->cur->id))
            return fail(w, v, "field '%s.clusterID': cluster '%s' is listed twice", w->path,
                        e->cur->id);
    (void)i;
    return 0;
}

static int scale_up_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_group *g = ctx;
    const char *s;
    int32_t x;

    if (!strcmp(k, "mode")) {
        if (!v)
            return 0;
        if (!(s = scalar(w, v)))
            return AB_EINVAL;
        if (!strcmp(s, "Default"))
            g->up_mode = MF_SCALE_DEFAULT;
        else if (!strcmp(s, "Conservative"))
            g->up_mode = MF_SCALE_CONSERVATIVE;
        else if (!strcmp(s, "Aggressive"))
            g->up_mode = MF_SCALE_AGGRESSIVE;
        else
            return fail_field(w, v, "must be Conservative, Default or Aggressive (got '%.40s')", s);
        return 0;
    }
    if (!strcmp(k, "cooldownSeconds") || !strcmp(k, "idleThresholdSeconds") ||
        !strcmp(k, "idleZeroQuietWindowSeconds") || !strcmp(k, "saturationCooldownSeconds"))
        return get_i32(w, v, 0, &x);
    return unknown(w);
}

static int scale_down_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    int32_t x;

    (void)ctx;
    if (!strcmp(k, "idleTimeoutSeconds") || !strcmp(k, "stabilizationSeconds") ||
        !strcmp(k, "protectionWindowSeconds"))
        return get_i32(w, v, 0, &x);
    return unknown(w);
}

static int group_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    struct mf_group *g = e->gcur;

    if (!strcmp(k, "name")) {
        e->has_gname = v != NULL;
        return get_str(w, v, g->name, sizeof(g->name));
    }
    if (!strcmp(k, "enabled"))
        return get_bool(w, v, &g->enabled);
    if (!strcmp(k, "minReplicas"))
        return get_i32(w, v, 0, &g->min_replicas);
    if (!strcmp(k, "maxReplicas")) {
        e->has_gmax = v != NULL;
        return get_i32(w, v, 0, &g->max_replicas);
    }
    if (!strcmp(k, "scaleUpPolicy"))
        return v ? each_pair(w, v, scale_up_pair, g) : 0;
    if (!strcmp(k, "scaleDownPolicy"))
        return v ? each_pair(w, v, scale_down_pair, g) : 0;
    return unknown(w);
}

static int group_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    struct mf_group *g = &e->env->groups[e->env->ngroups];
    int j, rc;

    memset(g, 0, sizeof(*g));
    g->max_replicas = -1;
    g->line = (int)v->start_mark.line + 1;
    e->gcur = g;
    e->has_gname = e->has_gmax = false;
    if ((rc = each_pair(w, v, group_pair, e)) != 0)
        return rc;
    if (!e->has_gname || !g->name[0])
        return fail(w, v, "field '%s.name' is required", w->path);
    if (g->up_mode == MF_SCALE_AGGRESSIVE && !e->has_gmax)
        return fail(w, v,
                    "field '%s.maxReplicas' is required with scaleUpPolicy.mode "
                    "Aggressive (it doubles every cooldown)",
                    w->path);
    if (g->max_replicas >= 0 && g->min_replicas > g->max_replicas)
        return fail(w, v, "field '%s.minReplicas' (%d) exceeds maxReplicas (%d)", w->path,
                    g->min_replicas, g->max_replicas);
    for (j = 0; j < e->env->ngroups; j++)
        if (!strcmp(e->env->groups[j].name, g->name))
            return fail(w, v, "field '%s.name': group '%s' is listed twice", w->path, g->name);
    e->env->ngroups++;
    (void)i;
    return 0;
}

static int autoscaling_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    bool b;

    if (!strcmp(k, "groups"))
        return v ? each_item(w, v, MF_GROUPS_MAX - e->env->ngroups, group_item, e) : 0;
    if (!strcmp(k, "enabled"))
        return get_bool(w, v, &b); /* earlier revisions: one switch per Env */
    return unknown(w);
}

static int volume_item(struct walk *w, int i, yaml_node_t *v, void *ctx)
{
    (void)i;
    (void)ctx;
    return fail_field(w, v,
                      "is not supported by the local runtime (PVC mounts need the kube "
                      "runtime); remove spec.overrides.volumes");
}

static int gateway_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    if (!strcmp(k, "enabled"))
        return get_bool(w, v, ctx);
    return unknown(w);
}

static int overrides_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct mf_env *env = ctx;

    if (!strcmp(k, "image"))
        return get_str(w, v, env->image, sizeof(env->image));
    if (!strcmp(k, "podCreationImagePolicy")) {
        env->has_image_policy = v != NULL;
        return get_image_policy(w, v, &env->image_policy);
    }
    if (!strcmp(k, "defaultStartupTimeout"))
        return get_duration(w, v, &env->startup_timeout_ms);
    if (!strcmp(k, "defaultIdleTimeout"))
        return get_duration(w, v, &env->idle_timeout_ms);
    if (!strcmp(k, "gateway"))
        return v ? each_pair(w, v, gateway_pair, &env->gateway_enabled) : 0;
    if (!strcmp(k, "networkPolicy"))
        return v ? each_pair(w, v, netpol_pair, &env->disable_egress) : 0;
    if (!strcmp(k, "updateStrategy"))
        return v ? each_pair(w, v, update_strategy_pair, NULL) : 0;
    if (!strcmp(k, "volumes"))
        return v ? each_item(w, v, 8, volume_item, NULL) : 0;
    if (!strcmp(k, "imagePullSecret") || !strcmp(k, "envd"))
        return 0; /* REST-level settings; nothing for the local runtime */
    return unknown(w);
}

static int template_ref_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;

    if (!strcmp(k, "name")) {
        e->has_ref_name = v != NULL;
        return get_str(w, v, e->env->template_ref, sizeof(e->env->template_ref));
    }
    if (!strcmp(k, "version"))
        return get_str(w, v, e->env->template_version, sizeof(e->env->template_version));
    return unknown(w);
}

static int defaults_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    char buf[MF_STR_MAX];
    int32_t x;

    (void)ctx;
    if (!strcmp(k, "instanceType"))
        return get_str(w, v, buf, sizeof(buf));
    if (!strcmp(k, "multiplier"))
        return get_i32(w, v, 1, &x);
    return unknown(w);
}

static int env_spec_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct env_ctx *e = ctx;
    const char *s;

    if (!strcmp(k, "templateRef")) {
        if (!v)
            return 0;
        return each_pair(w, v, template_ref_pair, e);
    }
    if (!strcmp(k, "mode")) {
        if (!v)
            return 0;
        if (!(s = scalar(w, v)))
            return AB_EINVAL;
        if (!strcmp(s, "WarmPool"))
            return 0;
        if (!strcmp(s, "OnDemandJob"))
            return fail_field(w, v,
                              "is OnDemandJob, which is reserved; only WarmPool is "
                              "implemented");
        return fail_field(w, v, "must be WarmPool or OnDemandJob (got '%.40s')", s);
    }
    if (!strcmp(k, "defaults"))
        return v ? each_pair(w, v, defaults_pair, NULL) : 0;
    if (!strcmp(k, "clusters")) {
        if (!v)
            return 0;
        if (!e->env->clusters &&
            !(e->env->clusters = calloc(MF_CLUSTERS_MAX, sizeof(*e->env->clusters))))
            return AB_ENOMEM;
        return each_item(w, v, MF_CLUSTERS_MAX - e->env->nclusters, cluster_item, e);
    }
    if (!strcmp(k, "autoscaling")) {
        if (!v)
            return 0;
        if (!e->env->groups && !(e->env->groups = calloc(MF_GROUPS_MAX, sizeof(*e->env->groups))))
            return AB_ENOMEM;
        return each_pair(w, v, autoscaling_pair, e);
    }
    if (!strcmp(k, "overrides"))
        return v ? each_pair(w, v, overrides_pair, e->env) : 0;
    return unknown(w);
}

/* Rules that need the whole object: sizing → resource key → pool name (§6.4),
 * scaling groups that some member uses. */
static int env_finish(struct walk *w, struct mf_object *o, struct env_ctx *e, yaml_node_t *spec)
{
    struct mf_env *env = &o->u.env;
    char pool[MF_TEMPLATE_NAME_MAX + MF_KEY_MAX + 2];
    int i, j, c, m;

    if (strlen(o->name) > MF_ENV_NAME_MAX)
        return fail(w, spec, "env name \"%s\" exceeds %d-char cap", o->name, MF_ENV_NAME_MAX);
    if (!e->has_ref_name || !env->template_ref[0])
        return fail(w, spec, "field 'spec.templateRef.name' is required");
    for (i = 0; i < e->nins; i++) {
        struct member_in *mi = &e->ins[i];
        struct mf_member *mb = mi->m;
        bool use_req = mi->req_any;

        if (!mi->has_inline) {
            if (mi->has_type)
                return fail(w, mi->node,
                            "field '%s.config.instanceType' needs an instance "
                            "catalogue, which the local runtime does not have; "
                            "give config.inlineResources",
                            mi->path);
            return fail(w, mi->node,
                        "field '%s': one of instanceType or inlineResources must "
                        "be supplied",
                        mi->path);
        }
        mb->cpu_milli = use_req ? mi->req_cpu : mi->lim_cpu;
        mb->mem_bytes = use_req ? mi->req_mem : mi->lim_mem;
        if (mf_resource_key(mb->cpu_milli, mb->mem_bytes, mb->resource_key,
                            sizeof(mb->resource_key)) != 0)
            return fail(w, mi->node,
                        "field '%s.config.inlineResources': could not derive a "
                        "non-empty ResourceKey from the supplied resources",
                        mi->path);
        snprintf(pool, sizeof(pool), "%s-%s", o->name, mb->resource_key);
        if (strcmp(pool, mb->name) != 0)
            return fail(w, mi->node,
                        "field '%s.name' must be '%s' (<env>-<resource key>), "
                        "not '%s'",
                        mi->path, pool, mb->name);
        if (!mi->has_group)
            ab_strlcpy(mb->scaling_group, mb->resource_key, sizeof(mb->scaling_group));
        if (mb->min_replicas >= 0 && mb->max_replicas >= 0 && mb->min_replicas > mb->max_replicas)
            return fail(w, mi->node,
                        "field '%s.config.minReplicas' (%d) exceeds maxReplicas "
                        "(%d)",
                        mi->path, mb->min_replicas, mb->max_replicas);
    }
    for (j = 0; j < env->ngroups; j++) {
        bool used = false;
        for (c = 0; c < env->nclusters && !used; c++)
            for (m = 0; m < env->clusters[c].nmembers && !used; m++)
                used = !strcmp(env->clusters[c].members[m].scaling_group, env->groups[j].name);
        if (!used) {
            yaml_node_t at = {0};
            at.start_mark.line = (size_t)(env->groups[j].line - 1);
            return fail(w, &at,
                        "field 'spec.autoscaling.groups[%d].name': group '%s' is used "
                        "by no member's scalingGroup",
                        j, env->groups[j].name);
        }
    }
    return 0;
}

/* ---- objects ------------------------------------------------------------------------ */

static void object_free(struct mf_object *o)
{
    int c;

    if (!o)
        return;
    json_decref(o->labels);
    json_decref(o->annotations);
    if (o->kind == MF_ENV) {
        for (c = 0; c < o->u.env.nclusters; c++)
            free(o->u.env.clusters[c].members);
        free(o->u.env.clusters);
        free(o->u.env.groups);
    }
    free(o);
}

struct root_ctx {
    struct mf_object *o;
    bool has_name, has_spec;
    yaml_node_t *spec, *spec_key;
    yaml_node_t *meta, *name_node;
};

static int meta_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct root_ctx *r = ctx;
    char buf[MF_STR_MAX];

    if (!strcmp(k, "name")) {
        r->has_name = v != NULL;
        r->name_node = v;
        return get_str(w, v, r->o->name, sizeof(r->o->name));
    }
    if (!strcmp(k, "namespace")) {
        if (r->o->kind == MF_TEMPLATE)
            return get_str(w, v, buf, sizeof(buf)); /* cluster-scoped: ignored */
        return get_str(w, v, r->o->ns, sizeof(r->o->ns));
    }
    if (!strcmp(k, "labels"))
        return get_map(w, v, &r->o->labels);
    if (!strcmp(k, "annotations"))
        return get_map(w, v, &r->o->annotations);
    /* The rest of ObjectMeta, as `kubectl get -o yaml` prints it. */
    if (!strcmp(k, "uid") || !strcmp(k, "resourceVersion") || !strcmp(k, "generation") ||
        !strcmp(k, "creationTimestamp") || !strcmp(k, "deletionTimestamp") ||
        !strcmp(k, "deletionGracePeriodSeconds") || !strcmp(k, "ownerReferences") ||
        !strcmp(k, "finalizers") || !strcmp(k, "managedFields") || !strcmp(k, "selfLink") ||
        !strcmp(k, "generateName"))
        return 0;
    return unknown(w);
}

static int root_pair(struct walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct root_ctx *r = ctx;

    if (!strcmp(k, "apiVersion") || !strcmp(k, "kind") || !strcmp(k, "status"))
        return 0; /* checked before; status is the controller's */
    if (!strcmp(k, "metadata")) {
        r->meta = v;
        return v ? each_pair(w, v, meta_pair, r) : 0;
    }
    if (!strcmp(k, "spec")) {
        r->has_spec = v != NULL;
        r->spec = v;
        r->spec_key = w->key;
        return 0; /* parsed after metadata, whatever the key order */
    }
    return unknown(w);
}

static int set_push_error(struct mf_set *s, const char *file, int line, const char *msg)
{
    struct mf_error *e;

    if (s->nerrs >= MF_ERRORS_MAX) {
        s->errs_dropped++;
        return 0;
    }
    if (s->nerrs == s->errcap) {
        int cap = s->errcap ? s->errcap * 2 : 8;
        struct mf_error *n = realloc(s->errs, (size_t)cap * sizeof(*n));
        if (!n)
            return AB_ENOMEM;
        s->errs = n;
        s->errcap = cap;
    }
    e = &s->errs[s->nerrs++];
    ab_strlcpy(e->file, file, sizeof(e->file));
    e->line = line;
    if (line > 0)
        snprintf(e->text, sizeof(e->text), "%s:%d: %s", file, line, msg);
    else
        snprintf(e->text, sizeof(e->text), "%s: %s", file, msg);
    return 0;
}

static int set_push_object(struct mf_set *s, struct mf_object *o)
{
    if (s->nobjs >= MF_OBJECTS_MAX)
        return AB_ELIMIT;
    if (s->nobjs == s->objcap) {
        int cap = s->objcap ? s->objcap * 2 : 16;
        struct mf_object **n = realloc(s->objs, (size_t)cap * sizeof(*n));
        if (!n)
            return AB_ENOMEM;
        s->objs = n;
        s->objcap = cap;
    }
    s->objs[s->nobjs++] = o;
    return 0;
}

/* Finds a top-level scalar value, or NULL. */
static yaml_node_t *root_get(yaml_document_t *doc, yaml_node_t *root, const char *key)
{
    yaml_node_pair_t *p;

    for (p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k && k->type == YAML_SCALAR_NODE && !strcmp((const char *)k->data.scalar.value, key))
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

static int parse_object(struct walk *w, yaml_node_t *root, struct mf_object **out)
{
    struct root_ctx r = {0};
    struct env_ctx e = {0};
    struct mf_object *o = NULL;
    yaml_node_t *kn, *av;
    const char *kind, *api;
    int rc;

    *out = NULL;
    if (root->type != YAML_MAPPING_NODE)
        return fail(w, root,
                    "a manifest must be a mapping with apiVersion, kind, metadata and "
                    "spec");
    w->kind = "manifest";
    kn = root_get(w->doc, root, "kind");
    if (!kn || is_null(kn))
        return fail(w, root, "field 'kind' is required");
    path_push(w, "kind");
    kind = scalar(w, kn);
    path_pop(w, 0);
    if (!kind)
        return AB_EINVAL;
    if (!(o = calloc(1, sizeof(*o))))
        return AB_ENOMEM;
    if (!strcmp(kind, "SandboxTemplate"))
        o->kind = MF_TEMPLATE;
    else if (!strcmp(kind, "SandboxPool"))
        o->kind = MF_POOL;
    else if (!strcmp(kind, "SandboxEnv"))
        o->kind = MF_ENV;
    else {
        rc = fail(w, kn,
                  "unknown kind '%.60s' (expected SandboxTemplate, SandboxPool or "
                  "SandboxEnv)",
                  kind);
        goto out;
    }
    w->kind = mf_kind_name(o->kind);
    av = root_get(w->doc, root, "apiVersion");
    api = av && av->type == YAML_SCALAR_NODE ? (const char *)av->data.scalar.value : NULL;
    if (!api || strcmp(api, MF_API_VERSION) != 0) {
        rc = fail(w, av ? av : root, "field 'apiVersion' must be %s (got '%.60s')", MF_API_VERSION,
                  api ? api : "");
        goto out;
    }
    o->line = (int)root->start_mark.line + 1;
    ab_strlcpy(o->file, w->file, sizeof(o->file));
    if (o->kind != MF_TEMPLATE)
        ab_strlcpy(o->ns, "default", sizeof(o->ns));
    r.o = o;
    if ((rc = each_pair(w, root, root_pair, &r)) != 0)
        goto out;
    if (!r.has_name || !o->name[0]) {
        rc = fail(w, r.meta ? r.meta : root, "field 'metadata.name' is required");
        goto out;
    }
    if (o->kind == MF_TEMPLATE
            ? !mf_name_is_subdomain(o->name)
            : !mf_name_is_label(o->name, o->kind == MF_ENV ? MF_ENV_NAME_MAX : MF_NAME_MAX,
                                o->kind == MF_ENV)) {
        if (o->kind == MF_ENV && strlen(o->name) > MF_ENV_NAME_MAX)
            rc = fail(w, r.name_node, "env name \"%s\" exceeds %d-char cap", o->name,
                      MF_ENV_NAME_MAX);
        else
            rc = fail(w, r.name_node, "field 'metadata.name' must be %s (got '%s')",
                      o->kind == MF_TEMPLATE ? "a DNS subdomain of lower-case letters, digits, "
                                               "'-' and '.', at most 253 characters"
                      : o->kind == MF_ENV    ? "an RFC 1123 label starting with a letter, at most "
                                               "24 characters ([a-z]([a-z0-9-]*[a-z0-9])?)"
                                             : "an RFC 1123 label of at most 63 characters",
                      o->name);
        goto out;
    }
    if (o->ns[0] && !mf_name_is_label(o->ns, MF_NAME_MAX, false)) {
        rc = fail(w, r.meta, "field 'metadata.namespace' must be an RFC 1123 label (got '%s')",
                  o->ns);
        goto out;
    }
    if (!o->labels)
        o->labels = json_object();
    if (!o->annotations)
        o->annotations = json_object();
    if (!o->labels || !o->annotations) {
        rc = AB_ENOMEM;
        goto out;
    }
    if (!r.has_spec) {
        rc = fail(w, root, "field 'spec' is required");
        goto out;
    }
    path_push(w, "spec");
    w->key = r.spec;
    switch (o->kind) {
    case MF_TEMPLATE:
        rc = each_pair(w, r.spec, tpl_spec_pair, &o->u.tpl);
        break;
    case MF_POOL:
        pool_spec_init(&o->u.pool);
        rc = each_pair(w, r.spec, pool_spec_pair, &o->u.pool);
        if (rc == 0 && !o->u.pool.has_replicas)
            rc = fail(w, r.spec_key, "field 'spec.replicas' is required");
        if (rc == 0 && o->u.pool.min_replicas >= 0 && o->u.pool.max_replicas >= 0 &&
            o->u.pool.min_replicas > o->u.pool.max_replicas)
            rc = fail(w, r.spec_key, "field 'spec.minReplicas' (%d) exceeds maxReplicas (%d)",
                      o->u.pool.min_replicas, o->u.pool.max_replicas);
        break;
    case MF_ENV:
        e.env = &o->u.env;
        rc = each_pair(w, r.spec, env_spec_pair, &e);
        if (rc == 0)
            rc = env_finish(w, o, &e, r.spec_key);
        break;
    }
    path_pop(w, 0);
out:
    free(e.ins);
    if (rc != 0) {
        object_free(o);
        return rc;
    }
    *out = o;
    return 0;
}

/* ---- sets ------------------------------------------------------------------------------ */

struct mf_set *mf_set_new(void)
{
    return calloc(1, sizeof(struct mf_set));
}

void mf_set_free(struct mf_set *s)
{
    int i;

    if (!s)
        return;
    for (i = 0; i < s->nobjs; i++)
        object_free(s->objs[i]);
    free(s->objs);
    free(s->errs);
    free(s);
}

const struct mf_object *mf_set_find(const struct mf_set *s, enum mf_kind kind, const char *ns,
                                    const char *name)
{
    int i;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind == kind && !strcmp(o->name, name) &&
            (kind == MF_TEMPLATE || !ns || !strcmp(o->ns, ns)))
            return o;
    }
    return NULL;
}

int mf_parse_buffer(struct mf_set *s, const char *file, const char *buf, size_t len)
{
    yaml_parser_t parser;
    int rc = 0;

    if (!yaml_parser_initialize(&parser))
        return AB_ENOMEM;
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    for (;;) {
        yaml_document_t doc;
        yaml_node_t *root;
        struct mf_object *o = NULL;
        struct walk w;
        char msg[MF_ERR_MAX];

        if (!yaml_parser_load(&parser, &doc)) {
            snprintf(msg, sizeof(msg), "YAML syntax error: %s%s%s",
                     parser.problem ? parser.problem : "malformed document",
                     parser.context ? " " : "", parser.context ? parser.context : "");
            rc = set_push_error(s, file, (int)parser.problem_mark.line + 1, msg);
            break;
        }
        root = yaml_document_get_root_node(&doc);
        if (!root) {
            yaml_document_delete(&doc);
            break; /* end of stream */
        }
        if (root->type == YAML_SCALAR_NODE && is_null(root)) {
            yaml_document_delete(&doc); /* an empty document between "---" lines */
            continue;
        }
        memset(&w, 0, sizeof(w));
        w.set = s;
        w.file = file;
        w.doc = &doc;
        rc = parse_object(&w, root, &o);
        if (rc == 0)
            rc = set_push_object(s, o);
        else if (rc == AB_EINVAL)
            rc = set_push_error(s, file, w.line, w.msg);
        if (rc != 0)
            object_free(rc == AB_ELIMIT || rc == AB_ENOMEM ? o : NULL);
        yaml_document_delete(&doc);
        if (rc != 0)
            break;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* ---- cross-object rules ------------------------------------------------------------------ */

static void drop(struct mf_set *s, int i, const char *msg)
{
    set_push_error(s, s->objs[i]->file, s->objs[i]->line, msg);
    object_free(s->objs[i]);
    memmove(&s->objs[i], &s->objs[i + 1], (size_t)(s->nobjs - i - 1) * sizeof(s->objs[0]));
    s->nobjs--;
}

static const struct mf_object *member_owner(const struct mf_set *s, const char *ns,
                                            const char *pool)
{
    int i, c, m;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind != MF_ENV || strcmp(o->ns, ns) != 0)
            continue;
        for (c = 0; c < o->u.env.nclusters; c++)
            for (m = 0; m < o->u.env.clusters[c].nmembers; m++)
                if (!strcmp(o->u.env.clusters[c].members[m].name, pool))
                    return o;
    }
    return NULL;
}

void mf_set_check(struct mf_set *s)
{
    char msg[MF_ERR_MAX * 3]; /* truncated to MF_ERR_MAX when stored */
    int i, j;

    for (i = 0; i < s->nobjs; i++) {
        struct mf_object *o = s->objs[i];
        for (j = 0; j < i; j++) {
            struct mf_object *p = s->objs[j];
            if (p->kind == o->kind && !strcmp(p->name, o->name) && !strcmp(p->ns, o->ns))
                break;
        }
        if (j < i) {
            snprintf(msg, sizeof(msg), "duplicate %s '%s%s%s' (first defined at %.200s:%d)",
                     mf_kind_name(o->kind), o->ns, o->ns[0] ? "/" : "", o->name, s->objs[j]->file,
                     s->objs[j]->line);
            drop(s, i--, msg);
        }
    }
    for (i = 0; i < s->nobjs; i++) {
        struct mf_object *o = s->objs[i];
        const char *tpl = o->kind == MF_ENV    ? o->u.env.template_ref
                          : o->kind == MF_POOL ? o->u.pool.template_name
                                               : "";
        const struct mf_object *owner;

        if (tpl[0] && !mf_set_find(s, MF_TEMPLATE, NULL, tpl)) {
            snprintf(msg, sizeof(msg),
                     "field '%s' names SandboxTemplate '%s', which no manifest "
                     "defines",
                     o->kind == MF_ENV ? "spec.templateRef.name" : "spec.templateName", tpl);
            drop(s, i--, msg);
            continue;
        }
        if (o->kind == MF_POOL && (owner = member_owner(s, o->ns, o->name)) != NULL) {
            snprintf(msg, sizeof(msg),
                     "SandboxPool '%s/%s' has the name of a member pool of "
                     "SandboxEnv '%s' (%.200s:%d); rename one of them",
                     o->ns, o->name, owner->name, owner->file, owner->line);
            drop(s, i--, msg);
        }
    }
}

/* ---- directories --------------------------------------------------------------------------- */

static bool is_manifest_name(const char *n)
{
    size_t l = strlen(n);

    if (n[0] == '.')
        return false;
    return (l > 5 && !strcmp(n + l - 5, ".yaml")) || (l > 4 && !strcmp(n + l - 4, ".yml"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(const char *dir, char ***names, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **v = NULL;
    int cnt = 0, rc = 0;

    *names = NULL;
    *n = 0;
    if (!d)
        return AB_EIO;
    v = calloc(MF_DIR_FILES_MAX, sizeof(*v));
    if (!v) {
        rc = AB_ENOMEM;
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        if (!is_manifest_name(de->d_name))
            continue;
        if (cnt == MF_DIR_FILES_MAX) {
            rc = AB_ELIMIT;
            goto out;
        }
        if (!(v[cnt] = strdup(de->d_name))) {
            rc = AB_ENOMEM;
            goto out;
        }
        cnt++;
    }
    qsort(v, (size_t)cnt, sizeof(*v), cmp_str);
out:
    closedir(d);
    if (rc != 0) {
        while (cnt > 0)
            free(v[--cnt]);
        free(v);
        return rc;
    }
    *names = v;
    *n = cnt;
    return 0;
}

static int load_file(struct mf_set *s, const char *path)
{
    struct stat st;
    char *buf = NULL;
    char msg[256];
    size_t got = 0;
    int fd, rc = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(msg, sizeof(msg), "cannot read: %s", strerror(errno));
        rc = set_push_error(s, path, 0, msg);
        goto out;
    }
    if (!S_ISREG(st.st_mode))
        goto out; /* directories named x.yaml, sockets: not manifests */
    if (st.st_size > MF_FILE_MAX) {
        snprintf(msg, sizeof(msg), "file is larger than the %d-byte limit for manifests; split it",
                 MF_FILE_MAX);
        rc = set_push_error(s, path, 0, msg);
        goto out;
    }
    if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = AB_ENOMEM;
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    rc = mf_parse_buffer(s, path, buf, got);
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

int mf_load_dir(const char *dir, struct mf_set **out, char *err, size_t errlen)
{
    struct mf_set *s = NULL;
    char **names = NULL;
    char path[MF_PATH_MAX];
    int n = 0, i, rc;

    *out = NULL;
    rc = list_dir(dir, &names, &n);
    if (rc != 0) {
        if (rc == AB_ELIMIT)
            snprintf(err, errlen, "manifest directory %s has more than %d manifest files", dir,
                     MF_DIR_FILES_MAX);
        else
            snprintf(err, errlen, "cannot read manifest directory %s: %s", dir, strerror(errno));
        return rc == AB_ENOMEM ? rc : AB_EIO;
    }
    if (!(s = mf_set_new())) {
        rc = AB_ENOMEM;
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= (int)sizeof(path))
            continue;
        rc = load_file(s, path);
        if (rc == AB_ELIMIT) {
            set_push_error(s, path, 0, "too many objects; the rest of the directory is ignored");
            rc = 0;
            break;
        }
        if (rc != 0)
            goto out;
    }
    mf_set_check(s);
    *out = s;
    s = NULL;
out:
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    mf_set_free(s);
    if (rc != 0)
        snprintf(err, errlen, "loading manifests from %s: %s", dir, ab_strerror(rc));
    return rc;
}

int mf_dir_signature(const char *dir, uint64_t *sig)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0, count = 0;

    if (!d)
        return AB_EIO;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        uint64_t h = 1469598103934665603ULL;
        const unsigned char *p;
        uint64_t f[5];
        size_t i;

        if (!is_manifest_name(de->d_name) || fstatat(dirfd(d), de->d_name, &st, 0) != 0)
            continue;
        for (p = (const unsigned char *)de->d_name; *p; p++)
            h = (h ^ *p) * 1099511628211ULL;
        f[0] = (uint64_t)st.st_size;
        f[1] = (uint64_t)st.st_mtim.tv_sec;
        f[2] = (uint64_t)st.st_mtim.tv_nsec;
        f[3] = (uint64_t)st.st_ino;
        f[4] = (uint64_t)st.st_ctim.tv_nsec;
        for (i = 0; i < AB_ARRAY_LEN(f); i++)
            h = (h ^ f[i]) * 1099511628211ULL;
        sum += h; /* order-independent: readdir order may change */
        count++;
    }
    closedir(d);
    *sig = sum ^ (count * 0x9e3779b97f4a7c15ULL);
    return 0;
}

int mf_set_pools(const struct mf_set *s, const char *cluster_id, struct mf_pool_view *out, int max,
                 int *n)
{
    int i, c, m, k = 0;

    for (i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];

        if (o->kind == MF_POOL) {
            if (k < max) {
                struct mf_pool_view *v = &out[k];
                memset(v, 0, sizeof(*v));
                v->obj = o;
                v->ns = o->ns;
                v->name = o->name;
                v->env = "";
                v->scaling_group = "";
                v->template_name = o->u.pool.template_name;
                v->replicas = o->u.pool.replicas;
                v->startup_timeout_ms = o->u.pool.startup_timeout_ms;
                v->idle_timeout_ms = o->u.pool.idle_timeout_ms;
                v->disable_egress = o->u.pool.disable_egress;
            }
            k++;
            continue;
        }
        if (o->kind != MF_ENV)
            continue;
        for (c = 0; c < o->u.env.nclusters; c++) {
            const struct mf_cluster *cl = &o->u.env.clusters[c];
            if (strcmp(cl->id, cluster_id) != 0)
                continue;
            for (m = 0; m < cl->nmembers; m++, k++) {
                const struct mf_member *mb = &cl->members[m];
                struct mf_pool_view *v;
                if (k >= max)
                    continue;
                v = &out[k];
                memset(v, 0, sizeof(*v));
                v->obj = o;
                v->member = mb;
                v->ns = o->ns;
                v->name = mb->name;
                v->env = o->name;
                v->scaling_group = mb->scaling_group;
                v->template_name = o->u.env.template_ref;
                v->replicas = mb->has_spec ? mb->spec.replicas : AB_MAX(mb->min_replicas, 0);
                v->startup_timeout_ms = o->u.env.startup_timeout_ms ? o->u.env.startup_timeout_ms
                                                                    : mb->spec.startup_timeout_ms;
                v->idle_timeout_ms =
                    o->u.env.idle_timeout_ms ? o->u.env.idle_timeout_ms : mb->spec.idle_timeout_ms;
                v->disable_egress = o->u.env.disable_egress || mb->spec.disable_egress;
            }
        }
    }
    *n = k;
    return 0;
}
