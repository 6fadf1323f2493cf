/* The template catalogue (templates.h): validation, the sandbox_templates
 * table, the copy in memory, the change EVENT and the agents' pull route. */
#include "hub/templates.h"

#include "hub/audit.h"
#include "hub/db.h"
#include "hub/hub.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEMPLATES_API_VERSION "agents.navix.sh/v1alpha1"
#define TEMPLATES_KIND "SandboxTemplate"
#define LOAD_RETRY_MS 2000
/* Read again this often: another hub replica's writes (or a hand edit of
 * the table) reach this hub's copy and its clusters within this. */
#define RELOAD_MS 30000
#define LABEL_KEY_MAX 317
#define VALUE_MAX 65536

struct templates {
    struct loop *loop;
    struct db_pool *db;
    json_t *items; /* name → object */
    bool loaded;
    bool loading;
    int64_t revision;
    struct loop_timer retry;
    bool retry_on;
    uint64_t writes; /* writes done: a read started before one is stale */
    bool closing;
    templates_change_fn change_fn;
    void *change_arg;
};

/* ---- validation (pure) ---------------------------------------------------------------- */

static bool is_subdomain(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > TEMPLATES_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
        if (!alnum && c != '-' && c != '.')
            return false;
        if ((i == 0 || i == n - 1) && !alnum)
            return false;
        if (c == '.' && (s[i - 1] == '.' || s[i - 1] == '-' || s[i + 1] == '-'))
            return false;
    }
    return true;
}

static int string_map(const json_t *m, const char *field, char *err, size_t errlen)
{
    const char *k;
    json_t *v;

    if (!m)
        return 0;
    if (!json_is_object(m)) {
        snprintf(err, errlen, "field '%s' must be an object of strings", field);
        return AB_EINVAL;
    }
    json_object_foreach((json_t *)m, k, v)
    {
        if (strlen(k) == 0 || strlen(k) > LABEL_KEY_MAX) {
            snprintf(err, errlen, "field '%s' has a key of %zu characters (1..%d)", field,
                     strlen(k), LABEL_KEY_MAX);
            return AB_EINVAL;
        }
        if (!json_is_string(v) || json_string_length(v) > VALUE_MAX) {
            snprintf(err, errlen, "field '%s.%.100s' must be a string of at most %d bytes", field,
                     k, VALUE_MAX);
            return AB_EINVAL;
        }
    }
    return 0;
}

static int check_runtimes(const json_t *rts, char *err, size_t errlen)
{
    size_t i;
    json_t *r;

    if (!json_is_array(rts)) {
        snprintf(err, errlen, "field 'spec.runtimes' must be a list of {name, port?, ...}");
        return AB_EINVAL;
    }
    json_array_foreach(rts, i, r)
    {
        const json_t *name = json_object_get(r, "name"), *port = json_object_get(r, "port");
        if (!json_is_object(r) || !json_is_string(name) || json_string_length(name) == 0) {
            snprintf(err, errlen, "field 'spec.runtimes[%zu].name' is required (a string)", i);
            return AB_EINVAL;
        }
        if (port && (!json_is_integer(port) || json_integer_value(port) < 1 ||
                     json_integer_value(port) > 65535)) {
            snprintf(err, errlen, "field 'spec.runtimes[%zu].port' must be an integer 1..65535", i);
            return AB_EINVAL;
        }
        static const char *const strs[] = {"protocol", "description", "logDir"};
        for (size_t k = 0; k < AB_ARRAY_LEN(strs); k++) {
            const json_t *v = json_object_get(r, strs[k]);
            if (v && !json_is_string(v)) {
                snprintf(err, errlen, "field 'spec.runtimes[%zu].%s' must be a string", i, strs[k]);
                return AB_EINVAL;
            }
        }
    }
    return 0;
}

