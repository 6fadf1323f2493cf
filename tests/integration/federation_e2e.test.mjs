// Cross-cluster creates and the hub as the one address (DESIGN §6–§8), over
// HTTP with three agents on the local runtime: a bare create on an exhausted
// cluster lands where the hub saw idle; `gamma::demo` is forwarded verbatim;
// a burst spreads across two clusters (the hub's reservations); GET
// /templates lists other clusters' envs as cluster::env and that id creates;
// id-addressed calls and the data plane work from a cluster that does not own
// the sandbox and from the hub (/e2b, /data); a killed agent stops receiving
// creates at once and its pinned creates answer 503 naming it; a killed hub
// leaves local creates working. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor } from './lib/harness.mjs';
import { startStack, manifestsDir, waitPool, envdBin } from './lib/sandboxes.mjs';

const member = (env, c, n) => `  - clusterID: ${c}
    members:
    - name: ${env}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: ${n}, defaultStartupTimeout: 60s}
`;
const envYaml = (env, members) => `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${env}, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
${members.map(([c, n]) => member(env, c, n)).join('')}`;

// demo: alpha exhausted (0), beta and gamma 10 warm each. solo: alpha only.
const DEMO = envYaml('demo', [['alpha', 0], ['beta', 10], ['gamma', 10]]);
const SOLO = envYaml('solo', [['alpha', 1]]);

let stack;
let alpha;
let gamma;
let hubE2b;
let hubData;

const call = async (base, method, p, body, key = stack.key) => {
    const res = await fetch(base + p, {
        method,
        headers: { 'X-API-Key': key, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try {
        json = JSON.parse(text);
    } catch {
        json = undefined;
    }
    return { status: res.status, json, text, headers: res.headers };
};
const create = (base, templateID, extra = {}) => call(base, 'POST', '/sandboxes', { templateID, timeout: 300, ...extra });
const kill = (base, id) => call(base, 'DELETE', `/sandboxes/${id}`);
const envd = (base, id, p, init = {}) => fetch(base + p, {
    ...init, headers: { 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983', ...(init.headers || {}) },
});
// the hub's view of a cluster's idle for demo, less what it has promised
// away to forwards whose claims no report has counted yet (-1: no record)
const hubIdle = async (cluster) => {
    const r = await fetch(`${stack.hub.base}/api/v1/federation?env=demo`, { headers: { Authorization: `Bearer ${stack.key}` } });
    const j = await r.json();
    const rec = (j.records || []).find((x) => x.cluster === cluster);
    return rec ? rec.idle - rec.reserved : -1;
};
// the agents warm, and the hub caught up with them: a create placed just
// before is claimed, refilled and killed on its cluster well within the
// 100-300 ms a report takes to tell, and until one does the hub rightly
// keeps that idle promised
const warm = async () => {
    await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle === 10, 'beta warm', 60000);
    await waitPool(gamma, 'demo-1c0gi', (s) => s.idle === 10, 'gamma warm', 60000);
    await waitFor(async () => (await hubIdle('beta')) === 10 && (await hubIdle('gamma')) === 10,
        { timeoutMs: 10000, what: 'the hub sees 10 idle, none promised, on beta and gamma' });
};

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(envdBin()), 'build agentbox-envd first');
    stack = await startStack({ clusters: ['alpha', 'beta', 'gamma'], manifests: manifestsDir([DEMO, SOLO]) });
    alpha = stack.agents.alpha;
    gamma = stack.agents.gamma;
    hubE2b = `${stack.hub.base}/e2b`;
    hubData = `${stack.hub.base}/data`;
    await waitPool(alpha, 'solo-1c0gi', (s) => s.idle === 1, 'alpha solo warm', 60000);
    await warm();
});

after(async () => {
    if (stack) await stack.stop();
});

