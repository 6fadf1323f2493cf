/* See tunnel_upgrade.h. */
#include "agentbox/tunnel_upgrade.h"
#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "http_parse.h"

#include <jansson.h>

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

int tun_upgrade_key(char *key)
{
    uint8_t raw[16];
    if (crypto_random(raw, sizeof(raw)) != 0)
        return AB_EIO;
    crypto_base64_encode(raw, sizeof(raw), key);
    return 0;
}

void tun_upgrade_accept_of(const char *key, char *out)
{
    char in[128];
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    int n = snprintf(in, sizeof(in), "%.64s%s", key, WS_GUID);
    EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha1(), NULL);
    crypto_base64_encode(md, 20, out);
}

static int fits(int n, size_t outlen)
{
    return n < 0 || (size_t)n >= outlen ? AB_ELIMIT : n;
}

int tun_upgrade_request(char *out, size_t outlen, const char *host, int port, const char *key,
                        const char *authorization, const char *cluster)
{
    /* the Host carries the port unless it is the scheme's default, as lws sent it */
    char hostport[300];
    if (port == 80 || port == 443)
        snprintf(hostport, sizeof(hostport), "%s", host);
    else
        snprintf(hostport, sizeof(hostport), "%s:%d", host, port);
    int n = snprintf(out, outlen,
                     "GET " TUN_UPGRADE_PATH " HTTP/1.1\r\n"
                     "Host: %s\r\n"
                     "Upgrade: websocket\r\n"
                     "Connection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\n"
                     "Origin: %s\r\n"
                     "Sec-WebSocket-Protocol: " TUN_UPGRADE_PROTOCOL "\r\n"
                     "Sec-WebSocket-Version: 13\r\n"
                     "Authorization: %s\r\n"
                     "X-AgentBox-Cluster: %s\r\n"
                     "\r\n",
                     hostport, key, host, authorization, cluster);
    return fits(n, outlen);
}

/* Whether a comma-separated header value lists token (case-insensitive). */
static bool lists_token(const char *value, const char *token)
{
    size_t tl = strlen(token);
    const char *p = value;
    while (p && *p) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        const char *t = e;
        while (t > p && (t[-1] == ' ' || t[-1] == '\t'))
            t--;
        if ((size_t)(t - p) == tl && strncasecmp(p, token, tl) == 0)
            return true;
        p = e;
    }
    return false;
}

int tun_upgrade_check_request(const struct http_request *r, char *accept, int *status,
                              const char **why)
{
    const char *upgrade = http_header_get(r, "Upgrade");
    const char *conn = http_header_get(r, "Connection");
    if (!upgrade || !lists_token(upgrade, "websocket") || !conn || !lists_token(conn, "upgrade")) {
        *status = 426;
        *why = "this port speaks the agentbox tunnel: open a WebSocket to /v1/tunnel "
               "with subprotocol agentbox.tunnel.v1";
        return AB_EINVAL;
    }
    if (strcmp(r->path, TUN_UPGRADE_PATH) != 0) {
        *status = 404;
        *why = "the tunnel lives at /v1/tunnel";
        return AB_EINVAL;
    }
    *status = 400;
    if (strcmp(r->method, "GET") != 0) {
        *why = "a WebSocket upgrade is a GET";
        return AB_EINVAL;
    }
    const char *ver = http_header_get(r, "Sec-WebSocket-Version");
    if (!ver || strcmp(ver, "13") != 0) {
        *why = "Sec-WebSocket-Version must be 13";
        return AB_EINVAL;
    }
    const char *key = http_header_get(r, "Sec-WebSocket-Key");
    uint8_t raw[18];
    size_t rawlen = 0;
    if (!key || strlen(key) != TUN_UPGRADE_KEY_LEN ||
        crypto_base64_decode(key, strlen(key), raw, sizeof(raw), &rawlen) != 0 || rawlen != 16) {
        *why = "Sec-WebSocket-Key must be the base64 of 16 bytes";
        return AB_EINVAL;
    }
    const char *proto = http_header_get(r, "Sec-WebSocket-Protocol");
    if (!proto || !lists_token(proto, TUN_UPGRADE_PROTOCOL)) {
        *why = "Sec-WebSocket-Protocol must name agentbox.tunnel.v1";
        return AB_EINVAL;
    }
    tun_upgrade_accept_of(key, accept);
    *status = 101;
    return 0;
}