static int check_visibility(const json_t *vis, char *err, size_t errlen)
{
    const json_t *rules = json_object_get(vis, "rules"), *r, *u;
    size_t i, j;

    if (!json_is_object(vis) || (rules && !json_is_array(rules))) {
        snprintf(err, errlen, "field 'spec.visibility' must be {rules: [{team, users}]}");
        return AB_EINVAL;
    }
    json_array_foreach(rules, i, r)
    {
        const json_t *team = json_object_get(r, "team"), *users = json_object_get(r, "users");
        if (!json_is_object(r) || (team && !json_is_string(team)) ||
            (users && !json_is_array(users))) {
            snprintf(err, errlen,
                     "field 'spec.visibility.rules[%zu]' must be {team: string, users: [string]}",
                     i);
            return AB_EINVAL;
        }
        json_array_foreach(users, j, u) if (!json_is_string(u))
        {
            snprintf(err, errlen, "field 'spec.visibility.rules[%zu].users[%zu]' must be a string",
                     i, j);
            return AB_EINVAL;
        }
    }
    return 0;
}

static int check_spec(const json_t *spec, char *err, size_t errlen)
{
    const char *k;
    json_t *v;
    int rc;

    if (!json_is_object(spec)) {
        snprintf(err, errlen, "field 'spec' is required (an object)");
        return AB_EINVAL;
    }
    json_object_foreach((json_t *)spec, k, v)
    {
        if (!strcmp(k, "template")) {
            const json_t *ps = json_object_get(v, "spec");
            if (!json_is_object(v) || (ps && !json_is_object(ps)) ||
                (json_object_get(ps, "containers") &&
                 !json_is_array(json_object_get(ps, "containers")))) {
                snprintf(err, errlen,
                         "field 'spec.template' must be a PodTemplateSpec object "
                         "({metadata, spec: {containers: [...]}})");
                return AB_EINVAL;
            }
        } else if (!strcmp(k, "idleImage") || !strcmp(k, "version") || !strcmp(k, "description")) {
            if (!json_is_string(v)) {
                snprintf(err, errlen, "field 'spec.%s' must be a string", k);
                return AB_EINVAL;
            }
        } else if (!strcmp(k, "runtimes")) {
            if ((rc = check_runtimes(v, err, errlen)) != 0)
                return rc;
        } else if (!strcmp(k, "visibility")) {
            if ((rc = check_visibility(v, err, errlen)) != 0)
                return rc;
        } else {
            snprintf(err, errlen,
                     "field 'spec.%.100s' is not a SandboxTemplate field (template, idleImage, "
                     "runtimes, version, description, visibility)",
                     k);
            return AB_EINVAL;
        }
    }
    return 0;
}

