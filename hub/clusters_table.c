/* The clusters table in memory: sorted rows, refresh diff, token check.
 * No I/O, no clock (callers pass the time). */
#include "hub/clusters_table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/sbxid.h"

static int cmp_key_entry(const void *key, const void *b)
{
    const struct clusters_entry *y = b;

    return strcmp(key, y->row.id);
}

struct clusters_entry *clusters_table_find(struct clusters_table *t, const char *id)
{
    if (t == NULL || t->v == NULL || id == NULL)
        return NULL;
    return bsearch(id, t->v, t->n, sizeof(*t->v), cmp_key_entry);
}

/* Sorting pointers, not the 1.4 KiB entries: qsort moves what it sorts. */
static int cmp_row_ptr(const void *a, const void *b)
{
    const struct clusters_row *const *x = a, *const *y = b;

    return strcmp((*x)->id, (*y)->id);
}

int clusters_table_build(const struct clusters_row *rows, size_t n, struct clusters_entry **out)
{
    const struct clusters_row **order = NULL;
    struct clusters_entry *v = NULL;

    *out = NULL;
    if (n == 0)
        return 0;
    order = malloc(n * sizeof(*order));
    v = calloc(n, sizeof(*v));
    if (order == NULL || v == NULL) {
        free(order);
        free(v);
        return AB_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = &rows[i];
    qsort(order, n, sizeof(*order), cmp_row_ptr);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && strcmp(order[i - 1]->id, order[i]->id) == 0) {
            free(order);
            free(v);
            return AB_EINVAL;
        }
        v[i].row = *order[i];
    }
    free(order);
    *out = v;
    return 0;
}

struct clusters_entry *clusters_table_swap(struct clusters_table *t, struct clusters_entry *v,
                                           size_t n, struct clusters_revocation *revs,
                                           size_t *nrevs)
{
    struct clusters_entry *old_v = t->v;
    size_t nr = 0;

    /* Both sorted: one merge pass carries live state over and finds what
     * changed under a session. */
    size_t i = 0, j = 0;
    while (i < t->n || j < n) {
        int c = i >= t->n ? 1 : j >= n ? -1 : strcmp(t->v[i].row.id, v[j].row.id);
        const char *reason = NULL;

        if (c < 0) {
            reason = "cluster removed";
            if (t->loaded)
                ab_strlcpy(revs[nr].id, t->v[i].row.id, sizeof(revs[nr].id));
            i++;
        } else if (c > 0) {
            j++;
            continue;
        } else {
            const struct clusters_entry *old = &t->v[i];

            v[j].live_epoch = old->live_epoch;
            v[j].live_last_seen_ms = old->live_last_seen_ms;
            v[j].touched_epoch = old->touched_epoch;
            if (v[j].row.disabled && !old->row.disabled)
                reason = "cluster disabled";
            else if (strcmp(v[j].row.token_hash, old->row.token_hash) != 0)
                reason = "token rotated";
            if (reason != NULL && t->loaded)
                ab_strlcpy(revs[nr].id, v[j].row.id, sizeof(revs[nr].id));
            i++;
            j++;
        }
        if (reason != NULL && t->loaded)
            revs[nr++].reason = reason;
    }
    t->v = v;
    t->n = n;
    t->loaded = true;
    *nrevs = nr;
    return old_v;
}

int clusters_table_replace(struct clusters_table *t, const struct clusters_row *rows, size_t n,
                           struct clusters_revocation *revs, size_t *nrevs)
{
    struct clusters_entry *v;
    int rc = clusters_table_build(rows, n, &v);

    *nrevs = 0;
    if (rc != 0)
        return rc;
    free(clusters_table_swap(t, v, n, revs, nrevs));
    return 0;
}

