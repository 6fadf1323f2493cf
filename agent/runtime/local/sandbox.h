/* One local sandbox, isolated as DESIGN §10a requires: a process tree in
 * its own user, pid, mount, uts, ipc, net and cgroup namespaces.
 *
 * Layout of a sandbox directory <statedir>/sandboxes/<id>/ (mode 0700;
 * <statedir>/sandboxes is a tmpfs of its own when lrt_new found it empty):
 *   data/        the writable space: a tmpfs of disk_bytes mounted here, in
 *                the agent's namespace (a full disk is ENOSPC inside only)
 *   data/envd.log  stdout and stderr of the program: on the sandbox's own
 *                space, so a sandbox writing to it (its root can, through
 *                /proc/1/fd/1) fills its own disk and no one else's; not
 *                visible inside (only home and tmp are bound there)
 *   home -> data/home  bind-mounted on /home/user (host owner uid_base+1000)
 *   tmp -> data/tmp    bind-mounted on /tmp (mode 1777, owner uid_base)
 *   run/         bind-mounted on /run/agentbox; envd listens on
 *                run/envd.sock. Given back to host root once envd listens
 *                (lsbx_lock_socket), so the sandbox cannot swap the socket.
 *   passwd, group  the sandbox's own accounts (root, user 1000), bound on
 *                /etc/passwd and /etc/group
 *   resolv.conf  names the egress gateway's DNS address; bound on /etc/resolv.conf
 *   state.rec    what a restarted agent needs to re-adopt or reap it, and
 *                envd's access token (mode 0600)
 *
 * Inside: / is a tmpfs with read-only binds of the host's system
 * directories, the program file alone at /.agentbox/<name>, a fresh /proc
 * (kernel files masked or read-only), a minimal /dev; every writable mount
 * nodev,nosuid. Sandbox ids 0-65535 are host ids uid_base.. (no host root);
 * the mounts are locked by a mount namespace owned by that user namespace;
 * the capabilities are Docker's default minus NET_RAW and MKNOD;
 * no_new_privs; the seccomp allow-list of seccomp.c. One cgroup per sandbox
 * (cgroup.h) holds every process of it.
 *
 * Process tree: pid 1 of the namespace is the program (envd), which reaps
 * every child. Before that it is a child of the envd zygote (o->zygote,
 * zygote.h: envd's main is called, not exec'd) or a clone(CLONE_VM) of the
 * agent (sharing its memory on a small stack of its own: nothing is copied,
 * and it execs the program); either way it sets up mounts, loopback and
 * hostname as host root, then enters the user namespace (the parent writes
 * the maps) and confines itself (sandbox_init.h). SIGKILL to
 * pid 1 ends the whole namespace. With an egress namespace (o->egress) the
 * sandbox's network namespace gets one veth into it before the program runs
 * (agent/egress/netns.h): its only way out is the agent's egress gateway.
 *
 * Functions here block for at most a few seconds (spawn waits for setup) and
 * may run on any thread; one thread at a time per struct lsbx. */
#ifndef AGENTBOX_RUNTIME_LOCAL_SANDBOX_H
#define AGENTBOX_RUNTIME_LOCAL_SANDBOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "agent/egress/netns.h"
#include "agent/runtime/local/cgroup.h"

#define LSBX_INNER_RUN "/run/agentbox"
#define LSBX_INNER_SOCKET LSBX_INNER_RUN "/envd.sock"
#define LSBX_HOME "/home/user"
#define LSBX_LOG "data/envd.log" /* below the sandbox directory */
#define LSBX_LOG_OLD "envd.log"  /* where agents before it kept the log */
#define LSBX_ID_MAX 63
#define LSBX_DIR_MAX 200 /* and <dir>/run/envd.sock must fit sun_path (108 bytes) */
#define LSBX_ARGV_MAX 32
#define LSBX_ENV_MAX 64
#define LSBX_SETUP_TIMEOUT_MS 5000
/* Sandbox uids and gids 0-65535 are host ids uid_base..uid_base+65535. */
#define LSBX_UID_BASE_DEFAULT 100000U
#define LSBX_UID_COUNT 65536U
#define LSBX_USER_UID 1000U            /* `user`, home LSBX_HOME */
#define LSBX_DISK_DEFAULT (1ULL << 30) /* writable space (home + /tmp) */
#define LSBX_INODES_MAX 262144U
#define LSBX_PIDS_DEFAULT 1024
#define LSBX_TOKEN_MAX 512
/* a sandbox program's environment unless the options give one */
#define LSBX_ENV_PATH "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define LSBX_ENV_HOME "HOME=" LSBX_HOME

