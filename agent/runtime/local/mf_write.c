/* The write side of the local runtime's manifests: what the native
 * management API writes lives in an overlay directory inside the manifest
 * directory, `<manifests>/.agentbox-api/` (the seed loader skips dot names),
 * one file per object, so the operator's YAML files are never rewritten:
 *
 *   <kind>.<ns>.<name>.yaml          the object as JSON (which is YAML)
 *   <kind>.<ns>.<name>.deleted       a tombstone: the API deleted a seed object
 *   env.<ns>.<name>.pull-secret.json the Env's imagePullSecret (0600), kept by
 *                                    the agent for its own pulls, never served
 *
 * Conflicts between a hand edit and an API write: the newer file wins, by
 * modification time. An API write replaces the seed's object until the
 * operator edits the seed file that defines it again; a tombstone hides a
 * seed object until that file changes. (An edit to another object of the
 * same seed file counts as an edit of the file: the seed takes it back.)
 *
 * Pure blocking file operations: workers only, never the loop thread. Every
 * write is a temporary file, fsync, rename, then an fsync of the directory. */
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

static const char *kind_word(enum mf_kind k)
{
    return k == MF_TEMPLATE ? "template" : k == MF_POOL ? "pool" : "env";
}

int mf_overlay_dir(const char *manifests, char *out, size_t outlen)
{
    if ((size_t)snprintf(out, outlen, "%s/" MF_OVERLAY_NAME, manifests) >= outlen)
        return AB_ELIMIT;
    return 0;
}

static int object_path(const char *overlay, enum mf_kind kind, const char *ns, const char *name,
                       const char *suffix, char *out, size_t outlen)
{
    if ((size_t)snprintf(out, outlen, "%s/%s.%s.%s%s", overlay, kind_word(kind),
                         kind == MF_TEMPLATE || !ns[0] ? "_" : ns, name, suffix) >= outlen)
        return AB_ELIMIT;
    return 0;
}

/* path ← data, atomically: a reader sees the old file or the new one. */
static int write_atomic(const char *dir, const char *path, const char *data, size_t len,
                        mode_t mode, char *err, size_t errlen)
{
    char tmp[MF_PATH_MAX + 16];
    size_t off = 0;
    int fd, dfd;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        snprintf(err, errlen, "path too long: %s", path);
        return AB_ELIMIT;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        goto fail;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            close(fd);
            unlink(tmp);
            goto fail;
        }
        off += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        unlink(tmp);
        goto fail;
    }
    if (rename(tmp, path) != 0) {
        unlink(tmp);
        goto fail;
    }
    if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
        fsync(dfd); /* the rename itself survives a crash */
        close(dfd);
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
    return AB_EIO;
}

static int ensure_dir(const char *overlay, char *err, size_t errlen)
{
    if (mkdir(overlay, 0700) == 0 || errno == EEXIST)
        return 0;
    snprintf(err, errlen, "cannot create the API's manifest directory %s: %s", overlay,
             strerror(errno));
    return AB_EIO;
}

static int remove_file(const char *path, char *err, size_t errlen)
{
    if (unlink(path) == 0 || errno == ENOENT)
        return 0;
    snprintf(err, errlen, "cannot remove %s: %s", path, strerror(errno));
    return AB_EIO;
}

