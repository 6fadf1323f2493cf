/* Connection config: a minimal kubeconfig (server, token or tokenFile, CA,
 * insecure-skip-tls-verify, namespace) and the in-cluster service account
 * (kubernetes-api.md §11). */
#include "agent/runtime/kube/client.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

void kube_config_clear(struct kube_config *c)
{
    free(c->ca_pem);
    memset(c, 0, sizeof(*c));
}

/* YAML node → JSON (scalars stay strings, except true/false). */
static json_t *node_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
    if (!n || depth > 32)
        return NULL;
    if (n->type == YAML_SCALAR_NODE) {
        const char *v = (const char *)n->data.scalar.value;
        size_t len = n->data.scalar.length;
        if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            if (len == 4 && strcmp(v, "true") == 0)
                return json_true();
            if (len == 5 && strcmp(v, "false") == 0)
                return json_false();
        }
        return json_stringn(v, len);
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_t *a = json_array();
        for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
             i++)
            json_array_append_new(a, node_json(doc, yaml_document_get_node(doc, *i), depth + 1));
        return a;
    }
    json_t *o = json_object();
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE)
            continue;
        json_t *v = node_json(doc, yaml_document_get_node(doc, p->value), depth + 1);
        if (v)
            json_object_set_new(o, (const char *)k->data.scalar.value, v);
    }
    return o;
}

static json_t *yaml_to_json(const char *text, size_t len, char *err, size_t errlen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    if (!yaml_parser_initialize(&parser)) {
        snprintf(err, errlen, "kubeconfig: out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        snprintf(err, errlen, "kubeconfig line %zu: %s", parser.problem_mark.line + 1,
                 parser.problem ? parser.problem : "invalid YAML");
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    json_t *j = root && root->type == YAML_MAPPING_NODE ? node_json(&doc, root, 0) : NULL;
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (!j)
        snprintf(err, errlen, "kubeconfig must be a YAML mapping");
    return j;
}

/* The entry of list `field` whose name is `name`, then its `inner` object. */
static json_t *named(json_t *root, const char *field, const char *name, const char *inner)
{
    json_t *list = json_object_get(root, field);
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && strcmp(n, name) == 0) {
            json_t *o = json_object_get(e, inner);
            return json_is_object(o) ? o : NULL;
        }
    }
    return NULL;
}

static int copy_field(char *dst, size_t size, json_t *obj, const char *key, const char *what,
                      char *err, size_t errlen)
{
    const char *v = json_string_value(json_object_get(obj, key));
    if (!v)
        return 0;
    if (strlen(v) >= size) {
        snprintf(err, errlen, "kubeconfig %s.%s is longer than %zu bytes", what, key, size - 1);
        return AB_ELIMIT;
    }
    ab_strlcpy(dst, v, size);
    return 0;
}

/* A relative path in a kubeconfig is relative to the file's directory. */
static int copy_path(char *dst, size_t size, json_t *obj, const char *key, const char *dir,
                     const char *what, char *err, size_t errlen)
{
    const char *v = json_string_value(json_object_get(obj, key));
    if (!v || !*v)
        return 0;
    int n = v[0] == '/' || !dir || !*dir ? snprintf(dst, size, "%s", v)
                                         : snprintf(dst, size, "%s/%s", dir, v);
    if (n < 0 || (size_t)n >= size) {
        snprintf(err, errlen, "kubeconfig %s.%s is longer than %zu bytes", what, key, size - 1);
        return AB_ELIMIT;
    }
    return 0;
}

int kube_config_parse_kubeconfig(const char *text, size_t len, const char *dir, const char *context,
                                 struct kube_config *out, char *err, size_t errlen)
{
    int rc = AB_EINVAL;
    memset(out, 0, sizeof(*out));
    json_t *root = yaml_to_json(text, len, err, errlen);
    if (!root)
        return AB_EINVAL;
    const char *ctxname =
        context ? context : json_string_value(json_object_get(root, "current-context"));
    if (!ctxname || !*ctxname) {
        snprintf(err, errlen, "kubeconfig has no current-context (and none was given)");
        goto out;
    }
    json_t *ctx = named(root, "contexts", ctxname, "context");
    if (!ctx) {
        snprintf(err, errlen, "kubeconfig context '%s' not found in contexts", ctxname);
        goto out;
    }
    const char *cname = json_string_value(json_object_get(ctx, "cluster"));
    json_t *cluster = cname ? named(root, "clusters", cname, "cluster") : NULL;
    if (!cluster) {
        snprintf(err, errlen,
                 "kubeconfig context '%s' names cluster '%s', which is not in clusters", ctxname,
                 cname ? cname : "");
        goto out;
    }
    const char *server = json_string_value(json_object_get(cluster, "server"));
    if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)) {
        snprintf(err, errlen, "kubeconfig cluster '%s': server must be an http(s):// URL", cname);
        goto out;
    }
    if ((rc = copy_field(out->server, sizeof(out->server), cluster, "server", "cluster", err,
                         errlen)) < 0)
        goto out;
    rc = AB_EINVAL;
    size_t sl = strlen(out->server);
    while (sl > 0 && out->server[sl - 1] == '/')
        out->server[--sl] = '\0';
    out->insecure = json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"));
    if (copy_path(out->ca_file, sizeof(out->ca_file), cluster, "certificate-authority", dir,
                  "cluster", err, errlen) < 0)
        goto out;
    const char *cad = json_string_value(json_object_get(cluster, "certificate-authority-data"));
    if (cad && *cad) {
        size_t cap = strlen(cad) / 4 * 3 + 4, got = 0;
        out->ca_pem = malloc(cap + 1);
        if (!out->ca_pem) {
            rc = AB_ENOMEM;
            goto out;
        }
        if (crypto_base64_decode(cad, strlen(cad), (uint8_t *)out->ca_pem, cap, &got) < 0) {
            snprintf(err, errlen,
                     "kubeconfig cluster '%s': certificate-authority-data is not base64", cname);
            goto out;
        }
        out->ca_pem[got] = '\0';
        out->ca_pem_len = got;
    }
    const char *uname = json_string_value(json_object_get(ctx, "user"));
    json_t *user = uname ? named(root, "users", uname, "user") : NULL;
    if (uname && !user) {
        snprintf(err, errlen, "kubeconfig context '%s' names user '%s', which is not in users",
                 ctxname, uname);
        goto out;
    }
    if (user) {
        static const char *const refused[] = {"exec",
                                              "auth-provider",
                                              "client-certificate",
                                              "client-certificate-data",
                                              "client-key",
                                              "client-key-data",
                                              "username"};
        for (size_t i = 0; i < AB_ARRAY_LEN(refused); i++)
            if (json_object_get(user, refused[i])) {
                snprintf(err, errlen,
                         "kubeconfig user '%s': '%s' is not supported; use token or tokenFile",
                         uname, refused[i]);
                goto out;
            }
        if (copy_field(out->token, sizeof(out->token), user, "token", "user", err, errlen) < 0 ||
            copy_path(out->token_file, sizeof(out->token_file), user, "tokenFile", dir, "user", err,
                      errlen) < 0)
            goto out;
    }
    if (copy_field(out->ns, sizeof(out->ns), ctx, "namespace", "context", err, errlen) < 0)
        goto out;
    if (!out->ns[0])
        ab_strlcpy(out->ns, "default", sizeof(out->ns));
    rc = 0;
