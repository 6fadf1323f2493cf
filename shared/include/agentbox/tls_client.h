/* A TLS client over memory buffers (OpenSSL), for a connection whose bytes
 * something else moves: the agent's wss:// tunnel on an lws raw socket.
 * lws 4.1's raw client cannot start TLS itself (it calls SSL_connect
 * before its socket exists), so the agent dials plain and runs TLS here:
 * ciphertext in from RAW_RX, ciphertext out through lws_write. The peer is
 * verified like lws did: against ca_file (or the system CAs) and for host
 * (a name, or an IP address literal). Loop thread; no I/O of its own. */
#ifndef AGENTBOX_TLS_CLIENT_H
#define AGENTBOX_TLS_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct tls_client_ctx;
struct tls_client;

/* ca_file NULL: the system CAs. Returns 0 or AB_EIO with err naming the file. */
int tls_client_ctx_new(const char *ca_file, struct tls_client_ctx **out, char *err, size_t errlen);
void tls_client_ctx_free(struct tls_client_ctx *c);

/* One connection to host; NULL when out of memory. */
struct tls_client *tls_client_new(struct tls_client_ctx *c, const char *host);
void tls_client_free(struct tls_client *t);

/* Ciphertext received. Returns 0 or AB_ENOMEM. */
int tls_client_input(struct tls_client *t, const void *in, size_t len);
/* Advances the handshake: 1 established, 0 in progress (send what
 * tls_client_output has, wait for input), or AB_EIO with why (e.g. the
 * certificate does not verify). */
int tls_client_handshake(struct tls_client *t, char *why, size_t whylen);
/* Plaintext received: > 0 bytes, 0 none yet, AB_ECLOSED when the peer
 * closed, AB_EIO on a TLS error. */
ssize_t tls_client_read(struct tls_client *t, void *buf, size_t len);
/* Encrypts plaintext (kept until tls_client_output takes it). Returns 0 or AB_EIO. */
int tls_client_write(struct tls_client *t, const void *data, size_t len);
/* Takes up to len bytes of ciphertext to send; returns how many. */
size_t tls_client_output(struct tls_client *t, void *buf, size_t len);
size_t tls_client_output_pending(struct tls_client *t);

#endif