int clusters_table_check_token(const struct clusters_table *t, const char *id, const char *token,
                               char *why, size_t whylen)
{
    /* Compared against when the id is unknown, so both paths hash and compare. */
    static const char dummy_hash[65] =
        "0000000000000000000000000000000000000000000000000000000000000000";
    const struct clusters_entry *e;
    const char *want;
    char idwhy[128];
    char got[65];
    bool same;

    if (id == NULL || id[0] == '\0') {
        snprintf(why, whylen, "missing X-AgentBox-Cluster header (the cluster id)");
        return AB_ENOENT;
    }
    if (!sbxid_cluster_is_valid(id, idwhy, sizeof(idwhy))) {
        snprintf(why, whylen, "X-AgentBox-Cluster is not a valid cluster id: %s", idwhy);
        return AB_ENOENT;
    }
    if (token == NULL || token[0] == '\0') {
        snprintf(why, whylen, "missing cluster token (Authorization: Bearer abxc_...)");
        return AB_ENOENT;
    }
    if (strnlen(token, CLUSTERS_TOKEN_MAX + 1) > CLUSTERS_TOKEN_MAX) {
        snprintf(why, whylen, "cluster token longer than %d bytes", CLUSTERS_TOKEN_MAX);
        return AB_ENOENT;
    }
    if (!t->loaded) {
        snprintf(why, whylen,
                 "cluster '%s' is not known yet: the hub has not loaded its cluster registry "
                 "(is PostgreSQL reachable?)",
                 id);
        return AB_ENOENT;
    }
    e = clusters_table_find((struct clusters_table *)t, id);
    want = e != NULL ? e->row.token_hash : dummy_hash;
    crypto_sha256_hex(token, got);
    same = crypto_equal(got, want, 64);
    if (e == NULL) {
        snprintf(why, whylen,
                 "cluster '%s' is not registered: run 'agentbox-hub cluster add %s' on the hub "
                 "(new clusters are picked up within %d s)",
                 id, id, CLUSTERS_REFRESH_MS / 1000);
        return AB_ENOENT;
    }
    if (!same) {
        snprintf(why, whylen,
                 "wrong token for cluster '%s': use the token printed by 'agentbox-hub cluster "
                 "add' or 'cluster rotate-token'",
                 id);
        return AB_ENOENT;
    }
    if (e->row.disabled) {
        snprintf(why, whylen,
                 "cluster '%s' is disabled: 'agentbox-hub cluster enable %s' lets it connect", id,
                 id);
        return AB_EDENIED;
    }
    if (whylen > 0)
        why[0] = '\0';
    return 0;
}

void clusters_table_info(const struct clusters_entry *e, struct cluster_info *out)
{
    memset(out, 0, sizeof(*out));
    ab_strlcpy(out->id, e->row.id, sizeof(out->id));
    ab_strlcpy(out->name, e->row.name, sizeof(out->name));
    ab_strlcpy(out->region, e->row.region, sizeof(out->region));
    ab_strlcpy(out->agent_version, e->row.agent_version, sizeof(out->agent_version));
    ab_strlcpy(out->namespaces, e->row.namespaces, sizeof(out->namespaces));
    out->disabled = e->row.disabled;
    out->online = e->live_epoch != 0 || e->row.db_online;
    out->epoch = e->live_epoch != 0 ? e->live_epoch : e->row.db_epoch;
    out->last_seen_ms = AB_MAX(e->live_last_seen_ms, e->row.db_last_seen_ms);
}

void clusters_table_online(struct clusters_table *t, const char *id, int64_t epoch, int64_t now_ms)
{
    struct clusters_entry *e = clusters_table_find(t, id);

    if (e == NULL || epoch <= 0)
        return;
    /* An older session coming up late must not replace a newer one. */
    if (e->live_epoch > epoch)
        return;
    e->live_epoch = epoch;
    e->live_last_seen_ms = now_ms;
}

bool clusters_table_end(struct clusters_table *t, const char *id, int64_t epoch)
{
    struct clusters_entry *e = clusters_table_find(t, id);

    if (e == NULL || epoch <= 0)
        return false;
    /* The database row of this session (or an older one) is about to say
     * disconnected; do not wait for the next refresh to say offline. */
    if (e->row.db_epoch <= epoch)
        e->row.db_online = false;
    if (e->live_epoch != epoch)
        return false;
    e->live_epoch = 0;
    return true;
}

void clusters_table_touch(struct clusters_table *t, const char *id, int64_t epoch, int64_t now_ms)
{
    struct clusters_entry *e = clusters_table_find(t, id);

    if (e == NULL || epoch <= 0)
        return;
    e->touched_epoch = epoch;
    if (e->live_epoch == epoch)
        e->live_last_seen_ms = now_ms;
}

size_t clusters_table_take_seen(struct clusters_table *t, int64_t *epochs, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < t->n; i++) {
        struct clusters_entry *e = &t->v[i];
        size_t need =
            (e->live_epoch != 0) + (e->touched_epoch != 0 && e->touched_epoch != e->live_epoch);

        if (need == 0)
            continue;
        if (n + need > max)
            break;
        if (e->live_epoch != 0)
            epochs[n++] = e->live_epoch;
        if (e->touched_epoch != 0 && e->touched_epoch != e->live_epoch)
            epochs[n++] = e->touched_epoch;
        e->touched_epoch = 0;
    }
    return n;
}

void clusters_table_free(struct clusters_table *t)
{
    free(t->v);
    t->v = NULL;
    t->n = 0;
    t->loaded = false;
}

void clusters_format_time(int64_t ms, char *out, size_t outlen)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;

    if (gmtime_r(&s, &tm) == NULL || strftime(out, outlen, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        if (outlen > 0)
            out[0] = '\0';
    }
}
