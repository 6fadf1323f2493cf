// Benchmark: what the egress gateway (issue 12, agent/egress/) costs a
// sandbox's outbound traffic. A test network namespace behind a veth from the
// host holds a server on 198.19.213.2 (the benchmarking range: "public" by the policy,
// reachable only on this machine); the same client program runs straight
// from the host and from inside a real sandbox (through its veth, the egress
// namespace's redirect and the gateway's splice), in one run:
//
//   download    MiB/s of BENCH_EGRESS_MIB (default 256) MiB from the server
//   connect     p50 / p99 ms of BENCH_EGRESS_CONNECTS (default 300) sequential
//               connects (until the server's first byte: the gateway answers
//               the handshake itself, so "connected" alone would flatter it)
//
// Targets: ≥ 0.8× the host's throughput, ≤ 1 ms added to the connect p50.
// Needs root (namespaces):
//   sudo AGENTBOX_BUILD_DIR=build node tests/bench/egress.mjs
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { spawnProc, waitFor } from '../integration/lib/harness.mjs';
import { fmt, machineNote, printTable } from './util.mjs';

const MIB = Number(process.env.BENCH_EGRESS_MIB || 256);
const CONNECTS = Number(process.env.BENCH_EGRESS_CONNECTS || 300);
const tag = `${process.pid % 100000}`;
const INET = `abx-inbench-${tag}`;
const HOSTIF = `abxb${tag}`;
const SERVER = '198.19.213.2';

const sh = (cmd, args) => {
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
};

// The client, the same file on the host and in the sandbox.
const CLIENT = `
const net = require('net');
const [host, mib, connects] = [process.argv[2], Number(process.argv[3]), Number(process.argv[4])];
const q = (v, p) => { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; };
const download = () => new Promise((res, rej) => {
    const t0 = process.hrtime.bigint();
    let n = 0;
    const c = net.connect(9000, host, () => c.write(String(mib)));
    c.on('data', (d) => { n += d.length; });
    c.on('error', rej);
    c.on('close', () => res({ bytes: n, s: Number(process.hrtime.bigint() - t0) / 1e9 }));
});
const once = () => new Promise((res, rej) => {
    const t0 = process.hrtime.bigint();
    const c = net.connect(9001, host);
    c.once('data', () => { res(Number(process.hrtime.bigint() - t0) / 1e6); c.destroy(); });
    c.on('error', rej);
});
(async () => {
    await download(); // warm-up
    const d = await download();
    for (let i = 0; i < 20; i++) await once();
    const lat = [];
    for (let i = 0; i < connects; i++) lat.push(await once());
    console.log(JSON.stringify({ mibps: d.bytes / 1048576 / d.s, bytes: d.bytes, p50: q(lat, 0.5), p99: q(lat, 0.99) }));
})().catch((e) => { console.log(JSON.stringify({ error: e.code || String(e) })); });
`;

const cleanups = [];
async function main() {
    console.log(machineNote());
    cleanups.push(() => spawnSync('ip', ['netns', 'del', INET]));
    cleanups.push(() => spawnSync('ip', ['link', 'del', HOSTIF]));
    sh('ip', ['netns', 'add', INET]);
    sh('ip', ['link', 'add', HOSTIF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', INET]);
    sh('ip', ['addr', 'add', '198.19.213.1/24', 'dev', HOSTIF]);
    sh('ip', ['link', 'set', HOSTIF, 'up']);
    sh('ip', ['netns', 'exec', INET, 'ip', 'addr', 'add', `${SERVER}/24`, 'dev', 'eth0']);
    sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'eth0', 'up']);
    sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'lo', 'up']);
    // 9000: "<n>" → n MiB; 9001: one byte at once (the connect probe)
    const server = spawnProc('bench-server', 'ip', ['netns', 'exec', INET, process.execPath, '-e', `
        const net = require('net');
        const chunk = Buffer.alloc(1 << 20, 7);
        net.createServer((s) => {
            s.once('data', (d) => {
                let left = Number(d.toString());
                const more = () => { while (left > 0) { left--; if (!s.write(chunk)) return s.once('drain', more); } s.end(); };
                more();
            });
            s.on('error', () => {});
        }).listen(9000, '${SERVER}', () => console.log('listening 9000'));
        net.createServer((s) => { s.end('x'); s.on('error', () => {}); }).listen(9001, '${SERVER}', () => console.log('listening 9001'));
    `]);
    cleanups.push(() => server.stop());
    await waitFor(() => server.logs().includes('listening 9000') && server.logs().includes('listening 9001'), { what: 'the bench server' });

    const file = path.join(os.tmpdir(), `egress-bench-${tag}.js`);
    fs.writeFileSync(file, CLIENT);
    cleanups.push(() => fs.rmSync(file, { force: true }));
    const host = JSON.parse(sh(process.execPath, [file, SERVER, String(MIB), String(CONNECTS)]));

    const stack = await startStack({ clusters: ['alpha'], manifests: manifestsDir([envManifest('bench', ['alpha'], { replicas: 1 })]) });
    cleanups.push(() => stack.stop());
    const alpha = stack.agents.alpha;
    await waitPool(alpha, 'bench-1c0gi', (s) => s.idle === 1, 'bench pool warm', 60000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    const { Sandbox } = await import('e2b');
    const sbx = await Sandbox.create('bench', { timeoutMs: 600000 });
    cleanups.push(() => sbx.kill().catch(() => {}));
    await sbx.files.write('/tmp/client.js', CLIENT);
    const r = await sbx.commands.run(`node /tmp/client.js ${SERVER} ${MIB} ${CONNECTS}`, { timeoutMs: 600000 });
    let gw;
    try {
        gw = JSON.parse(r.stdout);
    } catch {
        throw new Error(`the sandbox's client printed no result (exit ${r.exitCode}): ${r.stdout} ${r.stderr}`);
    }
    if (gw.error || host.error) throw new Error(`client failed: host ${JSON.stringify(host)}, sandbox ${JSON.stringify(gw)}`);
    if (gw.bytes !== MIB << 20) throw new Error(`the sandbox got ${gw.bytes} bytes of ${MIB << 20}`);

    printTable(['figure', 'host', 'sandbox (gateway)', 'ratio / added', 'target'], [
        [`download MiB/s (${MIB} MiB)`, fmt(host.mibps, 0), fmt(gw.mibps, 0), `${fmt(gw.mibps / host.mibps)}×`, '≥ 0.80×'],
        [`connect to first byte p50 ms (${CONNECTS})`, fmt(host.p50, 3), fmt(gw.p50, 3), `+${fmt(gw.p50 - host.p50, 3)} ms`, '≤ +1 ms'],
        ['connect to first byte p99 ms', fmt(host.p99, 3), fmt(gw.p99, 3), `+${fmt(gw.p99 - host.p99, 3)} ms`, ''],
    ]);
}

try {
    await main();
} finally {
    for (const fn of cleanups.reverse()) {
        try {
            await fn();
        } catch {
            /* keep cleaning */
        }
    }
}
