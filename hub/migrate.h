/* `agentbox-hub migrate`: applies migrations/NNNN_name.sql in version order.
 *
 * Rules (DESIGN §9):
 *   - runs under a PostgreSQL advisory lock (MIGRATE_LOCK_KEY), so concurrent
 *     runs serialise and the later ones find nothing to do;
 *   - each file runs in its own transaction together with its
 *     schema_migrations row (version, name, SHA-256 of the file, time);
 *   - a file whose content changed after it was applied, an applied version
 *     with no file, and a new file numbered below the newest applied one are
 *     refused before anything runs, with a message naming the file.
 *
 * A migration file must not contain transaction control (BEGIN/COMMIT) nor
 * statements that cannot run in a transaction (CREATE INDEX CONCURRENTLY).
 *
 * This is a synchronous CLI over libpq; nothing here runs on the loop. */
#ifndef AGENTBOX_HUB_MIGRATE_H
#define AGENTBOX_HUB_MIGRATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MIGRATE_NAME_MAX 128               /* file name, e.g. "0001_init.sql" */
#define MIGRATE_FILE_MAX (4 * 1024 * 1024) /* bytes of SQL per file */
#define MIGRATE_MAX_FILES 1000
#define MIGRATE_VERSION_MAX 9999
/* "agentbox" in ASCII: the pg_advisory_lock key every migrate run takes. */
#define MIGRATE_LOCK_KEY INT64_C(0x6167656e74626f78)

struct migrate_file {
    int version;
    char name[MIGRATE_NAME_MAX]; /* base name */
    char checksum[65];           /* lowercase hex SHA-256 of the content */
    char *sql;                   /* owned, NUL-terminated */
    size_t len;
};

struct migrate_set {
    struct migrate_file *files; /* sorted by version, no duplicates */
    size_t n;
};

/* A schema_migrations row. */
struct migrate_applied {
    int version;
    char name[MIGRATE_NAME_MAX];
    char checksum[65];
    char applied_at[40]; /* "2024-05-01T12:00:00Z" */
};

enum migrate_state {
    MIGRATE_APPLIED,      /* recorded, file unchanged */
    MIGRATE_PENDING,      /* file not yet applied */
    MIGRATE_CHANGED,      /* recorded, but the file's checksum differs */
    MIGRATE_RENAMED,      /* recorded under another file name */
    MIGRATE_MISSING,      /* recorded, no file with that version */
    MIGRATE_OUT_OF_ORDER, /* not applied, numbered below the newest applied version */
};

/* One line of the comparison between files and schema_migrations. Pointers
 * borrow from the set and the applied rows. */
struct migrate_entry {
    enum migrate_state state;
    int version;
    const struct migrate_file *file;       /* NULL when MISSING */
    const struct migrate_applied *applied; /* NULL when PENDING or OUT_OF_ORDER */
};

/* Parses a migration file name "NNNN_name.sql" (4 digits, version 1..9999,
 * name of [A-Za-z0-9_-], at most MIGRATE_NAME_MAX-1 bytes in all).
 * Returns 0 with *version set; AB_ENOENT for names that are not migrations at
 * all (no ".sql" suffix, hidden files: the caller skips them); AB_EINVAL for
 * a ".sql" file that is malformed, with the reason in err. */
int migrate_parse_name(const char *file, int *version, char *err, size_t errlen);

/* Lowercase hex SHA-256 of data. */
void migrate_checksum(const void *data, size_t len, char out[65]);

/* Sorts files by version; two files with one version are AB_EEXIST naming
 * both. */
int migrate_sort(struct migrate_file *files, size_t n, char *err, size_t errlen);

/* Reads every migration in dir (not recursive) into *out. A missing dir,
 * a malformed .sql name, a duplicate version, an oversized file or an empty
 * directory is an error naming the path. Free with migrate_set_free. */
int migrate_scan(const char *dir, struct migrate_set *out, char *err, size_t errlen);
void migrate_set_free(struct migrate_set *s);

/* Compares files with applied rows (both sorted by version) into entries, in
 * version order. entries must hold set->n + napplied items; *nentries is set.
 * Returns 0 when migrating is allowed (every entry APPLIED or PENDING), else
 * AB_EINVAL with err naming the first offending file and what to do. */
int migrate_compare(const struct migrate_set *set, const struct migrate_applied *applied,
                    size_t napplied, struct migrate_entry *entries, size_t *nentries, char *err,
                    size_t errlen);

const char *migrate_state_name(enum migrate_state s);

struct migrate_options {
    const char *database_url; /* URL or conninfo; NULL or "" → libpq's PG* variables */
    const char *dir;          /* migrations directory */
    int64_t connect_timeout_ms;
    int64_t lock_timeout_ms; /* wait for another run's lock at most this long */
    FILE *out;               /* progress and status lines (stdout) */
};

/* Applies every pending migration. Returns 0 (also when nothing was pending)
 * or a negative ab_err with err naming the file, the PostgreSQL error and the
 * line in the file. */
int migrate_apply(const struct migrate_options *o, char *err, size_t errlen);

/* Prints each migration as applied (with time) or pending, plus problems.
 * Returns 0 when the database is consistent with the files, AB_EINVAL when a
 * migrate run would refuse (err says why), other errors on connection trouble. */
int migrate_status(const struct migrate_options *o, char *err, size_t errlen);

#endif
