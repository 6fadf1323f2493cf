/* Per-sandbox cgroups (see cgroup.h). */
#include "agent/runtime/local/cgroup.h"

#include "agentbox/common.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CG_ROOT "/sys/fs/cgroup"
#define CG_PERIOD_US 100000
#define AGENT_LEAF "agentbox-agent" /* v2: where the agent moves itself (make_parent) */

/* The first three are required; cpuacct only gives usage (usage.c). */
static const char *const v1_controllers[LCG_DIRS] = {"memory", "pids", "cpu", "cpuacct"};
#define V1_REQUIRED 3

static int read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -1;
    n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

static int write_str(const char *dir, const char *file, const char *val)
{
    char path[LCG_PATH_MAX + 64];
    int fd;
    ssize_t n;
    size_t len = strlen(val);

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    n = write(fd, val, len);
    close(fd);
    return n == (ssize_t)len ? 0 : -1;
}

static bool exists(const char *dir, const char *file)
{
    char path[LCG_PATH_MAX + 64];

    snprintf(path, sizeof(path), "%s/%s", dir, file);
    return access(path, F_OK) == 0;
}

/* The agent's own cgroup path in the hierarchy holding controller ("" for
 * the unified one), from /proc/self/cgroup. */
static int own_path(const char *controller, char *out, size_t len)
{
    char buf[4096], *line, *save = NULL;

    if (read_small("/proc/self/cgroup", buf, sizeof(buf)) != 0)
        return -1;
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c2 = '\0';
        if (controller[0] == '\0') {
            if (c2 == c1 + 1) /* "0::/path" */
                return ab_strlcpy(out, strcmp(c2 + 1, "/") ? c2 + 1 : "", len) < len ? 0 : -1;
            continue;
        }
        for (char *tok = c1 + 1, *sv = NULL, *t = strtok_r(tok, ",", &sv); t;
             t = strtok_r(NULL, ",", &sv))
            if (strcmp(t, controller) == 0)
                return ab_strlcpy(out, strcmp(c2 + 1, "/") ? c2 + 1 : "", len) < len ? 0 : -1;
    }
    return -1;
}

/* Pure cgroup v2 with memory and pids available to the agent's cgroup. */
static bool v2_usable(char *base, size_t len)
{
    char own[LCG_PATH_MAX], ctl[512];

    if (access(CG_ROOT "/cgroup.controllers", F_OK) != 0 || own_path("", own, sizeof(own)) != 0)
        return false;
    /* once moved into its leaf, the agent's cgroup is still the parent */
    {
        size_t ol = strlen(own), ll = strlen("/" AGENT_LEAF);
        if (ol >= ll && strcmp(own + ol - ll, "/" AGENT_LEAF) == 0)
            own[ol - ll] = '\0';
    }
    if ((size_t)snprintf(base, len, CG_ROOT "%s", own) >= len)
        return false;
    if (read_small(CG_ROOT "/cgroup.controllers", ctl, sizeof(ctl)) != 0)
        return false;
    return strstr(ctl, "memory") && strstr(ctl, "pids");
}

