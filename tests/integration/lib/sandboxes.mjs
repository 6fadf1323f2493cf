// A hub + agents stack on the local runtime, for the data-plane, local
// runtime, e2e and benchmark scripts: PostgreSQL, migrations, the hub, one
// agent per cluster joined through the tunnel, an API key whose team maps to
// namespace `default` (where the sample manifests put their envs), and
// helpers for the native sandbox API and for reaping sandbox processes
// (they outlive a stopped agent by design, so a test must kill them).
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import {
    startPostgres, runMigrate, startHub, addCluster, startAgent, waitClusterOnline, run, hubBin,
    hubSecret, buildDir, tempDir, waitFor,
} from './harness.mjs';
import { requestJson } from './scaffold.mjs';

export const envdBin = () => path.join(buildDir(), 'agentbox-envd');

const TEMPLATE = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata: {name: envd}
spec:
  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10
  runtimes: [{name: envd, port: 49983}]
`;

// An env with one member pool per cluster: `<env>-1c0gi`, replicas each.
export function envManifest(name, clusters, { replicas = 2, idleTimeout, startupTimeout = '60s' } = {}) {
    const segs = clusters.map((c) => `  - clusterID: ${c}
    members:
    - name: ${name}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: ${replicas}, defaultStartupTimeout: ${startupTimeout}}
`).join('');
    const overrides = idleTimeout ? `  overrides: {defaultIdleTimeout: ${idleTimeout}}\n` : '';
    return `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name}, namespace: default}
spec:
  templateRef: {name: envd}
