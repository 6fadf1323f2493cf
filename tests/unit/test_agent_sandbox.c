/* Local sandboxes with real namespaces (needs root; skipped otherwise).
 *
 * The program run inside is this test binary in "--fake-envd" mode: it
 * listens on the sandbox socket and answers one-line commands ("pid",
 * "procs", "tcp HOST PORT", "selftcp", "write NAME", "hostname", "spawn",
 * "cat PATH"),
 * and HTTP requests (it records the body of POST /init in /tmp/init-body and
 * answers 204), so tests observe the sandbox from the inside. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentbox/common.h"
#include "agent/runtime/local/sandbox.h"
#include "agent/runtime/local/seccomp.h"
#include "agent/runtime/local/zygote.h"
#include "agent/runtime/local/local.h"
#include "agent/runtime/local/lrt.h"
#include "agentbox/loop.h"

static char self_exe[512];
static char state_dir[128];
static int seq;

/* ---- the fake envd (runs inside the sandbox) --------------------------------- */

static void reply(int c, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n > 0 && write(c, buf, (size_t)AB_MIN(n, (int)sizeof(buf) - 1)) < 0)
        return;
}

static int tcp_connect(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct pollfd pfd;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), err = 0;
    socklen_t el = sizeof(err);

    inet_pton(AF_INET, host, &sa.sin_addr);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
        close(fd);
        return 0;
    }
    if (errno != EINPROGRESS) {
        err = errno;
        close(fd);
        return err;
    }
    pfd.fd = fd;
    pfd.events = POLLOUT;
    if (poll(&pfd, 1, 2000) != 1) {
        close(fd);
        return ETIMEDOUT;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    close(fd);
    return err;
}

static void fake_http(int c, char *req, size_t have)
{
    char *hend, *cl;
    size_t body_len = 0, got;
    FILE *f;

    while (!(hend = strstr(req, "\r\n\r\n")) && have < 8191) {
        ssize_t r = read(c, req + have, 8191 - have);
        if (r <= 0)
            return;
        have += (size_t)r;
        req[have] = '\0';
    }
    if (!hend)
        return;
    cl = strcasestr(req, "content-length:");
    if (cl)
        body_len = (size_t)strtoul(cl + 15, NULL, 10);
    hend += 4;
    got = have - (size_t)(hend - req);
    while (got < body_len && have < 8191) {
        ssize_t r = read(c, req + have, 8191 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
        got += (size_t)r;
    }
    req[have] = '\0';
    if (!strncmp(req, "POST /init ", 11) && (f = fopen("/tmp/init-body", "w"))) {
        fwrite(hend, 1, AB_MIN(got, body_len), f);
        fclose(f);
    }
    reply(c, "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
}

static void fake_command(int c, char *line)
{
    char host[64];
    int port;

    if (!strcmp(line, "pid")) {
        reply(c, "%d %d\n", (int)getpid(), (int)getppid());
    } else if (!strcmp(line, "procs")) {
        DIR *d = opendir("/proc");
        struct dirent *de;
        char out[2048] = "";
        size_t len = 0;
        while (d && (de = readdir(d)) != NULL)
            if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && len < sizeof(out) - 16)
                len += (size_t)snprintf(out + len, sizeof(out) - len, "%s ", de->d_name);
        if (d)
            closedir(d);
        reply(c, "%s\n", out);
    } else if (sscanf(line, "tcp %63s %d", host, &port) == 2) {
        int err = tcp_connect(host, port);
        reply(c, err ? "fail %s\n" : "ok\n", strerror(err));
    } else if (!strcmp(line, "selftcp")) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t sl = sizeof(sa);
        int l = socket(AF_INET, SOCK_STREAM, 0), err;
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
            getsockname(l, (struct sockaddr *)&sa, &sl) != 0) {
            reply(c, "fail bind %s\n", strerror(errno));
        } else {
            err = tcp_connect("127.0.0.1", ntohs(sa.sin_port));
            reply(c, err ? "fail %s\n" : "ok\n", strerror(err));
        }
        close(l);
    } else if (!strncmp(line, "write ", 6)) {
        char path[300];
        FILE *f;
        snprintf(path, sizeof(path), "/home/user/%.200s", line + 6);
        f = fopen(path, "w");
        if (f) {
            fputs("hello from inside", f);
            fclose(f);
        }
        reply(c, f ? "ok\n" : "fail %s\n", strerror(errno));
    } else if (!strncmp(line, "cat ", 4)) {
        char buf[4096];
        ssize_t r;
        int fd = open(line + 4, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            reply(c, "fail %s\n", strerror(errno));
            return;
        }
        while ((r = read(fd, buf, sizeof(buf))) > 0)
            if (write(c, buf, (size_t)r) != r)
                break;
        close(fd);
    } else if (!strcmp(line, "canary")) { /* the stack protector's value (x86-64 glibc) */
        unsigned long long v = 0;
#if defined(__x86_64__)
        __asm__ volatile("movq %%fs:0x28, %0" : "=r"(v));
#endif
        reply(c, "%llx\n", v);
    } else if (!strcmp(line, "hostname")) {
        char h[128] = "";
        gethostname(h, sizeof(h));
        reply(c, "%s\n", h);
    } else if (!strcmp(line, "spawn")) {
        pid_t p = fork();
        if (p == 0) {
            close(c);
            for (;;)
                pause();
        }
        reply(c, "%d\n", (int)p);
    } else {
        reply(c, "unknown\n");
    }
}

static int fake_envd(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int l = socket(AF_UNIX, SOCK_STREAM, 0);

    signal(SIGPIPE, SIG_IGN);
    ab_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    unlink(path);
    if (bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 64) != 0) {
        perror("fake envd: bind");
        return 1;
    }
    for (;;) {
        char req[8192];
        ssize_t r;
        int c = accept(l, NULL, NULL);
        if (c < 0)
            continue;
        r = read(c, req, sizeof(req) - 1);
        if (r > 0) {
            req[r] = '\0';
            if (!strncmp(req, "POST ", 5) || !strncmp(req, "GET ", 4)) {
                fake_http(c, req, (size_t)r);
            } else {
                req[strcspn(req, "\r\n")] = '\0';
                fake_command(c, req);
            }
        }
        close(c);
    }
}

/* ---- helpers (test side) -------------------------------------------------------- */

/* Sends cmd to the sandbox and returns its reply in out; polls until the
 * socket accepts (envd may still be starting). */
static void ask(const struct lsbx *s, const char *cmd, char *out, size_t outlen)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int64_t deadline = ab_now_ms() + 5000;
    size_t have = 0;
    int fd;

    ab_strlcpy(sa.sun_path, s->socket, sizeof(sa.sun_path));
    for (;;) {
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            break;
        close(fd);
        if (ab_now_ms() > deadline)
            fail_msg("sandbox socket %s never answered", s->socket);
        poll(NULL, 0, 5);
    }
    {
        struct timeval tv = {.tv_sec = 5};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)); /* fail, never hang */
    }
    {
        char line[256];
        int len = snprintf(line, sizeof(line), "%s\n", cmd);
        assert_int_equal(write(fd, line, (size_t)len), len); /* one write: envd reads once */
    }
    for (;;) {
        ssize_t r = read(fd, out + have, outlen - 1 - have);
        if (r <= 0)
            break;
        have += (size_t)r;
    }
    out[have] = '\0';
    close(fd);
}

static bool have_root(void)
{
    return geteuid() == 0;
}

static char test_egress_name[32];
static struct egress_netns_config test_egress = {
    .name = test_egress_name, .tcp_port = 15001, .dns_port = 15053};

