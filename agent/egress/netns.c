/* The egress namespace through `ip` and `nft` (once per agent), the
 * sandboxes' veths through rtnetlink (netlink.h: once per spawn and
 * removal, so no process there). */
#include "agent/egress/netns.h"

#include "agent/egress/netlink.h"

#include "agentbox/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define NETNS_DIR "/run/netns"
#define TOOL_ERR_MAX 512

/* --- pure parts ----------------------------------------------------------------------- */

int egress_netns_config_check(const struct egress_netns_config *c, char *err, size_t errlen)
{
    size_t n = c->name ? strlen(c->name) : 0;
    if (n == 0 || n > EGRESS_NETNS_NAME_MAX || c->name[0] == '.' || c->name[0] == '-' ||
        strspn(c->name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != n) {
        snprintf(err, errlen,
                 "egress namespace name must be 1-%d characters of [A-Za-z0-9._-], not starting "
                 "with '.' or '-'",
                 EGRESS_NETNS_NAME_MAX);
        return AB_EINVAL;
    }
    if (c->range.net.family != AF_INET || c->range.bits < 8 || c->range.bits > 28) {
        snprintf(err, errlen,
                 "egress address range must be an IPv4 CIDR from /8 to /28 (e.g. "
                 "10.200.0.0/16)");
        return AB_EINVAL;
    }
    if (c->tcp_port == 0 || c->dns_port == 0 || c->tcp_port == c->dns_port) {
        snprintf(err, errlen, "egress gateway TCP and DNS ports must be distinct and non-zero");
        return AB_EINVAL;
    }
    return 0;
}

uint32_t egress_netns_slots(const struct egress_netns_config *c)
{
    if (c->range.net.family != AF_INET || c->range.bits > 30)
        return 0;
    return (uint32_t)1 << (30 - c->range.bits);
}

static uint32_t v4(const struct egress_addr *a)
{
    return (uint32_t)a->a[0] << 24 | (uint32_t)a->a[1] << 16 | (uint32_t)a->a[2] << 8 | a->a[3];
}

static void set_v4(struct egress_addr *a, uint32_t x)
{
    memset(a, 0, sizeof(*a));
    a->family = AF_INET;
    a->a[0] = (uint8_t)(x >> 24), a->a[1] = (uint8_t)(x >> 16);
    a->a[2] = (uint8_t)(x >> 8), a->a[3] = (uint8_t)x;
}

int egress_netns_link(const struct egress_netns_config *c, uint32_t slot, struct egress_link *out)
{
    if (slot >= egress_netns_slots(c))
        return AB_ELIMIT;
    uint32_t base = v4(&c->range.net) + slot * 4;
    memset(out, 0, sizeof(*out));
    out->slot = slot;
    snprintf(out->egress_if, sizeof(out->egress_if), "eg%u", slot);
    set_v4(&out->gateway, base + 1);
    set_v4(&out->sandbox, base + 2);
    return 0;
}

/* Sandbox links are the "eg" interfaces; the gateway answers only on them
 * (and lo, for itself). REDIRECT rewrites the destination to the address of
 * the interface the packet came in on, so the gateway listens on the wildcard
 * address and reads the original destination with SO_ORIGINAL_DST. */
int egress_netns_ruleset(const struct egress_netns_config *c, char *buf, size_t len)
{
    int n = snprintf(buf, len,
                     "table inet " EGRESS_NFT_TABLE "\n"
                     "delete table inet " EGRESS_NFT_TABLE "\n"
                     "table inet " EGRESS_NFT_TABLE " {\n"
                     "  chain prerouting {\n"
                     "    type nat hook prerouting priority dstnat; policy accept;\n"
                     "    iifname \"eg*\" udp dport 53 redirect to :%u\n"
                     "    iifname \"eg*\" tcp dport 53 redirect to :%u\n"
                     "    iifname \"eg*\" meta l4proto tcp redirect to :%u\n"
                     "  }\n"
                     "  chain input {\n"
                     "    type filter hook input priority filter; policy drop;\n"
                     "    iif \"lo\" accept\n"
                     "    ct state established,related accept\n"
                     "    iifname \"eg*\" ct status dnat tcp dport { %u, %u } accept\n"
                     "    iifname \"eg*\" ct status dnat udp dport %u accept\n"
                     "  }\n"
                     "  chain forward {\n"
                     "    type filter hook forward priority filter; policy drop;\n"
                     "  }\n"
                     "}\n",
                     c->dns_port, c->dns_port, c->tcp_port, c->tcp_port, c->dns_port, c->dns_port);
    if (n < 0 || (size_t)n >= len)
        return AB_ELIMIT;
    return n;
}

/* --- running the tools ---------------------------------------------------------------- */

/* Fixed directories, not $PATH: the agent runs these as root. */
static const char *tool_path(const char *name, char *path, size_t len)
{
    static const char *const dirs[] = {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"};
    for (size_t i = 0; i < AB_ARRAY_LEN(dirs); i++) {
        snprintf(path, len, "%s%s", dirs[i], name);
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

/* Writes all of s to fd, a pipe whose reader may die first: SIGPIPE is held
 * back on this thread only (and a pending one taken), never changed for the
 * process. */
static void write_all_nosigpipe(int fd, const char *s)
{
    sigset_t pipe_set, old;
    size_t left = strlen(s);
    bool broke = false;

    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    while (left) {
        ssize_t w = write(fd, s, left);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            broke = w < 0 && errno == EPIPE;
            break;
        }
        s += w, left -= (size_t)w;
    }
    if (broke && !sigismember(&old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        sigtimedwait(&pipe_set, NULL, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Runs argv (argv[0] a tool name) inside the network namespace at ns_path (NULL:
 * the caller's), with input on stdin when not NULL. 0 when it exits 0;
 * otherwise AB_EIO with err holding the command and the first line of what it
 * printed on stderr. keep_fd stays open in the child (for /proc/self/fd/N). */
static int run(const char *ns_path, const char *const argv[], const char *input, int keep_fd,
               char *err, size_t errlen)
{
    char out[TOOL_ERR_MAX];
    size_t on = 0;
    int in_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, nsfd = -1, status = 0;
    char pathbuf[64];
    const char *path = tool_path(argv[0], pathbuf, sizeof(pathbuf));
    pid_t pid;
    int rc = AB_EIO;

    if (!path) {
        snprintf(err, errlen, "%s not found in /usr/sbin, /sbin, /usr/bin or /bin (Debian: %s)",
                 argv[0], strcmp(argv[0], "nft") == 0 ? "nftables" : "iproute2");
        return AB_EIO;
    }
    if (ns_path && (nsfd = open(ns_path, O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "network namespace %.200s: %s", ns_path, strerror(errno));
        return AB_EIO;
    }
    if ((input && pipe2(in_pipe, O_CLOEXEC) != 0) || pipe2(err_pipe, O_CLOEXEC) != 0) {
        snprintf(err, errlen, "pipe: %s", strerror(errno));
        goto out;
    }
    /* posix_spawn (a vfork) rather than fork + setns: copying the agent's
     * page tables (large under the sanitizers) was most of an attach's time;
     * nsenter (util-linux) does the setns and execs the tool in place */
    {
        const char *full[16];
        char netarg[sizeof(pathbuf) + 160], nsenter_buf[64];
        size_t k = 0;
        if (ns_path) {
            const char *ne = tool_path("nsenter", nsenter_buf, sizeof(nsenter_buf));
            if (!ne) {
                snprintf(err, errlen, "nsenter not found (Debian: util-linux)");
                goto out;
            }
            snprintf(netarg, sizeof(netarg), "--net=%s", ns_path);
            full[k++] = ne;
            full[k++] = netarg;
            full[k++] = "--";
        }
        full[k++] = path;
        for (size_t i = 1; argv[i] && k < AB_ARRAY_LEN(full) - 1; i++)
            full[k++] = argv[i];
        full[k] = NULL;
        posix_spawn_file_actions_t fa;
        if (posix_spawn_file_actions_init(&fa) != 0) {
            snprintf(err, errlen, "out of memory");
            goto out;
        }
        if (input)
            posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
        else
            posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
        if (keep_fd >= 0) /* dup2 onto itself clears close-on-exec (POSIX 2024, glibc) */
            posix_spawn_file_actions_adddup2(&fa, keep_fd, keep_fd);
        int e = posix_spawn(&pid, full[0], &fa, NULL, (char *const *)full, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (e != 0) {
            snprintf(err, errlen, "spawning %s: %s", full[0], strerror(e));
            goto out;
        }
    }
    close(err_pipe[1]);
    err_pipe[1] = -1;
    if (input) {
        close(in_pipe[0]);
        in_pipe[0] = -1;
        /* a ruleset is far below a pipe's buffer, so this cannot block on the child */
        write_all_nosigpipe(in_pipe[1], input);
        close(in_pipe[1]);
        in_pipe[1] = -1;
    }
    for (;;) {
        char tmp[256];
        ssize_t r = read(err_pipe[0], tmp, sizeof(tmp));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        size_t k = AB_MIN((size_t)r, sizeof(out) - 1 - on);
        memcpy(out + on, tmp, k);
        on += k;
    }
    out[on] = '\0';
    out[strcspn(out, "\n")] = '\0';
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        rc = 0;
    } else {
        char cmd[160] = "";
        size_t cn = 0;
        for (size_t i = 0; argv[i] && cn < sizeof(cmd) - 1; i++)
            cn += (size_t)snprintf(cmd + cn, sizeof(cmd) - cn, "%s%s", i ? " " : "", argv[i]);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 126)
            snprintf(out, sizeof(out), "setns into %.200s failed", ns_path);
        snprintf(err, errlen, "%.160s failed: %.300s", cmd, out[0] ? out : "no message");
    }
out:
    if (nsfd >= 0)
        close(nsfd);
    for (int i = 0; i < 2; i++) {
        if (in_pipe[i] >= 0)
            close(in_pipe[i]);
        if (err_pipe[i] >= 0)
            close(err_pipe[i]);
    }
    return rc;
}

int egress_netns_nft(const char *ns_path, const char *ruleset, char *err, size_t errlen)
{
    const char *argv[] = {"nft", "-f", "-", NULL};
    return run(ns_path, argv, ruleset, -1, err, errlen);
}

static void ns_path_of(const struct egress_netns_config *c, char *buf, size_t len)
{
    snprintf(buf, len, NETNS_DIR "/%s", c->name);
}

/* --- the namespace -------------------------------------------------------------------- */

int egress_netns_create(const struct egress_netns_config *c, char *err, size_t errlen)
{
    char path[128], rules[2048];
    struct stat st;
    int rc;

    if ((rc = egress_netns_config_check(c, err, errlen)))
        return rc;
    ns_path_of(c, path, sizeof(path));
    if (stat(path, &st) != 0) { /* else: a predecessor's namespace, adopted */
        const char *add[] = {"ip", "netns", "add", c->name, NULL};
        if ((rc = run(NULL, add, NULL, -1, err, errlen)))
            return rc;
    }
    struct egress_nl nl;
    if ((rc = egress_nl_open(path, &nl, err, errlen)))
        return rc;
    rc = egress_nl_link_up(&nl, "lo", err, errlen);
    egress_nl_close(&nl);
    if (rc)
        return rc == AB_EIO ? rc : AB_EIO;
    if (egress_netns_ruleset(c, rules, sizeof(rules)) < 0) {
        snprintf(err, errlen, "egress ruleset longer than %zu bytes", sizeof(rules));
        return AB_ELIMIT;
    }
    const char *nft[] = {"nft", "-f", "-", NULL};
    return run(path, nft, rules, -1, err, errlen);
}

int egress_netns_destroy(const struct egress_netns_config *c, char *err, size_t errlen)
{
    char path[128];
    struct stat st;
    int rc;

    if ((rc = egress_netns_config_check(c, err, errlen)))
        return rc;
    ns_path_of(c, path, sizeof(path));
    if (stat(path, &st) != 0)
        return 0;
    const char *del[] = {"ip", "netns", "delete", c->name, NULL};
    return run(NULL, del, NULL, -1, err, errlen);
}

/* A sandbox link's requests go over netlink (netlink.h): no process per
 * spawn or removal. */
static int slot_link(const struct egress_netns_config *c, uint32_t slot, struct egress_link *l,
                     char *err, size_t errlen)
{
    int rc;

    if ((rc = egress_netns_config_check(c, err, errlen)))
        return rc;
    if (egress_netns_link(c, slot, l) != 0) {
        snprintf(err, errlen, "egress slot %u is outside the range's %u slots", slot,
                 egress_netns_slots(c));
        return AB_ELIMIT;
    }
    return 0;
}

/* The sandbox's side: lo and eth0 up, its address, the default route. */
static int attach_sandbox_side(int sfd, const struct egress_link *l, char *err, size_t errlen)
{
    struct egress_nl nl;
    int rc, index = 0;

    if ((rc = egress_nl_open_fd(sfd, &nl, err, errlen)))
        return rc;
    if (!(rc = egress_nl_link_up(&nl, "lo", err, errlen)) &&
        !(rc = egress_nl_ifindex(&nl, EGRESS_SANDBOX_IF, &index, err, errlen)) &&
        !(rc = egress_nl_addr_add(&nl, index, &l->sandbox, 30, err, errlen)) &&
        !(rc = egress_nl_link_up(&nl, EGRESS_SANDBOX_IF, err, errlen)))
        rc = egress_nl_route_default(&nl, &l->gateway, err, errlen);
    egress_nl_close(&nl);
    return rc;
}

int egress_netns_attach(const struct egress_netns_config *c, uint32_t slot,
                        const char *sandbox_netns, struct egress_link *out, char *err,
                        size_t errlen)
{
    char path[128], why[384];
    struct egress_link l;
    struct egress_nl nl = {.fd = -1};
    int rc, sfd = -1, index = 0;

    if ((rc = slot_link(c, slot, &l, err, errlen)))
        return rc;
    if (!sandbox_netns || !sandbox_netns[0]) {
        snprintf(err, errlen, "sandbox network namespace path is required");
        return AB_EINVAL;
    }
    ns_path_of(c, path, sizeof(path));
    sfd = open(sandbox_netns, O_RDONLY | O_CLOEXEC);
    if (sfd < 0) {
        snprintf(err, errlen, "sandbox network namespace %.200s: %s", sandbox_netns,
                 strerror(errno));
        return AB_EIO;
    }
    if ((rc = egress_nl_open(path, &nl, err, errlen)))
        goto out;
    /* a leftover of a sandbox that is gone is replaced */
    rc = egress_nl_link_del(&nl, l.egress_if, why, sizeof(why));
    if (rc && rc != AB_ENOENT) {
        snprintf(err, errlen, "egress namespace %s: %s", c->name, why);
        goto out;
    }
    /* the peer goes straight into the sandbox: nothing appears in the host's namespace */
    if ((rc = egress_nl_veth_add(&nl, l.egress_if, EGRESS_SANDBOX_IF, sfd, why, sizeof(why))) ||
        (rc = egress_nl_ifindex(&nl, l.egress_if, &index, why, sizeof(why))) ||
        (rc = egress_nl_addr_add(&nl, index, &l.gateway, 30, why, sizeof(why))) ||
        (rc = egress_nl_link_up(&nl, l.egress_if, why, sizeof(why)))) {
        snprintf(err, errlen, "egress namespace %s: %s", c->name, why);
        goto undo;
    }
    if ((rc = attach_sandbox_side(sfd, &l, why, sizeof(why)))) {
        snprintf(err, errlen, "sandbox network namespace %.200s: %s", sandbox_netns, why);
        goto undo;
    }
    if (out)
        *out = l;
    goto out;
undo: /* leave nothing half made */
    egress_nl_link_del(&nl, l.egress_if, why, sizeof(why));
    if (rc == 0)
        rc = AB_EIO;
out:
    egress_nl_close(&nl);
    close(sfd);
    return rc == AB_ENOENT || rc == AB_EEXIST ? AB_EIO : rc;
}

int egress_netns_detach(const struct egress_netns_config *c, uint32_t slot, char *err,
                        size_t errlen)
{
    char path[128], why[384];
    struct egress_link l;
    struct egress_nl nl;
    int rc;

    if ((rc = slot_link(c, slot, &l, err, errlen)))
        return rc;
    ns_path_of(c, path, sizeof(path));
    if ((rc = egress_nl_open(path, &nl, err, errlen)))
        return rc;
    rc = egress_nl_link_del(&nl, l.egress_if, why, sizeof(why));
    egress_nl_close(&nl);
    if (rc == AB_ENOENT)
        return 0;
    if (rc)
        snprintf(err, errlen, "egress namespace %s: %s", c->name, why);
    return rc;
}

int egress_netns_enter(const struct egress_netns_config *c, int *saved, char *err, size_t errlen)
{
    char path[128];
    int fd, rc;

    *saved = -1;
    if ((rc = egress_netns_config_check(c, err, errlen)))
        return rc;
    ns_path_of(c, path, sizeof(path));
    if ((*saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
        snprintf(err, errlen, "/proc/thread-self/ns/net: %s", strerror(errno));
        return AB_EIO;
    }
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || setns(fd, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "entering egress namespace %.200s: %s", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        close(*saved);
        *saved = -1;
        return AB_EIO;
    }
    close(fd);
    return 0;
}

int egress_netns_leave(int saved)
{
    int rc = saved >= 0 && setns(saved, CLONE_NEWNET) == 0 ? 0 : AB_EIO;
    if (saved >= 0)
        close(saved);
    return rc;
}

int egress_netns_prune(const struct egress_netns_config *c, bool (*keep)(void *arg, uint32_t slot),
                       void *arg, char *err, size_t errlen)
{
    char path[128], names[EGRESS_PRUNE_MAX][IF_NAMESIZE];
    size_t n = 0;
    int saved, rc, removed = 0;

    if ((rc = egress_netns_enter(c, &saved, err, errlen)))
        return rc;
    struct if_nameindex *ifs = if_nameindex(); /* a netlink dump of this thread's namespace */
    if (egress_netns_leave(saved) != 0) {
        snprintf(err, errlen, "could not return from the egress namespace");
        abort(); /* a thread left in the egress namespace would dial from it */
    }
    if (!ifs) {
        snprintf(err, errlen, "listing the egress namespace's links: %s", strerror(errno));
        return AB_EIO;
    }
    for (struct if_nameindex *i = ifs; i->if_index && n < EGRESS_PRUNE_MAX; i++) {
        unsigned slot;
        char tail;
        if (sscanf(i->if_name, "eg%u%c", &slot, &tail) == 1 && slot < egress_netns_slots(c) &&
            !keep(arg, slot))
            ab_strlcpy(names[n++], i->if_name, IF_NAMESIZE);
    }
    if_freenameindex(ifs);
    ns_path_of(c, path, sizeof(path));
    struct egress_nl nl;
    if (n && (rc = egress_nl_open(path, &nl, err, errlen)))
        return rc;
    for (size_t k = 0; k < n; k++) {
        rc = egress_nl_link_del(&nl, names[k], err, errlen);
        if (rc == 0 || rc == AB_ENOENT)
            removed++;
    }
    if (n)
        egress_nl_close(&nl);
    return removed;
}
