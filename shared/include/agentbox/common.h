/* Small things every module uses: error codes, array length, string copy. */
#ifndef AGENTBOX_COMMON_H
#define AGENTBOX_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

/* Functions that can fail return 0 or one of these (always negative). */
enum ab_err {
    AB_OK = 0,
    AB_EINVAL = -1, /* malformed input; the caller's err buffer says which field */
    AB_ENOMEM = -2,
    AB_ELIMIT = -3, /* a size or count limit was hit */
    AB_EIO = -4,    /* a system call or peer failed */
    AB_ENOENT = -5,
    AB_EEXIST = -6,
    AB_EBUSY = -7,   /* a bounded queue is full; try later */
    AB_ECLOSED = -8, /* the object or peer is gone */
    AB_ETIMEOUT = -9,
    AB_EDENIED = -10,
};

#define AB_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define AB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define AB_MAX(a, b) ((a) > (b) ? (a) : (b))

/* A cluster id is a DNS label of at most 24 characters; a buffer holding one
 * is char id[AB_CLUSTER_ID_BUF]. */
#define AB_CLUSTER_ID_MAX 24
#define AB_CLUSTER_ID_BUF (AB_CLUSTER_ID_MAX + 1)

/* printf into an error buffer (err NULL or errlen 0: nothing), cut to fit. */
void ab_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* strlcpy semantics: always terminates, returns strlen(src). */
size_t ab_strlcpy(char *dst, const char *src, size_t size);

/* Monotonic and wall clocks in milliseconds / microseconds. */
int64_t ab_now_ms(void);
int64_t ab_now_us(void);
int64_t ab_wall_ms(void);

/* Human name of an ab_err. */
const char *ab_strerror(int err);

#endif
