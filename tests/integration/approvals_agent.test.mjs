// The approval gate (issue 16, reference §4.5) at the agent's own native API:
// an agent-mode key straight at <agent>/v1/... is asked for by the agent at
// the hub (POST /internal/v1/approvals/gate over the tunnel) before any gated
// write; the hub's 428 APPROVAL_REQUIRED reaches the caller as the hub made
// it, a once-approval by the owner's console session lets one retry through,
// a denial keeps it refused; a write through the hub's /api/clusters relay is
// gated there only, not twice; with the hub gone the gate fails closed (503
// naming the hub) and the write is not done. A real hub, agent and
// PostgreSQL; needs root (the local runtime).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { createKey, consoleSession, psqlAt } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest } from './lib/sandboxes.mjs';
import { requestJson } from './lib/scaffold.mjs';

let stack, alpha, manifests, agentKey, owner;

const call = (url, headers, method, body) => requestJson(url, { method, headers, body });
// abx direct mode: the agent's native listener with the key.
const direct = (key, method, p, body, headers = {}) => call(`${alpha.native}${p}`, { 'AGENTBOX-API-KEY': key, ...headers }, method, body);
// abx console mode: through the hub's relay.
const viaHub = (key, method, p, body) => call(`${stack.hub.base}/api/clusters/alpha${p}`, { Authorization: `Bearer ${key}` }, method, body);
const decide = (id, decision, scope) => call(`${stack.hub.base}/api/v1/approvals/${id}/decision`, { Authorization: `Bearer ${owner}` }, 'POST',
    scope ? { decision, scope } : { decision });
const requests = async () => Number(await psqlAt(stack.pg.url, 'SELECT count(*) FROM approval_requests'));
const envStatus = async (name) => (await direct(stack.key, 'GET', `/v1/envs/${name}`)).status;

function assertChallenge(r, op, summary) {
    assert.equal(r.status, 428, r.text);
    assert.equal(r.json.errorCode, 'APPROVAL_REQUIRED', r.text);
    assert.equal(r.json.error, `approval required: ${summary}`);
    const d = r.json.detail;
    assert.match(d.approvalId, /^apr_[0-9a-f]{16}$/);
    assert.equal(d.operation, op);
    assert.equal(d.pollUrl, `/v1/approvals/${d.approvalId}`);
    return d.approvalId;
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 0 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    agentKey = (await createKey(stack.pg.url, 't', 'u', ['--agent'])).token;
    owner = await consoleSession(stack.hub.base, 't', 'u');
});

after(async () => {
    if (stack) await stack.stop();
    if (manifests) fs.rmSync(manifests, { recursive: true, force: true });
});

const webEnv = (name) => ({ name, templateRef: { name: 'envd' } });