struct lzy;

struct lsbx_options {
    const char *id;  /* [a-z0-9-], at most LSBX_ID_MAX */
    const char *dir; /* sandbox directory; created (must not exist yet) */
    /* NULL, or a directory of the agent's (made if missing) for what every
     * sandbox's is the same: /etc/passwd and /etc/group, resolv.conf per
     * egress slot, the mount point of the sandbox's root (mounted in its
     * own mount namespace only). Each is an ext4 inode a spawn and its
     * removal no longer make and free (most of a spawn's CPU under churn). */
    const char *shared_dir;
    /* NULL, or a skeleton lsbx_recycle_dir left: renamed to dir when it
     * exists, instead of making the directory and its fixed entries */
    const char *spare;
    const char *hostname;    /* NULL → id */
    const char *const *argv; /* program run as pid 2, NULL-terminated; argv[0] is a path */
    const char *const *envp; /* NULL → empty environment plus PATH and HOME */
    /* The agent's egress namespace (borrowed) and this sandbox's slot in it:
     * the veth is attached at spawn. NULL: no network but loopback. */
    const struct egress_netns_config *egress;
    uint32_t egress_slot;
    uint32_t uid_base;   /* 0 → LSBX_UID_BASE_DEFAULT; at least 65536; the runtime gives
                            each sandbox a slice of its own (no host uid shared) */
    uint64_t disk_bytes; /* home + /tmp; 0 → LSBX_DISK_DEFAULT (a pool's ephemeral-storage);
                            at most mem_bytes / 2 (the space is memory) */
    int64_t mem_bytes;   /* cgroup memory limit; 0 → none beyond the host's */
    int64_t cpu_milli;   /* cgroup CPU quota in thousandths of a CPU; 0 → none */
    int64_t pids_max;    /* cgroup pids limit; 0 → LSBX_PIDS_DEFAULT */
    /* NULL: the init is a clone of the caller that execs argv[0]. Else the
     * envd zygote (zygote.h, borrowed) forks it and it calls envd's main:
     * argv[0] must then be the zygote's own program. */
    struct lzy *zygote;
};

struct lsbx {
    char id[LSBX_ID_MAX + 1];
    char dir[LSBX_DIR_MAX];
    char socket[LSBX_DIR_MAX + 32]; /* host path of envd's socket */
    pid_t pid;                      /* pid 1 of the namespace, as the host sees it */
    uint64_t start_time;            /* /proc/<pid>/stat field 22, against pid reuse */
    bool is_child;                  /* ours to waitpid (false after re-adoption) */
    bool internet;                  /* its claim allows internet access (the policy's switch) */
    bool egress;                    /* a veth into the egress namespace was attached */
    int64_t created_ms;             /* wall clock */
    uint32_t uid_base;              /* host id of its uid 0 (its own slice of LSBX_UID_COUNT ids) */
    struct lcg cg; /* its cgroups (memory, pids, cpu); located again on re-adoption */
    /* envd's access token: 64 random hex digits made at spawn, or the one a
     * claim brought; kept in the state record (mode 0600) */
    char token[LSBX_TOKEN_MAX + 1];
    json_t *info; /* caller's data persisted in the state record; owned, may be NULL */
};

/* Creates the directory and starts the sandbox. On success *s describes it
 * and the state record is written. On failure nothing is left behind (processes
 * killed, directory removed) and err says which step failed. */
int lsbx_spawn(const struct lsbx_options *o, struct lsbx *s, char *err, size_t errlen);

