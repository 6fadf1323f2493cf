/* audit_log: who changed what, when (DESIGN §9). Never pass a token or a
 * secret value in any field: targets are ids and names, details are small
 * JSON objects of non-secret facts (version numbers, roles, counts).
 *
 * Two ways in:
 *   audit_write_conn  inside a database job (or CLI), ideally in the same
 *                     transaction as the change it records;
 *   audit_write       from the loop thread, fire and forget through the pool
 *                     (for changes made elsewhere, e.g. a cluster registered
 *                     by the tunnel code). */
#ifndef AGENTBOX_HUB_AUDIT_H
#define AGENTBOX_HUB_AUDIT_H

#include <stddef.h>

#include <jansson.h>
#include <libpq-fe.h>

struct db_pool;

#define AUDIT_FIELD_MAX 512 /* actor, action, target, namespace, cluster: longer is cut */

struct audit_entry {
    const char *actor;     /* "key:<id>", "cli", "cluster:<id>", "console:<user>" */
    const char *action;    /* "apikey.create", "apikey.revoke", "vault.create", … */
    const char *target;    /* id or name of what changed; NULL → "" */
    const char *namespace; /* NULL → "" */
    const char *cluster;   /* NULL → SQL NULL */
    const char *outcome;   /* "ok" (NULL), "denied" or "error" */
    json_t *details;       /* borrowed; NULL → {} */
};

/* Inserts one row with c. Returns 0 or AB_EIO with the database's message. */
int audit_write_conn(PGconn *c, const struct audit_entry *e, char *err, size_t errlen);

/* Loop thread. Copies e and inserts it on a database worker; a failure is
 * logged (without details), never reported to the caller. Returns 0, or the
 * db_submit error (AB_EBUSY, AB_EIO, AB_ECLOSED, AB_ENOMEM) when nothing was
 * queued. */
int audit_write(struct db_pool *db, const struct audit_entry *e);

#endif