test('direct: an agent key\'s gated write is 428 from the hub; approved once, one retry passes, the next is 428 again', async () => {
    // reads and unrestricted keys are not gated
    assert.equal((await direct(agentKey, 'GET', '/v1/envs/demo')).status, 200);
    const n0 = await requests();
    const r = await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1'));
    const id = assertChallenge(r, 'env.create', 'create an env');
    assert.equal(await requests(), n0 + 1, 'the agent asked the hub, which recorded the request');
    const row = await psqlAt(stack.pg.url, `SELECT cluster || ' ' || method || ' ' || path FROM approval_requests WHERE id = '${id}'`);
    assert.equal(row.trim(), 'alpha POST /v1/envs');
    assert.equal(await envStatus('gw1'), 404, 'a challenged write is not done');
    // the identical retry reuses the pending request; another body is another request
    assert.equal(assertChallenge(await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1')), 'env.create', 'create an env'), id);
    assert.notEqual(assertChallenge(await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1x')), 'env.create', 'create an env'), id);

    const ok = await decide(id, 'approve');
    assert.equal(ok.status, 200, ok.text);
    const done = await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1'));
    assert.equal(done.status, 201, done.text);
    assert.equal(await envStatus('gw1'), 200);
    // once: the approval is used up (a pass-through would be 409, the env exists)
    const again = await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1'));
    assert.notEqual(assertChallenge(again, 'env.create', 'create an env'), id);
    // the approval covered that body only
    assert.equal((await direct(agentKey, 'POST', '/v1/envs', webEnv('gw1x'))).status, 428);
    assert.equal(await envStatus('gw1x'), 404);
    // the other gated routes of the agent ask too (route parameters in the summary)
    assertChallenge(await direct(agentKey, 'DELETE', '/v1/sandboxes/sbx-nope'), 'sandbox.delete', 'delete a sandbox (sbx-nope)');
    assertChallenge(await direct(agentKey, 'PUT', '/v1/envs/demo/sandboxpools/demo-1c0gi', { replicas: 3 }), 'pool.update',
        'update a pool (demo/demo-1c0gi)');
    // an unrestricted key is never gated
    assert.equal((await direct(stack.key, 'POST', '/v1/envs', webEnv('gw1y'))).status, 201);
});

test('deny: the write stays refused and is not done; a retry asks again', async () => {
    const id = assertChallenge(await direct(agentKey, 'DELETE', '/v1/envs/gw1'), 'env.delete', 'delete an env (gw1)');
    const no = await decide(id, 'deny');
    assert.equal(no.status, 200, no.text);
    assert.equal(no.json.approval.status, 'denied');
    const retry = await direct(agentKey, 'DELETE', '/v1/envs/gw1');
    assert.notEqual(assertChallenge(retry, 'env.delete', 'delete an env (gw1)'), id);
    assert.equal(await envStatus('gw1'), 200, 'a denied delete did not happen');
});

test('a session grant: the agent passes the caller\'s X-AgentBox-Session-Id to the hub', async () => {
    const sess = { 'X-AgentBox-Session-Id': 'harness-run-7' };
    const pool = (n) => direct(agentKey, 'PUT', '/v1/envs/demo/sandboxpools/demo-1c0gi', { replicas: n }, sess);
    const id = assertChallenge(await pool(0), 'pool.update', 'update a pool (demo/demo-1c0gi)');
    assert.equal((await psqlAt(stack.pg.url, `SELECT session_id FROM approval_requests WHERE id = '${id}'`)).trim(), 'harness-run-7');
    const ok = await decide(id, 'approve', 'session');
    assert.equal(ok.status, 200, ok.text);
    // that session's pool.update passes now, more than once; without the session, or another, it does not
    const a = await pool(0);
    assert.equal(a.status, 200, a.text);
    assert.equal((await pool(0)).status, 200);
    assertChallenge(await direct(agentKey, 'PUT', '/v1/envs/demo/sandboxpools/demo-1c0gi', { replicas: 0 }), 'pool.update',
        'update a pool (demo/demo-1c0gi)');
    assertChallenge(await direct(agentKey, 'PUT', '/v1/envs/demo/sandboxpools/demo-1c0gi', { replicas: 0 }, { 'X-AgentBox-Session-Id': 'other' }),
        'pool.update', 'update a pool (demo/demo-1c0gi)');
});

test('through the hub relay the write is gated once: the hub\'s once-approval is not asked for again by the agent', async () => {
    const n0 = await requests();
    const id = assertChallenge(await viaHub(agentKey, 'POST', '/v1/envs', webEnv('gw2')), 'env.create', 'create an env');
    assert.equal(await requests(), n0 + 1);
    assert.equal((await decide(id, 'approve')).status, 200);
    // were the agent to gate it too, the consumed approval would make this 428
    const done = await viaHub(agentKey, 'POST', '/v1/envs', webEnv('gw2'));
    assert.equal(done.status, 201, done.text);
    assert.equal(await envStatus('gw2'), 200);
    assert.equal(await requests(), n0 + 1, 'no second approval request was made');
});

test('hub down: an agent key\'s gated write is 503 at once, naming the hub, and is not done', async () => {
    // warm the key caches while the hub is up
    assert.equal((await direct(agentKey, 'GET', '/v1/envs/demo')).status, 200);
    assert.equal(await envStatus('gw3'), 404);
    await stack.hub.proc.stop();
    const t0 = Date.now();
    const r = await direct(agentKey, 'POST', '/v1/envs', webEnv('gw3'));
    const ms = Date.now() - t0;
    assert.equal(r.status, 503, r.text);
    assert.match(r.json.error, /hub/);
    assert.match(r.json.error, /approval gate for env\.create cannot be checked|approval gate could not be asked for env\.create/);
    assert.match(r.json.error, /write was not done/);
    assert.ok(ms < 6000, `answered in ${ms} ms`);
    // an unrestricted key's write still works without the hub: proof that gw3 is absent because it was refused
    assert.equal(await envStatus('gw3'), 404);
    assert.equal((await direct(stack.key, 'POST', '/v1/envs', webEnv('gw3b'))).status, 201);
    // and a read by the agent key is not gated
    assert.equal((await direct(agentKey, 'GET', '/v1/envs/demo')).status, 200);
});
