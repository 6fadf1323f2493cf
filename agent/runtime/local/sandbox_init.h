/* The init of a local sandbox before its program runs: the steps DESIGN
 * §10a asks of every sandbox (its root, /proc, loopback, hostname, the user
 * namespace, locked mounts, capabilities, no_new_privs, seccomp), in the
 * child, from a plan its parent prepared. Two ways in, the same steps:
 *
 *   lsbx_init_entry  clone()'s entry point in the agent (sandbox.c): the
 *                    child shares the agent's memory until it execs the
 *                    program (so no allocation, no locks, no sanitizer)
 *   lsbx_init_run    in a child of the envd zygote (zygote.h): the same
 *                    steps, then the program's main() is called instead of
 *                    exec'ing it (its start — glibc's, the loader's — was
 *                    paid once by the zygote)
 *
 * A failure writes {step, errno} on errfd and exits 127; errfd reaching EOF
 * means the program runs (exec closed it, or lsbx_init_run did just before
 * calling main). The plan is plain data, with no pointer but seccomp, so the
 * agent can send it to the zygote as it is. */
#ifndef AGENTBOX_RUNTIME_LOCAL_SANDBOX_INIT_H
#define AGENTBOX_RUNTIME_LOCAL_SANDBOX_INIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/filter.h>

#include "agent/runtime/local/sandbox.h"

/* Where the program file is bound inside (alone: nothing else of the host's). */
#define LSBX_PROGRAM_DIR "/.agentbox"
/* argv and envp, NUL-separated, argv first */
#define LSBX_PLAN_STRINGS 16384

enum lsbx_setup_step {
    STEP_MOUNT_PRIVATE = 1,
    STEP_BIND_HOME,
    STEP_BIND_TMP,
    STEP_BIND_RUN,
    STEP_ROOT,
    STEP_PIVOT,
    STEP_PROC,
    STEP_LOOPBACK,
    STEP_HOSTNAME,
    STEP_FORK,
    STEP_EXEC,
    STEP_USERNS,
    STEP_IDS,
    STEP_LOCK,
    STEP_CAPS,
    STEP_NNP,
    STEP_SECCOMP,
    STEP_ETC,
    STEP_NAMESPACES,
};

/* Everything the init needs, prepared by the parent. */
struct lsbx_plan {
    char data[LSBX_DIR_MAX + 8]; /* <dir>/data: the writable space, a tmpfs of disk_bytes */
    char home[LSBX_DIR_MAX + 16];
    char tmp[LSBX_DIR_MAX + 16];
    char run[LSBX_DIR_MAX + 8];
    char log[LSBX_DIR_MAX + 16];
    char root[LSBX_DIR_MAX + 8];    /* <dir>/root: the sandbox's / (a tmpfs) */
    char rpath[LSBX_DIR_MAX + 64];  /* scratch for paths under root */
    char program[LSBX_DIR_MAX];     /* argv[0] on the host: the only file bound from the agent */
    char exec_path[LSBX_DIR_MAX];   /* LSBX_PROGRAM_DIR/<basename of argv[0]> */
    char passwd[LSBX_DIR_MAX + 16]; /* <dir>/passwd, bound on /etc/passwd */
    char group[LSBX_DIR_MAX + 16];  /* <dir>/group, bound on /etc/group */
    char resolv[LSBX_DIR_MAX + 16]; /* <dir>/resolv.conf, bound on /etc/resolv.conf; "" none */
    char root_opts[96];             /* tmpfs options of /, owned by the sandbox's root */
    uint32_t uid_base;
    const struct sock_fprog *seccomp; /* in the memory of the process that clones */
    char hostname[LSBX_ID_MAX + 1];
    int nice; /* the init's priority until its program runs (the
                 spawning thread's: a zygote's child takes it) */
    uint16_t argc, envc;
    uint32_t strings_len;
    char strings[LSBX_PLAN_STRINGS];
    int errfd;         /* write end: {step, errno} on failure */
    int syncfd;        /* the init's end of the sync socket: 'g' (go), 'u' / 'm' (user namespace) */
    int parent_fds[2]; /* descriptors the init closes first (the parent's ends, the zygote's) */
};

/* Packs argv (at least the program) and envp into p->strings: 0, or
 * AB_ELIMIT with err saying which list is too long. */
int lsbx_plan_strings(struct lsbx_plan *p, const char *const *argv, const char *const *envp,
                      char *err, size_t errlen);

/* What a step reported on errfd was doing, for the spawn's error. */
const char *lsbx_step_name(int step);

/* clone()'s entry point (arg: the plan): sets up and execs p->exec_path.
 * Never returns. */
int lsbx_init_entry(void *arg);

/* The same steps, then exit(run(argc, argv)) with the plan's environment,
 * a fresh stack protector value and the process dumpable again (as exec
 * would leave it). Never returns. */
void lsbx_init_run(const struct lsbx_plan *p, int (*run)(int argc, char **argv))
    __attribute__((noreturn));

#endif
