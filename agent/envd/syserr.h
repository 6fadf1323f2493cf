/* envd's system errors as return codes. A bare -errno collides with the
 * project's codes (-EPERM is AB_EINVAL, -ENOENT is AB_ENOMEM, -ESRCH is
 * AB_ELIMIT), so a function that may return either gives its errno a range
 * of its own, below every ab_err: -(ENVD_ERRNO_BASE + errno). Any thread. */
#ifndef ENVD_SYSERR_H
#define ENVD_SYSERR_H

#include <stdbool.h>

#define ENVD_ERRNO_BASE 10000
#define ENVD_ERRNO_MAX 4095 /* the kernel's MAX_ERRNO */

/* errno e (1..ENVD_ERRNO_MAX) as a return code; anything else (0, a negative
 * value, a stale errno out of range) reads as EIO, so a failure never comes
 * back as 0 or as an ab_err. */
int envd_errno(int e);

/* True when rc came from envd_errno. */
bool envd_is_errno(int rc);

/* The errno inside rc (envd_errno's inverse); EIO for a code outside the
 * range (0 or an ab_err), so strerror() always names a system error. */
int envd_errno_of(int rc);

#endif
