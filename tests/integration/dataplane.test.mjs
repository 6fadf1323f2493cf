// The agent's data plane (:8091) with real processes: target extraction
// (headers, host, path) and its 400s, the distinct 502 bodies (not found,
// not healthy, unsupported port, no tunnel), proxying to a local envd, and
// the relay to another cluster's sandbox through the hub.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { startAgent } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest, native, claim, waitPool, envdBin, reapSandboxes, readSandboxState } from './lib/sandboxes.mjs';

let stack;
let alpha;
let beta;
let sbA;
let sbB;
const cleanups = [];

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 2 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests, agentArgs: ['--data-domain', 'sbx.test'] });
    ({ alpha, beta } = stack.agents);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm');
    await waitPool(beta, 'demo-1c0gi', (s) => s.idle === 2, 'beta warm');
    sbA = await claim(alpha, stack.key, { poolName: 'demo', timeout: 300 });
    sbB = await claim(beta, stack.key, { poolName: 'demo', timeout: 300 });
});

after(async () => {
    for (const fn of cleanups.reverse()) await fn();
    if (stack) await stack.stop();
});

// A raw request (so Host can be set); resolves {status, headers, body (string)}.
function request(base, p, { method = 'GET', headers = {}, body } = {}) {
    return new Promise((resolve, reject) => {
        const req = http.request(base + p, { method, headers, agent: false }, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks).toString() }));
            res.on('error', reject);
        });
        req.on('error', reject);
        req.end(body);
    });
}

