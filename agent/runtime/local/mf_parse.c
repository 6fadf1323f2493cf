/* SandboxTemplate / SandboxPool / SandboxEnv manifests (reference §6, CRD
 * field tables in crds-and-charts.md) parsed with the libyaml document API,
 * which keeps the line of every node for error messages: one object per
 * document, its metadata, then its spec by kind. */
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ---- objects ------------------------------------------------------------------------ */

void mf_object_free(struct mf_object *o)
{
    int c;

    if (!o)
        return;
    json_decref(o->labels);
    json_decref(o->annotations);
    json_decref(o->raw);
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

static int meta_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct root_ctx *r = ctx;
    char buf[MF_STR_MAX];

    if (!strcmp(k, "name")) {
        r->has_name = v != NULL;
        r->name_node = v;
        return mfw_str(w, v, r->o->name, sizeof(r->o->name));
    }
    if (!strcmp(k, "namespace")) {
        if (r->o->kind == MF_TEMPLATE)
            return mfw_str(w, v, buf, sizeof(buf)); /* cluster-scoped: ignored */
        return mfw_str(w, v, r->o->ns, sizeof(r->o->ns));
    }
    if (!strcmp(k, "labels"))
        return mfw_map(w, v, &r->o->labels);
    if (!strcmp(k, "annotations"))
        return mfw_map(w, v, &r->o->annotations);
    /* The rest of ObjectMeta, as `kubectl get -o yaml` prints it. */
    if (!strcmp(k, "uid") || !strcmp(k, "resourceVersion") || !strcmp(k, "generation") ||
        !strcmp(k, "creationTimestamp") || !strcmp(k, "deletionTimestamp") ||
        !strcmp(k, "deletionGracePeriodSeconds") || !strcmp(k, "ownerReferences") ||
        !strcmp(k, "finalizers") || !strcmp(k, "managedFields") || !strcmp(k, "selfLink") ||
        !strcmp(k, "generateName"))
        return 0;
    return mfw_unknown(w);
}

static int root_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx)
{
    struct root_ctx *r = ctx;

    if (!strcmp(k, "apiVersion") || !strcmp(k, "kind") || !strcmp(k, "status"))
        return 0; /* checked before; status is the controller's */
    if (!strcmp(k, "metadata")) {
        r->meta = v;
        return v ? mfw_each_pair(w, v, meta_pair, r) : 0;
    }
    if (!strcmp(k, "spec")) {
        r->has_spec = v != NULL;
        r->spec = v;
        r->spec_key = w->key;
        return 0; /* parsed after metadata, whatever the key order */
    }
    return mfw_unknown(w);
}

int mf_set_push_error(struct mf_set *s, const char *file, int line, const char *msg)
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

int mf_set_push_object(struct mf_set *s, struct mf_object *o)
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

/* ---- the document as JSON ------------------------------------------------------------ */

#define RAW_DEPTH_MAX 64

/* A plain scalar as YAML 1.1 reads it: null, bool (yes/on too), integer, else a string.
 * Quoted scalars are always strings (so "3" stays "3"). */
static json_t *raw_scalar(const yaml_node_t *n)
{
    const char *v = (const char *)n->data.scalar.value;
    char *end;
    long long x;

    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return json_string(v);
    if (mfw_is_null(n))
        return json_null();
    /* the words mfw_bool takes, so a written-back document reads the same */
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes",
                                      "YES",  "on",   "On",   "ON"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No",
                                     "NO",    "off",   "Off",   "OFF"};
    for (size_t i = 0; i < AB_ARRAY_LEN(yes); i++) {
        if (!strcmp(v, yes[i]))
            return json_true();
        if (!strcmp(v, no[i]))
            return json_false();
    }
    if ((v[0] >= '0' && v[0] <= '9') || ((v[0] == '-' || v[0] == '+') && v[1])) {
        x = strtoll(v, &end, 10);
        if (!*end && (v[0] != '0' || !v[1]))
            return json_integer(x);
    }
    return json_string(v);
}

#define RAW_NODES_MAX 100000

/* The document under n as JSON; NULL only without memory. Aliases make the
 * node graph a DAG or even a cycle (in the schemaless `template`, which the
 * walk never enters): past RAW_DEPTH_MAX levels or RAW_NODES_MAX nodes the
 * rest is null, so the copy stays bounded whatever the document. */