/* Set: spawns go through this zygote (this binary as `--zygote 3`). */
static struct lzy *test_zygote;

static void spawn_spare(struct lsbx *s, bool internet, const char *shared, const char *spare)
{
    const char *argv[] = {self_exe, "--fake-envd", LSBX_INNER_SOCKET, NULL};
    struct lsbx_options o = {0};
    char id[32], dir[256], err[512];

    snprintf(id, sizeof(id), "sbx-%d-%d", (int)getpid() % 100000, ++seq);
    snprintf(dir, sizeof(dir), "%s/%s", state_dir, id);
    o.id = id;
    o.dir = dir;
    o.shared_dir = shared;
    o.spare = spare;
    o.argv = argv;
    o.zygote = test_zygote;
    if (internet) { /* a veth into a test egress namespace, slot 3 */
        o.egress = &test_egress;
        o.egress_slot = 3;
    }
    if (lsbx_spawn(&o, s, err, sizeof(err)) != 0)
        fail_msg("spawn: %s", err);
}

static void spawn_shared(struct lsbx *s, bool internet, const char *shared)
{
    spawn_spare(s, internet, shared, NULL);
}

static void spawn(struct lsbx *s, bool internet)
{
    spawn_shared(s, internet, NULL);
}

/* Host pids whose pid namespace is the one of host pid `pid`. */
static int count_in_ns(const char *ns_link)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int n = 0;

    while ((de = readdir(d)) != NULL) {
        char path[300], link[128];
        ssize_t l;
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/ns/pid", de->d_name);
        l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = '\0';
        if (!strcmp(link, ns_link) && lsbx_proc_start_time(atoi(de->d_name)) != 0)
            n++;
    }
    closedir(d);
    return n;
}

static void ns_of(pid_t pid, char *out, size_t len)
{
    char path[64];
    ssize_t l;

    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)pid);
    l = readlink(path, out, len - 1);
    assert_true(l > 0);
    out[l] = '\0';
}

static int host_listener(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    int l = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(l, 8), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    *port = ntohs(sa.sin_port);
    return l;
}

static bool path_exists(const char *p)
{
    struct stat st;
    return lstat(p, &st) == 0;
}

/* Destroys every sandbox a failed test left under state_dir (processes,
 * cgroups, the writable space's mount, the directory). */
static void reap_leftovers(void)
{
    DIR *d = opendir(state_dir);
    struct dirent *de;

    while (d && (de = readdir(d)) != NULL) {
        char dir[400];
        struct lsbx s;
        if (de->d_name[0] == '.')
            continue;
        snprintf(dir, sizeof(dir), "%s/%s", state_dir, de->d_name);
        if (lsbx_state_read(dir, &s) == 0) {
            lsbx_destroy(&s, 5000);
        } else {
            memset(&s, 0, sizeof(s));
            ab_strlcpy(s.dir, dir, sizeof(s.dir));
            lsbx_remove_dir(&s);
        }
    }
    if (d)
        closedir(d);
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_namespaces_and_mounts(void **state)
{
    struct lsbx s;
    char out[4096], path[512], status[4096];
    FILE *f;
    size_t n;

    (void)state;
    if (!have_root())
        skip();
    spawn(&s, false);
    assert_true(lsbx_is_alive(&s));
    assert_true(s.start_time != 0);

    /* pid 1 of its namespace, seen from the host */
    snprintf(path, sizeof(path), "/proc/%d/status", (int)s.pid);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(status, 1, sizeof(status) - 1, f);
    status[n] = '\0';
    fclose(f);
    snprintf(path, sizeof(path), "NSpid:\t%d\t1\n", (int)s.pid);
    assert_non_null(strstr(status, path));

    /* the program is pid 1 itself (no clone of the agent stays behind);
     * /proc inside lists only the sandbox */
    ask(&s, "pid", out, sizeof(out));
    assert_string_equal(out, "1 0\n");
    ask(&s, "procs", out, sizeof(out));
    assert_string_equal(out, "1 \n");

    ask(&s, "hostname", out, sizeof(out));
    assert_int_equal(strncmp(out, s.id, strlen(s.id)), 0);

    /* /home/user writes land in the sandbox directory */
    ask(&s, "write note.txt", out, sizeof(out));
    assert_string_equal(out, "ok\n");
    snprintf(path, sizeof(path), "%s/home/note.txt", s.dir);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    fclose(f);
    assert_string_equal(out, "hello from inside");

    /* the state record is there for a restarted agent */
    snprintf(path, sizeof(path), "%s/state.rec", s.dir);
    assert_true(path_exists(path));

    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    assert_false(path_exists(s.dir));
}

/* The options of the mount at mount point mp in a mountinfo text: "" when
 * there is none. */
static const char *mount_opts(const char *mountinfo, const char *mp, char *out, size_t len)
{
    char needle[256];
    const char *p;

    snprintf(needle, sizeof(needle), " %s ", mp);
    out[0] = '\0';
    for (p = mountinfo; (p = strstr(p, needle)) != NULL; p++) {
        const char *ls = p;
        int fields = 0;
        while (ls > mountinfo && ls[-1] != '\n')
            ls--;
        for (const char *q = ls; q < p; q++)
            fields += *q == ' ';
        if (fields == 3) { /* mount point is field 5 */
            const char *o = p + strlen(needle), *e = strchr(o, ' ');
            snprintf(out, len, "%.*s", (int)(e ? e - o : (ptrdiff_t)strlen(o)), o);
            return out;
        }
    }
    return out;
}

/* The mount plan and confinement, seen from inside (DESIGN §10a): writable
 * mounts nodev,nosuid, system directories read-only, only the program file
 * bound from the host, /proc/sys read-only, the user namespace map, no
 * capabilities beyond the kept set, no_new_privs, seccomp. */
static void test_mount_plan_and_confinement(void **state)
{
    struct lsbx s;
    char out[32768], opts[256], path[512];
    const char *base;

    (void)state;
    if (!have_root())
        skip();
    spawn(&s, false);
    ask(&s, "cat /proc/self/mountinfo", out, sizeof(out));
    static const char *const writable[] = {"/",        "/home/user", "/tmp", "/run/agentbox",
                                           "/dev/shm", NULL};
    for (int i = 0; writable[i]; i++) {
        mount_opts(out, writable[i], opts, sizeof(opts));
        if (!strstr(opts, "nosuid") || !strstr(opts, "nodev"))
            fail_msg("%s must be nodev,nosuid: '%s'", writable[i], opts);
    }
    static const char *const ro[] = {"/usr", "/etc", "/etc/passwd", "/proc/sys", NULL};
    for (int i = 0; ro[i]; i++) {
        mount_opts(out, ro[i], opts, sizeof(opts));
        if (strncmp(opts, "ro", 2) != 0)
            fail_msg("%s must be read-only: '%s'", ro[i], opts);
    }
    base = strrchr(self_exe, '/') + 1;
    snprintf(path, sizeof(path), "/.agentbox/%s", base);
    mount_opts(out, path, opts, sizeof(opts));
    assert_int_equal(strncmp(opts, "ro", 2), 0);
    assert_string_equal(mount_opts(out, "/.agentbox", opts, sizeof(opts)), ""); /* the file only */
    assert_string_equal(mount_opts(out, "/sys", opts, sizeof(opts)), "");       /* no sysfs */
    mount_opts(out, "/home/user", opts, sizeof(opts));
    assert_true(opts[0] != '\0');

    ask(&s, "cat /proc/self/uid_map", out, sizeof(out));
    assert_non_null(strstr(out, "0     100000      65536"));
    ask(&s, "cat /proc/self/status", out, sizeof(out));
    assert_non_null(strstr(out, "NoNewPrivs:\t1"));
    assert_non_null(strstr(out, "Seccomp:\t2"));
    /* Docker's default minus NET_RAW and MKNOD: 0xa80425fb less bits 13, 27 */
    assert_non_null(strstr(out, "CapBnd:\t00000000a00405fb"));
    ask(&s, "cat /etc/passwd", out, sizeof(out));
    assert_non_null(strstr(out, "user:x:1000:1000:user:/home/user:"));
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
}

static void test_network_is_isolated(void **state)
{
    struct lsbx s;
    char out[256], cmd[64];
    int port, l;

    (void)state;
    if (!have_root())
        skip();
    l = host_listener(&port);
    spawn(&s, false);
    ask(&s, "selftcp", out, sizeof(out));
    assert_string_equal(out, "ok\n"); /* loopback is up inside */
    snprintf(cmd, sizeof(cmd), "tcp 127.0.0.1 %d", port);
    ask(&s, cmd, out, sizeof(out));
    assert_int_equal(strncmp(out, "fail", 4), 0); /* but it is not the host's */
    snprintf(cmd, sizeof(cmd), "tcp 10.0.2.2 %d", port);
    ask(&s, cmd, out, sizeof(out));
    assert_int_equal(strncmp(out, "fail", 4), 0);
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    close(l);
}

/* The sandbox's only interface besides lo is the veth into the egress
 * namespace, attached before its program ran; it has no route to the host's
 * loopback, and the veth goes with the sandbox. */
static void test_egress_veth_and_no_host_loopback(void **state)
{
    struct lsbx s;
    char out[256], cmd[96], err[512];
    int port, l;

    (void)state;
    if (!have_root() || access("/usr/sbin/nft", X_OK) != 0)
        skip();
    snprintf(test_egress_name, sizeof(test_egress_name), "abx-unit-%d", (int)getpid());
    assert_int_equal(egress_cidr_parse("10.213.0.0/24", &test_egress.range), 0);
    if (egress_netns_create(&test_egress, err, sizeof(err)) != 0)
        fail_msg("egress namespace: %s", err);
    l = host_listener(&port);
    spawn(&s, true);
    assert_true(s.egress);
    snprintf(cmd, sizeof(cmd), "ip netns exec %s ip link show eg3 >/dev/null 2>&1",
             test_egress_name);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "tcp 127.0.0.1 %d", port);
    ask(&s, cmd, out, sizeof(out));
    assert_int_equal(strncmp(out, "fail", 4), 0);
    snprintf(cmd, sizeof(cmd), "tcp 10.213.0.13 %d", port); /* its own gateway end */
    ask(&s, cmd, out, sizeof(out));
    assert_int_equal(strncmp(out, "fail", 4), 0);
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    snprintf(cmd, sizeof(cmd), "ip netns exec %s ip link show eg3 >/dev/null 2>&1",
             test_egress_name);
    /* the kernel tears the sandbox's namespace down (and its veth with it) on
     * a workqueue after its last process is gone: wait for it, bounded */
    {
        int64_t deadline = ab_now_ms() + 5000;
        while (system(cmd) == 0 && ab_now_ms() < deadline)
            poll(NULL, 0, 10);
    }
    assert_int_not_equal(system(cmd), 0);
    assert_int_equal(egress_netns_destroy(&test_egress, err, sizeof(err)), 0);
    close(l);
}