int mf_write_object(const char *overlay, enum mf_kind kind, const char *ns, const char *name,
                    const json_t *obj, int64_t *mtime_ns, char *err, size_t errlen)
{
    struct stat st;
    char path[MF_PATH_MAX], tomb[MF_PATH_MAX];
    char *text;
    int rc;

    if ((rc = ensure_dir(overlay, err, errlen)) != 0)
        return rc;
    if (object_path(overlay, kind, ns, name, ".yaml", path, sizeof(path)) != 0 ||
        object_path(overlay, kind, ns, name, ".deleted", tomb, sizeof(tomb)) != 0) {
        snprintf(err, errlen, "object name too long for a file name: %s", name);
        return AB_ELIMIT;
    }
    if (!obj) {
        /* the tombstone first: a crash between the two leaves the object deleted */
        if ((rc = write_atomic(overlay, tomb, "", 0, 0600, err, errlen)) != 0)
            return rc;
        if (mtime_ns && stat(tomb, &st) == 0)
            *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        return remove_file(path, err, errlen);
    }
    /* JSON is YAML: the seed's parser reads these files as it reads the operator's */
    if (!(text = json_dumps(obj, JSON_INDENT(2) | JSON_SORT_KEYS))) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    rc = write_atomic(overlay, path, text, strlen(text), 0644, err, errlen);
    free(text);
    if (rc == 0 && mtime_ns && stat(path, &st) == 0)
        *mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
    if (rc == 0)
        rc = remove_file(tomb, err, errlen);
    return rc;
}

