// Integration test harness: a throwaway PostgreSQL on loopback, child
// processes with captured logs, polling with deadlines, small HTTP helpers.
//
// Everything started here is registered for cleanup: call the returned
// stop/kill from t.after, and as a last resort a process 'exit' handler
// SIGKILLs whatever is still running and removes temp dirs.
import { spawn, spawnSync, execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PG_BIN = process.env.AGENTBOX_PG_BIN || '/usr/lib/postgresql/15/bin';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = () => path.resolve(here, '..', '..', '..');
export const buildDir = () => process.env.AGENTBOX_BUILD_DIR || path.join(repoRoot(), 'build');
export const migrationsDir = () => path.join(repoRoot(), 'migrations');
export const hubBin = () => path.join(buildDir(), 'agentbox-hub');

// --- cleanup ------------------------------------------------------------------

const live = new Set(); // {pid, group} of running children
const tmpDirs = new Set();

process.on('exit', () => {
    for (const p of live) {
        try {
            process.kill(p.group ? -p.pid : p.pid, 'SIGKILL');
        } catch {
            /* already gone */
        }
    }
    if (!process.env.AGENTBOX_KEEP_TMP) {
        for (const d of tmpDirs) {
            removeEgressNetns(d);
            unmountUnder(d);
            fs.rmSync(d, { recursive: true, force: true });
        }
    }
});
for (const sig of ['SIGINT', 'SIGTERM']) {
    process.once(sig, () => process.exit(130));
}

// An agent whose state directory is dir left its egress namespace
// (/run/netns/<the name in dir/egress-netns>) for a successor: a test's is
// removed with the directory.
export function removeEgressNetns(dir) {
    const files = [path.join(dir, 'egress-netns')];
    try { // a state directory one level down (<tmp>/s) counts too
        for (const e of fs.readdirSync(dir, { withFileTypes: true }))
            if (e.isDirectory()) files.push(path.join(dir, e.name, 'egress-netns'));
    } catch {
        return;
    }
    for (const f of files) {
        let name = '';
        try {
            name = fs.readFileSync(f, 'utf8').trim();
        } catch {
            continue;
        }
        if (/^[A-Za-z0-9._-]+$/.test(name)) spawnSync('ip', ['netns', 'delete', name], { stdio: 'ignore' });
    }
}

// Lazily unmounts whatever is mounted below dir (sandboxes' writable spaces
// are tmpfs mounts in the host's namespace), so the tree can be removed.
export function unmountUnder(dir) {
    let lines = [];
    try {
        lines = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n');
    } catch {
        return;
    }
    const prefix = path.resolve(dir) + '/';
    for (const l of lines) {
        const mp = l.split(' ')[4];
        if (mp && mp.startsWith(prefix)) spawnSync('umount', ['-l', mp], { stdio: 'ignore' });
    }
}

// A temp dir removed at exit (kept when AGENTBOX_KEEP_TMP is set).
export function tempDir(prefix = 'agentbox-it-') {
    const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
    tmpDirs.add(d);
    return d;
}

export function removeTempDir(d) {
    tmpDirs.delete(d);
    removeEgressNetns(d);
    if (process.env.AGENTBOX_KEEP_TMP) return;
    unmountUnder(d); // an agent's sandbox tmpfs, sandboxes' writable spaces
    fs.rmSync(d, { recursive: true, force: true });
}

// --- polling --------------------------------------------------------------------

// Polls fn (sync or async) until it returns a truthy value, which is returned.
// Throws naming `what` and the last error once timeoutMs passes.
export async function waitFor(fn, { timeoutMs = 10000, intervalMs = 50, what = 'condition' } = {}) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
        try {
            const v = await fn();
            if (v) return v;
            last = undefined;
        } catch (e) {
            last = e;
        }
        if (Date.now() >= deadline) {
            const why = last ? `: last error: ${last.message || last}` : '';
            throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${why}`);
        }
        await new Promise((r) => setTimeout(r, intervalMs));
    }
}

// --- ports ------------------------------------------------------------------------

// A port nothing listens on, chosen below the kernel's ephemeral range: a
// port the kernel hands out itself (listen on 0) may become the source port
// of an outgoing connection (to PostgreSQL, say) before the process under
// test binds it, and that bind then fails with "in use".
function canListen(port) {
    return new Promise((resolve) => {
        const s = net.createServer();
        s.unref();
        s.once('error', () => resolve(false));
        s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
}
function ephemeralStart() {
    try {
        const lo = Number(fs.readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
        return Number.isInteger(lo) && lo > 22000 ? lo : 32768;
    } catch {
        return 32768;
    }
}
const portsGiven = new Set();
export async function freePort() {
    const hi = ephemeralStart();
    for (let i = 0; i < 100; i++) {
        const port = 20000 + Math.floor(Math.random() * (hi - 20000));
        if (portsGiven.has(port)) continue;
        if (await canListen(port)) {
            portsGiven.add(port);
            return port;
        }
    }
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.unref();
        s.on('error', reject);
        s.listen(0, '127.0.0.1', () => {
            const { port } = s.address();
            s.close(() => resolve(port));
        });
    });
}

// --- processes ---------------------------------------------------------------------

// Runs a command to completion; resolves {code, stdout, stderr}; never rejects
// on a non-zero exit.
export function run(cmd, args, { env, cwd, timeoutMs = 60000, input } = {}) {
    return new Promise((resolve, reject) => {
        const child = execFile(
            cmd,
            args,
            { env: env || process.env, cwd, timeout: timeoutMs, maxBuffer: 16 << 20 },
            (err, stdout, stderr) => {
                if (err && typeof err.code !== 'number') {
                    reject(new Error(`${cmd} ${args.join(' ')}: ${err.message}\n${stderr}`));
                    return;
                }
                resolve({ code: err ? err.code : 0, stdout, stderr });
            },
        );
        if (input !== undefined) child.stdin.end(input);
    });
}

// Starts a long-running process in its own process group, logs (stdout and
// stderr) to a file. Returns {pid, logFile, logs(), exited, exitCode, stop(), kill()}.
export function spawnProc(name, cmd, args, env = process.env, { logDir, cwd } = {}) {
    const dir = logDir || tempDir(`agentbox-${name}-`);
    const logFile = path.join(dir, `${name}.log`);
    const fd = fs.openSync(logFile, 'a');
    const child = spawn(cmd, args, { env, cwd, stdio: ['ignore', fd, fd], detached: true });
    fs.closeSync(fd);
    const entry = { pid: child.pid, group: true };
    live.add(entry);
    const proc = {
        name,
        child,
        pid: child.pid,
        logFile,
        exitCode: null,
        signal: null,
        logs: () => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : ''),
    };
    proc.exited = new Promise((resolve) => {
        child.on('exit', (code, signal) => {
            live.delete(entry);
            proc.exitCode = code;
            proc.signal = signal;
            resolve({ code, signal });
        });
        child.on('error', (e) => {
            live.delete(entry);
            proc.exitCode = -1;
            fs.appendFileSync(logFile, `spawn failed: ${e.message}\n`);
            resolve({ code: -1, signal: null });
        });
    });
    proc.running = () => proc.exitCode === null && proc.signal === null;
    const signalGroup = (sig) => {
        if (!proc.running()) return;
        try {
            process.kill(-child.pid, sig);
        } catch {
            /* gone */
        }
    };
    // Graceful stop: signal, wait up to timeoutMs, then SIGKILL the group.
    proc.stop = async (sig = 'SIGTERM', timeoutMs = 10000) => {
        if (!proc.running()) return proc.exited;
        signalGroup(sig);
        const timer = setTimeout(() => signalGroup('SIGKILL'), timeoutMs);
        const r = await proc.exited;
        clearTimeout(timer);
        return r;
    };
    proc.kill = async () => {
        signalGroup('SIGKILL');
        return proc.exited;
    };
    return proc;
}

// The sanitizer's report in a process's log, or '' when there is none: from
// the first "==PID==ERROR: ...Sanitizer" or "runtime error:" line on, the
// direct leaks first (the indirect ones hang off them), at most 12 KiB, so a
// failing assertion shows the stack instead of the log's head.
export function sanitizerReport(text) {
    const m = /^.*(==\d+==ERROR: \w+Sanitizer|runtime error:|LeakSanitizer|AddressSanitizer).*$/m.exec(text);
    if (!m) return '';
    const report = text.slice(m.index);
    const blocks = report.split(/\n(?=(?:Direct|Indirect) leak of )/);
    const direct = blocks.filter((b) => b.startsWith('Direct leak of '));
    const ordered = direct.length ? [blocks[0], ...direct, ...blocks.slice(1).filter((b) => !direct.includes(b))] : blocks;
    return ordered.join('\n').slice(0, 12288);
}

// Fails when a stopped process's log holds a sanitizer report (a leak found
// by LeakSanitizer at a clean exit, a UBSan runtime error, ...), naming it.
export function assertSanitizerClean(proc) {
    const report = sanitizerReport(proc.logs());
    if (report) throw new Error(`${proc.name}: sanitizer report in ${proc.logFile}:\n${report}`);
}

// --- PostgreSQL -----------------------------------------------------------------------

const isRoot = () => typeof process.getuid === 'function' && process.getuid() === 0;

// PostgreSQL refuses to run as root: as root, run its binaries as the
// `postgres` system user. setpriv execs in place, so the pid we hold is the
// postmaster's own (signals reach it directly).
function asPostgres(bin, args) {
    if (!isRoot()) return [bin, args];
    return [
        'setpriv',
        ['--reuid=postgres', '--regid=postgres', '--init-groups', '--', bin, ...args],
    ];
}

function chownTree(dir, uid, gid) {
    fs.chownSync(dir, uid, gid);
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
        const p = path.join(dir, e.name);
        if (e.isDirectory()) chownTree(p, uid, gid);
        else fs.chownSync(p, uid, gid);
    }
}

async function postgresIds() {
    const r = await run('id', ['-u', 'postgres']);
    const g = await run('id', ['-g', 'postgres']);
    if (r.code !== 0 || g.code !== 0) {
        throw new Error('running as root needs the postgres system user (apt-get install postgresql)');
    }
    return { uid: Number(r.stdout.trim()), gid: Number(g.stdout.trim()) };
}

// Starts a fresh PostgreSQL cluster in a temp dir: password auth
// (scram-sha-256) even on loopback, fsync off, TCP on 127.0.0.1 only, the
// unix socket inside the temp dir. Returns
//   {url, port, user, password, database, dir, logs(), start(), stop(), kill(), psql(sql)}
// stop() is a fast shutdown, kill() is SIGKILL of the postmaster and its
// backends; start() starts it again on the same port and data.
export async function startPostgres({ name = 'postgres' } = {}) {
    const dir = tempDir('agentbox-pg-');
    const data = path.join(dir, 'data');
    const sock = path.join(dir, 'sock');
    fs.mkdirSync(sock);
    const password = randomBytes(16).toString('hex');
    const user = 'agentbox';
    const pwfile = path.join(dir, 'pwfile');
    fs.writeFileSync(pwfile, password + '\n', { mode: 0o600 });
    if (isRoot()) {
        const { uid, gid } = await postgresIds();
        fs.chmodSync(dir, 0o700);
        chownTree(dir, uid, gid);
    }
    const env = { ...process.env, LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8' };
    const [icmd, iargs] = asPostgres(path.join(PG_BIN, 'initdb'), [
        '-D', data, '-U', user, '--pwfile', pwfile, '--auth=scram-sha-256',
        '--encoding=UTF8', '--locale=C.UTF-8', '--no-instructions', '--no-sync',
    ]);
    const init = await run(icmd, iargs, { env, cwd: dir });
    if (init.code !== 0) throw new Error(`initdb failed (${init.code}):\n${init.stdout}\n${init.stderr}`);
    fs.rmSync(pwfile);

    const port = await freePort();
    const database = 'postgres';
    const url = `postgres://${user}:${password}@127.0.0.1:${port}/${database}`;
    const pg = {
        url, port, user, password, database, dir, proc: null,
        logs: () => (pg.proc ? pg.proc.logs() : ''),
    };

    pg.isReady = async () => {
        const r = await run(path.join(PG_BIN, 'pg_isready'), ['-h', '127.0.0.1', '-p', String(port), '-t', '1']);
        return r.code === 0;
    };
    pg.start = async () => {
        if (pg.proc && pg.proc.running()) return;
        const [cmd, args] = asPostgres(path.join(PG_BIN, 'postgres'), [
            '-D', data, '-p', String(port),
            '-c', 'listen_addresses=127.0.0.1',
            '-c', `unix_socket_directories=${sock}`,
            '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off',
            '-c', 'max_connections=100',
        ]);
        pg.proc = spawnProc(name, cmd, args, env, { logDir: dir, cwd: dir });
        await waitFor(async () => {
            if (!pg.proc.running()) throw new Error(`postgres exited:\n${pg.proc.logs()}`);
            return pg.isReady();
        }, { timeoutMs: 30000, what: `PostgreSQL on port ${port}` });
    };
    // Fast shutdown (SIGINT): clients are disconnected, the port closes.
    pg.stop = async () => {
        if (pg.proc) await pg.proc.stop('SIGINT', 15000);
    };
    pg.kill = async () => {
        if (pg.proc) await pg.proc.kill();
    };
    // Runs SQL through psql; resolves stdout (unaligned, tuples only); throws on error.
    pg.psql = (sql) => psqlAt(url, sql);
    // A fresh database in this cluster; resolves its URL.
    pg.createDatabase = async (db) => {
        await pg.psql(`CREATE DATABASE ${db}`);
        return `postgres://${user}:${password}@127.0.0.1:${port}/${db}`;
    };
    pg.cleanup = async () => {
        await pg.stop();
        removeTempDir(dir);
    };
    await pg.start();
    return pg;
}

// Runs SQL through psql against url; resolves stdout (unaligned, tuples
// only, trimmed); throws with psql's error.
export async function psqlAt(url, sql) {
    const r = await run(path.join(PG_BIN, 'psql'), ['-X', '-At', '-v', 'ON_ERROR_STOP=1', '-d', url, '-c', sql]);
    if (r.code !== 0) throw new Error(`psql failed: ${r.stderr}`);
    return r.stdout.trim();
}

// --- HTTP -----------------------------------------------------------------------------

// GET url; resolves {status, headers, body (string), ms}. Rejects on
// connection errors and after timeoutMs.
export function httpGet(url, { timeoutMs = 5000, headers = {} } = {}) {
    const t0 = Date.now();
    return new Promise((resolve, reject) => {
        const req = http.get(url, { headers, agent: false }, (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (c) => (body += c));
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body, ms: Date.now() - t0 }));
            res.on('error', reject);
        });
        req.setTimeout(timeoutMs, () => req.destroy(new Error(`GET ${url}: no answer within ${timeoutMs} ms`)));
        req.on('error', reject);
    });
}

