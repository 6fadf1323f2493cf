/* What the manifest parser files (mf_spec.c, mf_env.c, mf_parse.c, mf_set.c,
 * mf_dir.c) share. Private to the local runtime; pure, any thread. */
#ifndef AGENTBOX_RUNTIME_LOCAL_MF_PARSE_H
#define AGENTBOX_RUNTIME_LOCAL_MF_PARSE_H

#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/mf_walk.h"

struct mf_member_in;

/* State of one SandboxEnv while its spec is walked (mf_env.c). */
struct mf_env_ctx {
    struct mf_env *env;
    struct mf_member_in *ins; /* parallel to the members of every cluster, in order */
    int nins, inscap;
    struct mf_cluster *cur;
    bool has_ref_name;
    bool has_id;
    struct mf_group *gcur;
    bool has_gname, has_gmax;
};

/* mf_spec.c: pair callbacks for mfw_each_pair over a pool / template spec. */
void mf_pool_spec_init(struct mf_pool_spec *p);
int mf_pool_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx);
int mf_tpl_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx);
/* networkPolicy: ctx is the bool disableEgress lands in. */
int mf_netpol_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx);

/* mf_env.c: ctx is a struct mf_env_ctx; mf_env_finish applies the rules that
 * need the whole object (sizing → resource key → pool name, used groups).
 * The caller frees e->ins. */
int mf_env_spec_pair(struct mf_walk *w, const char *k, yaml_node_t *v, void *ctx);
int mf_env_finish(struct mf_walk *w, struct mf_object *o, struct mf_env_ctx *e, yaml_node_t *spec);

/* mf_parse.c */
int mf_set_push_object(struct mf_set *s, struct mf_object *o);
/* mf_dir.c: one file's objects and errors into s; objects get its mtime. */
int mf_load_file(struct mf_set *s, const char *path);
/* mf_write.c: the overlay of the directory over the seed objects in s. */
int mf_overlay_apply(struct mf_set *s, const char *overlay);
void mf_object_free(struct mf_object *o);
/* Records an error (beyond MF_ERRORS_MAX only counts it). 0 or AB_ENOMEM. */
int mf_set_push_error(struct mf_set *s, const char *file, int line, const char *msg);

#endif
