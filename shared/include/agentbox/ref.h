/* The address grammar [cluster::]name[//image] (reference §1.7).
 * The image is split off first at the first "//", then cluster at the first
 * "::"; each piece is trimmed of surrounding whitespace. "a::b::c" is cluster
 * "a", name "b::c". Empty pieces are empty strings. */
#ifndef AGENTBOX_REF_H
#define AGENTBOX_REF_H

#include <stddef.h>

#define REF_MAX 1024

struct ref {
    char cluster[REF_MAX];
    char name[REF_MAX];
    char image[REF_MAX];
};

/* Returns 0, or AB_ELIMIT when the input is longer than REF_MAX - 1 bytes. */
int ref_parse(const char *s, struct ref *out);

/* Formats cluster::name[//image] (or name[//image] when cluster is empty).
 * Returns the length it needed, like snprintf. */
int ref_format(const struct ref *r, char *buf, size_t len);

#endif