/* With a shared directory (what the runtime gives), the files every
 * sandbox has the same of are made once, not per spawn: each is an ext4
 * inode made and freed per sandbox otherwise. Inside nothing changes. */
static void test_shared_files_made_once(void **state)
{
    struct lsbx a, b;
    char shared[300], path[600], out[4096];
    struct stat st;
    ino_t ino;

    (void)state;
    if (!have_root())
        skip();
    snprintf(shared, sizeof(shared), "%s/sandbox-files", state_dir);
    spawn_shared(&a, false, shared);
    snprintf(path, sizeof(path), "%s/passwd", shared);
    assert_int_equal(stat(path, &st), 0);
    ino = st.st_ino;
    spawn_shared(&b, false, shared);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_ino, ino); /* the second spawn made none */
    for (int i = 0; i < 2; i++) {
        const struct lsbx *s = i ? &b : &a;
        static const char *const per_sandbox_before[] = {"passwd", "group", "root"};
        for (size_t k = 0; k < AB_ARRAY_LEN(per_sandbox_before); k++) {
            snprintf(path, sizeof(path), "%s/%s", s->dir, per_sandbox_before[k]);
            assert_int_not_equal(lstat(path, &st), 0);
        }
        ask(s, "cat /etc/passwd", out, sizeof(out));
        assert_non_null(strstr(out, "user:x:1000:1000:user:/home/user:"));
        ask(s, "pid", out, sizeof(out));
        assert_string_equal(out, "1 0\n");
    }
    assert_int_equal(lsbx_destroy(&a, 5000), 0);
    assert_int_equal(lsbx_destroy(&b, 5000), 0);
    snprintf(path, sizeof(path), "%s/group", shared);
    assert_int_equal(stat(path, &st), 0); /* kept for the next spawn */
}

/* A removal leaves the directory's skeleton for the slot's next spawn
 * (no mkdir, no symlink then), and nothing of the sandbox that used it:
 * its home files, log text, record and socket are gone from what is kept. */
static void test_recycled_dir_keeps_nothing(void **state)
{
    struct lsbx a, b;
    char shared[300], spare[320], path[700], out[4096];
    struct stat st;
    ino_t dir_ino;
    int64_t deadline;

    (void)state;
    if (!have_root())
        skip();
    snprintf(shared, sizeof(shared), "%s/sandbox-files", state_dir);
    snprintf(spare, sizeof(spare), "%s/spare-test", shared);
    spawn_spare(&a, false, shared, spare); /* no spare yet: made fresh */
    ask(&a, "write note.txt", out, sizeof(out));
    assert_string_equal(out, "ok\n");
    assert_int_equal(stat(a.dir, &st), 0);
    dir_ino = st.st_ino;
    lsbx_kill(&a);
    for (deadline = ab_now_ms() + 5000; !lsbx_is_gone(&a) && ab_now_ms() < deadline;)
        poll(NULL, 0, 5);
    assert_true(lsbx_is_gone(&a));
    assert_int_equal(lsbx_recycle_dir(&a, spare), 0);
    lsbx_release(&a);
    assert_int_not_equal(lstat(a.dir, &st), 0);
    /* the skeleton: exactly data (empty, unmounted), run (empty), home, tmp */
    {
        const char *want[] = {"data", "home", "run", "tmp"};
        int n = 0;
        DIR *d = opendir(spare);
        struct dirent *de;
        assert_non_null(d);
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                continue;
            bool known = false;
            for (size_t i = 0; i < AB_ARRAY_LEN(want); i++)
                known = known || !strcmp(de->d_name, want[i]);
            if (!known)
                fail_msg("recycled skeleton keeps %s", de->d_name);
            n++;
        }
        closedir(d);
        assert_int_equal(n, 4);
        snprintf(path, sizeof(path), "%s/data/envd.log", spare); /* gone with the writable space */
        assert_int_not_equal(lstat(path, &st), 0);
        snprintf(path, sizeof(path), "%s/home/note.txt", spare); /* data is not mounted */
        assert_int_not_equal(lstat(path, &st), 0);
        snprintf(path, sizeof(path), "%s/run/envd.sock", spare);
        assert_int_not_equal(lstat(path, &st), 0);
    }
    spawn_spare(&b, false, shared, spare);
    assert_int_equal(stat(b.dir, &st), 0);
    assert_int_equal(st.st_ino, dir_ino); /* the same directory, renamed */
    assert_int_not_equal(lstat(spare, &st), 0);
    snprintf(path, sizeof(path), "%s/home/note.txt", b.dir);
    assert_int_not_equal(lstat(path, &st), 0); /* a's file is not b's */
    ask(&b, "pid", out, sizeof(out));
    assert_string_equal(out, "1 0\n");
    ask(&b, "write note.txt", out, sizeof(out));
    assert_string_equal(out, "ok\n");
    assert_int_equal(lsbx_destroy(&b, 5000), 0);
    assert_int_not_equal(lstat(b.dir, &st), 0);
}

