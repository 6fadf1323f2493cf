// The vault through the hub: E2B /secrets at /e2b/secrets, every operation and
// its errors, per-user scope, rotate-key, and a leak check (no canary value in
// the hub log nor in a pg_dump of the database).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import {
    startPostgres, startHub, runMigrate, run, hubBin, hubSecret, psqlAt, buildDir, tempDir, PG_BIN, consoleSession,
} from './lib/harness.mjs';

let pg;
let hub;
const canaries = []; // every secret value and key written in this file

before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    hub = await startHub(pg.url, { args: ['--log-level', 'debug'] });
});
after(async () => {
    if (hub) await hub.proc.stop();
    if (pg) await pg.cleanup();
});

const logs = () => `\nhub log:\n${hub.proc.logs()}`;
const canary = (label) => {
    const v = `canary-${label}-${randomBytes(12).toString('hex')}`;
    canaries.push(v);
    return v;
};

function cli(args, env = {}) {
    return run(hubBin(), args, {
        env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: hubSecret, ...env },
    });
}

async function createKey(team, user) {
    const r = await cli(['key', 'create', '--team', team, '--user', user]);
    assert.equal(r.code, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    const token = lines[lines.length - 1];
    canaries.push(token);
    return token;
}

// E2B-style request: X-API-Key unless another header is given.
async function e2b(method, p, { key, headers, body } = {}) {
    const h = headers || (key ? { 'X-API-Key': key } : {});
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await fetch(`${hub.base}/e2b${p}`, {
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

const isTime = (s) => /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(s);

test('create, get, list, update, delete with the E2B Secret shape', async () => {
    const key = await createKey('ml', 'alice');
    const v1 = canary('v1');
    const c = await e2b('POST', '/secrets', { key, body: { name: 'DB_Password', value: v1, metadata: { env: 'prod' } } });
    assert.equal(c.status, 201, c.text + logs());
    assert.deepEqual(Object.keys(c.json).sort(), ['createdAt', 'currentVersion', 'metadata', 'name', 'secretID', 'updatedAt']);
    assert.equal(c.json.secretID, 'sec_db_password');
    assert.equal(c.json.name, 'db_password');
    assert.equal(c.json.currentVersion, 1);
    assert.deepEqual(c.json.metadata, { env: 'prod' });
    assert.ok(isTime(c.json.createdAt) && isTime(c.json.updatedAt), c.text);
    assert.ok(!c.text.includes(v1));

    const dup = await e2b('POST', '/secrets', { key, body: { name: 'db_password', value: 'x' } });
    assert.equal(dup.status, 409);
    assert.deepEqual(dup.json, { code: 409, message: 'secret "db_password" already exists; update it instead' });

    for (const id of ['db_password', 'sec_db_password', 'DB_PASSWORD']) {
        const g = await e2b('GET', `/secrets/${id}`, { key });
        assert.equal(g.status, 200, `${id}: ${g.text}`);
        assert.equal(g.json.currentVersion, 1);
        assert.equal(g.json.value, undefined);
        assert.ok(!g.text.includes(v1), 'get never returns the value');
    }
    const missing = await e2b('GET', '/secrets/nope', { key });
    assert.equal(missing.status, 404);
    assert.deepEqual(missing.json, { code: 404, message: 'secret "nope" not found' });

    const v2 = canary('v2');
    const u = await e2b('POST', '/secrets/sec_db_password', { key, body: { value: v2 } });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.currentVersion, 2);
    assert.deepEqual(u.json.metadata, { env: 'prod' }, 'metadata kept when not sent');
    assert.equal(u.json.createdAt, c.json.createdAt);
    const u2 = await e2b('POST', '/secrets/db_password', { key, body: { value: canary('v3'), metadata: { env: 'dev', team: 'ml' } } });
    assert.equal(u2.json.currentVersion, 3);
    assert.deepEqual(u2.json.metadata, { env: 'dev', team: 'ml' }, 'metadata replaced when sent');
    const noValue = await e2b('POST', '/secrets/db_password', { key, body: { metadata: {} } });
    assert.equal(noValue.status, 400);
    assert.equal(noValue.json.message, "field 'value' is required");
    const upMissing = await e2b('POST', '/secrets/ghost', { key, body: { value: 'x' } });
    assert.equal(upMissing.status, 404);
    assert.equal(upMissing.json.message, 'secret "ghost" not found');

    const list = await e2b('GET', '/secrets', { key });
    assert.equal(list.status, 200);
    assert.equal(list.json.length, 1);
    assert.equal(list.headers.get('x-next-token'), null);

    const d = await e2b('DELETE', '/secrets/db_password', { key });
    assert.equal(d.status, 204);
    const d2 = await e2b('DELETE', '/secrets/db_password', { key });
    assert.equal(d2.status, 404);
    assert.equal(d2.json.code, 404);
    assert.equal((await e2b('GET', '/secrets/db_password', { key })).status, 404);
});

test('list pagination: sorted by name, limit, X-Next-Token', async () => {
    const key = await createKey('ml', 'pager');
    const names = ['e', 'a', 'd', 'c', 'b'];
    for (const n of names) {
        const r = await e2b('POST', '/secrets', { key, body: { name: n, value: canary(`p${n}`) } });
        assert.equal(r.status, 201, r.text);
    }
    const seen = [];
    let token = '';
    let pages = 0;
    for (;;) {
        const q = `?limit=2${token ? `&nextToken=${encodeURIComponent(token)}` : ''}`;
        const r = await e2b('GET', `/secrets${q}`, { key });
        assert.equal(r.status, 200, r.text);
        assert.ok(r.json.length <= 2);
        seen.push(...r.json.map((s) => s.name));
        pages++;
        token = r.headers.get('x-next-token');
        if (!token) break;
    }
    assert.deepEqual(seen, ['a', 'b', 'c', 'd', 'e']);
    assert.equal(pages, 3);
    const all = await e2b('GET', '/secrets', { key });
    assert.equal(all.json.length, 5);

    for (const bad of ['0', '1001', 'ten']) {
        const r = await e2b('GET', `/secrets?limit=${bad}`, { key });
        assert.equal(r.status, 400);
        assert.equal(r.json.message, 'limit must be an integer between 1 and 1000');
    }
    const badTok = await e2b('GET', '/secrets?nextToken=%%%', { key });
    assert.equal(badTok.status, 400);
    const badTok2 = await e2b('GET', '/secrets?nextToken=bm90YW51bWJlcg==', { key }); // "notanumber"
    assert.equal(badTok2.status, 400);
    assert.match(badTok2.json.message, /nextToken is not valid/);
});

test('input limits answer 400 naming the limit', async () => {
    const key = await createKey('ml', 'limits');
    const cases = [
        [{ value: 'x' }, "field 'name' is required"],
        [{ name: 'a b', value: 'x' }, /may only contain letters, digits, '_' and '-'/],
        [{ name: 'x'.repeat(129), value: 'x' }, 'secret name must be at most 128 characters, got 129'],
        [{ name: 'a{b}', value: 'x' }, /must not contain '\{' or '\}'/],
        [{ name: 'ok' }, "field 'value' is required"],
        [{ name: 'ok', value: '' }, 'secret value must not be empty'],
        [{ name: 'ok', value: 5 }, "field 'value' must be a string"],
        [{ name: 'ok', value: 'v'.repeat(65537) }, 'secret value must be at most 65536 bytes (64 KiB), got 65537'],
        [{ name: 'ok', value: 'x', metadata: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`k${i}`, 'v'])) },
            'metadata may have at most 32 entries, got 33'],
        [{ name: 'ok', value: 'x', metadata: { k: 'v'.repeat(1025) } }, /longer than 1024 bytes/],
        [{ name: 'ok', value: 'x', metadata: { ['k'.repeat(129)]: 'v' } }, /longer than 128 bytes/],
        [{ name: 'ok', value: 'x', metadata: Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`k${i}`, 'v'.repeat(1000)])) },
            /bytes in all .* more than the 8192 allowed/],
        [{ name: 'ok', value: 'x', metadata: { n: 1 } }, "metadata value of 'n' must be a string"],
        ['{not json', /body is not valid JSON/],
    ];
    for (const [body, msg] of cases) {
        const r = await e2b('POST', '/secrets', { key, body });
        assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
        assert.equal(r.json.code, 400);
        if (typeof msg === 'string') assert.equal(r.json.message, msg);
        else assert.match(r.json.message, msg);
    }
    // exactly at the limit is fine
    const big = await e2b('POST', '/secrets', { key, body: { name: 'big', value: 'v'.repeat(65536) } });
    assert.equal(big.status, 201, big.text);
    assert.equal((await e2b('GET', '/secrets', { key })).json.length, 1, 'refused creates stored nothing');
});

