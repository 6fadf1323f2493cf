/* filesystem.Filesystem: Stat, ListDir, MakeDir, Move, Remove (unary) and
 * WatchDir (server stream over inotify). Operations run as envd itself and
 * chown what they create to the request's user, as upstream envd does. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/envd/envd.h"
#include "agent/envd/event.h"
#include "agent/envd/fdwatch.h"
#include "agent/envd/syserr.h"

#define LIST_ENTRIES_MAX 100000
#define WATCH_DIRS_MAX 8192
#define WATCH_MASK                                                                                 \
    (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_DELETE_SELF)

struct watch_dir {
    int wd;
    char *rel; /* "" for the root */
};

struct envd_watch {
    struct envd_watch *next;
    struct envd *e;
    struct envd_stream s;
    struct envd_fd *w;
    char root[PATH_MAX];
    bool recursive;
    bool include_entry;
    bool gone;
    int last_errno;
    struct watch_dir *dirs;
    size_t ndirs;
    size_t cap;
};

static const char *errno_code(int err)
{
    switch (err) {
    case ENOENT:
    case ENOTDIR:
        return "not_found";
    case EACCES:
    case EPERM:
        return "permission_denied";
    case EEXIST:
    case ENOTEMPTY:
        return "already_exists";
    case ENOSPC:
    case EDQUOT:
        return "resource_exhausted";
    default:
        return "internal";
    }
}

static bool resolve(struct envd_call *c, const char *field, char *out)
{
    json_t *v = json_object_get(c->req, field);
    char err[256];

    if (v != NULL && !json_is_string(v)) {
        envd_rpc_error(c, "invalid_argument", "field '%s' must be a string", field);
        return false;
    }
    if (json_string_length(v) == 0) {
        envd_rpc_error(c, "invalid_argument", "field '%s' is required", field);
        return false;
    }
    if (envd_path_resolve(json_string_value(v), c->user.home, NULL, out, PATH_MAX, err,
                          sizeof(err)) != 0) {
        envd_rpc_error(c, "invalid_argument", "%s", err);
        return false;
    }
    return true;
}

static void reply_entry(struct envd_call *c, const char *path)
{
    json_t *entry;
    int rc = envd_entry_info(path, &entry);

    if (rc != 0) {
        envd_rpc_error(c, errno_code(envd_errno_of(rc)), "cannot stat '%s': %s", path,
                       strerror(envd_errno_of(rc)));
        return;
    }
    envd_rpc_reply(c, json_pack("{s:o}", "entry", entry));
}

static void rpc_stat(struct envd_call *c)
{
    char path[PATH_MAX];
    struct stat st;

    if (!resolve(c, "path", path))
        return;
    if (lstat(path, &st) != 0) {
        envd_rpc_error(c, errno_code(errno), "file not found: stat %s: %s", path, strerror(errno));
        return;
    }
    reply_entry(c, path);
}