// GET url and parse the body as JSON; resolves {status, headers, json, ms}.
export async function httpJson(url, opts) {
    const r = await httpGet(url, opts);
    let json;
    try {
        json = JSON.parse(r.body);
    } catch (e) {
        throw new Error(`GET ${url}: status ${r.status}, body is not JSON: ${r.body.slice(0, 200)}`);
    }
    return { ...r, json };
}

// One series of a process's Prometheus page (GET base/metrics): series is the
// name with its labels as printed ('agentbox_tunnel_connected',
// 'x_total{outcome="ok"}'). Resolves the number, or null when the series is
// absent. Prefer this to matching log text when a metric states the fact.
export async function metricValue(base, series) {
    const m = metricsOf(base);
    const r = await httpGet(`${m}/metrics`);
    if (r.status !== 200) throw new Error(`GET ${m}/metrics: status ${r.status}`);
    for (const line of r.body.split('\n')) {
        if (line.startsWith('#')) continue;
        const sp = line.lastIndexOf(' ');
        if (sp > 0 && line.slice(0, sp) === series) return Number(line.slice(sp + 1));
    }
    return null;
}

// --- the hub ---------------------------------------------------------------------------

// Runs `agentbox-hub migrate ARGS`; resolves {code, stdout, stderr}.
export function runMigrate(databaseUrl, args = [], { dir = migrationsDir(), env = {} } = {}) {
    return run(hubBin(), ['migrate', '--migrations-dir', dir, ...args], {
        env: { ...process.env, DATABASE_URL: databaseUrl, ...env },
    });
}

