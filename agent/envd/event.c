/* Process events and filesystem entries as proto3 JSON. */
#include "agent/envd/event.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agent/envd/account.h"
#include "agent/envd/syserr.h"

json_t *envd_ev_start(uint32_t pid)
{
    return json_pack("{s:{s:{s:I}}}", "event", "start", "pid", (json_int_t)pid);
}

json_t *envd_ev_data(const char *stream, const void *data, size_t len)
{
    size_t blen = 4 * ((len + 2) / 3) + 1;
    char *b64 = malloc(blen);
    json_t *v;

    if (b64 == NULL)
        return NULL;
    crypto_base64_encode(data, len, b64);
    v = json_pack("{s:{s:{s:s}}}", "event", "data", stream, b64);
    free(b64);
    return v;
}

/* Go's syscall.Signal.String() on linux, which envd's status text uses. */
static const char *go_signal_name(int sig, char *buf, size_t len)
{
    static const char *const names[] = {
        NULL,
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
        "stack fault",
        "child exited",
        "continued",
        "stopped (signal)",
        "stopped",
        "stopped (tty input)",
        "stopped (tty output)",
        "urgent I/O condition",
        "CPU time limit exceeded",
        "file size limit exceeded",
        "virtual timer expired",
        "profiling timer expired",
        "window changed",
        "I/O possible",
        "power failure",
        "bad system call",
    };

    if (sig > 0 && (size_t)sig < AB_ARRAY_LEN(names))
        return names[sig];
    snprintf(buf, len, "signal %d", sig);
    return buf;
}

json_t *envd_ev_end(int wstatus)
{
    char status[96];
    char sigbuf[32];
    json_t *end;
    json_t *v;

    end = json_object();
    if (end == NULL)
        return NULL;
    if (WIFEXITED(wstatus)) {
        int code = WEXITSTATUS(wstatus);
        snprintf(status, sizeof(status), "exit status %d", code);
        if (code != 0)
            json_object_set_new(end, "exitCode", json_integer(code));
        json_object_set_new(end, "exited", json_true());
        json_object_set_new(end, "status", json_string(status));
        if (code != 0)
            json_object_set_new(end, "error", json_string(status));
    } else {
        int sig = WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0;
        snprintf(status, sizeof(status), "signal: %s%s",
                 go_signal_name(sig, sigbuf, sizeof(sigbuf)),
                 WIFSIGNALED(wstatus) && WCOREDUMP(wstatus) ? " (core dumped)" : "");
        json_object_set_new(end, "exitCode", json_integer(-1));
        json_object_set_new(end, "status", json_string(status));
        json_object_set_new(end, "error", json_string(status));
    }
    v = json_pack("{s:{s:o}}", "event", "end", end);
    return v;
}

json_t *envd_ev_keepalive(void)
{
    return json_pack("{s:{s:{}}}", "event", "keepalive");
}

void envd_mode_string(mode_t mode, char *out, size_t outlen)
{
    /* Go's letters in its bit order: d a l T L D p S u g c t ? */
    char buf[24];
    size_t w = 0;
    static const char rwx[] = "rwxrwxrwx";

    if (S_ISDIR(mode))
        buf[w++] = 'd';
    if (S_ISLNK(mode))
        buf[w++] = 'L';
    if (S_ISCHR(mode) || S_ISBLK(mode))
        buf[w++] = 'D';
    if (S_ISFIFO(mode))
        buf[w++] = 'p';
    if (S_ISSOCK(mode))
        buf[w++] = 'S';
    if (mode & S_ISUID)
        buf[w++] = 'u';
    if (mode & S_ISGID)
        buf[w++] = 'g';
    if (S_ISCHR(mode))
        buf[w++] = 'c';
    if (mode & S_ISVTX)
        buf[w++] = 't';
    if (w == 0)
        buf[w++] = '-';
    for (int i = 0; i < 9; i++)
        buf[w++] = (mode & (1u << (8 - i))) ? rwx[i] : '-';
    buf[w] = '\0';
    ab_strlcpy(out, buf, outlen);
}

void envd_timestamp(const struct timespec *ts, char *out, size_t outlen)
{
    struct tm tm;
    char base[32];
    long ns = ts->tv_nsec;
    time_t sec = ts->tv_sec;

    gmtime_r(&sec, &tm);
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    if (ns == 0)
        snprintf(out, outlen, "%sZ", base);
    else if (ns % 1000000 == 0)
        snprintf(out, outlen, "%s.%03ldZ", base, ns / 1000000);
    else if (ns % 1000 == 0)
        snprintf(out, outlen, "%s.%06ldZ", base, ns / 1000);
    else
        snprintf(out, outlen, "%s.%09ldZ", base, ns);
}

