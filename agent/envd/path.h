/* Users and paths as envd sees them (e2b-protocol.md §2.5, §2.7, §4 item 15):
 * "~" and relative paths resolve against the user's home; absolute paths are
 * taken as given. Any thread (accounts from the sandbox's files, account.h). */
#ifndef ENVD_PATH_H
#define ENVD_PATH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define ENVD_GROUPS_MAX 64

/* Who a process or file operation runs as. When the name is not a local
 * account (exists == false), envd keeps its own uid/gid and home but still
 * hands the name to the process as USER/LOGNAME. */
struct envd_user {
    char name[33];
    bool exists;
    uid_t uid;
    gid_t gid;
    gid_t groups[ENVD_GROUPS_MAX];
    int ngroups;
    char home[PATH_MAX];
};

/* Fills u for name (valid per envd_username_is_valid). Never fails for a
 * missing account (see above); AB_EINVAL for a malformed name. */
int envd_user_lookup(const char *name, struct envd_user *u, char *err, size_t errlen);

/* True when envd may and must switch identity for u (root, and u exists). */
bool envd_user_needs_switch(const struct envd_user *u);

/* Lexical clean like Go's filepath.Clean, in place: "//a/./b/../c/" → "/a/c". */
void envd_path_clean(char *path);

/* Resolves path for a user whose home is home: "" → def (when def is not
 * NULL or ""), "~" and "~/x" → home, relative → home/path cleaned, absolute
 * → unchanged. Refuses "~other" (AB_EINVAL) and results over outlen
 * (AB_ELIMIT); reason in err. */
int envd_path_resolve(const char *path, const char *home, const char *def, char *out, size_t outlen,
                      char *err, size_t errlen);

/* mkdir -p of the parents of path, chowning what it creates to uid:gid
 * when chown is true. Returns 0 or envd_errno(errno) (syserr.h). */
int envd_mkdir_parents(const char *path, bool chown_them, uid_t uid, gid_t gid);
/* mkdir -p of path itself; *created says whether the last element was made.
 * Returns 0 or envd_errno(errno). */
int envd_mkdir_all(const char *path, mode_t mode, bool chown_them, uid_t uid, gid_t gid,
                   bool *created);

#endif
