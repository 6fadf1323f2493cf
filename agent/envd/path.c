/* User lookup and path resolution. */
#include "agent/envd/path.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/envd/account.h"
#include "agent/envd/auth.h"
#include "agent/envd/syserr.h"

static void fill_self(struct envd_user *u)
{
    struct envd_account a;
    const char *home = getenv("HOME");

    u->uid = getuid();
    u->gid = getgid();
    u->ngroups = 0;
    if (envd_account_by_uid(ENVD_PASSWD_FILE, u->uid, &a) == 0 && a.home[0] != '\0')
        home = a.home;
    ab_strlcpy(u->home, home != NULL && home[0] == '/' ? home : "/", sizeof(u->home));
}

int envd_user_lookup(const char *name, struct envd_user *u, char *err, size_t errlen)
{
    struct envd_account a;

    memset(u, 0, sizeof(*u));
    if (!envd_username_is_valid(name)) {
        snprintf(err, errlen, "invalid username '%.40s': use a local account name", name);
        return AB_EINVAL;
    }
    ab_strlcpy(u->name, name, sizeof(u->name));
    if (envd_account_by_name(ENVD_PASSWD_FILE, name, &a) != 0) {
        fill_self(u);
        return 0;
    }
    u->exists = true;
    u->uid = a.uid;
    u->gid = a.gid;
    ab_strlcpy(u->home, a.home[0] == '/' ? a.home : "/", sizeof(u->home));
    u->ngroups = envd_groups_of(ENVD_GROUP_FILE, name, a.gid, u->groups, ENVD_GROUPS_MAX);
    return 0;
}

bool envd_user_needs_switch(const struct envd_user *u)
{
    return u->exists && geteuid() == 0 && (u->uid != 0 || u->gid != 0);
}

void envd_path_clean(char *path)
{
    bool rooted = path[0] == '/';
    size_t r = 0;
    size_t w = 0;
    size_t dotdot = 0; /* w below which ".." cannot backtrack */
    size_t n = strlen(path);

    if (n == 0) {
        strcpy(path, ".");
        return;
    }
    if (rooted) {
        path[w++] = '/';
        r = 1;
        dotdot = 1;
    }
    while (r < n) {
        if (path[r] == '/') {
            r++;
        } else if (path[r] == '.' && (r + 1 == n || path[r + 1] == '/')) {
            r++;
        } else if (path[r] == '.' && path[r + 1] == '.' && (r + 2 == n || path[r + 2] == '/')) {
            r += 2;
            if (w > dotdot) {
                w--;
                while (w > dotdot && path[w] != '/')
                    w--;
            } else if (!rooted) {
                if (w > 0)
                    path[w++] = '/';
                path[w++] = '.';
                path[w++] = '.';
                dotdot = w;
            }
        } else {
            if ((rooted && w != 1) || (!rooted && w != 0))
                path[w++] = '/';
            while (r < n && path[r] != '/')
                path[w++] = path[r++];
        }
    }
    if (w == 0)
        path[w++] = '.';
    path[w] = '\0';
}

int envd_path_resolve(const char *path, const char *home, const char *def, char *out, size_t outlen,
                      char *err, size_t errlen)
{
    char tmp[PATH_MAX * 2 + 2];

    if (path == NULL || path[0] == '\0')
        path = def != NULL && def[0] != '\0' ? def : "";
    if (path[0] == '~') {
        if (path[1] != '\0' && path[1] != '/') {
            snprintf(err, errlen, "path '%.200s': cannot expand another user's home directory",
                     path);
            return AB_EINVAL;
        }
        snprintf(tmp, sizeof(tmp), "%s/%s", home, path + 1);
        envd_path_clean(tmp);
    } else if (path[0] == '/') {
        if (strlen(path) >= sizeof(tmp)) {
            snprintf(err, errlen, "path is longer than %d bytes", PATH_MAX - 1);
            return AB_ELIMIT;
        }
        strcpy(tmp, path);
    } else {
        if (strlen(path) + strlen(home) + 2 > sizeof(tmp)) {
            snprintf(err, errlen, "path is longer than %d bytes", PATH_MAX - 1);
            return AB_ELIMIT;
        }
        snprintf(tmp, sizeof(tmp), "%s/%s", home, path);
        envd_path_clean(tmp);
    }
    if (strlen(tmp) >= outlen || strlen(tmp) >= PATH_MAX) {
        snprintf(err, errlen, "path is longer than %d bytes", PATH_MAX - 1);
        return AB_ELIMIT;
    }
    strcpy(out, tmp);
    return 0;
}

int envd_mkdir_all(const char *path, mode_t mode, bool chown_them, uid_t uid, gid_t gid,
                   bool *created)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    struct stat st;

    if (created != NULL)
        *created = false;
    if (n >= sizeof(buf))
        return envd_errno(ENAMETOOLONG);
    memcpy(buf, path, n + 1);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        buf[i] = '\0';
        if (mkdir(buf, mode) == 0) {
            if (chown_them && chown(buf, uid, gid) != 0)
                return envd_errno(errno);
            if (i == n && created != NULL)
                *created = true;
        } else if (errno != EEXIST || stat(buf, &st) != 0) {
            return envd_errno(errno == EEXIST ? ENOTDIR : errno);
        } else if (!S_ISDIR(st.st_mode)) {
            return envd_errno(ENOTDIR);
        }
        if (i < n)
            buf[i] = '/';
    }
    return 0;
}

int envd_mkdir_parents(const char *path, bool chown_them, uid_t uid, gid_t gid)
{
    char buf[PATH_MAX];
    char *slash;

    if (strlen(path) >= sizeof(buf))
        return envd_errno(ENAMETOOLONG);
    strcpy(buf, path);
    slash = strrchr(buf, '/');
    if (slash == NULL || slash == buf)
        return 0;
    *slash = '\0';
    return envd_mkdir_all(buf, 0755, chown_them, uid, gid, NULL);
}
