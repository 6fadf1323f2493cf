// A second tenant and a cluster that reaches beyond what it was assigned
// (issue 13, DESIGN §11), with real PostgreSQL, hub, agents and envd:
// cross-user native access is 404, anonymous routes are 401, relay and
// diagnostic routes are admin-only (a relay never hops twice, diagnostics
// are off by default and bounded), a cluster's reports and events outside
// its namespaces are dropped and counted, no tenant is placed on a cluster
// without its namespace, and a ws:// hub URL to a non-loopback host is
// refused. Every test here fails on the code before issue 13.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
    addCluster, startAgent, waitClusterOnline, waitFor, createKey, adminKey, metricValue, run,
    agentBin, hubBin, hubSecret, freePort, startHub, httpGet,
} from './lib/harness.mjs';
import {
    startStack, manifestsDir, envManifest, native, claim, waitPool, envdBin, reapSandboxes,
} from './lib/sandboxes.mjs';
import { requestJson } from './lib/scaffold.mjs';

// demo: alpha and gamma. solo: gamma only. gamma is assigned namespace
// `other`, the envs live in `default`: gamma's capacity must not count.
const MANIFESTS = manifestsDir([
    envManifest('demo', ['alpha', 'gamma'], { replicas: 2 }),
    envManifest('solo', ['gamma'], { replicas: 2 }),
    envManifest('brief', ['alpha'], { replicas: 1, idleTimeout: '2s' }),
]);

let stack;
let alpha;
let gamma;
let victim; // team t, user u (the stack's key)
let other; // team t, user v: same team and namespace, another user
let admin;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(envdBin()), 'build agentbox-envd first');
    stack = await startStack({ clusters: ['alpha'], manifests: MANIFESTS });
    alpha = stack.agents.alpha;
    victim = stack.key;
    other = (await createKey(stack.pg.url, 't', 'v')).token;
    admin = await adminKey(stack.hub.base);
    const token = await addCluster(stack.pg.url, 'gamma', ['--namespaces', 'other']);
    gamma = await startAgent('gamma', {
        hubUrl: stack.hub.tunnelUrl, token,
        args: ['--manifests-dir', MANIFESTS, '--envd-path', envdBin(), '--enable-diag'],
    });
    stack.stateDirs.push(gamma.stateDir);
    await waitClusterOnline(stack.hub.base, 'gamma', true, 15000);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm');
    await waitPool(gamma, 'solo-1c0gi', (s) => s.idle === 2, 'gamma warm');
});

after(async () => {
    if (gamma) await gamma.proc.stop();
    if (stack) await stack.stop();
    if (gamma) reapSandboxes(gamma.stateDir);
});

const call = async (url, { method = 'GET', key, bearer, body } = {}) => {
    const headers = {};
    if (key) headers['X-API-Key'] = key;
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    return requestJson(url, { method, headers, body });
};