static json_t *raw_node(yaml_document_t *doc, yaml_node_t *n, int depth, long *budget)
{
    json_t *o;

    if (!n || depth > RAW_DEPTH_MAX || --*budget < 0)
        return json_null();
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return raw_scalar(n);
    case YAML_SEQUENCE_NODE:
        if (!(o = json_array()))
            return NULL;
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++) {
            json_t *v = raw_node(doc, yaml_document_get_node(doc, *it), depth + 1, budget);
            if (!v || json_array_append_new(o, v) != 0) {
                json_decref(o);
                return NULL;
            }
        }
        return o;
    case YAML_MAPPING_NODE:
        if (!(o = json_object()))
            return NULL;
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(doc, p->key);
            json_t *v = raw_node(doc, yaml_document_get_node(doc, p->value), depth + 1, budget);
            if (!k || k->type != YAML_SCALAR_NODE || !v ||
                json_object_set_new(o, (const char *)k->data.scalar.value, v) != 0) {
                json_decref(v);
                json_decref(o);
                return NULL;
            }
        }
        return o;
    default:
        return NULL;
    }
}

/* Env members written without a name (the API writes them so) get the
 * rendered one, in the same order the parser rendered them. */
static void raw_name_members(struct mf_object *o)
{
    json_t *clusters = json_object_get(json_object_get(o->raw, "spec"), "clusters");
    size_t ci, mi;
    json_t *c, *m;

    json_array_foreach(clusters, ci, c)
    {
        if ((int)ci >= o->u.env.nclusters)
            break;
        json_array_foreach(json_object_get(c, "members"), mi, m)
        {
            if ((int)mi >= o->u.env.clusters[ci].nmembers || !json_is_object(m))
                break;
            if (!json_is_string(json_object_get(m, "name")))
                json_object_set_new(m, "name", json_string(o->u.env.clusters[ci].members[mi].name));
        }
    }
}

