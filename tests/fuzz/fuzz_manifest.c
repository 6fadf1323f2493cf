/* libFuzzer target: the manifest parser and the rules over its result. */
#include <stddef.h>
#include <stdint.h>

#include "agent/runtime/local/manifest.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mf_set *s;
    struct mf_pool_view views[16];
    int n;

    if (size > MF_FILE_MAX)
        return 0;
    s = mf_set_new();
    if (!s)
        return 0;
    mf_parse_buffer(s, "fuzz.yaml", (const char *)data, size);
    mf_set_check(s);
    mf_set_pools(s, "local", views, 16, &n);
    mf_set_free(s);
    return 0;
}
