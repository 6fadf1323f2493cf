/* egress_sniff_tls and egress_sniff_http on arbitrary connection prefixes.
 * Never crashes or reads past the input (ASan), and what they return holds:
 * a name exactly when FOUND, lower case and already normal; and a prefix that
 * gave a name gives the same name once more bytes arrive (the answer of a
 * complete hello or head never changes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/egress/sniff.h"

typedef enum egress_sniff (*sniff_fn)(const uint8_t *, size_t, char *);

static void check(sniff_fn fn, const uint8_t *data, size_t size)
{
    char name[EGRESS_HOST_MAX + 1], again[EGRESS_HOST_MAX + 1], part[EGRESS_HOST_MAX + 1];
    enum egress_sniff r = fn(data, size, name);

    if (r != EGRESS_SNIFF_MORE && r != EGRESS_SNIFF_FOUND && r != EGRESS_SNIFF_NONE)
        abort();
    if (!memchr(name, '\0', sizeof(name)))
        abort();
    if (r != EGRESS_SNIFF_FOUND) {
        if (name[0])
            abort();
    } else {
        if (!name[0] || egress_host_normalise(name, strlen(name), again) != 0 ||
            strcmp(name, again) != 0)
            abort();
    }
    if (size >= EGRESS_SNIFF_MAX && r == EGRESS_SNIFF_MORE)
        abort(); /* at the limit the gateway must get an answer */
    enum egress_sniff rp = fn(data, size / 2, part);
    if (rp == EGRESS_SNIFF_FOUND && (r != EGRESS_SNIFF_FOUND || strcmp(part, name) != 0))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check(egress_sniff_tls, data, size);
    check(egress_sniff_http, data, size);
    return 0;
}
