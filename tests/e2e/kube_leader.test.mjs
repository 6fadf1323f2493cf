// Leader election wired into the agent (--runtime kube): several agents
// against the in-test API server (tests/integration/lib/kubeapi.mjs, whose
// simulated kubelet runs a real agentbox-envd per Pod) share one Lease.
// Each agent reaches the API server through a proxy of its own that logs its
// requests, so the test sees who writes: exactly one agent (the Lease
// holder) creates, deletes and writes status; the follower only lists and
// watches. SIGKILL of the leader → the follower takes the Lease once it has
// gone unrenewed for the lease duration and keeps the pool warm; SIGTERM of
// the leader releases the Lease → the follower leads at once. Only the
// leader dials the hub (each agent gets a stand-in hub that counts dials).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { repoRoot, startAgent, waitFor } from '../integration/lib/harness.mjs';
import { startKubeApiWith, startKubeProxy, kubeAgentArgs, podsOf, live, podReady as ready, podPhase } from '../integration/lib/kubestack.mjs';

const LEASE = 'e2e-agents';
const POOL = 'demo-1c0gi'; // the quickstart Env's member for cluster alpha: 2 replicas
const LEASE_MS = 3000;
const RETRY_MS = 500;
const LEASE_ARGS = ['--lease-duration', `${LEASE_MS}ms`, '--lease-renew-deadline', '2s', '--lease-retry-period', `${RETRY_MS}ms`];

let api, dir;
const proxies = [];
const hubs = [];

// A logging pass-through to the API server per agent.
async function startProxy(name) {
    const p = await startKubeProxy(api, dir, name);
    proxies.push(p);
    return p;
}

// What the reconciler writes (the Lease itself excluded).
const writes = (p) => p.log.filter((r) => r.method !== 'GET' && !r.path.includes('/leases/') && !r.path.endsWith('/leases'));
const podCreates = (p) => p.log.filter((r) => r.method === 'POST' && r.path === '/api/v1/namespaces/default/pods');
const holder = () => api.peek('leases', 'default', LEASE)?.spec?.holderIdentity ?? null;

// A stand-in hub per agent that only counts the tunnel connections made to
// it: the hub keeps one session per cluster, so only the leader may dial.
async function startHubStub() {
    const hub = { conns: 0, sockets: new Set() };
    hub.server = net.createServer((s) => {
        hub.conns++;
        hub.sockets.add(s);
        s.on('error', () => {});
        s.on('close', () => hub.sockets.delete(s));
    });
    await new Promise((resolve) => hub.server.listen(0, '127.0.0.1', resolve));
    hubs.push(hub);
    return hub;
}

async function startContender(name) {
    const p = await startProxy(name);
    const hub = await startHubStub();
    const agent = await startAgent('alpha', {
        hubUrl: `ws://127.0.0.1:${hub.server.address().port}`, token: `abxc_${'0'.repeat(64)}`,
        args: kubeAgentArgs(p.kc, ...LEASE_ARGS),
        env: { POD_NAME: name, AGENTBOX_LEASE_NAME: LEASE },
    });
    return { name, agent, p, hub };
}

const listPods = () => podsOf(api, POOL);
const idle = (p) => podPhase(p) === 'idle';

async function waitWarm(what, { not = new Set(), timeoutMs = 30000 } = {}) {
    return waitFor(async () => {
        const ps = await listPods();
        const l = live(ps);
        return ps.length === 2 && l.length === 2 && l.every((p) => idle(p) && ready(p) && !not.has(p.metadata.uid)) ? l : null;
    }, { timeoutMs, what: `${what}: 2 idle Ready Pods in ${POOL}` });
}

// Both have listed and watch Pods: the follower is up for reads.
const watching = (c) => waitFor(() => c.p.log.some((r) => r.watch && r.path === '/api/v1/namespaces/default/pods'), { what: `${c.name} watching Pods` });

async function deletePod(name) {
    const r = await fetch(`${api.url}/api/v1/namespaces/default/pods/${name}`, { method: 'DELETE' });
    assert.ok(r.status === 200 || r.status === 202, `delete ${name}: ${r.status}`);
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the simulated kubelet needs root');
    let apply;
    ({ api, dir, apply } = await startKubeApiWith({ prefix: 'agentbox-kube-leader-' }));
    await apply(path.join(repoRoot(), 'scripts', 'quickstart-manifests'));
});

