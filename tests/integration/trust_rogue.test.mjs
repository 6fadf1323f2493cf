// A rogue-but-registered cluster (issue 13): a test tunnel client registered
// as its own cluster tries what a compromised agent would. Every row fails on
// the code before principal assertions: the vault answered any
// {namespace, user, names}, a key's SHA-256 was a bearer credential on the
// public bridge, and the hub delivered callers' raw keys to the owning cluster.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import {
    startPostgres, startHub, runMigrate, addCluster, startAgent, waitClusterOnline, createKey,
    hubSecret, waitFor, metricValue, run, hubBin,
} from './lib/harness.mjs';
import { connectTunnel, hubAssertionKey, signAssertion } from './lib/tunnel_client.mjs';

let pg, hub, rogue, alpha, victim, mallory;
const cleanups = [];
const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');
const claimsOf = (tok) => JSON.parse(Buffer.from(tok.split('.')[0], 'base64url').toString());
const now = () => Math.floor(Date.now() / 1000);
const B = '/internal/v1/public';

before(async () => {
    pg = await startPostgres();
    cleanups.push(() => pg.cleanup());
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    hub = await startHub(pg.url);
    cleanups.push(() => hub.proc.stop());
    victim = await createKey(pg.url, 'acme', 'victim');
    mallory = await createKey(pg.url, 'evil', 'mallory');
    const token = await addCluster(pg.url, 'rogue');
    // the hub learns of a new cluster on its next registry sync: retry until it does
    rogue = await waitFor(async () => {
        try {
            return await connectTunnel({ port: hub.tunnelPort, cluster: 'rogue', token });
        } catch (e) {
            if (/HTTP 401/.test(e.message)) return null;
            throw e;
        }
    }, { timeoutMs: 15000, what: 'the rogue cluster accepted on the tunnel' });
    cleanups.push(() => rogue.close());
    const at = await addCluster(pg.url, 'alpha');
    alpha = await startAgent('alpha', { hubUrl: hub.tunnelUrl, token: at });
    cleanups.push(() => alpha.proc.stop());
    await waitClusterOnline(hub.base, 'alpha');
});
after(async () => {
    for (const fn of cleanups.reverse()) await fn();
});

