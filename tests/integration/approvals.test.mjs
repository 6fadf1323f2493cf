// The approval gate (issue 16, reference §4.5) on the hub: an agent-mode key's
// gated native writes through /api/clusters/{id}/v1 answer 428
// APPROVAL_REQUIRED until a human's console session approves them once, for
// the request's session or for the key; denials, expiry, forbidden
// operations (403 FORBIDDEN_FOR_AGENT), decisions only by a console session,
// grants in PostgreSQL surviving a hub restart. The cluster is played by a
// test tunnel client that records what reaches it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import crypto from 'node:crypto';
import { startPostgres, startHub, runMigrate, run, hubBin, hubSecret, waitFor, addCluster, createKey, psqlAt, startAgent, waitClusterOnline } from './lib/harness.mjs';
import { connectTunnel } from './lib/tunnel_client.mjs';

let pg, hub, token, alpha;
let olive, mallory, agentKey, plainKey, oliveSession, mallorySession;
const cleanups = [];

async function connectAlpha(h) {
    return waitFor(async () => {
        try {
            return await connectTunnel({
                port: h.tunnelPort, cluster: 'alpha', token,
                onRequest: (r) => ({ status: r.method === 'POST' ? 201 : 200, body: { reached: true, method: r.method, path: r.path } }),
            });
        } catch (e) {
            if (/HTTP 40[13]/.test(e.message)) return null; // the registry is still loading
            throw e;
        }
    }, { timeoutMs: 15000, what: 'the alpha test cluster on the tunnel' });
}

function cli(args, input) {
    return run(hubBin(), args, { env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: hubSecret }, input });
}

async function api(method, path, { token: tok, headers = {}, body, base = hub.base } = {}) {
    const h = { ...headers };
    if (tok) h.Authorization = `Bearer ${tok}`;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await fetch(`${base}${path}`, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status: res.status, headers: res.headers, text, json };
}

async function sessionOf(user, password, base = hub.base) {
    const r = await api('POST', '/api/auth/login', { body: { username: user, password }, base });
    assert.equal(r.status, 200, r.text);
    return r.json.token;
}

const native = (method, p, opts = {}) => api(method, `/api/clusters/alpha${p}`, { token: agentKey, ...opts });
const decide = (id, body, tok = oliveSession, base = hub.base) => api('POST', `/api/v1/approvals/${id}/decision`, { token: tok, body, base });
const reached = (pred) => alpha.received.filter((r) => r.service === 'native' && pred(r));

// What abx prints for a 428 ("this write is waiting for a person" + console
// URL, approval id, expiry) comes from these fields alone.
function assertChallenge(r, op, summary, onceOnly = false) {
    assert.equal(r.status, 428, r.text);
    assert.equal(r.json.errorCode, 'APPROVAL_REQUIRED');
    assert.equal(r.json.error, `approval required: ${summary}`);
    const d = r.json.detail;
    assert.match(d.approvalId, /^apr_[0-9a-f]{16}$/);
    assert.equal(d.operation, op);
    assert.equal(d.summary, summary);
    assert.equal(d.onceOnly, onceOnly);
    assert.equal(d.pollUrl, `/v1/approvals/${d.approvalId}`);
    assert.match(d.expiresAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    return d.approvalId;
}

before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    hub = await startHub(pg.url);
    token = await addCluster(pg.url, 'alpha');
    alpha = await connectAlpha(hub);
    for (const [u, pw] of [['olive', 'olive-password'], ['mallory', 'mallory-password']]) {
        const r = await cli(['user', 'add', u, '--team', 'ops'], `${pw}\n`);
        assert.equal(r.code, 0, r.stderr);
    }
    agentKey = (await createKey(pg.url, 'ops', 'olive', ['--agent'])).token;
    plainKey = (await createKey(pg.url, 'ops', 'olive')).token;
    oliveSession = await sessionOf('olive', 'olive-password');
    mallorySession = await sessionOf('mallory', 'mallory-password');
});
after(async () => {
    for (const c of cleanups.reverse()) await c();
    if (alpha) alpha.close();
    if (hub) await hub.proc.stop();
    if (pg) await pg.cleanup();
});

