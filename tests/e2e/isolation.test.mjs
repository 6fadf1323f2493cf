// Sandbox isolation on the local runtime (issue 11, DESIGN §10a), tried as an
// attacker would: every test drives a real sandbox created with the
// unmodified e2b SDK through the agent, runs the attack from inside and
// asserts the refusal (and, where it matters, that nothing changed outside).
// Needs root (the runtime's namespaces) and gcc on the host (/usr is bound
// into sandboxes, so attack programs are compiled inside them).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startStack, manifestsDir, envManifest, waitPool, native, readSandboxState } from '../integration/lib/sandboxes.mjs';
import { waitFor, metricsOf } from '../integration/lib/harness.mjs';

const UID_BASE = 100000; // the agent's default --uid-base
const UID_SLICE = 65536; // each sandbox its own slice of host ids above it

// A sandbox's host uid base (from inside: its uid_map), checked to be a slice.
async function hostBase(s) {
    const map = (await ok(s, 'cat /proc/self/uid_map')).trim().split(/\s+/).map(Number);
    assert.equal(map.length, 3, `one uid_map line: ${map}`);
    assert.equal(map[0], 0);
    assert.equal(map[2], UID_SLICE);
    assert.ok(map[1] >= UID_BASE && (map[1] - UID_BASE) % UID_SLICE === 0, `a slice of host ids above ${UID_BASE}: ${map[1]}`);
    return map[1];
}

// A small pool for the resource attacks: 256 MiB of memory, 64 MiB of
// writable space, 128 processes, half a CPU.
const TIGHT = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: tight, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
  - clusterID: alpha
    members:
    - name: tight-1c0gi
      config:
        inlineResources: {requests: {cpu: 500m, memory: 256Mi, ephemeral-storage: 64Mi, pids: "128"}}
      spec: {replicas: 1, defaultStartupTimeout: 60s}
`;
// More writable space than memory: the tmpfs is charged to the sandbox's
// memory cgroup, so filling it is an OOM kill inside, of the writer.
const SPILL = TIGHT.replace(/tight/g, 'spill').replace('memory: 256Mi, ephemeral-storage: 64Mi', 'memory: 128Mi, ephemeral-storage: 256Mi');

let stack;
let alpha;
let E2B;
let sbx; // one sandbox shared by the read-only attacks
const made = [];

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    // replicas is the pool's maximum concurrency (DESIGN §7): room for the tests that hold several
    const manifests = manifestsDir([envManifest('iso', ['alpha'], { replicas: 4 }), TIGHT, SPILL]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'iso-1c0gi', (s) => s.idle === 4, 'alpha warm', 60000);
    await waitPool(alpha, 'tight-1c0gi', (s) => s.idle === 1, 'tight warm', 30000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
    sbx = await create();
});

after(async () => {
    for (const s of made) await s.kill().catch(() => {});
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

async function create(tpl = 'iso') {
    const s = await E2B.Sandbox.create(tpl, { timeoutMs: 300000 });
    made.push(s);
    return s;
}

// Runs cmd in s as user (default root); resolves {exitCode, stdout, stderr}
// whether or not the command failed.
async function sh(s, cmd, { user = 'root', timeoutMs = 60000 } = {}) {
    try {
        return await s.commands.run(cmd, { user, timeoutMs });
    } catch (e) {
        if (e && typeof e.exitCode === 'number') return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr, error: e.error };
        throw e;
    }
}

async function ok(s, cmd, opts) {
    const r = await sh(s, cmd, opts);
    assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}${logs()}`);
    return r.stdout;
}

async function refused(s, cmd, opts) {
    const r = await sh(s, cmd, opts);
    assert.notEqual(r.exitCode, 0, `${cmd} must fail inside a sandbox, got: ${r.stdout}`);
    return r;
}

// Compiles (once per sandbox) and runs a C program inside s.
async function cprog(s, name, source, opts) {
    await s.files.write(`/tmp/${name}.c`, source, { user: 'root' });
    await ok(s, `gcc -O0 -o /tmp/${name} /tmp/${name}.c`, opts);
    return sh(s, `/tmp/${name}`, opts);
}

// The host directory of a sandbox: the one whose home holds marker.
function hostSandboxDir(marker) {
    const root = path.join(alpha.stateDir, 'sandboxes');
    for (const d of fs.readdirSync(root)) {
        if (fs.existsSync(path.join(root, d, 'home', marker))) return path.join(root, d);
    }
    throw new Error(`no sandbox directory under ${root} holds home/${marker}`);
}

function statusField(status, field) {
    const m = new RegExp(`^${field}:\\s*(\\S+)`, 'm').exec(status);
    assert.ok(m, `/proc/self/status has ${field}`);
    return m[1];
}

// ---- 1. user namespace, privileges, seccomp ------------------------------------------

test('host uids: every sandbox its own slice, so files of two sandboxes never share an owner', async () => {
    const a = await create();
    const b = await create();
    await ok(a, 'touch ~/slice-a', { user: 'user' });
    await ok(b, 'touch ~/slice-b', { user: 'user' });
    await ok(a, 'touch /home/user/slice-a-root', { user: 'root' });
    await ok(b, 'touch /home/user/slice-b-root', { user: 'root' });
    const da = hostSandboxDir('slice-a'), db = hostSandboxDir('slice-b');
    const ua = fs.statSync(path.join(da, 'home', 'slice-a')).uid, ub = fs.statSync(path.join(db, 'home', 'slice-b')).uid;
    const ra = fs.statSync(path.join(da, 'home', 'slice-a-root')).uid, rb = fs.statSync(path.join(db, 'home', 'slice-b-root')).uid;
    assert.notEqual(ua, ub, `user of A (${ua}) and of B (${ub}) are different host uids`);
    assert.notEqual(ra, rb, `root of A (${ra}) and of B (${rb}) are different host uids`);
    const [baseA, baseB] = [await hostBase(a), await hostBase(b)];
    assert.equal(ua, baseA + 1000);
    assert.equal(ub, baseB + 1000);
    assert.ok(Math.abs(baseA - baseB) >= UID_SLICE, 'the slices do not overlap');
    // the slice is recorded for a restarted agent
    const st = readSandboxState(da);
    assert.equal(st.uid_base, baseA);
    await a.kill();
    await b.kill();
});