int templates_validate(const json_t *in, const char *path_name, json_t **out, char *err,
                       size_t errlen)
{
    const json_t *md = json_object_get(in, "metadata");
    const char *av = json_string_value(json_object_get(in, "apiVersion"));
    const char *kind = json_string_value(json_object_get(in, "kind"));
    const char *name = json_string_value(json_object_get(md, "name"));
    const char *ns = json_string_value(json_object_get(md, "namespace"));
    int rc;

    *out = NULL;
    if (!json_is_object(in)) {
        snprintf(err, errlen, "field 'crdJson' must be a SandboxTemplate object");
        return AB_EINVAL;
    }
    if ((json_object_get(in, "apiVersion") && (!av || strcmp(av, TEMPLATES_API_VERSION) != 0))) {
        snprintf(err, errlen, "field 'apiVersion' must be \"" TEMPLATES_API_VERSION "\"");
        return AB_EINVAL;
    }
    if (json_object_get(in, "kind") && (!kind || strcmp(kind, TEMPLATES_KIND) != 0)) {
        snprintf(err, errlen, "field 'kind' must be \"" TEMPLATES_KIND "\"");
        return AB_EINVAL;
    }
    if (!json_is_object(md) || !name || !is_subdomain(name)) {
        snprintf(err, errlen,
                 "field 'metadata.name' is required: a DNS subdomain of lower-case letters, "
                 "digits, '-' and '.', at most %d characters",
                 TEMPLATES_NAME_MAX);
        return AB_EINVAL;
    }
    if (path_name && strcmp(path_name, name) != 0) {
        snprintf(err, errlen,
                 "field 'metadata.name' is '%.253s' but the path names template '%.253s'", name,
                 path_name);
        return AB_EINVAL;
    }
    if (ns && ns[0]) {
        snprintf(err, errlen,
                 "field 'metadata.namespace' must be absent: a SandboxTemplate is cluster-scoped");
        return AB_EINVAL;
    }
    if ((rc = string_map(json_object_get(md, "labels"), "metadata.labels", err, errlen)) != 0 ||
        (rc = string_map(json_object_get(md, "annotations"), "metadata.annotations", err,
                         errlen)) != 0 ||
        (rc = check_spec(json_object_get(in, "spec"), err, errlen)) != 0)
        return rc;

    json_t *labels = json_object_get(md, "labels") ? json_deep_copy(json_object_get(md, "labels"))
                                                   : json_object();
    json_object_set_new(labels, TEMPLATES_SYNC_LABEL, json_string("global"));
    json_t *meta = json_pack("{s:s,s:o}", "name", name, "labels", labels);
    if (meta && json_object_get(md, "annotations"))
        json_object_set_new(meta, "annotations",
                            json_deep_copy(json_object_get(md, "annotations")));
    json_t *o =
        json_pack("{s:s,s:s,s:o,s:o}", "apiVersion", TEMPLATES_API_VERSION, "kind", TEMPLATES_KIND,
                  "metadata", meta, "spec", json_deep_copy(json_object_get(in, "spec")));
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    char *text = json_dumps(o, JSON_COMPACT);
    size_t len = text ? strlen(text) : 0;
    free(text);
    if (len > TEMPLATES_OBJECT_MAX) {
        snprintf(err, errlen, "the template is %zu bytes of JSON, over the %d-byte limit", len,
                 TEMPLATES_OBJECT_MAX);
        json_decref(o);
        return AB_ELIMIT;
    }
    *out = o;
    return 0;
}

/* ---- storage (database workers) -------------------------------------------------------- */

/* name → object of every row, into *out. */
static int read_all(PGconn *c, json_t **out, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, "SELECT name, crd::text FROM sandbox_templates ORDER BY name");
    json_t *all;

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        int rc = db_fail(c, r, "reading sandbox_templates", err, errlen);
        PQclear(r);
        return rc;
    }
    all = json_object();
    for (int i = 0; all && i < PQntuples(r); i++) {
        json_t *o = json_loads(PQgetvalue(r, i, 1), 0, NULL);
        if (o)
            json_object_set_new(all, PQgetvalue(r, i, 0), o);
    }
    PQclear(r);
    if (!all)
        return AB_ENOMEM;
    *out = all;
    return 0;
}

struct tjob {
    struct templates *t;
    enum templates_op op; /* 0: the initial read */
    char name[TEMPLATES_NAME_MAX + 1];
    char *text; /* the object as JSON (create, replace) */
    char actor[160];
    uint64_t writes; /* t->writes when a read was submitted */
    templates_write_cb cb;
    void *arg;
    json_t *all; /* the catalogue after the job */
    char err[512];
};

static void tjob_free(struct tjob *j)
{
    free(j->text);
    json_decref(j->all);
    free(j);
}

static int load_job(PGconn *c, void *arg)
{
    struct tjob *j = arg;
    return read_all(c, &j->all, j->err, sizeof(j->err));
}

