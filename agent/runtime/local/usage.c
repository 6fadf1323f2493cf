/* Per-sandbox usage for the local runtime (runtime.h, "Usage and logs").
 *
 * Three sources for CPU and memory: the sandbox's cgroup v2 directory, or
 * its v1 memory and cpuacct groups, when it has them; else (or when they
 * cannot be read) a pass over /proc summing the processes that share the
 * namespace init's pid namespace (utime + stime, rss). Disk is the size of
 * the sandbox directory, network the counters of its network namespace
 * (/proc/<init>/net/dev, loopback left out). A sandbox whose init is no
 * longer the process that was started (pid + start time) reads as gone.
 *
 * The probe runs on the loop thread; the read on a worker, from the probe
 * alone. */
#include "agent/runtime/local/lrt.h"

#include "agentbox/common.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define DU_FILES_MAX 200000
#define CGROUP_PATH_MAX 256

/* What a read needs, copied from the sandbox on the loop thread. */
struct usage_probe {
    char dir[LSBX_DIR_MAX];
    pid_t pid;
    uint64_t start_time;
    char cgroup[CGROUP_PATH_MAX];     /* v2; "" → v1 below, or /proc */
    char v1_memory[CGROUP_PATH_MAX];  /* v1 memory group; "" → none */
    char v1_cpuacct[CGROUP_PATH_MAX]; /* v1 cpuacct group; "" → none */
    int64_t cpu_milli, mem_bytes;     /* the pool's sizing, 0 when unknown */
};
_Static_assert(sizeof(struct usage_probe) <= RT_PROBE_DATA_MAX, "usage probe fits rt_probe");

/* The sandbox's cgroup v2 directory, "" when it has none (v1 hosts:
 * lrt_usage_probe_v1 adds the v1 groups). */
static void cgroup_of(const struct lsb *s, char *out, size_t len)
{
    if (len)
        out[0] = '\0';
    if (s->x.cg.v2 && s->x.cg.n > 0)
        ab_strlcpy(out, s->x.cg.dirs[0], len);
}

int lrt_usage_probe_of(const char *dir, pid_t pid, uint64_t start_time, const char *cgroup,
                       int64_t cpu_milli, int64_t mem_bytes, struct rt_probe *out)
{
    struct usage_probe d;

    memset(&d, 0, sizeof(d));
    if (ab_strlcpy(d.dir, dir, sizeof(d.dir)) >= sizeof(d.dir) ||
        ab_strlcpy(d.cgroup, cgroup ? cgroup : "", sizeof(d.cgroup)) >= sizeof(d.cgroup))
        return AB_ELIMIT;
    d.pid = pid;
    d.start_time = start_time;
    d.cpu_milli = cpu_milli;
    d.mem_bytes = mem_bytes;
    memcpy(out->data, &d, sizeof(d));
    return 0;
}

int lrt_usage_probe_v1(struct rt_probe *out, const char *memory, const char *cpuacct)
{
    struct usage_probe d;

    memcpy(&d, out->data, sizeof(d));
    if (ab_strlcpy(d.v1_memory, memory, sizeof(d.v1_memory)) >= sizeof(d.v1_memory) ||
        ab_strlcpy(d.v1_cpuacct, cpuacct, sizeof(d.v1_cpuacct)) >= sizeof(d.v1_cpuacct))
        return AB_ELIMIT;
    memcpy(out->data, &d, sizeof(d));
    return 0;
}

int lrt_usage_probe(struct rt *base, const char *id, struct rt_probe *out)
{
    struct lrt *rt = (struct lrt *)base;
    struct lsb *s = lrt_sbx_find(rt, id);
    char cgroup[CGROUP_PATH_MAX];
    int rc;

    if (!s)
        return AB_ENOENT;
    cgroup_of(s, cgroup, sizeof(cgroup));
    rc = lrt_usage_probe_of(s->x.dir, s->x.pid, s->x.start_time, cgroup, s->pool->cpu_milli,
                            s->pool->mem_bytes, out);
    if (rc == 0 && !s->x.cg.v2 && s->x.cg.n > LCG_V1_CPUACCT)
        rc = lrt_usage_probe_v1(out, s->x.cg.dirs[LCG_V1_MEMORY], s->x.cg.dirs[LCG_V1_CPUACCT]);
    if (rc != 0)
        return rc;
    out->ops = base->ops;
    ab_strlcpy(out->id, s->id, sizeof(out->id));
    ab_strlcpy(out->ns, s->pool->ns, sizeof(out->ns));
    out->claimed_ms = s->claimed_ms;
    return 0;
}

/* --- reading files ---------------------------------------------------------------------- */

