// Benchmark: what sandbox isolation (DESIGN §10a: user namespace, locked
// mounts, seccomp, cgroups, the tmpfs writable space) costs, as the real SDK
// sees it (DESIGN §12: idle start ≤ 50 ms, commands.run('true') ≤ 1.2× the
// round trip before isolation, warm create p50/p99 must not regress).
//
//   idle start   a claim on a pool with no idle sandbox (the runtime spawns
//                one: clone, setup, envd listening, /init) minus, interleaved,
//                a claim on a warm pool (the same path without the spawn).
//                `replicas` is a pool's maximum concurrency, so a pool never
//                lacks an idle sandbox while it has room: the `cold` pool has
//                replicas 1, its one sandbox is claimed (held), a second
//                claim waits (pending 1), and the time runs from the release
//                of the held one (whose place the replacement spawn takes)
//                until the waiting claim is answered
//   round trip   commands.run('true') on a running sandbox, against GET
//                /health of the same envd through the same data plane
//   warm create  Sandbox.create from a warm pool, p50/p99
//
// "Before" is another build of the project (e.g. main before isolation) in
// AGENTBOX_BASELINE_BUILD_DIR: each figure is then measured on both builds
// in the same run, one stack after the other, and printed with the ratio.
// Needs root (namespaces):
//   sudo AGENTBOX_BUILD_DIR=build [AGENTBOX_BASELINE_BUILD_DIR=../main/build] node tests/bench/isolation.mjs
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { startStack, manifestsDir, envManifest, waitPool, claim, native } from '../integration/lib/sandboxes.mjs';
import { quantile } from './util.mjs';

const N = Number(process.env.BENCH_N || 20);
const fmt = (x) => (Number.isFinite(x) ? x.toFixed(2) : '-');

async function measure(buildDir) {
    process.env.AGENTBOX_BUILD_DIR = buildDir;
    const manifests = manifestsDir([
        envManifest('warm', ['alpha'], { replicas: 2 }),
        envManifest('cold', ['alpha'], { replicas: 1 }),
    ]);
    const stack = await startStack({ clusters: ['alpha'], manifests });
    const alpha = stack.agents.alpha;
    try {
        await waitPool(alpha, 'warm-1c0gi', (s) => s.idle === 2, 'warm pool', 60000);
        await waitPool(alpha, 'cold-1c0gi', (s) => s.idle === 1, 'cold pool', 60000);
        const release = async (id) => {
            const r = await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${id}`);
            if (r.status >= 300) throw new Error(`release ${id}: ${r.status} ${r.text}`);
        };
        // A claim on the cold pool that must wait for a spawn: the pool's one
        // place is held, a second claim waits, the held one is released.
        const coldClaim = async () => {
            await waitPool(alpha, 'cold-1c0gi', (s) => s.idle === 1, 'cold pool refilled', 60000);
            const held = await claim(alpha, stack.key, { poolName: 'cold', timeout: 60 });
            const waiting = claim(alpha, stack.key, { poolName: 'cold', timeout: 60 });
            await waitPool(alpha, 'cold-1c0gi', (s) => s.pending === 1 && s.idle === 0, 'claim waiting', 60000);
            const t = performance.now();
            await release(held.sandboxId);
            const c = await waiting;
            return { ms: performance.now() - t, id: c.sandboxId };
        };
        // idle start: cold claim − warm claim, interleaved (after one of each unmeasured)
        await release((await claim(alpha, stack.key, { poolName: 'warm', timeout: 60 })).sandboxId);
        await release((await coldClaim()).id);
        const cold = [];
        const warm = [];
        for (let i = 0; i < N; i++) {
            await waitPool(alpha, 'warm-1c0gi', (s) => s.idle === 2, 'warm pool refilled', 60000);
            const t = performance.now();
            const w = await claim(alpha, stack.key, { poolName: 'warm' });
            warm.push(performance.now() - t);
            const c = await coldClaim();
            cold.push(c.ms);
            await release(w.sandboxId);
            await release(c.id);
        }

        process.env.E2B_API_URL = alpha.e2b;
        process.env.E2B_SANDBOX_URL = alpha.data;
        process.env.E2B_API_KEY = stack.key;
        const { Sandbox } = await import('e2b');
        // warm create through the E2B API (one unmeasured first: the SDK's
        // lazy setup must not count against whichever build runs first)
        await (await Sandbox.create('warm')).kill();
        const creates = [];
        for (let i = 0; i < N; i++) {
            await waitPool(alpha, 'warm-1c0gi', (s) => s.idle === 2, 'warm pool refilled', 60000);
            const t = performance.now();
            const s = await Sandbox.create('warm');
            creates.push(performance.now() - t);
            await s.kill();
        }
        // command round trip against envd's /health through the same data plane
        const sbx = await Sandbox.create('warm', { timeoutMs: 120000 });
        const rt = [];
        const health = [];
        await sbx.commands.run('true');
        for (let i = 0; i < N * 5; i++) {
            let t = performance.now();
            const r = await fetch(`${alpha.data}/health`, {
                headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983' },
            });
            await r.arrayBuffer();
            health.push(performance.now() - t);
            t = performance.now();
            await sbx.commands.run('true');
            rt.push(performance.now() - t);
        }
        await sbx.kill();
        const start = cold.map((c, i) => c - warm[i]);
        return {
            start50: quantile(start, 0.5), start99: quantile(start, 0.99),
            cold50: quantile(cold, 0.5), warm50: quantile(warm, 0.5),
            rt50: quantile(rt, 0.5), rt99: quantile(rt, 0.99), health50: quantile(health, 0.5),
            create50: quantile(creates, 0.5), create99: quantile(creates, 0.99),
        };
    } finally {
        await stack.stop();
    }
}

const current = process.env.AGENTBOX_BUILD_DIR || 'build';
const baselineDir = process.env.AGENTBOX_BASELINE_BUILD_DIR;
console.log(`cpus ${os.cpus().length}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}, N=${N}`);
const after = await measure(current);
const before = baselineDir ? await measure(baselineDir) : null;
const rows = [
    ['idle start (cold − warm claim) p50 ms', 'start50', 'target ≤ 50'],
    ['idle start p99 ms', 'start99', ''],
    ['cold claim p50 ms', 'cold50', ''],
    ['warm claim p50 ms', 'warm50', ''],
    ["commands.run('true') p50 ms", 'rt50', 'target ≤ 1.2× before'],
    ["commands.run('true') p99 ms", 'rt99', ''],
    ['envd /health via data plane p50 ms', 'health50', 'baseline'],
    ['warm Sandbox.create p50 ms', 'create50', 'must not regress'],
    ['warm Sandbox.create p99 ms', 'create99', ''],
];
console.log(['figure'.padEnd(40), 'isolated'.padStart(10), 'before'.padStart(10), 'ratio'.padStart(8), '  note'].join(''));
for (const [label, k, note] of rows) {
    const b = before ? before[k] : NaN;
    console.log([label.padEnd(40), fmt(after[k]).padStart(10), fmt(b).padStart(10),
        (before ? fmt(after[k] / b) : '-').padStart(8), `  ${note}`].join(''));
}
console.log(`command round trip over /health (same run): ${fmt(after.rt50 / after.health50)}×`);
console.log(`load after ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}`);