// Starts `agentbox-hub serve` on a free port; resolves {proc, port, base}
// once /healthz answers.
// The hub secret (keys and vault encryption) that startHub passes as
// AGENTBOX_HUB_SECRET unless env overrides it; CLIs of a test use it too.
export const hubSecret = randomBytes(32).toString('hex');

// `serve` refuses a PostgreSQL superuser (issue 13), so the hub runs as
// SERVE_ROLE: a login role that is not a superuser and owns nothing, with
// DML rights on the schema the migrations (run as the owner, the cluster's
// superuser here) create, now and later. Resolves databaseUrl with that
// role, or databaseUrl itself when the database cannot be reached (nothing
// to refuse then: a test of a database that is down or hung).
export const SERVE_ROLE = 'agentbox_serve';
const serveRolePassword = randomBytes(16).toString('hex');
export async function serveUrl(databaseUrl) {
    let u;
    try {
        u = new URL(databaseUrl);
    } catch {
        return databaseUrl;
    }
    const probe = new URL(u);
    probe.searchParams.set('connect_timeout', '2');
    try {
        await psqlAt(probe.toString(), `DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${SERVE_ROLE}') THEN
    CREATE ROLE ${SERVE_ROLE} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '${serveRolePassword}';
  END IF;
END $$;
GRANT USAGE ON SCHEMA public TO ${SERVE_ROLE};
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${SERVE_ROLE};
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ${SERVE_ROLE};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO ${SERVE_ROLE};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO ${SERVE_ROLE};`);
    } catch {
        return databaseUrl;
    }
    u.username = SERVE_ROLE;
    u.password = serveRolePassword;
    return u.toString();
}

