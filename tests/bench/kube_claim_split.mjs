// Benchmark: where a kube claim's time goes (tests/bench/kube_claim.mjs's
// 1-client case, split). Sequential native claims against the in-test API
// server with a real agentbox-envd per Pod; every API request the agent
// sends is stamped on arrival, and a Pod watch in this process stamps the
// kubelet's status writes:
//   agent before   claim sent → the agent's CAS image patch arrives
//   kubelet        that patch → status shows the new image running (old envd
//                  stopped, a new one spawned and /health answering)
//   agent after    running → the claim's 201: the watch delivering the
//                  status, POST /init to envd, the reply
// Also per claim and release: the agent's API requests (on the critical path,
// claim → 201, and in all until the Pod is idle again) and the new TCP
// connections it opened to the API server (the client keeps one per thread).
// Needs root and a build: AGENTBOX_BUILD_DIR=build-rel node tests/bench/kube_claim_split.mjs
// Knob: BENCH_SEQ (30).
import { performance } from 'node:perf_hooks';
import { startKubeApi } from '../integration/lib/kubeapi.mjs';
import { tempDir, waitFor } from '../integration/lib/harness.mjs';
import { startStack, envdBin, claim, native } from '../integration/lib/sandboxes.mjs';
import { quantile, fmt } from './util.mjs';

const POOL = 4;
const SEQ = Number(process.env.BENCH_SEQ || 30);
const CR = '/apis/agents.navix.sh/v1alpha1';

const api = await startKubeApi({ kubelet: { envd: envdBin(), pullDelayMs: 0 }, bookmarkMs: 1000 });
// arrival stamps (the server pushes one entry per request)
api.requests.push = function (...xs) {
    for (const x of xs) x.t = performance.now();
    return Array.prototype.push.apply(this, xs);
};
const post = (p, body) => fetch(api.url + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    .then(async (r) => { if (r.status !== 201) throw new Error(`POST ${p}: ${r.status} ${await r.text()}`); });
await post(`${CR}/sandboxtemplates`, {
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxTemplate', metadata: { name: 'bench' },
    spec: {
        idleImage: 'bench/idle:1', runtimes: [{ name: 'envd', port: 49983 }],
        template: { spec: { containers: [{ name: 'sandbox', image: 'bench/run:1', ports: [{ name: 'envd', containerPort: 49983 }] }] } },
    },
});
await post(`${CR}/namespaces/default/sandboxpools`, {
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxPool', metadata: { name: 'bench', namespace: 'default' },
    spec: { replicas: POOL, templateName: 'bench', defaultStartupTimeout: '60s' },
});

// Pod watch: when each Pod's status first showed 'bench/run:1' running
const running = new Map(); // pod name → [t, ...] of transitions to running on the run image
const wasRunning = new Map();
const ac = new AbortController();
(async () => {
    const r = await fetch(`${api.url}/api/v1/namespaces/default/pods?watch=1`, { signal: ac.signal });
    let buf = '';
    for await (const chunk of r.body) {
        const t = performance.now();
        buf += Buffer.from(chunk).toString();
        let i;
        while ((i = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, i);
            buf = buf.slice(i + 1);
            if (!line.trim()) continue;
            const ev = JSON.parse(line);
            const p = ev.object;
            if (!p?.metadata?.name) continue;
            const cs = p.status?.containerStatuses?.[0];
            const on = !!(cs && cs.image === 'bench/run:1' && cs.state?.running);
            if (on && !wasRunning.get(p.metadata.name)) {
                if (!running.has(p.metadata.name)) running.set(p.metadata.name, []);
                running.get(p.metadata.name).push(t);
            }
            wasRunning.set(p.metadata.name, on);
        }
    }
})().catch(() => {});

const dir = tempDir('agentbox-bench-kube-split-');
const kc = api.kubeconfig(dir);
const stack = await startStack({ clusters: ['alpha'], agentArgs: ['--runtime', 'kube', '--kubeconfig', kc, '--namespace', 'default'] });
const alpha = stack.agents.alpha;
const poolStatus = async () => (await (await fetch(`${api.url}${CR}/namespaces/default/sandboxpools/bench`)).json()).status ?? {};
const full = () => waitFor(async () => {
    const s = await poolStatus();
    return s.idleReplicas === POOL && s.unavailableIdleReplicas === 0 && s.runningReplicas === 0 && s.stoppingReplicas === 0;
}, { timeoutMs: 120000, what: `${POOL} idle Ready Pods` });
const podPatches = (from) => api.requests.filter((r) => r.t >= from && r.method === 'PATCH' && /\/pods\/[^/]+$/.test(r.path));
try {
    await full();
    const total = [], before = [], kubelet = [], after = [];
    let critical = 0, all = 0, conns = 0;
    // the agent's: not the watches, not this bench's pool status polls
    const agentReqs = (from, to = Infinity) => api.requests.filter((r) => r.t >= from && r.t <= to && !r.query?.watch &&
        !(r.method === 'GET' && r.path === `${CR}/namespaces/default/sandboxpools/bench`)).length;
    for (let i = 0; i < SEQ; i++) {
        await full();
        const c0 = api.connections;
        const t0 = performance.now();
        const sb = await claim(alpha, stack.key, { poolName: 'bench', timeout: 300 });
        const t1 = performance.now();
        await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
        await full();
        critical += agentReqs(t0, t1);
        all += agentReqs(t0);
        conns += api.connections - c0;
        const patches = podPatches(t0);
        const swap = patches.find((r) => JSON.stringify(r.body).includes('bench/run:1'));
        if (!swap) throw new Error('no image patch seen');
        const pod = swap.path.split('/').pop();
        const tRun = (running.get(pod) ?? []).find((t) => t >= swap.t);
        if (tRun === undefined) throw new Error(`no running status seen for ${pod}`);
        total.push(t1 - t0);
        before.push(swap.t - t0);
        kubelet.push(tRun - swap.t);
        after.push(t1 - tRun);
    }
    await full();
    const p = (xs, q) => fmt(quantile(xs, q));
    const row = (name, xs) => console.log(`  ${name.padEnd(40)} p50 ${p(xs, 0.5).padStart(7)} ms  p99 ${p(xs, 0.99).padStart(7)} ms`);
    console.log(`kube claim split (n=${SEQ}, sequential, zero pull delay, ${process.env.AGENTBOX_BUILD_DIR || 'build'})`);
    row('total (native claim → 201)', total);
    row('agent before: claim → CAS image patch', before);
    row('kubelet: patch → new envd running', kubelet);
    row('agent after: running → 201', after);
    console.log(`  API requests per claim: ${fmt(critical / SEQ, 1)} before the 201, ${fmt(all / SEQ, 1)} until idle again ` +
        `; new TCP connections to the API server per claim ${fmt(conns / SEQ, 2)}`);
} finally {
    ac.abort();
    await stack.stop();
    await api.close();
}
