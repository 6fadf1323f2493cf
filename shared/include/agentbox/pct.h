/* Percent-decoding (RFC 3986 section 2.1): the one decoder of request paths,
 * query keys and query values.
 *
 * Policy, the same for every caller:
 *   "%41" / "%4a" / "%4A"  decode to one byte (either case of hex digit);
 *   "%G1", "%1G"           AB_EINVAL: not two hex digits;
 *   "%" or "%2" at the end AB_EINVAL: a truncated escape;
 *   "%00" or a raw NUL     AB_EINVAL: a NUL would end the C string early and
 *                          change what the path or value means;
 *   '+'                    kept, or a space with PCT_PLUS_IS_SPACE (query
 *                          strings, application/x-www-form-urlencoded);
 *   output + NUL > dstlen  AB_ELIMIT.
 * Nothing else is interpreted: "%2F" becomes '/', so callers that split on '/'
 * must split before decoding. */
#ifndef AGENTBOX_PCT_H
#define AGENTBOX_PCT_H

#include <stddef.h>

#define PCT_PLUS_IS_SPACE 0x1u

/* Decodes len bytes of src into dst (dstlen bytes, always terminated when
 * dstlen > 0, "" on failure). *outlen (when not NULL) gets the decoded length.
 * Returns 0, AB_EINVAL or AB_ELIMIT as above. */
int pct_decode(const char *src, size_t len, char *dst, size_t dstlen, unsigned flags,
               size_t *outlen);

#endif
