/* The native API (console / abx, DESIGN §1) on the agent's :8080. */
#ifndef AGENTBOX_AGENT_NATIVE_H
#define AGENTBOX_AGENT_NATIVE_H

#include <stddef.h>

struct agent;

/* /v1/relay/{cluster}/{service}/..., /v1/diag/echo, /v1/diag/bytes (relay.c). */
int native_relay_add_routes(struct agent *a, char *err, size_t errlen);

/* GET /v1/auth/whoami (whoami.c). */
int native_whoami_add_routes(struct agent *a, char *err, size_t errlen);

#endif