test('ungated: reads, unrestricted keys and sessions pass; an agent key\'s gated write is 428 and reaches nothing', async () => {
    const get = await native('GET', '/v1/sandboxes');
    assert.equal(get.status, 200, get.text);
    assert.equal(get.json.reached, true);
    const plain = await native('POST', '/v1/sandboxes', { token: plainKey, body: { poolName: 'p1' } });
    assert.equal(plain.status, 201, plain.text);
    const before = reached(() => true).length;
    const r = await native('POST', '/v1/sandboxes', { body: { poolName: 'p1' } });
    const id = assertChallenge(r, 'sandbox.create', 'create a sandbox');
    assert.equal(reached(() => true).length, before, 'a challenged write never reaches the cluster');
    // an identical retry reuses the pending request; another body is another request
    const again = await native('POST', '/v1/sandboxes', { body: { poolName: 'p1' } });
    assert.equal(again.json.detail.approvalId, id);
    const other = await native('POST', '/v1/sandboxes', { body: { poolName: 'p2' } });
    assert.notEqual(assertChallenge(other, 'sandbox.create', 'create a sandbox'), id);
    // the summary names the route parameters; pollUrl resolves against the console base
    const del = await native('DELETE', '/v1/envs/web/sandboxpools/web-small');
    const did = assertChallenge(del, 'pool.delete', 'delete a pool (web/web-small)', true);
    const poll = await api('GET', `/api/clusters/alpha${del.json.detail.pollUrl}`, { token: agentKey });
    assert.equal(poll.status, 200, poll.text);
    assert.equal(poll.json.approvalId, did);
    assert.equal(poll.json.status, 'pending');
    assert.equal(poll.json.cluster, 'alpha');
    assert.equal(poll.json.path, '/v1/envs/web/sandboxpools/web-small');
    // an escaped slash does not turn a gated route into an ungated one
    const esc = await native('DELETE', '/v1/sandboxes%2Fsbx-1');
    assert.equal(esc.status, 428, esc.text);
});

test('a console session drives the native API through the hub: never gated, the agent gets an assertion, not the session token', async () => {
    const r = await native('POST', '/v1/envs', { token: oliveSession, body: { name: 'by-hand' } });
    assert.equal(r.status, 201, r.text);
    const got = reached((x) => x.method === 'POST' && x.path === '/v1/envs' && x.body.includes('by-hand'));
    assert.equal(got.length, 1);
    const hdr = Object.fromEntries(got[0].headers.map(([k, v]) => [k.toLowerCase(), v]));
    assert.ok(!JSON.stringify(got[0].headers).includes(oliveSession.slice(5)), 'the session token never reaches a cluster');
    assert.ok(!hdr.authorization, `Authorization relayed: ${hdr.authorization}`);
    const claims = JSON.parse(Buffer.from(hdr['x-agentbox-assertion'].split('.')[0], 'base64url').toString());
    assert.equal(claims.aud, 'alpha');
    assert.equal(claims.user, 'olive');
    assert.equal(claims.team, 'ops');
});

test('with a real agent: the session\'s assertion is accepted there, the agent key\'s write waits for a person', async () => {
    const agent = await startAgent('beta', { hubUrl: hub.tunnelUrl, token: await addCluster(pg.url, 'beta') });
    cleanups.push(() => agent.proc.stop());
    await waitClusterOnline(hub.base, 'beta', true, 15000);
    const who = await api('GET', '/api/clusters/beta/v1/auth/whoami', { token: oliveSession });
    assert.equal(who.status, 200, who.text);
    assert.equal(who.json.user, 'olive');
    assert.equal(who.json.team, 'ops');
    const asAgent = await api('GET', '/api/clusters/beta/v1/auth/whoami', { token: agentKey });
    assert.equal(asAgent.status, 200, asAgent.text);
    assert.equal(asAgent.json.mode, 'agent');
    assertChallenge(await api('POST', '/api/clusters/beta/v1/sandboxes', { token: agentKey, body: { poolName: 'none' } }), 'sandbox.create', 'create a sandbox');
});