int tun_upgrade_response(char *out, size_t outlen, const char *accept)
{
    int n = snprintf(out, outlen,
                     "HTTP/1.1 101 Switching Protocols\r\n"
                     "Upgrade: websocket\r\n"
                     "Connection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n"
                     "Sec-WebSocket-Protocol: " TUN_UPGRADE_PROTOCOL "\r\n"
                     "\r\n",
                     accept);
    return fits(n, outlen);
}

int tun_upgrade_refusal(char *out, size_t outlen, int status, const char *message)
{
    json_t *j = json_pack("{s:i,s:s}", "code", status, "message", message ? message : "");
    char *body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!body)
        return AB_ENOMEM;
    int n = snprintf(out, outlen,
                     "HTTP/1.1 %d %s\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "Connection: close\r\n"
                     "\r\n%s",
                     status, http_status_text(status), strlen(body), body);
    free(body);
    return fits(n, outlen);
}

int tun_upgrade_check_response(int status, const struct http_request *h, const char *key, char *why,
                               size_t whylen)
{
    if (status != 101)
        return AB_EDENIED;
    const char *upgrade = http_header_get(h, "Upgrade");
    const char *conn = http_header_get(h, "Connection");
    const char *accept = http_header_get(h, "Sec-WebSocket-Accept");
    const char *proto = http_header_get(h, "Sec-WebSocket-Protocol");
    char want[TUN_UPGRADE_ACCEPT_LEN + 1];
    tun_upgrade_accept_of(key, want);
    if (!upgrade || !lists_token(upgrade, "websocket") || !conn || !lists_token(conn, "upgrade"))
        snprintf(why, whylen, "hub answered 101 without 'Upgrade: websocket'");
    else if (!accept || strcmp(accept, want) != 0)
        snprintf(why, whylen, "hub answered a wrong Sec-WebSocket-Accept");
    else if (!proto || strcmp(proto, TUN_UPGRADE_PROTOCOL) != 0)
        snprintf(why, whylen, "hub did not accept subprotocol " TUN_UPGRADE_PROTOCOL);
    else
        return 0;
    return AB_EINVAL;
}

/* --- head reader ----------------------------------------------------------------- */

struct tun_upgrade_reader {
    struct http_parse *p;
    bool done;
};

static int reader_on_head(void *arg)
{
    struct tun_upgrade_reader *rd = arg;
    rd->done = true;
    return 0;
}

static const struct http_parse_callbacks reader_cbs = {.on_head = reader_on_head};

struct tun_upgrade_reader *tun_upgrade_reader_new(bool response)
{
    struct tun_upgrade_reader *rd = calloc(1, sizeof(*rd));
    if (!rd)
        return NULL;
    rd->p = http_parse_new(response ? HTTP_PARSE_RESPONSE : HTTP_PARSE_REQUEST,
                           TUN_UPGRADE_HEAD_MAX, &reader_cbs, rd);
    if (!rd->p) {
        free(rd);
        return NULL;
    }
    return rd;
}

void tun_upgrade_reader_free(struct tun_upgrade_reader *rd)
{
    if (!rd)
        return;
    http_parse_free(rd->p);
    free(rd);
}

int tun_upgrade_reader_feed(struct tun_upgrade_reader *rd, const char *data, size_t len,
                            size_t *used, int *status, const char **why)
{
    *used = 0;
    if (rd->done)
        return 1;
    ssize_t n = http_parse_feed(rd->p, data, len, status, why);
    if (n < 0)
        return AB_EINVAL;
    *used = (size_t)n;
    return rd->done ? 1 : 0;
}

const struct http_request *tun_upgrade_reader_head(struct tun_upgrade_reader *rd, int *status)
{
    return http_parse_head(rd->p, status);
}