static int write_sql(PGconn *c, struct tjob *j)
{
    const char *v[3] = {j->name, j->text, j->actor};
    const char *sql;
    PGresult *r;

    if (j->op == TEMPLATES_CREATE) {
        r = PQexec(c, "SELECT count(*) FROM sandbox_templates");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            int rc = db_fail(c, r, "counting sandbox_templates", j->err, sizeof(j->err));
            PQclear(r);
            return rc;
        }
        long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
        if (n >= TEMPLATES_COUNT_MAX) {
            snprintf(j->err, sizeof(j->err),
                     "the catalogue already holds %ld templates, its limit; delete one first", n);
            return AB_ELIMIT;
        }
        sql = "INSERT INTO sandbox_templates (name, crd, created_by, updated_by) "
              "VALUES ($1, $2::jsonb, $3, $3) ON CONFLICT (name) DO NOTHING";
    } else if (j->op == TEMPLATES_REPLACE) {
        sql = "UPDATE sandbox_templates SET crd = $2::jsonb, updated_by = $3, updated_at = now() "
              "WHERE name = $1";
    } else {
        sql = "DELETE FROM sandbox_templates WHERE name = $1";
    }
    r = PQexecParams(c, sql, j->op == TEMPLATES_DELETE ? 1 : 3, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        int rc = db_fail(c, r, "writing sandbox_templates", j->err, sizeof(j->err));
        PQclear(r);
        return rc;
    }
    bool none = strcmp(PQcmdTuples(r), "0") == 0;
    PQclear(r);
    if (none && j->op == TEMPLATES_CREATE) {
        snprintf(j->err, sizeof(j->err),
                 "sandbox template '%s' already exists: PUT /v1/admin/sandbox-templates/%s "
                 "replaces it",
                 j->name, j->name);
        return AB_EEXIST;
    }
    if (none) {
        snprintf(j->err, sizeof(j->err), "sandbox template '%s' not found in the catalogue",
                 j->name);
        return AB_ENOENT;
    }
    return 0;
}

static int write_job(PGconn *c, void *arg)
{
    struct tjob *j = arg;
    static const char *const actions[] = {[TEMPLATES_CREATE] = "template.create",
                                          [TEMPLATES_REPLACE] = "template.update",
                                          [TEMPLATES_DELETE] = "template.delete"};
    int rc = db_exec(c, "BEGIN", j->err, sizeof(j->err));

    if (rc == 0)
        rc = write_sql(c, j);
    if (rc == 0) {
        const struct audit_entry e = {
            .actor = j->actor, .action = actions[j->op], .target = j->name};
        rc = audit_write_conn(c, &e, j->err, sizeof(j->err));
    }
    if (rc == 0)
        rc = read_all(c, &j->all, j->err, sizeof(j->err));
    return db_finish_tx(c, rc, j->err, sizeof(j->err));
}

/* ---- the loop's copy ----------------------------------------------------------------- */

static void changed(struct templates *t)
{
    t->revision++;
    if (!t->change_fn)
        return;
    json_t *ev =
        json_pack("{s:s,s:I}", "type", TEMPLATES_EVENT, "revision", (json_int_t)t->revision);
    if (ev)
        t->change_fn(t->change_arg, ev);
    json_decref(ev);
}

static void load_start(struct templates *t);

static void retry_fn(struct loop_timer *tm)
{
    struct templates *t = tm->arg;
    t->retry_on = false;
    load_start(t);
}

static void arm(struct templates *t, int64_t ms)
{
    if (t->closing)
        return;
    if (t->retry_on)
        loop_timer_cancel(&t->retry);
    loop_timer_start(t->loop, &t->retry, ms, retry_fn, t);
    t->retry_on = true;
}

static void load_done(void *arg, int status)
{
    struct tjob *j = arg;
    struct templates *t = j->t;

    t->loading = false;
    if (status == 0 && j->all && j->writes == t->writes) {
        bool first = !t->loaded;
        if (first || !json_equal(t->items, j->all)) {
            json_decref(t->items);
            t->items = j->all;
            j->all = NULL;
            t->loaded = true;
            char n[24];
            snprintf(n, sizeof(n), "%zu", json_object_size(t->items));
            LOG_INFO(first ? "template catalogue read" : "template catalogue changed elsewhere",
                     "templates", n);
            changed(t); /* agents that connected before (or hold the old one) pull */
        }
        arm(t, RELOAD_MS);
    } else if (status == 0) {
        arm(t, t->loaded ? RELOAD_MS : 0); /* a write went by: its copy is newer */
    } else if (!t->closing && status != AB_ECLOSED) {
        if (!t->loaded)
            LOG_WARN("cannot read the template catalogue yet; retrying", "error",
                     j->err[0] ? j->err : ab_strerror(status));
        arm(t, t->loaded ? RELOAD_MS : LOAD_RETRY_MS);
    }
    tjob_free(j);
}