/* Two controllers mounted as one hierarchy (cpu,cpuacct: the same root). */
static bool same_hierarchy(const char *a, const char *b)
{
    struct stat sa, sb;

    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* dirs[i] is the directory of an earlier controller (a joint mount). */
static bool is_dup(const struct lcg *cg, int i)
{
    for (int j = 0; j < i; j++)
        if (strcmp(cg->dirs[i], cg->dirs[j]) == 0)
            return true;
    return false;
}

int lcg_locate(const char *id, struct lcg *cg, char *err, size_t errlen)
{
    char base[LCG_PATH_MAX], own[LCG_PATH_MAX];

    memset(cg, 0, sizeof(*cg));
    if (v2_usable(base, sizeof(base))) {
        cg->v2 = true;
        cg->n = 1;
        if ((size_t)snprintf(cg->dirs[0], LCG_PATH_MAX, "%s/agentbox/%s", base, id) >= LCG_PATH_MAX)
            goto too_long;
        return 0;
    }
    for (int i = 0; i < LCG_DIRS; i++) {
        char mnt[64];
        snprintf(mnt, sizeof(mnt), CG_ROOT "/%s", v1_controllers[i]);
        if (!exists(mnt, "cgroup.procs") || own_path(v1_controllers[i], own, sizeof(own)) != 0) {
            if (i >= V1_REQUIRED)
                break; /* no cpuacct: usage falls back to /proc */
            snprintf(err, errlen,
                     "no cgroup '%s' controller (neither v2 at " CG_ROOT " nor v1 at %s): mount "
                     "it (mount -t cgroup -o %s cgroup %s) or delegate cgroup v2 to the agent",
                     v1_controllers[i], mnt, v1_controllers[i], mnt);
            return AB_ENOENT;
        }
        if (i == LCG_V1_CPUACCT && same_hierarchy(CG_ROOT "/cpu", mnt)) {
            ab_strlcpy(cg->dirs[i], cg->dirs[2], LCG_PATH_MAX); /* cpu,cpuacct: one group */
        } else if ((size_t)snprintf(cg->dirs[i], LCG_PATH_MAX, "%s%s/agentbox/%s", mnt, own, id) >=
                   LCG_PATH_MAX) {
            goto too_long;
        }
        cg->n = i + 1;
    }
    return 0;
too_long:
    snprintf(err, errlen, "the cgroup path of sandbox %s is longer than %d bytes", id,
             LCG_PATH_MAX);
    return AB_ELIMIT;
}

static int enable(const char *dir)
{
    if (write_str(dir, "cgroup.subtree_control", "+memory +pids +cpu") == 0)
        return 0;
    return write_str(dir, "cgroup.subtree_control", "+memory +pids");
}

/* Moves the agent (this process, all its threads) into dir/AGENT_LEAF.
 * Other processes in dir keep it busy: then the agent needs a cgroup of its
 * own (systemd: Delegate=yes), which lcg_create's error says. */
static int move_agent_to_leaf(const char *dir)
{
    char leaf[LCG_PATH_MAX + 32], pid[24];

    snprintf(leaf, sizeof(leaf), "%s/" AGENT_LEAF, dir);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    if ((mkdir(leaf, 0755) != 0 && errno != EEXIST) || write_str(leaf, "cgroup.procs", pid) != 0)
        return -1;
    return 0;
}

/* mkdir of dir's parent ("agentbox"), enabling the v2 controllers on the way. */
static int make_parent(const struct lcg *cg, const char *dir)
{
    char parent[LCG_PATH_MAX];
    char *slash;

    ab_strlcpy(parent, dir, sizeof(parent));
    slash = strrchr(parent, '/');
    *slash = '\0';
    if (mkdir(parent, 0755) != 0 && errno != EEXIST)
        return -1;
    if (cg->v2) {
        char grand[LCG_PATH_MAX];
        ab_strlcpy(grand, parent, sizeof(grand));
        *strrchr(grand, '/') = '\0';
        /* the agent's cgroup must delegate the controllers to agentbox/ and
         * agentbox/ to each sandbox; v2 allows that only in a cgroup without
         * processes of its own (EBUSY), so the agent first moves itself into
         * the leaf AGENT_LEAF beside agentbox/ */
        if (enable(grand) != 0) {
            if (errno != EBUSY || move_agent_to_leaf(grand) != 0 || enable(grand) != 0)
                return -1;
        }
        if (write_str(parent, "cgroup.subtree_control", "+memory +pids +cpu") != 0 &&
            write_str(parent, "cgroup.subtree_control", "+memory +pids") != 0)
            return -1;
    }
    return 0;
}

static int set_limits(const struct lcg *cg, const struct lcg_limits *l)
{
    char v[64];

    if (cg->v2) {
        const char *d = cg->dirs[0];
        snprintf(v, sizeof(v), "%lld", (long long)l->pids_max);
        if (write_str(d, "pids.max", v) != 0)
            return -1;
        if (l->mem_bytes > 0) {
            snprintf(v, sizeof(v), "%lld", (long long)l->mem_bytes);
            if (write_str(d, "memory.max", v) != 0)
                return -1;
            if (exists(d, "memory.swap.max"))
                write_str(d, "memory.swap.max", "0");
        }
        if (l->cpu_milli > 0 && exists(d, "cpu.max")) {
            snprintf(v, sizeof(v), "%lld %d", (long long)l->cpu_milli * CG_PERIOD_US / 1000,
                     CG_PERIOD_US);
            if (write_str(d, "cpu.max", v) != 0)
                return -1;
        }
        return 0;
    }
    if (l->mem_bytes > 0) {
        snprintf(v, sizeof(v), "%lld", (long long)l->mem_bytes);
        if (write_str(cg->dirs[0], "memory.limit_in_bytes", v) != 0)
            return -1;
        /* memory + swap, or the sandbox could swap its way past the limit */
        if (exists(cg->dirs[0], "memory.memsw.limit_in_bytes") &&
            write_str(cg->dirs[0], "memory.memsw.limit_in_bytes", v) != 0)
            return -1;
    }
    snprintf(v, sizeof(v), "%lld", (long long)l->pids_max);
    if (write_str(cg->dirs[1], "pids.max", v) != 0)
        return -1;
    if (l->cpu_milli > 0) {
        snprintf(v, sizeof(v), "%d", CG_PERIOD_US);
        if (write_str(cg->dirs[2], "cpu.cfs_period_us", v) != 0)
            return -1;
        snprintf(v, sizeof(v), "%lld", (long long)l->cpu_milli * CG_PERIOD_US / 1000);
        if (write_str(cg->dirs[2], "cpu.cfs_quota_us", v) != 0)
            return -1;
    }
    return 0;
}

int lcg_create(const char *id, const struct lcg_limits *l, struct lcg *cg, char *err, size_t errlen)
{
    int rc = lcg_locate(id, cg, err, errlen);

    if (rc != 0)
        return rc;
    if (l->pids_max <= 0) {
        snprintf(err, errlen, "pids limit must be a positive number, got %lld",
                 (long long)l->pids_max);
        return AB_EINVAL;
    }
    /* a leftover of a crashed agent with the same id: empty it first */
    lcg_kill_all(cg);
    lcg_remove(cg);
    for (int i = 0; i < cg->n; i++) {
        if (is_dup(cg, i))
            continue;
        if (make_parent(cg, cg->dirs[i]) != 0 || mkdir(cg->dirs[i], 0755) != 0) {
            snprintf(err, errlen, "cannot create cgroup %s: %s%s", cg->dirs[i], strerror(errno),
                     cg->v2 && errno == EBUSY
                         ? " (cgroup v2: the agent's cgroup holds other processes; run the "
                           "agent in a cgroup of its own with the controllers delegated, e.g. "
                           "systemd Delegate=yes)"
                         : "");
            lcg_remove(cg);
            return AB_EIO;
        }
    }
    if (set_limits(cg, l) != 0) {
        snprintf(err, errlen, "cannot set the limits of cgroup %s: %s", cg->dirs[0],
                 strerror(errno));
        lcg_remove(cg);
        return AB_EIO;
    }
    return 0;
}

int lcg_enter(const struct lcg *cg, pid_t pid, char *err, size_t errlen)
{
    char v[24];

    snprintf(v, sizeof(v), "%d", (int)pid);
    for (int i = 0; i < cg->n; i++) {
        if (write_str(cg->dirs[i], "cgroup.procs", v) != 0) {
            snprintf(err, errlen, "cannot move the sandbox into cgroup %s: %s", cg->dirs[i],
                     strerror(errno));
            return AB_EIO;
        }
    }
    return 0;
}

/* Calls fn(pid) for every pid in dir/cgroup.procs; the number of pids. */
static int each_pid(const char *dir, void (*fn)(pid_t))
{
    char path[LCG_PATH_MAX + 32], buf[4096];
    int fd, n = 0;
    ssize_t r;
    size_t have = 0;

    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    /* line by line through a bounded buffer: a fork bomb's list is long */
    while ((r = read(fd, buf + have, sizeof(buf) - 1 - have)) > 0) {
        char *p = buf, *nl;
        have += (size_t)r;
        buf[have] = '\0';
        while ((nl = strchr(p, '\n')) != NULL) {
            *nl = '\0';
            if (fn)
                fn((pid_t)atoi(p));
            n++;
            p = nl + 1;
        }
        have = (size_t)(buf + have - p);
        memmove(buf, p, have);
    }
    close(fd);
    return n;
}

static void kill9(pid_t pid)
{
    if (pid > 0)
        kill(pid, SIGKILL);
}

int lcg_kill_all(const struct lcg *cg)
{
    int n = 0;

    for (int i = 0; i < cg->n; i++)
        n += each_pid(cg->dirs[i], kill9);
    return n;
}

int lcg_kill_members(const struct lcg *cg)
{
    return cg->n > 0 ? each_pid(cg->dirs[0], kill9) : 0;
}

bool lcg_is_empty(const struct lcg *cg)
{
    for (int i = 0; i < cg->n; i++)
        if (each_pid(cg->dirs[i], NULL) > 0)
            return false;
    return true;
}

int lcg_remove(const struct lcg *cg)
{
    int rc = 0;

    for (int i = 0; i < cg->n; i++)
        if (!is_dup(cg, i) && rmdir(cg->dirs[i]) != 0 && errno != ENOENT)
            rc = errno == EBUSY ? AB_EBUSY : AB_EIO;
    return rc;
}
