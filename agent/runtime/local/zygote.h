/* The envd zygote: one agentbox-envd process per local runtime, exec'd
 * once, that forks every sandbox's init. A sandbox's envd then starts
 * without an exec: glibc's start (on a VM ~90 CPUID instructions, each an
 * exit to the hypervisor: ~0.6 ms of CPU, bench_sandbox_floor), the ELF
 * mapping and the page faults of a fresh image are paid once per agent,
 * not once per sandbox.
 *
 * Each spawn (sandbox.c, on a worker): the agent sends the plan
 * (sandbox_init.h) and the init's two descriptors (errfd, the sync
 * socket's init end) on a SOCK_SEQPACKET socket; the zygote makes a new
 * pid namespace for its next child (unshare, then setns back, so every
 * sandbox gets one of its own), forks, answers the child's pid and forgets
 * the plan. The child unshares its mount, uts, ipc and net namespaces,
 * says 'r' on the sync socket, and from there runs the same steps as an
 * exec'd init (lsbx_init_run), ending in envd's main() instead of exec.
 * The sandbox is the zygote's child, not the agent's: the zygote reaps it,
 * the agent tracks it by pid and start time as it does an adopted one.
 *
 * What a sandbox inherits from the zygote is the zygote's memory, so it
 * holds nothing that is not public: no environment but PATH, no plan once
 * the fork is made, no key or token ever (a sandbox's envd token reaches
 * envd with /init, after the fork). Every sandbox's envd starts from the
 * same address layout (a static envd's code was at one address already)
 * but with a stack protector value of its own (sandbox_init.c).
 *
 * Agent side: lzy_start / lzy_spawn / lzy_free, any thread (one request at
 * a time per zygote, under its lock); a zygote that died is started again
 * by the next spawn. A program that is not an agentbox-envd (no answer to
 * the hello) is refused by lzy_start: the runtime then execs it per
 * sandbox as before. */
#ifndef AGENTBOX_RUNTIME_LOCAL_ZYGOTE_H
#define AGENTBOX_RUNTIME_LOCAL_ZYGOTE_H

#include <stddef.h>
#include <sys/types.h>
#include <linux/filter.h>

#include "agent/runtime/local/sandbox_init.h"

/* How envd is told it is the zygote: `agentbox-envd --zygote <fd>`. */
#define LZY_FLAG "--zygote"

struct lzy;

/* Starts program as the zygote and hands it the seccomp filter every
 * sandbox installs. 0, or AB_EIO with err saying why (the program cannot
 * be started, or did not answer as a zygote within 5 s). */
int lzy_start(const char *program, const struct sock_fprog *filter, struct lzy **out, char *err,
              size_t errlen);

/* Forks a sandbox init from plan; errfd and syncfd are sent (the caller
 * keeps and closes its own copies). *pid is the init's pid in the agent's
 * pid namespace. 0, or AB_EIO with err naming the zygote and the cause
 * (after one restart of a zygote found dead). */
int lzy_spawn(struct lzy *z, const struct lsbx_plan *plan, int errfd, int syncfd, pid_t *pid,
              char *err, size_t errlen);

/* The zygote's pid (tests). */
pid_t lzy_pid(struct lzy *z);

/* Stops the zygote (its sandboxes live on) and frees z. NULL is a no-op. */
void lzy_free(struct lzy *z);

/* envd's side: serves the agent on fd until it closes it; run is envd's
 * main. Returns the process's exit code. */
int lzy_serve(int fd, int (*run)(int argc, char **argv));

#endif
