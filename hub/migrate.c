/* Schema migrations: scan, compare, apply under an advisory lock. */
#include "hub/migrate.h"
#include "hub/db.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);

    return n >= m && memcmp(s + n - m, suffix, m) == 0;
}

int migrate_parse_name(const char *file, int *version, char *err, size_t errlen)
{
    const char *p;
    size_t len;
    int v = 0;

    if (file == NULL || file[0] == '.' || !ends_with(file, ".sql"))
        return AB_ENOENT;
    len = strlen(file);
    if (len >= MIGRATE_NAME_MAX) {
        ab_errf(err, errlen, "migration file name '%s' is longer than %d bytes", file,
                MIGRATE_NAME_MAX - 1);
        return AB_EINVAL;
    }
    for (int i = 0; i < 4; i++) {
        if (file[i] < '0' || file[i] > '9') {
            ab_errf(err, errlen,
                    "migration file '%s' must be named NNNN_name.sql (4 digits, '_', a name)",
                    file);
            return AB_EINVAL;
        }
        v = v * 10 + (file[i] - '0');
    }
    if (file[4] != '_') {
        ab_errf(err, errlen,
                "migration file '%s' must be named NNNN_name.sql: exactly 4 digits, then '_'",
                file);
        return AB_EINVAL;
    }
    if (v < 1 || v > MIGRATE_VERSION_MAX) {
        ab_errf(err, errlen, "migration file '%s': version must be between 0001 and %04d", file,
                MIGRATE_VERSION_MAX);
        return AB_EINVAL;
    }
    /* The name part: at least one character before ".sql". */
    if (len - 4 /* ".sql" */ <= 5) {
        ab_errf(err, errlen, "migration file '%s' has no name after the version (NNNN_name.sql)",
                file);
        return AB_EINVAL;
    }
    for (p = file + 5; p < file + len - 4; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-')) {
            ab_errf(err, errlen,
                    "migration file '%s': the name may hold only letters, digits, '_' and '-'",
                    file);
            return AB_EINVAL;
        }
    }
    *version = v;
    return 0;
}

void migrate_checksum(const void *data, size_t len, char out[65])
{
    uint8_t md[CRYPTO_SHA256_LEN];

    crypto_sha256(data, len, md);
    crypto_hex_encode(md, sizeof(md), out);
}

static int cmp_file(const void *a, const void *b)
{
    const struct migrate_file *x = a, *y = b;

    return (x->version > y->version) - (x->version < y->version);
}

int migrate_sort(struct migrate_file *files, size_t n, char *err, size_t errlen)
{
    if (n > 1)
        qsort(files, n, sizeof(*files), cmp_file);
    for (size_t i = 1; i < n; i++) {
        if (files[i].version == files[i - 1].version) {
            ab_errf(err, errlen,
                    "migration files '%s' and '%s' have the same version %04d: renumber one",
                    files[i - 1].name, files[i].name, files[i].version);
            return AB_EEXIST;
        }
    }
    return 0;
}

/* Reads path into a NUL-terminated malloc'd buffer of at most MIGRATE_FILE_MAX bytes. */
static int read_file(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, rc = 0;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ab_errf(err, errlen, "cannot open migration %s: %s", path, strerror(errno));
        return AB_EIO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ab_errf(err, errlen, "migration %s is not a regular file", path);
        rc = AB_EINVAL;
        goto out;
    }
    if (st.st_size > MIGRATE_FILE_MAX) {
        ab_errf(err, errlen, "migration %s is %lld bytes, more than the limit of %d: split it",
                path, (long long)st.st_size, MIGRATE_FILE_MAX);
        rc = AB_ELIMIT;
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            ab_errf(err, errlen, "cannot read migration %s: %s", path,
                    r < 0 ? strerror(errno) : "file shrank while reading");
            rc = AB_EIO;
            goto out;
        }
        got += (size_t)r;
    }
    buf[got] = '\0';
    *out = buf;
    *outlen = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

void migrate_set_free(struct migrate_set *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->files[i].sql);
    free(s->files);
    s->files = NULL;
    s->n = 0;
}