test('decisions: only the owner\'s console session; the agent key, another key and another user cannot', async () => {
    const r = await native('PUT', '/v1/sandboxes/sbx-9/timeout', { body: { timeout: '30m' } });
    const id = assertChallenge(r, 'sandbox.update', "change a sandbox's timeout (sbx-9)");
    const byAgent = await decide(id, { decision: 'approve' }, agentKey);
    assert.equal(byAgent.status, 403, byAgent.text);
    assert.equal(byAgent.json.error, 'approvals can only be decided from the console: the credential that made the request cannot approve it');
    assert.equal(byAgent.json.errorCode, 'FORBIDDEN_FOR_AGENT');
    const byKey = await decide(id, { decision: 'approve' }, plainKey);
    assert.equal(byKey.status, 403, byKey.text);
    const byStranger = await decide(id, { decision: 'approve' }, mallorySession);
    assert.equal(byStranger.status, 404, byStranger.text);
    assert.equal(byStranger.json.error, 'approval request not found');
    assert.equal((await api('GET', `/api/v1/approvals/${id}`, { token: mallorySession })).status, 404);
    const bad = await decide(id, { decision: 'maybe' });
    assert.equal(bad.status, 400);
    const badScope = await decide(id, { decision: 'approve', scope: 'forever' });
    assert.equal(badScope.status, 400);
    assert.match(badScope.json.error, /field 'scope' must be once, session or key/);
    // still pending after all that
    assert.equal((await api('GET', `/api/v1/approvals/${id}`, { token: agentKey })).json.status, 'pending');
    // an admin's console session may decide anyone's request
    const add = await cli(['user', 'add', 'root', '--team', 'platform', '--admin'], 'root-password\n');
    assert.equal(add.code, 0, add.stderr);
    const byAdmin = await decide(id, { decision: 'deny' }, await sessionOf('root', 'root-password'));
    assert.equal(byAdmin.status, 200, byAdmin.text);
    assert.equal(byAdmin.json.approval.decidedBy, 'console:root');
    // every decision is audited
    assert.equal(await psqlAt(pg.url, `SELECT actor || ' ' || action FROM audit_log WHERE target = '${id}'`), 'console:root approval.decide');
});

test('once: the approved call passes exactly once, with its body', async () => {
    const body = { timeout: '45m' };
    const id = assertChallenge(await native('PUT', '/v1/sandboxes/sbx-1/timeout', { body }), 'sandbox.update', "change a sandbox's timeout (sbx-1)");
    const ok = await decide(id, { decision: 'approve' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.approval.status, 'approved');
    assert.equal(ok.json.approval.scope, 'once');
    assert.equal(ok.json.approval.decidedBy, 'console:olive');
    // a different call is not covered
    assertChallenge(await native('PUT', '/v1/sandboxes/sbx-2/timeout', { body }), 'sandbox.update', "change a sandbox's timeout (sbx-2)");
    const pass = await native('PUT', '/v1/sandboxes/sbx-1/timeout', { body });
    assert.equal(pass.status, 200, pass.text);
    assert.equal(pass.json.reached, true);
    const got = reached((x) => x.method === 'PUT' && x.path === '/v1/sandboxes/sbx-1/timeout');
    assert.equal(got.length, 1);
    assert.deepEqual(JSON.parse(got[0].body), body);
    const poll = await api('GET', `/api/v1/approvals/${id}`, { token: agentKey });
    assert.ok(poll.json.consumedAt, 'consumed on use');
    const again = await native('PUT', '/v1/sandboxes/sbx-1/timeout', { body });
    assert.notEqual(assertChallenge(again, 'sandbox.update', "change a sandbox's timeout (sbx-1)"), id, 'consumed: a new request');
    const twice = await decide(id, { decision: 'deny' });
    assert.equal(twice.status, 400);
    assert.equal(twice.json.error, 'approval request is already approved');
});

test('session scope: every call of that operation with the same X-AgentBox-Session-Id passes', async () => {
    const h = { 'X-AgentBox-Session-Id': 'run-42' };
    const id = assertChallenge(await native('POST', '/v1/envs/web/sandboxpools', { headers: h, body: { name: 'a' } }), 'pool.create', 'add a pool to an env (web)');
    const ok = await decide(id, { decision: 'approve', scope: 'session' });
    assert.equal(ok.status, 200, ok.text);
    assert.match(ok.json.grant.grantId, /^grn_[0-9a-f]{16}$/);
    assert.equal(ok.json.grant.sessionId, 'run-42');
    for (const name of ['a', 'b', 'c'])
        assert.equal((await native('POST', '/v1/envs/web/sandboxpools', { headers: h, body: { name } })).status, 201);
    assertChallenge(await native('POST', '/v1/envs/web/sandboxpools', { body: { name: 'd' } }), 'pool.create', 'add a pool to an env (web)');
    assertChallenge(await native('POST', '/v1/envs/web/sandboxpools', { headers: { 'X-AgentBox-Session-Id': 'run-43' }, body: { name: 'd' } }), 'pool.create', 'add a pool to an env (web)');
    // another operation is not covered by the grant
    assertChallenge(await native('POST', '/v1/envs', { headers: h, body: { name: 'x' } }), 'env.create', 'create an env');
    // session scope needs a request that carried a session id
    const noSess = assertChallenge(await native('POST', '/v1/envs', { body: { name: 'y' } }), 'env.create', 'create an env');
    const refused = await decide(noSess, { decision: 'approve', scope: 'session' });
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.json.error, /scope 'session' needs a request that sent X-AgentBox-Session-Id/);
});