/* Reads the table (at start until it succeeds, then every RELOAD_MS). */
static void load_start(struct templates *t)
{
    struct tjob *j;

    if (!t->db || t->loading || t->closing || !(j = calloc(1, sizeof(*j))))
        return;
    j->t = t;
    j->writes = t->writes;
    t->loading = true;
    if (db_submit(t->db, load_job, load_done, j) != 0) {
        /* database known down or queue full: try again later */
        t->loading = false;
        free(j);
        arm(t, t->loaded ? RELOAD_MS : LOAD_RETRY_MS);
    }
}

int templates_new(const struct templates_deps *d, struct templates **out, char *err, size_t errlen)
{
    struct templates *t = calloc(1, sizeof(*t));

    *out = NULL;
    if (!t || !(t->items = json_object())) {
        free(t);
        snprintf(err, errlen, "out of memory creating the template catalogue");
        return AB_ENOMEM;
    }
    t->loop = d->loop;
    t->db = d->db;
    load_start(t);
    *out = t;
    return 0;
}

void templates_free(struct templates *t)
{
    if (!t)
        return;
    t->closing = true;
    if (t->retry_on)
        loop_timer_cancel(&t->retry);
    json_decref(t->items);
    free(t);
}

void templates_set_change_hook(struct templates *t, templates_change_fn fn, void *arg)
{
    t->change_fn = fn;
    t->change_arg = arg;
}

bool templates_loaded(const struct templates *t)
{
    return t->loaded;
}

const json_t *templates_all(const struct templates *t)
{
    return t->items;
}

int64_t templates_revision(const struct templates *t)
{
    return t->revision;
}

static void write_done(void *arg, int status)
{
    struct tjob *j = arg;
    struct templates *t = j->t;

    if (status == 0 && j->all) {
        json_decref(t->items);
        t->items = j->all;
        j->all = NULL;
        t->loaded = true;
        t->writes++;
        LOG_INFO("template catalogue changed", "template", j->name, "by", j->actor);
        changed(t);
    }
    j->cb(j->arg, status, j->err[0] ? j->err : ab_strerror(status));
    tjob_free(j);
}

int templates_write(struct templates *t, enum templates_op op, const char *name, const json_t *obj,
                    const char *actor, templates_write_cb cb, void *arg)
{
    struct tjob *j = calloc(1, sizeof(*j));
    int rc;

    if (!j)
        return AB_ENOMEM;
    j->t = t;
    j->op = op;
    ab_strlcpy(j->name, name, sizeof(j->name));
    ab_strlcpy(j->actor, actor ? actor : "", sizeof(j->actor));
    j->cb = cb;
    j->arg = arg;
    if (obj && !(j->text = json_dumps(obj, JSON_COMPACT))) {
        free(j);
        return AB_ENOMEM;
    }
    if ((rc = db_submit(t->db, write_job, write_done, j)) != 0)
        tjob_free(j);
    return rc;
}

/* ---- the agents' pull ------------------------------------------------------------------ */

static void h_pull(struct http_exchange *ex, void *arg)
{
    struct templates *t = arg;
    const char *k;
    json_t *v, *items;

    if (!t->loaded) {
        load_start(t); /* at once rather than at the next retry */
        http_respond_json(ex, 503,
                          json_pack("{s:s}", "error",
                                    "the hub has not read the template catalogue from PostgreSQL "
                                    "yet; an EVENT follows once it has"));
        return;
    }
    items = json_array();
    json_object_foreach(t->items, k, v) json_array_append(items, v);
    http_respond_json(ex, 200,
                      json_pack("{s:I,s:o}", "revision", (json_int_t)t->revision, "items", items));
}

int templates_add_internal_routes(struct hub *h, struct templates *t, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/internal/v1/sandbox-templates", h_pull, t, 0},
    };
    return hub_add_internal_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