// superuser: run serve with the URL's own (superuser) role and
// --allow-superuser, for the tests of that refusal.
export async function startHub(databaseUrl, { args = [], env = {}, port: fixedPort, tunnelPort: fixedTunnel, superuser = false } = {}) {
    const port = fixedPort || (await freePort());
    const tunnelPort = fixedTunnel || (await freePort());
    const dbUrl = superuser ? databaseUrl : await serveUrl(databaseUrl);
    const metricsPort = await freePort();
    const proc = spawnProc('hub', hubBin(), ['serve', '--listen', `127.0.0.1:${port}`,
        '--tunnel-listen', `127.0.0.1:${tunnelPort}`, '--metrics-listen', `127.0.0.1:${metricsPort}`, ...(superuser ? ['--allow-superuser'] : []), ...args], {
        ...process.env,
        DATABASE_URL: dbUrl,
        AGENTBOX_HUB_SECRET: hubSecret,
        ...env,
    });
    const base = `http://127.0.0.1:${port}`;
    await waitFor(async () => {
        if (!proc.running()) throw new Error(`hub exited (${proc.exitCode}):\n${proc.logs()}`);
        const r = await httpGet(`${base}/healthz`, { timeoutMs: 1000 });
        return r.status === 200;
    }, { timeoutMs: 15000, what: `hub /healthz on port ${port}` });
    hubDatabases.set(base, databaseUrl);
    const metrics = `http://127.0.0.1:${metricsPort}`;
    metricsBases.set(base, metrics);
    return { proc, port, base, metrics, tunnelPort, tunnelUrl: `ws://127.0.0.1:${tunnelPort}` };
}

