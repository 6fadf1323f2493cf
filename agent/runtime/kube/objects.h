/* The kube runtime's half of the manifest seam (runtime.h "Manifest
 * objects", RT_CAP_MANIFEST_WRITE): rt_objects from the reflectors' caches
 * and rt_object_write as CRD writes through the API server.
 *
 * A write is validated first with the same manifest rules as the local
 * runtime (agent/runtime/local/manifest.h: mf_validate_json; a templateRef
 * must name a SandboxTemplate the cache has), then, one write at a time in
 * arrival order: POST when the cache has no such object, else PUT with the
 * cached resourceVersion (live finalizers and ownerReferences kept); a 409
 * re-reads the object and reports the conflict (AB_EEXIST, naming the
 * resourceVersion now in force); DELETE with the cached uid as a
 * precondition. An Env's imagePullSecret becomes the Secret `ips-<env>`
 * (type kubernetes.io/dockerconfigjson, owned by the Env, labelled
 * managed-by), created or replaced (RT_SECRET_SET), kept, or deleted
 * (RT_SECRET_DELETE, and with the Env); the Env carries the annotation
 * KOBJ_A_PULL_SECRET while it has one, and its member pools' Pods list the
 * Secret in imagePullSecrets (kobj_member_pull_secret). The callback runs
 * once the reflector has shown the write (the written resourceVersion, or
 * the object gone or being deleted), or after KOBJ_SEEN_MS with a warning.
 *
 * The annotations this file manages (KOBJ_A_*) are not shown by
 * rt_objects: callers see and send back what they wrote.
 *
 * Loop thread only (requests through deps.send, which kube.c runs on its
 * workers and answers on the loop). */
#ifndef AGENT_RUNTIME_KUBE_OBJECTS_H
#define AGENT_RUNTIME_KUBE_OBJECTS_H

#include <jansson.h>

#include "agent/runtime/kube/client.h"
#include "agent/runtime/runtime.h"

#define KOBJ_A_PULL_SECRET "agentbox.navix.sh/image-pull-secret"
#define KOBJ_A_SOURCE "agentbox.navix.sh/written-by" /* "api": written through rt_object_write */
#define KOBJ_SECRET_PREFIX "ips-"
#define KOBJ_WRITES_MAX 256
#define KOBJ_SEEN_MS 10000

struct loop;
struct kobj;

/* resp is valid for the call only; NULL with rc AB_ECLOSED when the runtime shut down. */
typedef void (*kobj_resp_fn)(void *arg, int rc, struct kube_response *resp);

struct kobj_deps {
    struct loop *loop;
    /* kube.c's send_req: 0 (fn runs once, later) or an error (fn never runs). */
    int (*send)(void *owner, const char *method, const struct kube_ref *ref, const char *ctype,
                const json_t *body, kobj_resp_fn fn, void *arg);
    void *owner;
    const char *ns; /* the namespace the runtime watches: the only one written */
    /* The loop's caches, key → object ("name" for templates, "ns/name"
     * otherwise); borrowed, they outlive the kobj. */
    const json_t *templates, *envs, *pools;
};

/* NULL when out of memory. */
struct kobj *kobj_new(const struct kobj_deps *d);
/* Answers every write not yet answered (AB_ECLOSED); requests still in
 * flight end quietly. Then kobj_free, once no request can call back. */
void kobj_close(struct kobj *o);
void kobj_free(struct kobj *o);

/* rt_ops.objects / rt_ops.object_write. */
void kobj_objects(struct kobj *o, enum rt_obj_kind kind, const char *ns, const char *name,
                  rt_object_fn fn, void *arg);
int kobj_write(struct kobj *o, const struct rt_write *w, rt_write_cb cb, void *arg, char *err,
               size_t errlen);
/* The caches moved (kube.c, after applying reflector events). */
void kobj_observed(struct kobj *o);

/* Pure: a member pool rendered for env (kube_member_pool's output) gets
 * imagePullSecrets [{name: ips-<env>}] in its Pod template while env
 * carries KOBJ_A_PULL_SECRET. */
void kobj_member_pull_secret(const json_t *env, json_t *pool);
/* Pure: the Secret body for env (its uid for the owner reference) from
 * {registries: [{registry, username, password}]}; NULL with err naming the
 * field. */
json_t *kobj_secret_body(const char *ns, const char *env, const char *env_uid,
                         const json_t *pull_secret, char *err, size_t errlen);

#endif