test('another user of the same namespace sees and touches none of your sandboxes (404); an admin sees all', async () => {
    const sb = await claim(alpha, victim, { poolName: 'demo', timeout: 120 });
    try {
        const peek = await native(alpha, other, 'GET', `/v1/sandboxes/${sb.sandboxId}`);
        assert.equal(peek.status, 404, peek.text);
        const list = await native(alpha, other, 'GET', '/v1/sandboxes');
        assert.equal(list.status, 200, list.text);
        assert.ok(!list.json.items.some((s) => s.sandboxId === sb.sandboxId), 'listed to another user');
        const kill = await native(alpha, other, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
        assert.equal(kill.status, 404, kill.text);
        // the same through the hub
        const viaHub = await call(`${stack.hub.base}/api/clusters/alpha/v1/sandboxes/${sb.sandboxId}`, { key: other });
        assert.equal(viaHub.status, 404, viaHub.text);
        const killHub = await call(`${stack.hub.base}/api/clusters/alpha/v1/sandboxes/${sb.sandboxId}`, { method: 'DELETE', key: other });
        assert.equal(killHub.status, 404, killHub.text);
        // still there for its owner and for an admin
        assert.equal((await native(alpha, victim, 'GET', `/v1/sandboxes/${sb.sandboxId}`)).status, 200);
        assert.equal((await native(alpha, admin, 'GET', `/v1/sandboxes/${sb.sandboxId}`)).status, 200);
        const all = await native(alpha, admin, 'GET', '/v1/sandboxes');
        assert.ok(all.json.items.some((s) => s.sandboxId === sb.sandboxId), 'an admin sees every sandbox');
    } finally {
        await native(alpha, victim, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
    }
});

test('anonymous requests are 401 on every route but /healthz and /readyz', async () => {
    const hub = stack.hub.base;
    for (const p of ['/api/clusters', '/api/clusters/alpha', '/api/clusters/alpha/v1/ping',
        '/api/clusters/alpha/v1/sandboxes']) {
        const r = await call(hub + p);
        assert.equal(r.status, 401, `hub ${p}: ${r.status} ${r.text}`);
    }
    for (const p of ['/v1/ping', '/v1/sandboxes', '/v1/relay/gamma/native/v1/ping', '/v1/envs']) {
        const r = await call(alpha.native + p);
        assert.equal(r.status, 401, `agent ${p}: ${r.status} ${r.text}`);
    }
    const gd = await call(`${gamma.native}/v1/diag/bytes?n=10`);
    assert.equal(gd.status, 401, gd.text);
    // /metrics (it names sandboxes and clusters) is on its own loopback listener only
    assert.equal((await call(`${hub}/metrics`)).status, 404);
    assert.equal((await call(`${alpha.native}/metrics`)).status, 404);
    assert.equal((await call(`${alpha.e2b}/metrics`)).status, 404);
    assert.equal((await call(`${stack.hub.metrics}/metrics`)).status, 200);
    assert.equal((await call(`${alpha.metrics}/metrics`)).status, 200);
    assert.equal((await call(`${hub}/healthz`)).status, 200);
    assert.equal((await call(`${alpha.native}/healthz`)).status, 200);
    // with a key the same routes answer
    const list = await call(`${hub}/api/clusters`, { bearer: victim });
    assert.equal(list.status, 200, list.text);
    const g = list.json.clusters.find((c) => c.id === 'gamma');
    assert.deepEqual(g.namespaces, ['other'], 'GET /api/clusters shows the assigned namespaces');
    assert.equal(list.json.clusters.find((c) => c.id === 'alpha').namespaces, null, 'default: every namespace');
});

test('relays are admin-only and never hop twice', async () => {
    const once = await call(`${alpha.native}/v1/relay/gamma/native/v1/ping`, { key: admin });
    assert.equal(once.status, 200, once.text);
    assert.equal(once.json.cluster, 'gamma');
    const tenant = await call(`${alpha.native}/v1/relay/gamma/native/v1/ping`, { key: victim });
    assert.equal(tenant.status, 403, tenant.text);
    const chain = await call(`${alpha.native}/v1/relay/gamma/native/v1/relay/alpha/native/v1/ping`, { key: admin });
    assert.equal(chain.status, 403, chain.text);
    assert.match(chain.text, /never hops twice/);
    const viaHub = await call(`${stack.hub.base}/api/clusters/alpha/v1/relay/gamma/native/v1/ping`, { key: admin });
    assert.equal(viaHub.status, 403, viaHub.text);
    assert.match(viaHub.text, /never hops twice/);
});

test('diagnostics are off by default, admin-only and bounded at 1 GiB', async () => {
    const off = await call(`${alpha.native}/v1/diag/bytes?n=10`, { key: admin });
    assert.equal(off.status, 404, `alpha runs without --enable-diag: ${off.status} ${off.text}`);
    const tenant = await call(`${gamma.native}/v1/diag/bytes?n=10`, { key: victim });
    assert.equal(tenant.status, 403, tenant.text);
    const big = await call(`${gamma.native}/v1/diag/bytes?n=${2 ** 30 + 1}`, { key: admin });
    assert.equal(big.status, 400, big.text);
    assert.match(big.text, /1 GiB/);
    const ok = await call(`${gamma.native}/v1/diag/bytes?n=16`, { key: admin });
    assert.equal(ok.status, 200);
    assert.equal(ok.text.length, 16);
    const echo = await fetch(`${gamma.native}/v1/diag/echo`, { method: 'POST', headers: { 'X-API-Key': admin }, body: 'ping-body' });
    assert.equal(await echo.text(), 'ping-body', 'a body sent before the key check finished is not lost');
});

test("a cluster's capacity reports outside its namespaces are dropped, counted and never attract a tenant", async () => {
    const dropped = await waitFor(async () => {
        const v = await metricValue(stack.hub.base, 'agentbox_federation_records_dropped_total{cluster="gamma"}');
        return v > 0 ? v : null;
    }, { timeoutMs: 15000, what: "gamma's default-namespace records dropped on the hub" });
    assert.ok(dropped > 0);
    const fed = await call(`${stack.hub.base}/api/v1/federation`, { bearer: admin });
    assert.equal(fed.status, 200, fed.text);
    assert.ok(!(fed.json.records || []).some((r) => r.cluster === 'gamma'), `gamma records kept: ${fed.text}`);
    // solo is offered by gamma only: the hub must not place a default-namespace tenant there
    const r = await call(`${stack.hub.base}/e2b/sandboxes`, { method: 'POST', key: victim, body: { templateID: 'solo', timeout: 60 } });
    assert.notEqual(r.status, 201, `placed on ${r.json && r.json.sandboxID}`);
    const onGamma = await native(gamma, admin, 'GET', '/v1/sandboxes');
    assert.equal(onGamma.json.total, 0, onGamma.text);
    // demo goes to alpha, whatever gamma reports
    const d = await call(`${stack.hub.base}/e2b/sandboxes`, { method: 'POST', key: victim, body: { templateID: 'demo', timeout: 60 } });
    assert.equal(d.status, 201, d.text);
    assert.match(d.json.sandboxID, /^alpha-/);
    await call(`${stack.hub.base}/e2b/sandboxes/${d.json.sandboxID}`, { method: 'DELETE', key: victim });
});

test("a cluster's lifecycle events outside its namespaces never become sandbox rows", async () => {
    const before = (await metricValue(stack.hub.base, 'agentbox_sandbox_events_dropped_total{cluster="gamma",reason="namespace"}')) || 0;
    // lifecycle events come from the E2B API's creates
    const e2bCreate = async (agent, templateID) => {
        const r = await call(`${agent.e2b}/sandboxes`, { method: 'POST', key: victim, body: { templateID, timeout: 60 } });
        assert.equal(r.status, 201, r.text);
        return r.json.sandboxID;
    };
    const rogue = await e2bCreate(gamma, 'solo');
    const mine = await e2bCreate(alpha, 'demo');
    try {
        await waitFor(async () => {
            const v = await metricValue(stack.hub.base, 'agentbox_sandbox_events_dropped_total{cluster="gamma",reason="namespace"}');
            return v > before;
        }, { timeoutMs: 10000, what: "gamma's events counted as dropped" });
        const rows = await waitFor(async () => {
            const r = await call(`${stack.hub.base}/api/v1/sandboxes?limit=1000`, { bearer: admin });
            return r.json.items.some((x) => x.id === mine) ? r.json.items : null;
        }, { timeoutMs: 10000, what: "alpha's sandbox row on the hub" });
        assert.ok(!rows.some((x) => x.id === rogue), 'gamma created a row in namespace default');
    } finally {
        await call(`${gamma.e2b}/sandboxes/${rogue}`, { method: 'DELETE', key: victim });
        await call(`${alpha.e2b}/sandboxes/${mine}`, { method: 'DELETE', key: victim });
    }
});

test('anonymous data-plane traffic does not keep a sandbox from idling out', async () => {
    await waitPool(alpha, 'brief-1c0gi', (st) => st.idle >= 1, 'a warm brief sandbox');
    const sb = await claim(alpha, victim, { poolName: 'brief', timeout: 300 });
    const t0 = Date.now();
    let stop = false;
    const noise = (async () => {
        while (!stop) {
            for (const p of ['/health', '/files?path=/home/user/x', '/envs']) {
                const r = await fetch(`${alpha.data}${p}`, {
                    headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': 'not-the-token' },
                });
                await r.arrayBuffer();
            }
            await new Promise((res) => setTimeout(res, 200));
        }
    })();
    try {
        await waitFor(async () => (await native(alpha, victim, 'GET', `/v1/sandboxes/${sb.sandboxId}`)).status === 404,
            { timeoutMs: 10000, what: 'the sandbox to idle out despite anonymous traffic' });
        assert.ok(Date.now() - t0 >= 1500, 'reclaimed before its 2 s idle timeout');
    } finally {
        stop = true;
        await noise;
    }
});

test('a ws:// hub URL to a non-loopback host is refused unless --insecure-tunnel', async () => {
    const token = `abxc_${'0'.repeat(64)}`;
    const r = await run(agentBin(), ['serve', '--cluster-id', 'far', '--state-dir', gamma.stateDir,
        '--hub-url', 'ws://10.255.0.1:7701', '--join-token', token], { timeoutMs: 10000 });
    assert.notEqual(r.code, 0, 'the agent started');
    assert.match(r.stderr, /wss:\/\/.*--insecure-tunnel/);
});

test('serve refuses a PostgreSQL superuser unless --allow-superuser', async () => {
    const [port, tport] = [await freePort(), await freePort()];
    const r = await run(hubBin(), ['serve', '--listen', `127.0.0.1:${port}`, '--tunnel-listen', `127.0.0.1:${tport}`], {
        env: { ...process.env, DATABASE_URL: stack.pg.url, AGENTBOX_HUB_SECRET: hubSecret }, timeoutMs: 20000,
    });
    assert.notEqual(r.code, 0, 'serve ran as the superuser');
    assert.match(r.stderr, /superuser.*--allow-superuser/);
    const hub = await startHub(stack.pg.url, { superuser: true });
    try {
        assert.equal((await httpGet(`${hub.base}/readyz`)).status, 200, 'with the flag it serves');
    } finally {
        await hub.proc.stop();
    }
});

test('every listener of hub and agent binds loopback unless configured otherwise', async () => {
    // the defaults as the processes apply them (flag > env > config > default)
    const hubHelp = await run(hubBin(), ['serve', '--help']);
    const agentHelp = await run(agentBin(), ['serve', '--help']);
    const defaults = (text) => Object.fromEntries([...text.matchAll(/^\s+--([a-z0-9-]*listen) VALUE\s+\S+(?:, \S+)*\s+\S+\s+(\S+)/gm)].map((m) => [m[1], m[2]]));
    const h = defaults(hubHelp.stdout);
    const a = defaults(agentHelp.stdout);
    for (const f of ['listen', 'metrics-listen', 'tunnel-listen']) assert.ok(f in h, `hub --${f}: ${hubHelp.stdout}`);
    for (const f of ['data-listen', 'e2b-listen', 'metrics-listen', 'native-listen']) assert.ok(f in a, `agent --${f}: ${agentHelp.stdout}`);
    // a listener is loopback by default, or off ("-": the hub's --data-listen)
    for (const [flag, v] of [...Object.entries(h), ...Object.entries(a)])
        assert.match(v, /^(127\.0\.0\.1:\d+|-)$/, `--${flag} defaults to ${v}`);
    assert.match(h.listen, /^127\.0\.0\.1:\d+$/, 'the hub API is on by default, on loopback');
});

// What the sockets are bound to, not what the flags say: lws binds an IPv6
// wildcard socket for an IPv4 iface unless the vhost disables IPv6, so a
// "127.0.0.1:port" listener once accepted connections on every interface.
test('every TCP socket hub and agent listen on is bound to loopback', async () => {
    const r = await run('ss', ['-ltnpH']);
    assert.equal(r.code, 0, r.stderr);
    for (const [who, pid] of [['hub', stack.hub.proc.pid], ['alpha', alpha.proc.pid], ['gamma', gamma.proc.pid]]) {
        const mine = r.stdout.split('\n').filter((l) => l.includes(`pid=${pid},`));
        assert.ok(mine.length >= 3, `${who} listens on ${mine.length} sockets:\n${r.stdout}`);
        for (const l of mine) {
            const local = l.trim().split(/\s+/)[3];
            assert.match(local, /^(127\.0\.0\.1|\[::1\]|\[::ffff:127\.0\.0\.1\]):\d+$/, `${who}: ${l}`);
        }
    }
});