/* Reads a small file into buf (NUL-terminated). 0 or AB_EIO. */
static int read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return AB_EIO;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return AB_EIO;
    buf[n] = '\0';
    return 0;
}

/* The value of "key <n>" lines (cpu.stat, memory.stat). */
static bool keyed(const char *text, const char *key, uint64_t *out)
{
    size_t kl = strlen(key);

    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        if (!strncmp(p, key, kl) && p[kl] == ' ')
            return sscanf(p + kl + 1, "%" SCNu64, out) == 1;
    }
    return false;
}

int lrt_usage_cgroup(const char *dir, struct rt_usage *u)
{
    char path[CGROUP_PATH_MAX + 32], buf[8192];
    uint64_t usec = 0, current = 0, v = 0, inactive = 0;

    snprintf(path, sizeof(path), "%s/cpu.stat", dir);
    if (read_small(path, buf, sizeof(buf)) != 0 || !keyed(buf, "usage_usec", &usec))
        return AB_EIO;
    snprintf(path, sizeof(path), "%s/memory.current", dir);
    if (read_small(path, buf, sizeof(buf)) != 0 || sscanf(buf, "%" SCNu64, &current) != 1)
        return AB_EIO;
    u->cpu_seconds = (double)usec / 1e6;
    u->mem_working_set = (double)current;
    snprintf(path, sizeof(path), "%s/memory.stat", dir);
    if (read_small(path, buf, sizeof(buf)) == 0) {
        if (keyed(buf, "anon", &v))
            u->mem_rss = (double)v;
        if (keyed(buf, "file", &v))
            u->mem_cache = (double)v;
        /* cAdvisor's working set: usage minus what could be dropped at once */
        if (keyed(buf, "inactive_file", &inactive))
            u->mem_working_set = inactive < current ? (double)(current - inactive) : 0;
    }
    snprintf(path, sizeof(path), "%s/cpu.max", dir);
    if (read_small(path, buf, sizeof(buf)) == 0) {
        uint64_t quota = 0, period = 0;
        if (sscanf(buf, "%" SCNu64 " %" SCNu64, &quota, &period) == 2 && period > 0)
            u->cpu_count = (int64_t)((quota + period - 1) / period);
    }
    snprintf(path, sizeof(path), "%s/memory.max", dir);
    if (read_small(path, buf, sizeof(buf)) == 0 && sscanf(buf, "%" SCNu64, &v) == 1)
        u->mem_limit = (int64_t)v; /* "max" does not scan: no limit */
    return 0;
}

/* v1 "no limit" is a huge page-rounded number (LONG_MAX rounded down). */
#define V1_UNLIMITED (1ULL << 62)

/* The first of keys present in text (memory.stat: "total_x" counts the
 * group's children too, "x" the group alone; prefer the former). */
static bool keyed2(const char *text, const char *k1, const char *k2, uint64_t *out)
{
    return keyed(text, k1, out) || keyed(text, k2, out);
}

int lrt_usage_cgroup_v1(const char *memory, const char *cpuacct, struct rt_usage *u)
{
    char path[CGROUP_PATH_MAX + 32], buf[8192];
    uint64_t ns = 0, usage = 0, v = 0, inactive = 0;

    snprintf(path, sizeof(path), "%s/cpuacct.usage", cpuacct);
    if (read_small(path, buf, sizeof(buf)) != 0 || sscanf(buf, "%" SCNu64, &ns) != 1)
        return AB_EIO;
    snprintf(path, sizeof(path), "%s/memory.usage_in_bytes", memory);
    if (read_small(path, buf, sizeof(buf)) != 0 || sscanf(buf, "%" SCNu64, &usage) != 1)
        return AB_EIO;
    u->cpu_seconds = (double)ns / 1e9;
    u->mem_working_set = (double)usage;
    snprintf(path, sizeof(path), "%s/memory.stat", memory);
    if (read_small(path, buf, sizeof(buf)) == 0) {
        if (keyed2(buf, "total_rss", "rss", &v))
            u->mem_rss = (double)v;
        if (keyed2(buf, "total_cache", "cache", &v))
            u->mem_cache = (double)v;
        /* cAdvisor's working set, as for v2 */
        if (keyed2(buf, "total_inactive_file", "inactive_file", &inactive))
            u->mem_working_set = inactive < usage ? (double)(usage - inactive) : 0;
    }
    snprintf(path, sizeof(path), "%s/memory.limit_in_bytes", memory);
    if (read_small(path, buf, sizeof(buf)) == 0 && sscanf(buf, "%" SCNu64, &v) == 1 &&
        v < V1_UNLIMITED)
        u->mem_limit = (int64_t)v;
    return 0;
}