test('sandbox root is not host root: uid map, files it creates are owned by the mapped ids', async () => {
    const base = await hostBase(sbx);
    const gmap = (await ok(sbx, 'cat /proc/self/gid_map')).trim().split(/\s+/).map(Number);
    assert.deepEqual(gmap, [0, base, UID_SLICE]);
    await ok(sbx, 'touch /home/user/made-by-root');
    const dir = hostSandboxDir('made-by-root');
    const st = fs.statSync(path.join(dir, 'home', 'made-by-root'));
    assert.equal(st.uid, base, 'a file root makes is the host base of its slice');
    assert.equal(st.gid, base);
    // the user namespace is not the host's
    const inner = (await ok(sbx, 'readlink /proc/self/ns/user')).trim();
    assert.notEqual(inner, fs.readlinkSync('/proc/self/ns/user'));
    const cg = (await ok(sbx, 'readlink /proc/self/ns/cgroup')).trim();
    assert.notEqual(cg, fs.readlinkSync('/proc/self/ns/cgroup'), 'own cgroup namespace');
});

test('capabilities: no SYS_ADMIN, NET_ADMIN, NET_RAW, MKNOD, DAC_READ_SEARCH, SYS_MODULE, SYS_PTRACE; no_new_privs; seccomp', async () => {
    const st = await ok(sbx, 'cat /proc/self/status');
    const forbidden = { SYS_ADMIN: 21, NET_ADMIN: 12, NET_RAW: 13, MKNOD: 27, DAC_READ_SEARCH: 2, SYS_MODULE: 16, SYS_PTRACE: 19, SYS_RAWIO: 17, SYS_BOOT: 22, SYS_TIME: 25, SYSLOG: 34, BPF: 39, PERFMON: 38 };
    for (const f of ['CapEff', 'CapPrm', 'CapBnd', 'CapInh', 'CapAmb']) {
        const v = BigInt('0x' + statusField(st, f));
        for (const [name, bit] of Object.entries(forbidden)) {
            assert.equal((v >> BigInt(bit)) & 1n, 0n, `${f} must not hold CAP_${name} (${f} ${v.toString(16)})`);
        }
    }
    // what a root shell still needs: chown, setuid/setgid, kill (bits 0, 7, 6, 5)
    const eff = BigInt('0x' + statusField(st, 'CapEff'));
    for (const bit of [0, 5, 6, 7]) assert.equal((eff >> BigInt(bit)) & 1n, 1n, `CapEff keeps bit ${bit}`);
    assert.equal(statusField(st, 'NoNewPrivs'), '1');
    assert.equal(statusField(st, 'Seccomp'), '2', 'a seccomp filter is installed');
});

test('mounts: no fresh procfs (core_pattern), no remount of system directories, no unmount', async () => {
    await ok(sbx, 'mkdir -p /tmp/p');
    await refused(sbx, 'mount -t proc proc /tmp/p');
    assert.equal((await ok(sbx, 'ls /tmp/p | wc -l')).trim(), '0');
    for (const d of ['/usr', '/etc', '/.agentbox']) {
        await refused(sbx, `mount -o remount,bind,rw ${d}`);
    }
    await refused(sbx, 'touch /usr/pwned');
    await refused(sbx, 'touch /etc/pwned');
    await refused(sbx, 'umount -l /usr');
    await refused(sbx, 'mount -t tmpfs t /tmp/p');
    // the host's kernel settings stay out of reach
    await refused(sbx, 'echo "|/tmp/x" > /proc/sys/kernel/core_pattern');
    await refused(sbx, 'echo 1 > /proc/sys/vm/drop_caches');
    assert.notEqual(fs.readFileSync('/proc/sys/kernel/core_pattern', 'utf8').trim(), '|/tmp/x');
    await refused(sbx, 'echo h > /proc/sysrq-trigger');
    await refused(sbx, 'dmesg');
});

test('namespaces: unshare and nsenter refused', async () => {
    await refused(sbx, 'unshare -U true');
    await refused(sbx, 'unshare -Ur true');
    await refused(sbx, 'unshare -m true');
    await refused(sbx, 'unshare -n true');
    await refused(sbx, 'unshare -p -f true');
    await refused(sbx, 'nsenter -t 1 -m true');
    // the same as an unprivileged user
    await refused(sbx, 'unshare -Ur true', { user: 'user' });
});

test('device nodes: mknod of a block or char device is refused, a fifo works', async () => {
    await refused(sbx, 'mknod /tmp/sda b 8 0');
    await refused(sbx, 'mknod /tmp/mem c 1 1');
    await ok(sbx, 'mkfifo /tmp/fifo && test -p /tmp/fifo');
});

