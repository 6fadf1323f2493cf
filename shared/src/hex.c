/* Hex encode/decode; crypto's hex helpers and the percent-decoder call these. */
#include "agentbox/hex.h"

#include "agentbox/common.h"

static const char hex_lower[] = "0123456789abcdef";

int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void hex_encode(const void *data, size_t len, char *out)
{
    const uint8_t *p = data;

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = hex_lower[p[i] >> 4];
        out[2 * i + 1] = hex_lower[p[i] & 0x0f];
    }
    out[2 * len] = '\0';
}

int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t outlen, size_t *written)
{
    if (written)
        *written = 0;
    if (hexlen % 2 != 0)
        return AB_EINVAL;
    for (size_t i = 0; i < hexlen; i++)
        if (hex_digit((unsigned char)hex[i]) < 0)
            return AB_EINVAL;
    if (hexlen / 2 > outlen)
        return AB_ELIMIT;
    for (size_t i = 0; i < hexlen / 2; i++)
        out[i] = (uint8_t)(hex_digit((unsigned char)hex[2 * i]) << 4 |
                           hex_digit((unsigned char)hex[2 * i + 1]));
    if (written)
        *written = hexlen / 2;
    return 0;
}
