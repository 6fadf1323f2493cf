// Benchmark: a burst of creates on an empty env with autoscaling (min 0,
// replicas 0) until all are served, per scale-up mode, on the local runtime
// (issue 16). The claims wait; the autoscaler (1 s tick) grows the member
// by its mode's step every cooldown: Conservative +1, Default +ceil(N/2),
// Aggressive to 2N.
//
//   baseline     the same burst against a warm pool of BURST idle sandboxes
//                (no autoscaling): what the claims cost without waiting
//   <mode>       time from the burst to its last 201, the first 201, and the
//                scale-up decisions it took (env events)
//
// The cooldown is BENCH_COOLDOWN seconds (default 1; the reference default
// of 30 s would make Conservative take BURST × 30 s). Prints the load
// average with the figures: the machine is shared. Needs root and a build:
//   sudo AGENTBOX_BUILD_DIR=build-rel node tests/bench/autoscale.mjs
// Knobs: BENCH_BURST (8), BENCH_COOLDOWN (1), BENCH_ROUNDS (1).
import { performance } from 'node:perf_hooks';
import { waitFor } from '../integration/lib/harness.mjs';
import { startStack, manifestsDir, envManifest, waitPool, native } from '../integration/lib/sandboxes.mjs';
import { fmt, printTable, machineNote } from './util.mjs';

const BURST = Number(process.env.BENCH_BURST || 8);
const COOLDOWN = Number(process.env.BENCH_COOLDOWN || 1);
const ROUNDS = Number(process.env.BENCH_ROUNDS || 1);
const MODES = ['Conservative', 'Default', 'Aggressive'];

const envYaml = (name, mode) => `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name}, namespace: default}
spec:
  templateRef: {name: envd}
  autoscaling:
    groups:
    - name: 1c0gi
      enabled: true
      minReplicas: 0
      maxReplicas: ${BURST * 2}
      scaleUpPolicy: {mode: ${mode}, cooldownSeconds: ${COOLDOWN}, idleThresholdSeconds: 0}
      scaleDownPolicy: {idleTimeoutSeconds: 1, stabilizationSeconds: 0, protectionWindowSeconds: 0}
  clusters:
  - clusterID: alpha
    members:
    - name: ${name}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: 0, defaultStartupTimeout: 120s}
`;

const envs = MODES.map((m) => [m, `as-${m.toLowerCase()}`]);
const stack = await startStack({
    clusters: ['alpha'],
    manifests: manifestsDir([envManifest('warm', ['alpha'], { replicas: BURST }), ...envs.map(([m, n]) => envYaml(n, m))]),
});
const alpha = stack.agents.alpha;

// BURST concurrent native creates on env; resolves {total, first} in ms.
async function burst(env) {
    const t0 = performance.now();
    let first = Infinity;
    const ids = await Promise.all(Array.from({ length: BURST }, async () => {
        const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: env, timeout: 600 });
        if (r.status !== 201) throw new Error(`${env}: ${r.status} ${r.text}`);
        first = Math.min(first, performance.now() - t0);
        return r.json.sandbox.sandboxId;
    }));
    const total = performance.now() - t0;
    await Promise.all(ids.map((id) => native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${id}`)));
    return { total, first };
}
const ups = async (env) => (await native(alpha, stack.key, 'GET', `/v1/envs/${env}/events?limit=500`)).json.items
    .filter((e) => e.reason === 'ScaledUp').length;
const empty = (env) => waitFor(async () => {
    const g = await native(alpha, stack.key, 'GET', `/v1/envs/${env}/autoscaling/groups/1c0gi`);
    const s = g.json?.group?.status;
    return s && s.totalDesired === 0 && s.totalIdle === 0 && s.totalRunning === 0 && s.totalStarting === 0;
}, { timeoutMs: 120000, what: `${env} back to 0` });

try {
    const rows = [];
    for (let round = 0; round < ROUNDS; round++) {
        await waitPool(alpha, 'warm-1c0gi', (s) => s.idle === BURST, `${BURST} idle`, 120000);
        const load0 = machineNote();
        const b = await burst('warm');
        rows.push([`baseline (warm ${BURST})`, fmt(b.total, 0), fmt(b.first, 0), '-', load0]);
        for (const [mode, env] of envs) {
            await empty(env);
            const before = await ups(env);
            const load = machineNote();
            const r = await burst(env);
            rows.push([mode, fmt(r.total, 0), fmt(r.first, 0), String((await ups(env)) - before), load]);
        }
    }
    console.log(`autoscale burst: ${BURST} creates on an empty env (min 0), cooldown ${COOLDOWN} s, local runtime`);
    printTable(['mode', 'all served ms', 'first ms', 'scale-ups', 'machine at start'], rows);
    console.log(`after: ${machineNote()}`);
} finally {
    await stack.stop();
}
