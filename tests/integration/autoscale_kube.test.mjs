// The autoscaler on the kube runtime (issue 16, reference §6.6), against the
// in-test API server whose simulated kubelet runs a real envd per Pod: a
// claim that finds nothing idle makes the agent raise the member
// SandboxPool's spec.replicas (the Env reconciler's merge patch, the only
// writer of a member pool's replicas) with a Kubernetes Event on the pool
// naming the reason; idle Pods past the idle timeout lower it again, step by
// step, down to minReplicas 0. (The native env events and groups API on kube
// need the kube half of the manifest seam, rt_objects, which lands apart.)
// Needs root (the stack's agent runs as root).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, native } from './lib/sandboxes.mjs';
import { IDLE_IMAGE as IDLE, RUN_IMAGE as RUN, startKubeApiWith, kubeAgentArgs, getPool as poolOf } from './lib/kubestack.mjs';

const env = (name, replicas, down) => `---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name}, namespace: default}
spec:
  templateRef: {name: as-envd}
  autoscaling:
    groups:
    - name: 1c1gi
      enabled: true
      minReplicas: 0
      maxReplicas: 3
      scaleUpPolicy: {mode: Conservative, cooldownSeconds: 1, idleThresholdSeconds: 0}
      scaleDownPolicy: {idleTimeoutSeconds: ${down}, stabilizationSeconds: 1, protectionWindowSeconds: 0}
  clusters:
  - clusterID: alpha
    members:
    - name: ${name}-1c1gi
      config:
        scalingGroup: 1c1gi
        inlineResources: {requests: {cpu: "1", memory: 1Gi}}
      spec: {replicas: ${replicas}, defaultStartupTimeout: 30s}
`;
const MANIFESTS = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata: {name: as-envd}
spec:
  idleImage: ${IDLE}
  runtimes:
  - {name: envd, port: 49983, readinessProbe: {httpGet: {port: 49983, path: /health}}}
  template:
    spec:
      containers:
      - name: sandbox
        image: ${RUN}
${env('kup', 1, 600)}${env('kdown', 2, 2)}`;

let api;
let stack;
let alpha;
let dir;

const getPool = (name) => poolOf(api, name);
const kubeEvents = async (pool) => {
    const r = await fetch(`${api.url}/api/v1/namespaces/default/events`);
    return (await r.json()).items.filter((e) => e.involvedObject?.kind === 'SandboxPool' && e.involvedObject?.name === pool);
};
// the agent logs at debug (the autoscaler's keeps, the pool's creates and
// deletes with its counts), without the capacity reports and tunnel pings
const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').filter((l) => !/capacity report|tunnel p[io]ng/.test(l)).slice(-60).join('\n')}`;

before(async () => {
    assert.equal(process.getuid(), 0, 'the stack needs root');
    let kc, apply;
    ({ api, dir, kc, apply } = await startKubeApiWith({ prefix: 'agentbox-kube-as-' }));
    await apply(MANIFESTS, 'm.yaml');
    stack = await startStack({ clusters: ['alpha'], agentArgs: kubeAgentArgs(kc, '--log-level', 'debug') });
    alpha = stack.agents.alpha;
});

after(async () => {
    if (stack) await stack.stop();
    if (api) await api.close();
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

test('kube: a claim with nothing idle raises the member pool\'s spec.replicas, with a Kubernetes Event', async () => {
    await waitFor(async () => (await getPool('kup-1c1gi'))?.status?.idleReplicas === 1,
        { timeoutMs: 30000, what: 'kup warm' }).catch((e) => { e.message += logs(); throw e; });
    const held = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: 'kup', timeout: 300 });
    assert.equal(held.status, 201, held.text + logs());
    const second = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: 'kup', timeout: 300 });
    if (second.status !== 201) {
        const r = await fetch(`${api.url}/api/v1/namespaces/default/pods`);
        const pods = (await r.json()).items.map((p) => `${p.metadata.name} ${p.metadata.labels?.['agentbox.navix.sh/sandbox-phase']} ${p.status?.phase}${p.metadata.deletionTimestamp ? ' deleting' : ''}`);
        assert.fail(`${second.status} ${second.text}\nPods: ${pods.join('; ')}\npool status: ${JSON.stringify((await getPool('kup-1c1gi'))?.status)}${logs()}`);
    }
    const pool = await waitFor(async () => {
        const p = await getPool('kup-1c1gi');
        return p?.spec?.replicas >= 2 ? p : null;
    }, { timeoutMs: 20000, what: 'spec.replicas raised' }).catch((e) => { e.message += logs(); throw e; });
    assert.ok(pool.spec.replicas <= 3, 'within the group maxReplicas');
    const ups = await waitFor(async () => {
        const ev = (await kubeEvents('kup-1c1gi')).filter((e) => e.reason === 'ScaledUp');
        return ev.length ? ev : null;
    }, { what: 'a ScaledUp Event on the pool' });
    assert.ok(ups.every((e) => e.type === 'Normal'));
    assert.ok(ups.some((e) => /scale-up: 1 claim\(s\) waiting with 0 idle and 0 starting; Conservative step \+1 \(1 -> 2\)/.test(e.message)),
        ups.map((e) => e.message).join('\n'));
    // the Pod the pool makes for the waiting claim counts as on its way: one step, not two
    assert.equal(ups.length, 1, ups.map((e) => e.message).join('\n'));
    assert.equal((await getPool('kup-1c1gi')).spec.replicas, 2);
    // the reporter's numbers: autoscaling on, headroom to the group's max
    const m = await fetch(`${alpha.metrics}/metrics`).then((r) => r.text());
    assert.match(m, /agentbox_autoscaler_decisions_total\{env="kup",group="1c1gi",direction="up"\} 1/);
});

test('kube: idle Pods past the idle timeout lower spec.replicas step by step', async () => {
    const pool = await waitFor(async () => {
        const p = await getPool('kdown-1c1gi');
        return p && p.spec.replicas === 0 ? p : null;
    }, { timeoutMs: 40000, what: 'kdown scaled to 0' }).catch((e) => { e.message += logs(); throw e; });
    assert.equal(pool.spec.replicas, 0);
    const downs = (await kubeEvents('kdown-1c1gi')).filter((e) => e.reason === 'ScaledDown');
    assert.ok(downs.length >= 1, 'ScaledDown Events');
    const steps = downs.map((e) => e.message.match(/(\d+ -> \d+)\)/)[1]).sort().reverse();
    assert.deepEqual(steps, ['2 -> 1', '1 -> 0']);
    await waitFor(async () => {
        const r = await fetch(`${api.url}/api/v1/namespaces/default/pods?labelSelector=${encodeURIComponent('agentbox.navix.sh/sandbox-pool=kdown-1c1gi')}`);
        return (await r.json()).items.filter((p) => !p.metadata.deletionTimestamp).length === 0;
    }, { timeoutMs: 20000, what: 'kdown Pods gone' });
});

test('kube: the agent stops cleanly after the autoscaler ran', async () => {
    await alpha.proc.stop();
    assertSanitizerClean(alpha.proc);
});
