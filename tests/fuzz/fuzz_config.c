/* Fuzz target: arbitrary bytes as a YAML config document, applied to a small
 * option table of every type; also the value parsers on the same bytes. Any
 * crash, leak or sanitizer report is a finding. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/config.h"

struct fuzz_cfg {
    char *name;
    int64_t count;
    bool flag;
    int64_t timeout_ms;
    int64_t limit;
    char *url;
};

static const struct cfg_option fuzz_opts[] = {
    {"name", CFG_STRING, NULL, true, offsetof(struct fuzz_cfg, name), "a string", NULL},
    {"count", CFG_INT, "1", false, offsetof(struct fuzz_cfg, count), "an int", NULL},
    {"flag", CFG_BOOL, "false", false, offsetof(struct fuzz_cfg, flag), "a bool", NULL},
    {"timeout", CFG_DURATION, "30s", false, offsetof(struct fuzz_cfg, timeout_ms), "a duration",
     NULL},
    {"limit", CFG_SIZE, "1MiB", false, offsetof(struct fuzz_cfg, limit), "a size", NULL},
    {"url", CFG_STRING, "x", false, offsetof(struct fuzz_cfg, url), "another string", "URL"},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fuzz_cfg c;
    char err[512];
    char small[128];
    int64_t v;
    bool b;

    memset(&c, 0, sizeof(c));
    /* Twice, so that replacing strings set by the first pass is exercised. */
    cfg_load_yaml_buffer(fuzz_opts, sizeof(fuzz_opts) / sizeof(fuzz_opts[0]), &c,
                         (const char *)data, size, "fuzz.yaml", err, sizeof(err));
    cfg_load_yaml_buffer(fuzz_opts, sizeof(fuzz_opts) / sizeof(fuzz_opts[0]), &c,
                         (const char *)data, size, "fuzz.yaml", err, sizeof(err));
    err[sizeof(err) - 1] = '\0';
    cfg_free(fuzz_opts, sizeof(fuzz_opts) / sizeof(fuzz_opts[0]), &c);

    if (size < sizeof(small)) {
        memcpy(small, data, size);
        small[size] = '\0';
        cfg_parse_duration(small, &v);
        cfg_parse_size(small, &v);
        cfg_parse_bool(small, &b);
    }
    return 0;
}
