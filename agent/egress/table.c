/* The slot → sandbox map of the egress gateway (table.h). */
#include "agent/egress/table.h"

#include "agentbox/common.h"

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct table_entry {
    struct egress_policy *policy; /* owned; NULL with used: internet off */
    uint64_t key;                 /* slot in the low 32 bits, a generation above */
    bool used;
    char id[EGRESS_TABLE_ID_MAX + 1];
};

struct egress_table {
    struct egress_netns_config cfg;
    uint32_t n;
    uint32_t gen; /* a reused slot never shares a key with its previous sandbox */
    struct table_entry *e;
};

struct egress_table *egress_table_new(const struct egress_netns_config *cfg)
{
    struct egress_table *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->cfg = *cfg;
    t->cfg.name = NULL; /* not kept: borrowed */
    t->n = AB_MIN(egress_netns_slots(cfg), (uint32_t)EGRESS_TABLE_SLOTS_MAX);
    if (t->n && !(t->e = calloc(t->n, sizeof(*t->e)))) {
        free(t);
        return NULL;
    }
    return t;
}

void egress_table_free(struct egress_table *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < t->n; i++)
        egress_policy_free(t->e[i].policy);
    free(t->e);
    free(t);
}

int egress_table_set(struct egress_table *t, uint32_t slot, const char *id, struct egress_policy *p)
{
    if (slot >= t->n) {
        egress_policy_free(p);
        return AB_ELIMIT;
    }
    struct table_entry *e = &t->e[slot];
    if (!e->used) {
        e->used = true;
        e->key = (uint64_t)++t->gen << 32 | slot;
    }
    egress_policy_free(e->policy);
    e->policy = p;
    ab_strlcpy(e->id, id ? id : "", sizeof(e->id));
    return 0;
}

void egress_table_clear(struct egress_table *t, uint32_t slot)
{
    if (slot >= t->n)
        return;
    egress_policy_free(t->e[slot].policy);
    memset(&t->e[slot], 0, sizeof(t->e[slot]));
}

int egress_table_sandbox_of(void *arg, const struct egress_addr *peer,
                            struct egress_sandbox_ref *ref)
{
    struct egress_table *t = arg;
    const struct egress_addr *net = &t->cfg.range.net;
    if (peer->family != AF_INET)
        return -1;
    uint32_t a = (uint32_t)peer->a[0] << 24 | (uint32_t)peer->a[1] << 16 |
                 (uint32_t)peer->a[2] << 8 | peer->a[3];
    uint32_t base = (uint32_t)net->a[0] << 24 | (uint32_t)net->a[1] << 16 |
                    (uint32_t)net->a[2] << 8 | net->a[3];
    if (a < base || (a - base) % 4 != 2)
        return -1; /* not a sandbox end of a /30 of the range */
    uint32_t slot = (a - base) / 4;
    if (slot >= t->n || !t->e[slot].used)
        return -1;
    ref->policy = t->e[slot].policy;
    ref->key = t->e[slot].key;
    return 0;
}

const char *egress_table_id_of(const struct egress_table *t, uint64_t key)
{
    uint32_t slot = (uint32_t)key;
    if (slot >= t->n || !t->e[slot].used || t->e[slot].key != key)
        return NULL;
    return t->e[slot].id;
}
