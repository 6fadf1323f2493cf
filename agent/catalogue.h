/* The hub's template catalogue on this cluster (issue 16; hub/templates.h):
 * on every WELCOME and every {type:"sandbox_templates"} EVENT the agent
 * pulls GET /internal/v1/sandbox-templates through the hub link and makes
 * the runtime's SandboxTemplates match it through rt_object_write (the
 * write seam: an API-written object on the local runtime, the CRD on kube):
 * each catalogue object created or replaced when the digest it was written
 * with (CATALOGUE_HASH_ANNOTATION) is not the hub's object's, and every
 * template labelled agentbox.io/sync-source=global that the catalogue no
 * longer has deleted. A cluster's own template of the same name (no such
 * label) is left alone and the clash logged. One pull and one write at a
 * time; a nudge during a pull makes one more pull after it.
 *
 * Owner: struct agent (created after the runtime and the hub link, freed
 * after the tunnel and the runtime, whose ends answer what is in flight).
 * Loop thread only. */
#ifndef AGENTBOX_AGENT_CATALOGUE_H
#define AGENTBOX_AGENT_CATALOGUE_H

#include <jansson.h>

struct loop;
struct rt;
struct hub_link;
struct catalogue;

#define CATALOGUE_SYNC_LABEL "agentbox.io/sync-source"
/* On every template written: the SHA-256 of the hub's object, to tell when it changed. */
#define CATALOGUE_HASH_ANNOTATION "agentbox.io/sync-hash"
#define CATALOGUE_PULL_MAX (20 * 1024 * 1024) /* the hub's answer: 256 templates of 64 KiB */

struct catalogue_deps {
    struct loop *loop;
    struct rt *rt;
    struct hub_link *hub;
};

/* NULL when out of memory. */
struct catalogue *catalogue_new(const struct catalogue_deps *d);
void catalogue_free(struct catalogue *c);
/* An EVENT from the hub (or the tunnel's synthesized "welcome"); others are ignored. */
void catalogue_on_event(struct catalogue *c, const json_t *event);

#endif