static bool ns_inode(long pid, unsigned long *ino)
{
    char path[64];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%ld/ns/pid", pid);
    if (stat(path, &st) != 0)
        return false;
    *ino = (unsigned long)st.st_ino;
    return true;
}

static void du(const char *dir, double *bytes, int *budget)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    if (!d)
        return;
    while ((de = readdir(d)) && *budget > 0) {
        char p[1024];
        struct stat st;
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
        if (lstat(p, &st) != 0)
            continue;
        (*budget)--;
        *bytes += (double)st.st_blocks * 512.0;
        if (S_ISDIR(st.st_mode))
            du(p, bytes, budget);
    }
    closedir(d);
}

/* Receive and transmit bytes of every interface but lo in pid's network namespace. */
static void net_dev(long pid, struct rt_usage *u)
{
    char path[64], buf[8192];

    snprintf(path, sizeof(path), "/proc/%ld/net/dev", pid);
    if (read_small(path, buf, sizeof(buf)) != 0)
        return;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(line, ':');
        char name[32];
        uint64_t rx = 0, tx = 0;
        if (!colon || sscanf(line, " %31[^:]", name) != 1 || !strcmp(name, "lo"))
            continue;
        /* rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ... */
        if (sscanf(colon + 1, " %" SCNu64 " %*u %*u %*u %*u %*u %*u %*u %" SCNu64, &rx, &tx) == 2) {
            u->net_rx_bytes += rx;
            u->net_tx_bytes += tx;
        }
    }
}

/* One pass over /proc: CPU time and rss of the processes in each pending
 * probe's pid namespace. */
static void proc_pass(const bool *pending, const unsigned long *inos, size_t n,
                      struct rt_usage *out)
{
    long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
    DIR *dir = opendir("/proc");
    struct dirent *de;

    while (dir && (de = readdir(dir))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        unsigned long ino;
        if (*end || pid <= 0 || !ns_inode(pid, &ino))
            continue;
        for (size_t i = 0; i < n; i++) {
            if (!pending[i] || inos[i] != ino)
                continue;
            char path[64], buf[1024];
            snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
            if (read_small(path, buf, sizeof(buf)) == 0) {
                char *rp = strrchr(buf, ')');
                unsigned long ut = 0, st = 0;
                long rss = 0;
                /* fields after the comm: state(3) ... utime(14) stime(15) ... rss(24) */
                if (rp && sscanf(rp + 2,
                                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu "
                                 "%*d %*d %*d %*d %*d %*d %*u %*u %ld",
                                 &ut, &st, &rss) == 3) {
                    out[i].cpu_seconds += (double)(ut + st) / (double)tck;
                    out[i].mem_rss += (double)rss * (double)page;
                }
            }
            break;
        }
    }
    if (dir)
        closedir(dir);
    /* no cgroup: resident memory is the working set, the cache is not separable */
    for (size_t i = 0; i < n; i++)
        if (pending[i])
            out[i].mem_working_set = out[i].mem_rss;
}

void lrt_usage_read(const struct rt_probe *p, size_t n, struct rt_usage *out)
{
    struct usage_probe *d = calloc(n ? n : 1, sizeof(*d));
    unsigned long *inos = calloc(n ? n : 1, sizeof(*inos));
    bool *pending = calloc(n ? n : 1, sizeof(*pending));
    bool any = false;

    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof(out[i]));
        out[i].err = AB_ENOENT;
    }
    if (!d || !inos || !pending)
        goto out;
    for (size_t i = 0; i < n; i++) {
        struct rt_usage *u = &out[i];
        int budget = DU_FILES_MAX;

        memcpy(&d[i], p[i].data, sizeof(d[i]));
        if (d[i].pid <= 0 || lsbx_proc_start_time(d[i].pid) != d[i].start_time ||
            !ns_inode(d[i].pid, &inos[i]))
            continue; /* gone, or the pid was reused */
        u->err = 0;
        u->cpu_count = (d[i].cpu_milli + 999) / 1000;
        u->mem_limit = d[i].mem_bytes;
        du(d[i].dir, &u->disk_used, &budget);
        net_dev(d[i].pid, u);
        if (d[i].cgroup[0] && lrt_usage_cgroup(d[i].cgroup, u) == 0)
            continue;
        if (!d[i].cgroup[0] && d[i].v1_memory[0] && d[i].v1_cpuacct[0] &&
            lrt_usage_cgroup_v1(d[i].v1_memory, d[i].v1_cpuacct, u) == 0)
            continue;
        pending[i] = true;
        any = true;
    }
    if (any)
        proc_pass(pending, inos, n, out);
out:
    free(d);
    free(inos);
    free(pending);
}
