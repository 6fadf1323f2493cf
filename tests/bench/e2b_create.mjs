// Benchmark: E2B create from a warm local pool as the real SDK sees it
// (Sandbox.create → POST /v2/sandboxes → 201 with an armed sandbox).
//
//   1 client    sequential creates, the pool refilled before each one
//   32 clients  one burst of 32 concurrent creates against 40 idle sandboxes
//   sustained   32 clients creating and killing for BENCH_SECONDS: creates/s
//               once refills are the limit
//
// Prints p50/p99 (ms) and, as in-script baselines, a GET /health round trip
// and the same claim through the native API (what the runtime costs without
// the E2B layer), with the ratio of create to the native claim (DESIGN §12 targets: p50 ≤ 5 ms, p99 ≤
// 25 ms at 32 concurrent clients, ≥ 500 creates/s sustained with refills).
// With AGENTBOX_BASELINE_BUILD_DIR (another build, e.g. main before a
// change) every row is measured on that build too, in the same run, one
// stack after the other (baseline first; BENCH_BASELINE_LAST=1: last), and printed side by side with the
// load average. Needs root (namespaces) and a build:
//   sudo AGENTBOX_BUILD_DIR=build [AGENTBOX_BASELINE_BUILD_DIR=/tmp/base] node tests/bench/e2b_create.mjs   [BENCH_INTERNET=1]
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import { execFileSync, spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { row, atMost, atLeast } from './util.mjs';
import { startStack, manifestsDir, envManifest, waitPool, claim, native } from '../integration/lib/sandboxes.mjs';

const POOL = 40;
const SEQ = Number(process.env.BENCH_SEQ || 30);
const SECONDS = Number(process.env.BENCH_SECONDS || 10);

const pct = (xs, p) => {
    const s = [...xs].sort((a, b) => a - b);
    return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const fmt = (x) => x.toFixed(2);

// CPU of a process in ms: itself and its reaped children. Kernel work done
// elsewhere (a namespace's cleanup in a kworker) is not in it.
const TICK_MS = 1000 / Number(execFileSync('getconf', ['CLK_TCK']).toString().trim() || 100);
function cpuOf(pid) {
    const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = st.slice(st.lastIndexOf(')') + 2).split(' '); // f[0] is field 3
    return { self: (Number(f[11]) + Number(f[12])) * TICK_MS, children: (Number(f[13]) + Number(f[14])) * TICK_MS };
}

// The agent's envd zygotes (agent/runtime/local/zygote.h): its children
// named envd-zygote, which fork and reap the sandbox inits.
function zygotesOf(pid) {
    const out = [];
    for (const d of fs.readdirSync('/proc')) {
        if (!/^[0-9]+$/.test(d)) continue;
        try {
            const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
            const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
            if (Number(f[1]) === pid && st.includes('(envd-zygote)')) out.push(Number(d));
        } catch { /* exited meanwhile */ }
    }
    return out;
}

// The agent's CPU (self) and its sandboxes' (children): a sandbox's init is
// the zygote's child (or, with --no-envd-zygote, the agent's), so its setup
// and envd's own CPU count there once it is reaped; the zygote's own forks
// count with the sandboxes.
function agentCpu(pid) {
    const c = cpuOf(pid);
    for (const z of zygotesOf(pid)) {
        try {
            const zc = cpuOf(z);
            c.children += zc.self + zc.children;
        } catch { /* restarted meanwhile */ }
    }
    return c;
}

// CPU of the whole machine in ms (every core's busy time: all but idle and
// iowait, from /proc/stat): what a sustained create costs everything, the
// client, kernel threads, the hub (and perf, under BENCH_PERF) included.
function machineCpu() {
    const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const total = f.slice(0, 8).reduce((a, x) => a + x, 0); // user..steal (guest is counted in user)
    return (total - f[3] - f[4]) * TICK_MS;
}
// how busy the cores were, in %, at `ms` of machine CPU per create and `rate` creates/s
const busyPct = (ms, rate) => Math.min(100, (ms * rate) / (10 * os.cpus().length));

// CPU of PostgreSQL in ms: the postmaster, its live children (the hub's
// backends) and those reaped. What the hub's writes of a create cost it.
function pgCpuOf(pid) {
    const own = cpuOf(pid);
    let ms = own.self + own.children;
    for (const d of fs.readdirSync('/proc')) {
        if (!/^[0-9]+$/.test(d)) continue;
        try {
            const st = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
            const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
            if (Number(f[1]) === pid) ms += (Number(f[11]) + Number(f[12])) * TICK_MS;
        } catch { /* exited meanwhile */ }
    }
    return ms;
}

async function measure(buildDir) {
    process.env.AGENTBOX_BUILD_DIR = buildDir;
    const loadBefore = os.loadavg()[0];
    const stack = await startStack({
        clusters: ['alpha'], manifests: manifestsDir([envManifest('bench', ['alpha'], { replicas: POOL })]),
        // logs stages only for requests carrying X-AgentBox-Trace (the traced burst below)
        agentEnv: { AGENTBOX_TRACE: '1' },
        // BENCH_AGENT_ARGS: extra agent flags, space-separated (an A/B of an option)
        agentArgs: (process.env.BENCH_AGENT_ARGS || '').split(' ').filter(Boolean),
    });
    const alpha = stack.agents.alpha;
    try {
        const full = () => waitPool(alpha, 'bench-1c0gi', (s) => s.idle === POOL, `${POOL} idle`, 120000);
        await full();
        process.env.E2B_API_URL = alpha.e2b;
        process.env.E2B_SANDBOX_URL = alpha.data;
        process.env.E2B_API_KEY = stack.key;
        const { Sandbox } = await import('e2b');

        // baseline: an authenticated-free round trip on the same listener
        const base = [];
        for (let i = 0; i < 200; i++) {
            const t = performance.now();
            await (await fetch(`${alpha.e2b}/health`)).arrayBuffer();
            base.push(performance.now() - t);
        }
        const baseP50 = pct(base, 50);

        // BENCH_INTERNET=1: sandboxes with internet access (the policy set in the egress gateway's table at claim)
        const opts = { allowInternetAccess: process.env.BENCH_INTERNET === '1' };
        const timedCreate = async () => {
            const t = performance.now();
            const s = await Sandbox.create('bench', opts);
            return { ms: performance.now() - t, s };
        };

        // baseline 2: the same claim through the native API (runtime cost without the E2B layer)
        const nat = [];
        for (let i = 0; i < SEQ; i++) {
            await full();
            const t = performance.now();
            const sb = await claim(alpha, stack.key, { poolName: 'bench', allowInternetAccess: opts.allowInternetAccess });
            nat.push(performance.now() - t);
            await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
        }
        const natP50 = pct(nat, 50);

        // the same create from a client of negligible cost: one open
        // connection, raw HTTP/1.1 (warmBurst with one client)
        const raw1 = [];
        for (let i = 0; i < SEQ; i++) {
            await full();
            const b = await warmBurst({ key: stack.key, opts }, alpha.e2b, null, 1);
            raw1.push(b.xs[0].ms);
            await fetch(`${alpha.e2b}/sandboxes/${b.xs[0].sid}`, { method: 'DELETE', headers: { 'X-API-Key': stack.key } })
                .then((res) => res.arrayBuffer());
        }

        // The SDK's first create in a process loads its lazy modules (one-off,
        // 160-540 ms measured): taken once untimed and printed, or it is the
        // 1-client p99. Then the client's own floor: sequential creates
        // against a stub answering at once (interleaved with nothing: the
        // stub is only up for these).
        await full();
        const tf = performance.now();
        const firstSb = await Sandbox.create('bench', opts);
        const firstMs = performance.now() - tf;
        await firstSb.kill();
        const stubSeq = [];
        {
            const stub = await startStub();
            try {
                for (let i = 0; i < SEQ; i++) {
                    const t = performance.now();
                    await Sandbox.create('bench', { ...opts, apiUrl: stub.url });
                    stubSeq.push(performance.now() - t);
                }
            } finally {
                stub.stop();
            }
        }

        // 1 client
        const one = [];
        for (let i = 0; i < SEQ; i++) {
            await full();
            const { ms, s } = await timedCreate();
            one.push(ms);
            await s.kill();
        }
        await full();

        // 32 concurrent clients, one create each, all from idle sandboxes
        const bcpu0 = agentCpu(alpha.proc.pid);
        const burst = await Promise.all(Array.from({ length: 32 }, () => timedCreate()));
        const bcpu1 = agentCpu(alpha.proc.pid);
        const b = burst.map((x) => x.ms);
        await Promise.all(burst.map((x) => x.s.kill()));
        await full();

        // where a burst's time goes: the client's own floor (the same 32
        // Sandbox.create against a stub answering instantly, in a process of
        // its own), then a burst traced in the agent, interleaved
        const split = await burstSplit(alpha, { Sandbox, opts, key: stack.key }, full);

        // sustained: 32 clients for SECONDS, each create followed by a kill (refills limit it)
        let done = 0;
        const sustained = [];
        const until = performance.now() + SECONDS * 1000;
        const t0 = performance.now();
        const cpu0 = agentCpu(alpha.proc.pid);
        const pg0 = pgCpuOf(stack.pg.proc.pid);
        const m0 = machineCpu();
        const node0 = process.cpuUsage();
        // BENCH_PERF=<file>: a profile of the sustained phase, the agent, its
        // zygote and what they start (sandbox inits, envd: perf follows children)
        const perf = process.env.BENCH_PERF
            ? spawn('perf', ['record', ...(process.env.BENCH_PERF_ARGS ? process.env.BENCH_PERF_ARGS.split(' ') : ['-g', '-F', '999']), ...(process.env.BENCH_PERF_ALL === '1' ? ['-a'] : ['-p', [alpha.proc.pid, ...zygotesOf(alpha.proc.pid)].join(',')]), '-o', process.env.BENCH_PERF, '--', 'sleep', String(Math.min(SECONDS, 5))], { stdio: 'ignore' })
            : null;
        // sandboxes the agent holds meanwhile (idle, claimed, starting, dead
        // not yet removed: a directory each), at most
        let held = 0;
        const heldTimer = setInterval(() => {
            try {
                held = Math.max(held, fs.readdirSync(`${alpha.stateDir}/sandboxes`).length);
            } catch { /* not there on a restarted agent */ }
        }, 100);
        await Promise.all(Array.from({ length: 32 }, async () => {
            while (performance.now() < until) {
                const { ms, s } = await timedCreate();
                sustained.push(ms);
                done++;
                await s.kill();
            }
        }));
        const rate = done / ((performance.now() - t0) / 1000);
        clearInterval(heldTimer);
        const cpu1 = agentCpu(alpha.proc.pid);
        const machineMs = (machineCpu() - m0) / done;
        const nodeUse = process.cpuUsage(node0);
        const nodeMs = (nodeUse.user + nodeUse.system) / 1000 / done;
        const pgMs = (pgCpuOf(stack.pg.proc.pid) - pg0) / done;
        if (perf) await new Promise((res) => (perf.exitCode !== null ? res() : perf.on('exit', res)));

        // the same from 32 raw clients (the agent's capacity, the client's
        // cost taken out), and the SDK's own ceiling: 32 loops of
        // Sandbox.create against a stub answering at once (no kill)
        await full();
        const rcpu0 = agentCpu(alpha.proc.pid);
        const rm0 = machineCpu();
        const raw = await warmSustained({ key: stack.key, opts }, alpha.e2b, SECONDS);
        const rcpu1 = agentCpu(alpha.proc.pid);
        const rawN = raw.rate * SECONDS;
        const rawMachineMs = (machineCpu() - rm0) / rawN;
        let sdkCeil;
        {
            const stub = await startStub();
            try {
                let n = 0;
                const end = performance.now() + Math.min(SECONDS, 5) * 1000;
                const s0 = performance.now();
                await Promise.all(Array.from({ length: 32 }, async () => {
                    while (performance.now() < end) {
                        await Sandbox.create('bench', { ...opts, apiUrl: stub.url });
                        n++;
                    }
                }));
                sdkCeil = n / ((performance.now() - s0) / 1000);
            } finally {
                stub.stop();
            }
        }

        const r = {
            buildDir, loadBefore, loadAfter: os.loadavg()[0], internet: opts.allowInternetAccess,
            base50: baseP50, nat50: natP50, nat99: pct(nat, 99), raw50: pct(raw1, 50), raw99: pct(raw1, 99),
            one50: pct(one, 50), one99: pct(one, 99), oneN: one.length,
            firstMs, held, pgMs, machineMs, nodeMs, stubSeq50: pct(stubSeq, 50), stubSeq99: pct(stubSeq, 99),
            burst50: pct(b, 50), burst99: pct(b, 99),
            rate, sus50: pct(sustained, 50), sus99: pct(sustained, 99),
            burstCpu: (bcpu1.self - bcpu0.self) / 32, split,
            cpuSelf: (cpu1.self - cpu0.self) / done, cpuChildren: (cpu1.children - cpu0.children) / done,
            rawRate: raw.rate, raw50s: raw.p50, raw99s: raw.p99, rawNode: raw.cpu, rawMachineMs,
            rawCpuSelf: (rcpu1.self - rcpu0.self) / rawN, rawCpuChildren: (rcpu1.children - rcpu0.children) / rawN,
            sdkCeil,
        };
        report(r);
        return r;
    } finally {
        await stack.stop();
    }
}

// CLOCK_MONOTONIC in µs, the clock of the agent's trace lines (node's hrtime is it on Linux)
const monoUs = () => Number(process.hrtime.bigint() / 1000n);

// A stub of the E2B API in a process of its own: 201 with a create's JSON at once.
async function startStub() {
    const src = `
        const http = require('node:http');
        let n = 0;
        const srv = http.createServer((req, res) => {
            req.resume();
            req.on('end', () => {
                const body = JSON.stringify({ sandboxID: 'stub' + (n++).toString().padStart(16, '0'), templateID: 'bench',
                    clientID: 'alpha', envdVersion: '0.2.0', envdAccessToken: 'a'.repeat(64), domain: null, alias: 'bench' });
                res.writeHead(201, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) });
                res.end(body);
            });
        });
        srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));`;
    const child = spawn(process.execPath, ['-e', src], { stdio: ['ignore', 'pipe', 'inherit'] });
    const port = await new Promise((resolve, reject) => {
        child.stdout.once('data', (d) => resolve(Number(String(d).trim())));
        child.once('exit', (c) => reject(new Error(`stub exited ${c}`)));
    });
    return { url: `http://127.0.0.1:${port}`, stop: () => child.kill() };
}

// The trace lines of one log: id -> stage -> µs (the first of each).
function traceOf(logFile) {
    const out = new Map();
    for (const m of fs.readFileSync(logFile, 'utf8').matchAll(/msg="?trace"? id=(\S+) stage=(\S+) mono_us=(\d+)/g)) {
        if (!out.has(m[1])) out.set(m[1], {});
        const st = out.get(m[1]);
        if (!(m[2] in st)) st[m[2]] = Number(m[3]);
    }
    return out;
}

const ROUNDS = Number(process.env.BENCH_SPLIT_ROUNDS || 3);
let tag = 0;
// One burst of 32 creates, by the SDK (Sandbox.create) or by a bare fetch of
// the same POST /v2/sandboxes: wall ms each, the node process's CPU per
// create, monotonic stamps, the sandbox ids.
async function oneBurst(ctx, how, apiUrl, traced) {
    const id = `burst${tag++}`;
    if (how === 'curl') return curlBurst(ctx, apiUrl, traced ? id : null);
    if (how === 'warm') return warmBurst(ctx, apiUrl, traced ? id : null);
    const c0 = process.cpuUsage();
    const xs = await Promise.all(Array.from({ length: 32 }, async (_, i) => {
        const trace = `${id}-${i}`;
        const hdr = traced ? { 'X-AgentBox-Trace': trace } : {};
        const t = performance.now();
        const sent = monoUs();
        let sid;
        if (how === 'sdk') {
            sid = (await ctx.Sandbox.create('bench', { ...ctx.opts, apiUrl, headers: hdr })).sandboxId;
        } else {
            const res = await fetch(`${apiUrl}/v2/sandboxes`, {
                method: 'POST', headers: { 'X-API-Key': ctx.key, 'Content-Type': 'application/json', ...hdr },
                body: JSON.stringify({ templateID: 'bench', allow_internet_access: ctx.opts.allowInternetAccess }),
            });
            const j = await res.json();
            if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(j)}`);
            sid = j.sandboxID;
        }
        return { ms: performance.now() - t, sent, done: monoUs(), sid, trace };
    }));
    const c = process.cpuUsage(c0);
    return { xs, cpu: (c.user + c.system) / 1000 / 32 };
}

// The same 32 POSTs from one curl process (-Z: all at once, a connection
// each): a client in C whose own cost is small; time_total per transfer.
async function curlBurst(ctx, apiUrl, id) {
    const args = ['-Z', '--parallel-immediate', '--parallel-max', '32']; // -s per transfer: --next resets it
    const body = JSON.stringify({ templateID: 'bench', allow_internet_access: ctx.opts.allowInternetAccess });
    for (let i = 0; i < 32; i++) {
        if (i) args.push('--next');
        args.push('-s', '-X', 'POST', '-H', `X-API-Key: ${ctx.key}`, '-H', 'Content-Type: application/json', '-d', body,
            '-w', `\nT ${i} %{time_total} %{http_code}\n`);
        if (id) args.push('-H', `X-AgentBox-Trace: ${id}-${i}`);
        args.push(`${apiUrl}/v2/sandboxes`);
    }
    const sent = monoUs();
    const out = await new Promise((resolve, reject) => {
        let text = '';
        const c = spawn('curl', args, { stdio: ['ignore', 'pipe', 'inherit'] });
        c.stdout.on('data', (d) => (text += d));
        c.on('exit', (code) => (code === 0 ? resolve(text) : reject(new Error(`curl exited ${code}`))));
    });
    const done = monoUs();
    const xs = [];
    for (const m of out.matchAll(/^T (\d+) ([\d.]+) (\d+)$/gm)) {
        if (m[3] !== '201') throw new Error(`curl create: ${m[3]}: ${out.slice(0, 300)}`);
        xs.push({ ms: Number(m[2]) * 1000, sent, done, trace: `${id}-${m[1]}` });
    }
    const ids = [...out.matchAll(/"sandboxID":"([^"]+)"/g)].map((m) => m[1]);
    if (xs.length !== 32 || ids.length !== 32) throw new Error(`curl burst: ${xs.length} answers, ${ids.length} ids`);
    ids.forEach((sid, i) => (xs[i].sid = sid));
    return { xs, cpu: NaN };
}

// 32 clients that each hold an open keep-alive connection (as a fleet of
// long-lived SDK processes does): the sockets are connected and used once
// (GET /health) first, then the 32 POSTs are written in one tick. A request's
// time is from its write to its whole answer, read by a minimal HTTP/1.1
// reader (status line, Content-Length): what is left is the server's part
// and a few µs of this process per answer.
// n open HTTP/1.1 connections to apiUrl, each with ask(text) → the next
// answer ({status, body, at, mono}); one request at a time per connection.
async function rawClients(apiUrl, n) {
    const u = new URL(apiUrl);
    const conns = await Promise.all(Array.from({ length: n }, () => new Promise((resolve, reject) => {
        const sock = net.connect({ host: u.hostname, port: Number(u.port), noDelay: true }, () => resolve(sock));
        sock.once('error', reject);
    })));
    const reader = (sock) => {
        let buf = Buffer.alloc(0);
        let want = null;
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            for (;;) {
                const end = buf.indexOf('\r\n\r\n');
                if (end < 0 || !want) return;
                const head = buf.subarray(0, end).toString('latin1');
                const m = head.match(/^HTTP\/1\.1 (\d+)/);
                const len = Number((head.match(/\r\ncontent-length: *(\d+)/i) || [])[1] || 0);
                if (buf.length < end + 4 + len) return;
                const body = buf.subarray(end + 4, end + 4 + len).toString();
                buf = buf.subarray(end + 4 + len);
                const w = want;
                want = null;
                w({ status: m ? Number(m[1]) : 0, body, at: performance.now(), mono: monoUs() });
            }
        });
        return (text) => new Promise((resolve) => {
            want = resolve;
            sock.write(text);
        });
    };
    return { conns, ask: conns.map(reader), host: `Host: ${u.host}\r\n`, close: () => conns.forEach((c) => c.destroy()) };
}

const createRequest = (ctx, host, trace) => {
    const body = JSON.stringify({ templateID: 'bench', allow_internet_access: ctx.opts.allowInternetAccess });
    return `POST /v2/sandboxes HTTP/1.1\r\n${host}X-API-Key: ${ctx.key}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        (trace ? `X-AgentBox-Trace: ${trace}\r\n` : '') + `\r\n${body}`;
};

// Sustained creates from n raw clients (rawClients: the client's own cost
// taken out) for seconds, each create followed by its kill: creates/s and
// node's CPU per create.
async function warmSustained(ctx, apiUrl, seconds, n = 32) {
    const { ask, host, close } = await rawClients(apiUrl, n);
    const until = performance.now() + seconds * 1000;
    const ms = [];
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await Promise.all(ask.map(async (a) => {
        while (performance.now() < until) {
            const t = performance.now();
            const r = await a(createRequest(ctx, host, null));
            if (r.status !== 201) throw new Error(`sustained raw create: ${r.status} ${r.body.slice(0, 300)}`);
            ms.push(r.at - t);
            const k = await a(`DELETE /sandboxes/${JSON.parse(r.body).sandboxID} HTTP/1.1\r\n${host}X-API-Key: ${ctx.key}\r\n\r\n`);
            if (k.status !== 204) throw new Error(`sustained raw kill: ${k.status} ${k.body.slice(0, 300)}`);
        }
    }));
    const rate = ms.length / ((performance.now() - t0) / 1000);
    const c = process.cpuUsage(c0);
    close();
    return { rate, p50: pct(ms, 50), p99: pct(ms, 99), cpu: (c.user + c.system) / 1000 / ms.length };
}

async function warmBurst(ctx, apiUrl, id, n = 32) {
    const { conns, ask, host } = await rawClients(apiUrl, n);
    await Promise.all(ask.map((a) => a(`GET /health HTTP/1.1\r\n${host}\r\n`)));
    const reqs = ask.map((_, i) => createRequest(ctx, host, id ? `${id}-${i}` : null));
    const c0 = process.cpuUsage();
    const pending = [];
    for (let i = 0; i < n; i++) {
        const t = performance.now();
        const sent = monoUs();
        pending.push(ask[i](reqs[i]).then((r) => ({ r, t, sent, i })));
    }
    const got = await Promise.all(pending);
    const c = process.cpuUsage(c0);
    for (const sock of conns) sock.destroy();
    const xs = got.map(({ r, t, sent, i }) => {
        if (r.status !== 201) throw new Error(`warm create: ${r.status} ${r.body.slice(0, 300)}`);
        return { ms: r.at - t, sent, done: r.mono, sid: JSON.parse(r.body).sandboxID, trace: `${id}-${i}` };
    });
    return { xs, cpu: (c.user + c.system) / 1000 / n };
}

// Per round, interleaved: SDK and bare fetch against the stub (the client's
// own floor), then SDK and bare fetch against the agent, traced.
async function burstSplit(alpha, ctx, full) {
    const stub = await startStub();
    const kinds = ['sdk-stub', 'fetch-stub', 'curl-stub', 'warm-stub', 'sdk-agent', 'fetch-agent', 'curl-agent', 'warm-agent'];
    const ms = Object.fromEntries(kinds.map((k) => [k, []]));
    const cpu = Object.fromEntries(kinds.map((k) => [k, []]));
    const st = {};
    const push = (k, v) => (st[k] ||= []).push(v);
    try {
        for (let r = 0; r < ROUNDS; r++) {
            for (const k of kinds) {
                const [how, where] = k.split('-');
                const agent = where === 'agent';
                if (agent) await full();
                const b = await oneBurst(ctx, how, agent ? alpha.e2b : stub.url, agent);
                ms[k].push(...b.xs.map((x) => x.ms));
                cpu[k].push(b.cpu);
                if (!agent) continue;
                const t = await waitTraces(alpha, b.xs);
                const t0 = Math.min(...b.xs.map((x) => x.sent));
                const disp = [];
                for (const x of b.xs) {
                    const s = t.get(x.trace);
                    push(`${how}.in`, (s['http.dispatch'] - x.sent) / 1000);
                    push(`${how}.claim`, (s['http.respond'] - s['http.dispatch']) / 1000);
                    // the claim's own stages (local runtime, agent/runtime/local/arm.c)
                    const d = (a, b) => (Number.isFinite(s[a]) && Number.isFinite(s[b]) ? push(`${how}.${a}>${b}`, (s[b] - s[a]) / 1000) : null);
                    d('http.dispatch', 'claim.queued'); // handler: auth, body, placement
                    d('claim.queued', 'claim.arm'); // the runtime's queue
                    d('claim.arm', 'claim.init_sent');
                    d('claim.init_sent', 'claim.init_done'); // envd /init
                    d('claim.arm', 'claim.recorded'); // the state record on a worker
                    d('claim.init_done', 'claim.reported'); // waiting for the record after /init
                    d('claim.reported', 'http.respond'); // the E2B answer built
                    push(`${how}.out`, (s['http.end'] - s['http.respond']) / 1000);
                    push(`${how}.back`, (x.done - s['http.end']) / 1000);
                    disp.push(s['http.dispatch']);
                }
                push(`${how}.first`, (Math.min(...disp) - t0) / 1000);
                push(`${how}.spread`, (Math.max(...disp) - Math.min(...disp)) / 1000);
                await Promise.all(b.xs.map((x) => fetch(`${alpha.e2b}/sandboxes/${x.sid}`, { method: 'DELETE', headers: { 'X-API-Key': ctx.key } })
                    .then((res) => res.arrayBuffer())));
            }
        }
    } finally {
        stub.stop();
    }
    await full();
    const out = { rounds: ROUNDS, load: os.loadavg()[0], stages: {} };
    for (const k of kinds) out[k] = { p50: pct(ms[k], 50), p99: pct(ms[k], 99), cpu: pct(cpu[k], 50) };
    for (const [k, v] of Object.entries(st)) out.stages[k] = { p50: pct(v, 50), p99: pct(v, 99) };
    return out;
}

async function waitTraces(alpha, xs) {
    const deadline = performance.now() + 10000;
    for (;;) {
        const t = traceOf(alpha.proc.logFile);
        if (xs.every((x) => t.get(x.trace)?.['http.end'])) return t;
        if (performance.now() > deadline) throw new Error('trace lines of the traced burst not all in the agent log within 10 s');
        await new Promise((r) => setTimeout(r, 50));
    }
}

function reportSplit(s) {
    console.log(`  where a burst's time goes (${s.rounds} rounds of 32 each, interleaved, load ${s.load.toFixed(2)}):`);
    const w = (k, label) => console.log(`    ${label.padEnd(46)} p50 ${fmt(s[k].p50).padStart(7)} ms  p99 ${fmt(s[k].p99).padStart(7)} ms  ` +
        `(node CPU ${fmt(s[k].cpu)} ms per create)`);
    w('sdk-stub', 'Sandbox.create vs a stub answering at once');
    w('fetch-stub', 'bare fetch POST vs the stub');
    w('sdk-agent', 'Sandbox.create vs the agent (traced)');
    w('fetch-agent', 'bare fetch POST vs the agent (traced)');
    w('curl-stub', 'curl -Z (one process, C) vs the stub');
    w('curl-agent', 'curl -Z vs the agent (traced)');
    w('warm-stub', '32 open connections (raw HTTP/1.1) vs the stub');
    w('warm-agent', '32 open connections vs the agent (traced)');
    for (const how of ['sdk', 'fetch', 'curl', 'warm']) {
        const g = (k) => `p50 ${fmt(s.stages[`${how}.${k}`].p50)} p99 ${fmt(s.stages[`${how}.${k}`].p99)} ms`;
        if (how === 'curl') console.log('    (curl: "sent" is its spawn, "resolved" its exit: its own start and exit are in those two stages)');
        console.log(`    ${how} vs the agent, by stage: sent → handler runs ${g('in')} (first handler ${fmt(s.stages[`${how}.first`].p50)} ms ` +
            `after the first send, first to last ${fmt(s.stages[`${how}.spread`].p50)} ms); handler → answer (claim: /init, record) ${g('claim')}; ` +
            `answer → written ${g('out')}; written → resolved in node ${g('back')}`);
        const c = (k) => (s.stages[`${how}.${k}`] ? `p50 ${fmt(s.stages[`${how}.${k}`].p50)} p99 ${fmt(s.stages[`${how}.${k}`].p99)}` : 'n/a');
        console.log(`      the claim: handler → runtime ${c('http.dispatch>claim.queued')}; → sandbox taken ${c('claim.queued>claim.arm')}; → /init sent ${c('claim.arm>claim.init_sent')}; ` +
            `envd /init ${c('claim.init_sent>claim.init_done')}; record on disk (from taken) ${c('claim.arm>claim.recorded')}; ` +
            `/init done → reported ${c('claim.init_done>claim.reported')}; → answer ${c('claim.reported>http.respond')} ms`);
    }
}

function report(r) {
    console.log(`e2b create from a warm local pool (real SDK, armed on 201, internet ${r.internet}) — ${r.buildDir}, ` +
        `load ${r.loadBefore.toFixed(2)} → ${r.loadAfter.toFixed(2)}`);
    console.log(`  baseline GET /health      p50 ${fmt(r.base50)} ms`);
    console.log(`  baseline native claim     p50 ${fmt(r.nat50)} ms  p99 ${fmt(r.nat99)} ms`);
    console.log(`  1 client   (n=${r.oneN})      p50 ${fmt(r.one50)} ms  p99 ${fmt(r.one99)} ms  ` +
        `(${fmt(r.one50 / r.nat50)}x the native claim)`);
    console.log(`  1 client, raw (n=${r.oneN})  p50 ${fmt(r.raw50)} ms  p99 ${fmt(r.raw99)} ms  (one open connection, raw HTTP/1.1: the client's own cost taken out)`);
    console.log(`    the client's floor: Sandbox.create vs a stub answering at once, sequential  p50 ${fmt(r.stubSeq50)} ms  p99 ${fmt(r.stubSeq99)} ms; ` +
        `the process's first Sandbox.create (SDK lazy loading, untimed above) ${fmt(r.firstMs)} ms`);
    console.log(`  32 clients (n=32, burst)  p50 ${fmt(r.burst50)} ms  p99 ${fmt(r.burst99)} ms  ` +
        `(${fmt(r.burst50 / r.nat50)}x the 1-client native claim; agent CPU ${fmt(r.burstCpu)} ms per create, ` +
        `all threads: the loop thread serves every claim)`);
    reportSplit(r.split);
    console.log(`  32 clients sustained ${SECONDS}s with refills: ${fmt(r.rate)} creates/s  ` +
        `p50 ${fmt(r.sus50)} ms  p99 ${fmt(r.sus99)} ms; the agent held at most ${r.held} sandboxes ` +
        `(pool ${POOL}; the rest dead, not yet removed, or starting)`);
    console.log(`  CPU per sustained create (claim, kill, removal, refill spawn): agent ${fmt(r.cpuSelf)} ms + ` +
        `its reaped sandboxes ${fmt(r.cpuChildren)} ms = ${fmt(r.cpuSelf + r.cpuChildren)} ms ` +
        `(2 cores: at most ${fmt(2000 / (r.cpuSelf + r.cpuChildren))} creates/s); PostgreSQL ${fmt(r.pgMs)} ms ` +
        `(the hub's lifecycle rows)`);
    const rest = r.machineMs - r.cpuSelf - r.cpuChildren - r.nodeMs - r.pgMs;
    console.log(`  the whole machine per sustained create: ${fmt(r.machineMs)} ms of its ${os.cpus().length} cores ` +
        `(busy ${fmt(busyPct(r.machineMs, r.rate))} %): agent + sandboxes ` +
        `${fmt(r.cpuSelf + r.cpuChildren)}, the 32 SDK clients (this node process) ${fmt(r.nodeMs)}, PostgreSQL ` +
        `${fmt(r.pgMs)}, the rest ${fmt(rest)} ms (kernel threads: namespace teardown, RCU, softirqs; the hub)`);
    console.log(`  32 raw clients sustained ${SECONDS}s (open connections, raw HTTP/1.1): ${fmt(r.rawRate)} creates/s  ` +
        `p50 ${fmt(r.raw50s)} ms  p99 ${fmt(r.raw99s)} ms; CPU per create: agent ${fmt(r.rawCpuSelf)} ms + sandboxes ` +
        `${fmt(r.rawCpuChildren)} ms, the client ${fmt(r.rawNode)} ms; the whole machine ${fmt(r.rawMachineMs)} ms ` +
        `(busy ${fmt(busyPct(r.rawMachineMs, r.rawRate))} %)`);
    console.log(`  the SDK's own ceiling: 32 loops of Sandbox.create vs a stub answering at once: ${fmt(r.sdkCeil)} creates/s`);
}

const current = process.env.AGENTBOX_BUILD_DIR || 'build';
const baselineDir = process.env.AGENTBOX_BASELINE_BUILD_DIR;
console.log(`cpus ${os.cpus().length}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
// BENCH_BASELINE_LAST=1 measures this build first (to see the order's bias)
let before = null, after;
if (baselineDir && process.env.BENCH_BASELINE_LAST === '1') {
    after = await measure(current);
    before = await measure(baselineDir);
} else {
    before = baselineDir ? await measure(baselineDir) : null;
    after = await measure(current);
}
if (before) {
    const rows = [
        ['create, 1 client p50 ms', 'one50', 'target ≤ 5'],
        ['create, 1 client p99 ms', 'one99', 'target ≤ 25'],
        ['create, 32 clients burst p50 ms', 'burst50', ''],
        ['create, 32 clients burst p99 ms', 'burst99', 'target ≤ 25'],
        ['sustained with refills, creates/s', 'rate', 'target ≥ 500'],
        ['sustained p50 ms', 'sus50', ''],
        ['sustained, raw clients, creates/s', 'rawRate', 'target ≥ 500'],
        ['CPU per sustained create, agent ms', 'cpuSelf', ''],
        ['CPU per sustained create, sandboxes ms', 'cpuChildren', ''],
        ['CPU per sustained create, machine ms', 'machineMs', ''],
        ['native claim p50 ms (baseline)', 'nat50', ''],
        ['GET /health p50 ms (baseline)', 'base50', ''],
    ];
    console.log(`\nside by side (baseline ${baselineDir}, load ${before.loadBefore.toFixed(2)}; ` +
        `this build ${current}, load ${after.loadBefore.toFixed(2)}):`);
    console.log(['figure'.padEnd(38), 'this build'.padStart(12), 'baseline'.padStart(10), 'ratio'.padStart(8), '  note'].join(''));
    for (const [label, k, note] of rows)
        console.log([label.padEnd(38), fmt(after[k]).padStart(12), fmt(before[k]).padStart(10),
            fmt(after[k] / before[k]).padStart(8), `  ${note}`].join(''));
}

// the issue-17 summary rows (run.sh collects them); baseline: the native claim of the same run
const ld = `load ${after.loadBefore.toFixed(2)}`;
const base = `native claim p50 ${fmt(after.nat50)} ms`;
const base1 = `${base}; SDK vs a stub p50 ${fmt(after.stubSeq50)} p99 ${fmt(after.stubSeq99)} ms`;
row('create-1-p50', 'E2B create, 1 client, p50', `${fmt(after.one50)} ms (${ld})`, base1, '<= 5 ms', atMost(after.one50, 5));
row('create-1-raw-p50', 'E2B create, 1 client on an open connection (raw HTTP/1.1), p50', `${fmt(after.raw50)} ms, p99 ${fmt(after.raw99)} ms (${ld})`,
    `GET /health p50 ${fmt(after.base50)} ms`, '<= 5 ms', atMost(after.raw50, 5));
row('create-1-p99', 'E2B create, 1 client, p99', `${fmt(after.one99)} ms (${ld})`, base1, '<= 25 ms', atMost(after.one99, 25));
row('create-burst32-p99', 'E2B create, 32 clients in a burst, p99', `${fmt(after.burst99)} ms (${ld})`,
    `client floor: the same burst vs a stub server p99 ${fmt(after.split['sdk-stub'].p99)} ms; bare fetch vs the agent p99 ${fmt(after.split['fetch-agent'].p99)} ms`, '<= 25 ms', atMost(after.burst99, 25));
// the same burst from a client whose own cost is small (one curl process): the agent's part
row('create-burst32-curl-p99', 'E2B create, 32 in a burst from curl -Z (C client), p99', `${fmt(after.split['curl-agent'].p99)} ms (load ${after.split.load.toFixed(2)})`,
    `curl -Z vs the stub p99 ${fmt(after.split['curl-stub'].p99)} ms`, '<= 25 ms', atMost(after.split['curl-agent'].p99, 25));
// 32 clients that already hold their connections (the fleet's steady state): the server's part of a burst
row('create-burst32-warm-p99', 'E2B create, 32 clients in a burst on open connections (raw HTTP/1.1), p99', `${fmt(after.split['warm-agent'].p99)} ms (load ${after.split.load.toFixed(2)})`,
    `the same vs the stub p99 ${fmt(after.split['warm-stub'].p99)} ms`, '<= 25 ms', atMost(after.split['warm-agent'].p99, 25));
row('create-sustained', 'sustained creates with refills, 32 clients', `${fmt(after.rate)}/s (${ld})`,
    `${base}; the SDK's ceiling vs a stub ${fmt(after.sdkCeil)}/s`, '>= 500/s', atLeast(after.rate, 500));
row('create-sustained-raw', 'sustained creates with refills, 32 raw HTTP/1.1 clients (client cost out)', `${fmt(after.rawRate)}/s (${ld})`,
    `agent ${fmt(after.rawCpuSelf)} + sandboxes ${fmt(after.rawCpuChildren)} ms of CPU per create`, '>= 500/s', atLeast(after.rawRate, 500));
