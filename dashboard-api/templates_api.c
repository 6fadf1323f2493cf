/* The hub's template catalogue over the console API (reference §4.2 rows
 * /sandbox-templates and /admin/sandbox-templates; storage and sync are
 * hub/templates.h):
 *
 *   GET    /api/v1/sandbox-templates[/{name}]        any principal; visibility rules apply
 *   GET    /api/v1/admin/sandbox-templates           admin: {items:[{name, crdJson}]}
 *   POST   /api/v1/admin/sandbox-templates           admin: {crdJson} → 201
 *   PUT    /api/v1/admin/sandbox-templates/{name}    admin: {crdJson} → 200 (404 if absent)
 *   DELETE /api/v1/admin/sandbox-templates/{name}    admin → {name, status: "Deleted"}
 *
 * crdJson is a SandboxTemplate as a JSON string (as the seed's console
 * sends it) or as an object. Loop thread; writes on database workers. */
#include "dashboard-api/dashboard_api.h"

#include "agentbox/common.h"
#include "agentbox/http.h"
#include "agentbox/visibility.h"
#include "hub/auth.h"
#include "hub/hub.h"
#include "hub/keys.h"
#include "hub/templates.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reference §6.1 (agentbox/visibility.h, the agents' rule too). */
static bool visible(const struct keys_principal *p, const json_t *spec)
{
    return vis_template_visible(spec, p->role == KEYS_ROLE_ADMIN, p->team, p->user);
}

/* The catalogue's view of one object, as the agents' GET /v1/sandbox-templates. */
static json_t *summary(const char *name, const json_t *o)
{
    const json_t *spec = json_object_get(o, "spec"), *md = json_object_get(o, "metadata");
    static const char *const fields[] = {"version", "description", "runtimes", "idleImage",
                                         "visibility"};
    json_t *t = json_pack("{s:s}", "name", name);

    for (size_t i = 0; t && i < AB_ARRAY_LEN(fields); i++)
        if (json_object_get(spec, fields[i]))
            json_object_set(t, fields[i], json_object_get(spec, fields[i]));
    if (t && json_object_get(md, "annotations"))
        json_object_set(t, "annotations", json_object_get(md, "annotations"));
    if (t)
        json_object_set_new(t, "syncSource", json_string("global"));
    return t;
}

static bool not_loaded(struct hub *h, struct http_exchange *ex)
{
    if (templates_loaded(h->templates))
        return false;
    auth_respond_api_error(ex, 503, "UNAVAILABLE",
                           "the hub has not read the template catalogue from PostgreSQL yet; "
                           "try again shortly");
    return true;
}

static void list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const char *name = http_param(ex, "name"), *k;
    const json_t *all;
    json_t *v, *items;

    if (not_loaded(h, ex))
        return;
    all = templates_all(h->templates);
    if (name) {
        v = json_object_get(all, name);
        if (!v || !visible(p, json_object_get(v, "spec"))) {
            auth_respond_api_error(ex, 404, "NOT_FOUND",
                                   "sandbox template '%.253s' not found in the catalogue", name);
            return;
        }
        http_respond_json(ex, 200, json_pack("{s:o}", "template", summary(name, v)));
        return;
    }
    items = json_array();
    json_object_foreach((json_t *)all, k, v)
    {
        if (visible(p, json_object_get(v, "spec")))
            json_array_append_new(items, summary(k, v));
    }
    http_respond_json(
        ex, 200,
        json_pack("{s:o,s:I}", "items", items, "total", (json_int_t)json_array_size(items)));
}

static void h_list(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, list_ok, h);
}

/* --- admin ----------------------------------------------------------------------------------- */

static bool require_admin(struct http_exchange *ex, const struct keys_principal *p)
{
    if (p->role == KEYS_ROLE_ADMIN)
        return true;
    auth_respond_api_error(ex, 403, "FORBIDDEN",
                           "admin api key required: the template catalogue is written by "
                           "admins only");
    return false;
}

static json_t *admin_item(const char *name, const json_t *o)
{
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *it = json_pack("{s:s,s:s?}", "name", name, "crdJson", text);
    free(text);
    return it;
}

static void admin_list_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    struct hub *h = arg;
    const char *k;
    json_t *v, *items;

    if (!require_admin(ex, p) || not_loaded(h, ex))
        return;
    items = json_array();
    json_object_foreach((json_t *)templates_all(h->templates), k, v)
        json_array_append_new(items, admin_item(k, v));
    http_respond_json(
        ex, 200,
        json_pack("{s:o,s:I}", "items", items, "total", (json_int_t)json_array_size(items)));
}

static void h_admin_list(struct http_exchange *ex, void *arg)
{
    struct hub *h = arg;
    auth_request(h->auth, ex, AUTH_SURFACE_API, admin_list_ok, h);
}

struct twrite {
    struct http_exchange *ex;
    enum templates_op op;
    char name[TEMPLATES_NAME_MAX + 1];
    json_t *obj;
};

