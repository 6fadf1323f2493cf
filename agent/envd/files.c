/* GET and POST /files: downloads streamed with backpressure, uploads
 * (multipart/form-data or application/octet-stream) streamed to disk.
 * Writes to regular files happen on the loop thread: they land in the page
 * cache and do not block on the network. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/envd/auth.h"
#include "agent/envd/envd.h"
#include "agent/envd/event.h"
#include "agent/envd/gunzip.h"
#include "agent/envd/multipart.h"
#include "agent/envd/syserr.h"

#define DOWNLOAD_CHUNK (64 * 1024)
#define UPLOAD_FILES_MAX 1000
#define METADATA_MAX 32

/* ---- shared checks ---------------------------------------------------------- */

struct files_ctx {
    char path_q[PATH_MAX]; /* the path query as sent ("" when absent) */
    bool has_path;
    char username[40];
    struct envd_user user;
};

/* Access, arming and user for a /files request. Answers and returns false
 * when the request may not go on. */
static bool files_begin(struct envd *e, struct http_exchange *ex, const char *op,
                        struct files_ctx *fc)
{
    const struct http_request *r = http_req(ex);
    char sig[128] = "";
    char exp[32] = "";
    char err[256];
    int rc;

    memset(fc, 0, sizeof(*fc));
    rc = http_query_get(r, "path", fc->path_q, sizeof(fc->path_q));
    if (rc == AB_ELIMIT) {
        http_respond_error(ex, 400, "query 'path' is longer than %d bytes", PATH_MAX - 1);
        return false;
    }
    fc->has_path = rc == 0 && fc->path_q[0] != '\0';
    if (http_query_get(r, "username", fc->username, sizeof(fc->username)) == AB_ELIMIT ||
        http_query_get(r, "signature", sig, sizeof(sig)) == AB_ELIMIT ||
        http_query_get(r, "signature_expiration", exp, sizeof(exp)) == AB_ELIMIT) {
        http_respond_error(ex, 400,
                           "query 'username', 'signature' or 'signature_expiration' "
                           "is too long");
        return false;
    }
    rc = envd_sig_check(e->token, http_header_get(r, "X-Access-Token"), sig[0] ? sig : NULL,
                        exp[0] ? exp : NULL, fc->path_q, op, fc->username, (int64_t)time(NULL), err,
                        sizeof(err));
    if (rc != 0) {
        http_respond_error(ex, rc == AB_EINVAL ? 400 : 401, "%s", err);
        return false;
    }
    if (!e->armed) {
        http_respond_error(ex, 400,
                           "envd is not initialised yet: the control plane must call "
                           "POST /init before /files");
        return false;
    }
    if (envd_request_user(e, fc->username, &fc->user, err, sizeof(err)) != 0) {
        http_respond_error(ex, 401, "%s", err);
        return false;
    }
    return true;
}

static int errno_status(int err)
{
    switch (err) {
    case ENOENT:
        return 404;
    case EISDIR:
    case ENOTDIR:
    case ENAMETOOLONG:
        return 400;
    case ENOSPC:
    case EDQUOT:
        return 507;
    case EACCES:
    case EPERM:
        return 403;
    default:
        return 500;
    }
}

/* ---- GET ---------------------------------------------------------------------- */

struct download {
    struct http_exchange *ex;
    int fd;
    int64_t left;
};

static void download_done(struct download *d)
{
    if (d->fd >= 0)
        close(d->fd);
    free(d);
}

static void download_pump(struct download *d)
{
    uint8_t buf[DOWNLOAD_CHUNK];

    while (d->left > 0 && http_pending(d->ex) < HTTP_STREAM_HIGH_WATER) {
        ssize_t n = read(d->fd, buf, (size_t)AB_MIN((int64_t)sizeof(buf), d->left));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* shrank or failed under us: the length is promised */
            http_abort(d->ex);
            download_done(d);
            return;
        }
        http_write(d->ex, buf, (size_t)n);
        d->left -= n;
    }
    if (d->left == 0) {
        http_end(d->ex);
        download_done(d);
    }
}

static void dl_data(struct http_exchange *ex, const void *data, size_t len, void *arg)
{
}

static void dl_end(struct http_exchange *ex, void *arg)
{
}