int migrate_scan(const char *dir, struct migrate_set *out, char *err, size_t errlen)
{
    struct migrate_set set = {0};
    struct dirent *de;
    DIR *d;
    int rc = 0;

    d = opendir(dir);
    if (d == NULL) {
        ab_errf(err, errlen,
                "cannot open migrations directory %s: %s (set --migrations-dir or "
                "AGENTBOX_MIGRATIONS_DIR)",
                dir, strerror(errno));
        return AB_ENOENT;
    }
    set.files = calloc(MIGRATE_MAX_FILES, sizeof(*set.files));
    if (set.files == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        struct migrate_file *f;
        char path[4096];
        int version;

        rc = migrate_parse_name(de->d_name, &version, err, errlen);
        if (rc == AB_ENOENT) {
            rc = 0;
            continue;
        }
        if (rc != 0) {
            size_t used = strlen(err);
            if (used + 1 < errlen)
                snprintf(err + used, errlen - used, " (in %s)", dir);
            goto out;
        }
        if (set.n == MIGRATE_MAX_FILES) {
            ab_errf(err, errlen, "more than %d migration files in %s", MIGRATE_MAX_FILES, dir);
            rc = AB_ELIMIT;
            goto out;
        }
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path)) {
            ab_errf(err, errlen, "migration path %s/%s is longer than %zu bytes", dir, de->d_name,
                    sizeof(path) - 1);
            rc = AB_ELIMIT;
            goto out;
        }
        f = &set.files[set.n];
        rc = read_file(path, &f->sql, &f->len, err, errlen);
        if (rc != 0)
            goto out;
        set.n++;
        f->version = version;
        ab_strlcpy(f->name, de->d_name, sizeof(f->name));
        migrate_checksum(f->sql, f->len, f->checksum);
    }
    if (set.n == 0) {
        ab_errf(err, errlen,
                "no migration files (NNNN_name.sql) in %s: point --migrations-dir at the "
                "repository's migrations folder",
                dir);
        rc = AB_ENOENT;
        goto out;
    }
    rc = migrate_sort(set.files, set.n, err, errlen);
    if (rc != 0)
        goto out;
    *out = set;
    set.files = NULL;
    set.n = 0;
out:
    migrate_set_free(&set);
    if (d != NULL)
        closedir(d);
    return rc;
}

const char *migrate_state_name(enum migrate_state s)
{
    switch (s) {
    case MIGRATE_APPLIED:
        return "applied";
    case MIGRATE_PENDING:
        return "pending";
    case MIGRATE_CHANGED:
        return "CHANGED";
    case MIGRATE_RENAMED:
        return "RENAMED";
    case MIGRATE_MISSING:
        return "MISSING";
    case MIGRATE_OUT_OF_ORDER:
        return "OUT-OF-ORDER";
    }
    return "?";
}

int migrate_compare(const struct migrate_set *set, const struct migrate_applied *applied,
                    size_t napplied, struct migrate_entry *entries, size_t *nentries, char *err,
                    size_t errlen)
{
    size_t i = 0, j = 0, n = 0;
    int newest = 0, rc = 0;

    for (size_t k = 0; k < napplied; k++)
        newest = AB_MAX(newest, applied[k].version);
    /* Merge the two version-sorted lists. */
    while (i < set->n || j < napplied) {
        struct migrate_entry *e = &entries[n++];
        const struct migrate_file *f = i < set->n ? &set->files[i] : NULL;
        const struct migrate_applied *a = j < napplied ? &applied[j] : NULL;

        memset(e, 0, sizeof(*e));
        if (f != NULL && (a == NULL || f->version < a->version)) {
            e->version = f->version;
            e->file = f;
            e->state = f->version < newest ? MIGRATE_OUT_OF_ORDER : MIGRATE_PENDING;
            i++;
        } else if (f == NULL || a->version < f->version) {
            e->version = a->version;
            e->applied = a;
            e->state = MIGRATE_MISSING;
            j++;
        } else {
            e->version = f->version;
            e->file = f;
            e->applied = a;
            if (strcmp(f->name, a->name) != 0)
                e->state = MIGRATE_RENAMED;
            else if (strcmp(f->checksum, a->checksum) != 0)
                e->state = MIGRATE_CHANGED;
            else
                e->state = MIGRATE_APPLIED;
            i++;
            j++;
        }
        if (rc != 0)
            continue;
        switch (e->state) {
        case MIGRATE_APPLIED:
        case MIGRATE_PENDING:
            break;
        case MIGRATE_CHANGED:
            ab_errf(err, errlen,
                    "migration %s was changed after it was applied (recorded sha256 %.12s..., "
                    "file now %.12s...): applied migrations must never be edited; restore the "
                    "file and add a new migration instead",
                    e->file->name, e->applied->checksum, e->file->checksum);
            rc = AB_EINVAL;
            break;
        case MIGRATE_RENAMED:
            ab_errf(err, errlen,
                    "migration %04d was applied as %s but the file is now named %s: restore "
                    "the original name",
                    e->version, e->applied->name, e->file->name);
            rc = AB_EINVAL;
            break;
        case MIGRATE_MISSING:
            ab_errf(err, errlen,
                    "the database has migration %s applied but there is no such file: this "
                    "migrations directory is older than the database",
                    e->applied->name);
            rc = AB_EINVAL;
            break;
        case MIGRATE_OUT_OF_ORDER:
            ab_errf(err, errlen,
                    "migration %s is not applied but is numbered below the newest applied "
                    "version %04d: renumber it above %04d",
                    e->file->name, newest, newest);
            rc = AB_EINVAL;
            break;
        }
    }
    *nentries = n;
    return rc;
}

