// The kube runtime end to end: an agent with --runtime kube against the
// in-test API server (tests/integration/lib/kubeapi.mjs), whose simulated
// kubelet runs a real agentbox-envd per Pod on the Pod's own loopback
// address. The real kubectl applies the seed's sample manifests and watches
// the pools while the agent reconciles; the real e2b SDK creates, runs
// commands, moves files and kills. Faults: a Pod deleted during a claim, 409
// storms, a failed image pull, the API server restarting mid-watch, a 410
// relist, a roll on an identity change. No real cluster is involved: this is
// what the kube runtime is tested against.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { repoRoot, waitFor } from '../integration/lib/harness.mjs';
import { startStack } from '../integration/lib/sandboxes.mjs';
import {
    KUBECTL, IDLE_IMAGE as IDLE, RUN_IMAGE as RUN, startKubeApiWith, kubeAgentArgs, podsOf, getPool as poolOf, live,
    podReady as ready, podPhase as phaseOf,
} from '../integration/lib/kubestack.mjs';

// The seed's e2b-basic samples (crds-and-charts.md §2.4, §4.2) for cluster alpha.
const SAMPLES = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata:
  name: e2b-envd
spec:
  version: 0.0.1
  idleImage: ${IDLE}
  runtimes:
  - name: envd
    port: 49983
    protocol: TCP
    readinessProbe: {httpGet: {port: 49983, path: /health}}
  template:
    spec:
      automountServiceAccountToken: false
      enableServiceLinks: false
      containers:
      - name: sandbox
        image: ${RUN}
        ports: [{name: envd, containerPort: 49983}, {name: app, containerPort: 49999}]
        resources:
          requests: {cpu: "1", memory: 2Gi}
          limits: {cpu: "1", memory: 2Gi}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: e2b, namespace: default}
spec:
  templateRef: {name: e2b-envd}
  mode: WarmPool
  autoscaling:
    groups: [{name: 1c2gi, enabled: true, minReplicas: 0, maxReplicas: 4}]
  clusters:
  - clusterID: alpha
    members:
    - name: e2b-1c2gi
      config:
        scalingGroup: 1c2gi
        inlineResources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
      spec: {replicas: 2, defaultStartupTimeout: 20s}