test('a bare create on an exhausted cluster lands where the hub saw idle; cluster:: is verbatim', async () => {
    const r = await create(alpha.e2b, 'demo');
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.sandboxID, /^beta-[a-z0-9]{20}$/, 'equal idle: beta ranks first by id');
    assert.equal(r.json.templateID, 'demo-1c0gi');
    const g = await create(alpha.e2b, 'gamma::demo');
    assert.equal(g.status, 201, g.text);
    assert.match(g.json.sandboxID, /^gamma-[a-z0-9]{20}$/);
    // id-addressed from a cluster that does not own it, and from the hub
    for (const base of [alpha.e2b, gamma.e2b, hubE2b]) {
        const info = await call(base, 'GET', `/sandboxes/${r.json.sandboxID}`);
        assert.equal(info.status, 200, `${base}: ${info.text}`);
        assert.equal(info.json.sandboxID, r.json.sandboxID);
    }
    const t = await call(hubE2b, 'POST', `/sandboxes/${g.json.sandboxID}/timeout`, { timeout: 600 });
    assert.equal(t.status, 204, t.text);
    for (const id of [r.json.sandboxID, g.json.sandboxID]) assert.equal((await kill(hubE2b, id)).status, 204);
    assert.equal((await call(alpha.e2b, 'GET', `/sandboxes/${r.json.sandboxID}`)).status, 404);
});

test('the data plane reaches a sandbox from a cluster that does not own it and from the hub', async () => {
    const r = await create(hubE2b, 'beta::demo', { envVars: { WHERE: 'beta' } });
    assert.equal(r.status, 201, r.text);
    const id = r.json.sandboxID;
    assert.match(id, /^beta-/);
    try {
        const body = 'x'.repeat(300000);
        for (const base of [alpha.data, gamma.data, hubData]) {
            const h = await envd(base, id, '/health');
            assert.ok(h.status === 204 || h.status === 200, `${base} /health: ${h.status}`);
            const up = await envd(base, id, '/files?path=/home/user/f.txt', {
                method: 'POST', body,
                headers: { 'X-Access-Token': r.json.envdAccessToken, 'Content-Type': 'application/octet-stream' },
            });
            assert.equal(up.status, 200, `${base} upload: ${up.status} ${await up.text()}`);
            const down = await envd(base, id, '/files?path=/home/user/f.txt',
                { headers: { 'X-Access-Token': r.json.envdAccessToken } });
            assert.equal(down.status, 200);
            assert.equal(await down.text(), body, `${base}: the file round-trips`);
        }
        // the path form through the hub
        const p = await fetch(`${hubData}/sandboxes/${id}/49983/health`);
        assert.ok(p.status === 204 || p.status === 200, `path form: ${p.status}`);
        const bad = await fetch(`${hubData}/health`);
        assert.equal(bad.status, 400);
        assert.match((await bad.json()).error, /missing sandbox id/);
    } finally {
        await kill(alpha.e2b, id);
    }
});

test('templates list other clusters\' envs as cluster::env, and that id creates there', async () => {
    const r = await call(alpha.e2b, 'GET', '/templates');
    assert.equal(r.status, 200, r.text);
    const ids = r.json.map((t) => t.templateID);
    assert.ok(ids.includes('solo'), ids.join(','));
    assert.ok(ids.includes('beta::demo') && ids.includes('gamma::demo'), ids.join(','));
    assert.ok(!ids.includes('alpha::demo'), 'its own cluster is not listed with a prefix');
    const c = await create(alpha.e2b, 'gamma::demo');
    assert.equal(c.status, 201, c.text);
    assert.match(c.json.sandboxID, /^gamma-/);
    await kill(alpha.e2b, c.json.sandboxID);
    // at the hub: every connected cluster's templates, merged without duplicates
    const h = await call(hubE2b, 'GET', '/templates');
    assert.equal(h.status, 200, h.text);
    const hid = h.json.map((t) => t.templateID);
    assert.ok(hid.includes('demo') && hid.includes('solo'), hid.join(','));
    assert.equal(new Set(hid).size, hid.length, 'no duplicates');
});

