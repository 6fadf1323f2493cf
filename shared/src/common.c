/* Clocks, bounded string copy and error names shared by every module. */
#include "agentbox/common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

size_t ab_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);

    if (size > 0) {
        size_t c = n < size - 1 ? n : size - 1;
        memcpy(dst, src, c);
        dst[c] = '\0';
    }
    return n;
}

static int64_t clock_us(clockid_t id)
{
    struct timespec ts;

    /* Only fails for an invalid clock id, which these constants are not. */
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t ab_now_ms(void)
{
    return clock_us(CLOCK_MONOTONIC) / 1000;
}

int64_t ab_now_us(void)
{
    return clock_us(CLOCK_MONOTONIC);
}

int64_t ab_wall_ms(void)
{
    return clock_us(CLOCK_REALTIME) / 1000;
}

const char *ab_strerror(int err)
{
    switch (err) {
    case AB_OK:
        return "ok";
    case AB_EINVAL:
        return "invalid argument";
    case AB_ENOMEM:
        return "out of memory";
    case AB_ELIMIT:
        return "limit exceeded";
    case AB_EIO:
        return "i/o error";
    case AB_ENOENT:
        return "not found";
    case AB_EEXIST:
        return "already exists";
    case AB_EBUSY:
        return "busy, try later";
    case AB_ECLOSED:
        return "closed";
    case AB_ETIMEOUT:
        return "timed out";
    case AB_EDENIED:
        return "denied";
    default:
        return "unknown error";
    }
}

void ab_errf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (!err || errlen == 0)
        return;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
