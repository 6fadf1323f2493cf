/* Accounts as the sandbox's own files say: /etc/passwd and /etc/group read
 * line by line here, never through NSS. A statically linked envd (its start
 * costs less: no loader, no libc to relocate) must not call getpwnam and the
 * like: a static glibc loads NSS modules for them with a second libc, and a
 * lookup crashed so. E2B's envd does the same (Go's os/user without cgo
 * reads these files). Lines are at most ENVD_ACCOUNT_LINE_MAX bytes; a
 * longer one, a comment, a NIS "+"/"-" entry or a malformed one is skipped.
 * Any thread. */
#ifndef ENVD_ACCOUNT_H
#define ENVD_ACCOUNT_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define ENVD_PASSWD_FILE "/etc/passwd"
#define ENVD_GROUP_FILE "/etc/group"
#define ENVD_ACCOUNT_LINE_MAX 4096
#define ENVD_ACCOUNT_NAME_MAX 32

struct envd_account {
    char name[ENVD_ACCOUNT_NAME_MAX + 1];
    uid_t uid;
    gid_t gid;
    char home[PATH_MAX];
};

/* The first passwd entry named name (or, for by_uid, with that uid).
 * 0, or AB_ENOENT when none (or the file cannot be read). */
int envd_account_by_name(const char *passwd, const char *name, struct envd_account *out);
int envd_account_by_uid(const char *passwd, uid_t uid, struct envd_account *out);

/* The name of the first group with gid: 0, or AB_ENOENT. */
int envd_group_name(const char *group, gid_t gid, char *name, size_t len);

/* getgrouplist's answer: primary first, then every group listing name as a
 * member (each gid once), at most max. Returns how many. */
int envd_groups_of(const char *group, const char *name, gid_t primary, gid_t *out, int max);

#endif
