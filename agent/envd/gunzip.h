/* Streaming gzip decoding for uploads sent with Content-Encoding: gzip
 * (SDK files.write(..., {gzip: true}), envd >= 0.5.7), with zlib. Output
 * is bounded per call by the caller's sink. Any single thread. */
#ifndef ENVD_GUNZIP_H
#define ENVD_GUNZIP_H

#include <stddef.h>

struct envd_gunzip;
/* Receives decoded bytes; returns 0 or a negative ab_err to stop. */
typedef int (*envd_gunzip_sink)(void *arg, const void *data, size_t len);

/* NULL with the reason in err when zlib cannot be set up. */
struct envd_gunzip *envd_gunzip_new(envd_gunzip_sink sink, void *arg, char *err, size_t errlen);
/* Returns 0, AB_EINVAL for corrupt data, or what the sink returned. */
int envd_gunzip_feed(struct envd_gunzip *g, const void *data, size_t len);
/* AB_EINVAL unless the gzip stream ended exactly. */
int envd_gunzip_finish(struct envd_gunzip *g);
void envd_gunzip_free(struct envd_gunzip *g);

#endif
