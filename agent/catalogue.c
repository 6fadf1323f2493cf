/* The hub's template catalogue applied to this cluster (catalogue.h). */
#include "agent/catalogue.h"

#include "agent/hub_link.h"
#include "agent/runtime/runtime.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agentbox/tunnel_http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KICK_MS 20    /* coalesces a WELCOME and the EVENTs right behind it */
#define RETRY_MS 5000 /* the hub answered but could not serve the catalogue */
#define RETRIES_MAX 5 /* pulls again after writes that may succeed later, per nudge */

struct catalogue {
    struct loop *loop;
    struct rt *rt;
    struct hub_link *hub;
    bool pulling; /* a call to the hub or the writes it led to are in flight */
    bool again;   /* a nudge came meanwhile */
    bool closing;
    struct loop_timer kick;
    bool kick_on;
    json_t *plan; /* [{name, obj|null}] still to write */
    size_t next;
    bool failed; /* a write of this plan may succeed later (say, the runtime's
                    cache had not listed yet and its create met the object) */
    int retries;
    /* a WELCOME's pull is made once more RETRY_MS later: a runtime that had
     * not listed its own objects yet (kube, just started) then shows them,
     * so stale synced templates are found and deleted too */
    bool recheck;
};

static void pull(struct catalogue *c);

static void kick_fn(struct loop_timer *t)
{
    struct catalogue *c = t->arg;
    c->kick_on = false;
    pull(c);
}

static void kick(struct catalogue *c, int64_t ms)
{
    if (c->closing)
        return;
    if (c->kick_on)
        loop_timer_cancel(&c->kick);
    loop_timer_start(c->loop, &c->kick, ms, kick_fn, c);
    c->kick_on = true;
}

static bool is_synced(const json_t *obj)
{
    const char *v = json_string_value(json_object_get(
        json_object_get(json_object_get(obj, "metadata"), "labels"), CATALOGUE_SYNC_LABEL));
    return v && strcmp(v, "global") == 0;
}

/* The catalogue object's digest (canonical JSON), kept on what is written
 * as CATALOGUE_HASH_ANNOTATION: a runtime may default or reorder fields (an
 * API server's CRD defaults), so what it shows back is not compared, only
 * whether it carries the digest of what the hub has now. */
static void digest(const json_t *o, char out[65])
{
    char *text = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
    crypto_sha256_hex(text ? text : "", out);
    free(text);
}

static bool same(const json_t *cur, const char *hash)
{
    const char *h = json_string_value(
        json_object_get(json_object_get(json_object_get(cur, "metadata"), "annotations"),
                        CATALOGUE_HASH_ANNOTATION));
    return h && !strcmp(h, hash);
}

/* The object written: the hub's, with its digest. */
static json_t *with_digest(const json_t *v, const char *hash)
{
    json_t *o = json_deep_copy(v);
    json_t *md = json_object_get(o, "metadata");
    json_t *ann = json_object_get(md, "annotations");

    if (!json_is_object(md))
        return o;
    if (!json_is_object(ann)) {
        ann = json_object();
        json_object_set_new(md, "annotations", ann);
    }
    json_object_set_new(ann, CATALOGUE_HASH_ANNOTATION, json_string(hash));
    return o;
}

static void have_one(void *arg, const struct rt_object *o)
{
    json_object_set((json_t *)arg, o->name, (json_t *)o->obj);
}

static void finish(struct catalogue *c)
{
    json_decref(c->plan);
    c->plan = NULL;
    c->next = 0;
    c->pulling = false;
    if (c->again && !c->closing) {
        c->again = false;
        c->retries = 0;
        kick(c, 0);
    } else if (c->recheck && !c->closing) {
        c->recheck = false;
        kick(c, RETRY_MS);
    } else if (c->failed && !c->closing && c->retries < RETRIES_MAX) {
        c->retries++;
        kick(c, RETRY_MS);
    }
    c->failed = false;
}

static void write_next(struct catalogue *c);

static void written(void *arg, int err, const char *msg)
{
    struct catalogue *c = arg;
    const json_t *step = json_array_get(c->plan, c->next - 1);
    const char *name = json_string_value(json_object_get(step, "name"));

    if (err != 0) {
        LOG_WARN("a catalogue template was not applied", "template", name, "error",
                 msg ? msg : ab_strerror(err));
        c->failed = c->failed || err != AB_EINVAL; /* a refusal stays one */
    } else
        LOG_INFO(json_is_null(json_object_get(step, "obj")) ? "catalogue template removed"
                                                            : "catalogue template applied",
                 "template", name);
    if (err == AB_ECLOSED || c->closing) {
        finish(c); /* the runtime is going away */
        return;
    }
    write_next(c);
}

