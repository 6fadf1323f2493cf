/* Percent-decoder shared by the HTTP parser, the tunnel's request heads and query lookups. */
#include "agentbox/pct.h"

#include "agentbox/common.h"
#include "agentbox/hex.h"

static int fail(char *dst, size_t dstlen, int rc)
{
    /* A half-decoded value must not be mistaken for a whole one. */
    if (dstlen > 0)
        dst[0] = '\0';
    return rc;
}

int pct_decode(const char *src, size_t len, char *dst, size_t dstlen, unsigned flags,
               size_t *outlen)
{
    size_t o = 0;

    if (outlen)
        *outlen = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)src[i];

        if (c == '%') {
            int hi, lo;

            if (len - i < 3)
                return fail(dst, dstlen, AB_EINVAL);
            hi = hex_digit((unsigned char)src[i + 1]);
            lo = hex_digit((unsigned char)src[i + 2]);
            if (hi < 0 || lo < 0)
                return fail(dst, dstlen, AB_EINVAL);
            c = hi << 4 | lo;
            i += 2;
        } else if (c == '+' && (flags & PCT_PLUS_IS_SPACE)) {
            c = ' ';
        }
        if (c == '\0')
            return fail(dst, dstlen, AB_EINVAL);
        if (o + 1 >= dstlen)
            return fail(dst, dstlen, AB_ELIMIT);
        dst[o++] = (char)c;
    }
    if (dstlen == 0)
        return AB_ELIMIT;
    dst[o] = '\0';
    if (outlen)
        *outlen = o;
    return 0;
}