after(async () => {
    for (const p of proxies) {
        p.server.closeAllConnections();
        p.server.close();
    }
    for (const h of hubs) {
        for (const s of h.sockets) s.destroy();
        h.server.close();
    }
    if (api) await api.close();
});

test('two agents, one Lease: only the holder reconciles; SIGKILL → takeover within the lease duration; SIGTERM → at once', async () => {
    const a = await startContender('agent-a');
    await waitFor(() => holder()?.startsWith('agent-a_'), { what: 'agent-a to take the Lease' });
    const idA = holder();
    assert.match(idA, /^agent-a_[0-9a-f]{16}$/, 'identity is POD_NAME + _ + random hex');
    const b = await startContender('agent-b');
    await watching(a);
    await watching(b);
    let warm = await waitWarm('the leader warms the pool');

    // a reconcile both agents see: only the leader replaces the Pod
    await deletePod(warm[0].metadata.name);
    warm = await waitWarm('after a Pod is deleted', { not: new Set([warm[0].metadata.uid]) });
    assert.ok(podCreates(a.p).length >= 3, `the leader created the Pods: ${JSON.stringify(writes(a.p))}`);
    assert.deepEqual(writes(b.p), [], 'the follower wrote nothing');
    assert.ok(b.p.log.some((r) => r.method === 'GET' && r.path.endsWith('/leases/' + LEASE)), 'the follower polls the Lease');
    assert.equal(holder(), idA);
    // only the leader tunnels to the hub
    await waitFor(() => a.hub.conns >= 1, { what: 'the leader dialling the hub' });
    assert.equal(b.hub.conns, 0, 'the follower dialled the hub');

    // SIGKILL: no release; the follower waits the lease out, then leads
    await a.agent.proc.kill();
    const killed = Date.now();
    await waitFor(() => holder()?.startsWith('agent-b_'), { timeoutMs: LEASE_MS + 3000, intervalMs: 20, what: 'agent-b to take over' });
    const took = Date.now() - killed;
    assert.ok(took <= LEASE_MS + RETRY_MS * 1.2 + 1000, `took over after ${took} ms`);
    assert.equal(api.peek('leases', 'default', LEASE).spec.leaseTransitions, 1);
    // the new leader keeps the pool at its replicas
    const before = podCreates(b.p).length;
    await deletePod(warm[1].metadata.name);
    warm = await waitWarm('the new leader replaces a deleted Pod', { not: new Set([warm[1].metadata.uid]) });
    assert.ok(podCreates(b.p).length > before, 'agent-b created the replacement');
    await waitFor(() => b.hub.conns >= 1, { what: 'the new leader dialling the hub' });

    // SIGTERM: the leader releases the Lease on its way out
    const c = await startContender('agent-c');
    await watching(c);
    await waitFor(() => c.p.log.filter((r) => r.path.endsWith('/leases/' + LEASE)).length >= 2, { what: 'agent-c polling the Lease' });
    assert.deepEqual(writes(c.p), [], 'agent-c follows');
    assert.equal(c.hub.conns, 0, 'the follower agent-c dialled the hub');
    await b.agent.proc.stop('SIGTERM');
    const stopped = Date.now();
    assert.equal(b.agent.proc.exitCode, 0, b.agent.proc.logs());
    await waitFor(() => holder()?.startsWith('agent-c_'), { timeoutMs: LEASE_MS, intervalMs: 20, what: 'agent-c after the release' });
    const handover = Date.now() - stopped;
    assert.ok(handover < LEASE_MS / 2, `handed over ${handover} ms after the stop: the lease was waited out, not released`);
    const cBefore = podCreates(c.p).length;
    await deletePod(warm[0].metadata.name);
    await waitWarm('agent-c keeps the pool warm', { not: new Set([warm[0].metadata.uid]) });
    assert.ok(podCreates(c.p).length > cBefore, 'agent-c created the replacement');
    await waitFor(() => c.hub.conns >= 1, { what: 'agent-c dialling the hub once leading' });
    await c.agent.proc.stop('SIGTERM');
    assert.equal(c.agent.proc.exitCode, 0, c.agent.proc.logs());
    assert.equal(holder(), '', 'the last leader released the Lease');
});
