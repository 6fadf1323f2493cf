// Tunnel benchmarks with real processes (DESIGN §12):
//   1. bulk throughput alpha → hub → beta, against two direct loopback
//      baselines measured in the same run: a plain node TCP server, and
//      beta's own /v1/diag/bytes without the tunnel;
//      and a peer: websockify (Debian) carrying the same bytes from the same
//      node TCP server over one WebSocket hop (websockify → a WebSocket
//      client here), where ours has three (beta → hub → alpha);
//   2. small-request round trip through the relay (alpha → hub → beta
//      /v1/ping) against beta's /v1/ping directly, keep-alive clients.
// Not part of the test suite: it prints figures and ratios and exits 0
// unless the stack itself fails.
//
// Environment: AGENTBOX_BUILD_DIR (a Release build), BENCH_BYTES (bulk size,
// default 1 GiB), BENCH_ROUNDS (bulk rounds per path, default 3),
// BENCH_RTT_N (round trips per path, default 2000).
import http from 'node:http';
import net from 'node:net';
import crypto from 'node:crypto';
import { spawn, spawnSync } from 'node:child_process';
import {
    startPostgres, runMigrate, startHub, addCluster, startAgent, waitClusterOnline, buildDir, adminKey, waitFor,
    httpGet,
} from '../integration/lib/harness.mjs';
import { quantile, median, mean, fmt, printTable, machineNote, cpuOf, row, atLeast, atMost, loadNow } from './util.mjs';

const BYTES = Number(process.env.BENCH_BYTES || 1024 ** 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 3);
const RTT_N = Number(process.env.BENCH_RTT_N || 2000);
const RTT_WARMUP = 200;
const RTT_BLOCK = 250; // paths alternate in blocks, so drift on a shared box hits all of them

// --- the stack ------------------------------------------------------------------------

// Relays and diagnostics are admin-only (issue 13): every request carries the
// harness's admin key (the plain TCP baseline ignores it).
let KEY_HEADERS = {};

async function startStack() {
    const pg = await startPostgres();
    const m = await runMigrate(pg.url);
    if (m.code !== 0) throw new Error(`migrate failed: ${m.stderr}`);
    // Default tunnel settings: the sessions must stay up through idle gaps
    // between phases on their own (pings both ways).
    const hub = await startHub(pg.url, { args: ['--log-level', 'warn'] });
    const agents = {};
    for (const id of ['alpha', 'beta']) {
        const token = await addCluster(pg.url, id);
        agents[id] = await startAgent(id, { hubUrl: hub.tunnelUrl, token, args: ['--log-level', 'warn', '--enable-diag'] });
        await waitClusterOnline(hub.base, id, true, 15000);
    }
    KEY_HEADERS = { 'X-API-Key': await adminKey(hub.base) };
    const stop = async () => {
        for (const a of Object.values(agents)) await a.proc.stop();
        await hub.proc.stop();
        await pg.cleanup();
    };
    return { pg, hub, alpha: agents.alpha, beta: agents.beta, stop };
}

// A plain loopback TCP server in its own process that answers any request
// with an HTTP/1.1 200 head and n bytes (from ?n=), written as fast as the
// socket takes them: the "direct loopback TCP" baseline.
const NET_SERVER = `
const net = require('node:net');
const piece = Buffer.alloc(64 * 1024, 'abcdefghijklmnopqrstuvwxyz');
const srv = net.createServer((s) => {
    let head = '';
    s.on('data', function onData(d) {
        head += d.toString('latin1');
        if (!head.includes('\\r\\n\\r\\n')) return;
        s.off('data', onData);
        const n = Number((head.match(/[?&]n=(\\d+)/) || [])[1] || 0);
        s.write('HTTP/1.1 200 OK\\r\\nContent-Type: application/octet-stream\\r\\nContent-Length: ' + n + '\\r\\nConnection: close\\r\\n\\r\\n');
        let left = n;
        const pump = () => {
            while (left > 0) {
                const k = Math.min(left, piece.length);
                left -= k;
                if (!s.write(k === piece.length ? piece : piece.subarray(0, k))) return s.once('drain', pump);
            }
            // Not s.end(): the reader closes once it has n bytes. websockify
            // drops what it still holds when its target closes first (seen
            // on a loaded machine: "Target closed" 1.3 MB short of 1 GiB).
            s.once('end', () => s.end());
        };
        pump();
    });
    s.on('error', () => {});
});
srv.listen(0, '127.0.0.1', () => console.log(srv.address().port));
`;

