/* The YAML walker shared by the manifest parsers (mf_*.c). Private to the
 * local runtime; pure, any thread.
 *
 * Every reader returns 0 or AB_EINVAL; the first failure is kept in the walk
 * ("field 'spec.replicas' must be ..." at a line), later ones are ignored.
 * A NULL node (YAML null) is "absent": readers leave *out alone. */
#ifndef AGENTBOX_RUNTIME_LOCAL_MF_WALK_H
#define AGENTBOX_RUNTIME_LOCAL_MF_WALK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>
#include <yaml.h>

#include "agent/runtime/local/manifest.h"

#define WALK_PATH_MAX 192
#define WALK_VISITS_MAX 200000
#define LIST_ITEMS_MAX 256 /* string lists, map entries */
#define ANNOTATION_MAX (64 * 1024)

struct mf_walk {
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

typedef int (*mfw_pair_fn)(struct mf_walk *w, const char *key, yaml_node_t *val, void *ctx);
typedef int (*mfw_item_fn)(struct mf_walk *w, int index, yaml_node_t *val, void *ctx);

/* errors and paths */
__attribute__((format(printf, 3, 4))) int mfw_fail(struct mf_walk *w, yaml_node_t *at,
                                                   const char *fmt, ...);
/* "field '<path>' <fmt>" at node at. */
__attribute__((format(printf, 3, 4))) int mfw_fail_field(struct mf_walk *w, yaml_node_t *at,
                                                         const char *fmt, ...);
/* Push returns the old length, to give back to mfw_path_pop. */
size_t mfw_path_push(struct mf_walk *w, const char *key);
size_t mfw_path_push_index(struct mf_walk *w, int i);
void mfw_path_pop(struct mf_walk *w, size_t old);
int mfw_unknown(struct mf_walk *w);
/* A field of the CRD the local runtime cannot honour: refused, not ignored. */
int mfw_unsupported(struct mf_walk *w);

/* node access */
bool mfw_is_null(const yaml_node_t *n);
int mfw_visit(struct mf_walk *w, yaml_node_t *n);
/* Calls fn for each pair; val is NULL when the value is YAML null. */
int mfw_each_pair(struct mf_walk *w, yaml_node_t *map, mfw_pair_fn fn, void *ctx);
int mfw_each_item(struct mf_walk *w, yaml_node_t *seq, int max, mfw_item_fn fn, void *ctx);
const char *mfw_scalar(struct mf_walk *w, yaml_node_t *n);
int mfw_str(struct mf_walk *w, yaml_node_t *n, char *out, size_t size);
int mfw_int(struct mf_walk *w, yaml_node_t *n, int64_t min, int64_t max, int64_t *out);
int mfw_i32(struct mf_walk *w, yaml_node_t *n, int64_t min, int32_t *out);
int mfw_bool(struct mf_walk *w, yaml_node_t *n, bool *out);
int mfw_duration(struct mf_walk *w, yaml_node_t *n, int64_t *ms);
int mfw_image_policy(struct mf_walk *w, yaml_node_t *n, enum mf_image_policy *out);
/* int-or-string: a count (>= 0) or "N%". */
int mfw_check_int_or_percent(struct mf_walk *w, yaml_node_t *n);
int mfw_need_mapping(struct mf_walk *w, yaml_node_t *n);
int mfw_check_str_list(struct mf_walk *w, yaml_node_t *n);
/* A string→string map into *obj (created on first use). */
int mfw_map(struct mf_walk *w, yaml_node_t *n, json_t **obj);

#endif
