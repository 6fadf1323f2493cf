/* audit_log rows: synchronous on a connection, or queued from the loop. */
#include "hub/audit.h"

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/log.h"
#include "hub/db.h"

static void cut(char *dst, const char *src)
{
    ab_strlcpy(dst, src != NULL ? src : "", AUDIT_FIELD_MAX);
}

int audit_write_conn(PGconn *c, const struct audit_entry *e, char *err, size_t errlen)
{
    char actor[AUDIT_FIELD_MAX], action[AUDIT_FIELD_MAX], target[AUDIT_FIELD_MAX];
    char ns[AUDIT_FIELD_MAX], cluster[AUDIT_FIELD_MAX];
    const char *outcome = e->outcome != NULL ? e->outcome : "ok";
    char *details = NULL;
    const char *vals[7];
    PGresult *r;
    int rc = 0;

    cut(actor, e->actor);
    cut(action, e->action);
    cut(target, e->target);
    cut(ns, e->namespace);
    cut(cluster, e->cluster);
    if (e->details != NULL)
        details = json_dumps(e->details, JSON_COMPACT);
    vals[0] = actor[0] != '\0' ? actor : "unknown";
    vals[1] = action;
    vals[2] = target;
    vals[3] = ns;
    vals[4] = e->cluster != NULL ? cluster : NULL;
    vals[5] = outcome;
    vals[6] = details != NULL ? details : "{}";
    r = PQexecParams(c,
                     "INSERT INTO audit_log (actor, action, target, namespace, cluster_id, "
                     "outcome, details) VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb)",
                     7, NULL, vals, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        char line[256];
        snprintf(err, errlen, "cannot write the audit log: %s",
                 db_error_line(c, r, line, sizeof(line)));
        rc = AB_EIO;
    }
    PQclear(r);
    free(details);
    return rc;
}

/* A queued entry: the strings copied, details serialised. */
struct audit_job {
    char actor[AUDIT_FIELD_MAX], action[AUDIT_FIELD_MAX], target[AUDIT_FIELD_MAX];
    char ns[AUDIT_FIELD_MAX], cluster[AUDIT_FIELD_MAX], outcome[16];
    bool has_cluster;
    json_t *details;
    char err[256];
};

static int audit_job_run(PGconn *c, void *arg)
{
    struct audit_job *j = arg;
    struct audit_entry e = {
        .actor = j->actor,
        .action = j->action,
        .target = j->target,
        .namespace = j->ns,
        .cluster = j->has_cluster ? j->cluster : NULL,
        .outcome = j->outcome,
        .details = j->details,
    };

    return audit_write_conn(c, &e, j->err, sizeof(j->err));
}

static void audit_job_done(void *arg, int status)
{
    struct audit_job *j = arg;

    if (status != 0)
        LOG_WARN("audit entry lost", "action", j->action, "target", j->target, "error",
                 j->err[0] != '\0' ? j->err : ab_strerror(status));
    json_decref(j->details);
    free(j);
}

int audit_write(struct db_pool *db, const struct audit_entry *e)
{
    struct audit_job *j = calloc(1, sizeof(*j));
    int rc;

    if (j == NULL)
        return AB_ENOMEM;
    cut(j->actor, e->actor);
    cut(j->action, e->action);
    cut(j->target, e->target);
    cut(j->ns, e->namespace);
    cut(j->cluster, e->cluster);
    j->has_cluster = e->cluster != NULL;
    ab_strlcpy(j->outcome, e->outcome != NULL ? e->outcome : "ok", sizeof(j->outcome));
    j->details = e->details != NULL ? json_deep_copy(e->details) : NULL;
    rc = db_submit(db, audit_job_run, audit_job_done, j);
    if (rc != 0) {
        json_decref(j->details);
        free(j);
    }
    return rc;
}