static void test_kill_leaves_no_process(void **state)
{
    struct lsbx s;
    char out[64], ns[128];

    (void)state;
    if (!have_root())
        skip();
    spawn(&s, false);
    ask(&s, "spawn", out, sizeof(out));
    assert_string_equal(out, "2\n");
    ns_of(s.pid, ns, sizeof(ns));
    assert_int_equal(count_in_ns(ns), 2);
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    assert_int_equal(count_in_ns(ns), 0);
    assert_false(path_exists(s.dir));
}

/* A spawn does not copy the agent's address space (sandbox.c: the init
 * shares it until exec): after a fork, each page the parent had written
 * faults again on its next write (copy-on-write, or its reuse), so writing
 * 64 MiB after a spawn would cost >= 16384 minor faults. */
static void test_spawn_does_not_copy_memory(void **state)
{
    const size_t len = 64u << 20;
    struct rusage before, after;
    struct lsbx s;
    char *big;
    long faults;

    (void)state;
    if (!have_root())
        skip();
    /* spawned from a thread at a low priority (as pool.c spawns), envd
     * still runs at the ordinary one */
    assert_int_equal(setpriority(PRIO_PROCESS, 0, 10), 0);
    big = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(big != MAP_FAILED);
    madvise(big, len, MADV_NOHUGEPAGE); /* one fault per 4 KiB page, as the agent's heap */
    memset(big, 1, len);
    spawn(&s, false);
    assert_int_equal(setpriority(PRIO_PROCESS, 0, 0), 0);
    errno = 0;
    assert_int_equal(getpriority(PRIO_PROCESS, (id_t)s.pid), 0);
    assert_int_equal(errno, 0);
    getrusage(RUSAGE_SELF, &before);
    memset(big, 2, len);
    getrusage(RUSAGE_SELF, &after);
    faults = after.ru_minflt - before.ru_minflt;
    munmap(big, len);
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    if (faults >= 4096)
        fail_msg("writing 64 MiB after a spawn took %ld minor faults: the spawn copied the "
                 "address space",
                 faults);
}

static void test_readopt_or_reap(void **state)
{
    struct lsbx s, again;
    char dir[256], out[64];
    pid_t pid;

    (void)state;
    if (!have_root())
        skip();
    spawn(&s, false);
    s.info = json_pack("{s:s}", "pool", "p1");
    assert_int_equal(lsbx_state_write(&s), 0);
    ask(&s, "pid", out, sizeof(out)); /* envd is up */

    /* A restarted agent reads the state: live, same start time, socket answers. */
    assert_int_equal(lsbx_state_read(s.dir, &again), 0);
    assert_false(again.is_child);
    assert_int_equal(again.pid, s.pid);
    assert_string_equal(json_string_value(json_object_get(again.info, "pool")), "p1");
    assert_true(lsbx_is_alive(&again));
    assert_true(lsbx_socket_answers(&again));

    /* Pid reuse: a different start time means "not ours"; never signal it.
     * (The sandbox's cgroup is killed by id whatever the pid says, so it is
     * left out here: only the pid check is under test.) */
    memset(&again.cg, 0, sizeof(again.cg));
    again.start_time++;
    assert_false(lsbx_is_alive(&again));
    lsbx_kill(&again);
    assert_true(lsbx_is_alive(&s));
    again.start_time--;
    lsbx_release(&again);

    /* The sandbox died while the agent was down: state says dead → reap. */
    pid = s.pid;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    assert_int_equal(lsbx_state_read(s.dir, &again), 0);
    assert_false(lsbx_is_alive(&again));
    assert_false(lsbx_socket_answers(&again));
    assert_int_equal(lsbx_destroy(&again, 1000), 0);
    ab_strlcpy(dir, s.dir, sizeof(dir));
    assert_false(path_exists(dir));
    lsbx_release(&s);

    assert_int_equal(lsbx_state_read("/nonexistent-sbx", &again), AB_ENOENT);
}

static void test_adopted_sandbox_is_killed_without_waitpid(void **state)
{
    struct lsbx s, again;
    char ns[128], out[64];
    pid_t pid;

    (void)state;
    if (!have_root())
        skip();
    spawn(&s, false);
    ask(&s, "pid", out, sizeof(out));
    ns_of(s.pid, ns, sizeof(ns));
    assert_int_equal(lsbx_state_read(s.dir, &again), 0);
    pid = s.pid;
    /* again is not our child as far as it knows: kill and poll /proc. Reap the
     * zombie ourselves as the system init would for a real restarted agent. */
    lsbx_kill(&again);
    waitpid(pid, NULL, 0);
    assert_true(lsbx_is_gone(&again));
    assert_int_equal(lsbx_remove_dir(&again), 0);
    lsbx_release(&again);
    assert_int_equal(count_in_ns(ns), 0);
    lsbx_release(&s);
}

static void test_spawn_failures_leave_nothing(void **state)
{
    const char *argv[] = {"/nonexistent/envd", NULL};
    const char *rel[] = {"envd", NULL};
    struct lsbx_options o = {0};
    struct lsbx s;
    char dir[256], err[512];

    (void)state;
    if (!have_root())
        skip();
    snprintf(dir, sizeof(dir), "%s/bad", state_dir);
    o.id = "bad";
    o.dir = dir;
    o.argv = argv;
    assert_int_equal(lsbx_spawn(&o, &s, err, sizeof(err)), AB_EIO);
    assert_non_null(strstr(err, "executing the program"));
    assert_false(path_exists(dir));

    o.argv = rel;
    assert_int_equal(lsbx_spawn(&o, &s, err, sizeof(err)), AB_EINVAL);
    o.argv = argv;
    o.id = "Bad_Id";
    assert_int_equal(lsbx_spawn(&o, &s, err, sizeof(err)), AB_EINVAL);
    o.id = "x";
    o.dir = "/tmp/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    assert_int_equal(lsbx_spawn(&o, &s, err, sizeof(err)), AB_ELIMIT);
    assert_non_null(strstr(err, "108 bytes"));
}

/* ---- warm pools (local runtime over a real loop) ------------------------------------ */

static const char *MANIFESTS =
    "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: t}\n"
    "spec: {version: '1'}\n"
    "---\n"
    "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxEnv\nmetadata: {name: e}\n"
    "spec:\n  templateRef: {name: t}\n  clusters:\n  - clusterID: here\n    members:\n"
    "    - name: e-1c2gi\n      config: {inlineResources: {requests: {cpu: 1, memory: 2Gi}}}\n"
    "      spec: {replicas: 2}\n"
    "---\n"
    "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\nmetadata: {name: cold}\n"
    "spec: {replicas: 0}\n";

struct script {
    struct loop *loop;
    struct rt *rt;
    struct loop_timer t;
    int step;
    int64_t deadline;
    char failure[512];
    /* claim results */
    int ncb, cb_err;
    char cb_msg[256];
    struct rt_sandbox got;
    int (*fn)(struct script *sc); /* returns 1: next step, 0: wait, -1: failed */
};

