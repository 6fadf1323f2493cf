/* Connect protocol framing for server-streaming calls (e2b-protocol.md §2.4).
 *
 * An envelope is: u8 flags | u32 big-endian payload length | payload. A
 * request body of a streaming call is exactly one envelope with flags 0; a
 * response is data envelopes (flags 0) closed by one end-stream envelope
 * (flags 0x02) whose JSON is {} or {"error":{"code","message"}}.
 * Pure functions, no I/O: any thread. */
#ifndef ENVD_ENVELOPE_H
#define ENVD_ENVELOPE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define ENVD_ENV_HEADER_LEN 5
#define ENVD_ENV_MAX (4 * 1024 * 1024) /* payload bytes; past it: resource_exhausted */
#define ENVD_ENV_FLAG_COMPRESSED 0x01
#define ENVD_ENV_FLAG_END 0x02

void envd_env_header(uint8_t flags, uint32_t len, uint8_t out[ENVD_ENV_HEADER_LEN]);

/* Builds flags|len|payload in a malloc'd buffer the caller frees. AB_ELIMIT
 * when len > ENVD_ENV_MAX. */
int envd_env_encode(uint8_t flags, const void *payload, size_t len, uint8_t **out, size_t *outlen);

/* Serialises v compactly into a data envelope (flags 0). Does not take v. */
int envd_env_encode_json(const json_t *v, uint8_t **out, size_t *outlen);

/* End-stream envelope: {} when code is NULL, else {"error":{"code","message"}}. */
int envd_env_encode_end(const char *code, const char *message, uint8_t **out, size_t *outlen);

/* Reads one envelope at the start of buf[0..len). On success sets *flags,
 * *payload (points into buf), *plen and *consumed. Refuses with a message in
 * err: a header shorter than 5 bytes or a payload shorter than announced
 * (AB_EINVAL "truncated"), an announced length over max (AB_ELIMIT), any flag
 * bit other than COMPRESSED|END (AB_EINVAL). */
int envd_env_decode(const uint8_t *buf, size_t len, size_t max, uint8_t *flags,
                    const uint8_t **payload, size_t *plen, size_t *consumed, char *err,
                    size_t errlen);

/* The request body of a streaming call: exactly one uncompressed data
 * envelope holding a JSON object, nothing after it. Returns a new reference
 * in *out, or AB_EINVAL / AB_ELIMIT with the reason in err. */
int envd_env_parse_request(const uint8_t *buf, size_t len, json_t **out, char *err, size_t errlen);

/* HTTP status for a Connect error code ("not_found" → 404); 500 for unknown codes. */
int envd_connect_status(const char *code);

#endif
