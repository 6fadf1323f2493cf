// Hub identity: API keys from the CLI and the /api/v1 API, whoami, revocation,
// expiry, agent mode, admin routes, team namespaces, the audit log.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startPostgres, startHub, runMigrate, run, hubBin, hubSecret, waitFor, psqlAt, consoleSession } from './lib/harness.mjs';

let pg;
let hub;

before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    hub = await startHub(pg.url);
});
after(async () => {
    if (hub) await hub.proc.stop();
    if (pg) await pg.cleanup();
});

const logs = () => `\nhub log:\n${hub.proc.logs()}`;

function cli(args, env = {}) {
    return run(hubBin(), args, {
        env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: hubSecret, ...env },
    });
}

// Creates a key with the CLI; resolves {token, id, stdout}.
async function createKey(team, user, extra = []) {
    const r = await cli(['key', 'create', '--team', team, '--user', user, ...extra]);
    assert.equal(r.code, 0, `key create failed:\n${r.stdout}\n${r.stderr}`);
    const lines = r.stdout.trim().split('\n');
    const token = lines[lines.length - 1];
    assert.match(token, /^agbx_[0-9a-f]{64}$/, `last stdout line is the key:\n${r.stdout}`);
    const id = /created api key (ak_[0-9a-f]{16})/.exec(r.stdout)[1];
    return { token, id, stdout: r.stdout };
}