test('auth on /e2b: X-API-Key, AGENTBOX-API-KEY, Bearer; 401 in the E2B shape; scope per user', async () => {
    const alice = await createKey('ml', 'scoped-a');
    const bob = await createKey('ml', 'scoped-b');
    const r = await e2b('POST', '/secrets', { key: alice, body: { name: 'mine', value: canary('scope') } });
    assert.equal(r.status, 201);
    for (const headers of [{ 'X-API-Key': alice }, { 'AGENTBOX-API-KEY': alice }, { Authorization: `Bearer ${alice}` }]) {
        const g = await e2b('GET', '/secrets/mine', { headers });
        assert.equal(g.status, 200, `${Object.keys(headers)[0]}: ${g.text}`);
    }
    const none = await e2b('GET', '/secrets');
    assert.equal(none.status, 401);
    assert.equal(none.json.code, 401);
    assert.match(none.json.message, /^missing api key: send X-API-Key/);
    const bad = await e2b('GET', '/secrets', { key: `agbx_${'f'.repeat(64)}` });
    assert.equal(bad.status, 401);
    assert.match(bad.json.message, /^invalid api key/);

    // another user of the same team sees nothing of alice's
    assert.deepEqual((await e2b('GET', '/secrets', { key: bob })).json, []);
    assert.equal((await e2b('GET', '/secrets/mine', { key: bob })).status, 404);
    assert.equal((await e2b('DELETE', '/secrets/mine', { key: bob })).status, 404);
    assert.equal((await e2b('POST', '/secrets/mine', { key: bob, body: { value: 'x' } })).status, 404);
    // bob may use the same name in his own scope
    assert.equal((await e2b('POST', '/secrets', { key: bob, body: { name: 'mine', value: canary('bob') } })).status, 201);
});

