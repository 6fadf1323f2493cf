/* A fake runtime (runtime.h) for unit tests of the layers above the seam:
 * a fixed table of sandboxes, each with the usage and the log text its
 * reads return, and counters of what was asked. No files, no processes:
 * code that works against it needs nothing but runtime.h.
 *
 * Header-only (each test is one file, one process). Loop thread, except the
 * reads, which run on a worker and use only the probe. */
#ifndef AGENTBOX_TESTS_FAKE_RT_H
#define AGENTBOX_TESTS_FAKE_RT_H

#include <stdlib.h>
#include <string.h>

#include "agentbox/common.h"
#include "agent/runtime/runtime.h"

#define FAKE_RT_SANDBOXES_MAX 8

struct fake_sbx {
    bool present;
    struct rt_sandbox s;   /* id, ns, state, claimed_ms, team, owner */
    struct rt_usage usage; /* what a usage read returns (err: AB_ENOENT = gone meanwhile) */
    const char *log;       /* the log text; static, outlives the test */
};

struct fake_rt {
    struct rt base;
    struct fake_sbx sbx[FAKE_RT_SANDBOXES_MAX];
    int usage_probes, log_probes; /* how often the layer above asked */
};

/* What a probe carries: a copy of the usage, the log text's address. */
struct fake_probe {
    struct rt_usage usage;
    const char *log;
};

static struct fake_sbx *fake_find(struct fake_rt *f, const char *id)
{
    for (int i = 0; i < FAKE_RT_SANDBOXES_MAX; i++)
        if (f->sbx[i].present && !strcmp(f->sbx[i].s.id, id))
            return &f->sbx[i];
    return NULL;
}

static int fake_claim(struct rt *rt, const char *ns, const char *name, enum rt_target target,
                      const char *scaling_group, const struct rt_claim_options *o, rt_claim_cb cb,
                      void *arg, uint64_t *ticket, char *err, size_t errlen)
{
    (void)rt, (void)ns, (void)name, (void)target, (void)scaling_group, (void)o, (void)cb;
    (void)arg, (void)ticket;
    ab_strlcpy(err, "the fake runtime does not claim", errlen);
    return AB_EINVAL;
}
static void fake_claim_cancel(struct rt *rt, uint64_t ticket)
{
    (void)rt, (void)ticket;
}
static int fake_release(struct rt *rt, const char *id)
{
    struct fake_sbx *s = fake_find((struct fake_rt *)rt, id);
    if (!s)
        return AB_ENOENT;
    s->present = false;
    return 0;
}
static int fake_set_timeout(struct rt *rt, const char *id, int64_t timeout_s)
{
    (void)timeout_s;
    return fake_find((struct fake_rt *)rt, id) ? 0 : AB_ENOENT;
}
static void fake_touch(struct rt *rt, const char *id)
{
    (void)rt, (void)id;
}
static int fake_get(struct rt *rt, const char *id, struct rt_sandbox *out)
{
    struct fake_sbx *s = fake_find((struct fake_rt *)rt, id);
    if (!s)
        return AB_ENOENT;
    *out = s->s;
    out->metadata = NULL;
    return 0;
}
static void fake_list(struct rt *rt, const struct rt_filter *flt, rt_sandbox_fn fn, void *arg)
{
    struct fake_rt *f = (struct fake_rt *)rt;
    (void)flt;
    for (int i = 0; i < FAKE_RT_SANDBOXES_MAX; i++)
        if (f->sbx[i].present)
            fn(arg, &f->sbx[i].s);
}
static void fake_list_pools(struct rt *rt, const char *ns, rt_pool_fn fn, void *arg)
{
    (void)rt, (void)ns, (void)fn, (void)arg;
}
static void fake_list_envs(struct rt *rt, const char *ns, rt_env_fn fn, void *arg)
{
    (void)rt, (void)ns, (void)fn, (void)arg;
}
static int fake_pool_status(struct rt *rt, const char *ns, const char *pool,
                            struct rt_pool_status *o)
{
    (void)rt, (void)ns, (void)pool, (void)o;
    return AB_ENOENT;
}
static void fake_free(struct rt *rt)
{
    (void)rt;
}

/* Only claimed (running) sandboxes can be probed, as runtime.h says. */
static int fake_probe(struct fake_rt *f, const char *id, struct rt_probe *out)
{
    struct fake_sbx *s = fake_find(f, id);
    struct fake_probe d;
    if (!s || s->s.state != RT_RUNNING)
        return AB_ENOENT;
    memset(&d, 0, sizeof(d));
    d.usage = s->usage;
    d.log = s->log;
    out->ops = f->base.ops;
    ab_strlcpy(out->id, s->s.id, sizeof(out->id));
    ab_strlcpy(out->ns, s->s.ns, sizeof(out->ns));
    out->claimed_ms = s->s.claimed_ms;
    memcpy(out->data, &d, sizeof(d));
    return 0;
}
static int fake_usage_probe(struct rt *rt, const char *id, struct rt_probe *out)
{
    ((struct fake_rt *)rt)->usage_probes++;
    return fake_probe((struct fake_rt *)rt, id, out);
}
static int fake_log_probe(struct rt *rt, const char *id, struct rt_probe *out)
{
    ((struct fake_rt *)rt)->log_probes++;
    return fake_probe((struct fake_rt *)rt, id, out);
}
/* No struct rt here: the probe is all a read may use. */
static void fake_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out)
{
    for (size_t i = 0; i < n; i++) {
        struct fake_probe d;
        memcpy(&d, p[i].data, sizeof(d));
        out[i] = d.usage;
    }
}
static int fake_log_read(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out)
{
    struct fake_probe d;
    memcpy(&d, p->data, sizeof(d));
    char *text = strdup(d.log ? d.log : "");
    if (!text) {
        memset(out, 0, sizeof(*out));
        return AB_ENOMEM;
    }
    return rt_log_from_text(text, strlen(text), false, p->claimed_ms, q, out);
}

static const struct rt_ops fake_rt_ops = {
    .claim = fake_claim,
    .claim_cancel = fake_claim_cancel,
    .release = fake_release,
    .set_timeout = fake_set_timeout,
    .touch = fake_touch,
    .get = fake_get,
    .list = fake_list,
    .list_pools = fake_list_pools,
    .list_envs = fake_list_envs,
    .pool_status = fake_pool_status,
    .free = fake_free,
    .usage_probe = fake_usage_probe,
    .usage_read = fake_usage_read,
    .log_probe = fake_log_probe,
    .log_read = fake_log_read,
};

static void fake_rt_init(struct fake_rt *f, unsigned caps)
{
    memset(f, 0, sizeof(*f));
    f->base.ops = &fake_rt_ops;
    f->base.kind = "fake";
    f->base.caps = caps;
}

/* Adds a sandbox; returns it for the test to fill usage / log. */
static struct fake_sbx *fake_rt_add(struct fake_rt *f, const char *ns, const char *id,
                                    enum rt_state state)
{
    for (int i = 0; i < FAKE_RT_SANDBOXES_MAX; i++) {
        struct fake_sbx *s = &f->sbx[i];
        if (s->present)
            continue;
        memset(s, 0, sizeof(*s));
        s->present = true;
        ab_strlcpy(s->s.ns, ns, sizeof(s->s.ns));
        ab_strlcpy(s->s.id, id, sizeof(s->s.id));
        s->s.state = state;
        return s;
    }
    return NULL;
}

#endif
