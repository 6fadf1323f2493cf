/* The names a relay through the hub carries (DESIGN §5, §6): the one place
 * their spelling lives. The agent's hub link (agent/hub_link.c) sets them;
 * the hub's tunnel server reads the target pair, drops whatever the sender
 * put in RELAY_HDR_SOURCE_CLUSTER and sets it from the session, so a
 * cluster cannot speak for another. */
#ifndef AGENTBOX_RELAY_H
#define AGENTBOX_RELAY_H

/* Headers of a `relay` stream. */
#define RELAY_HDR_TARGET_CLUSTER "X-AgentBox-Target-Cluster"
#define RELAY_HDR_TARGET_SERVICE "X-AgentBox-Target-Service"
#define RELAY_HDR_SOURCE_CLUSTER "X-Source-Cluster"
/* The SHA-256 hex of the caller's API key on calls to the hub's public
 * bridge: the raw key never crosses the tunnel (DESIGN §9). */
#define RELAY_HDR_KEY_HASH "X-AgentBox-Key-Hash"
/* The abx session an approval's session grant is for (hub and agent gates). */
#define RELAY_HDR_SESSION_ID "X-AgentBox-Session-Id"

/* Stream services: the hub's own API, and a relay to another cluster. */
#define RELAY_SVC_HUB "hub"
#define RELAY_SVC_RELAY "relay"
/* The services a cluster serves (RELAY_HDR_TARGET_SERVICE values). */
#define RELAY_SVC_E2B "e2b"
#define RELAY_SVC_DATA "data"
#define RELAY_SVC_NATIVE "native"

/* The hub's public API as agents reach it with a key hash. */
#define RELAY_PUBLIC_BRIDGE "/internal/v1/public"

#endif
