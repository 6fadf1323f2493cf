// Benchmark: what a hop through the hub costs (DESIGN §6, §12).
//
//   create     `beta::bench` posted to alpha (forwarded through the hub's
//              relay to beta) against the same create posted to beta itself,
//              interleaved in one run, both answered at claim (no-wait); the added
//              p50/p99 is the forward (target: p50 ≤ 1.5 ms); and how many
//              assertion signs and verifications (full or from the cache) the
//              hub and beta did meanwhile (their metrics listeners).
//   data plane commands.run('true') on one beta sandbox with the real SDK,
//              through alpha's data plane (relayed) against beta's own.
//
// Needs root (namespaces) and a build:
//   sudo AGENTBOX_BUILD_DIR=build node tests/bench/federation.mjs   [BENCH_N=30 BENCH_RUNS=100]
import { performance } from 'node:perf_hooks';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { quantile, procCpu } from './util.mjs';
import { metricValue } from '../integration/lib/harness.mjs';

const POOL = 40;
const N = Number(process.env.BENCH_N || 30);
const RUNS = Number(process.env.BENCH_RUNS || 100);
const fmt = (x) => x.toFixed(2);
// answered at claim time: arming (envd /init, tens of ms) is the same on both
// sides and would bury the forward's cost in its noise
const NO_WAIT = { 'agentbox.scitix.ai/no-wait': 'true' };

const stack = await startStack({
    clusters: ['alpha', 'beta'], manifests: manifestsDir([envManifest('bench', ['alpha', 'beta'], { replicas: POOL })]),
});
const { alpha, beta } = stack.agents;
const post = async (base, p, body) => {
    const t = performance.now();
    const res = await fetch(base + p, {
        method: 'POST',
        headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify(body),
    });
    const json = await res.json();
    const ms = performance.now() - t;
    if (res.status !== 201) throw new Error(`create ${JSON.stringify(body)}: ${res.status} ${JSON.stringify(json)}`);
    return { ms, id: json.sandboxID };
};
const del = (base, id) => fetch(`${base}/sandboxes/${id}`, { method: 'DELETE', headers: { 'X-API-Key': stack.key } });

try {
    await waitPool(alpha, 'bench-1c0gi', (s) => s.idle === POOL, `alpha ${POOL} idle`, 180000);
    await waitPool(beta, 'bench-1c0gi', (s) => s.idle === POOL, `beta ${POOL} idle`, 180000);

    // warm-up (connections, key cache on both agents)
    for (const t of ['alpha::bench', 'beta::bench']) {
        const w = await post(alpha.e2b, '/sandboxes', { templateID: t });
        await del(alpha.e2b, w.id);
    }
    // Ed25519 work during the loop (absent on builds before the caches: n/a)
    const SERIES = [
        ['hub sign', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="sign"}'],
        ['hub verify', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="verify"}'],
        ['hub verify (cached)', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="verify_cached"}'],
        ['beta verify', beta.metrics, 'agentbox_agent_assertion_verifies_total{cache="miss"}'],
        ['beta verify (cached)', beta.metrics, 'agentbox_agent_assertion_verifies_total{cache="hit"}'],
    ];
    const ops = async () => Promise.all(SERIES.map(([, base, series]) => metricValue(base, series).catch(() => null)));
    const ops0 = await ops();
    // CPU seconds of hub, alpha and beta over the loop: less at the mercy of a
    // loaded machine than wall-clock latency (10 ms ticks: read it over N)
    const cpus = () => [stack.hub.proc.pid, alpha.proc.pid, beta.proc.pid].map((pid) => procCpu(pid).cpu);
    const cpu0 = cpus();
    const local = [];
    const fwd = [];
    const ids = [];
    for (let i = 0; i < N; i++) {
        const a = await post(beta.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT });
        const b = await post(alpha.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT });
        if (!b.id.startsWith('beta-')) throw new Error(`forwarded create landed on ${b.id}`);
        local.push(a.ms);
        fwd.push(b.ms);
        ids.push(a.id, b.id);
    }
    const cpu1 = cpus();
    const ops1 = await ops();
    await Promise.all(ids.map((id) => del(alpha.e2b, id)));
    const lp50 = quantile(local, 0.5), lp99 = quantile(local, 0.99);
    const fp50 = quantile(fwd, 0.5), fp99 = quantile(fwd, 0.99);
    console.log(`create (n=${N} each, no-wait)   p50 ms   p99 ms`);
    console.log(`  local  beta::bench on beta    ${fmt(lp50).padStart(6)}   ${fmt(lp99).padStart(6)}`);
    console.log(`  fwd    beta::bench via alpha  ${fmt(fp50).padStart(6)}   ${fmt(fp99).padStart(6)}`);
    console.log(`  added by the forward          ${fmt(fp50 - lp50).padStart(6)}   ${fmt(fp99 - lp99).padStart(6)}   (target p50 <= 1.5)`);
    const cpuMs = cpu1.map((c, i) => ((c - cpu0[i]) * 1000) / N);
    console.log(`CPU ms per (local + forwarded) create pair: hub ${fmt(cpuMs[0])}, alpha ${fmt(cpuMs[1])}, beta ${fmt(cpuMs[2])}`);
    // the claim events of both kinds of create are verified on the hub too (off the request's path)
    console.log(`assertion work during the ${N} forwarded + ${N} local creates   total   per forward`);
    SERIES.forEach(([what], i) => {
        const d = ops0[i] === null || ops1[i] === null ? null : (ops1[i] || 0) - (ops0[i] || 0);
        console.log(`  ${what.padEnd(24)} ${d === null ? '   n/a' : String(d).padStart(6)}   ${d === null ? '  n/a' : (d / N).toFixed(2).padStart(6)}`);
    });

    const { Sandbox } = await import('e2b');
    const sbx = await Sandbox.create('beta::bench', { apiUrl: beta.e2b, sandboxUrl: beta.data, apiKey: stack.key });
    const viaBeta = await Sandbox.connect(sbx.sandboxId, { apiUrl: beta.e2b, sandboxUrl: beta.data, apiKey: stack.key });
    const viaAlpha = await Sandbox.connect(sbx.sandboxId, { apiUrl: alpha.e2b, sandboxUrl: alpha.data, apiKey: stack.key });
    const own = [];
    const relayed = [];
    for (let i = 0; i < 5; i++) {
        await viaBeta.commands.run('true');
        await viaAlpha.commands.run('true');
    }
    for (let i = 0; i < RUNS; i++) {
        let t = performance.now();
        await viaBeta.commands.run('true');
        own.push(performance.now() - t);
        t = performance.now();
        await viaAlpha.commands.run('true');
        relayed.push(performance.now() - t);
    }
    await sbx.kill();
    console.log(`commands.run('true') (n=${RUNS})  p50 ms   p99 ms`);
    console.log(`  beta's own data plane         ${fmt(quantile(own, 0.5)).padStart(6)}   ${fmt(quantile(own, 0.99)).padStart(6)}`);
    console.log(`  alpha's (relayed via hub)     ${fmt(quantile(relayed, 0.5)).padStart(6)}   ${fmt(quantile(relayed, 0.99)).padStart(6)}`);
    console.log(`  added by the relay            ${fmt(quantile(relayed, 0.5) - quantile(own, 0.5)).padStart(6)}   ${fmt(quantile(relayed, 0.99) - quantile(own, 0.99)).padStart(6)}`);
} finally {
    await stack.stop();
}
