/* See signing_keys.h. */
#include "hub/cli.h"
#include "hub/signing_keys.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/config.h"
#include "hub/db.h"
#include "hub/keyring.h"
#include "hub/keys.h"

int signing_keys_load_conn(PGconn *c, struct signing_set *out, char *err, size_t errlen)
{
    PGresult *r;
    char line[256];

    out->current = 0;
    out->previous = -1;
    r = PQexec(c, "SELECT generation, state FROM signing_keys WHERE state IN "
                  "('current', 'previous')");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        /* an older schema without the table: generation 0, as before */
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        bool missing = state != NULL && strcmp(state, "42P01") == 0;
        if (!missing)
            snprintf(err, errlen, "reading signing_keys: %s",
                     db_error_line(c, r, line, sizeof(line)));
        PQclear(r);
        return missing ? 0 : AB_EIO;
    }
    for (int i = 0; i < PQntuples(r); i++) {
        int g = atoi(PQgetvalue(r, i, 0));
        if (strcmp(PQgetvalue(r, i, 1), "current") == 0)
            out->current = g;
        else
            out->previous = g;
    }
    PQclear(r);
    return 0;
}

static int kid_of_gen(const void *secret, size_t len, int g, char kid[ASRT_KID_LEN + 1])
{
    struct asrt_signer *s;
    int rc = asrt_signer_from_secret_gen(secret, len, g, &s);

    if (rc != 0)
        return rc;
    ab_strlcpy(kid, asrt_signer_kid(s), ASRT_KID_LEN + 1);
    asrt_signer_free(s);
    return 0;
}

static int exec_ok(PGconn *c, const char *sql, int n, const char *const *vals, char *err,
                   size_t errlen)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, vals, NULL, NULL, 0);
    char line[256];
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;

    if (!ok)
        snprintf(err, errlen, "%s", db_error_line(c, r, line, sizeof(line)));
    PQclear(r);
    return ok ? 0 : AB_EIO;
}

int signing_keys_rotate_conn(PGconn *c, const void *secret, size_t len, bool force,
                             struct signing_set *out, char *err, size_t errlen)
{
    char kid[ASRT_KID_LEN + 1], gtext[16], line[256];
    const char *vals[2];
    PGresult *r;
    int rc, cur = -1, next = 0;
    double age = -1;

    if (exec_ok(c, "BEGIN", 0, NULL, err, errlen) != 0)
        return AB_EIO;
    /* one rotation at a time, across CLIs */
    rc = exec_ok(c, "LOCK TABLE signing_keys IN EXCLUSIVE MODE", 0, NULL, err, errlen);
    if (rc == 0) {
        r = PQexec(c, "SELECT (SELECT generation FROM signing_keys WHERE state = 'current'), "
                      "(SELECT COALESCE(max(generation) + 1, 1) FROM signing_keys), "
                      "(SELECT extract(epoch FROM now() - created_at) FROM signing_keys WHERE "
                      "state = 'current')");
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            snprintf(err, errlen, "reading signing_keys: %s",
                     db_error_line(c, r, line, sizeof(line)));
            rc = AB_EIO;
        } else {
            cur = PQgetisnull(r, 0, 0) ? -1 : atoi(PQgetvalue(r, 0, 0));
            next = atoi(PQgetvalue(r, 0, 1));
            age = PQgetisnull(r, 0, 2) ? -1 : atof(PQgetvalue(r, 0, 2));
        }
        PQclear(r);
    }
    if (rc == 0 && cur >= 0 && age >= 0 && age < SIGNING_KEYS_MIN_AGE_S && !force) {
        snprintf(err, errlen,
                 "the current signing key is %.0f s old: rotating now would retire the previous "
                 "key while assertions it signed may be live; wait %.0f s or pass --force",
                 age, SIGNING_KEYS_MIN_AGE_S - age + 1);
        rc = AB_EBUSY;
    }
    if (rc == 0 && cur < 0) {
        /* no row yet: generation 0 has been current all along */
        rc = kid_of_gen(secret, len, 0, kid);
        vals[0] = kid;
        if (rc == 0)
            rc = exec_ok(c,
                         "INSERT INTO signing_keys (generation, kid, state, created_at) VALUES "
                         "(0, $1, 'current', '-infinity')",
                         1, vals, err, errlen);
        cur = 0;
    }
    if (rc == 0)
        rc = exec_ok(c,
                     "UPDATE signing_keys SET state = 'retired', retired_at = now() WHERE state = "
                     "'previous'",
                     0, NULL, err, errlen);
    if (rc == 0)
        rc = exec_ok(c, "UPDATE signing_keys SET state = 'previous' WHERE state = 'current'", 0,
                     NULL, err, errlen);
    if (rc == 0 && next > ASRT_GENERATION_MAX) {
        snprintf(err, errlen, "no signing key generation left (at most %d)", ASRT_GENERATION_MAX);
        rc = AB_ELIMIT;
    }
    if (rc == 0)
        rc = kid_of_gen(secret, len, next, kid);
    if (rc == 0) {
        snprintf(gtext, sizeof(gtext), "%d", next);
        vals[0] = gtext;
        vals[1] = kid;
        rc = exec_ok(c,
                     "INSERT INTO signing_keys (generation, kid, state) VALUES ($1::integer, $2, "
                     "'current')",
                     2, vals, err, errlen);
    }
    if (rc == 0)
        rc = exec_ok(c, "COMMIT", 0, NULL, err, errlen);
    if (rc != 0) {
        PGresult *rb = PQexec(c, "ROLLBACK");
        PQclear(rb);
        return rc;
    }
    out->current = next;
    out->previous = cur;
    return 0;
}

