/* envd's errno range. See syserr.h. */
#include "agent/envd/syserr.h"

#include <errno.h>

int envd_errno(int e)
{
    if (e < 1 || e > ENVD_ERRNO_MAX)
        e = EIO;
    return -(ENVD_ERRNO_BASE + e);
}

bool envd_is_errno(int rc)
{
    return rc <= -(ENVD_ERRNO_BASE + 1) && rc >= -(ENVD_ERRNO_BASE + ENVD_ERRNO_MAX);
}

int envd_errno_of(int rc)
{
    return envd_is_errno(rc) ? -rc - ENVD_ERRNO_BASE : EIO;
}