test('key scope: the operation passes for that key until the grant is revoked (by a session only)', async () => {
    const id = assertChallenge(await native('PUT', '/v1/envs/web', { body: { mode: 'a' } }), 'env.update', 'update an env (web)');
    const ok = await decide(id, { decision: 'approve', scope: 'key' });
    assert.equal(ok.status, 200, ok.text);
    const gid = ok.json.grant.grantId;
    assert.match(gid, /^grk_[A-Za-z0-9_-]+$/);
    assert.equal((await native('PUT', '/v1/envs/api', { body: { mode: 'b' } })).status, 200);
    // another key of the same owner is not covered
    const sibling = (await createKey(pg.url, 'ops', 'olive', ['--agent'])).token;
    assertChallenge(await native('PUT', '/v1/envs/api', { token: sibling, body: { mode: 'b' } }), 'env.update', 'update an env (api)');
    const list = await api('GET', '/api/clusters/alpha/v1/approvals', { token: agentKey });
    assert.equal(list.status, 200, list.text);
    assert.ok(list.json.grants.some((g) => g.grantId === gid && g.scope === 'key' && g.operation === 'env.update'), list.text);
    assert.ok(Array.isArray(list.json.pending) && list.json.pending.length > 0);
    assert.ok(list.json.pending.every((p) => p.status === 'pending'));
    const byAgent = await api('DELETE', `/api/v1/approvals/grants/${gid}`, { token: agentKey });
    assert.equal(byAgent.status, 404);
    assert.equal(byAgent.json.error, 'grant not found');
    const byOther = await api('DELETE', `/api/v1/approvals/grants/${gid}`, { token: mallorySession });
    assert.equal(byOther.status, 404);
    const rev = await api('DELETE', `/api/v1/approvals/grants/${gid}`, { token: oliveSession });
    assert.equal(rev.status, 204, rev.text);
    assertChallenge(await native('PUT', '/v1/envs/api', { body: { mode: 'b' } }), 'env.update', 'update an env (api)');
});

test('once-only operations refuse session and key scope', async () => {
    const h = { 'X-AgentBox-Session-Id': 'run-7' };
    const id = assertChallenge(await native('DELETE', '/v1/sandboxes/sbx-5', { headers: h }), 'sandbox.delete', 'delete a sandbox (sbx-5)', true);
    for (const scope of ['session', 'key']) {
        const r = await decide(id, { decision: 'approve', scope });
        assert.equal(r.status, 400, r.text);
        assert.equal(r.json.error, 'this operation can only be approved one call at a time');
    }
    assert.equal((await decide(id, { decision: 'approve' })).status, 200);
    assert.equal((await native('DELETE', '/v1/sandboxes/sbx-5', { headers: h })).status, 200);
    assertChallenge(await native('DELETE', '/v1/sandboxes/sbx-6', { headers: h }), 'sandbox.delete', 'delete a sandbox (sbx-6)', true);
});

