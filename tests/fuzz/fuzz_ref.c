/* ref_parse on arbitrary bytes; then format and parse again: the pieces must
 * survive whenever the joined text cannot be read another way. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/ref.h"

static int has_edge_space(const char *s)
{
    size_t n = strlen(s);
    const char *ws = " \t\n\r\v\f";

    return n > 0 && (strchr(ws, s[0]) != NULL || strchr(ws, s[n - 1]) != NULL);
}

static int ends_with(const char *s, char c)
{
    size_t n = strlen(s);

    return n > 0 && s[n - 1] == c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct ref r, again;
    static char in[2 * REF_MAX];
    static char out[3 * REF_MAX + 8];
    size_t n = size < sizeof(in) - 1 ? size : sizeof(in) - 1;
    int rc;
    int len;

    memcpy(in, data, n);
    in[n] = '\0';
    rc = ref_parse(in, &r);
    if (rc == AB_ELIMIT) {
        if (strlen(in) < REF_MAX)
            abort();
        return 0;
    }
    if (rc != 0 || strlen(in) >= REF_MAX)
        abort();

    /* What the grammar promises about the pieces. */
    if (strstr(r.cluster, "::") != NULL || strstr(r.cluster, "//") != NULL ||
        strstr(r.name, "//") != NULL)
        abort();
    if (has_edge_space(r.cluster) || has_edge_space(r.name) || has_edge_space(r.image))
        abort();

    len = ref_format(&r, out, sizeof(out));
    if (len < 0 || (size_t)len != strlen(out) || len >= REF_MAX)
        abort();

    /* Ambiguous joins: a separator inside the name, a cluster ending in ':'
     * ("a:" + "::" reads as "a" + "::" + ":"), a name ending in '/' before
     * the image separator. */
    if (strstr(r.name, "::") != NULL || ends_with(r.cluster, ':') ||
        (r.image[0] != '\0' && ends_with(r.name, '/')))
        return 0;
    if (ref_parse(out, &again) != 0)
        abort();
    if (strcmp(r.cluster, again.cluster) != 0 || strcmp(r.name, again.name) != 0 ||
        strcmp(r.image, again.image) != 0)
        abort();
    return 0;
}