${overrides}  clusters:
${segs}`;
}

// A manifests directory with the envd template and the given env manifests.
export function manifestsDir(envs) {
    const dir = tempDir('agentbox-manifests-');
    fs.writeFileSync(path.join(dir, 'template.yaml'), TEMPLATE);
    envs.forEach((e, i) => fs.writeFileSync(path.join(dir, `env-${i}.yaml`), e));
    return dir;
}

// A local sandbox's state record (agent/runtime/local/state.c): <dir>/state.rec,
// two slots of half the file each, "abxstate1 <gen> <len> <fnv-1a 64>\n" + JSON;
// the newest slot whose checksum holds. Falls back to an earlier agent's
// state.json. Throws when there is neither (as reading a missing file did).
export function readSandboxState(dir) {
    let buf;
    try {
        buf = fs.readFileSync(path.join(dir, 'state.rec'));
    } catch {
        return JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8'));
    }
    const HDR = 53;
    const slot = buf.length / 2;
    let best = null;
    for (const off of [0, slot]) {
        const m = /^abxstate1 ([0-9a-f]{16}) ([0-9a-f]{8}) ([0-9a-f]{16})\n$/.exec(buf.toString('latin1', off, off + HDR));
        if (!m) continue;
        const gen = BigInt(`0x${m[1]}`);
        const len = parseInt(m[2], 16);
        if (len === 0 || len > slot - HDR) continue;
        const body = buf.subarray(off + HDR, off + HDR + len);
        const pre = Buffer.alloc(12);
        pre.writeBigUInt64LE(gen, 0);
        pre.writeUInt32LE(len, 8);
        let h = 0xcbf29ce484222325n;
        for (const b of [...pre, ...body]) h = ((h ^ BigInt(b)) * 0x100000001b3n) & 0xffffffffffffffffn;
        if (h !== BigInt(`0x${m[3]}`)) continue;
        if (!best || gen > best.gen) best = { gen, text: body.toString('utf8') };
    }
    if (!best) throw new Error(`${dir}/state.rec: no valid slot`);
    return JSON.parse(best.text);
}

// Kills every sandbox (its namespace init) recorded under stateDir.
export function reapSandboxes(stateDir) {
    const root = path.join(stateDir, 'sandboxes');
    if (!fs.existsSync(root)) return;
    for (const d of fs.readdirSync(root)) {
        let st = {};
        try {
            st = readSandboxState(path.join(root, d));
        } catch {
            /* mid-spawn: no state yet, but maybe its writable space */
        }
        for (const pid of [st.pid]) {
            if (!pid) continue;
            try {
                process.kill(pid, 'SIGKILL');
            } catch {
                /* gone */
            }
        }
        // a sandbox's writable space is a tmpfs mounted on <dir>/data in the
        // host's namespace: unmount it so the directory can be removed
        const data = path.join(root, d, 'data');
        if (fs.existsSync(data)) spawnSync('umount', ['-l', data], { stdio: 'ignore' });
        removeCgroups(d);
    }
}

// The agent puts sandbox <sid> in <its own cgroup>/agentbox/<sid> of the
// memory, pids, cpu and cpuacct hierarchies (cgroup v1) or of the unified one; the
// agent is our child, so its cgroup is ours. Removes them once empty (the
// SIGKILLs above take a moment), for at most 2 s.
function removeCgroups(sid) {
    const dirs = [];
    for (const l of fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')) {
        const [, ctrls, p] = l.split(':');
        const names = ctrls === '' ? [''] : ctrls.split(',').filter((c) => ['memory', 'pids', 'cpu', 'cpuacct'].includes(c));
        for (const c of names) dirs.push(path.join('/sys/fs/cgroup', c, p, 'agentbox', sid));
    }
    const deadline = Date.now() + 2000;
    for (const dir of dirs) {
        while (fs.existsSync(dir)) {
            try {
                fs.rmdirSync(dir);
            } catch {
                if (Date.now() > deadline) break;
            }
        }
    }
}

// envd processes whose mount namespace binds a directory of stateDir:
// [{pid, dir}] (dir = the sandbox directory name). Processes in the host's
// own mount namespace are not sandboxes (an envd another test runs there
// sees every sandbox's writable space mounted under stateDir).
// With <stateDir>/sandboxes a tmpfs of its own (the agent mounts one), a
// bind of it names its device and a root below it (/<dir>/run) instead.
export function envdProcesses(stateDir) {
    const out = [];
    const sbx = path.join(fs.realpathSync(stateDir), 'sandboxes');
    const prefix = sbx + '/';
    const dev = BigInt(fs.statSync(sbx, { bigint: true }).dev);
    const devId = `${((dev >> 8n) & 0xfffn) | ((dev >> 32n) & ~0xfffn)}:${(dev & 0xffn) | ((dev >> 12n) & ~0xffn)}`;
    const hostNs = fs.readlinkSync('/proc/self/ns/mnt');
    for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e)) continue;
        let comm;
        let mi;
        try {
            comm = fs.readFileSync(`/proc/${e}/comm`, 'utf8').trim();
            if (comm !== 'agentbox-envd') continue;
            if (fs.readlinkSync(`/proc/${e}/ns/mnt`) === hostNs) continue;
            mi = fs.readFileSync(`/proc/${e}/mountinfo`, 'utf8');
        } catch {
            continue;
        }
        const at = mi.indexOf(prefix);
        if (at >= 0) {
            out.push({ pid: Number(e), dir: mi.slice(at + prefix.length).split('/')[0] });
            continue;
        }
        const bind = mi.split('\n').map((l) => l.split(' ')).find((f) => f[2] === devId && f[3].split('/').length > 2);
        if (bind) out.push({ pid: Number(e), dir: bind[3].split('/')[1] });
    }
    return out;
}

async function hubCli(pgUrl, args) {
    const r = await run(hubBin(), args, {
        env: { ...process.env, DATABASE_URL: pgUrl, AGENTBOX_HUB_SECRET: hubSecret },
    });
    if (r.code !== 0) throw new Error(`agentbox-hub ${args.join(' ')} failed (${r.code}):\n${r.stdout}\n${r.stderr}`);
    return r.stdout;
}

// Starts PostgreSQL, the hub and one agent per cluster id (joined through the
// tunnel, waited online). manifests: a directory for every agent. Returns
// {pg, hub, agents: {id: agent}, key, startAgentAgain(id, opts), stop()}.
export async function startStack({ clusters = ['alpha'], manifests, agentArgs = [], agentEnv = {}, hubArgs = [] } = {}) {
    const pg = await startPostgres();
    const m = await runMigrate(pg.url);
    if (m.code !== 0) throw new Error(`migrate failed: ${m.stderr}`);
    const hub = await startHub(pg.url, { args: hubArgs });
    const tokens = {};
    const agents = {};
    const stateDirs = [];
    const launch = async (id, { stateDir, args = [], manifestsDir: md = manifests, envdPath = envdBin() } = {}) => {
        if (!tokens[id]) tokens[id] = await addCluster(pg.url, id);
        const a = await startAgent(id, {
            hubUrl: hub.tunnelUrl, token: tokens[id], stateDir,
            args: ['--manifests-dir', md, '--envd-path', envdPath, ...agentArgs, ...args],
            env: agentEnv,
        });
        if (!stateDirs.includes(a.stateDir)) stateDirs.push(a.stateDir);
        agents[id] = a;
        await waitClusterOnline(hub.base, id, true, 15000);
        return a;
    };
    for (const id of clusters) await launch(id);
    const out = await hubCli(pg.url, ['key', 'create', '--team', 't', '--user', 'u']);
    const key = out.trim().split('\n').pop().trim();
    await hubCli(pg.url, ['team', 'set-namespace', 't', 'default']);
    const stack = {
        pg, hub, agents, key, stateDirs,
        launch,
        stop: async () => {
            for (const a of Object.values(agents)) await a.proc.stop();
            for (const d of stateDirs) reapSandboxes(d);
            await hub.proc.stop();
            await pg.cleanup();
        },
    };
    return stack;
}

// Calls the agent's native API with the stack's key; resolves {status, json, text}.
export const native = (agent, key, method, p, body) => requestJson(agent.native + p, { method, headers: { 'X-API-Key': key }, body });

// The agent's pool gauges: {idle, running, starting, stopping, pending} of pool.
export async function poolStatus(agent, pool, ns = 'default') {
    const t = await (await fetch(`${agent.metrics}/metrics`)).text();
    const out = {};
    for (const k of ['idle', 'running', 'starting', 'stopping', 'pending']) {
        const re = new RegExp(`^agentbox_pool_${k}\\{namespace="${ns}",pool="${pool}"\\} (\\d+)`, 'm');
        const m = re.exec(t);
        out[k] = m ? Number(m[1]) : undefined;
    }
    return out;
}

export async function waitPool(agent, pool, pred, what, timeoutMs = 20000) {
    let last = null;
    try {
        return await waitFor(async () => {
            last = await poolStatus(agent, pool);
            return pred(last) ? last : null;
        }, { timeoutMs, what: `${what} (pool ${pool})` });
    } catch (e) {
        // the last status seen says which way it was stuck
        if (last) e.message += `; last seen ${JSON.stringify(last)}`;
        throw e;
    }
}

// Claims a sandbox through the native API; resolves the sandbox object.
export async function claim(agent, key, body) {
    const r = await native(agent, key, 'POST', '/v1/sandboxes', body);
    if (r.status !== 201) throw new Error(`claim ${JSON.stringify(body)}: ${r.status} ${r.text}`);
    return r.json.sandbox;
}