/* Writes s's state record (also after changing s->info). */
int lsbx_state_write(const struct lsbx *s);
/* The two halves of lsbx_state_write, so that the loop thread builds the
 * text and a worker writes it: the JSON of *s (caller frees; it holds the
 * token: bzero it) or NULL; and the write of text as the record
 * (lsbx_record_write). One writer per directory at a time. */
char *lsbx_state_text(const struct lsbx *s);
int lsbx_state_write_text(const char *dir, const char *text);

/* Reads the state record of dir into *s (is_child false); a state.json of
 * an earlier agent when there is no record. AB_ENOENT / AB_EINVAL. */
int lsbx_state_read(const char *dir, struct lsbx *s);

/* The state record (state.c): <dir>/state.rec (mode 0600), two slots
 * written in turn in place, each a header with generation, length and
 * checksum and the text. A write never touches the slot of the newest valid
 * generation, so an agent killed mid-write leaves the previous one readable;
 * no new inode per write (the first write, and a text that outgrows the
 * slots, make the file anew: temporary file + rename). Blocking; one writer
 * per directory at a time. */
int lsbx_record_write(const char *dir, const char *text);
/* The newest valid text (caller frees; NUL-terminated, *len without it) and
 * its generation (may be NULL). AB_ENOENT without a record file, AB_EINVAL
 * when no slot is valid. */
int lsbx_record_read(const char *dir, char **text, size_t *len, uint64_t *gen);
/* True when dir has a record (or an earlier agent's state.json). */
bool lsbx_record_exists(const char *dir);

/* True when s->pid still runs the process that was started (same start time). */
bool lsbx_is_alive(const struct lsbx *s);
/* True when a connect() to envd's socket succeeds (non-blocking) and the
 * socket is a socket, not a link somewhere else. */
bool lsbx_socket_answers(const struct lsbx *s);

/* Once envd listens (and before any code of a tenant runs): gives the
 * socket's directory back to the host's root, so the sandbox can no longer
 * replace the socket with a link to another one. Refuses (AB_EDENIED) when
 * the socket is not a socket. */
int lsbx_lock_socket(const struct lsbx *s);

/* Whether this host can isolate sandboxes as DESIGN §10a requires: user
 * namespaces (with the uid_base range mappable), seccomp filters, cgroup
 * memory and pids controllers the agent may create groups in. 0, or
 * AB_EDENIED with err naming what is missing and how to fix it. The local
 * runtime never starts without (no weaker fallback). */
int lsbx_check_host(uint32_t uid_base, char *err, size_t errlen);

/* Sends SIGKILL to pid 1 (which ends the namespace), to every process in
 * the sandbox's cgroups, after checking pid 1's start time. Does not wait. */
void lsbx_kill(struct lsbx *s);
/* Non-blocking: true once pid 1 is gone (reaps our own children)
 * and the sandbox's cgroups hold no process. */
bool lsbx_is_gone(struct lsbx *s);
/* Removes the cgroups and the directory tree (never following symlinks).
 * AB_EBUSY while a process is still in the cgroups. */
int lsbx_remove_dir(const struct lsbx *s);
/* lsbx_remove_dir, but the directory's skeleton (itself, the writable
 * space's mount point, run/, the home and tmp links: nothing the sandbox
 * wrote) is renamed to spare for the next spawn (lsbx_options.spare), so
 * neither makes those inodes again. Anything unexpected in it (a mount, a
 * file below the mount point, a taken spare name): removed as before. */
int lsbx_recycle_dir(const struct lsbx *s, const char *spare);
/* kill + wait up to timeout_ms for is_gone + remove_dir; frees info.
 * Returns AB_ETIMEOUT if a process survived (the directory is kept then). */
int lsbx_destroy(struct lsbx *s, int timeout_ms);
/* Frees what *s owns without touching processes. */
void lsbx_release(struct lsbx *s);

/* /proc/<pid>/stat start time; 0 when the process does not exist. */
uint64_t lsbx_proc_start_time(pid_t pid);

#endif
