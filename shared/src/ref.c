/* [cluster::]name[//image] references (reference §1.7). The image goes first
 * because an image may itself contain "//"; each step uses the first
 * occurrence only, so "a::b::c" is cluster "a", name "b::c". */
#include "agentbox/ref.h"
#include "agentbox/common.h"

#include <stdio.h>
#include <string.h>

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Copies s[0..len) without surrounding whitespace; len < REF_MAX always holds. */
static void copy_trimmed(char *dst, const char *s, size_t len)
{
    while (len > 0 && is_space(s[0])) {
        s++;
        len--;
    }
    while (len > 0 && is_space(s[len - 1]))
        len--;
    memcpy(dst, s, len);
    dst[len] = '\0';
}

int ref_parse(const char *s, struct ref *out)
{
    size_t len = strnlen(s, REF_MAX);
    const char *img;
    const char *sep;
    size_t prefix_len;

    out->cluster[0] = out->name[0] = out->image[0] = '\0';
    if (len >= REF_MAX)
        return AB_ELIMIT;

    img = strstr(s, "//");
    prefix_len = img != NULL ? (size_t)(img - s) : len;
    if (img != NULL)
        copy_trimmed(out->image, img + 2, len - prefix_len - 2);

    sep = memmem(s, prefix_len, "::", 2);
    if (sep != NULL) {
        size_t clen = (size_t)(sep - s);
        copy_trimmed(out->cluster, s, clen);
        copy_trimmed(out->name, sep + 2, prefix_len - clen - 2);
    } else {
        copy_trimmed(out->name, s, prefix_len);
    }
    return 0;
}

int ref_format(const struct ref *r, char *buf, size_t len)
{
    const char *csep = r->cluster[0] != '\0' ? "::" : "";
    const char *isep = r->image[0] != '\0' ? "//" : "";

    return snprintf(buf, len, "%s%s%s%s%s", r->cluster, csep, r->name, isep, r->image);
}
