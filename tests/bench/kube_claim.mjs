// Benchmark: claims on the kube runtime against the in-test API server
// (tests/integration/lib/kubeapi.mjs, a real agentbox-envd per Pod), with a
// zero pull delay: idle Pod → image swapped → envd armed → 201.
//
//   1 client    sequential native claims, the pool back to idle before each
//   32 clients  one burst of 32 concurrent claims against 40 idle Pods
//   requests    API requests the agent sent per claim (claim patch, running
//               label, release patch, idle label, status writes, Events)
//   steady      the reconciler's API request rate with 1,000 idle Pods (no
//               envd behind these: the kubelet only reports them Ready)
//
// DESIGN §12 target: p50 ≤ 20 ms. Needs root (the stack) and a build:
//   sudo AGENTBOX_BUILD_DIR=build node tests/bench/kube_claim.mjs
// Knobs: BENCH_SEQ (30), BENCH_IDLE (1000), BENCH_SECONDS (10).
import { performance } from 'node:perf_hooks';
import { startKubeApi } from '../integration/lib/kubeapi.mjs';
import { tempDir, waitFor } from '../integration/lib/harness.mjs';
import { startStack, envdBin, claim, native } from '../integration/lib/sandboxes.mjs';
import { quantile, fmt } from './util.mjs';

const POOL = 40;
const SEQ = Number(process.env.BENCH_SEQ || 30);
const IDLE = Number(process.env.BENCH_IDLE || 1000);
const SECONDS = Number(process.env.BENCH_SECONDS || 10);
const CR = '/apis/agents.navix.sh/v1alpha1';

const api = await startKubeApi({ kubelet: { envd: envdBin(), pullDelayMs: 0 }, bookmarkMs: 1000 });
const post = (p, body) => fetch(api.url + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    .then(async (r) => { if (r.status !== 201) throw new Error(`POST ${p}: ${r.status} ${await r.text()}`); });
const template = (name, running) => ({
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxTemplate', metadata: { name },
    spec: {
        idleImage: 'bench/idle:1', runtimes: [{ name: 'envd', port: 49983 }],
        template: { spec: { containers: [{ name: 'sandbox', image: running, ports: [{ name: 'envd', containerPort: 49983 }] }] } },
    },
});
const pool = (name, tpl, replicas) => ({
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxPool', metadata: { name, namespace: 'default' },
    spec: { replicas, templateName: tpl, defaultStartupTimeout: '60s' },
});
const poolStatus = async (name) => (await (await fetch(`${api.url}${CR}/namespaces/default/sandboxpools/${name}`)).json()).status ?? {};
// the agent's: not the watches, not this bench's own pool status polls
const agentRequests = () => api.requests.filter((r) => !r.query.watch &&
    !(r.method === 'GET' && /\/sandboxpools\/(bench|idle)$/.test(r.path))).length;

const dir = tempDir('agentbox-bench-kube-');
const kc = api.kubeconfig(dir);
await post(`${CR}/sandboxtemplates`, template('bench', 'bench/run:1'));
await post(`${CR}/namespaces/default/sandboxpools`, pool('bench', 'bench', POOL));
const stack = await startStack({ clusters: ['alpha'], agentArgs: ['--runtime', 'kube', '--kubeconfig', kc, '--namespace', 'default'] });
const alpha = stack.agents.alpha;
try {
    const full = () => waitFor(async () => {
        const s = await poolStatus('bench');
        return s.idleReplicas === POOL && s.unavailableIdleReplicas === 0 && s.runningReplicas === 0 && s.stoppingReplicas === 0;
    }, { timeoutMs: 120000, what: `${POOL} idle Ready Pods` });
    await full();

    const timed = async () => {
        const t = performance.now();
        const sb = await claim(alpha, stack.key, { poolName: 'bench', timeout: 300 });
        return { ms: performance.now() - t, id: sb.sandboxId };
    };
    const one = [];
    let reqs = 0;
    for (let i = 0; i < SEQ; i++) {
        await full();
        const before = agentRequests();
        const { ms, id } = await timed();
        one.push(ms);
        await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${id}`);
        await full();
        reqs += agentRequests() - before;
    }
    const burst = await Promise.all(Array.from({ length: 32 }, () => timed()));
    const b = burst.map((x) => x.ms);
    await Promise.all(burst.map((x) => native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${x.id}`)));
    await full();

    // steady state with IDLE idle Pods: no envd behind them
    api.options.kubelet = { pullDelayMs: 0 };
    await post(`${CR}/sandboxtemplates`, template('idle', 'bench/run:1'));
    await post(`${CR}/namespaces/default/sandboxpools`, pool('idle', 'idle', IDLE));
    const t0 = performance.now();
    await waitFor(async () => {
        const s = await poolStatus('idle');
        return s.idleReplicas === IDLE && s.unavailableIdleReplicas === 0;
    }, { timeoutMs: 600000, intervalMs: 500, what: `${IDLE} idle Pods` });
    const warmS = (performance.now() - t0) / 1000;
    await new Promise((r) => setTimeout(r, 2000)); // the last status writes settle (a benchmark, not a test)
    const r0 = agentRequests();
    await new Promise((r) => setTimeout(r, SECONDS * 1000));
    const steady = (agentRequests() - r0) / SECONDS;

    const p = (xs, q) => fmt(quantile(xs, q));
    console.log('kube claim (in-test API server, zero pull delay, native API claim → armed)');
    console.log(`  1 client   (n=${one.length})      p50 ${p(one, 0.5)} ms  p99 ${p(one, 0.99)} ms`);
    console.log(`  32 clients (n=32, burst)  p50 ${p(b, 0.5)} ms  p99 ${p(b, 0.99)} ms`);
    console.log(`  API requests per claim and release: ${fmt(reqs / SEQ, 1)}`);
    console.log(`  ${IDLE} idle Pods: warm in ${fmt(warmS, 1)} s (client QPS limit 100), ` +
        `steady-state reconciler rate ${fmt(steady, 2)} requests/s over ${SECONDS} s`);
} finally {
    await stack.stop();
    await api.close();
}