static int list_into(json_t *out, const char *dir, unsigned depth, char *err, size_t errlen)
{
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    int rc = 0;

    if (n < 0) {
        int e = errno; /* before snprintf/strerror may touch it */
        snprintf(err, errlen, "cannot read directory '%s': %s", dir, strerror(e));
        return envd_errno(e);
    }
    for (int i = 0; i < n; i++) {
        char child[PATH_MAX];
        json_t *entry;
        const char *name = names[i]->d_name;

        if (rc != 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
            continue;
        if (json_array_size(out) >= LIST_ENTRIES_MAX) {
            snprintf(err, errlen,
                     "directory listing has more than %d entries: use a smaller "
                     "depth",
                     LIST_ENTRIES_MAX);
            rc = AB_ELIMIT;
            continue;
        }
        if ((size_t)snprintf(child, sizeof(child), "%s%s%s", dir,
                             dir[strlen(dir) - 1] == '/' ? "" : "/", name) >= sizeof(child))
            continue;
        if (envd_entry_info(child, &entry) != 0)
            continue; /* vanished meanwhile */
        json_array_append_new(out, entry);
        if (depth > 1 && names[i]->d_type == DT_DIR)
            rc = list_into(out, child, depth - 1, err, errlen) == AB_ELIMIT ? AB_ELIMIT : 0;
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

static void rpc_list_dir(struct envd_call *c)
{
    char path[PATH_MAX];
    char err[512];
    json_int_t depth = json_integer_value(json_object_get(c->req, "depth"));
    struct stat st;
    json_t *entries;
    int rc;

    if (!resolve(c, "path", path))
        return;
    if (depth <= 0)
        depth = 1;
    if (stat(path, &st) != 0) {
        envd_rpc_error(c, errno_code(errno), "directory '%s' does not exist: %s", path,
                       strerror(errno));
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        envd_rpc_error(c, "invalid_argument", "path '%s' is not a directory", path);
        return;
    }
    entries = json_array();
    rc = list_into(entries, path, (unsigned)AB_MIN(depth, 64), err, sizeof(err));
    if (rc != 0) {
        json_decref(entries);
        envd_rpc_error(c, rc == AB_ELIMIT ? "resource_exhausted" : errno_code(envd_errno_of(rc)),
                       "%s", err);
        return;
    }
    envd_rpc_reply(c, json_pack("{s:o}", "entries", entries));
}

static void rpc_make_dir(struct envd_call *c)
{
    char path[PATH_MAX];
    struct stat st;
    bool sw = envd_user_needs_switch(&c->user);
    int rc;

    if (!resolve(c, "path", path))
        return;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            envd_rpc_error(c, "already_exists", "directory '%s' already exists", path);
        else
            envd_rpc_error(c, "invalid_argument",
                           "path '%s' already exists and is not a "
                           "directory",
                           path);
        return;
    }
    rc = envd_mkdir_all(path, 0755, sw, c->user.uid, c->user.gid, NULL);
    if (rc != 0) {
        envd_rpc_error(
            c, rc == envd_errno(ENOTDIR) ? "invalid_argument" : errno_code(envd_errno_of(rc)),
            "cannot create directory '%s': %s", path, strerror(envd_errno_of(rc)));
        return;
    }
    reply_entry(c, path);
}

static void rpc_move(struct envd_call *c)
{
    char src[PATH_MAX];
    char dst[PATH_MAX];
    struct stat st;
    int rc;

    if (!resolve(c, "source", src) || !resolve(c, "destination", dst))
        return;
    if (lstat(src, &st) != 0) {
        envd_rpc_error(c, errno_code(errno), "source '%s' does not exist: %s", src,
                       strerror(errno));
        return;
    }
    rc = envd_mkdir_parents(dst, envd_user_needs_switch(&c->user), c->user.uid, c->user.gid);
    if (rc != 0) {
        envd_rpc_error(c, errno_code(envd_errno_of(rc)), "cannot create the parents of '%s': %s",
                       dst, strerror(envd_errno_of(rc)));
        return;
    }
    if (rename(src, dst) != 0) {
        envd_rpc_error(c, errno == EXDEV ? "failed_precondition" : errno_code(errno),
                       "cannot move '%s' to '%s': %s", src, dst, strerror(errno));
        return;
    }
    reply_entry(c, dst);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

static void rpc_remove(struct envd_call *c)
{
    char path[PATH_MAX];
    struct stat st;

    if (!resolve(c, "path", path))
        return;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT) { /* remove-all semantics: gone is fine */
            envd_rpc_reply(c, json_object());
            return;
        }
        envd_rpc_error(c, errno_code(errno), "cannot remove '%s': %s", path, strerror(errno));
        return;
    }
    if (nftw(path, remove_one, 32, FTW_DEPTH | FTW_PHYS) != 0) {
        envd_rpc_error(c, errno_code(errno), "cannot remove '%s': %s", path, strerror(errno));
        return;
    }
    envd_rpc_reply(c, json_object());
}

/* ---- WatchDir --------------------------------------------------------------- */

static void watch_free(struct envd_watch *w)
{
    for (size_t i = 0; i < w->ndirs; i++)
        free(w->dirs[i].rel);
    free(w->dirs);
    free(w);
}

static void watch_unlink(struct envd_watch *w)
{
    for (struct envd_watch **pp = &w->e->watches; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            w->e->nwatches--;
            return;
        }
    }
}

static const char *dir_rel(struct envd_watch *w, int wd)
{
    for (size_t i = 0; i < w->ndirs; i++) {
        if (w->dirs[i].wd == wd)
            return w->dirs[i].rel;
    }
    return NULL;
}