// /metrics lives on each process's own loopback listener (issue 13): the
// metrics base of a process, given any of its API bases (the hub's base, an
// agent's e2b, data or native base); the base itself when unknown.
const metricsBases = new Map();
export function metricsOf(base) {
    return metricsBases.get(base) || base;
}

// Every hub route but /healthz and /readyz needs a key (issue 13): the
// harness keeps one admin key per hub base, made on first use through the
// CLI (team "harness", user "admin"), for its own polling and for tests.
const hubDatabases = new Map();
const adminKeys = new Map();
export async function adminKey(hubBase) {
    if (!adminKeys.has(hubBase)) {
        const db = hubDatabases.get(hubBase);
        if (!db) throw new Error(`no hub started at ${hubBase} by this harness`);
        adminKeys.set(hubBase, createKey(db, 'harness', 'admin', ['--admin']).then((k) => k.token));
    }
    return adminKeys.get(hubBase);
}
// Headers carrying the hub's harness admin key, for the console (Bearer) and
// the E2B / native surfaces (X-API-Key).
export async function adminHeaders(hubBase) {
    const k = await adminKey(hubBase);
    return { Authorization: `Bearer ${k}`, 'X-API-Key': k };
}

// --- agents and clusters ---------------------------------------------------------------

export const agentBin = () => path.join(buildDir(), 'agentbox-agent');

// `agentbox-hub cluster add ID`: resolves the join token (the last stdout line).
export async function addCluster(databaseUrl, id, args = []) {
    const r = await run(hubBin(), ['cluster', 'add', id, ...args], {
        env: { ...process.env, DATABASE_URL: databaseUrl },
    });
    if (r.code !== 0) throw new Error(`cluster add ${id} failed (${r.code}): ${r.stderr}`);
    return r.stdout.trim().split('\n').pop().trim();
}

