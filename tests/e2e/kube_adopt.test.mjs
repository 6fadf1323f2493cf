// Re-adopting claimed Pods on the kube runtime (agent/runtime/kube/adopt.c):
// a claimed Pod carries its sandbox id, principal, end and the envd token
// sealed under a key derived from the cluster's join token, so a restarted
// agent, or a new leader among replicas, rebuilds the sandbox from the Pod
// alone. Against the in-test API server (tests/integration/lib/kubeapi.mjs)
// whose simulated kubelet runs a real agentbox-envd per Pod, with the real
// e2b SDK: create, SIGKILL the agent, start it again, and the same sandbox id
// still runs commands (the same envd: nothing restarted), keeps its files,
// ends at its timeout, and kill puts the Pod back. Then two replicas: the
// follower holds the leader's sandboxes, and after the leader is SIGKILLed
// the new leader serves and ends them. Then the lease lost while running:
// the API server refuses one agent's Lease requests; it stops reconciling
// and drops its tunnel within the renew deadline, the other takes over.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { waitFor, waitClusterOnline } from '../integration/lib/harness.mjs';
import { startStack } from '../integration/lib/sandboxes.mjs';
import {
    IDLE_IMAGE as IDLE, RUN_IMAGE as RUN, startKubeApiWith, startKubeProxy, kubeAgentArgs, podsOf, live, podReady as ready,
} from '../integration/lib/kubestack.mjs';

const POOL = 'adopt-1c2gi';
const LEASE = 'agentbox-agent';
const LEASE_MS = 3000;
const RENEW_MS = 2000;
const RETRY_MS = 500;
const LEASE_ARGS = ['--lease-duration', `${LEASE_MS}ms`, '--lease-renew-deadline', `${RENEW_MS}ms`, '--lease-retry-period', `${RETRY_MS}ms`];
const SEALED = 'agentbox.scitix.ai/envd-token-sealed';
const END_AT = 'agentbox.scitix.ai/end-at';
const SBX_LABEL = 'agentbox.navix.sh/sandbox-id';
const PHASE = 'agentbox.navix.sh/sandbox-phase';

const SAMPLES = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata:
  name: adopt-envd
spec:
  idleImage: ${IDLE}
  runtimes:
  - name: envd
    port: 49983
    protocol: TCP
  template:
    spec:
      containers:
      - name: sandbox
        image: ${RUN}
        resources:
          requests: {cpu: "1", memory: 2Gi}
          limits: {cpu: "1", memory: 2Gi}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: adopt, namespace: default}
spec:
  templateRef: {name: adopt-envd}
  mode: WarmPool
  clusters:
  - clusterID: alpha
    members:
    - name: ${POOL}
      config:
        scalingGroup: 1c2gi
        inlineResources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
      spec: {replicas: 4, defaultStartupTimeout: 20s}