static void write_cb(void *arg, int status, const char *err)
{
    struct twrite *w = arg;

    if (status == AB_EEXIST)
        auth_respond_api_error(w->ex, 409, "ALREADY_EXISTS", "%s", err);
    else if (status == AB_ENOENT)
        auth_respond_api_error(w->ex, 404, "NOT_FOUND", "%s", err);
    else if (status == AB_ELIMIT)
        auth_respond_api_error(w->ex, 400, "INVALID_ARGUMENT", "%s", err);
    else if (status != 0)
        auth_respond_api_error(w->ex, 503, "UNAVAILABLE",
                               "the template catalogue could not be written: %s", err);
    else if (w->op == TEMPLATES_DELETE)
        http_respond_json(w->ex, 200, json_pack("{s:s,s:s}", "name", w->name, "status", "Deleted"));
    else
        http_respond_json(w->ex, w->op == TEMPLATES_CREATE ? 201 : 200,
                          admin_item(w->name, w->obj));
    json_decref(w->obj);
    free(w);
}

/* body {crdJson} → the validated object, or an answer naming the field. */
static json_t *parse_body(struct http_exchange *ex, const char *path_name)
{
    const struct http_request *r = http_req(ex);
    json_error_t je;
    json_t *b, *crd, *obj = NULL;
    char err[512];
    int rc;

    if (r->body_len == 0 || !(b = json_loadb(r->body, r->body_len, 0, &je))) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "request body must be JSON {\"crdJson\": <SandboxTemplate>}");
        return NULL;
    }
    crd = json_object_get(b, "crdJson");
    if (json_is_string(crd)) {
        crd = json_loads(json_string_value(crd), 0, &je);
        if (!crd) {
            auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                                   "field 'crdJson' is not valid JSON: %s (line %d, column %d)",
                                   je.text, je.line, je.column);
            json_decref(b);
            return NULL;
        }
    } else if (json_is_object(crd)) {
        json_incref(crd);
    } else {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT",
                               "field 'crdJson' is required: a SandboxTemplate object, or one as "
                               "a JSON string");
        json_decref(b);
        return NULL;
    }
    json_decref(b);
    rc = templates_validate(crd, path_name, &obj, err, sizeof(err));
    json_decref(crd);
    if (rc != 0) {
        auth_respond_api_error(ex, 400, "INVALID_ARGUMENT", "%s", err);
        return NULL;
    }
    return obj;
}

static void write_start(struct hub *h, struct http_exchange *ex, const struct keys_principal *p,
                        enum templates_op op)
{
    const char *name = http_param(ex, "name");
    struct twrite *w;
    json_t *obj = NULL;
    char actor[KEYS_ID_MAX + 16];
    int rc;

    if (!require_admin(ex, p))
        return;
    if (op != TEMPLATES_DELETE && !(obj = parse_body(ex, name)))
        return;
    if (!(w = calloc(1, sizeof(*w)))) {
        json_decref(obj);
        auth_respond_api_error(ex, 503, "UNAVAILABLE", "out of memory");
        return;
    }
    w->ex = ex;
    w->op = op;
    w->obj = obj;
    ab_strlcpy(w->name,
               obj ? json_string_value(json_object_get(json_object_get(obj, "metadata"), "name"))
                   : name,
               sizeof(w->name));
    snprintf(actor, sizeof(actor), "%s:%s", p->kind == KEYS_KIND_SESSION ? "session" : "key",
             p->key_id);
    if ((rc = templates_write(h->templates, op, w->name, obj, actor, write_cb, w)) != 0) {
        auth_respond_db_error(h->auth, ex, AUTH_SURFACE_API, rc, NULL);
        json_decref(obj);
        free(w);
    }
}

static void create_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    write_start(arg, ex, p, TEMPLATES_CREATE);
}

static void replace_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    write_start(arg, ex, p, TEMPLATES_REPLACE);
}

static void delete_ok(struct http_exchange *ex, const struct keys_principal *p, void *arg)
{
    write_start(arg, ex, p, TEMPLATES_DELETE);
}

static void h_create(struct http_exchange *ex, void *arg)
{
    auth_request(((struct hub *)arg)->auth, ex, AUTH_SURFACE_API, create_ok, arg);
}

static void h_replace(struct http_exchange *ex, void *arg)
{
    auth_request(((struct hub *)arg)->auth, ex, AUTH_SURFACE_API, replace_ok, arg);
}

static void h_delete(struct http_exchange *ex, void *arg)
{
    auth_request(((struct hub *)arg)->auth, ex, AUTH_SURFACE_API, delete_ok, arg);
}

int templates_api_add_routes(struct hub *h, char *err, size_t errlen)
{
    const struct http_route routes[] = {
        {"GET", "/api/v1/sandbox-templates", h_list, h, 0},
        {"GET", "/api/v1/sandbox-templates/{name}", h_list, h, 0},
        {"GET", "/api/v1/admin/sandbox-templates", h_admin_list, h, 0},
        {"POST", "/api/v1/admin/sandbox-templates", h_create, h, 0},
        {"PUT", "/api/v1/admin/sandbox-templates/{name}", h_replace, h, 0},
        {"DELETE", "/api/v1/admin/sandbox-templates/{name}", h_delete, h, 0},
    };

    if (!h->templates) {
        snprintf(err, errlen, "dashboard api: the template catalogue is not created yet");
        return AB_EINVAL;
    }
    return hub_add_routes(h, routes, AB_ARRAY_LEN(routes), err, errlen);
}
