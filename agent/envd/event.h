/* The JSON messages envd sends, in proto3 JSON as connect-go emits them
 * (e2b-protocol.md §2.4–2.6): lowerCamelCase keys, int64 as strings, bytes
 * as padded standard base64, enums by name, default values omitted.
 * Pure functions apart from the lstat/account (account.h)/xattr reads of
 * envd_entry_info: any thread. Every function returns a new reference, or
 * NULL when out of memory. */
#ifndef ENVD_EVENT_H
#define ENVD_EVENT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#define ENVD_XATTR_PREFIX "user.e2b."

/* {"event":{"start":{"pid":N}}} */
json_t *envd_ev_start(uint32_t pid);
/* {"event":{"data":{"<stream>":"<base64>"}}}, stream is stdout, stderr or pty. */
json_t *envd_ev_data(const char *stream, const void *data, size_t len);
/* {"event":{"end":{...}}} from a waitpid() status, worded like Go's
 * ProcessState: "exit status 3", "signal: killed". */
json_t *envd_ev_end(int wstatus);
/* {"event":{"keepalive":{}}} */
json_t *envd_ev_keepalive(void);

/* Go's os.FileMode.String() for a stat mode, e.g. "-rw-r--r--",
 * "drwxr-xr-x", "Lrwxrwxrwx". out has at least 24 bytes. */
void envd_mode_string(mode_t mode, char *out, size_t outlen);
/* protobuf Timestamp JSON: RFC 3339 UTC with 0, 3, 6 or 9 fraction digits. */
void envd_timestamp(const struct timespec *ts, char *out, size_t outlen);

/* EntryInfo for a path whose lstat() is st. A symlink is typed
 * FILE_TYPE_SYMLINK with symlink_target (resolved) and the mode of its
 * target (target_st; NULL when dangling: the link's own). Other non-regular
 * files get no type (the SDK drops them). metadata is borrowed (NULL for
 * none). */
json_t *envd_entry_from_stat(const char *path, const struct stat *st, const char *symlink_target,
                             const struct stat *target_st, json_t *metadata);

/* lstat()s path and builds its EntryInfo, following a symlink to type it and
 * reading user.e2b.* xattrs as metadata. Returns 0, or envd_errno(errno of lstat)
 * (syserr.h). */
int envd_entry_info(const char *path, json_t **out);

#endif