`;

let api, stack, dir, E2B;
const agents = []; // every agent started here, stopped in after()
const proxies = [];

const listPods = async () => live(await podsOf(api, POOL));
const podOf = async (id) => (await listPods()).filter((p) => p.metadata.labels?.[SBX_LABEL] === id);
const holder = () => api.peek('leases', 'default', LEASE)?.spec?.holderIdentity ?? null;

async function waitWarm(n, what) {
    return waitFor(async () => {
        const ps = await listPods();
        return ps.length >= n && ps.filter((p) => p.metadata.labels?.[PHASE] === 'idle' && ready(p)).length >= n ? ps : null;
    }, { timeoutMs: 30000, what: `${what}: ${n} idle Ready Pods in ${POOL}` });
}

// The SDK reads these on every call: point it at one agent.
function useAgent(a) {
    process.env.E2B_API_URL = a.e2b;
    process.env.E2B_SANDBOX_URL = a.data;
}

// Each agent reaches the API server through a proxy of its own that can
// refuse its Lease requests (p.refuseLease).
async function startProxy(name) {
    const p = await startKubeProxy(api, dir, name);
    proxies.push(p);
    return p;
}

async function launch(name) {
    const p = await startProxy(name);
    const a = await stack.launch('alpha', { args: kubeAgentArgs(p.kc, ...LEASE_ARGS) });
    a.p = p;
    agents.push(a);
    return a;
}

const logs = (a) => `\n${a.proc.name} log:\n${a.proc.logs().split('\n').slice(-30).join('\n')}`;

before(async () => {
    assert.equal(process.getuid(), 0, 'the stack needs root');
    let apply;
    ({ api, dir, apply } = await startKubeApiWith({ prefix: 'agentbox-kube-adopt-' }));
    await apply(SAMPLES, 'samples.yaml');
    stack = await startStack({ clusters: [] });
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    for (const a of agents) await a.proc.stop();
    for (const p of proxies) {
        p.server.closeAllConnections();
        p.server.close();
    }
    if (stack) await stack.stop();
    if (api) await api.close();
});

test('SIGKILL of the agent: the restarted agent re-adopts the claimed Pods; same id, same envd, files kept, the timeout still applies', async () => {
    const { Sandbox } = E2B;
    let a = await launch('agent-1');
    useAgent(a);
    await waitWarm(4, 'first agent');
    const sbx = await Sandbox.create('adopt', { envs: { FOO: 'adopted' }, metadata: { suite: 'adopt' }, timeoutMs: 600000 });
    const short = await Sandbox.create('adopt', { timeoutMs: 20000 });
    const victim = await Sandbox.create('adopt', { timeoutMs: 600000 });
    const f = `/tmp/adopt-${Date.now()}.txt`;
    await sbx.files.write(f, 'kept across the restart');
    const [pod] = await podOf(sbx.sandboxId);
    assert.ok(pod, `a Pod carries ${sbx.sandboxId}${logs(a)}`);
    const uid = pod.metadata.uid;
    const pid = api.envdPids().get(uid);
    // the token is on the Pod only sealed
    const armed = await waitFor(async () => {
        const [p] = await podOf(short.sandboxId);
        return p?.metadata.labels[PHASE] === 'running' && p.metadata.annotations[END_AT] ? p : null;
    }, { what: 'the short sandbox armed, its end on the Pod' });
    const shortEnd = Date.parse(armed.metadata.annotations[END_AT]);
    assert.ok(Math.abs(shortEnd - (Date.now() + 20000)) < 5000, `end-at ${armed.metadata.annotations[END_AT]}`);
    assert.match(pod.metadata.annotations[SEALED] ?? '', /^v1\.[A-Za-z0-9+/]+=*$/);
    assert.ok(sbx.envdAccessToken && sbx.envdAccessToken.length >= 32, 'the SDK got an envd token');
    for (const p of [pod, armed]) {
        const text = JSON.stringify(p);
        assert.ok(!text.includes(sbx.envdAccessToken) && !text.includes(short.envdAccessToken), 'the envd token is not on the Pod in clear');
    }

    await a.proc.kill();
    // while no agent runs: a forged claim (another Pod given sbx's sealed token under a new id) must not be adopted
    const idle = (await listPods()).find((p) => p.metadata.labels?.[PHASE] === 'idle');
    assert.ok(idle, 'a third Pod is idle');
    const forged = `forged${Date.now()}`;
    const patch = {
        metadata: {
            labels: { [PHASE]: 'running', [SBX_LABEL]: forged },
            annotations: { [SBX_LABEL]: forged, [SEALED]: pod.metadata.annotations[SEALED], [END_AT]: new Date(Date.now() + 600000).toISOString(), 'agentbox.scitix.ai/principal': 't/u', 'agentbox.navix.sh/claimed-at': new Date().toISOString() },
        },
    };
    const pr = await fetch(`${api.url}/api/v1/namespaces/default/pods/${idle.metadata.name}`, { method: 'PATCH', headers: { 'Content-Type': 'application/merge-patch+json' }, body: JSON.stringify(patch) });
    assert.equal(pr.status, 200);
    assert.equal((await podOf(sbx.sandboxId)).length, 1, 'the claimed Pod stays claimed while the agent is down');
    // and another sandbox's principal edited to hand it to another team: the seal binds it
    const [vpod] = await podOf(victim.sandboxId);
    const vr = await fetch(`${api.url}/api/v1/namespaces/default/pods/${vpod.metadata.name}`, { method: 'PATCH', headers: { 'Content-Type': 'application/merge-patch+json' },
        body: JSON.stringify({ metadata: { annotations: { 'agentbox.scitix.ai/principal': 'other-team/mallory' } } }) });
    assert.equal(vr.status, 200);

    a = await launch('agent-2');
    useAgent(a);
    const again = await waitFor(async () => {
        try {
            return await Sandbox.connect(sbx.sandboxId);
        } catch {
            return null;
        }
    }, { timeoutMs: 15000, what: `Sandbox.connect(${sbx.sandboxId}) on the restarted agent` });
    const r = await again.commands.run('echo "$FOO"');
    assert.equal(r.exitCode, 0, r.stderr + logs(a));
    assert.equal(r.stdout, 'adopted\n');
    assert.equal(await again.files.read(f), 'kept across the restart');
    const info = await again.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.deepEqual(info.metadata, { suite: 'adopt' });
    const [podAfter] = await podOf(sbx.sandboxId);
    assert.equal(podAfter.metadata.uid, uid, 'the same Pod');
    assert.equal(podAfter.status.containerStatuses[0].restartCount, 1, 'not swapped again');
    assert.equal(api.envdPids().get(uid), pid, 'the same envd process');
    // the forged claim: released (a Pod whose idle image runs is replaced), never served
    await assert.rejects(Sandbox.connect(forged), (e) => /not found|404/i.test(String(e?.message ?? e)), 'the forged id is not a sandbox');
    await waitFor(async () => (await podOf(forged)).length === 0, { timeoutMs: 15000, what: 'the forged claim released' });
    await waitFor(async () => (await podOf(victim.sandboxId)).length === 0, { timeoutMs: 15000, what: 'the sandbox with the edited principal released, not adopted' });
    await assert.rejects(Sandbox.connect(victim.sandboxId), (e) => /not found|404/i.test(String(e?.message ?? e)));

    // the short one was adopted too and still ends at its end-at
    const s2 = await Sandbox.connect(short.sandboxId);
    assert.equal((await s2.commands.run('echo alive')).stdout, 'alive\n');
    await waitFor(async () => (await podOf(short.sandboxId)).length === 0, { timeoutMs: 30000, intervalMs: 100, what: 'the short sandbox ending at its timeout' });
    const endedAt = Date.now();
    assert.ok(endedAt >= shortEnd - 1000, `ended ${shortEnd - endedAt} ms before its end-at`);
    assert.ok(endedAt <= shortEnd + 5000, `ended ${endedAt - shortEnd} ms after its end-at`);

    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    await waitFor(async () => {
        const p = (await listPods()).find((x) => x.metadata.uid === uid);
        return p && p.metadata.labels[PHASE] === 'idle' && !p.metadata.annotations?.[SEALED] && !p.metadata.annotations?.[END_AT];
    }, { what: 'the killed sandbox Pod idle again, the seal and end-at stripped' });
    await a.proc.stop('SIGTERM');
});

test('two replicas: the follower holds the leader sandboxes; after SIGKILL of the leader the new one serves and ends them', async () => {
    const { Sandbox } = E2B;
    const a = await launch('agent-a');
    await waitFor(() => holder(), { what: 'a leader' });
    const leaderA = holder();
    const b = await launch('agent-b');
    assert.equal(holder(), leaderA, 'agent-b follows');
    useAgent(a);
    await waitWarm(4, 'leader a');
    const sbx = await Sandbox.create('adopt', { timeoutMs: 25000 });
    await sbx.files.write('/tmp/who', 'a');
    const [pod] = await podOf(sbx.sandboxId);
    const end = await waitFor(async () => Date.parse((await podOf(sbx.sandboxId))[0]?.metadata.annotations?.[END_AT] ?? '') || null, { what: 'end-at' });
    // the follower has it already (rebuilt from the Pod watch)
    await waitFor(() => b.proc.logs().includes('sandbox adopted from its Pod') && b.proc.logs().includes(sbx.sandboxId), { what: `agent-b adopting ${sbx.sandboxId}${logs(b)}` });

    await a.proc.kill();
    await waitFor(() => holder() && holder() !== leaderA, { timeoutMs: LEASE_MS + 4000, intervalMs: 50, what: 'agent-b taking the Lease' });
    await waitClusterOnline(stack.hub.base, 'alpha', true, 15000);
    useAgent(b);
    const again = await waitFor(async () => {
        try {
            return await Sandbox.connect(sbx.sandboxId);
        } catch {
            return null;
        }
    }, { timeoutMs: 15000, what: 'Sandbox.connect on the new leader' });
    assert.equal(await again.files.read('/tmp/who'), 'a');
    assert.equal((await again.commands.run('echo b')).stdout, 'b\n');
    const claimed = await podOf(sbx.sandboxId);
    assert.equal(claimed.length, 1, 'one Pod carries the sandbox');
    assert.equal(claimed[0].metadata.uid, pod.metadata.uid);
    assert.equal(claimed[0].status.containerStatuses[0].restartCount, pod.status.containerStatuses[0].restartCount, 'the Pod was not claimed again');
    // the new leader ends it at its end
    await waitFor(async () => (await podOf(sbx.sandboxId)).length === 0, { timeoutMs: 40000, intervalMs: 100, what: 'the sandbox ending at its timeout on the new leader' });
    const endedAt = Date.now();
    assert.ok(endedAt >= end - 1000 && endedAt <= end + 5000, `ended ${endedAt - end} ms from its end-at${logs(b)}`);
    await b.proc.stop('SIGTERM');
});

// The agent's log lines so far that contain s.
const count = (a, s) => a.proc.logs().split('\n').filter((l) => l.includes(s)).length;
const writesAfter = (a, t) => a.p.log.filter((r) => r.t > t && r.method !== 'GET' && !r.lease);

test('the lease lost while running: refused renewals, then another holder; the old leader stops reconciling and drops its tunnel within the renew deadline, no Pod is claimed twice', async () => {
    const { Sandbox } = E2B;
    const p = await launch('agent-p');
    await waitFor(() => holder(), { what: 'a leader' });
    const leaderP = holder();
    const q = await launch('agent-q');
    useAgent(p);
    await waitWarm(4, 'leader p');
    await waitFor(() => count(p, 'tunnel up') >= 1, { what: 'agent-p tunnelling' });
    const sbx = await Sandbox.create('adopt', { timeoutMs: 600000 });
    const [pod] = await podOf(sbx.sandboxId);
    await waitFor(() => count(q, 'sandbox adopted from its Pod') >= 1 && q.proc.logs().includes(sbx.sandboxId), { what: `agent-q adopting ${sbx.sandboxId}` });

    // 1. the API server refuses agent-p's Lease requests (its renewals fail)
    p.p.refuseLease = true;
    const lastRenew = Math.max(...p.p.log.filter((r) => r.lease && r.method === 'PUT').map((r) => r.t));
    const stepped = await waitFor(() => (count(p, 'kube reconciler following') >= 1 && count(p, 'following: tunnel to the hub stopped') >= 1 ? Date.now() : null),
        { timeoutMs: RENEW_MS + 5000, intervalMs: 20, what: `agent-p stepping down${logs(p)}` });
    assert.ok(stepped - lastRenew <= RENEW_MS + RETRY_MS * 1.2 + 1000, `stepped down ${stepped - lastRenew} ms after its last renewal (renew deadline ${RENEW_MS} ms)`);
    const tunnelsP = count(p, 'tunnel up');
    await waitFor(() => holder() && holder() !== leaderP, { timeoutMs: LEASE_MS + 4000, intervalMs: 50, what: 'agent-q taking the Lease' });
    const leaderQ = holder();
    await waitFor(() => count(q, 'tunnel up') >= 1, { what: 'agent-q tunnelling' });
    await waitClusterOnline(stack.hub.base, 'alpha', true, 15000);
    // the new leader reconciles; the old one writes nothing
    const idle = (await listPods()).find((x) => x.metadata.labels?.[PHASE] === 'idle');
    const del = await fetch(`${api.url}/api/v1/namespaces/default/pods/${idle.metadata.name}`, { method: 'DELETE' });
    assert.ok(del.status === 200 || del.status === 202);
    await waitFor(async () => (await listPods()).filter((x) => x.metadata.labels?.[PHASE] === 'idle' && ready(x) && x.metadata.uid !== idle.metadata.uid).length >= 3,
        { timeoutMs: 30000, what: 'agent-q replacing the deleted Pod' });
    assert.ok(q.p.log.some((r) => r.t > stepped && r.method === 'POST' && r.path === '/api/v1/namespaces/default/pods'), 'agent-q created the replacement');
    assert.deepEqual(writesAfter(p, stepped), [], 'agent-p wrote after losing the Lease');
    assert.equal(count(p, 'tunnel up'), tunnelsP, 'agent-p tunnelled again while following');
    // the sandbox: served by the new leader, on the same Pod, claimed once
    useAgent(q);
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await again.commands.run('echo q')).stdout, 'q\n');
    const other = await Sandbox.create('adopt', { timeoutMs: 600000 });
    const ids = (await listPods()).map((x) => x.metadata.labels?.[SBX_LABEL]).filter(Boolean);
    assert.deepEqual(ids.filter((i) => i === sbx.sandboxId), [sbx.sandboxId], 'one Pod carries the first sandbox');
    assert.deepEqual(ids.filter((i) => i === other.sandboxId), [other.sandboxId], 'one Pod carries the second');
    const [podNow] = await podOf(sbx.sandboxId);
    assert.equal(podNow.metadata.uid, pod.metadata.uid);
    assert.equal(podNow.status.containerStatuses[0].restartCount, pod.status.containerStatuses[0].restartCount, 'the first Pod was not claimed again');

    // 2. agent-p may reach the API server again (it follows); then another holder takes the Lease from agent-q
    p.p.refuseLease = false;
    const lease = api.peek('leases', 'default', LEASE);
    const now = new Date().toISOString().replace(/Z$/, '').padEnd(23, '0').slice(0, 23) + '000Z';
    lease.spec = { ...lease.spec, holderIdentity: 'intruder', leaseDurationSeconds: LEASE_MS / 1000, renewTime: now, acquireTime: now };
    const pr = await fetch(`${api.url}/apis/coordination.k8s.io/v1/namespaces/default/leases/${LEASE}`, { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(lease) });
    assert.equal(pr.status, 200, await pr.text());
    const taken = Date.now();
    const qStopped = await waitFor(() => (count(q, 'kube reconciler following') >= 1 && count(q, 'following: tunnel to the hub stopped') >= 1 ? Date.now() : null),
        { timeoutMs: RENEW_MS + 5000, intervalMs: 20, what: `agent-q stepping down for the intruder${logs(q)}` });
    assert.ok(qStopped - taken <= RENEW_MS + RETRY_MS * 1.2 + 1000, `agent-q stepped down ${qStopped - taken} ms after the Lease was taken`);
    // the intruder never renews: one of the agents takes it back once it has gone unrenewed for its duration
    await waitFor(() => holder() && holder() !== 'intruder', { timeoutMs: LEASE_MS + 5000, intervalMs: 50, what: 'an agent taking the Lease back' });
    assert.ok(Date.now() - taken >= LEASE_MS - 200, 'the intruder record was respected for its duration');
    assert.ok([leaderP, leaderQ].includes(holder()));
    await waitClusterOnline(stack.hub.base, 'alpha', true, 15000);
    const lead = holder() === leaderP ? p : q;
    useAgent(lead);
    const third = await waitFor(async () => {
        try {
            return await Sandbox.connect(sbx.sandboxId);
        } catch {
            return null;
        }
    }, { timeoutMs: 15000, what: 'the sandbox served by the leader' });
    assert.equal((await third.commands.run('echo back')).stdout, 'back\n');
    const [podEnd] = await podOf(sbx.sandboxId);
    assert.equal(podEnd.metadata.uid, pod.metadata.uid, 'still the same Pod');
    assert.equal(podEnd.status.containerStatuses[0].restartCount, pod.status.containerStatuses[0].restartCount, 'never claimed twice');
    await Sandbox.kill(sbx.sandboxId);
    await Sandbox.kill(other.sandboxId);
    await p.proc.stop('SIGTERM');
    await q.proc.stop('SIGTERM');
});
