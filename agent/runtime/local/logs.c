/* The log of a local sandbox (runtime.h, "Usage and logs"): what its envd
 * writes to stdout and stderr, <sandbox dir>/data/envd.log (sandbox.h; an
 * adopted sandbox of an older agent: <sandbox dir>/envd.log), read from
 * its last RT_LOG_TAIL_MAX bytes. The probe runs on the loop thread; the
 * read on a worker, from the probe alone. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct log_probe {
    char path[LSBX_DIR_MAX + 16]; /* <dir>/data/envd.log */
};
_Static_assert(sizeof(struct log_probe) <= RT_PROBE_DATA_MAX, "log probe fits rt_probe");

int lrt_log_probe(struct rt *base, const char *id, struct rt_probe *out)
{
    struct lrt *rt = (struct lrt *)base;
    struct lsb *s = lrt_sbx_find(rt, id);
    struct log_probe d;

    if (!s)
        return AB_ENOENT;
    memset(&d, 0, sizeof(d));
    if ((size_t)snprintf(d.path, sizeof(d.path), "%s/" LSBX_LOG, s->x.dir) >= sizeof(d.path))
        return AB_ELIMIT;          /* cannot happen: dir is at most LSBX_DIR_MAX */
    if (access(d.path, F_OK) != 0) /* an older agent's sandbox, adopted */
        snprintf(d.path, sizeof(d.path), "%s/" LSBX_LOG_OLD, s->x.dir);
    out->ops = base->ops;
    ab_strlcpy(out->id, s->id, sizeof(out->id));
    ab_strlcpy(out->ns, s->pool->ns, sizeof(out->ns));
    out->claimed_ms = s->claimed_ms;
    memcpy(out->data, &d, sizeof(d));
    return 0;
}

int lrt_log_read(const struct rt_probe *p, const struct rt_log_query *q, struct rt_log *out)
{
    struct log_probe d;
    struct stat st;
    off_t from = 0;
    ssize_t got = 0;
    char *buf;
    int fd;

    memset(out, 0, sizeof(*out));
    memcpy(&d, p->data, sizeof(d));
    if ((fd = open(d.path, O_RDONLY | O_CLOEXEC)) < 0)
        return AB_EIO;
    if (fstat(fd, &st) != 0 || !(buf = malloc(RT_LOG_TAIL_MAX + 1))) {
        close(fd);
        return AB_EIO;
    }
    from = st.st_size > RT_LOG_TAIL_MAX ? st.st_size - RT_LOG_TAIL_MAX : 0;
    got = pread(fd, buf, RT_LOG_TAIL_MAX, from);
    close(fd);
    if (got < 0) {
        free(buf);
        return AB_EIO;
    }
    buf[got] = '\0';
    return rt_log_from_text(buf, (size_t)got, from > 0, p->claimed_ms, q, out);
}
