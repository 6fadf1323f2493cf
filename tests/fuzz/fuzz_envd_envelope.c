/* Connect envelope decoding: any input is refused or parsed, never crashes,
 * and whatever decodes re-encodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/envd/envelope.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *p;
    size_t plen, used, off = 0;
    uint8_t flags;
    char err[160];
    json_t *v = NULL;

    while (off < size && envd_env_decode(data + off, size - off, 1 << 16, &flags, &p, &plen, &used,
                                         err, sizeof(err)) == 0) {
        uint8_t *again;
        size_t n;
        if (envd_env_encode(flags, p, plen, &again, &n) == 0) {
            if (n != used || memcmp(again, data + off, n) != 0)
                abort();
            free(again);
        }
        off += used;
    }
    if (envd_env_parse_request(data, size, &v, err, sizeof(err)) == 0) {
        if (!json_is_object(v))
            abort();
        json_decref(v);
    }
    return 0;
}
