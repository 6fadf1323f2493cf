/* gzip decoding over a run-time loaded zlib. */
#include "agent/envd/gunzip.h"

#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "agentbox/common.h"

struct zlib_api {
    int (*init2)(z_streamp, int, const char *, int);
    int (*inflate)(z_streamp, int);
    int (*end)(z_streamp);
};

struct envd_gunzip {
    z_stream zs;
    envd_gunzip_sink sink;
    void *arg;
    bool done;
};

static struct zlib_api g_z;

static int load_zlib(void)
{
    void *h;

    if (g_z.inflate != NULL)
        return 0;
    h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return AB_EIO;
    g_z.init2 = (int (*)(z_streamp, int, const char *, int))dlsym(h, "inflateInit2_");
    g_z.end = (int (*)(z_streamp))dlsym(h, "inflateEnd");
    g_z.inflate = (int (*)(z_streamp, int))dlsym(h, "inflate");
    if (g_z.init2 == NULL || g_z.end == NULL || g_z.inflate == NULL) {
        memset(&g_z, 0, sizeof(g_z));
        return AB_EIO;
    }
    return 0;
}

struct envd_gunzip *envd_gunzip_new(envd_gunzip_sink sink, void *arg, char *err, size_t errlen)
{
    struct envd_gunzip *g;

    if (load_zlib() != 0) {
        snprintf(err, errlen, "gzip uploads need zlib (libz.so.1): upload without gzip");
        return NULL;
    }
    g = calloc(1, sizeof(*g));
    if (g == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    /* 16 + MAX_WBITS: gzip wrapper only. */
    if (g_z.init2(&g->zs, 16 + MAX_WBITS, ZLIB_VERSION, (int)sizeof(z_stream)) != Z_OK) {
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
        zr = g_z.inflate(&g->zs, Z_NO_FLUSH);
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
    g_z.end(&g->zs);
    free(g);
}