int mf_write_secret(const char *overlay, const char *ns, const char *env, const json_t *secret,
                    char *err, size_t errlen)
{
    char path[MF_PATH_MAX];
    char *text;
    int rc;

    if ((rc = ensure_dir(overlay, err, errlen)) != 0)
        return rc;
    if (object_path(overlay, MF_ENV, ns, env, MF_SECRET_SUFFIX, path, sizeof(path)) != 0) {
        snprintf(err, errlen, "env name too long for a file name: %s", env);
        return AB_ELIMIT;
    }
    if (!secret)
        return remove_file(path, err, errlen);
    if (!(text = json_dumps(secret, JSON_COMPACT))) {
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    rc = write_atomic(overlay, path, text, strlen(text), 0600, err, errlen);
    explicit_bzero(text, strlen(text));
    free(text);
    return rc;
}

/* ---- validation ------------------------------------------------------------------------- */

int mf_validate_json(const json_t *obj, struct mf_set **out, char *err, size_t errlen)
{
    struct mf_set *s;
    char *text;
    int rc;

    *out = NULL;
    if (!(s = mf_set_new()) || !(text = json_dumps(obj, JSON_INDENT(2)))) {
        mf_set_free(s);
        snprintf(err, errlen, "out of memory");
        return AB_ENOMEM;
    }
    rc = mf_parse_buffer(s, "request", text, strlen(text));
    free(text);
    if (rc == 0 && s->nerrs > 0) {
        /* "request:12: field 'spec.x' ..." → the part after the place */
        const char *t = strchr(s->errs[0].text + strlen("request:"), ' ');
        snprintf(err, errlen, "%s", t ? t + 1 : s->errs[0].text);
        rc = AB_EINVAL;
    } else if (rc == 0 && s->nobjs != 1) {
        snprintf(err, errlen, "the request is not one manifest object");
        rc = AB_EINVAL;
    }
    if (rc != 0) {
        mf_set_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

/* ---- loading the overlay ---------------------------------------------------------------- */

static int64_t mtime_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t l = strlen(s), m = strlen(suf);
    return l > m && !strcmp(s + l - m, suf);
}

/* "<kind>.<ns>.<name><suffix>" → its parts; false when it is not one. */
static bool split_name(const char *file, const char *suffix, enum mf_kind *kind, char *ns,
                       size_t nslen, char *name, size_t namelen)
{
    const char *a = strchr(file, '.'), *b;
    size_t l;

    if (!a || !(b = strchr(a + 1, '.')))
        return false;
    if (!strncmp(file, "template.", 9))
        *kind = MF_TEMPLATE;
    else if (!strncmp(file, "pool.", 5))
        *kind = MF_POOL;
    else if (!strncmp(file, "env.", 4))
        *kind = MF_ENV;
    else
        return false;
    l = (size_t)(b - a - 1);
    if (l >= nslen)
        return false;
    memcpy(ns, a + 1, l);
    ns[l] = 0;
    if (!strcmp(ns, "_"))
        ns[0] = 0;
    l = strlen(b + 1) - strlen(suffix);
    if (l == 0 || l >= namelen)
        return false;
    memcpy(name, b + 1, l);
    name[l] = 0;
    return true;
}

static int find_index(const struct mf_set *s, enum mf_kind kind, const char *ns, const char *name)
{
    for (int i = 0; i < s->nobjs; i++) {
        const struct mf_object *o = s->objs[i];
        if (o->kind == kind && !strcmp(o->name, name) &&
            (kind == MF_TEMPLATE || !strcmp(o->ns, ns)))
            return i;
    }
    return -1;
}

/* The overlay's objects over the seed's in s (see the top of the file). */
int mf_overlay_apply(struct mf_set *s, const char *overlay)
{
    DIR *d = opendir(overlay);
    struct dirent *de;
    int files = 0, rc = 0;

    if (!d)
        return 0; /* nothing written through the API yet */
    while ((de = readdir(d)) != NULL && rc == 0) {
        char path[MF_PATH_MAX], ns[MF_NAME_MAX + 1], name[MF_TEMPLATE_NAME_MAX + 1];
        enum mf_kind kind;
        struct stat st;
        int i;

        if (de->d_name[0] == '.' || ++files > MF_DIR_FILES_MAX * 4)
            continue;
        if ((size_t)snprintf(path, sizeof(path), "%s/%s", overlay, de->d_name) >= sizeof(path) ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (has_suffix(de->d_name, ".yaml")) {
            struct mf_set *t = mf_set_new();
            if (!t) {
                rc = AB_ENOMEM;
                break;
            }
            if (mf_load_file(t, path) == 0) {
                for (int e = 0; e < t->nerrs; e++)
                    mf_set_push_error(s, t->errs[e].file, t->errs[e].line, t->errs[e].text);
                for (int k = 0; k < t->nobjs; k++) {
                    struct mf_object *o = t->objs[k];
                    o->mtime_ns = mtime_of(&st);
                    o->from_api = true;
                    i = find_index(s, o->kind, o->ns, o->name);
                    if (i >= 0 && !s->objs[i]->from_api && s->objs[i]->mtime_ns > o->mtime_ns)
                        continue; /* the operator edited the seed after the API wrote */
                    if (i >= 0) {
                        mf_object_free(s->objs[i]);
                        s->objs[i] = o;
                    } else if (mf_set_push_object(s, o) != 0) {
                        continue;
                    }
                    t->objs[k] = NULL;
                }
            }
            for (int k = 0; k < t->nobjs; k++)
                mf_object_free(t->objs[k]);
            t->nobjs = 0;
            mf_set_free(t);
        } else if (has_suffix(de->d_name, ".deleted") &&
                   split_name(de->d_name, ".deleted", &kind, ns, sizeof(ns), name, sizeof(name))) {
            i = find_index(s, kind, ns, name);
            if (i >= 0 && !s->objs[i]->from_api && s->objs[i]->mtime_ns <= mtime_of(&st)) {
                mf_object_free(s->objs[i]);
                memmove(&s->objs[i], &s->objs[i + 1],
                        (size_t)(s->nobjs - i - 1) * sizeof(s->objs[0]));
                s->nobjs--;
            }
        }
    }
    /* the secrets last, once every object is in place */
    rewinddir(d);
    while ((de = readdir(d)) != NULL) {
        char ns[MF_NAME_MAX + 1], name[MF_TEMPLATE_NAME_MAX + 1];
        enum mf_kind kind;
        int i;

        if (has_suffix(de->d_name, MF_SECRET_SUFFIX) &&
            split_name(de->d_name, MF_SECRET_SUFFIX, &kind, ns, sizeof(ns), name, sizeof(name)) &&
            kind == MF_ENV && (i = find_index(s, MF_ENV, ns, name)) >= 0)
            s->objs[i]->pull_secret = true;
    }
    closedir(d);
    return rc;
}