test('system calls: file handles, bpf, perf, modules, kexec, keyrings, setns, userfaultfd, io_uring are EPERM', async () => {
    const src = String.raw`
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>
static void try(const char *name, long rc) {
    printf("%s %s\n", name, rc < 0 ? strerrorname_np(errno) : "ALLOWED");
}
int main(void) {
    char fh[128 + 8] = {0};
    int mnt = 0;
    *(unsigned *)fh = 128;
    try("name_to_handle_at", syscall(SYS_name_to_handle_at, AT_FDCWD, "/", fh, &mnt, 0));
    try("open_by_handle_at", syscall(SYS_open_by_handle_at, AT_FDCWD, fh, O_RDONLY));
    try("bpf", syscall(SYS_bpf, 0, 0, 0));
    try("perf_event_open", syscall(SYS_perf_event_open, 0, 0, -1, -1, 0));
    try("init_module", syscall(SYS_init_module, 0, 0, ""));
    try("finit_module", syscall(SYS_finit_module, 0, "", 0));
    try("delete_module", syscall(SYS_delete_module, "ext4", 0));
    try("kexec_load", syscall(SYS_kexec_load, 0, 0, 0, 0));
    try("add_key", syscall(SYS_add_key, "user", "k", "v", 1, -4));
    try("request_key", syscall(SYS_request_key, "user", "k", 0, 0));
    try("keyctl", syscall(SYS_keyctl, 0, -3, 0));
    try("setns", syscall(SYS_setns, open("/proc/1/ns/mnt", O_RDONLY), 0));
    try("unshare_user", syscall(SYS_unshare, CLONE_NEWUSER));
    try("unshare_ns", syscall(SYS_unshare, CLONE_NEWNS));
    try("clone_newuser", syscall(SYS_clone, CLONE_NEWUSER | 17, 0, 0, 0, 0));
    try("userfaultfd", syscall(SYS_userfaultfd, 0));
    try("io_uring_setup", syscall(SYS_io_uring_setup, 8, fh));
    try("mount", syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, 0));
    try("umount2", syscall(SYS_umount2, "/usr", 2));
    try("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp"));
    try("open_tree", syscall(428, AT_FDCWD, "/usr", 1));
    try("fsopen", syscall(430, "tmpfs", 0));
    try("swapon", syscall(SYS_swapon, "/tmp/x", 0));
    try("syslog", syscall(SYS_syslog, 3, fh, 64));
    try("clock_settime", syscall(SYS_clock_settime, 0, fh));
    try("sethostname", syscall(SYS_sethostname, "x", 1));
    try("clone3", syscall(435, fh, 88));
    try("getpid", syscall(SYS_getpid));
    return 0;
}`;
    const r = await cprog(sbx, 'sys', src);
    assert.equal(r.exitCode, 0, r.stderr);
    const got = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split(' ')));
    assert.equal(got.getpid, 'ALLOWED', 'the filter lets ordinary calls through');
    assert.equal(got.clone3, 'ENOSYS', 'clone3 is ENOSYS so libc falls back to clone');
    for (const [name, res] of Object.entries(got)) {
        if (name === 'getpid' || name === 'clone3') continue;
        assert.equal(res, 'EPERM', `${name} must be refused with EPERM (got ${res})`);
    }
    // as the unprivileged user too
    const u = await sh(sbx, '/tmp/sys', { user: 'user' });
    for (const l of u.stdout.trim().split('\n')) {
        const [name, res] = l.split(' ');
        if (name !== 'getpid' && name !== 'clone3') assert.notEqual(res, 'ALLOWED', `${name} as user`);
    }
});

test('other architectures: i386 int 0x80 and x32 system calls kill the process', async () => {
    const src = String.raw`
#include <stdio.h>
#include <string.h>
int main(int argc, char **argv) {
    long rc = -1;
    if (argc > 1 && strcmp(argv[1], "i386") == 0) {
        __asm__ volatile("int $0x80" : "=a"(rc) : "a"(20L) : "memory"); /* i386 getpid */
    } else {
        __asm__ volatile("syscall" : "=a"(rc) : "a"(0x40000000L | 39L) : "rcx", "r11", "memory");
    }
    printf("survived %ld\n", rc);
    return 0;
}`;
    await sbx.files.write('/tmp/arch.c', src, { user: 'root' });
    await ok(sbx, 'gcc -O0 -o /tmp/arch /tmp/arch.c');
    for (const a of ['i386', 'x32']) {
        const r = await sh(sbx, `/tmp/arch ${a}; echo "status=$?"`);
        assert.doesNotMatch(r.stdout, /survived/, `${a} entry point must not run`);
        assert.match(r.stdout, /status=159/, `${a}: killed by SIGSYS (128+31): ${r.stdout}`);
    }
});

test('the host is out of view: no /sys cgroups, no host processes, kallsyms hidden', async () => {
    await refused(sbx, 'test -e /sys/fs/cgroup/memory/release_agent');
    await refused(sbx, 'ls /sys/fs/cgroup/memory');
    const pids = (await ok(sbx, 'ls /proc | grep -E "^[0-9]+$" | sort -n | head -1')).trim();
    assert.equal(pids, '1', 'the sandbox has its own pid namespace');
    // a host process's pid is not nameable inside
    await refused(sbx, `kill -0 ${process.pid}`);
    const ks = await sh(sbx, 'head -1 /proc/kallsyms');
    assert.ok(ks.exitCode !== 0 || ks.stdout === '' || /^0{16} /.test(ks.stdout), `kallsyms addresses hidden: ${ks.stdout}`);
});

// ---- 2. users ---------------------------------------------------------------------------

