/* gzip decoding with zlib (linked: envd is a static binary in Release, see CMakeLists.txt). */
#include "agent/envd/gunzip.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agentbox/common.h"

struct envd_gunzip {
    z_stream zs;
    envd_gunzip_sink sink;
    void *arg;
    bool done;
};

struct envd_gunzip *envd_gunzip_new(envd_gunzip_sink sink, void *arg, char *err, size_t errlen)
{
    struct envd_gunzip *g;

    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* 16 + MAX_WBITS: gzip wrapper only. */
    if (inflateInit2(&g->zs, 16 + MAX_WBITS) != Z_OK) {
        free(g);
        snprintf(err, errlen, "cannot set up gzip decoding");
        return NULL;
    }
    g->sink = sink;
    g->arg = arg;
    return g;
}

int envd_gunzip_feed(struct envd_gunzip *g, const void *data, size_t len)
{
    unsigned char out[64 * 1024];

    if (len > 0 && g->done)
        return AB_EINVAL; /* bytes after the end of the gzip stream */
    g->zs.next_in = (unsigned char *)(uintptr_t)data;
    g->zs.avail_in = (uInt)len;
    while (g->zs.avail_in > 0 && !g->done) {
        int zr;
        int rc;
        g->zs.next_out = out;
        g->zs.avail_out = sizeof(out);
        zr = inflate(&g->zs, Z_NO_FLUSH);
        if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
            return AB_EINVAL;
        if (sizeof(out) - g->zs.avail_out > 0) {
            rc = g->sink(g->arg, out, sizeof(out) - g->zs.avail_out);
            if (rc != 0)
                return rc;
        }
        if (zr == Z_STREAM_END)
            g->done = true;
        else if (zr == Z_BUF_ERROR && g->zs.avail_out != 0)
            break;
    }
    return g->zs.avail_in > 0 && g->done ? AB_EINVAL : 0;
}

int envd_gunzip_finish(struct envd_gunzip *g)
{
    return g->done ? 0 : AB_EINVAL;
}

void envd_gunzip_free(struct envd_gunzip *g)
{
    if (g == NULL)
        return;
    inflateEnd(&g->zs);
    free(g);
}
