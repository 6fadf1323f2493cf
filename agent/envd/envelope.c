/* Connect envelopes: the framing of server-streaming calls. */
#include "agent/envd/envelope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"

void envd_env_header(uint8_t flags, uint32_t len, uint8_t out[ENVD_ENV_HEADER_LEN])
{
    out[0] = flags;
    out[1] = (uint8_t)(len >> 24);
    out[2] = (uint8_t)(len >> 16);
    out[3] = (uint8_t)(len >> 8);
    out[4] = (uint8_t)len;
}

int envd_env_encode(uint8_t flags, const void *payload, size_t len, uint8_t **out, size_t *outlen)
{
    uint8_t *buf;

    *out = NULL;
    *outlen = 0;
    if (len > ENVD_ENV_MAX)
        return AB_ELIMIT;
    buf = malloc(ENVD_ENV_HEADER_LEN + len);
    if (buf == NULL)
        return AB_ENOMEM;
    envd_env_header(flags, (uint32_t)len, buf);
    if (len > 0)
        memcpy(buf + ENVD_ENV_HEADER_LEN, payload, len);
    *out = buf;
    *outlen = ENVD_ENV_HEADER_LEN + len;
    return 0;
}

static int encode_value(uint8_t flags, const json_t *v, uint8_t **out, size_t *outlen)
{
    char *s = json_dumps(v, JSON_COMPACT);
    int rc;

    if (s == NULL) {
        *out = NULL;
        *outlen = 0;
        return AB_ENOMEM;
    }
    rc = envd_env_encode(flags, s, strlen(s), out, outlen);
    free(s);
    return rc;
}

int envd_env_encode_json(const json_t *v, uint8_t **out, size_t *outlen)
{
    return encode_value(0, v, out, outlen);
}

int envd_env_encode_end(const char *code, const char *message, uint8_t **out, size_t *outlen)
{
    json_t *v;
    int rc;

    if (code == NULL)
        return envd_env_encode(ENVD_ENV_FLAG_END, "{}", 2, out, outlen);
    v = json_pack("{s:{s:s,s:s}}", "error", "code", code, "message",
                  message != NULL ? message : "");
    if (v == NULL) {
        *out = NULL;
        *outlen = 0;
        return AB_ENOMEM;
    }
    rc = encode_value(ENVD_ENV_FLAG_END, v, out, outlen);
    json_decref(v);
    return rc;
}

int envd_env_decode(const uint8_t *buf, size_t len, size_t max, uint8_t *flags,
                    const uint8_t **payload, size_t *plen, size_t *consumed, char *err,
                    size_t errlen)
{
    uint32_t n;

    if (len < ENVD_ENV_HEADER_LEN) {
        snprintf(err, errlen, "envelope truncated: %zu of 5 header bytes", len);
        return AB_EINVAL;
    }
    if ((buf[0] & ~(ENVD_ENV_FLAG_COMPRESSED | ENVD_ENV_FLAG_END)) != 0) {
        snprintf(err, errlen, "envelope flags 0x%02x: only 0x01 and 0x02 are defined", buf[0]);
        return AB_EINVAL;
    }
    n = (uint32_t)buf[1] << 24 | (uint32_t)buf[2] << 16 | (uint32_t)buf[3] << 8 | buf[4];
    if (n > max) {
        snprintf(err, errlen, "envelope of %u bytes is over the limit of %zu bytes", n, max);
        return AB_ELIMIT;
    }
    if (len - ENVD_ENV_HEADER_LEN < n) {
        snprintf(err, errlen, "envelope truncated: %zu of %u payload bytes",
                 len - ENVD_ENV_HEADER_LEN, n);
        return AB_EINVAL;
    }
    *flags = buf[0];
    *payload = buf + ENVD_ENV_HEADER_LEN;
    *plen = n;
    *consumed = ENVD_ENV_HEADER_LEN + (size_t)n;
    return 0;
}

int envd_env_parse_request(const uint8_t *buf, size_t len, json_t **out, char *err, size_t errlen)
{
    const uint8_t *payload;
    size_t plen;
    size_t used;
    uint8_t flags;
    json_error_t jerr;
    json_t *v;
    int rc;

    *out = NULL;
    rc = envd_env_decode(buf, len, ENVD_ENV_MAX, &flags, &payload, &plen, &used, err, errlen);
    if (rc != 0)
        return rc;
    if (flags & ENVD_ENV_FLAG_COMPRESSED) {
        snprintf(err, errlen,
                 "compressed envelopes are not accepted: send Connect without "
                 "Connect-Content-Encoding");
        return AB_EINVAL;
    }
    if (flags & ENVD_ENV_FLAG_END) {
        snprintf(err, errlen, "request envelope has the end-stream flag 0x02");
        return AB_EINVAL;
    }
    if (used != len) {
        snprintf(err, errlen, "request body holds %zu bytes after its one envelope", len - used);
        return AB_EINVAL;
    }
    v = json_loadb((const char *)payload, plen, JSON_REJECT_DUPLICATES, &jerr);
    if (v == NULL) {
        snprintf(err, errlen, "request message is not valid JSON: %s (column %d)", jerr.text,
                 jerr.column);
        return AB_EINVAL;
    }
    if (!json_is_object(v)) {
        json_decref(v);
        snprintf(err, errlen, "request message must be a JSON object");
        return AB_EINVAL;
    }
    *out = v;
    return 0;
}

int envd_connect_status(const char *code)
{
    static const struct {
        const char *code;
        int status;
    } map[] = {
        {"canceled", 499},
        {"unknown", 500},
        {"invalid_argument", 400},
        {"deadline_exceeded", 504},
        {"not_found", 404},
        {"already_exists", 409},
        {"permission_denied", 403},
        {"resource_exhausted", 429},
        {"failed_precondition", 400},
        {"aborted", 409},
        {"out_of_range", 400},
        {"unimplemented", 501},
        {"internal", 500},
        {"unavailable", 503},
        {"data_loss", 500},
        {"unauthenticated", 401},
    };

    for (size_t i = 0; i < AB_ARRAY_LEN(map); i++) {
        if (strcmp(map[i].code, code) == 0)
            return map[i].status;
    }
    return 500;
}