async function api(method, path, { token, headers = {}, body } = {}) {
    const h = { ...headers };
    if (token) h.Authorization = `Bearer ${token}`;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await fetch(`${hub.base}${path}`, {
        method,
        headers: h,
        body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try {
        json = text ? JSON.parse(text) : undefined;
    } catch {
        json = undefined;
    }
    return { status: res.status, headers: res.headers, text, json };
}

test('key create → whoami → revoke → 401 naming the revocation', async () => {
    const { token, id, stdout } = await createKey('ML', 'Alice', ['--name', 'laptop']);
    assert.match(stdout, /namespace t-ml-alice/);
    assert.match(stdout, /role tenant, mode unrestricted, expires never/);

    const who = await api('GET', '/api/v1/auth/whoami', { token });
    assert.equal(who.status, 200, who.text + logs());
    assert.equal(who.json.role, 'tenant');
    assert.equal(who.json.user, 'Alice');
    assert.equal(who.json.team, 'ML');
    assert.equal(who.json.mode, 'unrestricted');
    assert.equal(who.json.namespace, 't-ml-alice');
    assert.equal(who.json.keyId, id);
    assert.ok(who.headers.get('x-agentbox-server-version'));

    // the other header works too
    const who2 = await api('GET', '/api/v1/auth/whoami', { headers: { 'AGENTBOX-API-KEY': token } });
    assert.equal(who2.status, 200);

    const list = await cli(['key', 'list']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, new RegExp(`${id}\\s+agbx_${token.slice(5, 9)}\\s+ML\\s+Alice\\s+t-ml-alice`));
    assert.ok(!list.stdout.includes(token), 'key list must not print keys');

    const rv = await cli(['key', 'revoke', id]);
    assert.equal(rv.code, 0, rv.stderr);
    assert.match(rv.stdout, new RegExp(`revoked api key ${id}`));
    const after = await api('GET', '/api/v1/auth/whoami', { token });
    assert.equal(after.status, 401);
    assert.equal(after.json.errorCode, 'UNAUTHENTICATED');
    assert.match(after.json.error, /^invalid api key: this key was revoked at \d{4}-\d\d-\d\dT/);

    const again = await cli(['key', 'revoke', id]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /not found \(or already revoked\)/);
    // revoked keys are listed with --all only
    assert.ok(!(await cli(['key', 'list'])).stdout.includes(id));
    assert.match((await cli(['key', 'list', '--all'])).stdout, new RegExp(`${id}.*revoked`));
});

test('401 says what is wrong: missing, malformed, unknown', async () => {
    const none = await api('GET', '/api/v1/auth/whoami');
    assert.equal(none.status, 401);
    assert.match(none.json.error, /^missing api key: send Authorization: Bearer/);
    const bad = await api('GET', '/api/v1/auth/whoami', { token: 'agbx_nothex' });
    assert.equal(bad.status, 401);
    assert.match(bad.json.error, /expected agbx_ followed by 64 lowercase hex/);
    const unknown = await api('GET', '/api/v1/auth/whoami', { token: `agbx_${'0'.repeat(64)}` });
    assert.equal(unknown.status, 401);
    assert.match(unknown.json.error, /no such key; create one with `agentbox-hub key create`/);
    // not Bearer: ignored, so missing
    const basic = await api('GET', '/api/v1/auth/whoami', { headers: { Authorization: 'Basic eDp5' } });
    assert.equal(basic.status, 401);
    assert.match(basic.json.error, /^missing api key/);
});

test('a key created with --expires 1s stops working', async () => {
    const t0 = Date.now();
    const { token } = await createKey('ml', 'exp', ['--expires', '1s']);
    const first = await api('GET', '/api/v1/auth/whoami', { token });
    if (Date.now() - t0 < 800) assert.equal(first.status, 200, first.text);
    const r = await waitFor(async () => {
        const x = await api('GET', '/api/v1/auth/whoami', { token });
        return x.status === 401 ? x : null;
    }, { timeoutMs: 10000, intervalMs: 100, what: 'the expired key to get 401' });
    assert.match(r.json.error, /^invalid api key: this key expired at .*; create a new key/);

    const bad = await cli(['key', 'create', '--team', 'ml', '--user', 'x', '--expires', 'soon']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /expires/);
});

test('agent-mode keys cannot mint keys and never see token material', async () => {
    const agent = await createKey('ml', 'bob', ['--agent']);
    const who = await api('GET', '/api/v1/auth/whoami', { token: agent.token });
    assert.equal(who.json.mode, 'agent');

    const mint = await api('POST', '/api/v1/api-keys', { token: agent.token, body: { name: 'sneaky' } });
    assert.equal(mint.status, 403, mint.text);
    assert.equal(mint.json.errorCode, 'FORBIDDEN_FOR_AGENT');
    assert.match(mint.json.error, /may not create an api key/);
    assert.equal(mint.json.detail.operation, 'apikey.create');

    const own = await api('GET', '/api/v1/api-keys', { token: agent.token });
    assert.equal(own.status, 200);
    assert.ok(own.json.items.length >= 1);
    for (const k of own.json.items) {
        assert.equal(k.rawToken, undefined, 'agent-mode listing must not include rawToken');
        assert.equal(k.user, 'bob');
    }
    assert.ok(!own.text.includes(agent.token));
});

test('self-service keys: list with rawToken, create once, revoke own only', async () => {
    const carol = await createKey('ml', 'carol');
    const dave = await createKey('ml', 'dave');

    const list = await api('GET', '/api/v1/api-keys', { token: carol.token });
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.total, 1);
    const me = list.json.items[0];
    assert.equal(me.id, carol.id);
    assert.equal(me.rawToken, undefined, 'a key never sees token material (issue 16: only a console session)');
    const bySession = await api('GET', '/api/v1/api-keys', { token: await consoleSession(hub.base, 'ml', 'carol') });
    assert.equal(bySession.json.items.find((k) => k.id === carol.id).rawToken, carol.token, 'the owner\'s console session can retrieve the key');
    assert.equal(me.prefix, carol.token.slice(0, 9));
    assert.equal(me.namespace, 't-ml-carol');
    assert.ok(!list.text.includes(dave.token));

    const made = await api('POST', '/api/v1/api-keys', { token: carol.token, body: { name: 'ci', expiresIn: '1h', mode: 'agent' } });
    assert.equal(made.status, 201, made.text);
    assert.match(made.json.key, /^agbx_[0-9a-f]{64}$/);
    assert.equal(made.json.name, 'ci');
    assert.equal(made.json.mode, 'agent');
    assert.equal(made.json.role, 'tenant');
    assert.ok(made.json.expiresAt);
    const who = await api('GET', '/api/v1/auth/whoami', { token: made.json.key });
    assert.equal(who.json.user, 'carol');
    assert.equal(who.json.mode, 'agent');

    const badBody = await api('POST', '/api/v1/api-keys', { token: carol.token, body: { mode: 'root' } });
    assert.equal(badBody.status, 400);
    assert.match(badBody.json.error, /field 'mode' must be/);

    // someone else's key: 404, and it keeps working
    const other = await api('DELETE', `/api/v1/api-keys/${dave.id}`, { token: carol.token });
    assert.equal(other.status, 404);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token: dave.token })).status, 200);

    const del = await api('DELETE', `/api/v1/api-keys/${made.json.id}`, { token: carol.token });
    assert.equal(del.status, 204);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token: made.json.key })).status, 401);
});

test('admin routes need an admin key', async () => {
    const tenant = await createKey('ops', 'erin');
    const admin = await createKey('ops', 'root', ['--admin']);
    const denied = await api('GET', '/api/v1/admin/api-keys', { token: tenant.token });
    assert.equal(denied.status, 403);
    assert.equal(denied.json.errorCode, 'FORBIDDEN');
    assert.match(denied.json.error, /admin api key required/);

    const all = await api('GET', '/api/v1/admin/api-keys?team=ops', { token: admin.token });
    assert.equal(all.status, 200, all.text);
    assert.ok(all.json.items.some((k) => k.id === tenant.id));
    assert.ok(all.json.items.every((k) => k.team === 'ops'));
    assert.ok(all.json.items.every((k) => k.rawToken === undefined), 'admin listing never has tokens');

    const made = await api('POST', '/api/v1/admin/api-keys', {
        token: admin.token,
        body: { team: 'data', user: 'frank', role: 'admin', name: 'ops-bot' },
    });
    assert.equal(made.status, 201, made.text);
    assert.equal(made.json.team, 'data');
    assert.equal(made.json.role, 'admin');
    const who = await api('GET', '/api/v1/auth/whoami', { token: made.json.key });
    assert.equal(who.json.role, 'admin');
    assert.equal(who.json.namespace, 't-data-frank');

    const missing = await api('POST', '/api/v1/admin/api-keys', { token: admin.token, body: { user: 'x' } });
    assert.equal(missing.status, 400);
    assert.match(missing.json.error, /team/);

    const rv = await api('DELETE', `/api/v1/admin/api-keys/${tenant.id}`, { token: admin.token });
    assert.equal(rv.status, 204);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token: tenant.token })).status, 401);
    const rv2 = await api('DELETE', `/api/v1/admin/api-keys/${tenant.id}`, { token: admin.token });
    assert.equal(rv2.status, 404);
});