test('users: `user` (1000, /home/user) by default, `root` on request, both in the sandbox\'s own passwd', async () => {
    const s = await create();
    const run = async (cmd, opts = {}) => {
        const r = await s.commands.run(cmd, opts);
        assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}${logs()}`);
        return r.stdout;
    };
    assert.equal(await run('whoami'), 'user\n');
    assert.equal(await run('id'), 'uid=1000(user) gid=1000(user) groups=1000(user)\n');
    assert.equal(await run('cd ~ && pwd'), '/home/user\n');
    assert.equal(await run('echo "$HOME"'), '/home/user\n');
    assert.equal(await run('pwd'), '/home/user\n');
    assert.equal(await run('whoami', { user: 'root' }), 'root\n');
    assert.equal(await run('id -u; echo ~; cd ~ && pwd', { user: 'root' }), '0\n/root\n/root\n');
    assert.equal(await run('touch /root/x && echo ok', { user: 'root' }), 'ok\n', "root's home is root's");
    // the sandbox's accounts, not the host's
    const passwd = await run('cat /etc/passwd');
    assert.match(passwd, /^user:x:1000:1000:[^:]*:\/home\/user:/m);
    assert.match(passwd, /^root:x:0:0:/m);
    assert.doesNotMatch(passwd, /postgres/, 'host accounts are not listed');
    assert.match(await run('cat /etc/group'), /^user:x:1000:/m);
    const shadow = await sh(s, 'cat /etc/shadow', { user: 'root' });
    assert.doesNotMatch(shadow.stdout, /root:/, "the host's password hashes stay hidden");

    // relative paths and ~ resolve in the request's user's home
    await s.files.write('notes.txt', 'mine');
    assert.equal(await run('cat /home/user/notes.txt'), 'mine');
    assert.equal(await s.files.read('notes.txt'), 'mine');
    await s.files.write('rootnote.txt', 'r', { user: 'root' });
    assert.equal(await run('cat /root/rootnote.txt', { user: 'root' }), 'r');
    // user cannot touch root's files; the host sees the mapped owners
    await refused(s, 'cat /root/rootnote.txt', { user: 'user' });
    await run('echo x > ~/by-user');
    const dir = hostSandboxDir('by-user');
    const base = await hostBase(s);
    assert.equal(fs.statSync(path.join(dir, 'home', 'by-user')).uid, base + 1000);
    assert.equal(fs.statSync(path.join(dir, 'home', 'notes.txt')).uid, base + 1000);
    // git config --global writes the user's ~/.gitconfig
    await run('git config --global user.name tester && git config --global user.name');
    assert.match(await run('cat ~/.gitconfig'), /name = tester/);
    // nothing of the user's can gain privileges back
    await refused(s, 'su -c true root </dev/null', { user: 'user' });
});

// ---- 3. filesystem ----------------------------------------------------------------------

function mountsOf(mountinfo) {
    const out = {};
    for (const l of mountinfo.trim().split('\n')) {
        const f = l.split(' ');
        const sep = f.indexOf('-');
        out[f[4]] = { opts: f[5].split(','), fstype: f[sep + 1], super: (f[sep + 3] || '').split(',') };
    }
    return out;
}

test('filesystem: writable mounts are nodev,nosuid; system directories read-only; only envd bound in', async () => {
    const m = mountsOf(await ok(sbx, 'cat /proc/self/mountinfo'));
    for (const mp of ['/', '/home/user', '/tmp', '/run/agentbox', '/dev/shm']) {
        assert.ok(m[mp], `${mp} is a mount (${Object.keys(m).join(' ')})`);
        assert.ok(m[mp].opts.includes('nosuid') && m[mp].opts.includes('nodev'), `${mp}: ${m[mp].opts}`);
    }
    for (const mp of ['/usr', '/etc', '/proc/sys', '/proc/sysrq-trigger', '/proc/irq', '/.agentbox/agentbox-envd']) {
        if ((await sh(sbx, `test -e ${mp}`)).exitCode !== 0) continue; // this kernel has none
        assert.ok(m[mp], `${mp} is a mount`);
        assert.ok(m[mp].opts.includes('ro'), `${mp} is read-only: ${m[mp].opts}`);
    }
    assert.equal(await ok(sbx, 'ls -A /.agentbox'), 'agentbox-envd\n', 'only the envd binary of the agent');
    await refused(sbx, 'ls /.agentbox/../agentbox-agent');
    await refused(sbx, 'echo 1 > /proc/sys/kernel/ns_last_pid');
    const w = await sh(sbx, 'echo 1 > /proc/sys/kernel/ns_last_pid');
    assert.match(w.stderr, /Read-only file system/);
    for (const f of ['/proc/kcore', '/proc/keys', '/proc/kallsyms', '/proc/timer_list']) {
        if ((await sh(sbx, `test -e ${f}`)).exitCode !== 0) continue;
        assert.equal((await ok(sbx, `cat ${f} | wc -c`)).trim(), '0', `${f} is masked`);
    }
    // set-uid programs do not gain anything (no_new_privs, nosuid)
    await ok(sbx, 'cp /bin/ls /tmp/suid && chmod 4755 /tmp/suid');
    assert.equal((await ok(sbx, '/tmp/suid -d / >/dev/null; id -u', { user: 'user' })).trim(), '1000');
});

test('filesystem: a minimal /dev, a bounded /dev/shm', async () => {
    const dev = (await ok(sbx, 'ls -A /dev')).trim().split('\n').sort();
    assert.deepEqual(dev, ['fd', 'full', 'null', 'ptmx', 'pts', 'random', 'shm', 'stderr', 'stdin', 'stdout', 'tty', 'urandom', 'zero']);
    const shmKiB = Number((await ok(sbx, "df -k --output=size /dev/shm | tail -1")).trim());
    assert.ok(shmKiB > 0 && shmKiB <= 64 * 1024, `/dev/shm is ${shmKiB} KiB`);
    const r = await sh(sbx, 'dd if=/dev/zero of=/dev/shm/fill bs=1M count=100 2>&1; rm -f /dev/shm/fill');
    assert.match(r.stdout, /No space left on device/);
});

test('filesystem: writing past ephemeral-storage is ENOSPC inside and fills nothing outside', async () => {
    const s = await create('tight');
    const kib = Number((await ok(s, 'df -k --output=size /home/user | tail -1')).trim());
    assert.equal(kib, 64 * 1024, 'home is the pool\'s ephemeral-storage');
    const r = await sh(s, 'dd if=/dev/zero of=/home/user/fill bs=1M count=200 2>&1; echo "dd=$?"', { user: 'user' });
    assert.match(r.stdout, /No space left on device/);
    assert.match(r.stdout, /dd=1/);
    const t = await sh(s, 'dd if=/dev/zero of=/tmp/more bs=1M count=10 2>&1', { user: 'user' });
    assert.match(t.stdout, /No space left on device/, '/tmp shares the bound');
    const dir = hostSandboxDir('fill');
    assert.ok(fs.statSync(path.join(dir, 'home', 'fill')).size <= 64 * 1024 * 1024);
    // the sandbox still works, and frees its space
    await ok(s, 'rm /home/user/fill /tmp/more && echo fine > /home/user/after', { user: 'user' });
    await s.kill();
});

test("filesystem: envd's log is on the sandbox's own space, out of its root's reach; the sandbox directories are a tmpfs", async () => {
    // a spawn makes no disk inodes: the agent's sandbox directories are a tmpfs
    const sbxRoot = path.join(alpha.stateDir, 'sandboxes');
    assert.equal(fs.statfsSync(sbxRoot).type, 0x01021994, `${sbxRoot} is a tmpfs`);
    const s = await create('tight');
    await ok(s, 'touch /home/user/logplace', { user: 'user' });
    const dir = hostSandboxDir('logplace');
    // the log counts against the pool's ephemeral-storage (64 MiB), not the shared tmpfs
    const logPath = path.join(dir, 'data', 'envd.log');
    const fsOfLog = fs.statfsSync(logPath);
    assert.equal(fsOfLog.blocks * fsOfLog.bsize, 64 * 1024 * 1024, 'the log is on the sandbox\'s writable space');
    assert.ok(fs.statSync(logPath).size > 0, 'envd logged');
    assert.equal(fs.existsSync(path.join(dir, 'envd.log')), false, 'no log in the shared directory');
    // the sandbox's root cannot reopen envd's stdout to write to it
    const r = await sh(s, 'sh -c "echo flood > /proc/1/fd/1" 2>&1; echo "rc=$?"');
    assert.match(r.stdout, /Permission denied/);
    assert.match(r.stdout, /rc=[12]/);
    await s.kill();
});

// ---- 4. cgroups -------------------------------------------------------------------------

// The host cgroup paths of a sandbox (by its directory): {memory, pids, cpu}.
function cgroupsOf(dir) {
    const st = readSandboxState(dir);
    const out = {};
    for (const l of fs.readFileSync(`/proc/${st.pid}/cgroup`, 'utf8').trim().split('\n')) {
        const [, ctrls, p] = l.split(':');
        for (const c of ctrls.split(',')) {
            if (['memory', 'pids', 'cpu'].includes(c)) out[c] = path.join('/sys/fs/cgroup', c, p);
        }
    }
    return { pid: st.pid, ...out };
}

async function agentHealthy() {
    const r = await fetch(`${alpha.native}/healthz`);
    await r.arrayBuffer();
    return r.status === 200;
}

test('cgroups: one per sandbox with the pool\'s memory, CPU and pids limits; getInfo reports them', async () => {
    const s = await create('tight');
    await ok(s, 'touch ~/cg-marker', { user: 'user' });
    const dir = hostSandboxDir('cg-marker');
    const cg = cgroupsOf(dir);
    const sid = path.basename(dir);
    for (const c of ['memory', 'pids', 'cpu']) {
        assert.ok(cg[c] && cg[c].endsWith(`/agentbox/${sid}`), `${c} cgroup of the sandbox: ${cg[c]}`);
    }
    assert.equal(fs.readFileSync(path.join(cg.memory, 'memory.limit_in_bytes'), 'utf8').trim(), String(256 * 1024 * 1024));
    assert.equal(fs.readFileSync(path.join(cg.pids, 'pids.max'), 'utf8').trim(), '128');
    assert.equal(fs.readFileSync(path.join(cg.cpu, 'cpu.cfs_quota_us'), 'utf8').trim(), '50000');
    const info = await s.getInfo();
    assert.equal(info.cpuCount, 1);
    assert.equal(info.memoryMB, 256);
    assert.equal((await sbx.getInfo()).memoryMB, 512);
    // inside, the cgroup namespace hides where it is
    assert.equal((await ok(s, 'cat /proc/self/cgroup | grep -c agentbox || true')).trim(), '0');
    // the default pool gets the default pids limit
    await ok(sbx, 'touch ~/cg-default', { user: 'user' });
    const d = cgroupsOf(hostSandboxDir('cg-default'));
    assert.equal(fs.readFileSync(path.join(d.pids, 'pids.max'), 'utf8').trim(), '1024');
    assert.equal(fs.readFileSync(path.join(d.memory, 'memory.limit_in_bytes'), 'utf8').trim(), String(512 * 1024 * 1024));
    // kill ends every process of the cgroup (the runtime reaps them right
    // after the SIGKILLs: waited for here with a deadline), cgroups removed
    await s.kill();
    await waitFor(() => ['memory', 'pids', 'cpu'].every((c) => !fs.existsSync(cg[c])), { timeoutMs: 5000, what: 'the sandbox cgroups removed' });
    assert.throws(() => process.kill(cg.pid, 0), 'the sandbox init is gone');
});

test('cgroups: a memory hog loses a process inside; the sandbox and the agent go on', async () => {
    const s = await create('tight');
    const src = String.raw`
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    for (int i = 1; i <= 256; i++) {
        char *p = malloc(8 << 20);
        if (!p) { printf("malloc failed at %d MiB\n", i * 8); return 2; }
        memset(p, i, 8 << 20);
        if (i % 16 == 0) { printf("%d MiB\n", i * 8); fflush(stdout); }
    }
    printf("survived 2 GiB\n");
    return 0;
}`;
    const r = await cprog(s, 'hog', src, { user: 'user' });
    assert.doesNotMatch(r.stdout, /survived/);
    assert.notEqual(r.exitCode, 0);
    assert.match(String(r.error), /killed/, `the hog is OOM-killed (SIGKILL): ${r.exitCode} ${r.error} ${r.stdout}`);
    const mib = Number(/(\d+) MiB\n$/.exec(r.stdout)?.[1] || 0);
    assert.ok(mib <= 256, `killed before it passed the 256 MiB limit (${mib} MiB)`);
    assert.equal(await ok(s, 'echo alive', { user: 'user' }), 'alive\n', 'envd survives its sandbox\'s OOM');
    assert.ok(await agentHealthy(), 'the agent answers');
    await s.kill();
});

test('cgroups: a fork bomb hits the pids limit; the agent keeps answering', async () => {
    const s = await create('tight');
    const src = String.raw`
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void) {
    int n = 0;
    for (;;) {
        pid_t p = fork();
        if (p == 0) { pause(); _exit(0); }
        if (p < 0) { printf("forked %d then %s\n", n, strerror(errno)); fflush(stdout); break; }
        n++;
        if (n > 5000) { printf("unbounded\n"); break; }
    }
    return 0;
}`;
    const r = await cprog(s, 'bomb', src, { user: 'user' });
    assert.match(r.stdout, /forked \d+ then Resource temporarily unavailable/, r.stdout);
    const n = Number(/forked (\d+)/.exec(r.stdout)[1]);
    assert.ok(n < 128, `at most the pids limit (${n})`);
    assert.ok(await agentHealthy(), 'the agent answers while the bomb holds its processes');
    // the children are still there (pause): kill must end them all
    await ok(s, 'touch ~/bomb-marker', { user: 'user' }).catch(() => {});
    await s.kill();
    assert.ok(await agentHealthy());
});

// Every process of the sandbox, seen from the host: in its cgroups (any
// hierarchy) or in its pid namespace (nsPid: readlink of /proc/<init>/ns/pid).
function sandboxProcesses(sid, nsPid) {
    const left = [];
    for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e)) continue;
        try {
            const inCg = fs.readFileSync(`/proc/${e}/cgroup`, 'utf8').includes(`/agentbox/${sid}\n`);
            const inNs = fs.readlinkSync(`/proc/${e}/ns/pid`) === nsPid;
            if (inCg || inNs) left.push(`${e} (${fs.readFileSync(`/proc/${e}/comm`, 'utf8').trim()})`);
        } catch {
            // exited while we looked: gone
        }
    }
    return left;
}

// Starts a busy process tree in a new sandbox; resolves what the host needs
// to find every process of it afterwards.
async function busySandbox(marker) {
    const s = await create();
    await ok(s, `touch ~/${marker}`, { user: 'user' });
    const dir = hostSandboxDir(marker);
    const cg = cgroupsOf(dir);
    const nsPid = fs.readlinkSync(`/proc/${cg.pid}/ns/pid`);
    // 32 spinning shells, each with a child of its own, in the background
    await s.commands.run("for i in $(seq 32); do sh -c 'sleep 600 & while :; do :; done' & done; wait", { user: 'user', background: true });
    await waitFor(() => fs.readFileSync(path.join(cg.pids, 'cgroup.procs'), 'utf8').trim().split('\n').length > 60, { timeoutMs: 20000, what: 'the busy tree running' });
    return { s, sid: path.basename(dir), cg, nsPid };
}

// Right after a kill's answer, no waiting: nothing of the sandbox is left.
function assertAllGone({ sid, cg, nsPid }, how) {
    for (const c of ['memory', 'pids', 'cpu']) {
        const procs = path.join(cg[c], 'cgroup.procs');
        // a cgroup being removed reads ENODEV (gone: ENOENT); only an empty one can be
        let text = '';
        try {
            text = fs.readFileSync(procs, 'utf8').trim();
        } catch (e) {
            if (e.code !== 'ENOENT' && e.code !== 'ENODEV') throw e;
        }
        assert.equal(text, '', `${how}: ${c} cgroup of ${sid} is empty when the kill answers`);
    }
    assert.deepEqual(sandboxProcesses(sid, nsPid), [], `${how}: no process of ${sid} left when the kill answers`);
    assert.throws(() => process.kill(cg.pid, 0), `${how}: the sandbox init is gone (and reaped)`);
}

test('kill: answers only once every process of the sandbox (a busy tree) is gone', async () => {
    const a = await busySandbox('kill-marker');
    assert.equal(await a.s.kill(), true, 'the kill found the sandbox');
    assertAllGone(a, 'E2B DELETE /sandboxes/{id}');
    // the native API's DELETE too
    const b = await busySandbox('kill-marker-native');
    const del = await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${b.s.sandboxId}`);
    assert.equal(del.status, 202, del.text);
    assert.equal(del.json.status, 'Terminated');
    assertAllGone(b, 'native DELETE /v1/sandboxes/{id}');
    assert.ok(await agentHealthy());
});