// The hub's validation of a key the rogue was shown (its own user's): principal + assertion.
async function validate(token) {
    const r = await rogue.call('POST', '/internal/v1/keys/validate', { body: { hash: sha(token) } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.valid, true, r.text);
    return r.json;
}

async function hubJson(method, path, key, body) {
    const res = await fetch(`${hub.base}${path}`, {
        method, headers: { 'X-API-Key': key, ...(body ? { 'Content-Type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
    });
    const text = await res.text();
    let json = null;
    try { json = JSON.parse(text); } catch { /* not JSON */ }
    return { status: res.status, text, json };
}

test('WELCOME carries the key derived from the hub secret; validation answers an assertion for the asking cluster', async () => {
    const k = hubAssertionKey(hubSecret);
    assert.deepEqual(rogue.welcome.assertionKeys, [k.text]);
    const v = await validate(mallory.token);
    const c = claimsOf(v.assertion);
    assert.equal(c.aud, 'rogue');
    assert.equal(c.user, 'mallory');
    assert.equal(c.key, mallory.id);
    assert.ok(c.exp - c.iat <= 300 && c.exp > now());
    assert.ok(!JSON.stringify(v).includes(mallory.token), 'the raw key is never in the answer');
});

test('the public bridge refuses a bare key hash and takes only an assertion made for this cluster', async () => {
    // hash only: the old bearer credential
    const h = await rogue.call('GET', `${B}/e2b/secrets`, { headers: { 'X-AgentBox-Key-Hash': sha(victim.token) } });
    assert.equal(h.status, 401, h.text);
    assert.match(h.text, /assertion/);
    for (const path of [`${B}/api/v1/api-keys`]) {
        const r = await rogue.call('GET', path, { headers: { 'X-AgentBox-Key-Hash': sha(victim.token) } });
        assert.equal(r.status, 401, r.text);
        assert.ok(!r.text.includes('rawToken'), r.text);
        const mint = await rogue.call('POST', path, { headers: { 'X-AgentBox-Key-Hash': sha(victim.token) }, body: { name: 'stolen' } });
        assert.equal(mint.status, 401, mint.text);
    }
    // the rogue's own user, with the hub's assertion for it: fine
    const v = await validate(mallory.token);
    const ok = await rogue.call('GET', `${B}/e2b/secrets`, { headers: { 'X-AgentBox-Assertion': v.assertion } });
    assert.equal(ok.status, 200, ok.text);
    // an unrestricted owner's key listing: token material only when the owner calls the hub directly
    const listed = await rogue.call('GET', `${B}/api/v1/api-keys`, { headers: { 'X-AgentBox-Assertion': v.assertion } });
    assert.equal(listed.status, 200, listed.text);
    assert.ok(JSON.stringify(listed.json).includes(mallory.id), listed.text);
    assert.ok(!listed.text.includes('rawToken') && !listed.text.includes(mallory.token), listed.text);
    const direct = await fetch(`${hub.base}/api/v1/api-keys`, { headers: { Authorization: `Bearer ${mallory.token}` } });
    assert.ok((await direct.text()).includes(mallory.token), 'the console (direct) still gets rawToken');
});

test('an agent-mode key is never listed with its token, not even directly', async () => {
    const ag = await createKey(pg.url, 'evil', 'mallory3', ['--agent']);
    const owner = await createKey(pg.url, 'evil', 'mallory3');
    const r = await fetch(`${hub.base}/api/v1/api-keys`, { headers: { Authorization: `Bearer ${owner.token}` } });
    const text = await r.text();
    assert.equal(r.status, 200, text);
    assert.ok(text.includes(ag.id), text);
    assert.ok(!text.includes(ag.token), `agent-mode token listed: ${text}`);
    assert.ok(text.includes(owner.token), 'the unrestricted key is');
});

test('expired, wrong-audience and foreign-key assertions are refused on the bridge and the relay', async () => {
    const k = hubAssertionKey(hubSecret);
    const base = { key: victim.id, team: 'acme', user: 'victim', ns: 'acme-victim' };
    const wrongAud = signAssertion(k, { ...base, aud: 'alpha', iat: now(), exp: now() + 120 });
    const expired = signAssertion(k, { ...base, aud: 'rogue', iat: now() - 400, exp: now() - 200 });
    const other = hubAssertionKey(crypto.randomBytes(32).toString('hex'));
    const foreign = signAssertion(other, { ...base, aud: 'rogue', iat: now(), exp: now() + 120 });
    for (const [tok, why] of [[wrongAud, /for cluster 'alpha'/], [expired, /expired/], [foreign, /signing key/]]) {
        const r = await rogue.call('GET', `${B}/e2b/secrets`, { headers: { 'X-AgentBox-Assertion': tok } });
        assert.equal(r.status, 401, r.text);
        assert.match(r.text, why);
        const relay = await rogue.call('GET', '/sandboxes', {
            service: 'relay',
            headers: { 'X-AgentBox-Target-Cluster': 'alpha', 'X-AgentBox-Target-Service': 'e2b', 'X-AgentBox-Assertion': tok },
        });
        assert.equal(relay.status, 401, relay.text);
    }
});

test('an agent takes assertions only over the tunnel; a relay re-signs for the target', async () => {
    const k = hubAssertionKey(hubSecret);
    const vp = (await validate(victim.token)).principal;
    const forged = signAssertion(k, { key: victim.id, team: 'acme', user: 'victim', ns: vp.namespace, aud: 'alpha', iat: now(), exp: now() + 120 });
    // straight to alpha's listener, not from the hub: refused even though the signature is good
    const direct = await fetch(`${alpha.e2b}/sandboxes`, { headers: { 'X-AgentBox-Assertion': forged } });
    assert.equal(direct.status, 401, await direct.text());
    // over the rogue's tunnel, made for the rogue: the hub makes one for alpha, and alpha accepts it
    const mv = await validate(mallory.token);
    const relay = await rogue.call('GET', '/sandboxes', {
        service: 'relay',
        headers: { 'X-AgentBox-Target-Cluster': 'alpha', 'X-AgentBox-Target-Service': 'e2b', 'X-AgentBox-Assertion': mv.assertion },
    });
    assert.equal(relay.status, 200, relay.text);
    // a raw key relayed by a cluster is dropped by the hub, never delivered: alpha sees no credential
    const raw = await rogue.call('GET', '/sandboxes', {
        service: 'relay',
        headers: { 'X-AgentBox-Target-Cluster': 'alpha', 'X-AgentBox-Target-Service': 'e2b', 'X-API-Key': mallory.token },
    });
    assert.equal(raw.status, 401, raw.text);
});

test('an assertion replayed after its key was revoked is refused', async () => {
    const k = await createKey(pg.url, 'evil', 'mallory2');
    const v = await validate(k.token);
    const use = () => rogue.call('GET', `${B}/e2b/secrets`, { headers: { 'X-AgentBox-Assertion': v.assertion } });
    assert.equal((await use()).status, 200);
    const del = await fetch(`${hub.base}/api/v1/api-keys/${k.id}`, { method: 'DELETE', headers: { Authorization: `Bearer ${k.token}` } });
    assert.ok(del.status === 200 || del.status === 204, `revoke: ${del.status} ${await del.text()}`);
    // the agents are told, by key id
    await waitFor(() => rogue.events.some((e) => e.type === 'key_revoked' && e.keyId === k.id), { what: 'key_revoked EVENT with keyId' });
    const again = await use();
    assert.equal(again.status, 401, again.text);
    assert.match(again.text, /revoked/);
});

test('the vault answers claims: no claim, another principal or an unreferenced name is refused and audited', async () => {
    // the victim's secret and a sandbox claimed for the victim on alpha
    assert.equal((await hubJson('POST', '/e2b/secrets', victim.token, { name: 'OPENAI_API_KEY', value: 'sk-victim-value' })).status, 201);
    const vp = (await validate(victim.token)).principal;
    const victimSbx = `alpha-${'v'.repeat(20)}`;
    await pg.psql(`INSERT INTO sandboxes (id, cluster_id, namespace, team, user_name, state, claimed_at)
                   VALUES ('${victimSbx}', 'alpha', '${vp.namespace}', 'acme', 'victim', 'claimed', now())`);
    const resolve = (headers, sandboxId, names) =>
        rogue.call('POST', '/internal/v1/vault/resolve', { headers, body: { sandboxId, names } });
    // the old request shape, no assertion: refused
    const bare = await rogue.call('POST', '/internal/v1/vault/resolve',
        { body: { namespace: vp.namespace, user: 'victim', names: ['OPENAI_API_KEY'] } });
    assert.ok(bare.status === 400 || bare.status === 401, bare.text);
    const noAsrt = await resolve({}, victimSbx, ['OPENAI_API_KEY']);
    assert.equal(noAsrt.status, 401, noAsrt.text);
    // mallory's own assertion, naming the victim's sandbox
    const mv = await validate(mallory.token);
    const cross = await resolve({ 'X-AgentBox-Assertion': mv.assertion }, victimSbx, ['OPENAI_API_KEY']);
    assert.equal(cross.status, 403, cross.text);
    assert.ok(!cross.text.includes('sk-victim-value'));
    // mallory's own sandbox on rogue, whose claim references GH only
    assert.equal((await hubJson('POST', '/e2b/secrets', mallory.token, { name: 'GH', value: 'gh-mallory' })).status, 201);
    assert.equal((await hubJson('POST', '/e2b/secrets', mallory.token, { name: 'OTHER', value: 'other-mallory' })).status, 201);
    const own = `rogue-${'m'.repeat(20)}`;
    const ev = await rogue.call('POST', '/internal/v1/sandbox-events', {
        body: { events: [{ type: 'claimed', id: own, namespace: mv.principal.namespace, team: 'evil', user: 'mallory', at: Date.now(), assertion: mv.assertion, metadata: { 'agentbox.scitix.ai/secret-names': ['GH'] } }] },
    });
    assert.ok(ev.status === 200 || ev.status === 204, ev.text);
    const unref = await resolve({ 'X-AgentBox-Assertion': mv.assertion }, own, ['OTHER']);
    assert.equal(unref.status, 403, unref.text);
    assert.ok(!unref.text.includes('other-mallory'));
    const good = await resolve({ 'X-AgentBox-Assertion': mv.assertion }, own, ['GH']);
    assert.equal(good.status, 200, good.text);
    assert.deepEqual(good.json.secrets.map((s) => [s.name, s.value]), [['gh', 'gh-mallory']]);
    // every resolve is an audit row; never a value
    const rows = await pg.psql(`SELECT outcome || ' ' || target FROM audit_log WHERE action = 'vault.resolve' AND cluster_id = 'rogue' ORDER BY id`);
    const lines = rows.trim().split('\n');
    assert.deepEqual(lines, [`denied ${victimSbx}`, `denied ${victimSbx}`, `denied ${own}`, `ok ${own}`]);
    const details = await pg.psql(`SELECT details::text FROM audit_log WHERE action = 'vault.resolve'`);
    assert.match(details, /evil\/mallory/);
    assert.ok(!/sk-victim-value|gh-mallory|other-mallory/.test(details), details);
});

test('a claim event makes a row only with an assertion for the sending cluster of the claimed principal', async () => {
    // the victim's secret; the rogue holds an assertion of the victim made for
    // it (the victim once used the rogue) but the victim never created there
    assert.equal((await hubJson('POST', '/e2b/secrets', victim.token, { name: 'CLAIMROWS', value: 'claimrows-victim' })).status, 201);
    const vv = await validate(victim.token);
    const vp = vv.principal;
    const mv = await validate(mallory.token);
    const series = 'agentbox_sandbox_events_dropped_total{cluster="rogue",reason="assertion"}';
    const before = (await metricValue(hub.base, series)) || 0;
    const k = hubAssertionKey(hubSecret);
    const forAlpha = signAssertion(k, { key: victim.id, team: 'acme', user: 'victim', ns: vp.namespace, aud: 'alpha', iat: now(), exp: now() + 120 });
    const ids = ['n', 'a', 'w'].map((c) => `rogue-${c.repeat(20)}`);
    const claim = (id, assertion) => ({
        type: 'claimed', id, namespace: vp.namespace, team: 'acme', user: 'victim', at: Date.now(),
        ...(assertion ? { assertion } : {}), metadata: { 'agentbox.scitix.ai/secret-names': ['CLAIMROWS'] },
    });
    // none; the victim's for another cluster; mallory's own (another principal)
    const ev = await rogue.call('POST', '/internal/v1/sandbox-events', {
        body: { events: [claim(ids[0]), claim(ids[1], forAlpha), claim(ids[2], mv.assertion)] },
    });
    assert.ok(ev.status === 200 || ev.status === 204, ev.text);
    // later events of those ids do not make the row either
    const armed = await rogue.call('POST', '/internal/v1/sandbox-events', {
        body: { events: ids.map((id) => ({ type: 'armed', id, namespace: vp.namespace, team: 'acme', user: 'victim', at: Date.now() })) },
    });
    assert.ok(armed.status === 200 || armed.status === 204, armed.text);
    const rows = await pg.psql(`SELECT count(*) FROM sandboxes WHERE id IN ('${ids.join("','")}')`);
    assert.equal(rows.trim(), '0');
    assert.equal(await metricValue(hub.base, series), before + 3);
    for (const id of ids) {
        const r = await rogue.call('POST', '/internal/v1/vault/resolve',
            { headers: { 'X-AgentBox-Assertion': vv.assertion }, body: { sandboxId: id, names: ['CLAIMROWS'] } });
        assert.equal(r.status, 403, r.text);
        assert.ok(!r.text.includes('claimrows-victim'));
    }
});

test('the raw key never reaches the owning cluster: front door and cluster:: forwards carry an assertion for it', async () => {
    rogue.received.length = 0;
    // through the hub's front door, with a cluster-pinned template
    const front = await fetch(`${hub.base}/e2b/sandboxes`, {
        method: 'POST', headers: { 'X-API-Key': victim.token, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'rogue::pool' }),
    });
    await front.text();
    // through another cluster: alpha forwards `rogue::` creates over the hub
    const fwd = await fetch(`${alpha.e2b}/sandboxes`, {
        method: 'POST', headers: { 'X-API-Key': victim.token, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'rogue::pool' }),
    });
    await fwd.text();
    await waitFor(() => rogue.received.filter((r) => r.path === '/sandboxes').length >= 2, { what: 'both creates at the rogue' });
    const hashOfKey = sha(victim.token);
    for (const r of rogue.received) {
        const wire = JSON.stringify(r.headers) + r.body + r.path;
        assert.ok(!wire.includes(victim.token), `raw key delivered to the rogue: ${wire}`);
        assert.ok(!wire.includes(victim.token.slice(5)), 'not even without its prefix');
        assert.ok(!wire.includes(hashOfKey), 'nor its hash');
        const a = r.headers.find(([n]) => n.toLowerCase() === 'x-agentbox-assertion');
        assert.ok(a, `an assertion instead: ${JSON.stringify(r.headers)}`);
        const c = claimsOf(a[1]);
        assert.equal(c.aud, 'rogue');
        assert.equal(c.user, 'victim');
    }
});

test("a tenant's key churn is limited, so it cannot flood the agents' revoked-key sets", async () => {
    // every revocation is an entry in every agent's set for ~6 minutes; the
    // hub caps each user's creates plus revokes per minute (429 naming it)
    const api = async (method, path, token, body) => {
        const res = await fetch(`${hub.base}${path}`, {
            method, headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
            body: body ? JSON.stringify(body) : undefined,
        });
        const text = await res.text();
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        return { status: res.status, text, json };
    };
    const k = await createKey(pg.url, 'churn', 'fast');
    const codes = [];
    let refused;
    for (let i = 0; i < 40 && !refused; i++) {
        const c = await api('POST', '/api/v1/api-keys', k.token, { name: `k${i}` });
        codes.push(c.status);
        if (c.status === 201) {
            const d = await api('DELETE', `/api/v1/api-keys/${c.json.id}`, k.token);
            codes.push(d.status);
            if (d.status === 429) refused = d;
        } else {
            refused = c;
        }
    }
    assert.ok(refused, `never refused: ${codes.join(',')}`);
    assert.equal(refused.status, 429);
    // 30 changes (creates and revokes) went through, the 31st did not
    assert.equal(codes.filter((s) => s === 201 || s === 204).length, 30, codes.join(','));
    assert.equal(refused.json.errorCode, 'RATE_LIMITED');
    assert.match(refused.json.error, /at most 30 creates and revokes per user per minute/);
    // another user is not affected
    const o = await createKey(pg.url, 'churn', 'slow');
    const c = await api('POST', '/api/v1/api-keys', o.token, { name: 'fine' });
    assert.equal(c.status, 201, c.text);
});

test('a claim row needs the assertion of that create: one a read delivered, or a create already claimed, records nothing', async () => {
    // a victim who never created on the rogue, only looked something up there through the hub
    const v2 = await createKey(pg.url, 'acme', 'victim2');
    assert.equal((await hubJson('POST', '/e2b/secrets', v2.token, { name: 'BOUND', value: 'bound-victim2' })).status, 201);
    const ns = (await validate(v2.token)).principal.namespace;
    rogue.received.length = 0;
    const peek = await fetch(`${hub.base}/e2b/sandboxes/rogue-${'p'.repeat(20)}`, { headers: { 'X-API-Key': v2.token } });
    await peek.text();
    const got = await waitFor(() => rogue.received.find((r) => r.method === 'GET'), { what: 'the read at the rogue' });
    const readAsrt = got.headers.find(([n]) => n.toLowerCase() === 'x-agentbox-assertion')[1];
    assert.equal(claimsOf(readAsrt).user, 'victim2');
    assert.equal(claimsOf(readAsrt).aud, 'rogue');
    const claimWith = async (id, assertion) => {
        const ev = await rogue.call('POST', '/internal/v1/sandbox-events', {
            body: { events: [{ type: 'claimed', id, namespace: ns, team: 'acme', user: 'victim2', at: Date.now(), assertion, metadata: { 'agentbox.scitix.ai/secret-names': ['BOUND'] } }] },
        });
        assert.ok(ev.status === 200 || ev.status === 204, ev.text);
    };
    const resolve = (id, assertion) => rogue.call('POST', '/internal/v1/vault/resolve',
        { headers: { 'X-AgentBox-Assertion': assertion }, body: { sandboxId: id, names: ['BOUND'] } });
    const rows = async (id) => (await pg.psql(`SELECT count(*) FROM sandboxes WHERE id = '${id}'`)).trim();
    // the read's assertion: valid, for the rogue, of the victim — and no claim
    const fake = `rogue-${'f'.repeat(20)}`;
    await claimWith(fake, readAsrt);
    assert.equal(await rows(fake), '0');
    const r1 = await resolve(fake, readAsrt);
    assert.equal(r1.status, 403, r1.text);
    assert.ok(!r1.text.includes('bound-victim2'));
    // the victim creates on the rogue once: one claim row, not two
    rogue.received.length = 0;
    const cr = await fetch(`${hub.base}/e2b/sandboxes`, {
        method: 'POST', headers: { 'X-API-Key': v2.token, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'rogue::pool' }),
    });
    await cr.text();
    const post = await waitFor(() => rogue.received.find((r) => r.method === 'POST' && r.path === '/sandboxes'), { what: 'the create at the rogue' });
    const createAsrt = post.headers.find(([n]) => n.toLowerCase() === 'x-agentbox-assertion')[1];
    const real = `rogue-${'r'.repeat(20)}`;
    const extra = `rogue-${'x'.repeat(20)}`;
    await claimWith(real, createAsrt);
    await claimWith(extra, createAsrt);
    assert.equal(await rows(real), '1');
    assert.equal(await rows(extra), '0');
    const ok = await resolve(real, createAsrt);
    assert.equal(ok.status, 200, ok.text);
    const no = await resolve(extra, createAsrt);
    assert.equal(no.status, 403, no.text);
    assert.ok(!no.text.includes('bound-victim2'));
});

test('signing key rotation: connected agents learn it without reconnecting, the previous key verifies until retired, unknown kids are refused', async () => {
    const g0 = hubAssertionKey(hubSecret, 0);
    const g1 = hubAssertionKey(hubSecret, 1);
    const g2 = hubAssertionKey(hubSecret, 2);
    assert.deepEqual(rogue.welcome.assertionKeys, [g0.text]);
    const rotate = (...args) => run(hubBin(), ['signing-key', 'rotate', ...args], {
        env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: hubSecret },
    });
    const keysEvent = (texts) => waitFor(() => rogue.events.find((e) => e.type === 'assertion_keys' &&
        JSON.stringify(e.assertionKeys) === JSON.stringify(texts)), { timeoutMs: 30000, what: `assertion_keys ${texts.length}` });
    const bridge = (tok) => rogue.call('GET', `${B}/e2b/secrets`, { headers: { 'X-AgentBox-Assertion': tok } });
    const t0 = (await validate(mallory.token)).assertion;
    assert.equal(claimsOf(t0).kid, g0.kid);
    const r1 = await rotate();
    assert.equal(r1.code, 0, r1.stderr);
    // the hub tells every connected agent: current first, the previous still published
    await keysEvent([g1.text, g0.text]);
    const t1 = (await validate(mallory.token)).assertion;
    assert.equal(claimsOf(t1).kid, g1.kid, 'new assertions are signed with the new key');
    assert.equal((await bridge(t0)).status, 200, 'an assertion of the previous key verifies within its lifetime');
    assert.equal((await bridge(t1)).status, 200);
    // alpha (a real agent, still on its first tunnel) verifies the new key: the front door signs with it
    const viaFront = await fetch(`${hub.base}/e2b/sandboxes/alpha-${'q'.repeat(20)}`, { headers: { 'X-API-Key': victim.token } });
    const ft = await viaFront.text();
    assert.equal(viaFront.status, 404, ft);
    // a kid the hub never published: refused
    const stranger = hubAssertionKey('some other secret entirely');
    const forged = signAssertion(stranger, { key: mallory.id, team: 'evil', user: 'mallory', ns: claimsOf(t1).ns, aud: 'rogue', iat: now(), exp: now() + 60 });
    const fr = await bridge(forged);
    assert.equal(fr.status, 401, fr.text);
    assert.match(fr.text, /unknown signing key id/);
    // rotating again at once would retire a key with live assertions: refused without --force
    const early = await rotate();
    assert.equal(early.code, 1);
    assert.match(early.stderr, /--force/);
    const r2 = await rotate('--force');
    assert.equal(r2.code, 0, r2.stderr);
    await keysEvent([g2.text, g1.text]);
    // generation 0 is retired: its assertion is refused although unexpired; generation 1's still verifies
    const old = await bridge(t0);
    assert.equal(old.status, 401, old.text);
    assert.match(old.text, /unknown signing key id/);
    assert.equal((await bridge(t1)).status, 200);
    const list = await run(hubBin(), ['signing-key', 'list'], { env: { ...process.env, DATABASE_URL: pg.url } });
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(`^0\\t${g0.kid}\\tretired`, 'm'));
    assert.match(list.stdout, new RegExp(`^1\\t${g1.kid}\\tprevious`, 'm'));
    assert.match(list.stdout, new RegExp(`^2\\t${g2.kid}\\tcurrent`, 'm'));
    // a hub started now publishes the generations in the database, not generation 0
    const hub2 = await startHub(pg.url);
    cleanups.push(() => hub2.proc.stop());
    const t2 = await addCluster(pg.url, 'rogue2');
    const r2c = await waitFor(async () => {
        try {
            return await connectTunnel({ port: hub2.tunnelPort, cluster: 'rogue2', token: t2 });
        } catch (e) {
            if (/HTTP 401/.test(e.message)) return null;
            throw e;
        }
    }, { timeoutMs: 15000, what: 'rogue2 on the second hub' });
    cleanups.push(() => r2c.close());
    assert.deepEqual(r2c.welcome.assertionKeys, [g2.text, g1.text]);
});