static void dl_abort(struct http_exchange *ex, void *arg)
{
    http_abort(ex);
    download_done(arg);
}

static void dl_drain(struct http_exchange *ex, void *arg)
{
    download_pump(arg);
}

static const struct http_body_handler download_bh = {dl_data, dl_end, dl_abort, dl_drain};

void envd_files_get(struct http_exchange *ex, void *arg)
{
    struct envd *e = arg;
    struct files_ctx fc;
    char path[PATH_MAX];
    char err[256];
    char disp[PATH_MAX + 64];
    struct download *d;
    struct stat st;
    const char *base;
    int fd;

    if (!files_begin(e, ex, "read", &fc))
        return;
    if (!fc.has_path) {
        http_respond_error(ex, 400, "query 'path' is required");
        return;
    }
    if (envd_path_resolve(fc.path_q, fc.user.home, NULL, path, sizeof(path), err, sizeof(err)) !=
        0) {
        http_respond_error(ex, 400, "%s", err);
        return;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int en = errno;
        if (en == ENOENT)
            http_respond_error(ex, 404, "path '%s' does not exist", path);
        else
            http_respond_error(ex, errno_status(en), "cannot open '%s': %s", path, strerror(en));
        return;
    }
    if (fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
        close(fd);
        http_respond_error(ex, 400, "path '%s' is %s", path,
                           S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        return;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        close(fd);
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    d->ex = ex;
    d->fd = fd;
    d->left = st.st_size;
    base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    snprintf(disp, sizeof(disp), "inline; filename=\"%s\"", base);
    for (char *p = disp + 17; *p != '\0' && p[1] != '\0'; p++) {
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '_';
    }
    struct http_header h[2] = {{"Content-Type", "application/octet-stream"},
                               {"Content-Disposition", disp}};
    http_set_body_handler(ex, &download_bh, d);
    if (http_begin(ex, 200, h, 2, st.st_size) != 0) {
        http_abort(ex);
        download_done(d);
        return;
    }
    download_pump(d);
}

/* ---- POST --------------------------------------------------------------------- */

struct upload {
    struct envd *e;
    struct http_exchange *ex;
    struct files_ctx fc;
    struct envd_mp *mp;     /* NULL for octet-stream */
    struct envd_gunzip *gz; /* Content-Encoding: gzip (octet-stream only) */
    int fd;                 /* the file being written; -1 none */
    char cur[PATH_MAX];
    json_t *written;  /* response array */
    json_t *metadata; /* X-Metadata-* as {key: value}; NULL none */
    bool failed;
};

static void upload_free(struct upload *u)
{
    if (u->fd >= 0)
        close(u->fd);
    if (u->mp != NULL)
        envd_mp_free(u->mp);
    envd_gunzip_free(u->gz);
    json_decref(u->written);
    json_decref(u->metadata);
    free(u);
}

static void upload_fail(struct upload *u, int status, const char *fmt, const char *a, const char *b)
{
    if (u->failed)
        return;
    u->failed = true;
    http_respond_error(u->ex, status, fmt, a, b);
    /* The rest of the body is discarded by the exchange. */
}

/* Opens the next target; returns 0 or a negative ab_err after answering. */
static int open_target(struct upload *u, const char *given)
{
    char err[256];
    bool sw = envd_user_needs_switch(&u->fc.user);
    size_t i;
    json_t *x;
    int rc;

    if (given == NULL || given[0] == '\0') {
        upload_fail(u, 400, "%s%s",
                    "no target: give the 'path' query or a filename in the "
                    "multipart part",
                    "");
        return AB_EINVAL;
    }
    if (json_array_size(u->written) >= UPLOAD_FILES_MAX) {
        upload_fail(u, 400, "an upload may hold at most %s files%s", "1000", "");
        return AB_ELIMIT;
    }
    if (envd_path_resolve(given, u->fc.user.home, NULL, u->cur, sizeof(u->cur), err, sizeof(err)) !=
        0) {
        upload_fail(u, 400, "%s%s", err, "");
        return AB_EINVAL;
    }
    json_array_foreach(u->written, i, x)
    {
        if (strcmp(json_string_value(json_object_get(x, "path")), u->cur) == 0) {
            upload_fail(u, 400, "path '%s' appears twice in one upload%s", u->cur, "");
            return AB_EEXIST;
        }
    }
    rc = envd_mkdir_parents(u->cur, sw, u->fc.user.uid, u->fc.user.gid);
    if (rc != 0) {
        upload_fail(u, errno_status(envd_errno_of(rc)),
                    "cannot create the parent directories of '%s': %s", u->cur,
                    strerror(envd_errno_of(rc)));
        return AB_EIO;
    }
    u->fd = open(u->cur, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (u->fd < 0) {
        int en = errno;
        upload_fail(u, errno_status(en),
                    en == EISDIR ? "path '%s' is a directory%s" : "cannot write '%s': %s", u->cur,
                    en == EISDIR ? "" : strerror(en));
        return AB_EIO;
    }
    if (sw && fchown(u->fd, u->fc.user.uid, u->fc.user.gid) != 0) {
        upload_fail(u, 500, "cannot give '%s' to its user: %s", u->cur, strerror(errno));
        return AB_EIO;
    }
    return 0;
}

static int write_all(struct upload *u, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len > 0) {
        ssize_t n = write(u->fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int en = errno;
            upload_fail(u, errno_status(en), "cannot write '%s': %s", u->cur, strerror(en));
            return AB_EIO;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int close_target(struct upload *u)
{
    const char *base = strrchr(u->cur, '/') != NULL ? strrchr(u->cur, '/') + 1 : u->cur;
    json_t *item;
    const char *k;
    json_t *v;

    if (u->metadata != NULL) {
        json_object_foreach(u->metadata, k, v)
        {
            char attr[128];
            snprintf(attr, sizeof(attr), ENVD_XATTR_PREFIX "%s", k);
            if (fsetxattr(u->fd, attr, json_string_value(v), json_string_length(v), 0) != 0) {
                int en = errno;
                upload_fail(u, 500,
                            "cannot store metadata on '%s': %s (the filesystem needs "
                            "user xattrs)",
                            u->cur, strerror(en));
                return AB_EIO;
            }
        }
    }
    if (close(u->fd) != 0) {
        u->fd = -1;
        upload_fail(u, errno_status(errno), "cannot write '%s': %s", u->cur, strerror(errno));
        return AB_EIO;
    }
    u->fd = -1;
    item = json_pack("{s:s,s:s,s:s}", "path", u->cur, "name", base, "type", "file");
    if (item != NULL && u->metadata != NULL)
        json_object_set(item, "metadata", u->metadata);
    json_array_append_new(u->written, item);
    return 0;
}

static int mp_on_part(void *arg, const char *name, const char *filename)
{
    struct upload *u = arg;

    if (strcmp(name, "file") != 0)
        return 0; /* other fields are ignored */
    return open_target(u, u->fc.has_path ? u->fc.path_q : filename);
}

static int mp_on_data(void *arg, const void *data, size_t len)
{
    struct upload *u = arg;

    return u->fd >= 0 ? write_all(u, data, len) : 0;
}

static int mp_on_part_end(void *arg)
{
    struct upload *u = arg;

    return u->fd >= 0 ? close_target(u) : 0;
}

static const struct envd_mp_callbacks mp_cb = {mp_on_part, mp_on_data, mp_on_part_end};

static void up_data(struct http_exchange *ex, const void *data, size_t len, void *arg)
{
    struct upload *u = arg;
    int rc;

    if (u->failed)
        return;
    if (u->gz != NULL) {
        if (envd_gunzip_feed(u->gz, data, len) != 0 && !u->failed)
            upload_fail(u, 400, "the gzip body of '%s' is corrupt%s", u->cur, "");
        return;
    }
    if (u->mp == NULL) {
        write_all(u, data, len);
        return;
    }
    rc = envd_mp_feed(u->mp, data, len);
    if (rc != 0 && !u->failed)
        upload_fail(u, rc == AB_ELIMIT ? 413 : 400, "%s%s", envd_mp_error(u->mp), "");
}

static void up_end(struct http_exchange *ex, void *arg)
{
    struct upload *u = arg;

    if (!u->failed && u->mp != NULL && envd_mp_finish(u->mp) != 0)
        upload_fail(u, 400, "%s%s", envd_mp_error(u->mp), "");
    if (!u->failed && u->gz != NULL && envd_gunzip_finish(u->gz) != 0)
        upload_fail(u, 400, "the gzip body of '%s' ends early%s", u->cur, "");
    if (!u->failed && u->mp == NULL && u->fd >= 0)
        close_target(u);
    if (!u->failed && json_array_size(u->written) == 0)
        upload_fail(u, 400, "the upload holds no part named 'file'%s%s", "", "");
    if (!u->failed)
        http_respond_json(ex, 200, json_incref(u->written));
    upload_free(u);
}

static void up_abort(struct http_exchange *ex, void *arg)
{
    struct upload *u = arg;

    if (!u->failed)
        http_abort(ex);
    upload_free(u);
}

static int gz_sink(void *arg, const void *data, size_t len)
{
    return write_all(arg, data, len);
}

static const struct http_body_handler upload_bh = {up_data, up_end, up_abort, NULL};

/* X-Metadata-<Key>: value headers as {key (lower case): value}. */
static int read_metadata(const struct http_request *r, json_t **out, char *err, size_t errlen)
{
    *out = NULL;
    for (int i = 0; i < r->nheaders; i++) {
        char key[96];
        const char *name = r->headers[i].name;
        if (strncasecmp(name, "X-Metadata-", 11) != 0)
            continue;
        if (strlen(name + 11) == 0 || strlen(name + 11) >= sizeof(key) - 16) {
            snprintf(err, errlen, "metadata header '%.40s' has an empty or too long key", name);
            return AB_EINVAL;
        }
        size_t klen = strlen(name + 11);
        for (size_t k = 0; k < klen; k++)
            key[k] = (char)tolower((unsigned char)name[11 + k]);
        key[klen] = '\0';
        if (*out == NULL)
            *out = json_object();
        if (*out == NULL || json_object_size(*out) >= METADATA_MAX) {
            snprintf(err, errlen, "at most %d X-Metadata-* headers are accepted", METADATA_MAX);
            return AB_ELIMIT;
        }
        json_object_set_new(*out, key, json_string(r->headers[i].value));
    }
    return 0;
}

void envd_files_post(struct http_exchange *ex, void *arg)
{
    struct envd *e = arg;
    const struct http_request *r = http_req(ex);
    const char *ct = http_header_get(r, "Content-Type");
    const char *ce = http_header_get(r, "Content-Encoding");
    char err[256];
    struct upload *u;

    u = calloc(1, sizeof(*u));
    if (u == NULL) {
        http_respond_error(ex, 503, "out of memory");
        return;
    }
    u->e = e;
    u->ex = ex;
    u->fd = -1;
    u->written = json_array();
    if (!files_begin(e, ex, "write", &u->fc)) {
        upload_free(u);
        return;
    }
    if (read_metadata(r, &u->metadata, err, sizeof(err)) != 0) {
        http_respond_error(ex, 400, "%s", err);
        upload_free(u);
        return;
    }
    bool octet = ct != NULL && strncasecmp(ct, "application/octet-stream", 24) == 0;
    bool gzip = ce != NULL && strcasecmp(ce, "gzip") == 0;
    if (ce != NULL && strcasecmp(ce, "identity") != 0 && !(gzip && octet)) {
        http_respond_error(ex, 415,
                           "Content-Encoding %s is accepted only as gzip on "
                           "application/octet-stream uploads",
                           ce);
        upload_free(u);
        return;
    }
    if (gzip) {
        u->gz = envd_gunzip_new(gz_sink, u, err, sizeof(err));
        if (u->gz == NULL) {
            http_respond_error(ex, 415, "%s", err);
            upload_free(u);
            return;
        }
    }
    if (octet) {
        if (!u->fc.has_path) {
            http_respond_error(ex, 400,
                               "query 'path' is required for application/octet-stream "
                               "uploads");
            upload_free(u);
            return;
        }
        if (open_target(u, u->fc.path_q) != 0) {
            upload_free(u);
            return;
        }
    } else {
        u->mp = envd_mp_new(ct, &mp_cb, u, err, sizeof(err));
        if (u->mp == NULL) {
            http_respond_error(ex, 400, "%s", err);
            upload_free(u);
            return;
        }
    }
    http_set_body_handler(ex, &upload_bh, u);
}