// One series of the agent's /metrics for a sandbox (cAdvisor names), or undefined.
async function sandboxSeries(name, id) {
    const r = await fetch(`${metricsOf(alpha.e2b)}/metrics`); // the metrics listener
    const text = await r.text();
    for (const l of text.split('\n')) {
        if (l.startsWith(`${name}{`) && l.includes(`"${id}"`)) return Number(l.slice(l.lastIndexOf(' ') + 1));
    }
    return undefined;
}

test('usage comes from the sandbox\'s cgroup (v1 too): page cache and CPU time as the cgroup counts them', async () => {
    const s = await create();
    // 48 MiB on the tmpfs /tmp: page cache charged to the sandbox's memory cgroup
    await ok(s, 'head -c 50331648 /dev/zero > /tmp/cache.bin && touch ~/usage-marker', { user: 'user' });
    const cg = cgroupsOf(hostSandboxDir('usage-marker'));
    const cache = await waitFor(async () => {
        const v = await sandboxSeries('container_memory_cache', s.sandboxId);
        return v >= 48 * 1024 * 1024 ? v : null;
    }, { timeoutMs: 40000, intervalMs: 500, what: 'container_memory_cache of the sandbox at least 48 MiB (from its cgroup, not /proc)' });
    if (fs.existsSync(path.join(cg.memory, 'memory.usage_in_bytes'))) {
        const limit = Number(fs.readFileSync(path.join(cg.memory, 'memory.limit_in_bytes'), 'utf8'));
        assert.ok(cache <= limit, `cache ${cache} within the cgroup's limit ${limit}`);
    }
    const cpu = await sandboxSeries('container_cpu_usage_seconds_total', s.sandboxId);
    assert.ok(cpu > 0, `CPU time of the sandbox: ${cpu}`);
    await s.kill();
});