test('vault resolves are rate-limited per cluster (429 naming the limit), other clusters unaffected', async () => {
    // sent at once: the bucket (20 a second, bounded burst) cannot refill in between
    const body = { sandboxId: `rogue-${'z'.repeat(20)}`, names: ['X'] };
    const answers = await Promise.all(Array.from({ length: 60 }, () =>
        rogue.call('POST', '/internal/v1/vault/resolve', { body })));
    const limited = answers.filter((r) => r.status === 429);
    assert.ok(limited.length > 0, `no 429 among ${answers.map((r) => r.status).join(',')}`);
    assert.match(limited[0].text, /cluster 'rogue' is over 20 vault resolves per second/);
    assert.ok(answers.some((r) => r.status === 401), 'the first ones were answered on their merits');
});

test("a cluster's events for another cluster's sandbox ids are dropped and counted", async () => {
    const series = 'agentbox_sandbox_events_dropped_total{cluster="rogue",reason="foreign_id"}';
    const before = (await metricValue(hub.base, series)) || 0;
    const mv = await validate(mallory.token);
    const theirs = `alpha-${'e'.repeat(20)}`;
    await pg.psql(`INSERT INTO sandboxes (id, cluster_id, namespace, team, user_name, state, claimed_at)
                   VALUES ('${theirs}', 'alpha', '${mv.principal.namespace}', 'evil', 'mallory', 'claimed', now())`);
    const fresh = `alpha-${'g'.repeat(20)}`;
    const ev = await rogue.call('POST', '/internal/v1/sandbox-events', {
        body: { events: [
            // ending alpha's sandbox, and claiming one in alpha's name (with a good assertion of its own user)
            { type: 'released', id: theirs, reason: 'ended', at: Date.now() },
            { type: 'claimed', id: fresh, namespace: mv.principal.namespace, team: 'evil', user: 'mallory', at: Date.now(), assertion: mv.assertion },
        ] },
    });
    assert.ok(ev.status === 200 || ev.status === 204, ev.text);
    assert.equal(await metricValue(hub.base, series), before + 2);
    const rows = await pg.psql(`SELECT id || ' ' || cluster_id || ' ' || state FROM sandboxes WHERE id IN ('${theirs}', '${fresh}')`);
    assert.equal(rows.trim(), `${theirs} alpha claimed`);
});