// Starts `agentbox-agent serve` for cluster id on free ports; resolves
// {proc, id, e2b, data, native (base URLs), stateDir} once /healthz answers.
// Tunnel timings default to test-friendly values (fast reconnects).
export async function startAgent(id, { hubUrl, token, args = [], env = {}, stateDir } = {}) {
    const [e2b, data, native, metricsPort] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const dir = stateDir || tempDir(`agentbox-${id}-state-`);
    const a = ['serve', '--cluster-id', id, '--state-dir', dir,
        '--e2b-listen', `127.0.0.1:${e2b}`, '--data-listen', `127.0.0.1:${data}`,
        '--native-listen', `127.0.0.1:${native}`, '--metrics-listen', `127.0.0.1:${metricsPort}`,
        '--reconnect-min', '100ms', '--reconnect-max', '1s'];
    if (hubUrl) a.push('--hub-url', hubUrl, '--join-token', token);
    const proc = spawnProc(`agent-${id}`, agentBin(), [...a, ...args], { ...process.env, ...env });
    const agent = {
        proc, id, stateDir: dir,
        e2b: `http://127.0.0.1:${e2b}`, data: `http://127.0.0.1:${data}`, native: `http://127.0.0.1:${native}`,
        metrics: `http://127.0.0.1:${metricsPort}`,
    };
    for (const b of [agent.e2b, agent.data, agent.native]) metricsBases.set(b, agent.metrics);
    await waitFor(async () => {
        if (!proc.running()) throw new Error(`agent ${id} exited (${proc.exitCode}):\n${proc.logs()}`);
        return (await httpGet(`${agent.e2b}/healthz`, { timeoutMs: 1000 })).status === 200;
    }, { timeoutMs: 15000, what: `agent ${id} /healthz` });
    return agent;
}

// Waits until the hub's GET /api/clusters shows id online (or offline).
export async function waitClusterOnline(hubBase, id, online = true, timeoutMs = 10000) {
    const headers = await adminHeaders(hubBase);
    return waitFor(async () => {
        const r = await httpJson(`${hubBase}/api/clusters`, { timeoutMs: 1000, headers });
        const c = r.json && r.json.clusters && r.json.clusters.find((x) => x.id === id);
        return c && c.online === online ? c : null;
    }, { timeoutMs, what: `cluster ${id} ${online ? 'online' : 'offline'} on the hub` });
}

// `agentbox-hub key create`: resolves {token, id}.
export async function createKey(databaseUrl, team, user, extra = []) {
    const r = await run(hubBin(), ['key', 'create', '--team', team, '--user', user, ...extra], {
        env: { ...process.env, DATABASE_URL: databaseUrl, AGENTBOX_HUB_SECRET: hubSecret },
    });
    if (r.code !== 0) throw new Error(`key create failed (${r.code}): ${r.stderr}`);
    const token = r.stdout.trim().split('\n').pop().trim();
    const m = /(ak_[0-9a-f]{16})/.exec(r.stdout);
    return { token, id: m ? m[1] : null };
}

// --- console sessions (issue 16) --------------------------------------------------------

// A console session (POST /api/auth/login) of the human user `user` of team
// `team`, made with the CLI on first use: resolves the session token
// (abxs_…, sent as Authorization: Bearer). Only a session sees an
// unrestricted key's rawToken and decides approvals.
export async function consoleSession(hubBase, team, user) {
    const db = hubDatabases.get(hubBase);
    if (!db) throw new Error(`no hub started at ${hubBase} by this harness`);
    const password = randomBytes(12).toString('hex');
    const add = await run(hubBin(), ['user', 'add', user, '--team', team], { env: { ...process.env, DATABASE_URL: db }, input: `${password}\n` });
    if (add.code !== 0 && !/already exists/.test(add.stderr)) throw new Error(`user add ${user} failed (${add.code}): ${add.stderr}`);
    if (add.code !== 0) {
        const pw = await run(hubBin(), ['user', 'passwd', user], { env: { ...process.env, DATABASE_URL: db }, input: `${password}\n` });
        if (pw.code !== 0) throw new Error(`user passwd ${user} failed (${pw.code}): ${pw.stderr}`);
    }
    const res = await fetch(`${hubBase}/api/auth/login`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ username: user, password }),
    });
    const body = await res.json();
    if (res.status !== 200) throw new Error(`login ${user}: ${res.status} ${JSON.stringify(body)}`);
    return body.token;
}