static void write_next(struct catalogue *c)
{
    while (c->next < json_array_size(c->plan)) {
        const json_t *step = json_array_get(c->plan, c->next++);
        const char *name = json_string_value(json_object_get(step, "name"));
        const json_t *obj = json_object_get(step, "obj");
        const struct rt_write w = {.kind = RT_OBJ_TEMPLATE,
                                   .ns = "",
                                   .name = name,
                                   .obj = json_is_null(obj) ? NULL : obj,
                                   .secret = RT_SECRET_KEEP};
        char err[RT_ERR_MAX] = "";
        int rc = rt_object_write(c->rt, &w, written, c, err, sizeof(err));
        if (rc == 0)
            return; /* written() goes on */
        LOG_WARN("a catalogue template was refused by this cluster", "template", name, "error",
                 err[0] ? err : ab_strerror(rc));
        c->failed = c->failed || rc == AB_EBUSY;
        if (rc == AB_ECLOSED || rc == AB_EDENIED)
            break;
    }
    finish(c);
}

/* The catalogue (items) against what the runtime has → the writes. */
static json_t *plan_of(struct catalogue *c, const json_t *items)
{
    json_t *have = json_object(), *plan = json_array(), *want = json_object(), *v;
    const char *k;
    size_t i;

    rt_objects(c->rt, RT_OBJ_TEMPLATE, NULL, NULL, have_one, have);
    json_array_foreach(items, i, v)
    {
        const char *name =
            json_string_value(json_object_get(json_object_get(v, "metadata"), "name"));
        if (!name || !is_synced(v))
            continue; /* the hub labels everything it stores */
        json_object_set(want, name, v);
        const json_t *cur = json_object_get(have, name);
        if (cur && !is_synced(cur)) {
            LOG_WARN("the hub's catalogue has a template this cluster defines itself; keeping "
                     "the cluster's",
                     "template", name);
            continue;
        }
        char hash[65];
        digest(v, hash);
        if (!cur || !same(cur, hash))
            json_array_append_new(
                plan, json_pack("{s:s,s:o}", "name", name, "obj", with_digest(v, hash)));
    }
    json_object_foreach(have, k, v)
    {
        if (is_synced(v) && !json_object_get(want, k))
            json_array_append_new(plan, json_pack("{s:s,s:n}", "name", k, "obj"));
    }
    json_decref(have);
    json_decref(want);
    return plan;
}

static void pulled(const struct tun_call_result *res, void *arg)
{
    struct catalogue *c = arg;
    json_t *body = NULL;

    if (c->closing) {
        c->pulling = false;
        return;
    }
    if (res->status == 200)
        body = json_loadb(res->body, res->body_len, 0, NULL);
    if (!json_is_array(json_object_get(body, "items"))) {
        if (res->status != 0) {
            /* the hub is up but could not say (PostgreSQL not read yet): it
             * sends an EVENT once it has, and we ask again meanwhile */
            LOG_WARN("the hub did not give the template catalogue; asking again", "status",
                     res->status == 200 ? "200 (not a catalogue)" : "not 200");
            c->again = true;
        } /* else: the tunnel went down; the next WELCOME pulls */
        json_decref(body);
        c->pulling = false;
        if (c->again) {
            c->again = false;
            kick(c, RETRY_MS);
        }
        return;
    }
    c->plan = plan_of(c, json_object_get(body, "items"));
    c->next = 0;
    json_decref(body);
    write_next(c);
}

static void pull(struct catalogue *c)
{
    if (c->closing)
        return;
    if (c->pulling) {
        c->again = true;
        return;
    }
    c->pulling = true;
    if (hub_link_call(c->hub, "GET", "/internal/v1/sandbox-templates", NULL, 0, NULL, 0,
                      CATALOGUE_PULL_MAX, pulled, c) != 0)
        c->pulling = false; /* the tunnel is down: its next WELCOME pulls */
}

void catalogue_on_event(struct catalogue *c, const json_t *event)
{
    const char *type = json_string_value(json_object_get(event, "type"));

    if (!c || !type || !rt_has(c->rt, RT_CAP_MANIFEST_WRITE))
        return;
    if (!strcmp(type, "welcome") || !strcmp(type, "sandbox_templates")) {
        c->retries = 0;
        c->recheck = c->recheck || !strcmp(type, "welcome");
        kick(c, KICK_MS);
    }
}

struct catalogue *catalogue_new(const struct catalogue_deps *d)
{
    struct catalogue *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->loop = d->loop;
    c->rt = d->rt;
    c->hub = d->hub;
    return c;
}

void catalogue_free(struct catalogue *c)
{
    if (!c)
        return;
    c->closing = true;
    if (c->kick_on)
        loop_timer_cancel(&c->kick);
    json_decref(c->plan);
    free(c);
}