`;

let api, stack, alpha, dir, kc, kubectl, watcher, watchOut = '', E2B;

const listPods = (pool) => podsOf(api, pool);
const getPool = (name) => poolOf(api, name);
const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

async function waitWarm(pool, n, what, timeoutMs = 30000) {
    try {
        return await waitFor(async () => {
            const ps = live(await listPods(pool));
            const idle = ps.filter((p) => phaseOf(p) === 'idle' && ready(p));
            const st = (await getPool(pool))?.status;
            return ps.length === n && idle.length === n && st?.idleReplicas === n && st?.phase === 'Ready' ? { ps, st } : null;
        }, { timeoutMs, what: `${what}: ${n} idle Ready Pods in ${pool}` });
    } catch (e) {
        const ps = await listPods(pool);
        const seen = ps.map((p) => `${p.metadata.name} ${phaseOf(p)} ready=${ready(p)} del=${!!p.metadata.deletionTimestamp} ` +
            `${p.spec.containers[0].image} ${JSON.stringify(p.status?.containerStatuses?.[0]?.state)}`).join('\n');
        e.message += `\npods:\n${seen}\nstatus: ${JSON.stringify((await getPool(pool))?.status)}${logs()}`;
        throw e;
    }
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the stack needs root');
    // kubectl (client-go) sends no bearer token over plain http: no auth here
    let apply;
    ({ api, dir, kc, kubectl, apply } = await startKubeApiWith({ prefix: 'agentbox-kube-e2e-' }));
    // kubectl get -w while the agent reconciles (started before anything exists)
    watcher = spawn(KUBECTL, ['--kubeconfig', kc, 'get', 'sandboxpools', '-w', '-o', 'custom-columns=NAME:.metadata.name,IDLE:.status.idleReplicas'], { env: { ...process.env, HOME: dir } });
    watcher.stdout.on('data', (d) => { watchOut += d; });
    watcher.stderr.on('data', (d) => { watchOut += d; });
    await apply(path.join(repoRoot(), 'scripts', 'quickstart-manifests'));
    await apply(SAMPLES, 'samples.yaml');
    stack = await startStack({ clusters: ['alpha'], agentArgs: kubeAgentArgs(kc, '--registry-rewrite', 'other.example=other-mirror.alpha.example') });
    alpha = stack.agents.alpha;
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    watcher?.kill();
    if (stack) await stack.stop();
    if (api) await api.close();
});

test('Env members become SandboxPools and warm Pods with the status numbers, watched by kubectl get -w', async () => {
    const { ps, st } = await waitWarm('demo-1c0gi', 2, 'quickstart');
    const pool = await getPool('demo-1c0gi');
    assert.equal(pool.metadata.ownerReferences[0].kind, 'SandboxEnv');
    assert.equal(pool.metadata.ownerReferences[0].name, 'demo');
    assert.equal(pool.metadata.labels['agentbox.navix.sh/env'], 'demo');
    // the CRD's default for config.scalingGroup, applied by the API server
    assert.equal(pool.metadata.labels['agentbox.navix.sh/scaling-group'], 'default');
    assert.equal(pool.spec.replicas, 2);
    assert.equal(st.runningReplicas, 0);
    assert.equal(st.unavailableIdleReplicas, 0);
    assert.equal(st.pendingRequests, 0);
    assert.equal(st.updatedReplicas, 2);
    assert.match(st.updateRevision, /^[0-9a-f]{8}$/);
    assert.equal(st.currentRevision, st.updateRevision);
    assert.deepEqual(st.conditions.map((c) => `${c.type}=${c.status}`), ['Available=True', 'Scaling=False', 'Degraded=False']);
    const ips = new Set();
    for (const p of ps) {
        assert.equal(p.metadata.ownerReferences[0].kind, 'SandboxPool');
        assert.equal(p.metadata.ownerReferences[0].uid, pool.metadata.uid);
        assert.deepEqual(p.metadata.finalizers, ['agentbox.navix.sh/sandbox-protection']);
        assert.equal(p.metadata.labels['agentbox.navix.sh/template-hash'], st.updateRevision);
        assert.equal(p.spec.containers[0].image, IDLE);
        assert.deepEqual(p.spec.containers[0].resources.requests, { cpu: '1', memory: '512Mi' });
        ips.add(p.status.podIP);
    }
    assert.equal(ips.size, 2, 'every Pod has its own address');

    const envStatus = await waitFor(async () => {
        const r = await fetch(`${api.url}/apis/agents.navix.sh/v1alpha1/namespaces/default/sandboxenvs/demo`);
        const st = (await r.json()).status;
        return st?.idleReplicas === 2 ? st : null;
    }, { what: 'the Env status written' });
    const seg = envStatus.clusters.find((c) => c.clusterID === 'alpha');
    assert.equal(seg.isLocal, true);
    assert.deepEqual(seg.observedMembers.map((m) => [m.name, m.state, m.idleCount, m.desiredReplicas]), [['demo-1c0gi', 'Active', 2, 2]]);
    assert.equal(envStatus.conditions.find((c) => c.type === 'Ready').status, 'True');
    // the quickstart Env lists cluster beta too: alpha writes only its own segment
    assert.equal(envStatus.clusters.length, 1);

    const e = await waitWarm('e2b-1c2gi', 2, 'samples');
    for (const p of e.ps) assert.equal(p.spec.containers[0].image, IDLE, 'idle Pods run the idle image');
    await waitFor(() => /demo-1c0gi\s+2/.test(watchOut) && /e2b-1c2gi\s+2/.test(watchOut), { what: `kubectl get -w shows the pools warm: ${watchOut}` });
});

test('Sandbox.create swaps an idle Pod to the running image; commands and files work; kill puts it back', async () => {
    const { Sandbox } = E2B;
    const { ps: before } = await waitWarm('e2b-1c2gi', 2, 'before');
    const pidsBefore = new Set(api.envdPids().values());
    const sbx = await Sandbox.create('e2b', { envs: { FOO: 'on-kube' }, metadata: { suite: 'kube' }, timeoutMs: 120000 });
    const claimed = live(await listPods('e2b-1c2gi')).find((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
    assert.ok(claimed, `a Pod carries the sandbox id ${sbx.sandboxId}${logs()}`);
    assert.ok(before.some((p) => p.metadata.uid === claimed.metadata.uid), 'an existing warm Pod was claimed, not a new one');
    assert.equal(claimed.spec.containers[0].image, RUN);
    assert.equal(claimed.status.containerStatuses[0].image, RUN);
    assert.equal(claimed.status.containerStatuses[0].restartCount, 1, 'restarted in place');
    assert.equal(claimed.metadata.annotations['agentbox.navix.sh/sandbox-id'], sbx.sandboxId);
    assert.equal(claimed.metadata.annotations['agentbox.scitix.ai/principal'], 't/u');
    assert.ok(!pidsBefore.has(api.envdPids().get(claimed.metadata.uid)), 'a fresh envd after the swap');

    const r = await sbx.commands.run('echo "$FOO"');
    assert.equal(r.exitCode, 0, r.stderr + logs());
    assert.equal(r.stdout, 'on-kube\n');
    const f = `/tmp/kube-e2e-${Date.now()}.txt`;
    await sbx.files.write(f, 'hello pod');
    assert.equal(await sbx.files.read(f), 'hello pod');
    const info = await sbx.getInfo();
    assert.equal(info.templateId, 'e2b-1c2gi');
    assert.deepEqual(info.metadata, { suite: 'kube' });
    await waitFor(async () => phaseOf(live(await listPods('e2b-1c2gi')).find((p) => p.metadata.uid === claimed.metadata.uid)) === 'running', { what: 'the Pod labelled running' });
    await waitFor(async () => (await getPool('e2b-1c2gi')).status.runningReplicas === 1, { what: 'runningReplicas 1' });

    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    const back = await waitFor(async () => {
        const p = live(await listPods('e2b-1c2gi')).find((x) => x.metadata.uid === claimed.metadata.uid);
        return p && phaseOf(p) === 'idle' && ready(p) && p.status.containerStatuses[0].image === IDLE ? p : null;
    }, { what: 'the released Pod idle on the idle image again' });
    assert.equal(back.spec.containers[0].image, IDLE);
    assert.equal(back.metadata.labels['agentbox.navix.sh/sandbox-id'], undefined);
    assert.equal(back.metadata.annotations?.['agentbox.navix.sh/sandbox-id'], undefined);
    assert.equal(back.metadata.annotations?.['agentbox.scitix.ai/principal'], undefined);
    await waitWarm('e2b-1c2gi', 2, 'after kill');
});

test('env//image runs the named image; a failed pull is a create error naming the image and the kubelet reason', async () => {
    const { Sandbox } = E2B;
    await waitWarm('e2b-1c2gi', 2, 'before');
    const sbx = await Sandbox.create('e2b//registry.example/team/custom:7', { timeoutMs: 60000 });
    const p = live(await listPods('e2b-1c2gi')).find((x) => x.metadata.labels['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
    assert.equal(p.spec.containers[0].image, 'registry.example/team/custom:7');
    assert.equal((await sbx.commands.run('echo ok')).stdout, 'ok\n');
    await Sandbox.kill(sbx.sandboxId);
    await waitWarm('e2b-1c2gi', 2, 'after the override');

    api.options.kubelet.failImages = ['registry.example/team/missing:1'];
    await assert.rejects(Sandbox.create('e2b//registry.example/team/missing:1'), (e) =>
        /registry\.example\/team\/missing:1/.test(e.message) && /ErrImagePull|ImagePullBackOff/.test(e.message));
    await waitWarm('e2b-1c2gi', 2, 'the Pod of the failed pull back to idle');
});

test('registry rewrite: the template annotation, then --registry-rewrite, name the registry of a claimed Pod image; a malformed rule is refused naming the annotation', async () => {
    const { Sandbox } = E2B;
    const ANN = 'agentbox.navix.sh/registry-rewrite';
    const podOf = async (id) => live(await listPods('e2b-1c2gi')).find((x) => x.metadata.labels['agentbox.navix.sh/sandbox-id'] === id);
    await waitWarm('e2b-1c2gi', 2, 'before');

    // the region's default (--registry-rewrite), no annotation yet
    let a = await Sandbox.create('e2b//other.example/team/tool:3', { timeoutMs: 60000 });
    let p = await podOf(a.sandboxId);
    assert.equal(p.spec.containers[0].image, 'other-mirror.alpha.example/team/tool:3', logs());
    assert.equal(p.status.containerStatuses[0].image, 'other-mirror.alpha.example/team/tool:3');
    assert.equal((await a.commands.run('echo ok')).stdout, 'ok\n');
    await Sandbox.kill(a.sandboxId);
    await waitWarm('e2b-1c2gi', 2, 'after the default rewrite');

    // a malformed annotation: the pool says so in an Event, claims are refused naming it
    let r = await kubectl(['annotate', 'sandboxtemplate', 'e2b-envd', `${ANN}=registry.example`]);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(async () => {
        const ev = await (await fetch(`${api.url}/api/v1/namespaces/default/events`)).json();
        return ev.items.some((e) => e.reason === 'BadRegistryRewrite' && e.involvedObject?.name === 'e2b-1c2gi' && e.message.includes(ANN));
    }, { what: 'a BadRegistryRewrite Event on e2b-1c2gi' });
    await assert.rejects(Sandbox.create('e2b', { timeoutMs: 60000 }), (e) =>
        e.message.includes(ANN) && /rule 1 'registry\.example' must be FROM=TO/.test(e.message));

    // fixed: the annotation's rules come before the flag's
    r = await kubectl(['annotate', '--overwrite', 'sandboxtemplate', 'e2b-envd', `${ANN}=registry.example=mirror.alpha.example/cache, other.example=tpl-mirror.example`]);
    assert.equal(r.code, 0, r.stderr);
    a = await waitFor(async () => {
        try {
            return await Sandbox.create('e2b//registry.example/team/custom:7', { timeoutMs: 60000 });
        } catch (e) {
            if (e.message.includes(ANN)) return null; // the old annotation, not yet replaced
            throw e;
        }
    }, { timeoutMs: 20000, what: 'a claim once the annotation is fixed' });
    p = await podOf(a.sandboxId);
    assert.equal(p.spec.containers[0].image, 'mirror.alpha.example/cache/team/custom:7', logs());
    assert.equal(p.status.containerStatuses[0].image, 'mirror.alpha.example/cache/team/custom:7');
    const b = await Sandbox.create('e2b//other.example/team/tool:3', { timeoutMs: 60000 });
    assert.equal((await podOf(b.sandboxId)).spec.containers[0].image, 'tpl-mirror.example/team/tool:3');
    await Sandbox.kill(a.sandboxId);
    await Sandbox.kill(b.sandboxId);
    r = await kubectl(['annotate', 'sandboxtemplate', 'e2b-envd', `${ANN}-`]);
    assert.equal(r.code, 0, r.stderr);
    await waitWarm('e2b-1c2gi', 2, 'after the annotation rewrite');
});

test('a Pod deleted during a claim: the claim takes another, the Pod is replaced', async () => {
    const { Sandbox } = E2B;
    await waitWarm('e2b-1c2gi', 2, 'before');
    api.options.kubelet.pullDelayMs = 1500;
    try {
        const creating = Sandbox.create('e2b', { timeoutMs: 60000 });
        const victim = await waitFor(async () => live(await listPods('e2b-1c2gi')).find((p) => phaseOf(p) === 'starting'), { what: 'a Pod being claimed' });
        const d = await kubectl(['delete', 'pod', victim.metadata.name, '--wait=false']);
        assert.equal(d.code, 0, d.stderr);
        const sbx = await creating;
        const mine = live(await listPods('e2b-1c2gi')).find((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
        assert.ok(mine && mine.metadata.uid !== victim.metadata.uid, 'claimed on another Pod');
        assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n');
        await Sandbox.kill(sbx.sandboxId);
    } finally {
        api.options.kubelet.pullDelayMs = 0;
    }
    await waitFor(async () => !(await listPods('e2b-1c2gi')).some((p) => p.metadata.deletionTimestamp), { what: 'the deleted Pod gone (finalizer removed)' });
    await waitWarm('e2b-1c2gi', 2, 'replaced');
});

test('409 storms on the claim patch: the claim still lands, never two claims on one Pod', async () => {
    const { Sandbox } = E2B;
    await waitWarm('e2b-1c2gi', 2, 'before');
    api.inject({ method: 'PATCH', path: /\/pods\/e2b-1c2gi-/, status: 409, reason: 'Conflict', message: 'injected conflict', times: 6 });
    const [a, b] = await Promise.all([Sandbox.create('e2b', { timeoutMs: 60000 }), Sandbox.create('e2b', { timeoutMs: 60000 })]);
    const ps = live(await listPods('e2b-1c2gi'));
    const ids = ps.map((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id']).filter(Boolean);
    assert.deepEqual(ids.sort(), [a.sandboxId, b.sandboxId].sort(), 'one Pod per sandbox');
    assert.equal((await a.commands.run('echo a')).stdout, 'a\n');
    assert.equal((await b.commands.run('echo b')).stdout, 'b\n');
    api.clearInjections();
    await Sandbox.kill(a.sandboxId);
    await Sandbox.kill(b.sandboxId);
    await waitWarm('e2b-1c2gi', 2, 'after the storm');
    // the status writes went through conflicts too
    api.inject({ method: 'PUT', path: /sandboxpools\/e2b-1c2gi\/status/, status: 409, reason: 'Conflict', times: 3 });
    const s = await Sandbox.create('e2b', { timeoutMs: 60000 });
    await waitFor(async () => (await getPool('e2b-1c2gi')).status.runningReplicas === 1, { what: 'status written after 409s' });
    await Sandbox.kill(s.sandboxId);
    api.clearInjections();
    await waitWarm('e2b-1c2gi', 2, 'after');
});

test('API server restart mid-watch and a 410 relist: the agent keeps reconciling', async () => {
    await waitWarm('demo-1c0gi', 2, 'before');
    await api.restart({ downMs: 500 });
    let r = await kubectl(['delete', 'pod', (await listPods('demo-1c0gi'))[0].metadata.name, '--wait=false']);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(async () => live(await listPods('demo-1c0gi')).length === 2 && (await listPods('demo-1c0gi')).length === 2, { what: 'the deleted Pod replaced after the restart' });
    await waitWarm('demo-1c0gi', 2, 'after the restart');

    api.compact();
    api.dropWatches();
    r = await kubectl(['patch', 'sandboxenv', 'demo', '--type', 'json', '-p', JSON.stringify([{ op: 'replace', path: '/spec/clusters/0/members/0/spec/replicas', value: 3 }])]);
    assert.equal(r.code, 0, r.stderr);
    await waitWarm('demo-1c0gi', 3, 'scaled through the Env after a relist');
    r = await kubectl(['patch', 'sandboxenv', 'demo', '--type', 'json', '-p', JSON.stringify([{ op: 'replace', path: '/spec/clusters/0/members/0/spec/replicas', value: 2 }])]);
    assert.equal(r.code, 0, r.stderr);
    await waitWarm('demo-1c0gi', 2, 'scaled down');
});

test('a Pod that dies is replaced; a claimed one takes its sandbox with it', async () => {
    const { Sandbox, SandboxNotFoundError } = E2B;
    const { ps } = await waitWarm('e2b-1c2gi', 2, 'before');
    const sbx = await Sandbox.create('e2b', { timeoutMs: 60000 });
    const claimed = live(await listPods('e2b-1c2gi')).find((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
    const idle = ps.find((p) => p.metadata.uid !== claimed.metadata.uid);
    const die = async (pod) => {
        const cur = await (await fetch(`${api.url}/api/v1/namespaces/default/pods/${pod.metadata.name}`)).json();
        cur.status.phase = 'Failed';
        cur.status.containerStatuses[0].state = { terminated: { exitCode: 137, reason: 'OOMKilled' } };
        cur.status.containerStatuses[0].ready = false;
        const r = await fetch(`${api.url}/api/v1/namespaces/default/pods/${pod.metadata.name}/status`, {
            method: 'PUT', headers: { 'content-type': 'application/json' }, body: JSON.stringify(cur),
        });
        assert.equal(r.status, 200, await r.text());
    };
    await die(idle);
    await die(claimed);
    await waitFor(async () => Sandbox.getInfo(sbx.sandboxId).then(() => false, (e) => e instanceof SandboxNotFoundError), { what: 'the sandbox gone with its Pod' });
    const { ps: after } = await waitWarm('e2b-1c2gi', 2, 'both replaced');
    assert.ok(after.every((p) => p.metadata.uid !== idle.metadata.uid && p.metadata.uid !== claimed.metadata.uid));
    const ev = await (await fetch(`${api.url}/api/v1/namespaces/default/events`)).json();
    assert.ok(ev.items.some((e) => e.reason === 'PodReplaced' && e.involvedObject.name === 'e2b-1c2gi'), 'an Event tells operators');
});

test('a new idle image rolls the idle Pods; a new running image does not', async () => {
    const { ps: before, st } = await waitWarm('e2b-1c2gi', 2, 'before');
    let r = await kubectl(['patch', 'sandboxtemplate', 'e2b-envd', '--type', 'json', '-p', JSON.stringify([{ op: 'replace', path: '/spec/template/spec/containers/0/image', value: 'ghcr.io/scitix/agent-sandbox-envd:0.9.1' }])]);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(async () => (await getPool('e2b-1c2gi')).spec.template.spec.containers[0].image === 'ghcr.io/scitix/agent-sandbox-envd:0.9.1', { what: 'the member pool re-rendered' });
    const same = await waitWarm('e2b-1c2gi', 2, 'no roll');
    assert.equal(same.st.updateRevision, st.updateRevision, 'the running image is not identity');
    assert.deepEqual(same.ps.map((p) => p.metadata.uid).sort(), before.map((p) => p.metadata.uid).sort());

    r = await kubectl(['patch', 'sandboxtemplate', 'e2b-envd', '--type', 'merge', '-p', JSON.stringify({ spec: { idleImage: 'ghcr.io/scitix/agent-sandbox-idle:0.0.11' } })]);
    assert.equal(r.code, 0, r.stderr);
    const rolled = await waitFor(async () => {
        const w = await waitWarm('e2b-1c2gi', 2, 'rolled', 5000).catch(() => null);
        return w && w.st.updateRevision !== st.updateRevision && w.st.updatedReplicas === 2 &&
            w.ps.every((p) => p.spec.containers[0].image === 'ghcr.io/scitix/agent-sandbox-idle:0.0.11') ? w : null;
    }, { timeoutMs: 30000, what: 'the idle Pods replaced on the new revision' });
    assert.ok(rolled.ps.every((p) => !before.some((b) => b.metadata.uid === p.metadata.uid)));
    const ev = await (await fetch(`${api.url}/api/v1/namespaces/default/events`)).json();
    assert.ok(ev.items.some((e) => e.reason === 'RollingUpdate' && e.involvedObject.name === 'e2b-1c2gi'), 'an Event tells operators about the roll');
});

test('the Env\'s updateStrategy.autoUpdate false holds a roll until it is turned back on', async () => {
    const { ps: before, st } = await waitWarm('e2b-1c2gi', 2, 'before');
    let r = await kubectl(['patch', 'sandboxenv', 'e2b', '--type', 'merge', '-p', JSON.stringify({ spec: { overrides: { updateStrategy: { autoUpdate: false } } } })]);
    assert.equal(r.code, 0, r.stderr);
    r = await kubectl(['patch', 'sandboxtemplate', 'e2b-envd', '--type', 'merge', '-p', JSON.stringify({ spec: { idleImage: 'ghcr.io/scitix/agent-sandbox-idle:0.0.12' } })]);
    assert.equal(r.code, 0, r.stderr);
    // the agent has seen the new identity (a new updateRevision, nothing on it) ...
    const held = await waitFor(async () => {
        const w = await waitWarm('e2b-1c2gi', 2, 'held', 5000).catch(() => null);
        return w && w.st.updateRevision !== st.updateRevision && w.st.updatedReplicas === 0 ? w : null;
    }, { timeoutMs: 30000, what: 'the new revision seen, no Pod on it' });
    // ... and replaced nothing
    assert.deepEqual(held.ps.map((p) => p.metadata.uid).sort(), before.map((p) => p.metadata.uid).sort());
    r = await kubectl(['patch', 'sandboxenv', 'e2b', '--type', 'merge', '-p', JSON.stringify({ spec: { overrides: { updateStrategy: { autoUpdate: true, maxUnavailable: 1 } } } })]);
    assert.equal(r.code, 0, r.stderr);
    const rolled = await waitFor(async () => {
        const w = await waitWarm('e2b-1c2gi', 2, 'rolled', 5000).catch(() => null);
        return w && w.st.updatedReplicas === 2 &&
            w.ps.every((p) => p.spec.containers[0].image === 'ghcr.io/scitix/agent-sandbox-idle:0.0.12') ? w : null;
    }, { timeoutMs: 30000, what: 'the idle Pods replaced once autoUpdate is back' });
    assert.ok(rolled.ps.every((p) => !before.some((b) => b.metadata.uid === p.metadata.uid)));
});

test('the data plane reaches another port of the Pod at the Pod IP', async () => {
    const { Sandbox } = E2B;
    await waitWarm('demo-1c0gi', 2, 'before');
    const sbx = await Sandbox.create('demo', { timeoutMs: 60000 });
    const pod = live(await listPods('demo-1c0gi')).find((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
    const ip = pod.status.podIP;
    const port = 41000 + Math.floor(Math.random() * 2000);
    await sbx.files.write(`/tmp/kube-site-${port}/index.html`, 'served from the pod\n');
    // the simulated container shares the host: the server binds the Pod's own address
    const server = await sbx.commands.run(`cd /tmp/kube-site-${port} && exec python3 -m http.server ${port} --bind ${ip}`, { background: true });
    try {
        const got = await waitFor(async () => {
            const r = await fetch(`${alpha.data}/index.html`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(port) } });
            return r.status === 200 ? r.text() : null;
        }, { what: `the Pod's port ${port} through the data plane` });
        assert.equal(got, 'served from the pod\n');
    } finally {
        await server.kill();
        await Sandbox.kill(sbx.sandboxId);
    }
});