static const char *file_type(const struct stat *st)
{
    if (st == NULL)
        return NULL;
    if (S_ISREG(st->st_mode))
        return "FILE_TYPE_FILE";
    if (S_ISDIR(st->st_mode))
        return "FILE_TYPE_DIRECTORY";
    return NULL;
}

static void owner_names(const struct stat *st, char *owner, size_t olen, char *group, size_t glen)
{
    struct envd_account a;

    if (envd_account_by_uid(ENVD_PASSWD_FILE, st->st_uid, &a) == 0 && strlen(a.name) < olen)
        ab_strlcpy(owner, a.name, olen);
    else
        snprintf(owner, olen, "%u", (unsigned)st->st_uid);
    if (envd_group_name(ENVD_GROUP_FILE, st->st_gid, group, glen) != 0)
        snprintf(group, glen, "%u", (unsigned)st->st_gid);
}

json_t *envd_entry_from_stat(const char *path, const struct stat *st, const char *symlink_target,
                             const struct stat *target_st, json_t *metadata)
{
    char perms[24];
    char mtime[48];
    char size[24];
    char owner[64];
    char group[64];
    const char *name = strrchr(path, '/');
    const char *type;
    mode_t perm;
    json_t *v;

    name = name != NULL && name[1] != '\0' ? name + 1 : path;
    if (S_ISLNK(st->st_mode)) {
        /* The SDK maps FILE_TYPE_SYMLINK (3) to "symlink"; mode is the target's. */
        type = "FILE_TYPE_SYMLINK";
        perm = target_st != NULL ? target_st->st_mode & 0777 : st->st_mode & 0777;
    } else {
        type = file_type(st);
        perm = st->st_mode & 0777;
    }
    envd_mode_string(st->st_mode, perms, sizeof(perms));
    envd_timestamp(&st->st_mtim, mtime, sizeof(mtime));
    snprintf(size, sizeof(size), "%lld", (long long)st->st_size);
    owner_names(st, owner, sizeof(owner), group, sizeof(group));
    v = json_object();
    if (v == NULL)
        return NULL;
    json_object_set_new(v, "name", json_string(name));
    if (type != NULL)
        json_object_set_new(v, "type", json_string(type));
    json_object_set_new(v, "path", json_string(path));
    if (st->st_size != 0)
        json_object_set_new(v, "size", json_string(size));
    if (perm != 0)
        json_object_set_new(v, "mode", json_integer(perm));
    json_object_set_new(v, "permissions", json_string(perms));
    json_object_set_new(v, "owner", json_string(owner));
    json_object_set_new(v, "group", json_string(group));
    json_object_set_new(v, "modifiedTime", json_string(mtime));
    if (symlink_target != NULL)
        json_object_set_new(v, "symlinkTarget", json_string(symlink_target));
    if (metadata != NULL && json_object_size(metadata) > 0)
        json_object_set(v, "metadata", metadata);
    return v;
}

/* user.e2b.<key> xattrs as {key: value}; NULL when there are none or the
 * filesystem has no xattrs. Bounded: names list 64 KiB, values 64 KiB each. */
static json_t *read_metadata(const char *path)
{
    static const size_t prefix_len = sizeof(ENVD_XATTR_PREFIX) - 1;
    char names[65536];
    char value[65536];
    json_t *meta = NULL;
    ssize_t n = llistxattr(path, names, sizeof(names));

    for (ssize_t off = 0; n > 0 && off < n; off += (ssize_t)strlen(names + off) + 1) {
        const char *attr = names + off;
        ssize_t vlen;

        if (strncmp(attr, ENVD_XATTR_PREFIX, prefix_len) != 0)
            continue;
        vlen = lgetxattr(path, attr, value, sizeof(value) - 1);
        if (vlen < 0)
            continue;
        value[vlen] = '\0';
        if (meta == NULL)
            meta = json_object();
        if (meta != NULL)
            json_object_set_new(meta, attr + prefix_len, json_string(value));
    }
    return meta;
}

int envd_entry_info(const char *path, json_t **out)
{
    struct stat st;
    struct stat tst;
    char *target = NULL;
    bool have_target = false;
    json_t *meta;

    *out = NULL;
    if (lstat(path, &st) != 0)
        return envd_errno(errno);
    if (S_ISLNK(st.st_mode)) {
        target = realpath(path, NULL);
        if (target != NULL && stat(target, &tst) == 0)
            have_target = true;
        if (target == NULL) {
            char raw[PATH_MAX];
            ssize_t n = readlink(path, raw, sizeof(raw) - 1);
            if (n >= 0) {
                raw[n] = '\0';
                target = strdup(raw);
            }
        }
    }
    meta = read_metadata(path);
    *out = envd_entry_from_stat(path, &st, target, have_target ? &tst : NULL, meta);
    json_decref(meta);
    free(target);
    return *out != NULL ? 0 : -ENOMEM;
}
