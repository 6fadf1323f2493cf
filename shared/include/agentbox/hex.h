/* Hex digits: the one parser and encoder of base-16 text in the tree. */
#ifndef AGENTBOX_HEX_H
#define AGENTBOX_HEX_H

#include <stddef.h>
#include <stdint.h>

/* The value of one hex digit of either case, or -1 when c is not one. */
int hex_digit(int c);
/* Lowercase hex of len bytes into out, which has 2 * len + 1 bytes (terminated). */
void hex_encode(const void *data, size_t len, char *out);
/* Decodes hexlen characters (either case, no prefix, no spaces) into out.
 * AB_EINVAL on an odd length or a character that is not a hex digit (checked
 * before anything is written), AB_ELIMIT when out cannot hold hexlen / 2
 * bytes. *written (when not NULL) gets the byte count, 0 on failure. */
int hex_decode(const char *hex, size_t hexlen, uint8_t *out, size_t outlen, size_t *written);

#endif