test('writes are audited without values', async () => {
    const rows = await psqlAt(pg.url, "SELECT action, count(*) FROM audit_log WHERE action LIKE 'vault.%' GROUP BY action ORDER BY action");
    assert.match(rows, /vault\.create\|\d+/);
    assert.match(rows, /vault\.delete\|\d+/);
    assert.match(rows, /vault\.update\|\d+/);
    const all = await psqlAt(pg.url, 'SELECT actor || target || details::text FROM audit_log');
    for (const c of canaries) assert.ok(!all.includes(c), 'a value reached the audit log');
});

test('rotate-key re-encrypts every row, keeps metadata, and values still resolve', async () => {
    const key = await createKey('ml', 'rotor');
    const expect = [];
    for (const [n, md] of [['alpha', { a: '1' }], ['beta', {}], ['gamma', { x: 'y', z: 'w' }]]) {
        const v = canary(`rot-${n}`);
        const r = await e2b('POST', '/secrets', { key, body: { name: n, value: v, metadata: md } });
        assert.equal(r.status, 201, r.text);
        expect.push(['t-ml-rotor', 'rotor', n, v]);
    }
    const upd = canary('rot-beta2');
    assert.equal((await e2b('POST', '/secrets/beta', { key, body: { value: upd } })).status, 200);
    expect[1][3] = upd;
    const before = (await e2b('GET', '/secrets', { key })).json;
    const rowsBefore = Number(await psqlAt(pg.url, 'SELECT count(*) FROM vault_secrets'));

    // a wrong hub secret changes nothing and says what to do
    const wrong = await cli(['vault', 'rotate-key'], { AGENTBOX_HUB_SECRET: randomBytes(32).toString('hex') });
    assert.equal(wrong.code, 1, wrong.stdout);
    assert.match(wrong.stderr, /does not decrypt .*nothing was changed; pass the secret it was written with as --previous-hub-secret-file/);
    assert.equal(await psqlAt(pg.url, 'SELECT max(generation) FROM hub_key_generations'), '1');

    const rot = await cli(['vault', 'rotate-key']);
    assert.equal(rot.code, 0, rot.stderr);
    assert.match(rot.stdout, new RegExp(`rotated to key generation 2: re-encrypted ${rowsBefore} secret\\(s\\) and \\d+ api key token\\(s\\)`));
    assert.equal(await psqlAt(pg.url, "SELECT count(*) FROM vault_secrets WHERE key_id NOT LIKE 'v2.%'"), '0');
    assert.equal(await psqlAt(pg.url, "SELECT count(*) FROM api_keys WHERE token_key_id NOT LIKE 'v2.%'"), '0');

    const afterList = (await e2b('GET', '/secrets', { key })).json;
    assert.deepEqual(afterList, before, 'names, versions, metadata and timestamps survive rotation');
    // keys still validate, and the owner can still retrieve the token
    const session = await consoleSession(hub.base, 'ml', 'rotor'); // only a console session sees tokens (issue 16)
    const mine = await fetch(`${hub.base}/api/v1/api-keys`, { headers: { Authorization: `Bearer ${session}` } }).then((r) => r.json());
    assert.equal(mine.items[0].rawToken, key);
    // new writes use the new generation
    assert.equal((await e2b('POST', '/secrets', { key, body: { name: 'delta', value: canary('rot-delta') } })).status, 201);
    expect.push(['t-ml-rotor', 'rotor', 'delta', canaries[canaries.length - 1]]);
    assert.match(await psqlAt(pg.url, "SELECT key_id FROM vault_secrets WHERE name = 'delta'"), /^v2\./);

    // the values themselves: resolve through the C function (tests/unit/test_hub_vault.c)
    const bin = path.join(buildDir(), 'test_hub_vault');
    assert.ok(fs.existsSync(bin), `no ${bin}: build the unit tests`);
    const res = await run(bin, [], {
        env: {
            ...process.env,
            AGENTBOX_TEST_DATABASE_URL: pg.url,
            AGENTBOX_HUB_SECRET: hubSecret,
            AGENTBOX_TEST_RESOLVE_EXPECT: expect.map((e) => e.join('\t')).join('\n'),
        },
    });
    assert.equal(res.code, 0, `resolve check failed:\n${res.stdout}\n${res.stderr}`);
    assert.match(res.stdout, new RegExp(`resolved ${expect.length} expected secret\\(s\\)`));
    assert.match(res.stdout, /OK \] test_db_round_trip_rotate_resolve/);
    assert.doesNotMatch(res.stdout, /SKIPPED \] test_db_resolve_expected/);

    // changing the hub secret itself: the old one as --previous-hub-secret-file
    const dir = tempDir('agentbox-vault-');
    const oldFile = path.join(dir, 'old');
    fs.writeFileSync(oldFile, `${hubSecret}\n`, { mode: 0o600 });
    const newSecret = randomBytes(32).toString('hex');
    const moved = await cli(['vault', 'rotate-key', '--previous-hub-secret-file', oldFile], { AGENTBOX_HUB_SECRET: newSecret });
    assert.equal(moved.code, 0, moved.stderr);
    assert.match(moved.stdout, /rotated to key generation \d+/);
    const res2 = await run(bin, [], {
        env: {
            ...process.env,
            AGENTBOX_TEST_DATABASE_URL: pg.url,
            AGENTBOX_HUB_SECRET: newSecret,
            AGENTBOX_TEST_RESOLVE_EXPECT: expect.map((e) => e.join('\t')).join('\n'),
        },
    });
    assert.equal(res2.code, 0, `resolve with the new secret failed:\n${res2.stdout}\n${res2.stderr}`);
});

test('leak check: no canary in the hub log or in pg_dump', async () => {
    assert.ok(canaries.length > 10);
    const log = hub.proc.logs();
    const dump = await run(path.join(PG_BIN, 'pg_dump'), ['--no-owner', '-d', pg.url], { timeoutMs: 60000 });
    assert.equal(dump.code, 0, dump.stderr);
    assert.ok(dump.stdout.includes('vault_secrets'), 'the dump holds the vault table');
    for (const c of canaries) {
        assert.ok(!log.includes(c), `a canary reached the hub log: ${c.slice(0, 14)}…`);
        assert.ok(!dump.stdout.includes(c), `a canary is in clear in pg_dump: ${c.slice(0, 14)}…`);
        // nor as hex (bytea is dumped as hex)
        assert.ok(!dump.stdout.includes(Buffer.from(c).toString('hex')), `a canary is in pg_dump as hex: ${c.slice(0, 14)}…`);
    }
});

test('the hub stops cleanly after all that (under ASan: no leaks)', async () => {
    const ex = await hub.proc.stop('SIGTERM', 15000);
    assert.deepEqual(ex, { code: 0, signal: null }, `hub did not exit cleanly${logs()}`);
});
