/* The template catalogue (issue 16; reference agent-sandbox-behaviour.md
 * §1.2 TemplateService, §6.1): SandboxTemplate objects stored once in
 * PostgreSQL (migration 0007 `sandbox_templates`) and synced to every
 * cluster.
 *
 * The hub keeps the whole catalogue in memory (read at start, retried until
 * PostgreSQL answers, then every 30 s — another replica's writes; every
 * write's job re-reads it in the same transaction), so reads and the
 * agents' pulls never wait for the database. Sync is "nudge, then pull": after every change (and
 * once the first read succeeded) the change hook broadcasts an EVENT {type:"sandbox_templates",
 * revision} to every connected cluster, and an agent pulls GET /internal/v1/sandbox-templates on
 * each such EVENT and on every WELCOME — so a cluster that was down catches up when it connects,
 * and no EVENT has to carry a catalogue bigger than a control frame.
 *
 * Objects are validated here (templates_validate: the kind, the name, the
 * spec fields the hub can check, TEMPLATES_OBJECT_MAX) and again by each
 * cluster's runtime when it applies them. Synced objects carry the label
 * TEMPLATES_SYNC_LABEL=global.
 *
 * Loop thread; storage on database workers. */
#ifndef AGENTBOX_HUB_TEMPLATES_H
#define AGENTBOX_HUB_TEMPLATES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct loop;
struct db_pool;
struct templates;
struct http_exchange;
struct hub;

#define TEMPLATES_OBJECT_MAX (64 * 1024) /* one object, as compact JSON */
#define TEMPLATES_COUNT_MAX 256          /* in the catalogue */
#define TEMPLATES_NAME_MAX 253
#define TEMPLATES_SYNC_LABEL "agentbox.io/sync-source"
#define TEMPLATES_EVENT "sandbox_templates"

struct templates_deps {
    struct loop *loop;
    struct db_pool *db;
};

/* Starts reading the catalogue. AB_ENOMEM with err. */
int templates_new(const struct templates_deps *d, struct templates **out, char *err, size_t errlen);
/* Writes still on a worker are answered by db_pool_free first (hub_fini). */
void templates_free(struct templates *t);

/* Called (loop thread) with the EVENT to broadcast (borrowed) after each
 * change; serve.c points it at tunnel_server_broadcast. NULL fn: none. */
typedef void (*templates_change_fn)(void *arg, json_t *event);
void templates_set_change_hook(struct templates *t, templates_change_fn fn, void *arg);

/* Whether the catalogue was read from PostgreSQL yet. */
bool templates_loaded(const struct templates *t);
/* The catalogue: name → object (borrowed; valid until the next change). */
const json_t *templates_all(const struct templates *t);
int64_t templates_revision(const struct templates *t);

/* Checks in (a SandboxTemplate as JSON) and builds the object stored:
 * apiVersion, kind, metadata {name, labels (with TEMPLATES_SYNC_LABEL),
 * annotations}, spec. path_name (NULL: none) must equal metadata.name when
 * given. 0 and *out (new reference), or AB_EINVAL / AB_ELIMIT with err
 * naming the field. Pure. */
int templates_validate(const json_t *in, const char *path_name, json_t **out, char *err,
                       size_t errlen);

enum templates_op { TEMPLATES_CREATE = 1, TEMPLATES_REPLACE, TEMPLATES_DELETE };
/* A write's end, on the loop thread: status 0, AB_EEXIST (create of an
 * existing name), AB_ENOENT (replace or delete of a missing one), AB_ELIMIT
 * (the catalogue is full), else a database error; err says which. */
typedef void (*templates_write_cb)(void *arg, int status, const char *err);
/* obj: templates_validate's output (borrowed; NULL for a delete). actor:
 * for the audit row ("key:<id>"). 0 (cb runs once, later) or db_submit's
 * error (cb never runs). */
int templates_write(struct templates *t, enum templates_op op, const char *name, const json_t *obj,
                    const char *actor, templates_write_cb cb, void *arg);

/* GET /internal/v1/sandbox-templates (the agents' pull, over the tunnel):
 * {revision, items: [object...]}; 503 until the catalogue was read. */
int templates_add_internal_routes(struct hub *h, struct templates *t, char *err, size_t errlen);

#endif
