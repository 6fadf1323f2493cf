/* The tunnel's HTTP Upgrade to WebSocket (RFC 6455 §4), done by us on raw
 * connections: the agent writes the request and checks the 101, the hub
 * parses the request with the bounded HTTP parser (shared/src/http_parse.c)
 * and answers 101 or a JSON refusal. Pure: no I/O, no lws; any thread.
 *
 * The wire stays what libwebsockets' WebSocket client and server spoke, so
 * an agent and a hub of either framing interoperate. */
#ifndef AGENTBOX_TUNNEL_UPGRADE_H
#define AGENTBOX_TUNNEL_UPGRADE_H

#include <stdbool.h>
#include <stddef.h>

#include "agentbox/http.h"

#define TUN_UPGRADE_PATH "/v1/tunnel"
#define TUN_UPGRADE_PROTOCOL "agentbox.tunnel.v1"
#define TUN_UPGRADE_KEY_LEN 24    /* base64 of 16 random bytes */
#define TUN_UPGRADE_ACCEPT_LEN 28 /* base64 of a SHA-1 */
#define TUN_UPGRADE_HEAD_MAX (16 * 1024)

/* A fresh Sec-WebSocket-Key into key (TUN_UPGRADE_KEY_LEN + 1 bytes).
 * Returns 0 or AB_EIO when no randomness could be had. */
int tun_upgrade_key(char *key);

/* Sec-WebSocket-Accept for key into out (TUN_UPGRADE_ACCEPT_LEN + 1 bytes). */
void tun_upgrade_accept_of(const char *key, char *out);

/* The agent's request into out. Returns its length, or AB_ELIMIT when it
 * does not fit outlen (never written cut). */
int tun_upgrade_request(char *out, size_t outlen, const char *host, int port, const char *key,
                        const char *authorization, const char *cluster);

/* Whether a parsed request is a WebSocket upgrade to the tunnel. Returns 0
 * and writes the Sec-WebSocket-Accept into accept (TUN_UPGRADE_ACCEPT_LEN + 1
 * bytes), or sets *status (404, 426, 400) and *why and returns AB_EINVAL.
 * Authentication is the caller's (it needs the cluster registry). */
int tun_upgrade_check_request(const struct http_request *r, char *accept, int *status,
                              const char **why);

/* The hub's 101 answer into out; returns its length or AB_ELIMIT. */
int tun_upgrade_response(char *out, size_t outlen, const char *accept);

/* A refusal: status with {"code","message"} as JSON and Connection: close.
 * Returns its length or AB_ELIMIT. */
int tun_upgrade_refusal(char *out, size_t outlen, int status, const char *message);

/* Whether a parsed response (status, headers) completes the upgrade for key.
 * Returns 0, or AB_EDENIED (status is not 101: the caller reports it) or
 * AB_EINVAL with why naming the header that is wrong. */
int tun_upgrade_check_response(int status, const struct http_request *h, const char *key, char *why,
                               size_t whylen);

/* An incremental head reader over the bounded parser: feed bytes until the
 * head of one message is complete. */
struct tun_upgrade_reader;
struct tun_upgrade_reader *tun_upgrade_reader_new(bool response);
void tun_upgrade_reader_free(struct tun_upgrade_reader *rd);
/* Feeds bytes. Returns 1 when the head is complete, with *used the bytes of
 * data that belonged to it (what follows is WebSocket data); 0 when more is
 * needed (all consumed); or AB_EINVAL with *status and *why (a malformed or
 * oversized head: 400, 431, ...). */
int tun_upgrade_reader_feed(struct tun_upgrade_reader *rd, const char *data, size_t len,
                            size_t *used, int *status, const char **why);
/* The parsed head (valid until the reader is freed); *status the response
 * code for a response reader. */
const struct http_request *tun_upgrade_reader_head(struct tun_upgrade_reader *rd, int *status);

#endif