/* Adds rel (relative to the root) and, when recursive, its subdirectories. */
static int add_dir(struct envd_watch *w, const char *rel)
{
    char full[PATH_MAX];
    int wd;
    DIR *d;
    struct dirent *de;

    if (w->ndirs >= WATCH_DIRS_MAX)
        return AB_ELIMIT;
    if ((size_t)snprintf(full, sizeof(full), "%s%s%s", w->root, rel[0] != '\0' ? "/" : "", rel) >=
        sizeof(full))
        return AB_ELIMIT;
    wd = inotify_add_watch(envd_fd_get(w->w), full, WATCH_MASK | IN_ONLYDIR);
    if (wd < 0) {
        w->last_errno = errno;
        return AB_EIO;
    }
    if (dir_rel(w, wd) == NULL) {
        if (w->ndirs == w->cap) {
            size_t cap = w->cap != 0 ? w->cap * 2 : 8;
            struct watch_dir *nd = realloc(w->dirs, cap * sizeof(*nd));
            if (nd == NULL)
                return AB_ENOMEM;
            w->dirs = nd;
            w->cap = cap;
        }
        w->dirs[w->ndirs].wd = wd;
        w->dirs[w->ndirs].rel = strdup(rel);
        if (w->dirs[w->ndirs].rel == NULL)
            return AB_ENOMEM;
        w->ndirs++;
    }
    if (!w->recursive)
        return 0;
    d = opendir(full);
    if (d == NULL)
        return 0;
    while ((de = readdir(d)) != NULL) {
        char sub[PATH_MAX];
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] != '\0' ? "/" : "",
                             de->d_name) >= sizeof(sub))
            continue;
        if (add_dir(w, sub) == AB_ELIMIT)
            break;
    }
    closedir(d);
    return 0;
}

static const char *event_type(uint32_t mask)
{
    if (mask & (IN_CREATE | IN_MOVED_TO))
        return "EVENT_TYPE_CREATE";
    if (mask & IN_MODIFY)
        return "EVENT_TYPE_WRITE";
    if (mask & (IN_DELETE | IN_DELETE_SELF))
        return "EVENT_TYPE_REMOVE";
    if (mask & IN_MOVED_FROM)
        return "EVENT_TYPE_RENAME";
    if (mask & IN_ATTRIB)
        return "EVENT_TYPE_CHMOD";
    return NULL;
}

static void watch_event(struct envd_watch *w, const struct inotify_event *ev)
{
    const char *rel = dir_rel(w, ev->wd);
    const char *type = event_type(ev->mask);
    char name[PATH_MAX];
    json_t *fe;

    if (rel == NULL || type == NULL)
        return;
    if (ev->len == 0) {
        if (!(ev->mask & IN_DELETE_SELF) || rel[0] == '\0')
            return; /* the root's own events are not reported */
        ab_strlcpy(name, rel, sizeof(name));
    } else if ((size_t)snprintf(name, sizeof(name), "%s%s%s", rel, rel[0] != '\0' ? "/" : "",
                                ev->name) >= sizeof(name)) {
        return;
    }
    if (ev->mask & IN_DELETE_SELF)
        return; /* the parent reported the REMOVE already */
    fe = json_pack("{s:s,s:s}", "name", name, "type", type);
    if (fe == NULL)
        return;
    if (w->include_entry && (ev->mask & (IN_CREATE | IN_MOVED_TO | IN_MODIFY | IN_ATTRIB))) {
        char full[PATH_MAX * 2];
        json_t *entry;
        snprintf(full, sizeof(full), "%s/%s", w->root, name);
        if (envd_entry_info(full, &entry) == 0)
            json_object_set_new(fe, "entry", entry);
    }
    envd_stream_send(&w->s, json_pack("{s:o}", "filesystem", fe));
    if (w->recursive && (ev->mask & IN_ISDIR) && (ev->mask & (IN_CREATE | IN_MOVED_TO)))
        add_dir(w, name);
}

static int on_inotify(struct envd_fd *fdw, enum envd_fd_event ev, void *arg)
{
    struct envd_watch *w = arg;
    char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n;

    if (ev == ENVD_FD_CLOSED) {
        w->w = NULL;
        if (w->e->stopping && !w->gone)
            return 0; /* envd_fs_free_all frees it */
        if (!w->gone) {
            watch_unlink(w);
            envd_stream_close(&w->s, NULL, NULL);
        }
        watch_free(w);
        return 0;
    }
    if (ev != ENVD_FD_READ)
        return 0;
    n = read(envd_fd_get(fdw), buf, sizeof(buf));
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    for (ssize_t off = 0; off < n;) {
        const struct inotify_event *ie = (const struct inotify_event *)(buf + off);
        if (ie->mask & IN_IGNORED && ie->wd == w->dirs[0].wd) {
            return -1; /* the root went away: end the stream */
        }
        watch_event(w, ie);
        off += (ssize_t)(sizeof(*ie) + ie->len);
    }
    if (envd_stream_is_congested(&w->s))
        envd_fd_pause_read(w->w, true);
    return 0;
}

