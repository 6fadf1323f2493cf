/* List page tokens (E2B `nextToken` / `X-Next-Token`): base64url without
 * padding of a decimal offset. Opaque to clients; the agent and the hub's
 * front door use the same encoding. */
#ifndef AGENTBOX_PAGETOKEN_H
#define AGENTBOX_PAGETOKEN_H

#include <stdint.h>

#define PAGETOKEN_MAX 48 /* bytes of an encoded token, NUL included */

/* The offset a token names; 0 for an empty, malformed or oversized token. */
int64_t pagetoken_decode(const char *token);
/* Writes the token for off (> 0) into out (PAGETOKEN_MAX bytes). */
void pagetoken_encode(int64_t off, char out[PAGETOKEN_MAX]);

#endif