// ---- 5. platform secrets ------------------------------------------------------------------

test('envd tokens: random per sandbox, held in a 0600 state file, another tenant\'s token is refused', async () => {
    const a = sbx;
    const b = await create();
    await ok(b, 'echo b-secret > ~/b-secret', { user: 'user' });
    assert.match(a.envdAccessToken, /^[0-9a-f]{64}$/);
    assert.notEqual(a.envdAccessToken, b.envdAccessToken);
    const dirB = hostSandboxDir('b-secret');
    const st = fs.statSync(path.join(dirB, 'state.rec'));
    assert.equal(st.mode & 0o777, 0o600, 'the state record is the agent\'s only');
    assert.equal(readSandboxState(dirB).token, b.envdAccessToken);
    // a's token does not open b's envd through the data plane
    const body = JSON.stringify({ process: { cmd: '/bin/cat', args: ['/home/user/b-secret'] } });
    for (const token of [a.envdAccessToken, '', 'x'.repeat(64)]) {
        const r = await fetch(`${alpha.data}/process.Process/Start`, {
            method: 'POST',
            headers: {
                'E2b-Sandbox-Id': b.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': token,
                'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
            },
            body,
        });
        const text = await r.text();
        assert.equal(r.status, 401, `token ${token.slice(0, 8)}… must not run commands in b: ${r.status} ${text}`);
        assert.doesNotMatch(text, /b-secret/);
    }
    // and nothing of b is reachable from inside a (the host's system
    // directories are pruned: read-only binds every sandbox shares, checked
    // read-only above; walking their 200,000 entries with a cold page cache
    // outran the command's 60 s on a loaded machine)
    const found = await ok(a, 'find / \\( -path /proc -o -path /usr -o -path /etc -o -path /opt \\) -prune -o -name b-secret -print 2>/dev/null; true');
    assert.equal(found, '');
    await b.kill();
});