static void claim_cb(void *arg, int err, const char *msg, const struct rt_sandbox *s)
{
    struct script *sc = arg;

    sc->ncb++;
    sc->cb_err = err;
    ab_strlcpy(sc->cb_msg, msg ? msg : "", sizeof(sc->cb_msg));
    if (s) {
        sc->got = *s;
        sc->got.metadata = NULL;
    }
}

static void script_tick(struct loop_timer *t)
{
    struct script *sc = t->arg;
    int r = sc->fn(sc);

    if (r < 0 || ab_now_ms() > sc->deadline) {
        if (r >= 0)
            snprintf(sc->failure, sizeof(sc->failure), "step %d timed out", sc->step);
        loop_stop(sc->loop);
        return;
    }
    if (r == 1 && sc->step < 0) {
        loop_stop(sc->loop);
        return;
    }
    loop_timer_start(sc->loop, &sc->t, 5, script_tick, sc);
}

static void run_script(struct script *sc, int (*fn)(struct script *), int timeout_ms)
{
    sc->fn = fn;
    sc->deadline = ab_now_ms() + timeout_ms;
    loop_timer_start(sc->loop, &sc->t, 0, script_tick, sc);
    loop_run(sc->loop);
    if (sc->failure[0])
        fail_msg("%s", sc->failure);
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            snprintf(sc->failure, sizeof(sc->failure), "step %d: %s", sc->step, #cond);            \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)

static char claimed_id[64];
static char claimed_socket[300];

static int status_is(struct script *sc, const char *pool, int idle, int running)
{
    struct rt_pool_status st;

    if (rt_pool_status(sc->rt, "default", pool, &st) != 0)
        return 0;
    return st.idle == idle && st.running == running && st.starting == 0 && st.stopping == 0;
}

static int pool_steps(struct script *sc)
{
    struct rt_claim_options o = {0};
    char err[256];
    json_t *env;
    int rc;

    switch (sc->step) {
    case 0: /* the env's member warms up to replicas */
        if (!status_is(sc, "e-1c2gi", 2, 0))
            return 0;
        sc->step++;
        return 1;
    case 1:
        env = json_pack("{s:s}", "FOO", "bar");
        o.id = "sbx-one";
        o.env_vars = env;
        o.access_token = "tok-123";
        o.timeout_s = 60;
        rc = rt_claim(sc->rt, "default", "e", RT_TARGET_ENV, NULL, &o, claim_cb, sc, NULL, err,
                      sizeof(err));
        json_decref(env);
        o.env_vars = NULL;
        CHECK(rc == 0);
        CHECK(sc->ncb == 0); /* never synchronously */
        /* unknown names and bare-name rules are refused at once */
        o.id = "sbx-x";
        CHECK(rt_claim(sc->rt, "default", "nope", RT_TARGET_ENV, NULL, &o, claim_cb, sc, NULL, err,
                       sizeof(err)) == AB_ENOENT);
        CHECK(strstr(err, "env 'nope' not found") != NULL);
        CHECK(rt_claim(sc->rt, "default", "cold", RT_TARGET_ENV, NULL, &o, claim_cb, sc, NULL, err,
                       sizeof(err)) == AB_ENOENT);
        CHECK(rt_claim(sc->rt, "default", "e", RT_TARGET_ENV, "9c9gi", &o, claim_cb, sc, NULL, err,
                       sizeof(err)) == AB_ENOENT);
        CHECK(strstr(err, "scaling group '9c9gi'") != NULL);
        sc->step++;
        return 1;
    case 2:
        if (sc->ncb == 0)
            return 0;
        CHECK(sc->cb_err == 0);
        CHECK(!strcmp(sc->got.id, "sbx-one"));
        CHECK(sc->got.state == RT_RUNNING);
        CHECK(!strcmp(sc->got.pool, "e-1c2gi"));
        CHECK(!strcmp(sc->got.env, "e"));
        CHECK(sc->got.end_ms - sc->got.claimed_ms == 60000);
        ab_strlcpy(claimed_id, sc->got.id, sizeof(claimed_id));
        ab_strlcpy(claimed_socket, sc->got.envd_addr + 5, sizeof(claimed_socket));
        sc->step++;
        return 1;
    case 3: /* replicas is the maximum concurrency: the claimed one counts, no replacement */
        if (!status_is(sc, "e-1c2gi", 1, 1))
            return 0;
        sc->step = -1;
        return 1;
    }
    return -1;
}

static int cold_steps(struct script *sc)
{
    struct rt_claim_options o = {0};
    struct rt_pool_status st;
    char err[256];

    switch (sc->step) {
    case 0:
        if (!status_is(sc, "e-1c2gi", 1, 1))
            return 0;
        o.id = "sbx-cold";
        o.timeout_s = 30;
        o.startup_timeout_ms = 300;
        sc->ncb = 0;
        CHECK(rt_claim(sc->rt, "default", "cold", RT_TARGET_POOL, NULL, &o, claim_cb, sc, NULL, err,
                       sizeof(err)) == 0);
        o.id = "sbx-cold2";
        CHECK(rt_claim(sc->rt, "default", "cold", RT_TARGET_ENV_OR_POOL, NULL, &o, claim_cb, sc,
                       NULL, err, sizeof(err)) == AB_EBUSY); /* waiters_max 1 */
        CHECK(strstr(err, "claims waiting") != NULL);
        sc->step++;
        return 1;
    case 1: /* a pool of 0 replicas never starts one: the claim waits, then times out */
        CHECK(rt_pool_status(sc->rt, "default", "cold", &st) == 0);
        CHECK(st.starting == 0 && st.idle == 0 && st.running == 0);
        if (sc->ncb == 0)
            return 0;
        CHECK(sc->cb_err == AB_ETIMEOUT);
        CHECK(strstr(sc->cb_msg, "has replicas 0 and never starts a sandbox") != NULL);
        sc->step++;
        return 1;
    case 2: /* nothing was started for it */
        if (!status_is(sc, "cold", 0, 0))
            return 0;
        sc->step = -1;
        return 1;
    }
    return -1;
}

static int adopt_steps(struct script *sc)
{
    struct rt_sandbox s;

    switch (sc->step) {
    case 0: /* immediately after restart: the same sandboxes, nothing new started */
        CHECK(status_is(sc, "e-1c2gi", 1, 1));
        CHECK(rt_get(sc->rt, claimed_id, &s) == 0);
        CHECK(s.state == RT_RUNNING);
        CHECK(!strcmp(s.envd_addr + 5, claimed_socket));
        json_decref(s.metadata);
        CHECK(rt_set_timeout(sc->rt, claimed_id, 0) == 0); /* ends it now */
        sc->step++;
        return 1;
    case 1:
        if (!status_is(sc, "e-1c2gi", 2, 0))
            return 0;
        CHECK(rt_get(sc->rt, claimed_id, &s) == AB_ENOENT);
        sc->step = -1;
        return 1;
    }
    return -1;
}

static void reap_all(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;

    while (d && (de = readdir(d)) != NULL) {
        char path[512];
        struct lsbx x;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (lsbx_state_read(path, &x) == 0)
            lsbx_destroy(&x, 2000);
    }
    if (d)
        closedir(d);
}

static void test_warm_pools_claim_release_readopt(void **state)
{
    const char *args[] = {NULL};
    struct loop_options lopts = {.workers =
                                     getenv("LRT_WORKERS") ? atoi(getenv("LRT_WORKERS")) : 0};
    struct lrt_options o = {0};
    struct script sc;
    char mdir[256], sdir[256], sbxdir[300], err[512], body[2048], path[600];
    FILE *f;
    size_t n;

    (void)state;
    if (!have_root())
        skip();
    snprintf(mdir, sizeof(mdir), "%s/m", state_dir);
    snprintf(sdir, sizeof(sdir), "%s/st", state_dir);
    snprintf(sbxdir, sizeof(sbxdir), "%s/sandboxes", sdir);
    assert_int_equal(mkdir(mdir, 0700), 0);
    snprintf(path, sizeof(path), "%s/all.yaml", mdir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(MANIFESTS, f);
    fclose(f);

    memset(&sc, 0, sizeof(sc));
    sc.loop = loop_new(&lopts);
    assert_non_null(sc.loop);
    o.loop = sc.loop;
    o.cluster_id = "here";
    o.state_dir = sdir;
    o.manifests_dir = mdir;
    o.envd_path = self_exe;
    o.envd_args = args;
    o.waiters_max = 1;
    o.reload_ms = 200;
    if (lrt_new(&o, &sc.rt, err, sizeof(err)) != 0)
        fail_msg("lrt_new: %s", err);
    run_script(&sc, pool_steps, 20000);

    /* envd got /init with the token and env vars */
    snprintf(path, sizeof(path), "%s", claimed_socket);
    *strrchr(path, '/') = '\0';
    *strrchr(path, '/') = '\0';
    strncat(path, "/tmp/init-body", sizeof(path) - strlen(path) - 1);
    f = fopen(path, "r");
    assert_non_null(f);
    n = fread(body, 1, sizeof(body) - 1, f);
    body[n] = '\0';
    fclose(f);
    assert_non_null(strstr(body, "\"envVars\":{\"FOO\":\"bar\"}"));
    assert_non_null(strstr(body, "\"accessToken\":\"tok-123\""));
    assert_non_null(strstr(body, "\"defaultUser\":\"user\""));
    assert_non_null(strstr(body, "\"defaultWorkdir\":\"/home/user\""));

    sc.step = 0;
    run_script(&sc, cold_steps, 20000);
    rt_free(sc.rt);
    loop_free(sc.loop);

    /* "Restart": a new runtime on the same state directory re-adopts. */
    memset(&sc, 0, sizeof(sc));
    sc.loop = loop_new(&lopts);
    o.loop = sc.loop;
    if (lrt_new(&o, &sc.rt, err, sizeof(err)) != 0)
        fail_msg("lrt_new: %s", err);
    run_script(&sc, adopt_steps, 20000);
    rt_free(sc.rt);
    loop_free(sc.loop);

    reap_all(sbxdir);
    umount2(sbxdir, MNT_DETACH); /* lrt_new's tmpfs */
    rmdir(sbxdir);
    rmdir(sdir);
    snprintf(path, sizeof(path), "%s/all.yaml", mdir);
    unlink(path);
    rmdir(mdir);
}

/* ---- refill pacing and claim records (pool.c, arm.c) ------------------------------- */

static const char *WIDE =
    "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxTemplate\nmetadata: {name: t}\n"
    "spec: {version: '1'}\n"
    "---\n"
    "apiVersion: agents.navix.sh/v1alpha1\nkind: SandboxPool\nmetadata: {name: wide}\n"
    "spec: {replicas: 8}\n";

#define WIDE_N 8
#define WIDE_HEAVY 3 /* lrt_options.heavy_max (--spawn-concurrency): below WIDE_N */

static int max_spawning, max_heavy, wide_ok, wide_cb;
static char wide_err[256];

/* Samples what runs on workers now: never more than WIDE_HEAVY spawns and
 * removals (the old code started a pool's every missing sandbox at once). */
static void sample_heavy(struct script *sc)
{
    struct lrt *rt = (struct lrt *)sc->rt;
    int n = 0;

    for (struct lsb *s = rt->sbxs; s; s = s->next)
        n += s->phase == PH_SPAWNING;
    max_spawning = AB_MAX(max_spawning, n);
    max_heavy = AB_MAX(max_heavy, rt->heavy);
}

/* A claim is reported only once the state record on disk says it is running
 * (written on a worker: a restarted agent must never see it as idle). */
static void wide_claim_cb(void *arg, int err, const char *msg, const struct rt_sandbox *s)
{
    char path[400], want[96], *text = NULL;
    size_t n = 0;

    (void)arg;
    wide_cb++;
    if (err != 0 || !s) {
        snprintf(wide_err, sizeof(wide_err), "claim failed: %s", msg ? msg : "?");
        return;
    }
    /* envd_addr is unix:<dir>/run/envd.sock */
    snprintf(path, sizeof(path), "%s", s->envd_addr + 5);
    *strrchr(path, '/') = '\0';
    *strrchr(path, '/') = '\0';
    const char *buf = lsbx_record_read(path, &text, &n, NULL) == 0 ? text : "";
    snprintf(want, sizeof(want), "\"id\":\"%s\"", s->id);
    if (!strstr(buf, "\"phase\":\"running\"") || !strstr(buf, want))
        snprintf(wide_err, sizeof(wide_err),
                 "claim %s reported before its state record said so: %.150s", s->id, buf);
    else
        wide_ok++;
    free(text);
}

static int wide_steps(struct script *sc)
{
    struct rt_claim_options o = {0};
    char err[256], id[32];

    sample_heavy(sc);
    switch (sc->step) {
    case 0: /* the pool fills, a few spawns at a time */
        if (!status_is(sc, "wide", WIDE_N, 0))
            return 0;
        for (int i = 0; i < WIDE_N; i++) {
            snprintf(id, sizeof(id), "wide-%d", i);
            o.id = id;
            o.timeout_s = 60;
            CHECK(rt_claim(sc->rt, "default", "wide", RT_TARGET_POOL, NULL, &o, wide_claim_cb, sc,
                           NULL, err, sizeof(err)) == 0);
        }
        sc->step++;
        return 1;
    case 1:
        if (wide_cb < WIDE_N)
            return 0;
        CHECK(wide_err[0] == '\0');
        CHECK(wide_ok == WIDE_N);
        for (int i = 0; i < WIDE_N; i++) { /* every place frees at once */
            snprintf(id, sizeof(id), "wide-%d", i);
            CHECK(rt_release(sc->rt, id) == 0);
        }
        sc->step++;
        return 1;
    case 2: /* removals and replacements, paced too */
        if (!status_is(sc, "wide", WIDE_N, 0))
            return 0;
        sc->step = -1;
        return 1;
    }
    return -1;
}

static void test_spawns_paced_claims_recorded_first(void **state)
{
    const char *args[] = {NULL};
    struct lrt_options o = {0};
    struct script sc;
    char mdir[256], sdir[256], sbxdir[300], err[512], path[600];
    FILE *f;

    (void)state;
    if (!have_root())
        skip();
    snprintf(mdir, sizeof(mdir), "%s/wm", state_dir);
    snprintf(sdir, sizeof(sdir), "%s/wst", state_dir);
    snprintf(sbxdir, sizeof(sbxdir), "%s/sandboxes", sdir);
    assert_int_equal(mkdir(mdir, 0700), 0);
    snprintf(path, sizeof(path), "%s/all.yaml", mdir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(WIDE, f);
    fclose(f);
    memset(&sc, 0, sizeof(sc));
    /* more workers than WIDE_HEAVY: the bound is the runtime's, not the loop's */
    sc.loop = loop_new(&(struct loop_options){.workers = WIDE_HEAVY + 4});
    assert_non_null(sc.loop);
    o.loop = sc.loop;
    o.cluster_id = "here";
    o.state_dir = sdir;
    o.manifests_dir = mdir;
    o.envd_path = self_exe;
    o.envd_args = args;
    o.heavy_max = WIDE_HEAVY;
    if (lrt_new(&o, &sc.rt, err, sizeof(err)) != 0)
        fail_msg("lrt_new: %s", err);
    run_script(&sc, wide_steps, 60000);
    rt_free(sc.rt);
    loop_free(sc.loop);
    reap_all(sbxdir);
    umount2(sbxdir, MNT_DETACH); /* lrt_new's tmpfs */
    rmdir(sbxdir);
    rmdir(sdir);
    unlink(path);
    rmdir(mdir);
    assert_true(max_spawning >= 1);
    if (max_spawning > WIDE_HEAVY || max_heavy > WIDE_HEAVY)
        fail_msg("%d spawns (%d heavy jobs) ran at once; at most %d may", max_spawning, max_heavy,
                 WIDE_HEAVY);
}

/* ---- the envd zygote (zygote.h) ------------------------------------------------------- */

static void zygote_up(void)
{
    const struct sock_fprog *filter;
    char err[512];

    assert_int_equal(lsec_program(&filter, err, sizeof(err)), 0);
    if (lzy_start(self_exe, filter, &test_zygote, err, sizeof(err)) != 0)
        fail_msg("zygote: %s", err);
}

static void zygote_down(void)
{
    lzy_free(test_zygote);
    test_zygote = NULL;
}

/* The same isolation tests, the sandboxes forked by a zygote. */
static void with_zygote(void (*fn)(void **), void **state)
{
    if (!have_root())
        skip();
    zygote_up();
    fn(state);
    zygote_down();
}

static void test_namespaces_and_mounts(void **state);
static void test_mount_plan_and_confinement(void **state);
static void test_network_is_isolated(void **state);
static void test_egress_veth_and_no_host_loopback(void **state);
static void test_kill_leaves_no_process(void **state);

static void test_zygote_namespaces_and_mounts(void **state)
{
    with_zygote(test_namespaces_and_mounts, state);
}

static void test_zygote_mount_plan_and_confinement(void **state)
{
    with_zygote(test_mount_plan_and_confinement, state);
}

static void test_zygote_network_is_isolated(void **state)
{
    with_zygote(test_network_is_isolated, state);
}

static void test_zygote_egress_veth(void **state)
{
    with_zygote(test_egress_veth_and_no_host_loopback, state);
}

static void test_zygote_kill_leaves_no_process(void **state)
{
    with_zygote(test_kill_leaves_no_process, state);
}

/* The parent, from /proc/<pid>/status. */
static pid_t ppid_of(pid_t pid)
{
    char path[64], line[256];
    int ppid = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "r")))
        return 0;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "PPid: %d", &ppid) == 1)
            break;
    fclose(f);
    return ppid;
}