function startNetServer() {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, ['-e', NET_SERVER], { stdio: ['ignore', 'pipe', 'inherit'] });
        child.once('error', reject);
        child.stdout.once('data', (d) => resolve({ child, base: `http://127.0.0.1:${Number(d.toString().trim())}` }));
    });
}

// --- websockify, the one-hop peer ---------------------------------------------------------

function freePort() {
    return new Promise((resolve, reject) => {
        const s = net.createServer();
        s.once('error', reject);
        s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
    });
}

// websockify in front of the node TCP server; null when it is not installed.
async function startWebsockify(netBase) {
    if (spawnSync('sh', ['-c', 'command -v websockify']).status !== 0) return null;
    const port = await freePort();
    const target = new URL(netBase);
    const child = spawn('websockify', [`127.0.0.1:${port}`, `${target.hostname}:${target.port}`],
        { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (d) => { err += d; });
    const deadline = Date.now() + 15000;
    for (;;) {
        const up = await new Promise((r) => {
            const c = net.connect(port, '127.0.0.1', () => { c.destroy(); r(true); });
            c.once('error', () => r(false));
        });
        if (up) return { child, port };
        if (child.exitCode !== null || Date.now() > deadline) {
            child.kill('SIGTERM');
            throw new Error(`websockify did not listen on ${port}: ${err.slice(-500)}`);
        }
        await new Promise((r) => setTimeout(r, 50));
    }
}

// One WebSocket client transfer through websockify: the upgrade, one masked
// binary frame with the HTTP request for n bytes, then every frame's payload
// counted (server frames are not masked: nothing to undo) until the head and
// n bytes of body are in. Resolves MB/s (10^6) of body.
function readAllWebsockify(port, expect) {
    return new Promise((resolve, reject) => {
        const t0 = process.hrtime.bigint();
        const sock = net.connect(port, '127.0.0.1');
        const key = crypto.randomBytes(16).toString('base64');
        let upgraded = false, head = Buffer.alloc(0), pending = Buffer.alloc(0);
        let need = -1, payload = 0; // bytes of the current frame's payload still to skip
        let body = -1, headText = '';
        const fail = (e) => { sock.destroy(); reject(e); };
        sock.on('connect', () => sock.write(`GET / HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nUpgrade: websocket\r\n` +
            `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n` +
            'Sec-WebSocket-Protocol: binary\r\n\r\n'));
        const onPayload = (chunk) => {
            if (body < 0) { // the HTTP head comes first inside the frames
                headText += chunk.toString('latin1');
                const e = headText.indexOf('\r\n\r\n');
                if (e < 0) return;
                if (!/^HTTP\/1\.1 200/.test(headText)) return fail(new Error(`websockify target: ${headText.slice(0, 100)}`));
                body = headText.length - e - 4;
            } else body += chunk.length;
            if (body >= expect) {
                const sec = Number(process.hrtime.bigint() - t0) / 1e9;
                sock.destroy();
                if (body !== expect) reject(new Error(`websockify: ${body} bytes, expected ${expect}`));
                else resolve(body / sec / 1e6);
            }
        };
        sock.on('data', (d) => {
            if (!upgraded) {
                head = Buffer.concat([head, d]);
                const e = head.indexOf('\r\n\r\n');
                if (e < 0) return;
                if (!/^HTTP\/1\.1 101/.test(head.toString('latin1'))) return fail(new Error(`websockify refused: ${head.toString().slice(0, 200)}`));
                upgraded = true;
                d = head.subarray(e + 4);
                const req = Buffer.from(`GET /bytes?n=${expect} HTTP/1.1\r\nHost: x\r\n\r\n`);
                const mask = crypto.randomBytes(4);
                const masked = Buffer.from(req.map((b, i) => b ^ mask[i & 3]));
                sock.write(Buffer.concat([Buffer.from([0x82, 0x80 | req.length]), mask, masked]));
            }
            let off = 0;
            pending = pending.length ? Buffer.concat([pending, d]) : d;
            while (off < pending.length) {
                if (payload > 0) {
                    const n = Math.min(payload, pending.length - off);
                    onPayload(pending.subarray(off, off + n));
                    payload -= n;
                    off += n;
                    continue;
                }
                if (pending.length - off < 2) break;
                const op = pending[off] & 0x0f, l7 = pending[off + 1] & 0x7f;
                const hl = 2 + (l7 === 126 ? 2 : l7 === 127 ? 8 : 0);
                if (pending.length - off < hl) break;
                need = l7 === 126 ? pending.readUInt16BE(off + 2) : l7 === 127 ? Number(pending.readBigUInt64BE(off + 2)) : l7;
                off += hl;
                if (op === 0x8) {
                    const reason = pending.subarray(off, off + need);
                    return fail(new Error(`websockify closed the WebSocket after ${Math.max(body, 0)} of ${expect} bytes ` +
                        `(code ${reason.length >= 2 ? reason.readUInt16BE(0) : '-'} ${reason.subarray(2).toString()})`));
                }
                if (op === 0x1 || op === 0x2 || op === 0x0) payload = need;
                else off += need; // control frames: skipped (none expected)
            }
            pending = off < pending.length ? Buffer.from(pending.subarray(off)) : Buffer.alloc(0);
        });
        sock.on('error', fail);
        sock.setTimeout(600000, () => fail(new Error('websockify: no progress')));
    });
}

// --- 1. bulk throughput -------------------------------------------------------------------

// GETs url and reads the body as fast as possible; resolves MB/s (10^6).
function readAll(url, expect) {
    return new Promise((resolve, reject) => {
        const t0 = process.hrtime.bigint();
        let got = 0;
        const req = http.get(url, { agent: false, headers: KEY_HEADERS }, (res) => {
            if (res.statusCode !== 200) {
                reject(new Error(`GET ${url}: HTTP ${res.statusCode}`));
                res.resume();
                return;
            }
            res.on('data', (c) => (got += c.length));
            res.on('end', () => {
                const s = Number(process.hrtime.bigint() - t0) / 1e9;
                if (got !== expect) reject(new Error(`GET ${url}: ${got} bytes, expected ${expect}`));
                else resolve(got / s / 1e6);
            });
            res.on('error', reject);
        });
        req.on('error', reject);
        req.setTimeout(600000, () => req.destroy(new Error(`GET ${url}: no progress`)));
    });
}

const WSFY = 'websockify → node TCP server (one WS hop)';

async function benchThroughput(st, net, wsfy) {
    const paths = {
        'node TCP server (direct loopback)': `${net.base}/bytes?n=${BYTES}`,
        'beta /v1/diag/bytes (direct)': `${st.beta.native}/v1/diag/bytes?n=${BYTES}`,
        'alpha → hub → beta (relay)': `${st.alpha.native}/v1/relay/beta/native/v1/diag/bytes?n=${BYTES}`,
    };
    if (wsfy) paths[WSFY] = `websockify:${wsfy.port}`;
    const read = (url, n) => (url.startsWith('websockify:') ? readAllWebsockify(Number(url.split(':')[1]), n) : readAll(url, n));
    // warm up every path (connections, page cache of the binaries)
    for (const url of Object.values(paths)) {
        const u = url.replace(/n=\d+/, `n=${16 << 20}`);
        await read(u, 16 << 20);
    }
    // CPU of every process during each transfer says whether a path is CPU
    // bound (the box may have few cores) or waiting on credit/latency.
    const procs = { hub: [st.hub.proc.pid], alpha: [st.alpha.proc.pid], beta: [st.beta.proc.pid],
        'node server': [net.child.pid], reader: [process.pid] };
    // (websockify's CPU is left out: it forks a process per connection)
    const results = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
    const cpu = Object.fromEntries(Object.keys(paths).map((k) => [k, {}]));
    // CPU ms per MB (10^6) moved: what a path costs each process, which a
    // loaded machine changes far less than MB/s
    const perMb = Object.fromEntries(Object.keys(paths).map((k) => [k, {}]));
    for (let r = 0; r < ROUNDS; r++) {
        for (const [name, url] of Object.entries(paths)) {
            const c0 = Object.fromEntries(Object.entries(procs).map(([p, pids]) => [p, cpuOf(pids)]));
            const t0 = process.hrtime.bigint();
            const mbs = await read(url, BYTES);
            const wall = Number(process.hrtime.bigint() - t0) / 1e9;
            for (const [p, pids] of Object.entries(procs)) {
                (cpu[name][p] ||= []).push((cpuOf(pids) - c0[p]) / wall);
                (perMb[name][p] ||= []).push(((cpuOf(pids) - c0[p]) * 1000) / (BYTES / 1e6));
            }
            results[name].push(mbs);
            console.error(`  round ${r + 1}/${ROUNDS} ${name}: ${fmt(mbs, 0)} MB/s`);
        }
    }
    return { results, cpu, perMb, procs: Object.keys(procs) };
}

// --- 2. round trips -----------------------------------------------------------------------

function getKeepAlive(agent, url) {
    return new Promise((resolve, reject) => {
        const t0 = process.hrtime.bigint();
        const req = http.get(url, { agent, headers: KEY_HEADERS }, (res) => {
            let body = '';
            res.setEncoding('utf8');
            res.on('data', (c) => (body += c));
            res.on('end', () => {
                const ms = Number(process.hrtime.bigint() - t0) / 1e6;
                if (res.statusCode !== 200 || !body.includes('pong')) {
                    reject(new Error(`GET ${url}: HTTP ${res.statusCode} ${body.slice(0, 200)}`));
                } else resolve(ms);
            });
            res.on('error', reject);
        });
        req.on('error', reject);
        req.setTimeout(10000, () => req.destroy(new Error(`GET ${url}: no answer in 10 s`)));
    });
}

async function benchRoundTrip(st) {
    const paths = {
        'beta /v1/ping (direct)': `${st.beta.native}/v1/ping`,
        'alpha → hub → beta /v1/ping (relay)': `${st.alpha.native}/v1/relay/beta/native/v1/ping`,
        'hub /api/clusters/beta/v1/ping': `${st.hub.base}/api/clusters/beta/v1/ping`,
    };
    const agents = Object.fromEntries(Object.keys(paths).map((k) => [k, new http.Agent({ keepAlive: true, maxSockets: 1 })]));
    for (const [name, url] of Object.entries(paths)) {
        for (let i = 0; i < RTT_WARMUP; i++) await getKeepAlive(agents[name], url);
    }
    const samples = Object.fromEntries(Object.keys(paths).map((k) => [k, []]));
    for (let done = 0; done < RTT_N; done += RTT_BLOCK) {
        const n = Math.min(RTT_BLOCK, RTT_N - done);
        for (const [name, url] of Object.entries(paths)) {
            for (let i = 0; i < n; i++) samples[name].push(await getKeepAlive(agents[name], url));
        }
    }
    for (const a of Object.values(agents)) a.destroy();
    return samples;
}

// DESIGN §12: a stalled stream adds <= 5 ms to other streams' round trips.
// A reader that never reads asks alpha for 1 GB relayed from beta; once the
// hub holds a window of it for alpha (its buffered-bytes gauge, sampled every
// 5 s), relayed pings on the same tunnels are timed again while the stall
// lasts (it never clears); the baseline is section 2's relayed pings, taken
// just before on the same path.
async function benchStalled(st) {
    const url = `${st.alpha.native}/v1/relay/beta/native/v1/ping`;
    const u = new URL(`${st.alpha.native}/v1/relay/beta/native/v1/diag/bytes?n=1000000000`);
    const sock = net.connect(Number(u.port), u.hostname);
    await new Promise((r, j) => { sock.once('connect', r); sock.once('error', j); });
    sock.write(`GET ${u.pathname}${u.search} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${KEY_HEADERS['X-API-Key']}\r\n\r\n`);
    sock.pause();
    try {
        const held = await waitFor(async () => {
            const r = await httpGet(`${st.hub.metrics}/metrics`);
            const line = r.body.split('\n').find((l) => l.startsWith('agentbox_tunnel_buffered_bytes{cluster="alpha"}'));
            const b = line ? Number(line.split(' ').pop()) : 0;
            return b >= 256 * 1024 ? b : null;
        }, { timeoutMs: 30000, intervalMs: 250, what: 'the hub buffering the stalled stream' });
        const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
        for (let i = 0; i < RTT_WARMUP; i++) await getKeepAlive(agent, url);
        const xs = [];
        for (let i = 0; i < RTT_N; i++) xs.push(await getKeepAlive(agent, url));
        agent.destroy();
        return { xs, held };
    } finally {
        sock.destroy();
    }
}

// --- main ----------------------------------------------------------------------------------

async function main() {
    console.log(`# tunnel benchmarks  build=${buildDir()}  ${machineNote()}`);
    const st = await startStack();
    const tcp = await startNetServer();
    const wsfy = await startWebsockify(tcp.base);
    if (!wsfy) console.log('websockify is not installed (scripts/deps.sh): its row is left out');
    try {
        console.log(`\n## 1. bulk throughput, ${BYTES} bytes per transfer, ${ROUNDS} rounds per path (interleaved)`);
        const { results: tp, cpu, perMb, procs } = await benchThroughput(st, tcp, wsfy);
        const rows = Object.entries(tp).map(([k, v]) => [k, fmt(median(v), 0), fmt(Math.max(...v), 0), fmt(Math.min(...v), 0)]);
        printTable(['path', 'median MB/s', 'best MB/s', 'worst MB/s'], rows);
        console.log('\nCPU during the transfers (cores, median over rounds):');
        printTable(['path', ...procs], Object.entries(cpu).map(([k, v]) => [k, ...procs.map((p) => fmt(median(v[p]), 2))]));
        console.log('\nCPU ms per MB moved (median over rounds):');
        printTable(['path', ...procs], Object.entries(perMb).map(([k, v]) => [k, ...procs.map((p) => fmt(median(v[p]), 2))]));
        const rm = perMb['alpha → hub → beta (relay)'];
        console.log(`relay CPU ms/MB: hub ${fmt(median(rm.hub), 2)}  alpha ${fmt(median(rm.alpha), 2)}  beta ${fmt(median(rm.beta), 2)}`);
        const relay = median(tp['alpha → hub → beta (relay)']);
        const netMbs = median(tp['node TCP server (direct loopback)']);
        const beta = median(tp['beta /v1/diag/bytes (direct)']);
        console.log(`ratio relay / direct node TCP   = ${fmt(relay / netMbs, 3)}  (target >= 0.5)`);
        console.log(`ratio relay / direct beta bytes = ${fmt(relay / beta, 3)}  (target >= 0.5)`);
        row('relay-bulk', 'bulk alpha → hub → beta vs direct loopback TCP',
            `${fmt(relay, 0)} MB/s: ${fmt(relay / netMbs, 3)}x (load ${loadNow()})`, `${fmt(netMbs, 0)} MB/s direct TCP`, '>= 0.5x', atLeast(relay / netMbs, 0.5));
        if (wsfy) {
            const w = median(tp[WSFY]);
            console.log(`ratio websockify (1 hop) / direct node TCP = ${fmt(w / netMbs, 3)};  relay (3 hops) / websockify = ${fmt(relay / w, 3)}`);
            row('relay-websockify', 'the relay vs websockify, one WebSocket hop, same bytes',
                `${fmt(relay, 0)} MB/s vs ${fmt(w, 0)} MB/s: ${fmt(relay / w, 3)}x (load ${loadNow()})`, `${fmt(w, 0)} MB/s websockify`, 'peer', '-');
        }

        console.log(`\n## 2. round trip, ${RTT_N} sequential keep-alive GETs per path (blocks of ${RTT_BLOCK}, interleaved)`);
        const rt = await benchRoundTrip(st);
        printTable(['path', 'p50 ms', 'p90 ms', 'p99 ms', 'mean ms', 'max ms'], Object.entries(rt).map(([k, v]) => [
            k, fmt(quantile(v, 0.5), 3), fmt(quantile(v, 0.9), 3), fmt(quantile(v, 0.99), 3), fmt(mean(v), 3), fmt(Math.max(...v), 3),
        ]));
        const d = rt['beta /v1/ping (direct)'];
        const r = rt['alpha → hub → beta /v1/ping (relay)'];
        console.log(`added by the relay: p50 ${fmt(quantile(r, 0.5) - quantile(d, 0.5), 3)} ms, ` +
            `p99 ${fmt(quantile(r, 0.99) - quantile(d, 0.99), 3)} ms`);

        console.log(`\n## 3. a stalled stream beside the relayed pings (${RTT_N} more, same path)`);
        const sl = await benchStalled(st);
        const added = quantile(sl.xs, 0.5) - quantile(r, 0.5);
        console.log(`relayed ping beside a stalled stream (the hub holding ${sl.held} bytes of it): p50 ${fmt(quantile(sl.xs, 0.5), 3)} ms, ` +
            `p99 ${fmt(quantile(sl.xs, 0.99), 3)} ms; alone p50 ${fmt(quantile(r, 0.5), 3)} ms: added ${fmt(added, 3)} ms`);
        row('relay-stalled', "a stalled stream: added to another stream's round trip, p50",
            `${fmt(added, 3)} ms (load ${loadNow()})`, `relayed ping alone p50 ${fmt(quantile(r, 0.5), 3)} ms`, '<= 5 ms', atMost(added, 5));
    } finally {
        tcp.child.kill('SIGTERM');
        if (wsfy) wsfy.child.kill('SIGTERM');
        await st.stop();
    }
}

main().then(() => process.exit(0), (e) => {
    console.error(`tunnel benchmark failed: ${e.stack || e}`);
    process.exit(1);
});