/* --- PostgreSQL side --------------------------------------------------------- */

/* The migrate run's one connection (db_connect: the hub's libpq connect). */
static int connect_db(const struct migrate_options *o, PGconn **out, char *err, size_t errlen)
{
    struct db_connect_options co = {
        .database_url = o->database_url,
        .connect_timeout_ms = o->connect_timeout_ms,
        .application_name = "agentbox-hub migrate",
        .hint = DB_CONNECT_HINT,
    };

    return db_connect(&co, out, err, errlen);
}

/* Line (1-based) of the character position pos (1-based, in characters) in sql. */
static int line_of(const char *sql, const char *pos)
{
    long chars, target = pos != NULL ? strtol(pos, NULL, 10) : 0;
    int line = 1;

    if (target <= 0)
        return 0;
    chars = 0;
    for (const unsigned char *p = (const unsigned char *)sql; *p != '\0'; p++) {
        if ((*p & 0xC0) == 0x80)
            continue; /* UTF-8 continuation byte */
        if (++chars >= target)
            break;
        if (*p == '\n')
            line++;
    }
    return line;
}

/* Runs one statement expecting success; on failure fills err with what. */
static int exec_ok(PGconn *c, const char *sql, const char *what, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    char msg[512];
    int rc = 0;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        db_one_line(msg, sizeof(msg), PQerrorMessage(c));
        ab_errf(err, errlen, "%s: %s", what, msg);
        rc = AB_EIO;
    }
    PQclear(r);
    return rc;
}

static int take_lock(PGconn *c, int64_t lock_timeout_ms, char *err, size_t errlen)
{
    char sql[160];
    char msg[512];
    PGresult *r;
    int rc = 0;

    snprintf(sql, sizeof(sql), "SET lock_timeout = %" PRId64, AB_MAX(lock_timeout_ms, 1));
    rc = exec_ok(c, sql, "setting lock_timeout", err, errlen);
    if (rc != 0)
        return rc;
    snprintf(sql, sizeof(sql), "SELECT pg_advisory_lock(%" PRId64 ")", MIGRATE_LOCK_KEY);
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        db_one_line(msg, sizeof(msg), PQerrorMessage(c));
        if (state != NULL && strcmp(state, "55P03") == 0)
            ab_errf(err, errlen,
                    "another migrate run has held the migration lock (pg_advisory_lock "
                    "%" PRId64 ") for more than %" PRId64
                    " ms: wait for it, or find it in pg_stat_activity",
                    MIGRATE_LOCK_KEY, lock_timeout_ms);
        else
            ab_errf(err, errlen, "taking the migration lock: %s", msg);
        rc = AB_ETIMEOUT;
    }
    PQclear(r);
    if (rc != 0)
        return rc;
    return exec_ok(c, "RESET lock_timeout", "resetting lock_timeout", err, errlen);
}

static const char CREATE_TABLE_SQL[] = "CREATE TABLE IF NOT EXISTS schema_migrations ("
                                       " version integer PRIMARY KEY CHECK (version > 0),"
                                       " name text NOT NULL,"
                                       " checksum text NOT NULL,"
                                       " applied_at timestamptz NOT NULL DEFAULT now())";

static const char SELECT_APPLIED_SQL[] =
    "SELECT version, name, checksum,"
    " to_char(applied_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
    " FROM schema_migrations ORDER BY version";

