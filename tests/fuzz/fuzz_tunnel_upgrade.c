/* Fuzzes the tunnel's upgrade handshake (tunnel_upgrade.h) and the hub's
 * frame input (tunnel_wsl.h), the two parsers an unauthenticated peer
 * reaches on the tunnel port. By the first byte:
 *   even: a request head, fed whole and then split at a data-dependent
 *         point, then checked as an upgrade; a check that passes must give
 *         the accept of the key it read, and a refusal a 4xx status and a
 *         message;
 *   odd:  a response head checked against a fixed key (the agent's side),
 *         then the rest as WebSocket bytes into a hub end with a session:
 *         never a crash, an error always with a reason. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agentbox/tunnel.h"
#include "agentbox/tunnel_http.h"
#include "agentbox/tunnel_upgrade.h"
#include "agentbox/tunnel_wsl.h"

static const char *KEY = "dGhlIHNhbXBsZSBub25jZQ==";

/* Returns 1 with the head complete, 0 when more was wanted, -1 refused. */
static int feed(struct tun_upgrade_reader *rd, const uint8_t *data, size_t size, size_t split,
                size_t *used_total)
{
    size_t off = 0, stops[2] = {split, size};
    for (int k = 0; k < 2; k++) {
        while (off < stops[k]) {
            size_t used = 0;
            int status = 0;
            const char *why = NULL;
            int rc = tun_upgrade_reader_feed(rd, (const char *)data + off, stops[k] - off, &used,
                                             &status, &why);
            if (rc < 0) {
                if (status < 400 || status > 599 || !why)
                    abort();
                return -1;
            }
            if (used > stops[k] - off)
                abort();
            off += used;
            if (rc == 1) {
                *used_total = off;
                return 1;
            }
            if (used == 0)
                break;
        }
    }
    *used_total = off;
    return 0;
}

static void request(const uint8_t *data, size_t size)
{
    struct tun_upgrade_reader *rd = tun_upgrade_reader_new(false);
    size_t used = 0;
    size_t split = size ? data[0] % (size + 1) : 0;
    if (rd && feed(rd, data, size, split, &used) == 1) {
        const struct http_request *r = tun_upgrade_reader_head(rd, NULL);
        char acc[TUN_UPGRADE_ACCEPT_LEN + 1], want[TUN_UPGRADE_ACCEPT_LEN + 1];
        int status = 0;
        const char *why = NULL;
        if (tun_upgrade_check_request(r, acc, &status, &why) == 0) {
            tun_upgrade_accept_of(http_header_get(r, "Sec-WebSocket-Key"), want);
            if (strcmp(acc, want) != 0 || status != 101)
                abort();
        } else if (status < 400 || status > 499 || !why) {
            abort();
        }
    }
    tun_upgrade_reader_free(rd);
}

static void response_then_frames(const uint8_t *data, size_t size)
{
    struct tun_upgrade_reader *rd = tun_upgrade_reader_new(true);
    size_t used = 0;
    if (rd && feed(rd, data, size, size, &used) == 1) {
        int status = 0;
        char why[160] = "";
        const struct http_request *h = tun_upgrade_reader_head(rd, &status);
        int rc = tun_upgrade_check_response(status, h, KEY, why, sizeof(why));
        if (rc == AB_EINVAL && !why[0])
            abort();
        if (rc == 0 && status != 101)
            abort();
    }
    tun_upgrade_reader_free(rd);

    /* the rest as frames into the hub's end (its unmasking shim first) */
    struct tun_callbacks cb;
    tun_ep_callbacks_init(&cb);
    struct tun_config c = {.role = TUN_ROLE_HUB, .cb = &cb};
    struct tun_session *s = NULL;
    char err[128];
    struct tun_wsl w;
    if (tun_session_new(&c, &s, err, sizeof(err)) != 0)
        return;
    if (tun_wsl_init(&w, NULL, true) != 0) {
        tun_session_free(s);
        return;
    }
    tun_wsl_start(&w, s);
    const uint8_t *p = data + used;
    size_t left = size - used;
    while (left) {
        size_t n = 1 + (p[0] % 97);
        n = n > left ? left : n;
        int rc = tun_wsl_rx(&w, p, n);
        if (rc < 0 && rc != AB_ECLOSED && !w.err)
            abort();
        if (rc < 0)
            break;
        p += n;
        left -= n;
    }
    tun_wsl_fini(&w);
    tun_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        response_then_frames(data + 1, size - 1);
    else
        request(data + 1, size - 1);
    return 0;
}
