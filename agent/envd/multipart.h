/* Streaming multipart/form-data parser for POST /files (RFC 7578 / 2046).
 *
 * Fed the body in arbitrary chunks; calls back once per part head, for each
 * run of part content, and at each part end, without buffering content. The
 * only buffer is one part's header block (ENVD_MP_HEAD_MAX). Loop thread or
 * any single thread; not thread-safe per parser. */
#ifndef ENVD_MULTIPART_H
#define ENVD_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#define ENVD_MP_BOUNDARY_MAX 70      /* RFC 2046 */
#define ENVD_MP_HEAD_MAX (16 * 1024) /* one part's headers */
#define ENVD_MP_NAME_MAX 4096        /* name= and filename= values */

/* Each callback returns 0 to go on, or a negative ab_err that stops parsing
 * (envd_mp_feed then returns it). on_part: name and filename are "" when
 * absent; valid only during the call. */
struct envd_mp_callbacks {
    int (*on_part)(void *arg, const char *name, const char *filename);
    int (*on_data)(void *arg, const void *data, size_t len);
    int (*on_part_end)(void *arg);
};

struct envd_mp;

/* Reads the boundary from a Content-Type value. NULL with the reason in err
 * when it is not multipart/form-data or the boundary is missing, longer than
 * 70 bytes or holds CR/LF. */
struct envd_mp *envd_mp_new(const char *content_type, const struct envd_mp_callbacks *cb, void *arg,
                            char *err, size_t errlen);
void envd_mp_free(struct envd_mp *m);

/* Returns 0, AB_EINVAL / AB_ELIMIT for a malformed body (reason in
 * envd_mp_error), or what a callback returned. After an error, further
 * feeds return the same error. */
int envd_mp_feed(struct envd_mp *m, const void *data, size_t len);
/* The body ended: AB_EINVAL unless the closing delimiter was seen. */
int envd_mp_finish(struct envd_mp *m);
const char *envd_mp_error(const struct envd_mp *m);
bool envd_mp_is_done(const struct envd_mp *m);

#endif