test('deny: the call stays refused; a retry asks again', async () => {
    const id = assertChallenge(await native('POST', '/v1/sandboxes/sbx-3/exec', { body: { command: 'rm -rf /' } }), 'sandbox.exec', 'run a command in a sandbox (sbx-3)');
    const no = await decide(id, { decision: 'deny' });
    assert.equal(no.status, 200, no.text);
    assert.equal(no.json.approval.status, 'denied');
    const retry = await native('POST', '/v1/sandboxes/sbx-3/exec', { body: { command: 'rm -rf /' } });
    assert.notEqual(assertChallenge(retry, 'sandbox.exec', 'run a command in a sandbox (sbx-3)'), id);
    assert.equal(reached((x) => x.path === '/v1/sandboxes/sbx-3/exec').length, 0);
    const late = await decide(id, { decision: 'approve' });
    assert.equal(late.status, 400);
    assert.equal(late.json.error, 'approval request is already denied');
});

test('forbidden: an agent key creating an api key is 403 FORBIDDEN_FOR_AGENT, no approval made', async () => {
    const count = async () => Number(await psqlAt(pg.url, 'SELECT count(*) FROM approval_requests'));
    const n = await count();
    const r = await native('POST', '/v1/api-keys', { body: { name: 'escape' } });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.errorCode, 'FORBIDDEN_FOR_AGENT');
    assert.match(r.json.error, /^this credential may not create an api key: issuing a credential would let it act without the approval gate/);
    assert.equal(r.json.detail.operation, 'apikey.create');
    assert.equal(await count(), n);
    assert.equal(reached((x) => x.path === '/v1/api-keys').length, 0);
    // the hub's own key route says the same
    const own = await api('POST', '/api/v1/api-keys', { token: agentKey, body: { name: 'escape' } });
    assert.equal(own.status, 403);
    assert.equal(own.json.errorCode, 'FORBIDDEN_FOR_AGENT');
    // and an unrestricted key of the same user is not gated at all
    assert.equal((await native('POST', '/v1/api-keys', { token: plainKey, body: { name: 'ok' } })).status, 201);
});

test('the hub\'s own gated route: an agent key revoking a key waits for a person, once', async () => {
    const victim = await createKey(pg.url, 'ops', 'olive');
    const r = await api('DELETE', `/api/v1/api-keys/${victim.id}`, { token: agentKey });
    const id = assertChallenge(r, 'apikey.delete', `delete an api key (${victim.id})`, true);
    const poll = await api('GET', `/api/v1/approvals/${id}`, { token: agentKey });
    assert.equal(poll.json.cluster, null, 'the hub\'s own route names no cluster');
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token: victim.token })).status, 200, 'not revoked yet');
    assert.equal((await decide(id, { decision: 'approve', scope: 'key' })).status, 400, 'once-only');
    assert.equal((await decide(id, { decision: 'approve' })).status, 200);
    assert.equal((await api('DELETE', `/api/v1/api-keys/${victim.id}`, { token: agentKey })).status, 204);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token: victim.token })).status, 401);
    // an unrestricted key revokes without asking
    const other = await createKey(pg.url, 'ops', 'olive');
    assert.equal((await api('DELETE', `/api/v1/api-keys/${other.id}`, { token: plainKey })).status, 204);
});

test('expiry: a pending request expires; deciding it then is refused', async () => {
    const short = await startHub(pg.url, { args: ['--approval-ttl', '1s'] });
    cleanups.push(() => short.proc.stop());
    const r = await api('POST', '/api/clusters/alpha/v1/envs', { token: agentKey, body: { name: 'exp' }, base: short.base });
    const id = assertChallenge(r, 'env.create', 'create an env');
    await waitFor(async () => (await api('GET', `/api/v1/approvals/${id}`, { token: agentKey, base: short.base })).json.status === 'expired', {
        timeoutMs: 10000, what: 'the 1 s approval request to expire',
    });
    const late = await decide(id, { decision: 'approve' }, oliveSession, short.base);
    assert.equal(late.status, 400, late.text);
    assert.match(late.json.error, /^approval request expired at /);
    const list = await api('GET', '/api/v1/approvals', { token: oliveSession, base: short.base });
    assert.ok(!list.json.pending.some((p) => p.approvalId === id), 'expired requests leave the pending list');
});