test('envd socket: its directory is not the sandbox\'s; the socket cannot be swapped for a link', async () => {
    for (const cmd of [
        'rm -f /run/agentbox/envd.sock',
        'mv /run/agentbox/envd.sock /run/agentbox/x',
        'ln -sf /tmp /run/agentbox/evil',
        'touch /run/agentbox/new',
        'chmod 777 /run/agentbox',
    ]) await refused(sbx, cmd);
    // still the socket, and the sandbox still answers through it
    assert.equal(await ok(sbx, 'test -S /run/agentbox/envd.sock && echo sock'), 'sock\n');
    await ok(sbx, 'touch ~/sock-marker', { user: 'user' });
    const run = path.join(hostSandboxDir('sock-marker'), 'run');
    const st = fs.lstatSync(run);
    assert.equal(st.uid, 0, 'host root owns the socket directory');
    assert.equal(st.mode & 0o022, 0, 'nobody else may write it');
    assert.ok(fs.lstatSync(path.join(run, 'envd.sock')).isSocket());
});

test('nothing secret in envd\'s environment or on a path the sandbox can name', async () => {
    const env = (await ok(sbx, 'tr "\\0" "\\n" < /proc/1/environ')).trim().split('\n').map((l) => l.split('=')[0]).sort();
    assert.deepEqual(env, ['HOME', 'PATH'], `envd's environment: ${env}`);
    const all = await ok(sbx, 'cat /proc/*/environ 2>/dev/null | tr "\\0" "\\n"');
    assert.doesNotMatch(all, /AGENTBOX_|JOIN_TOKEN|HUB_SECRET|PGPASSWORD|DATABASE_URL/);
    // the agent's state directory and the build directory are not in view
    await refused(sbx, `ls ${alpha.stateDir}`);
    await refused(sbx, `ls ${path.dirname(process.env.AGENTBOX_BUILD_DIR || '/work')}/build/agentbox-agent`);
    // hard links to host files cannot be made from inside (nothing of the host's to link to)
    await refused(sbx, 'ln /etc/passwd /tmp/pw && echo x >> /tmp/pw');
});

// ---- 6. no isolation, no runtime ------------------------------------------------------------

