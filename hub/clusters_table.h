/* The in-memory table behind hub/clusters.h, without I/O: rows as
 * PostgreSQL has them, merged with the sessions live on this hub. Pure
 * functions so the token check, the refresh diff and the API's view can be
 * tested without a database. Not thread-safe: the loop thread owns it. */
#ifndef AGENTBOX_HUB_CLUSTERS_TABLE_H
#define AGENTBOX_HUB_CLUSTERS_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agentbox/common.h"

#include "hub/clusters.h"

#define CLUSTERS_TOKEN_MAX 256 /* longer bearer tokens are refused before hashing */

/* One cluster as the last refresh read it from PostgreSQL. */
struct clusters_row {
    char id[AB_CLUSTER_ID_BUF];
    char name[128];
    char region[64];
    char token_hash[65]; /* lowercase hex SHA-256 of the join token */
    bool disabled;
    /* The latest cluster_sessions row (any hub); db_epoch 0 when none. */
    int64_t db_epoch;
    int64_t db_last_seen_ms;
    bool db_online; /* not disconnected and last_seen within the online window */
    char agent_version[64];
    char namespaces[CLUSTERS_NS_BUF]; /* "a,b"; "" = every namespace */
};

/* A row plus what only this hub knows. */
struct clusters_entry {
    struct clusters_row row;
    int64_t live_epoch;        /* session live on this hub; 0 when none */
    int64_t live_last_seen_ms; /* wall clock of the last touch or online */
    int64_t touched_epoch;     /* touched since the last flush; 0 when not */
};

struct clusters_table {
    struct clusters_entry *v; /* owned; sorted by id (byte order), unique ids */
    size_t n;
    bool loaded; /* a refresh was applied */
};

/* Why a live session has to go after a refresh. */
struct clusters_revocation {
    char id[AB_CLUSTER_ID_BUF];
    const char *reason; /* static: "cluster disabled", "token rotated", "cluster removed" */
};

/* Replaces the rows with rows[0..n) (any order; a duplicate id is AB_EINVAL
 * and leaves t unchanged), keeping the live state of ids that stay. For each
 * id that was loaded before and is now disabled (was not), has another token
 * hash, or is gone, writes a revocation into revs (room for t->n before the
 * call; *nrevs set). The first load revokes nothing. AB_ENOMEM leaves t
 * unchanged. */
int clusters_table_replace(struct clusters_table *t, const struct clusters_row *rows, size_t n,
                           struct clusters_revocation *revs, size_t *nrevs);

/* clusters_table_replace in two halves, so the heavy one runs off the loop:
 * at 10,000 clusters (1.4 KiB each) the copy and sort took tens of ms.
 * clusters_table_build touches no table (a database worker calls it): a new
 * malloc'd array *out of n entries, rows copied in id order, live state
 * zero; AB_EINVAL for a duplicate id, AB_ENOMEM (nothing allocated then).
 * clusters_table_swap (loop thread) takes v (as build made it; owned by t
 * from then on) and merges it into t in one pass: live state carried over
 * and revocations written as clusters_table_replace does. It returns the
 * array t held before (the caller frees it, NULL when none): 14 MiB at
 * 10,000 clusters, which the hub frees on a worker. */
int clusters_table_build(const struct clusters_row *rows, size_t n, struct clusters_entry **out);
struct clusters_entry *clusters_table_swap(struct clusters_table *t, struct clusters_entry *v,
                                           size_t n, struct clusters_revocation *revs,
                                           size_t *nrevs);

/* The entry of id, or NULL. */
struct clusters_entry *clusters_table_find(struct clusters_table *t, const char *id);

/* The token check of clusters_check_token, on the table: 0, AB_ENOENT
 * (unknown id, missing or wrong token) or AB_EDENIED (disabled, right token).
 * The hash comparison runs even for unknown ids, so timing does not tell
 * known ids from unknown ones. */
int clusters_table_check_token(const struct clusters_table *t, const char *id, const char *token,
                               char *why, size_t whylen);

/* The API's view of an entry: online while live here or online in the
 * database; the newest last_seen of both. */
void clusters_table_info(const struct clusters_entry *e, struct cluster_info *out);

/* Session bookkeeping in memory (clusters.c adds the database side). */
void clusters_table_online(struct clusters_table *t, const char *id, int64_t epoch, int64_t now_ms);
/* Returns true when epoch was the live session (now cleared). */
bool clusters_table_end(struct clusters_table *t, const char *id, int64_t epoch);
void clusters_table_touch(struct clusters_table *t, const char *id, int64_t epoch, int64_t now_ms);
/* The epochs whose last_seen the next flush writes: every session live on
 * this hub (the tunnel server drops a silent one within its timeout, so a
 * live session is a seen one even while no frame arrives) and every touched
 * one; the touched marks are cleared. Room for max (2 per entry is always
 * enough); returns how many. Entries past max stay marked for the next flush. */
size_t clusters_table_take_seen(struct clusters_table *t, int64_t *epochs, size_t max);

void clusters_table_free(struct clusters_table *t);

/* "2024-05-01T12:00:00Z" from ms since 1970 (UTC); out has at least 32 bytes. */
void clusters_format_time(int64_t ms, char *out, size_t outlen);

#endif