const envdHeaders = (id, port = '49983') => ({ 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': port });

async function expectError(res, status, error) {
    const r = await res;
    assert.equal(r.status, status, r.body);
    assert.match(r.headers['content-type'], /application\/json/);
    assert.deepEqual(JSON.parse(r.body), { error });
}

test('a bad or missing target is a 400 naming the problem', async () => {
    const d = alpha.data;
    await expectError(request(d, '/files'), 400, 'missing sandbox id: set the E2b-Sandbox-Id and '
        + 'E2b-Sandbox-Port headers, use the host <port>-<sandbox id>.<domain> or the path '
        + '/sandboxes/<sandbox id>/<port>/...');
    await expectError(request(d, '/health', { headers: { 'E2b-Sandbox-Id': sbA.sandboxId } }), 400,
        'missing E2b-Sandbox-Port header when E2b-Sandbox-Id is set');
    await expectError(request(d, '/health', { headers: { 'E2b-Sandbox-Port': '49983' } }), 400,
        'missing E2b-Sandbox-Id header when E2b-Sandbox-Port is set');
    await expectError(request(d, '/health', { headers: envdHeaders(sbA.sandboxId, '0') }), 400,
        'invalid port in E2b-Sandbox-Port header: must be an integer from 1 to 65535');
    await expectError(request(d, '/sandboxes/only-an-id'), 400,
        'URL path after sandboxes/ must contain at least sandbox ID and port');
    await expectError(request(d, `/sandboxes/${sbA.sandboxId}/99999/health`), 400,
        'invalid port number "99999" in URL path');
    await expectError(request(d, '/health', { headers: envdHeaders('nope') }), 400,
        "sandbox id 'nope' is malformed: expected <cluster>-<20 characters [a-z0-9]>");
    await expectError(request(d, '/health', { headers: { Host: 'envd.sbx.test' } }), 400,
        "host 'envd.sbx.test' must be <port>-<sandbox id>.sbx.test");
    // the agent's own endpoints stay reachable when no sandbox is named
    assert.equal((await request(d, '/healthz')).status, 200);
    assert.match((await request(alpha.metrics, '/metrics')).body, /agentbox_dataplane_requests_total\{outcome="bad_request"\} [1-9]/);
    // and the data plane itself no longer serves the unauthenticated page
    assert.equal((await request(d, '/metrics')).status, 404);
});

test('the three target forms reach the same sandbox envd', async () => {
    const id = sbA.sandboxId;
    const byHeader = await request(alpha.data, '/health', { headers: envdHeaders(id) });
    assert.equal(byHeader.status, 204, byHeader.body);
    const byHost = await request(alpha.data, '/health', { headers: { Host: `49983-${id}.sbx.test:8091` } });
    assert.equal(byHost.status, 204, byHost.body);
    const byPath = await request(alpha.data, `/sandboxes/${id}/49983/health`);
    assert.equal(byPath.status, 204, byPath.body);
    // the query survives the path rewrite; envd checks the token on /envs
    const envs = await request(alpha.data, `/sandboxes/${id}/49983/envs?x=1`, {
        headers: { 'X-Access-Token': sbA.envdAccessToken },
    });
    assert.equal(envs.status, 200, envs.body);
    const noToken = await request(alpha.data, `/sandboxes/${id}/49983/envs`);
    assert.equal(noToken.status, 401, 'envd itself still checks X-Access-Token');
});

test('502 bodies: not found, not healthy, closed port stay distinct', async () => {
    const unknown = `alpha-${'0'.repeat(20)}`;
    await expectError(request(alpha.data, '/health', { headers: envdHeaders(unknown) }), 502, 'sandbox not found');
    await expectError(request(alpha.data, '/', { headers: envdHeaders(sbA.sandboxId, '3000') }), 502,
        `port 3000 of sandbox ${sbA.sandboxId} is not open: start a server listening on it inside `
        + 'the sandbox (0.0.0.0 or 127.0.0.1)');
    // a claimed sandbox whose envd socket is gone is known but not healthy
    const sick = await claim(alpha, stack.key, { poolName: 'demo', timeout: 300 });
    const dirs = fs.readdirSync(path.join(alpha.stateDir, 'sandboxes'));
    let removed = false;
    for (const d of dirs) {
        let st;
        try {
            st = readSandboxState(path.join(alpha.stateDir, 'sandboxes', d));
        } catch {
            continue; /* a sandbox still being created */
        }
        if (st.info && st.info.id === sick.sandboxId) {
            fs.unlinkSync(path.join(alpha.stateDir, 'sandboxes', d, 'run', 'envd.sock'));
            removed = true;
        }
    }
    assert.ok(removed, 'found the claimed sandbox directory');
    await expectError(request(alpha.data, '/health', { headers: envdHeaders(sick.sandboxId) }), 502,
        'sandbox is not in a healthy state');
    await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sick.sandboxId}`);
});

test('a request body streams to envd and the answer streams back', async () => {
    // an upload of 3 MiB through the data plane, read back through it
    const data = Buffer.alloc(3 << 20);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7) & 0xff;
    const up = await fetch(`${alpha.data}/files?path=/home/user/blob.bin`, {
        method: 'POST',
        headers: { ...envdHeaders(sbA.sandboxId), 'X-Access-Token': sbA.envdAccessToken, 'Content-Type': 'application/octet-stream' },
        body: data,
    });
    assert.equal(up.status, 200, await up.text());
    const down = await fetch(`${alpha.data}/files?path=/home/user/blob.bin`, {
        headers: { ...envdHeaders(sbA.sandboxId), 'X-Access-Token': sbA.envdAccessToken },
    });
    assert.equal(down.status, 200);
    const got = Buffer.from(await down.arrayBuffer());
    assert.equal(got.length, data.length);
    assert.ok(got.equals(data), 'downloaded bytes differ');
    const m = await (await fetch(`${alpha.metrics}/metrics`)).text();
    const bytes = /agentbox_dataplane_bytes_total\{direction="to_sandbox"\} ([0-9.e+]+)/.exec(m);
    assert.ok(bytes && Number(bytes[1]) >= data.length, 'bytes to sandboxes are counted');
});

test('a sandbox of another cluster is reached through the hub', async () => {
    const viaAlpha = await request(alpha.data, '/health', { headers: envdHeaders(sbB.sandboxId) });
    assert.equal(viaAlpha.status, 204, viaAlpha.body);
    const envs = await request(alpha.data, `/sandboxes/${sbB.sandboxId}/49983/envs`, {
        headers: { 'X-Access-Token': sbB.envdAccessToken },
    });
    assert.equal(envs.status, 200, envs.body);
    // beta answers for its own unknown ids
    await expectError(request(alpha.data, '/health', { headers: envdHeaders(`beta-${'1'.repeat(20)}`) }), 502,
        'sandbox not found');
});

test('a relayed request cannot pick its own relay target', async () => {
    // a client's own relay headers must not steer the hub: alpha's native API
    // would answer /health with 404, beta's envd answers 204
    const forged = await request(alpha.data, '/health', {
        headers: {
            ...envdHeaders(sbB.sandboxId),
            'X-AgentBox-Target-Cluster': 'alpha',
            'X-AgentBox-Target-Service': 'native',
        },
    });
    assert.equal(forged.status, 204, forged.body);
});

test('a sandbox of another cluster without a tunnel is a 502 naming the cluster', async () => {
    const dir = manifestsDir([]);
    const solo = await startAgent('solo', { args: ['--manifests-dir', dir, '--envd-path', envdBin()] });
    cleanups.push(async () => {
        await solo.proc.stop();
        reapSandboxes(solo.stateDir);
    });
    await expectError(request(solo.data, '/health', { headers: envdHeaders(sbB.sandboxId) }), 502,
        "cluster 'beta' is not reachable: this agent has no hub configured");
});