test('an agent asks the hub for its own native API: POST /internal/v1/approvals/gate with the caller\'s assertion', async () => {
    const sha = (b) => crypto.createHash('sha256').update(b).digest('hex');
    const v = await alpha.call('POST', '/internal/v1/keys/validate', { body: { hash: sha(agentKey) } });
    assert.equal(v.status, 200, v.text);
    const assertion = v.json.assertion;
    const ask = (body, headers = { 'X-AgentBox-Assertion': assertion }) => alpha.call('POST', '/internal/v1/approvals/gate', { headers, body });
    const q = { method: 'DELETE', path: '/v1/envs/direct', bodySha256: sha('') };
    assert.equal((await ask(q, {})).status, 401, 'no assertion, no answer');
    const first = await ask(q);
    const id = assertChallenge(first, 'env.delete', 'delete an env (direct)', true);
    assert.equal((await ask(q)).json.detail.approvalId, id);
    assert.equal((await decide(id, { decision: 'approve' })).status, 200);
    const ok = await ask(q);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(ok.json, { allowed: true });
    assertChallenge(await ask(q), 'env.delete', 'delete an env (direct)', true); // used up
    // the same store as the hub's relay: the grant is for the call, whichever way it comes
    const viaHub = assertChallenge(await native('DELETE', '/v1/envs/both'), 'env.delete', 'delete an env (both)', true);
    assert.equal((await ask({ ...q, path: '/v1/envs/both' })).json.detail.approvalId, viaHub);
    const forbidden = await ask({ method: 'POST', path: '/v1/api-keys', bodySha256: sha('{}') });
    assert.equal(forbidden.status, 403, forbidden.text);
    assert.equal(forbidden.json.errorCode, 'FORBIDDEN_FOR_AGENT');
    assert.deepEqual((await ask({ method: 'GET', path: '/v1/envs', bodySha256: sha('') })).json, { allowed: true });
    // an unrestricted key's assertion is never gated
    const pv = await alpha.call('POST', '/internal/v1/keys/validate', { body: { hash: sha(plainKey) } });
    assert.deepEqual((await ask(q, { 'X-AgentBox-Assertion': pv.json.assertion })).json, { allowed: true });
    const bad = await ask({ method: 'DELETE', path: '/v1/envs/x', bodySha256: 'nothex' });
    assert.equal(bad.status, 400);
});

test('grants and approvals live in PostgreSQL: they survive a hub restart', async () => {
    const kid = assertChallenge(await native('DELETE', '/v1/envs/web/autoscaling/groups/g1'), 'autoscaling.delete', 'delete a scaling group (web/g1)', true);
    assert.equal((await decide(kid, { decision: 'approve' })).status, 200);
    const gid = assertChallenge(await native('PUT', '/v1/envs/web/autoscaling/groups/g1', { body: { max: 3 } }), 'autoscaling.update', 'update a scaling group (web/g1)');
    assert.equal((await decide(gid, { decision: 'approve', scope: 'key' })).status, 200);
    const pid = assertChallenge(await native('POST', '/v1/sandboxes', { body: { poolName: 'restart' } }), 'sandbox.create', 'create a sandbox');

    const { port, tunnelPort } = hub;
    alpha.close();
    await hub.proc.stop();
    hub = await startHub(pg.url, { port, tunnelPort });
    alpha = await connectAlpha(hub);
    assert.equal((await native('DELETE', '/v1/envs/web/autoscaling/groups/g1')).status, 200, 'the once-approval survived');
    assert.equal((await native('PUT', '/v1/envs/web/autoscaling/groups/g1', { body: { max: 9 } })).status, 200, 'the key grant survived');
    assert.equal((await native('POST', '/v1/sandboxes', { body: { poolName: 'restart' } })).json.detail.approvalId, pid, 'the pending request survived');
    // and the session survived too
    assert.equal((await api('GET', '/api/auth/session', { token: oliveSession })).status, 200);
});