static void watch_gone(struct envd_stream *s)
{
    struct envd_watch *w = s->owner;

    w->gone = true;
    watch_unlink(w);
    if (w->w != NULL)
        envd_fd_close(w->w);
    else
        watch_free(w);
}

static void watch_drain(struct envd_stream *s)
{
    struct envd_watch *w = s->owner;

    if (w->w != NULL && !envd_stream_is_congested(s))
        envd_fd_pause_read(w->w, false);
}

static void rpc_watch_dir(struct envd_call *c)
{
    struct envd *e = c->e;
    struct envd_watch *w;
    struct stat st;
    int fd;
    int rc;

    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        envd_rpc_error(c, "resource_exhausted", "out of memory");
        return;
    }
    if (!resolve(c, "path", w->root)) {
        free(w);
        return;
    }
    if (stat(w->root, &st) != 0) {
        envd_rpc_error(c, errno_code(errno), "path '%s' does not exist: %s", w->root,
                       strerror(errno));
        free(w);
        return;
    }
    if (!S_ISDIR(st.st_mode)) {
        envd_rpc_error(c, "invalid_argument", "path '%s' is not a directory", w->root);
        free(w);
        return;
    }
    if (e->nwatches >= ENVD_WATCHES_MAX) {
        envd_rpc_error(c, "resource_exhausted", "%d directory watches are open already",
                       ENVD_WATCHES_MAX);
        free(w);
        return;
    }
    w->e = e;
    w->recursive = json_is_true(json_object_get(c->req, "recursive"));
    w->include_entry = json_is_true(json_object_get(c->req, "includeEntry"));
    fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0 || (w->w = envd_fd_watch(fd, on_inotify, w)) == NULL) {
        envd_rpc_error(c, "resource_exhausted", "cannot watch '%s': %s", w->root, strerror(errno));
        free(w);
        return;
    }
    rc = add_dir(w, "");
    if (rc != 0) {
        envd_rpc_error(c, rc == AB_EIO ? errno_code(w->last_errno) : "resource_exhausted",
                       "cannot watch '%s': %s", w->root,
                       rc == AB_EIO ? strerror(w->last_errno) : ab_strerror(rc));
        w->gone = true;
        envd_fd_close(w->w);
        return;
    }
    w->s.owner = w;
    w->s.ka_flat = true;
    w->s.on_gone = watch_gone;
    w->s.on_drain = watch_drain;
    w->next = e->watches;
    e->watches = w;
    e->nwatches++;
    if (envd_stream_open(&w->s, e, c->ex, c->keepalive_ms, c->timeout_ms) != 0) {
        http_abort(c->ex);
        envd_call_free(c);
        watch_gone(&w->s);
        return;
    }
    envd_stream_send(&w->s, json_pack("{s:{}}", "start"));
    envd_call_free(c);
}

void envd_fs_rpc(struct envd_call *c)
{
    static const struct {
        const char *name;
        bool stream;
        void (*fn)(struct envd_call *c);
    } methods[] = {
        {"Stat", false, rpc_stat},        {"ListDir", false, rpc_list_dir},
        {"MakeDir", false, rpc_make_dir}, {"Move", false, rpc_move},
        {"Remove", false, rpc_remove},    {"WatchDir", true, rpc_watch_dir},
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(methods); i++) {
        if (strcmp(methods[i].name, c->method) != 0)
            continue;
        if (methods[i].stream != c->stream) {
            envd_rpc_error(c, "invalid_argument",
                           "filesystem.Filesystem/%s is a %s call: use Content-Type %s", c->method,
                           methods[i].stream ? "server-streaming" : "unary",
                           methods[i].stream ? "application/connect+json" : "application/json");
            return;
        }
        methods[i].fn(c);
        return;
    }
    envd_rpc_error(c, "unimplemented", "filesystem.Filesystem/%s is not implemented", c->method);
}

void envd_fs_shutdown(struct envd *e)
{
    for (struct envd_watch *w = e->watches; w != NULL; w = w->next)
        envd_stream_close(&w->s, "unavailable", "envd is shutting down");
}

void envd_fs_free_all(struct envd *e)
{
    while (e->watches != NULL) {
        struct envd_watch *w = e->watches;
        watch_unlink(w);
        watch_free(w);
    }
}
