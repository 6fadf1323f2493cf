/* Manifest directories: loading every *.yaml / *.yml in name order, and the
 * change signature the runtime's timer watches. */
#include "agent/runtime/local/mf_parse.h"

#include "agentbox/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- directories --------------------------------------------------------------------------- */

static bool is_manifest_name(const char *n)
{
    size_t l = strlen(n);

    if (n[0] == '.')
        return false;
    return (l > 5 && !strcmp(n + l - 5, ".yaml")) || (l > 4 && !strcmp(n + l - 4, ".yml"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_dir(const char *dir, char ***names, int *n)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char **v = NULL;
    int cnt = 0, rc = 0;

    *names = NULL;
    *n = 0;
    if (!d)
        return AB_EIO;
    v = calloc(MF_DIR_FILES_MAX, sizeof(*v));
    if (!v) {
        rc = AB_ENOMEM;
        goto out;
    }
    while ((de = readdir(d)) != NULL) {
        if (!is_manifest_name(de->d_name))
            continue;
        if (cnt == MF_DIR_FILES_MAX) {
            rc = AB_ELIMIT;
            goto out;
        }
        if (!(v[cnt] = strdup(de->d_name))) {
            rc = AB_ENOMEM;
            goto out;
        }
        cnt++;
    }
    qsort(v, (size_t)cnt, sizeof(*v), cmp_str);
out:
    closedir(d);
    if (rc != 0) {
        while (cnt > 0)
            free(v[--cnt]);
        free(v);
        return rc;
    }
    *names = v;
    *n = cnt;
    return 0;
}

int mf_load_file(struct mf_set *s, const char *path)
{
    struct stat st;
    char *buf = NULL;
    char msg[256];
    size_t got = 0;
    int fd, rc = 0, first;

    fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(msg, sizeof(msg), "cannot read: %s", strerror(errno));
        rc = mf_set_push_error(s, path, 0, msg);
        goto out;
    }
    if (!S_ISREG(st.st_mode))
        goto out; /* directories named x.yaml, sockets: not manifests */
    if (st.st_size > MF_FILE_MAX) {
        snprintf(msg, sizeof(msg), "file is larger than the %d-byte limit for manifests; split it",
                 MF_FILE_MAX);
        rc = mf_set_push_error(s, path, 0, msg);
        goto out;
    }
    if (!(buf = malloc((size_t)st.st_size + 1))) {
        rc = AB_ENOMEM;
        goto out;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    first = s->nobjs;
    rc = mf_parse_buffer(s, path, buf, got);
    for (int i = first; i < s->nobjs; i++)
        s->objs[i]->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
out:
    if (fd >= 0)
        close(fd);
    free(buf);
    return rc;
}

int mf_load_dir(const char *dir, struct mf_set **out, char *err, size_t errlen)
{
    struct mf_set *s = NULL;
    char **names = NULL;
    char path[MF_PATH_MAX];
    int n = 0, i, rc;

    *out = NULL;
    rc = list_dir(dir, &names, &n);
    if (rc != 0) {
        if (rc == AB_ELIMIT)
            snprintf(err, errlen, "manifest directory %s has more than %d manifest files", dir,
                     MF_DIR_FILES_MAX);
        else
            snprintf(err, errlen, "cannot read manifest directory %s: %s", dir, strerror(errno));
        return rc == AB_ENOMEM ? rc : AB_EIO;
    }
    if (!(s = mf_set_new())) {
        rc = AB_ENOMEM;
        goto out;
    }
    for (i = 0; i < n; i++) {
        if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]) >= (int)sizeof(path))
            continue;
        rc = mf_load_file(s, path);
        if (rc == AB_ELIMIT) {
            mf_set_push_error(s, path, 0, "too many objects; the rest of the directory is ignored");
            rc = 0;
            break;
        }
        if (rc != 0)
            goto out;
    }
    if (mf_overlay_dir(dir, path, sizeof(path)) == 0 && (rc = mf_overlay_apply(s, path)) != 0)
        goto out;
    mf_set_check(s);
    *out = s;
    s = NULL;
out:
    for (i = 0; i < n; i++)
        free(names[i]);
    free(names);
    mf_set_free(s);
    if (rc != 0)
        snprintf(err, errlen, "loading manifests from %s: %s", dir, ab_strerror(rc));
    return rc;
}

/* all: every regular file counts (the overlay's tombstones and secrets too). */
static int signature(const char *dir, bool all, uint64_t *sig)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    uint64_t sum = 0, count = 0;

    if (!d)
        return AB_EIO;
    while ((de = readdir(d)) != NULL) {
        struct stat st;
        uint64_t h = 1469598103934665603ULL;
        const unsigned char *p;
        uint64_t f[5];
        size_t i;

        if ((all ? de->d_name[0] == '.' : !is_manifest_name(de->d_name)) ||
            fstatat(dirfd(d), de->d_name, &st, 0) != 0 || (all && !S_ISREG(st.st_mode)))
            continue;
        for (p = (const unsigned char *)de->d_name; *p; p++)
            h = (h ^ *p) * 1099511628211ULL;
        f[0] = (uint64_t)st.st_size;
        f[1] = (uint64_t)st.st_mtim.tv_sec;
        f[2] = (uint64_t)st.st_mtim.tv_nsec;
        f[3] = (uint64_t)st.st_ino;
        f[4] = (uint64_t)st.st_ctim.tv_nsec;
        for (i = 0; i < AB_ARRAY_LEN(f); i++)
            h = (h ^ f[i]) * 1099511628211ULL;
        sum += h; /* order-independent: readdir order may change */
        count++;
    }
    closedir(d);
    *sig = sum ^ (count * 0x9e3779b97f4a7c15ULL);
    return 0;
}

int mf_dir_signature(const char *dir, uint64_t *sig)
{
    char overlay[MF_PATH_MAX];
    uint64_t o = 0;
    int rc = signature(dir, false, sig);

    if (rc == 0 && mf_overlay_dir(dir, overlay, sizeof(overlay)) == 0 &&
        signature(overlay, true, &o) == 0)
        *sig ^= (o << 1) | (o >> 63); /* absent overlay: nothing mixed in */
    return rc;
}
