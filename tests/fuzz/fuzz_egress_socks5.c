/* The SOCKS5 client on arbitrary proxy answers: egress_socks5_parse_reply on
 * the input, and a whole handshake (with or without a login, by the first
 * byte) fed the rest in two pieces. Never crashes or reads past the input
 * (ASan); DONE consumes no more than it was given and only after a reply that
 * parse_reply also accepts; a failure has a reason and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "agent/egress/socks5.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t used;
    enum egress_socks5_fail f;
    const char *why = NULL;
    enum egress_socks5_res r = egress_socks5_parse_reply(data, size, &used, &f, &why);
    if (r == EGRESS_SOCKS5_DONE && (used > size || used < 7 || f != EGRESS_SOCKS5_OK))
        abort();
    if (r == EGRESS_SOCKS5_FAIL && (!why || f == EGRESS_SOCKS5_OK))
        abort();
    if (size < 1)
        return 0;

    struct egress_addr a = {.family = AF_INET, .a = {203, 0, 113, 7}};
    struct egress_socks5_deps d = {.addr = &a, .port = 443};
    if (data[0] & 1)
        d.username = "user", d.password = "pass";
    struct egress_socks5 *s = egress_socks5_new(&d);
    if (!s)
        abort();
    uint8_t out[600];
    const uint8_t *p = data + 1;
    size_t left = size - 1, half = left / 2;
    size_t pieces[2] = {half, left - half};
    r = EGRESS_SOCKS5_MORE;
    for (int i = 0; i < 2 && r == EGRESS_SOCKS5_MORE; i++) {
        size_t n = pieces[i];
        while (n > 0 && r == EGRESS_SOCKS5_MORE) {
            egress_socks5_take(s, out, sizeof(out));
            r = egress_socks5_feed(s, p, n, &used);
            if (used > n)
                abort();
            if (r == EGRESS_SOCKS5_MORE && used == 0)
                abort(); /* no progress on input it was given */
            p += used, n -= used;
        }
        if (r == EGRESS_SOCKS5_DONE && n != pieces[i] - used && n > pieces[i])
            abort();
    }
    if (r == EGRESS_SOCKS5_FAIL &&
        (!egress_socks5_error(s) || egress_socks5_failure(s) == EGRESS_SOCKS5_OK))
        abort();
    egress_socks5_free(s);
    return 0;
}