test('team namespace override applies to existing keys at once', async () => {
    const { token } = await createKey('research', 'gina');
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token })).json.namespace, 't-research-gina');
    const set = await cli(['team', 'set-namespace', 'research', 'research-shared']);
    assert.equal(set.code, 0, set.stderr);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token })).json.namespace, 'research-shared');
    assert.match((await cli(['team', 'list'])).stdout, /research\s+research-shared/);

    const bad = await cli(['team', 'set-namespace', 'research', 'Not_A_Label']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /not a DNS label/);

    assert.equal((await cli(['team', 'clear-namespace', 'research'])).code, 0);
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token })).json.namespace, 't-research-gina');
    const again = await cli(['team', 'clear-namespace', 'research']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /no namespace override/);
});

test('internal routes are not on the public listener', async () => {
    const { token } = await createKey('ml', 'henry');
    for (const p of ['/internal/v1/keys/validate', '/internal/v1/vault/resolve']) {
        const r = await api('POST', p, { token, body: { hash: '0'.repeat(64), namespace: 'x', user: 'y', names: ['a'] } });
        assert.equal(r.status, 404, `${p}: ${r.text}`);
    }
});

test('every key write is audited, without key material', async () => {
    const { token, id } = await createKey('audit', 'ivy');
    await cli(['key', 'revoke', id]);
    const rows = await psqlAt(pg.url, `SELECT actor, action, target FROM audit_log WHERE target = '${id}' ORDER BY id`);
    assert.equal(rows, `cli|apikey.create|${id}\ncli|apikey.revoke|${id}`);
    const dump = await psqlAt(pg.url, 'SELECT details::text FROM audit_log');
    assert.ok(!dump.includes(token.slice(5)), 'no key in the audit log');
});

test('last_used_at is written in a batch', async () => {
    const { token, id } = await createKey('ml', 'jack');
    assert.equal((await api('GET', '/api/v1/auth/whoami', { token })).status, 200);
    await waitFor(async () => (await psqlAt(pg.url, `SELECT last_used_at IS NOT NULL FROM api_keys WHERE id = '${id}'`)) === 't', {
        timeoutMs: 25000, intervalMs: 500, what: 'last_used_at to be written',
    });
});

test('revocations by the CLI and expiries reach the revocation hook within a scan', async () => {
    const a = await createKey('ml', 'kim');
    const b = await createKey('ml', 'lee', ['--expires', '2s']);
    assert.equal((await cli(['key', 'revoke', a.id])).code, 0);
    // the hook's caller logs each key it reports (ids only)
    await waitFor(() => new RegExp(`api key no longer valid.*${a.id}.*revoked`).test(hub.proc.logs()), {
        timeoutMs: 25000, intervalMs: 250, what: 'the CLI revocation to be found by the scan',
    });
    await waitFor(() => new RegExp(`api key no longer valid.*${b.id}.*expired`).test(hub.proc.logs()), {
        timeoutMs: 25000, intervalMs: 250, what: 'the expiry to be found by the scan',
    });
    assert.ok(!hub.proc.logs().includes(a.token.slice(9)), 'no key material in the log');
});

test('serve refuses to start without a hub secret and says how to make one', async () => {
    for (const secret of ['', 'too-short']) {
        const r = await run(hubBin(), ['serve', '--listen', '127.0.0.1:0', '--tunnel-listen', '127.0.0.1:0'], {
            env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: secret },
            timeoutMs: 20000,
        });
        assert.equal(r.code, 1, `serve with hub secret '${secret}' exited ${r.code}:\n${r.stderr}`);
        assert.match(r.stdout + r.stderr, /hub_secret/);
        assert.match(r.stdout + r.stderr, /openssl rand -hex 32/);
    }
});

test('the hub stops cleanly after all that (under ASan: no leaks)', async () => {
    const ex = await hub.proc.stop('SIGTERM', 15000);
    assert.deepEqual(ex, { code: 0, signal: null }, `hub did not exit cleanly${logs()}`);
});
