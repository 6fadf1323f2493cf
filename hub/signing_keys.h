/* Generations of the hub's assertion signing key (DESIGN §11, issue 13):
 * which generations of the hub secret's Ed25519 key pair are published
 * (migrations/0005_signing_keys.sql). The hub signs with the current one and
 * publishes current and previous (WELCOME, and an "assertion_keys" EVENT when
 * they change); a retired generation is refused by the hub and the agents.
 *
 * `agentbox-hub signing-key rotate` makes a new generation current, the
 * current one previous and the previous one retired. Rotating again within
 * SIGNING_KEYS_MIN_AGE_S of the last rotation would retire a key whose
 * assertions may still be live: refused unless --force.
 *
 * The *_conn functions are synchronous libpq (a database worker or the CLI). */
#ifndef AGENTBOX_HUB_SIGNING_KEYS_H
#define AGENTBOX_HUB_SIGNING_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#include <libpq-fe.h>

#include "agentbox/assertion.h"

/* an assertion's lifetime plus two clock skews: by then every assertion the
 * previous key signed has expired */
#define SIGNING_KEYS_MIN_AGE_S (ASRT_LIFETIME_MAX_S + 2 * ASRT_SKEW_S)

/* The published generations; previous -1 when there is none. */
struct signing_set {
    int current;
    int previous;
};

/* Reads the set: no row (or no table: an older schema) is {0, -1}. 0, or
 * AB_EIO with err. */
int signing_keys_load_conn(PGconn *c, struct signing_set *out, char *err, size_t errlen);

/* The rotation, in one transaction; secret gives the new key's id (stored
 * for `list` and so a hub can tell it runs with another secret). force: even
 * within SIGNING_KEYS_MIN_AGE_S of the last one (AB_EBUSY otherwise, err
 * saying how long to wait). *out: the set after. */
int signing_keys_rotate_conn(PGconn *c, const void *secret, size_t len, bool force,
                             struct signing_set *out, char *err, size_t errlen);

/* `agentbox-hub signing-key rotate|list`. */
int signing_keys_cli_main(int argc, char **argv);

#endif
