/* Re-adoption on start: a sandbox directory left by a previous agent whose
 * init is still the same process (pid + /proc start time, against pid reuse)
 * is adopted back into its pool; anything else is reaped.
 *
 * Loop thread, before the first spawn (rt->adopting). */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"
#include "agentbox/crypto.h"
#include "agentbox/http.h"
#include "agentbox/log.h"
#include "agentbox/loop.h"
#include "agent/runtime/local/manifest.h"
#include "agent/runtime/local/sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- re-adoption ------------------------------------------------------------------------- */

static void adopt_or_reap(struct lrt *rt, const char *dir, const char *name)
{
    struct lsbx x;
    struct lpool *p = NULL;
    struct lsb *s;
    const char *phase, *ns, *pool;

    if (lsbx_state_read(dir, &x) != 0) {
        /* A crash between mkdir and the first record: nothing ran yet. */
        if (!lsbx_record_exists(dir)) {
            struct lsbx empty = {0};
            ab_strlcpy(empty.dir, dir, sizeof(empty.dir));
            lsbx_remove_dir(&empty);
        }
        return;
    }
    ns = json_string_value(json_object_get(x.info, "ns"));
    pool = json_string_value(json_object_get(x.info, "pool"));
    phase = json_string_value(json_object_get(x.info, "phase"));
    if (ns && pool)
        p = lrt_pool_find(rt, ns, pool);
    /* no token: started before isolation (DESIGN §10a); not worth keeping */
    if (!p || !phase || !lsbx_is_alive(&x) || !lsbx_socket_answers(&x) || strcmp(x.id, name) != 0 ||
        x.token[0] == '\0' || lsbx_lock_socket(&x) != 0) {
        LOG_INFO("reaping a sandbox left by an earlier agent", "dir", dir);
        if (lsbx_destroy(&x, 2000) != 0)
            LOG_WARN("a sandbox of an earlier agent survived SIGKILL", "dir", dir);
        lsbx_release(&x);
        return;
    }
    if (!(s = calloc(1, sizeof(*s)))) {
        lsbx_release(&x);
        return;
    }
    s->rt = rt;
    /* a record without uid_base predates per-sandbox slices: slot 0 */
    if (lrt_uid_adopt(s, x.uid_base ? x.uid_base : rt->uid_base) != 0) {
        LOG_INFO("reaping a sandbox whose host uid slice is not free", "dir", dir);
        free(s);
        if (lsbx_destroy(&x, 2000) != 0)
            LOG_WARN("a sandbox of an earlier agent survived SIGKILL", "dir", dir);
        lsbx_release(&x);
        return;
    }
    s->pool = p;
    s->x = x;
    /* a record without a revision predates rolls: take it as current */
    ab_strlcpy(s->rev, json_string_value(json_object_get(x.info, "rev")) ?: p->rev, sizeof(s->rev));
    ab_strlcpy(s->sid, x.id, sizeof(s->sid));
    s->next = rt->sbxs;
    rt->sbxs = s;
    if (!strcmp(phase, "running")) {
        const char *id = json_string_value(json_object_get(x.info, "id"));
        json_t *md = json_object_get(x.info, "metadata");
        s->phase = PH_RUNNING;
        ab_strlcpy(s->id, id ? id : x.id, sizeof(s->id));
        ab_strlcpy(s->team, json_string_value(json_object_get(x.info, "team")) ?: "",
                   sizeof(s->team));
        ab_strlcpy(s->owner, json_string_value(json_object_get(x.info, "owner")) ?: "",
                   sizeof(s->owner));
        s->claimed_ms = json_integer_value(json_object_get(x.info, "claimed_ms"));
        s->end_ms = json_integer_value(json_object_get(x.info, "end_ms"));
        s->last_active_ms = ab_wall_ms(); /* the restart: the last activity we know of */
        if (json_object_get(x.info, "idle_ms")) {
            s->life_end_ms = json_integer_value(json_object_get(x.info, "life_end_ms"));
            s->idle_ms = json_integer_value(json_object_get(x.info, "idle_ms"));
        } else { /* written before idle timeouts: end_ms was the lifetime */
            s->life_end_ms = s->end_ms;
            s->idle_ms = p->idle_ms;
        }
        lrt_update_end(s);
        s->metadata = json_is_object(md) ? json_incref(md) : NULL;
        json_t *net = json_object_get(x.info, "network");
        s->network = json_is_object(net) ? json_incref(net) : NULL;
        s->allow_private = json_is_true(json_object_get(x.info, "allow_private"));
        char why[RT_ERR_MAX];
        /* its policy is back in the new gateway's table; one that no longer
         * parses (a newer agent's) fails closed: nothing leaves */
        if (lrt_egress_apply(s, why, sizeof(why)) != 0) {
            LOG_WARN("a re-adopted sandbox's egress policy is refused; its egress is cut", "id",
                     s->id, "error", why);
            json_decref(s->network);
            s->network = NULL;
            s->x.internet = false;
            lrt_egress_apply(s, why, sizeof(why));
        }
        lrt_schedule_end(s);
    } else {
        s->phase = PH_IDLE;
        s->seq = ++rt->seq;
    }
    LOG_INFO("re-adopted a sandbox", "dir", dir, "phase", phase);
}

void lrt_adopt_all(struct lrt *rt)
{
    DIR *d = opendir(rt->sbx_dir);
    struct dirent *de;
    char dir[LSBX_DIR_MAX];

    if (!d)
        return;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (snprintf(dir, sizeof(dir), "%s/%s", rt->sbx_dir, de->d_name) >= (int)sizeof(dir))
            continue;
        adopt_or_reap(rt, dir, de->d_name);
    }
    closedir(d);
}