out:
    json_decref(root);
    if (rc < 0)
        kube_config_clear(out);
    return rc;
}

/* Reads a small file whole into buf (NUL-terminated), trailing whitespace cut. */
static int read_small(const char *path, char *buf, size_t size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? AB_ENOENT : AB_EIO;
    size_t n = fread(buf, 1, size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad)
        return AB_EIO;
    if (n == size)
        return AB_ELIMIT;
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    buf[n] = '\0';
    return (int)n;
}

int kube_config_in_cluster(const char *sa_dir, struct kube_config *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port) {
        snprintf(err, errlen,
                 "not in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are unset");
        return AB_ENOENT;
    }
    bool v6 = strchr(host, ':') != NULL && host[0] != '[';
    int n = snprintf(out->server, sizeof(out->server), v6 ? "https://[%s]:%s" : "https://%s:%s",
                     host, port);
    if (n < 0 || (size_t)n >= sizeof(out->server)) {
        snprintf(err, errlen, "KUBERNETES_SERVICE_HOST is too long");
        return AB_ELIMIT;
    }
    const char *dir = sa_dir ? sa_dir : SA_DIR;
    snprintf(out->token_file, sizeof(out->token_file), "%s/token", dir);
    snprintf(out->ca_file, sizeof(out->ca_file), "%s/ca.crt", dir);
    char path[KUBE_PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/namespace", dir);
    if (read_small(path, out->ns, sizeof(out->ns)) <= 0)
        ab_strlcpy(out->ns, "default", sizeof(out->ns));
    char probe[16];
    int rc = read_small(out->token_file, probe, sizeof(probe));
    if (rc == AB_ENOENT || rc == AB_EIO) {
        snprintf(err, errlen,
                 "in a cluster, but the service-account token %s cannot be read "
                 "(automountServiceAccountToken: false?)",
                 out->token_file);
        return AB_ENOENT;
    }
    return 0;
}

int kube_config_load(const char *path, struct kube_config *out, char *err, size_t errlen)
{
    char chosen[KUBE_PATH_MAX];
    if (!path || !*path) {
        int rc = kube_config_in_cluster(NULL, out, err, errlen);
        if (rc != AB_ENOENT || getenv("KUBERNETES_SERVICE_HOST"))
            return rc;
        const char *env = getenv("KUBECONFIG");
        const char *home = getenv("HOME");
        if (env && *env) {
            size_t n = strcspn(env, ":");
            if (n >= sizeof(chosen)) {
                snprintf(err, errlen, "KUBECONFIG's first path is too long");
                return AB_ELIMIT;
            }
            memcpy(chosen, env, n);
            chosen[n] = '\0';
        } else if (home && *home) {
            snprintf(chosen, sizeof(chosen), "%s/.kube/config", home);
        } else {
            snprintf(err, errlen, "no kubeconfig: not in a cluster, KUBECONFIG and HOME unset");
            return AB_ENOENT;
        }
        path = chosen;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "kubeconfig %s: %s", path, strerror(errno));
        return AB_ENOENT;
    }
    char *buf = malloc(KUBE_CONFIG_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        return AB_ENOMEM;
    }
    size_t n = fread(buf, 1, KUBE_CONFIG_FILE_MAX + 1, f);
    fclose(f);
    if (n > KUBE_CONFIG_FILE_MAX) {
        free(buf);
        snprintf(err, errlen, "kubeconfig %s is larger than %d bytes", path, KUBE_CONFIG_FILE_MAX);
        return AB_ELIMIT;
    }
    char dir[KUBE_PATH_MAX];
    ab_strlcpy(dir, path, sizeof(dir));
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        ab_strlcpy(dir, ".", sizeof(dir));
    int rc = kube_config_parse_kubeconfig(buf, n, dir, NULL, out, err, errlen);
    free(buf);
    return rc;
}