/* --- the CLI ------------------------------------------------------------------------ */

struct sk_config {
    char *database_url;
    int64_t connect_timeout_ms;
    char *hub_secret;
    char *hub_secret_file;
    bool force;
};

#define SOPT(field) offsetof(struct sk_config, field)

static const struct cfg_option sk_options[] = {
    {"database_url", CFG_STRING, NULL, false, SOPT(database_url),
     "PostgreSQL URL (postgres://user:pass@host/db); unset: libpq's PG* variables", "DATABASE_URL"},
    {"db_connect_timeout", CFG_DURATION, "10s", false, SOPT(connect_timeout_ms),
     "give up connecting to PostgreSQL after this", NULL},
    {"hub_secret", CFG_STRING, NULL, false, SOPT(hub_secret),
     "the hub secret the signing keys derive from; prefer the environment or a file", NULL},
    {"hub_secret_file", CFG_STRING, NULL, false, SOPT(hub_secret_file),
     "file holding the hub secret (first line)", NULL},
    {"force", CFG_BOOL, "false", false, SOPT(force),
     "rotate although the current key is younger than an assertion's lifetime plus two skews "
     "(assertions the retired key signed are refused at once)",
     NULL},
};

static const char SK_USAGE[] = "agentbox-hub signing-key rotate [--force] | list";
static const char SK_DESCRIPTION[] =
    "The hub signs principal assertions with an Ed25519 key derived from the hub secret and\n"
    "a generation number. rotate makes a new generation current; the current one becomes\n"
    "previous (still published, so assertions it signed verify until they expire, at most\n"
    "5 minutes) and the previous one is retired (refused). Running hubs pick the change up\n"
    "on their next scan tick (10 s) and tell their agents at once, without reconnecting.\n"
    "list prints every generation with its key id and state.\n"
    "Exit status: 0 done, 1 failed, 2 bad usage.";

static int sk_list(PGconn *c, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, "SELECT generation, kid, state, created_at, retired_at FROM "
                            "signing_keys ORDER BY generation");
    char line[256];

    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(err, errlen, "%s", db_error_line(c, r, line, sizeof(line)));
        PQclear(r);
        return AB_EIO;
    }
    if (PQntuples(r) == 0)
        printf("generation 0 is current (never rotated)\n");
    for (int i = 0; i < PQntuples(r); i++)
        printf("%s\t%s\t%s\t%s\t%s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
               PQgetvalue(r, i, 2), PQgetvalue(r, i, 3),
               PQgetisnull(r, i, 4) ? "-" : PQgetvalue(r, i, 4));
    PQclear(r);
    return 0;
}

/* What rotate reads before connecting: the hub secret the keys derive from. */
struct sk_state {
    char *secret;
    size_t len;
};

static int sk_prepare(struct cli_run *r, char *err, size_t errlen)
{
    const struct sk_config *cfg = r->cfg;
    struct sk_state *st = r->state;

    if (r->cmd != 0)
        return 0;
    return vault_hub_secret_load("hub_secret", cfg->hub_secret, cfg->hub_secret_file, &st->secret,
                                 &st->len, err, errlen) == 0
               ? 0
               : AB_EINVAL;
}

static int sk_run(PGconn *c, struct cli_run *r, char *err, size_t errlen)
{
    const struct sk_config *cfg = r->cfg;
    struct sk_state *st = r->state;
    struct signing_set set;

    if (r->cmd == 1)
        return sk_list(c, err, errlen);
    if (signing_keys_rotate_conn(c, st->secret, st->len, cfg->force, &set, err, errlen) != 0)
        return AB_EIO;
    printf("signing key generation %d is current; generation %d is previous (published until "
           "its assertions expire)\n",
           set.current, set.previous);
    return 0;
}

static void sk_finish(struct cli_run *r)
{
    struct sk_state *st = r->state;

    if (st->secret != NULL) {
        OPENSSL_cleanse(st->secret, st->len);
        free(st->secret);
    }
}

static const struct cli_cmd sk_cmds[] = {
    {"rotate", 0, "takes no arguments besides flags"},
    {"list", 0, "takes no arguments besides flags"},
};
static const struct cli sk_cli = {
    .prog = "agentbox-hub signing-key",
    .usage = SK_USAGE,
    .description = SK_DESCRIPTION,
    .opts = sk_options,
    .nopts = AB_ARRAY_LEN(sk_options),
    .cmds = sk_cmds,
    .ncmds = AB_ARRAY_LEN(sk_cmds),
    .url_off = SOPT(database_url),
    .timeout_off = SOPT(connect_timeout_ms),
    .prepare = sk_prepare,
    .run = sk_run,
    .finish = sk_finish,
};

int signing_keys_cli_main(int argc, char **argv)
{
    struct sk_config cfg;
    struct sk_state st = {0};

    memset(&cfg, 0, sizeof(cfg));
    return cli_main(&sk_cli, &cfg, &st, argc, argv);
}