/* Loads schema_migrations (which may not exist when create is false). */
static int load_applied(PGconn *c, bool create, struct migrate_applied **out, size_t *n, char *err,
                        size_t errlen)
{
    struct migrate_applied *rows = NULL;
    PGresult *r = NULL;
    int rc = 0, nt;

    *out = NULL;
    *n = 0;
    if (create) {
        rc = exec_ok(c, CREATE_TABLE_SQL, "creating schema_migrations", err, errlen);
        if (rc != 0)
            return rc;
    } else {
        r = PQexec(c, "SELECT to_regclass('schema_migrations') IS NOT NULL");
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            char msg[512];
            db_one_line(msg, sizeof(msg), PQerrorMessage(c));
            ab_errf(err, errlen, "reading schema_migrations: %s", msg);
            rc = AB_EIO;
            goto out;
        }
        if (strcmp(PQgetvalue(r, 0, 0), "t") != 0)
            goto out; /* never migrated: nothing applied */
        PQclear(r);
    }
    r = PQexec(c, SELECT_APPLIED_SQL);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char msg[512];
        db_one_line(msg, sizeof(msg), PQerrorMessage(c));
        ab_errf(err, errlen, "reading schema_migrations: %s", msg);
        rc = AB_EIO;
        goto out;
    }
    nt = PQntuples(r);
    if (nt > MIGRATE_MAX_FILES) {
        ab_errf(err, errlen, "schema_migrations has %d rows, more than the limit of %d", nt,
                MIGRATE_MAX_FILES);
        rc = AB_ELIMIT;
        goto out;
    }
    rows = calloc((size_t)nt + 1, sizeof(*rows));
    if (rows == NULL) {
        rc = AB_ENOMEM;
        goto out;
    }
    for (int i = 0; i < nt; i++) {
        rows[i].version = atoi(PQgetvalue(r, i, 0));
        ab_strlcpy(rows[i].name, PQgetvalue(r, i, 1), sizeof(rows[i].name));
        ab_strlcpy(rows[i].checksum, PQgetvalue(r, i, 2), sizeof(rows[i].checksum));
        ab_strlcpy(rows[i].applied_at, PQgetvalue(r, i, 3), sizeof(rows[i].applied_at));
    }
    *out = rows;
    *n = (size_t)nt;
    rows = NULL;
out:
    free(rows);
    PQclear(r);
    return rc;
}

/* Runs one file and records it, in one transaction. */
static int apply_one(PGconn *c, const struct migrate_file *f, char *err, size_t errlen)
{
    const char *params[3];
    char version[16];
    char msg[512];
    PGresult *r;
    int rc;

    rc = exec_ok(c, "BEGIN", "starting a transaction", err, errlen);
    if (rc != 0)
        return rc;
    r = PQexec(c, f->sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK &&
        PQresultStatus(r) != PGRES_EMPTY_QUERY) {
        int line = line_of(f->sql, PQresultErrorField(r, PG_DIAG_STATEMENT_POSITION));
        db_one_line(msg, sizeof(msg), PQresultErrorMessage(r));
        if (line > 0)
            ab_errf(err, errlen,
                    "migration %s failed at line %d: %s (nothing from this file was applied)",
                    f->name, line, msg);
        else
            ab_errf(err, errlen, "migration %s failed: %s (nothing from this file was applied)",
                    f->name, msg);
        PQclear(r);
        PQclear(PQexec(c, "ROLLBACK"));
        return AB_EIO;
    }
    PQclear(r);
    if (PQtransactionStatus(c) != PQTRANS_INTRANS) {
        ab_errf(err, errlen,
                "migration %s ended the transaction itself (COMMIT or ROLLBACK in the file): "
                "remove transaction control; each file already runs in one transaction",
                f->name);
        return AB_EINVAL;
    }
    snprintf(version, sizeof(version), "%d", f->version);
    params[0] = version;
    params[1] = f->name;
    params[2] = f->checksum;
    r = PQexecParams(c,
                     "INSERT INTO schema_migrations (version, name, checksum) "
                     "VALUES ($1::integer, $2, $3)",
                     3, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        db_one_line(msg, sizeof(msg), PQresultErrorMessage(r));
        ab_errf(err, errlen, "recording migration %s: %s", f->name, msg);
        PQclear(r);
        PQclear(PQexec(c, "ROLLBACK"));
        return AB_EIO;
    }
    PQclear(r);
    snprintf(msg, sizeof(msg), "committing migration %s", f->name);
    return exec_ok(c, "COMMIT", msg, err, errlen);
}

