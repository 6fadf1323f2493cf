// Federation end to end (DESIGN §6): three agents on the local runtime report
// their env members to the hub over the tunnel; the hub lists them
// (GET /api/v1/federation, tenants scoped to their namespace), snapshots them
// to PostgreSQL, drops a cluster's records the moment its session ends, and
// answers the route decision for a bare env on an exhausted cluster with a
// cluster that has idle. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor, createKey, psqlAt } from './lib/harness.mjs';
import { startStack, manifestsDir, native, waitPool, envdBin } from './lib/sandboxes.mjs';

// Env `demo` in namespace default: alpha has no warm sandbox (exhausted),
// beta one, gamma two. Env `other` in namespace team-x, on beta only.
const DEMO = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: demo, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
${[['alpha', 0], ['beta', 1], ['gamma', 2]].map(([c, n]) => `  - clusterID: ${c}
    members:
    - name: demo-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: ${n}, defaultStartupTimeout: 60s}
`).join('')}`;
const OTHER = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: other, namespace: team-x}
spec:
  templateRef: {name: envd}
  clusters:
  - clusterID: beta
    members:
    - name: other-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: 0}
`;

let stack;
let admin;

const api = async (p, key) => {
    const res = await fetch(stack.hub.base + p, { headers: { Authorization: `Bearer ${key}` } });
    return { status: res.status, json: await res.json().catch(() => undefined) };
};
const records = async (key = admin, q = '') => {
    const r = await api(`/api/v1/federation${q}`, key);
    assert.equal(r.status, 200, JSON.stringify(r.json));
    return r.json.records;
};
const rec = (list, cluster, env = 'demo') => list.find((x) => x.cluster === cluster && x.env === env);

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(envdBin()), 'build agentbox-envd first');
    stack = await startStack({ clusters: ['alpha', 'beta', 'gamma'], manifests: manifestsDir([DEMO, OTHER]) });
    admin = (await createKey(stack.pg.url, 'ops', 'root', ['--admin'])).token;
});

after(async () => {
    if (stack) await stack.stop();
});

test('records of every cluster reach the hub within 6 s', async () => {
    const list = await waitFor(async () => {
        const l = await records();
        return ['alpha', 'beta', 'gamma'].every((c) => rec(l, c)) && rec(l, 'beta', 'other') ? l : null;
    }, { timeoutMs: 6000, what: 'demo records of alpha, beta, gamma on the hub' });
    const a = rec(list, 'alpha');
    assert.equal(a.namespace, 'default');
    assert.equal(a.pool, 'demo-1c0gi');
    assert.equal(a.idle, 0);
    assert.equal(a.autoscaling, false);
    assert.ok(a.ageMs >= 0 && a.ageMs <= 30000, `age ${a.ageMs}`);
    // the warm pools fill, and the hub follows their idle counts
    await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle === 1, 'beta warm');
    await waitPool(stack.agents.gamma, 'demo-1c0gi', (s) => s.idle === 2, 'gamma warm');
    await waitFor(async () => {
        const l = await records();
        return rec(l, 'beta')?.idle === 1 && rec(l, 'gamma')?.idle === 2;
    }, { timeoutMs: 6000, what: 'hub sees beta idle 1, gamma idle 2' });
});

test('a tenant sees its own namespace only; an admin sees all', async () => {
    const mine = await records(stack.key);
    assert.ok(mine.length >= 3);
    assert.ok(mine.every((r) => r.namespace === 'default'), JSON.stringify(mine));
    const all = await records(admin);
    assert.ok(rec(all, 'beta', 'other'));
    const refused = await api('/api/v1/federation?namespace=team-x', stack.key);
    assert.equal(refused.status, 403);
    assert.match(refused.json.error, /team-x/);
    const onlyGamma = await records(admin, '?cluster=gamma');
    assert.ok(onlyGamma.length >= 1 && onlyGamma.every((r) => r.cluster === 'gamma'));
    const anon = await fetch(`${stack.hub.base}/api/v1/federation`);
    assert.equal(anon.status, 401);
    const one = await api('/api/clusters/gamma/federation', admin);
    assert.equal(one.status, 200);
    const demo = one.json.envs.find((e) => e.env === 'demo');
    assert.equal(demo.idle, 2);
    assert.equal(demo.pools[0].pool, 'demo-1c0gi');
});

test('the hub exports gauges and snapshots to PostgreSQL', async () => {
    const metrics = await (await fetch(`${stack.hub.metrics}/metrics`)).text();
    assert.match(metrics, /agentbox_federation_env_idle\{cluster="gamma",namespace="default",env="demo",member="demo-1c0gi",group="[^"]*"\} 2/);
    const rows = await waitFor(async () => {
        const out = await psqlAt(stack.pg.url,
            "SELECT cluster_id || ':' || idle FROM federation_capacity WHERE env = 'demo' ORDER BY cluster_id");
        return out === 'alpha:0\nbeta:1\ngamma:2' ? out : null;
    }, { timeoutMs: 12000, what: 'federation_capacity snapshot' });
    assert.ok(rows);
});

test('an exhausted cluster is routed to the cluster with the most idle', async () => {
    const r = await native(stack.agents.alpha, stack.key, 'GET', '/v1/federation/route?env=demo');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.step, 2, r.text);
    assert.equal(r.json.action, 'forward');
    assert.equal(r.json.cluster, 'gamma');
    assert.equal(r.json.pool, 'demo-1c0gi');
    assert.equal(r.json.fromHub, true);
    // a cluster with idle of its own decides locally, without the hub
    const g = await native(stack.agents.gamma, stack.key, 'GET', '/v1/federation/route?env=demo');
    assert.equal(g.json.step, 1, g.text);
    assert.equal(g.json.action, 'local');
    assert.equal(g.json.fromHub, false);
    // a scaling group nobody has: no fallback to another group
    const none = await native(stack.agents.alpha, stack.key, 'GET', '/v1/federation/route?env=demo&scalingGroup=nope');
    assert.equal(none.json.step, 5, none.text);
    assert.equal(none.json.action, 'queue');
    assert.equal(none.json.cluster, 'alpha');
    const m = await (await fetch(`${stack.agents.alpha.metrics}/metrics`)).text();
    assert.match(m, /agentbox_route_decisions_total\{step="2"\} [1-9]/);
    const hm = await (await fetch(`${stack.hub.metrics}/metrics`)).text();
    assert.match(hm, /agentbox_route_decisions_total\{step="2"\} [1-9]/);
});

test("killing an agent drops its records within 1 s", async () => {
    assert.ok(rec(await records(), 'beta'));
    await stack.agents.beta.proc.kill();
    const t0 = Date.now();
    await waitFor(async () => {
        const l = await records();
        return !l.some((r) => r.cluster === 'beta');
    }, { timeoutMs: 1000, intervalMs: 20, what: "beta's records gone from the hub" });
    const ms = Date.now() - t0;
    assert.ok(ms <= 1000, `took ${ms} ms`);
    // the others stay, and routing no longer considers beta
    const l = await records();
    assert.ok(rec(l, 'alpha') && rec(l, 'gamma'));
    const r = await native(stack.agents.alpha, stack.key, 'GET', '/v1/federation/route?env=demo');
    assert.equal(r.json.action, 'forward', r.text);
    assert.equal(r.json.cluster, 'gamma');
});