test('the hub front door: bare create placed by the hub, merged lists with hub-side paging', async () => {
    const a = await create(hubE2b, 'demo');
    assert.equal(a.status, 201, a.text);
    assert.match(a.json.sandboxID, /^(beta|gamma)-/, 'placed on a cluster with idle');
    const s = await create(hubE2b, 'solo', { metadata: { tag: 'front' } });
    assert.equal(s.status, 201, s.text);
    assert.match(s.json.sandboxID, /^alpha-/, 'parked on the only cluster offering it');
    try {
        const l = await call(hubE2b, 'GET', '/v2/sandboxes?limit=1');
        assert.equal(l.status, 200, l.text);
        assert.equal(l.json.length, 1);
        assert.ok(l.headers.get('x-next-token'), 'more than one page');
        const l2 = await call(hubE2b, 'GET', `/v2/sandboxes?limit=10&nextToken=${l.headers.get('x-next-token')}`);
        const all = [...l.json, ...l2.json].map((x) => x.sandboxID).sort();
        assert.deepEqual(all, [a.json.sandboxID, s.json.sandboxID].sort());
        const v1 = await call(hubE2b, 'GET', '/sandboxes');
        assert.equal(v1.json.length, 2);
        const nf = await create(hubE2b, 'nosuch');
        assert.equal(nf.status, 400, 'an unknown env is 400, as the agent answers it');
        assert.equal((await create(alpha.e2b, 'nosuch')).status, nf.status);
        assert.match(nf.json.message, /GET \/templates/);
        // secrets stay the hub's own
        const sec = await call(hubE2b, 'GET', '/secrets');
        assert.equal(sec.status, 200, sec.text);
    } finally {
        await kill(hubE2b, a.json.sandboxID);
        await kill(hubE2b, s.json.sandboxID);
    }
});

test('a burst of 20 bare creates spreads across beta and gamma', async () => {
    await warm();
    const rs = await Promise.all(Array.from({ length: 20 }, () => create(alpha.e2b, 'demo')));
    const ids = rs.map((r) => {
        assert.equal(r.status, 201, `${r.text}\nalpha's route decisions:\n${alpha.proc.logs().split('\n').filter((l) => /route|hub/.test(l)).slice(-30).join('\n')}`);
        return r.json.sandboxID;
    });
    const on = (c) => ids.filter((id) => id.startsWith(`${c}-`)).length;
    assert.equal(on('beta') + on('gamma'), 20, ids.join(','));
    assert.ok(on('beta') >= 5 && on('gamma') >= 5, `spread: beta ${on('beta')}, gamma ${on('gamma')}`);
    await Promise.all(ids.map((id) => kill(alpha.e2b, id)));
});

test('a killed agent: creates stop going there within a second, pinned ones name it', async () => {
    await warm();
    await stack.agents.beta.proc.kill();
    const t0 = Date.now();
    await waitFor(async () => (await hubIdle('beta')) === -1, { timeoutMs: 1000, what: 'beta gone from the hub' });
    const r = await create(alpha.e2b, 'demo');
    assert.ok(Date.now() - t0 < 5000);
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.sandboxID, /^gamma-/);
    await kill(alpha.e2b, r.json.sandboxID);
    for (const base of [alpha.e2b, hubE2b]) {
        const p = await create(base, 'beta::demo');
        assert.equal(p.status, 503, p.text);
        assert.match(p.text, /beta/);
    }
    const d = await envd(hubData, 'beta-aaaaaaaaaaaaaaaaaaaa', '/health');
    assert.equal(d.status, 503);
    assert.match((await d.json()).error, /cluster 'beta' is not connected/);
});

test('a killed hub: local creates still work', async () => {
    await waitPool(alpha, 'solo-1c0gi', (s) => s.idle === 1, 'alpha solo warm again', 30000);
    await stack.hub.proc.kill();
    const r = await create(alpha.e2b, 'solo');
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.sandboxID, /^alpha-/);
    // the key was validated before: the agent's cache carries the kill
    await kill(alpha.e2b, r.json.sandboxID);
});