static void ns_kind_of(pid_t pid, const char *ns, char *out, size_t len)
{
    char path[64];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/%d/ns/%s", (int)pid, ns);
    n = readlink(path, out, len - 1);
    out[n > 0 ? n : 0] = '\0';
}

/* Each sandbox is a child of the zygote in namespaces of its own (none
 * shared with the zygote or with the other sandbox), with a stack
 * protector value of its own; and a zygote that dies (an OOM kill) is
 * started again by the next spawn. */
static void test_zygote_forks_separate_sandboxes(void **state)
{
    static const char *const kinds[] = {"pid", "mnt", "net", "uts", "ipc", "user", "cgroup"};
    struct lsbx a, b;
    char na[128], nb[128], nz[128], ca[64], cb[64];
    pid_t z;

    (void)state;
    if (!have_root())
        skip();
    zygote_up();
    z = lzy_pid(test_zygote);
    spawn(&a, false);
    spawn(&b, false);
    assert_false(a.is_child);
    assert_int_equal(ppid_of(a.pid), z);
    assert_int_equal(ppid_of(b.pid), z);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        ns_kind_of(a.pid, kinds[i], na, sizeof(na));
        ns_kind_of(b.pid, kinds[i], nb, sizeof(nb));
        ns_kind_of(z, kinds[i], nz, sizeof(nz));
        assert_true(na[0] && nb[0] && nz[0]);
        if (!strcmp(na, nb) || !strcmp(na, nz))
            fail_msg("%s namespace shared: %s (other sandbox %s, zygote %s)", kinds[i], na, nb, nz);
    }