test('claimed without a swap (idle image = running image): kill replaces the Pod, the next claims get a fresh envd', async () => {
    const { Sandbox } = E2B;
    await waitWarm('demo-1c0gi', 2, 'before');
    const first = await Sandbox.create('demo', { timeoutMs: 60000 });
    const pod = live(await listPods('demo-1c0gi')).find((p) => p.metadata.labels['agentbox.navix.sh/sandbox-id'] === first.sandboxId);
    assert.equal(pod.status.containerStatuses[0].restartCount, 0, 'no restart: the fast path');
    assert.equal((await first.commands.run('echo one')).stdout, 'one\n');
    const t0 = Date.now();
    assert.equal(await Sandbox.kill(first.sandboxId), true);
    // kill answers once the sandbox's processes are gone: the Pod stopped (or removed)
    const old = (await listPods('demo-1c0gi')).find((p) => p.metadata.uid === pod.metadata.uid);
    assert.ok(!old || ['Succeeded', 'Failed'].includes(old.status?.phase), `the Pod stopped when kill answers (${Date.now() - t0} ms): ${JSON.stringify(old?.status?.phase)}`);
    assert.ok(!api.envdPids().has(pod.metadata.uid), 'its envd is gone');
    await waitWarm('demo-1c0gi', 2, 'replaced');
    const two = await Promise.all([Sandbox.create('demo', { timeoutMs: 60000 }), Sandbox.create('demo', { timeoutMs: 60000 })]);
    for (const s of two) assert.equal((await s.commands.run('echo again')).stdout, 'again\n');
    for (const s of two) await Sandbox.kill(s.sandboxId);
    await waitWarm('demo-1c0gi', 2, 'after');
});

