/* Which sandbox owns each veth slot of the egress namespace, and its policy:
 * the map the gateway's sandbox_of reads (gateway.h) and the runtime writes
 * (claim, policy update, teardown). One per agent.
 *
 * A slot's sandbox address is the .2 of its /30 in the range (netns.h); the
 * table inverts that, so a connection's peer address names its slot. A slot
 * with no entry (an idle pre-warmed sandbox, or nobody) is "no sandbox": the
 * gateway refuses its TCP and DNS. Loop thread only. */
#ifndef AGENTBOX_AGENT_EGRESS_TABLE_H
#define AGENTBOX_AGENT_EGRESS_TABLE_H

#include "agent/egress/gateway.h"
#include "agent/egress/netns.h"
#include "agent/egress/policy.h"

#include <stdint.h>

#define EGRESS_TABLE_SLOTS_MAX 65536 /* slots mapped, whatever the range holds */
#define EGRESS_TABLE_ID_MAX 63       /* the sandbox id kept for log lines */

struct egress_table;

/* A table for the slots of cfg's range (copied), at most EGRESS_TABLE_SLOTS_MAX. NULL on OOM. */
struct egress_table *egress_table_new(const struct egress_netns_config *cfg);
void egress_table_free(struct egress_table *t);

/* Gives slot to sandbox id with policy p (ownership taken, also on failure;
 * NULL: internet off). A slot already set keeps its key, so a policy update
 * leaves the sandbox's open connections counted as its own; the old policy is
 * freed (the gateway only borrows policies within one call). AB_ELIMIT for a
 * slot outside the table. */
int egress_table_set(struct egress_table *t, uint32_t slot, const char *id,
                     struct egress_policy *p);
/* Forgets slot (freeing its policy): its sandbox is gone or going. */
void egress_table_clear(struct egress_table *t, uint32_t slot);

/* gateway.h's sandbox_of, with arg the table: 0 and *ref for the sandbox
 * address of a set slot, -1 otherwise. */
int egress_table_sandbox_of(void *arg, const struct egress_addr *peer,
                            struct egress_sandbox_ref *ref);
/* The id given with the slot of key (from a ref), or NULL. */
const char *egress_table_id_of(const struct egress_table *t, uint64_t key);

#endif