#if defined(__x86_64__)
    ask(&a, "canary", ca, sizeof(ca));
    ask(&b, "canary", cb, sizeof(cb));
    assert_true(strlen(ca) > 4);
    if (!strcmp(ca, cb))
        fail_msg("two sandboxes share the stack protector value %s", ca);
#endif
    assert_int_equal(lsbx_destroy(&a, 5000), 0);
    assert_int_equal(lsbx_destroy(&b, 5000), 0);

    kill(z, SIGKILL);
    waitpid(z, NULL, 0);
    spawn(&a, false);
    assert_int_not_equal(lzy_pid(test_zygote), z);
    assert_int_equal(ppid_of(a.pid), lzy_pid(test_zygote));
    ask(&a, "pid", na, sizeof(na));
    assert_string_equal(na, "1 0\n");
    assert_int_equal(lsbx_destroy(&a, 5000), 0);
    zygote_down();
}

/* Whether needle is anywhere in the writable memory of pid (regions of
 * at most 64 MiB: the sanitizer's shadow is terabytes of nothing). */
static bool memory_holds(pid_t pid, const char *needle)
{
    char path[64], line[512];
    size_t nl = strlen(needle);
    bool found = false;
    FILE *maps;
    int mem;

    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    maps = fopen(path, "r");
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    mem = open(path, O_RDONLY);
    assert_non_null(maps);
    assert_true(mem >= 0);
    while (!found && fgets(line, sizeof(line), maps)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || perms[1] != 'w' ||
            hi - lo > (64UL << 20))
            continue;
        char *buf = malloc(hi - lo);
        assert_non_null(buf);
        ssize_t n = pread(mem, buf, hi - lo, (off_t)lo);
        for (ssize_t i = 0; n > 0 && i + (ssize_t)nl <= n; i++)
            if (buf[i] == needle[0] && !memcmp(buf + i, needle, nl)) {
                found = true;
                break;
            }
        free(buf);
    }
    fclose(maps);
    close(mem);
    return found;
}

/* An attack on the zygote's memory: every sandbox's memory starts as a
 * copy of the zygote's, so the zygote must hold no plan once its fork is
 * made (it would be in every later sandbox), and a sandbox forked after
 * another must find nothing of the other's plan in its own memory. */
static void test_zygote_keeps_no_plan(void **state)
{
    const char *argv[] = {self_exe, "--fake-envd", LSBX_INNER_SOCKET, NULL};
    struct lsbx_options o = {.argv = argv};
    struct lsbx a, b;
    char dir[256], err[512], out[64];

    (void)state;
    if (!have_root())
        skip();
    zygote_up();
    o.zygote = test_zygote;
    o.id = "first-of-two-with-a-long-name";
    snprintf(dir, sizeof(dir), "%s/%s", state_dir, o.id);
    o.dir = dir;
    if (lsbx_spawn(&o, &a, err, sizeof(err)) != 0)
        fail_msg("spawn: %s", err);
    o.id = "b2";
    snprintf(dir, sizeof(dir), "%s/%s", state_dir, o.id);
    if (lsbx_spawn(&o, &b, err, sizeof(err)) != 0)
        fail_msg("spawn: %s", err);
    ask(&b, "pid", out, sizeof(out));                        /* b is running its program */
    assert_true(memory_holds(b.pid, "/b2/data"));            /* the probe finds b's own plan */
    assert_false(memory_holds(b.pid, "of-two-with-a-long")); /* and nothing of a's */
    assert_false(memory_holds(lzy_pid(test_zygote), "/b2/data"));
    assert_int_equal(lsbx_destroy(&a, 5000), 0);
    assert_int_equal(lsbx_destroy(&b, 5000), 0);
    zygote_down();
}