test('the agent refuses to start the local runtime without a pids or memory cgroup, naming the fix', async () => {
    const { spawnSync } = await import('node:child_process');
    const { buildDir, tempDir } = await import('../integration/lib/harness.mjs');
    for (const ctrl of ['pids', 'memory']) {
        const d = tempDir('agentbox-refuse-');
        fs.mkdirSync(path.join(d, 'm'));
        // a private mount namespace in which the controller's hierarchy is hidden
        const r = spawnSync('unshare', ['-m', 'sh', '-c',
            `mount -t tmpfs none /sys/fs/cgroup/${ctrl} && exec "$0" "$@"`,
            path.join(buildDir(), 'agentbox-agent'), 'serve', '--cluster-id', 'refuse',
            '--state-dir', path.join(d, 's'), '--manifests-dir', path.join(d, 'm'),
            '--e2b-listen', '127.0.0.1:0', '--data-listen', '127.0.0.1:0', '--native-listen', '127.0.0.1:0'],
        { encoding: 'utf8', timeout: 20000 });
        assert.notEqual(r.status, 0, `the agent must not start without ${ctrl}: ${r.stdout}${r.stderr}`);
        assert.match(r.stderr, new RegExp(`cannot isolate sandboxes: no cgroup '${ctrl}' controller`), r.stderr);
        assert.match(r.stderr, /mount -t cgroup/, 'the message says how to fix it');
    }
    // an out-of-range spawn concurrency is refused by name, before anything starts
    const d = tempDir('agentbox-refuse-');
    const r = spawnSync(path.join(buildDir(), 'agentbox-agent'), ['serve', '--cluster-id', 'refuse',
        '--state-dir', path.join(d, 's'), '--manifests-dir', d, '--spawn-concurrency', '65',
        '--e2b-listen', '127.0.0.1:0', '--data-listen', '127.0.0.1:0', '--native-listen', '127.0.0.1:0'],
    { encoding: 'utf8', timeout: 20000 });
    assert.notEqual(r.status, 0);
    assert.match(r.stderr, /spawn_concurrency must be between 1 and 64, got 65/);
});

test('cgroups: writable space larger than half the memory is capped there: ENOSPC, never an OOM of envd', async () => {
    const s = await create('spill');
    const kib = Number((await ok(s, 'df -k --output=size /home/user | tail -1')).trim());
    assert.equal(kib, 64 * 1024, 'ephemeral-storage 256Mi with 128Mi of memory gives 64 MiB');
    const r = await sh(s, 'dd if=/dev/zero of=/home/user/big bs=1M count=250 2>&1', { user: 'user' });
    assert.match(r.stdout, /No space left on device/);
    assert.equal(await ok(s, 'echo alive', { user: 'user' }), 'alive\n');
    await ok(s, 'rm -f /home/user/big', { user: 'user' });
    assert.ok(await agentHealthy());
    await s.kill();
});

// ---- network: nothing inside can change routes or craft packets ----------------------------

test('network: no route or link changes, no raw or packet sockets', async () => {
    for (const cmd of [
        'ip route add 10.99.0.0/16 dev lo',
        'ip link set lo down',
        'ip addr add 10.99.0.1/32 dev lo',
        'ip link add dummy0 type dummy',
    ]) await refused(sbx, cmd);
    assert.match(await ok(sbx, 'ip link show lo'), /UP/, 'loopback stays up');
    const src = String.raw`
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <linux/if_ether.h>
static void try(const char *name, int fd) { printf("%s %s\n", name, fd < 0 ? strerrorname_np(errno) : "ALLOWED"); }
int main(void) {
    try("raw_icmp", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
    try("raw_tcp", socket(AF_INET, SOCK_RAW, IPPROTO_TCP));
    try("raw6", socket(AF_INET6, SOCK_RAW, IPPROTO_ICMPV6));
    try("packet", socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL)));
    try("packet_dgram", socket(AF_PACKET, SOCK_DGRAM, htons(ETH_P_IP)));
    try("tcp", socket(AF_INET, SOCK_STREAM, 0));
    return 0;
}`;
    await cprog(sbx, 'raw', src);
    const r = await sh(sbx, '/tmp/raw; echo "status=$?"');
    const got = Object.fromEntries(r.stdout.trim().split('\n').map((l) => l.split(' ')));
    assert.equal(got.tcp, 'ALLOWED', `${r.exitCode} ${r.stdout} ${r.stderr}`);
    for (const k of ['raw_icmp', 'raw_tcp', 'raw6', 'packet', 'packet_dgram']) {
        assert.equal(got[k], 'EPERM', `${k} socket must be refused (no NET_RAW): ${got[k]}`);
    }
});

test('links in the sandbox\'s files never make the agent touch host files (cleanup, usage)', async () => {
    const { tempDir } = await import('../integration/lib/harness.mjs');
    const host = tempDir('agentbox-canary-');
    fs.writeFileSync(path.join(host, 'canary'), 'keep');
    fs.chmodSync(host, 0o755);
    const s = await create();
    await ok(s, `ln -s ${host} ~/to-host && ln -s ${host}/canary ~/canary-link && ln -s / ~/root-link`, { user: 'user' });
    await ok(s, 'ln -s /proc/1/root ~/proc-root', { user: 'user' });
    const dir = hostSandboxDir('to-host');
    // usage (disk) walks the sandbox directory: it must not follow the links
    await s.getMetrics?.().catch(() => {});
    await s.kill();
    await waitFor(() => !fs.existsSync(dir), { timeoutMs: 5000, what: 'the sandbox directory removed' });
    assert.equal(fs.readFileSync(path.join(host, 'canary'), 'utf8'), 'keep', 'the host file behind a link survives');
    assert.ok(fs.existsSync('/etc/passwd'));
});

test('a terminal works inside the isolation (devpts of its own), as user', async () => {
    let data = '';
    const dec = new TextDecoder();
    const h = await sbx.pty.create({ cols: 80, rows: 24, user: 'user', onData: (d) => { data += dec.decode(d); } });
    await sbx.pty.sendInput(h.pid, new TextEncoder().encode('echo "$(id -un)-$((6*7))"; tty\n'));
    await waitFor(() => /user-42/.test(data) && /\/dev\/pts\/\d+/.test(data), { timeoutMs: 10000, what: `pty output (${data})` });
    await sbx.pty.kill(h.pid);
});
