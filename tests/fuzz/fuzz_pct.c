/* Fuzzes the percent-decoder, which sees every request path (http_parse.c,
 * tunnel_http.c) and every query key and value (http_query_get) from the
 * network. Checked against a plain reference decoder written from pct.h's
 * policy: same result code, same bytes; and always: a terminated output no
 * longer than the input, no NUL inside it, "" on failure, and a re-encoded
 * output that decodes back to itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/pct.h"

/* The policy, written out the long way. */
static int reference(const uint8_t *s, size_t n, uint8_t *out, size_t cap, bool plus,
                     size_t *outlen)
{
    static const char digits[] = "0123456789abcdefABCDEF";
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned c = s[i];
        if (c == '%') {
            if (n - i < 3) /* "%" or "%x" at the end */
                return AB_EINVAL;
            /* strchr finds the terminator too: test for NUL first */
            const char *h = s[i + 1] ? strchr(digits, s[i + 1]) : NULL;
            const char *l = s[i + 2] ? strchr(digits, s[i + 2]) : NULL;
            if (!h || !l)
                return AB_EINVAL;
            int hv = (int)(h - digits), lv = (int)(l - digits);
            hv = hv >= 16 ? hv - 6 : hv;
            lv = lv >= 16 ? lv - 6 : lv;
            c = (unsigned)(hv * 16 + lv);
            i += 2;
        } else if (c == '+' && plus) {
            c = ' ';
        }
        if (c == 0)
            return AB_EINVAL;
        if (o + 1 >= cap)
            return AB_ELIMIT;
        out[o++] = (uint8_t)c;
    }
    if (cap == 0)
        return AB_ELIMIT;
    *outlen = o;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    /* first byte: output room (0..255, or "roomy"); second: flags */
    size_t cap = data[0] == 255 ? size + 1 : data[0];
    unsigned flags = data[1] & 1 ? PCT_PLUS_IS_SPACE : 0;
    const uint8_t *in = data + 2;
    size_t n = size - 2;
    char *got = malloc(cap ? cap : 1);
    uint8_t *want = malloc(cap ? cap : 1);
    size_t glen = 12345, wlen = 0;

    int grc = pct_decode((const char *)in, n, got, cap, flags, &glen);
    int wrc = reference(in, n, want, cap, flags & PCT_PLUS_IS_SPACE, &wlen);
    if (grc != wrc)
        abort();
    if (grc != 0) {
        if (glen != 0 || (cap > 0 && got[0] != '\0'))
            abort();
    } else {
        if (glen != wlen || glen > n || glen >= cap || got[glen] != '\0')
            abort();
        if (memcmp(got, want, glen) != 0 || memchr(got, '\0', glen) != NULL)
            abort();
        /* encode every byte and decode again: the same bytes come back */
        char *enc = malloc(3 * glen + 1), *back = malloc(glen + 1);
        size_t blen = 0;
        for (size_t i = 0; i < glen; i++) {
            static const char hx[] = "0123456789ABCDEF";
            enc[3 * i] = '%';
            enc[3 * i + 1] = hx[(uint8_t)got[i] >> 4];
            enc[3 * i + 2] = hx[(uint8_t)got[i] & 15];
        }
        if (pct_decode(enc, 3 * glen, back, glen + 1, flags, &blen) != 0 || blen != glen ||
            memcmp(back, got, glen) != 0)
            abort();
        free(enc);
        free(back);
    }
    free(got);
    free(want);
    return 0;
}