/* The socket inodes pid holds ("socket:[N]" links in /proc/<pid>/fd), at most max. */
static int socket_inodes(pid_t pid, unsigned long *out, int max)
{
    char path[64], link[64], fdpath[128];
    struct dirent *de;
    int n = 0;
    DIR *d;

    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    if (!(d = opendir(path)))
        return 0;
    while ((de = readdir(d)) != NULL && n < max) {
        ssize_t l;
        snprintf(fdpath, sizeof(fdpath), "%s/%s", path, de->d_name);
        if ((l = readlink(fdpath, link, sizeof(link) - 1)) <= 0)
            continue;
        link[l] = '\0';
        if (sscanf(link, "socket:[%lu]", &out[n]) == 1)
            n++;
    }
    closedir(d);
    return n;
}

/* The zygote forks inits as host root with whatever plan it is sent, so a
 * sandbox holding its socket could ask for an unconfined one: no process
 * of a sandbox may hold any socket of the zygote's or of the agent's. */
static void test_zygote_unreachable_from_sandbox(void **state)
{
    unsigned long theirs[256], ours[256];
    struct lsbx s;
    char out[64];
    int nt = 0, no;

    (void)state;
    if (!have_root())
        skip();
    zygote_up();
    spawn(&s, false);
    ask(&s, "spawn", out, sizeof(out)); /* a child of the init too */
    nt = socket_inodes(lzy_pid(test_zygote), theirs, 128);
    nt += socket_inodes(getpid(), theirs + nt, 128);
    assert_true(nt >= 2); /* the zygote's end and ours at least */
    char ns[128], link[128], path[300];
    ns_of(s.pid, ns, sizeof(ns));
    DIR *d = opendir("/proc");
    struct dirent *de;
    int checked = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        snprintf(path, sizeof(path), "/proc/%s/ns/pid", de->d_name);
        ssize_t l = readlink(path, link, sizeof(link) - 1);
        if (l <= 0)
            continue;
        link[l] = '\0';
        if (strcmp(link, ns) != 0)
            continue;
        checked++;
        no = socket_inodes(atoi(de->d_name), ours, 256);
        for (int i = 0; i < no; i++)
            for (int j = 0; j < nt; j++)
                if (ours[i] == theirs[j])
                    fail_msg("sandbox process %s holds socket %lu of the zygote or the agent",
                             de->d_name, ours[i]);
    }
    closedir(d);
    assert_true(checked >= 2); /* the init and its child were looked at */
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    zygote_down();
}

/* A garbled plan (strings without their ends) is refused by the zygote
 * with EINVAL, nothing forked, and the zygote goes on serving. */
static void test_zygote_refuses_garbled_plans(void **state)
{
    static struct lsbx_plan bad;
    struct lsbx s;
    int sp[2], ep[2];
    pid_t pid = 1;
    char err[512], out[64];

    (void)state;
    if (!have_root())
        skip();
    zygote_up();
    memset(&bad, 0, sizeof(bad));
    bad.argc = 1;
    bad.strings_len = 3;
    memcpy(bad.strings, "abc", 3);
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
    assert_int_equal(pipe2(ep, O_CLOEXEC), 0);
    assert_int_equal(lzy_spawn(test_zygote, &bad, ep[1], sp[0], &pid, err, sizeof(err)), AB_EIO);
    assert_int_equal(pid, 0);
    assert_non_null(strstr(err, "Invalid argument"));
    for (int i = 0; i < 2; i++)
        close(sp[i]), close(ep[i]);
    pid = lzy_pid(test_zygote);
    spawn(&s, false);
    assert_int_equal(lzy_pid(test_zygote), pid); /* the same zygote */
    ask(&s, "pid", out, sizeof(out));
    assert_string_equal(out, "1 0\n");
    assert_int_equal(lsbx_destroy(&s, 5000), 0);
    zygote_down();
}

/* A program that is not an agentbox-envd is no zygote: lzy_start says so
 * (the runtime then execs envd per sandbox). */
static void test_zygote_refuses_other_programs(void **state)
{
    const struct sock_fprog *filter;
    struct lzy *z = NULL;
    char err[512];

    (void)state;
    assert_int_equal(lsec_program(&filter, err, sizeof(err)), 0);
    assert_int_equal(lzy_start("/bin/true", filter, &z, err, sizeof(err)), AB_EIO);
    assert_null(z);
    assert_non_null(strstr(err, "did not answer as an envd zygote"));
    assert_int_equal(lzy_start("/nonexistent/envd", filter, &z, err, sizeof(err)), AB_EIO);
    assert_null(z);
}

/* The program of a sandbox: the fake envd, exec'd or called by the zygote. */
static int fake_envd_main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--fake-envd"))
        return fake_envd(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "--listen") && !strncmp(argv[2], "unix:", 5))
        return fake_envd(argv[2] + 5);
    return 2;
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namespaces_and_mounts),
        cmocka_unit_test(test_mount_plan_and_confinement),
        cmocka_unit_test(test_network_is_isolated),
        cmocka_unit_test(test_egress_veth_and_no_host_loopback),
        cmocka_unit_test(test_kill_leaves_no_process),
        cmocka_unit_test(test_spawn_does_not_copy_memory),
        cmocka_unit_test(test_shared_files_made_once),
        cmocka_unit_test(test_recycled_dir_keeps_nothing),
        cmocka_unit_test(test_readopt_or_reap),
        cmocka_unit_test(test_adopted_sandbox_is_killed_without_waitpid),
        cmocka_unit_test(test_spawn_failures_leave_nothing),
        cmocka_unit_test(test_warm_pools_claim_release_readopt),
        cmocka_unit_test(test_spawns_paced_claims_recorded_first),
        cmocka_unit_test(test_zygote_namespaces_and_mounts),
        cmocka_unit_test(test_zygote_mount_plan_and_confinement),
        cmocka_unit_test(test_zygote_network_is_isolated),
        cmocka_unit_test(test_zygote_egress_veth),
        cmocka_unit_test(test_zygote_kill_leaves_no_process),
        cmocka_unit_test(test_zygote_forks_separate_sandboxes),
        cmocka_unit_test(test_zygote_keeps_no_plan),
        cmocka_unit_test(test_zygote_unreachable_from_sandbox),
        cmocka_unit_test(test_zygote_refuses_garbled_plans),
        cmocka_unit_test(test_zygote_refuses_other_programs),
    };
    ssize_t n;
    int rc;

    if (argc == 3 && !strcmp(argv[1], LZY_FLAG))
        return lzy_serve(atoi(argv[2]), fake_envd_main);
    if (argc == 3 && !strcmp(argv[1], "--fake-envd"))
        return fake_envd(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "--listen") && !strncmp(argv[2], "unix:", 5))
        return fake_envd(argv[2] + 5); /* as the local runtime runs envd */
    signal(SIGPIPE, SIG_IGN);
    n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (n <= 0)
        return 1;
    self_exe[n] = '\0';
    snprintf(state_dir, sizeof(state_dir), "/tmp/abx-sbx-test-XXXXXX");
    if (!mkdtemp(state_dir))
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    reap_leftovers(); /* a failed assertion skips a test's destroy */
    rmdir(state_dir);
    return rc;
}
