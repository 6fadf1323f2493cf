/* One cgroup per local sandbox (DESIGN §10a): the pool's memory limit (an
 * OOM kill stays inside), CPU quota and a pids limit. cgroup v2 where the
 * host gives the agent a unified hierarchy with those controllers, v1
 * controllers (memory, pids, cpu under /sys/fs/cgroup/<controller>, and
 * cpuacct when mounted: the sandbox's CPU time) otherwise. A sandbox's cgroups are <agent's own
 * cgroup>/agentbox/<id> in each hierarchy, so a sandbox stays inside whatever limits the agent has.
 * Blocking file I/O; any thread. */
#ifndef AGENTBOX_RUNTIME_LOCAL_CGROUP_H
#define AGENTBOX_RUNTIME_LOCAL_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LCG_PATH_MAX 256
#define LCG_DIRS 4 /* v1: memory, pids, cpu, cpuacct (optional); v2: one */
#define LCG_V1_MEMORY 0
#define LCG_V1_CPUACCT 3

struct lcg_limits {
    int64_t mem_bytes; /* 0 → no limit of its own */
    int64_t cpu_milli; /* 0 → no quota */
    int64_t pids_max;  /* must be > 0 */
};

struct lcg {
    bool v2;
    int n; /* directories in use: v2 1; v1 3, or 4 with cpuacct */
    /* v1: memory, pids, cpu, cpuacct (the cpu directory itself when the
     * host mounts cpu,cpuacct together); v2: dirs[0] */
    char dirs[LCG_DIRS][LCG_PATH_MAX];
};

/* The paths of sandbox id's cgroups, without creating anything.
 * AB_ENOENT (err names the missing controller and the fix) when this host
 * lacks what isolation needs. */
int lcg_locate(const char *id, struct lcg *cg, char *err, size_t errlen);

/* Creates the cgroups (fresh: an old one of the same id is emptied and
 * removed first) and writes the limits. On failure nothing is left. */
int lcg_create(const char *id, const struct lcg_limits *l, struct lcg *cg, char *err,
               size_t errlen);

/* Moves pid (and so its future children) into the cgroups. */
int lcg_enter(const struct lcg *cg, pid_t pid, char *err, size_t errlen);

/* SIGKILL to every process in the cgroups; the number signalled. */
int lcg_kill_all(const struct lcg *cg);

/* The same from the first hierarchy's list only: every process lcg_enter
 * put in (and every child of one) is in each hierarchy, and nothing in a
 * sandbox can move a process, so for a sandbox's own processes this is all
 * of them at a quarter of the reads and signals of v1's four hierarchies.
 * For the repeated kill while a sandbox dies; lcg_kill_all elsewhere. */
int lcg_kill_members(const struct lcg *cg);

/* True when no process is left in the cgroups (or they do not exist). */
bool lcg_is_empty(const struct lcg *cg);

/* Removes the cgroups (they must be empty). 0, or AB_EBUSY while a process
 * is still inside. Missing directories are fine. */
int lcg_remove(const struct lcg *cg);

#endif