static int parse_object(struct mf_walk *w, yaml_node_t *root, struct mf_object **out)
{
    struct root_ctx r = {0};
    struct mf_env_ctx e = {0};
    struct mf_object *o = NULL;
    long budget = RAW_NODES_MAX;
    yaml_node_t *kn, *av;
    const char *kind, *api;
    int rc;

    *out = NULL;
    if (root->type != YAML_MAPPING_NODE)
        return mfw_fail(w, root,
                        "a manifest must be a mapping with apiVersion, kind, metadata and "
                        "spec");
    w->kind = "manifest";
    kn = root_get(w->doc, root, "kind");
    if (!kn || mfw_is_null(kn))
        return mfw_fail(w, root, "field 'kind' is required");
    mfw_path_push(w, "kind");
    kind = mfw_scalar(w, kn);
    mfw_path_pop(w, 0);
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
        rc = mfw_fail(w, kn,
                      "unknown kind '%.60s' (expected SandboxTemplate, SandboxPool or "
                      "SandboxEnv)",
                      kind);
        goto out;
    }
    w->kind = mf_kind_name(o->kind);
    av = root_get(w->doc, root, "apiVersion");
    api = av && av->type == YAML_SCALAR_NODE ? (const char *)av->data.scalar.value : NULL;
    if (!api || strcmp(api, MF_API_VERSION) != 0) {
        rc = mfw_fail(w, av ? av : root, "field 'apiVersion' must be %s (got '%.60s')",
                      MF_API_VERSION, api ? api : "");
        goto out;
    }
    o->line = (int)root->start_mark.line + 1;
    ab_strlcpy(o->file, w->file, sizeof(o->file));
    if (o->kind != MF_TEMPLATE)
        ab_strlcpy(o->ns, "default", sizeof(o->ns));
    r.o = o;
    if ((rc = mfw_each_pair(w, root, root_pair, &r)) != 0)
        goto out;
    if (!r.has_name || !o->name[0]) {
        rc = mfw_fail(w, r.meta ? r.meta : root, "field 'metadata.name' is required");
        goto out;
    }
    if (o->kind == MF_TEMPLATE
            ? !mf_name_is_subdomain(o->name)
            : !mf_name_is_label(o->name, o->kind == MF_ENV ? MF_ENV_NAME_MAX : MF_NAME_MAX,
                                o->kind == MF_ENV)) {
        if (o->kind == MF_ENV && strlen(o->name) > MF_ENV_NAME_MAX)
            rc = mfw_fail(w, r.name_node, "env name \"%s\" exceeds %d-char cap", o->name,
                          MF_ENV_NAME_MAX);
        else
            rc = mfw_fail(w, r.name_node, "field 'metadata.name' must be %s (got '%s')",
                          o->kind == MF_TEMPLATE ? "a DNS subdomain of lower-case letters, digits, "
                                                   "'-' and '.', at most 253 characters"
                          : o->kind == MF_ENV ? "an RFC 1123 label starting with a letter, at most "
                                                "24 characters ([a-z]([a-z0-9-]*[a-z0-9])?)"
                                              : "an RFC 1123 label of at most 63 characters",
                          o->name);
        goto out;
    }
    if (o->ns[0] && !mf_name_is_label(o->ns, MF_NAME_MAX, false)) {
        rc = mfw_fail(w, r.meta, "field 'metadata.namespace' must be an RFC 1123 label (got '%s')",
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
        rc = mfw_fail(w, root, "field 'spec' is required");
        goto out;
    }
    mfw_path_push(w, "spec");
    w->key = r.spec;
    switch (o->kind) {
    case MF_TEMPLATE:
        rc = mfw_each_pair(w, r.spec, mf_tpl_spec_pair, &o->u.tpl);
        break;
    case MF_POOL:
        mf_pool_spec_init(&o->u.pool);
        rc = mfw_each_pair(w, r.spec, mf_pool_spec_pair, &o->u.pool);
        if (rc == 0 && !o->u.pool.has_replicas)
            rc = mfw_fail(w, r.spec_key, "field 'spec.replicas' is required");
        if (rc == 0 && o->u.pool.min_replicas >= 0 && o->u.pool.max_replicas >= 0 &&
            o->u.pool.min_replicas > o->u.pool.max_replicas)
            rc = mfw_fail(w, r.spec_key, "field 'spec.minReplicas' (%d) exceeds maxReplicas (%d)",
                          o->u.pool.min_replicas, o->u.pool.max_replicas);
        break;
    case MF_ENV:
        e.env = &o->u.env;
        rc = mfw_each_pair(w, r.spec, mf_env_spec_pair, &e);
        if (rc == 0)
            rc = mf_env_finish(w, o, &e, r.spec_key);
        break;
    }
    mfw_path_pop(w, 0);
    if (rc == 0 && !(o->raw = raw_node(w->doc, root, 0, &budget)))
        rc = AB_ENOMEM;
    if (rc == 0 && o->kind == MF_ENV)
        raw_name_members(o);
out:
    free(e.ins);
    if (rc != 0) {
        mf_object_free(o);
        return rc;
    }
    *out = o;
    return 0;
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
        struct mf_walk w;
        char msg[MF_ERR_MAX];

        if (!yaml_parser_load(&parser, &doc)) {
            snprintf(msg, sizeof(msg), "YAML syntax error: %s%s%s",
                     parser.problem ? parser.problem : "malformed document",
                     parser.context ? " " : "", parser.context ? parser.context : "");
            rc = mf_set_push_error(s, file, (int)parser.problem_mark.line + 1, msg);
            break;
        }
        root = yaml_document_get_root_node(&doc);
        if (!root) {
            yaml_document_delete(&doc);
            break; /* end of stream */
        }
        if (root->type == YAML_SCALAR_NODE && mfw_is_null(root)) {
            yaml_document_delete(&doc); /* an empty document between "---" lines */
            continue;
        }
        memset(&w, 0, sizeof(w));
        w.set = s;
        w.file = file;
        w.doc = &doc;
        rc = parse_object(&w, root, &o);
        if (rc == 0)
            rc = mf_set_push_object(s, o);
        else if (rc == AB_EINVAL)
            rc = mf_set_push_error(s, file, w.line, w.msg);
        if (rc != 0)
            mf_object_free(rc == AB_ELIMIT || rc == AB_ENOMEM ? o : NULL);
        yaml_document_delete(&doc);
        if (rc != 0)
            break;
    }
    yaml_parser_delete(&parser);
    return rc;
}