test('deleting the Env deletes its member pool and the Pods of that pool (finalizers released)', async () => {
    await waitWarm('demo-1c0gi', 2, 'before');
    const r = await kubectl(['delete', 'sandboxenv', 'demo', '--wait=false']);
    assert.equal(r.code, 0, r.stderr);
    await waitFor(async () => (await getPool('demo-1c0gi')) === null, { what: 'the member pool deleted' });
    await waitFor(async () => (await listPods('demo-1c0gi')).length === 0, { what: "the pool's Pods gone" });
    await waitWarm('e2b-1c2gi', 2, 'the other Env untouched');
});

test('the agent stops cleanly with a sandbox claimed and a claim waiting (no sanitizer report, exit 0)', async () => {
    const { Sandbox } = E2B;
    await waitWarm('e2b-1c2gi', 2, 'before');
    const sbx = await Sandbox.create('e2b', { timeoutMs: 60000 });
    api.options.kubelet.pullDelayMs = 60000; // the next claim waits on the kubelet
    const waiting = Sandbox.create('e2b', { timeoutMs: 60000 }).catch((e) => e);
    // the second claim is in the runtime (its Pod swapping), not still in auth
    await waitFor(async () => live(await listPods('e2b-1c2gi')).some((p) => phaseOf(p) === 'starting' &&
        p.metadata.labels['agentbox.navix.sh/sandbox-id'] !== sbx.sandboxId), { what: 'a claim swapping' });
    const code = await alpha.proc.stop();
    api.options.kubelet.pullDelayMs = 0;
    const out = alpha.proc.logs();
    const at = out.search(/Sanitizer|runtime error:/);
    assert.ok(at < 0, `sanitizer report at shutdown:${out.slice(Math.max(0, at - 200), at + 8000)}`);
    assert.equal(alpha.proc.exitCode, 0, `exit ${JSON.stringify(code)}`);
    assert.ok((await waiting) instanceof Error, 'the waiting create failed when the agent stopped');
    void sbx;
});