/* Common start of apply and status: files, connection, applied rows, and
 * room for migrate_compare's entries (one per file and per applied row). */
static int prepare(const struct migrate_options *o, bool lock, struct migrate_set *set,
                   PGconn **conn, struct migrate_applied **applied, size_t *napplied,
                   struct migrate_entry **entries, char *err, size_t errlen)
{
    int rc;

    rc = migrate_scan(o->dir, set, err, errlen);
    if (rc != 0)
        return rc;
    rc = connect_db(o, conn, err, errlen);
    if (rc != 0)
        return rc;
    /* CREATE TABLE IF NOT EXISTS would print NOTICEs. */
    rc = exec_ok(*conn, "SET client_min_messages = warning", "setting client_min_messages", err,
                 errlen);
    if (rc == 0 && lock)
        rc = take_lock(*conn, o->lock_timeout_ms, err, errlen);
    if (rc == 0)
        rc = load_applied(*conn, lock, applied, napplied, err, errlen);
    if (rc == 0 && (*entries = calloc(set->n + *napplied, sizeof(**entries))) == NULL) {
        ab_errf(err, errlen, "out of memory comparing %zu migrations", set->n + *napplied);
        rc = AB_ENOMEM;
    }
    return rc;
}

int migrate_apply(const struct migrate_options *o, char *err, size_t errlen)
{
    struct migrate_set set = {0};
    struct migrate_applied *applied = NULL;
    struct migrate_entry *entries = NULL;
    size_t napplied = 0, nentries = 0, done = 0;
    PGconn *c = NULL;
    int rc;

    rc = prepare(o, true, &set, &c, &applied, &napplied, &entries, err, errlen);
    if (rc != 0)
        goto out;
    rc = migrate_compare(&set, applied, napplied, entries, &nentries, err, errlen);
    if (rc != 0)
        goto out;
    for (size_t i = 0; i < nentries; i++) {
        int64_t t0;

        if (entries[i].state != MIGRATE_PENDING)
            continue;
        t0 = ab_now_ms();
        rc = apply_one(c, entries[i].file, err, errlen);
        if (rc != 0)
            goto out;
        done++;
        if (o->out != NULL)
            fprintf(o->out, "applied %s (%" PRId64 " ms)\n", entries[i].file->name,
                    ab_now_ms() - t0);
    }
    if (o->out != NULL) {
        if (done == 0)
            fprintf(o->out, "nothing to apply: all %zu migrations are applied (version %04d)\n",
                    napplied, set.files[set.n - 1].version);
        else
            fprintf(o->out, "schema is at version %04d (%zu applied now, %zu before)\n",
                    set.files[set.n - 1].version, done, napplied);
        fflush(o->out);
    }
out:
    /* Closing the session releases the advisory lock. */
    if (c != NULL)
        PQfinish(c);
    free(entries);
    free(applied);
    migrate_set_free(&set);
    return rc;
}

int migrate_status(const struct migrate_options *o, char *err, size_t errlen)
{
    struct migrate_set set = {0};
    struct migrate_applied *applied = NULL;
    struct migrate_entry *entries = NULL;
    size_t napplied = 0, nentries = 0, npending = 0, nok = 0;
    PGconn *c = NULL;
    FILE *out = o->out != NULL ? o->out : stdout;
    int rc;

    rc = prepare(o, false, &set, &c, &applied, &napplied, &entries, err, errlen);
    if (rc != 0)
        goto out;
    rc = migrate_compare(&set, applied, napplied, entries, &nentries, err, errlen);
    fprintf(out, "migrations in %s:\n", o->dir);
    for (size_t i = 0; i < nentries; i++) {
        const struct migrate_entry *e = &entries[i];
        const char *name = e->file != NULL ? e->file->name : e->applied->name;

        if (e->state == MIGRATE_APPLIED)
            nok++;
        if (e->state == MIGRATE_PENDING)
            npending++;
        if (e->applied != NULL)
            fprintf(out, "  %-12s %-40s %s\n", migrate_state_name(e->state), name,
                    e->applied->applied_at);
        else
            fprintf(out, "  %-12s %s\n", migrate_state_name(e->state), name);
    }
    fprintf(out, "%zu applied, %zu pending\n", nok, npending);
    fflush(out);
out:
    if (c != NULL)
        PQfinish(c);
    free(entries);
    free(applied);
    migrate_set_free(&set);
    return rc;
}
