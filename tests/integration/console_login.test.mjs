// Console login (issue 16): `agentbox-hub user`, POST /api/auth/login with a
// scrypt-checked password, the session as cookie and as bearer, expiry,
// logout / passwd / disable revocation, CSRF refusal of cookie writes, login
// rate limiting per user and per address, and raw tokens shown only to a
// session.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startPostgres, startHub, runMigrate, run, hubBin, hubSecret, waitFor, psqlAt } from './lib/harness.mjs';

let pg;
let hub;


before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    hub = await startHub(pg.url, { args: ['--session-ttl', '1h'] });
});
after(async () => {
    if (hub) await hub.proc.stop();
    if (pg) await pg.cleanup();
});

function cli(args, input) {
    return run(hubBin(), args, {
        env: { ...process.env, DATABASE_URL: pg.url, AGENTBOX_HUB_SECRET: hubSecret },
        input,
    });
}

async function addUser(name, team, password, extra = []) {
    const r = await cli(['user', 'add', name, '--team', team, ...extra], `${password}\n`);
    assert.equal(r.code, 0, `user add failed:\n${r.stdout}\n${r.stderr}`);
}

async function api(method, path, { token, cookie, csrf, headers = {}, body, base = hub.base } = {}) {
    const h = { ...headers };
    if (token) h.Authorization = `Bearer ${token}`;
    if (cookie) h.Cookie = cookie;
    if (csrf) h['X-CSRF-Token'] = csrf;
    if (body !== undefined) h['Content-Type'] = 'application/json';
    const res = await fetch(`${base}${path}`, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let json;
    try { json = text ? JSON.parse(text) : undefined; } catch { json = undefined; }
    return { status: res.status, headers: res.headers, text, json };
}

async function login(username, password, base = hub.base) {
    return api('POST', '/api/auth/login', { body: { username, password }, base });
}

const cookieOf = (r) => r.headers.getSetCookie().map((c) => c.split(';')[0]).join('; ');

test('user CLI: add, list, help; the password is stored only as a scrypt hash', async () => {
    const help = await cli(['user', '--help']);
    assert.equal(help.code, 0, help.stderr);
    assert.match(help.stdout, /user add USERNAME --team T/);
    await addUser('alice', 'blue', 'correct horse battery');
    const dup = await cli(['user', 'add', 'alice', '--team', 'blue'], 'another password\n');
    assert.equal(dup.code, 1);
    assert.match(dup.stderr, /already exists/);
    const short = await cli(['user', 'add', 'bob', '--team', 'blue'], 'short\n');
    assert.equal(short.code, 2);
    assert.match(short.stderr, /field 'password' must be 8/);
    const list = await cli(['user', 'list']);
    assert.equal(list.code, 0, list.stderr);
    assert.match(list.stdout, /alice\s+blue\s+tenant/);
    const hash = await psqlAt(pg.url, "SELECT password_hash FROM console_users WHERE username = 'alice'");
    assert.match(hash, /^\$scrypt\$ln=15,r=8,p=1\$[A-Za-z0-9+/=]+\$[A-Za-z0-9+/=]+$/);
    assert.ok(!hash.includes('correct horse'));
});

test('login: cookie and bearer sessions, GET /api/auth/session, whoami as the user', async () => {
    await addUser('carol', 'green', 'carol-password-1', ['--admin']);
    const bad = await login('carol', 'wrong-password');
    assert.equal(bad.status, 401);
    assert.equal(bad.json.error, 'invalid username or password');
    const nobody = await login('nobody', 'whatever-password');
    assert.equal(nobody.status, 401);
    assert.equal(nobody.json.error, 'invalid username or password', 'an unknown user answers as a wrong password');

    const r = await login('carol', 'carol-password-1');
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.token, /^abxs_[0-9a-f]{64}$/);
    assert.match(r.json.csrfToken, /^[0-9a-f]{64}$/);
    assert.deepEqual(r.json.user, { username: 'carol', team: 'green', role: 'admin' });
    const cookies = r.headers.getSetCookie();
    const sess = cookies.find((c) => c.startsWith('abx_session='));
    assert.ok(sess, cookies.join('\n'));
    assert.match(sess, /HttpOnly/);
    assert.match(sess, /SameSite=Strict/);
    assert.doesNotMatch(sess, /Secure/, 'plain HTTP: no Secure');
    const csrfCookie = cookies.find((c) => c.startsWith('abx_csrf='));
    assert.ok(csrfCookie && !/HttpOnly/.test(csrfCookie), 'the CSRF cookie is readable by the console');
    // only the hash of the token is stored
    const stored = await psqlAt(pg.url, "SELECT token_hash FROM console_sessions WHERE username = 'carol'");
    assert.ok(!stored.includes(r.json.token.slice(5)));
    // the login is audited, without the token
    const audit = await psqlAt(pg.url, "SELECT actor || ' ' || action || ' ' || details::text FROM audit_log WHERE action = 'console.login'");
    assert.match(audit, /console:carol console\.login .*127\.0\.0\.1/);
    assert.ok(!audit.includes(r.json.token.slice(5)));

    const viaCookie = await api('GET', '/api/auth/session', { cookie: cookieOf(r) });
    assert.equal(viaCookie.status, 200, viaCookie.text);
    assert.equal(viaCookie.json.user, 'carol');
    assert.equal(viaCookie.json.role, 'admin');
    assert.match(viaCookie.json.sessionId, /^ses_[0-9a-f]{16}$/);
    const viaBearer = await api('GET', '/api/v1/auth/whoami', { token: r.json.token });
    assert.equal(viaBearer.status, 200, viaBearer.text);
    assert.equal(viaBearer.json.user, 'carol');
    assert.equal(viaBearer.json.team, 'green');
    // behind a TLS proxy the cookie is Secure
    const tls = await api('POST', '/api/auth/login', { body: { username: 'carol', password: 'carol-password-1' }, headers: { 'X-Forwarded-Proto': 'https' } });
    assert.match(tls.headers.getSetCookie().find((c) => c.startsWith('abx_session=')), /; Secure/);
});

test('CSRF: a cookie write without (or with a wrong) X-CSRF-Token is 403; the bearer form needs none', async () => {
    await addUser('dave', 'red', 'dave-password-1');
    const r = await login('dave', 'dave-password-1');
    assert.equal(r.status, 200, r.text);
    const cookie = cookieOf(r);
    const none = await api('POST', '/api/v1/api-keys', { cookie, body: { name: 'x' } });
    assert.equal(none.status, 403, none.text);
    assert.equal(none.json.errorCode, 'CSRF_REJECTED');
    assert.match(none.json.error, /missing X-CSRF-Token/);
    const wrong = await api('POST', '/api/v1/api-keys', { cookie, csrf: 'f'.repeat(64), body: { name: 'x' } });
    assert.equal(wrong.status, 403, wrong.text);
    assert.match(wrong.json.error, /does not match/);
    // another session's CSRF token does not help either
    const other = await login('dave', 'dave-password-1');
    const crossed = await api('POST', '/api/v1/api-keys', { cookie, csrf: other.json.csrfToken, body: { name: 'x' } });
    assert.equal(crossed.status, 403, crossed.text);
    const ok = await api('POST', '/api/v1/api-keys', { cookie, csrf: r.json.csrfToken, body: { name: 'from-cookie' } });
    assert.equal(ok.status, 201, ok.text);
    const bearer = await api('POST', '/api/v1/api-keys', { token: r.json.token, body: { name: 'from-bearer' } });
    assert.equal(bearer.status, 201, bearer.text);
    // reads with the cookie need no token
    assert.equal((await api('GET', '/api/v1/api-keys', { cookie })).status, 200);
});

test('raw tokens: a session sees its unrestricted keys\' tokens, an API key and agent keys do not', async () => {
    await addUser('erin', 'teal', 'erin-password-1');
    const s = await login('erin', 'erin-password-1');
    const made = await api('POST', '/api/v1/api-keys', { token: s.json.token, body: { name: 'mine' } });
    assert.equal(made.status, 201, made.text);
    const agentKey = await api('POST', '/api/v1/api-keys', { token: s.json.token, body: { name: 'bot', mode: 'agent' } });
    assert.equal(agentKey.status, 201, agentKey.text);
    const bySession = await api('GET', '/api/v1/api-keys', { token: s.json.token });
    assert.equal(bySession.status, 200, bySession.text);
    const mine = bySession.json.items.find((k) => k.name === 'mine');
    assert.equal(mine.rawToken, made.json.key, 'the session retrieves the unrestricted key');
    const bot = bySession.json.items.find((k) => k.name === 'bot');
    assert.equal(bot.rawToken, undefined, 'an agent-mode key\'s token is never listed');
    const byKey = await api('GET', '/api/v1/api-keys', { token: made.json.key });
    assert.equal(byKey.status, 200, byKey.text);
    assert.ok(byKey.json.items.every((k) => k.rawToken === undefined), 'a key never sees raw tokens');
});

test('logout revokes at once; passwd and disable end every session', async () => {
    await addUser('frank', 'gold', 'frank-password-1');
    const a = await login('frank', 'frank-password-1');
    const b = await login('frank', 'frank-password-1');
    // logout with the cookie is a write: CSRF applies
    const forged = await api('POST', '/api/auth/logout', { cookie: cookieOf(a) });
    assert.equal(forged.status, 403);
    const out = await api('POST', '/api/auth/logout', { cookie: cookieOf(a), csrf: a.json.csrfToken });
    assert.equal(out.status, 204, out.text);
    assert.ok(out.headers.getSetCookie().some((c) => /^abx_session=;.*Max-Age=0/.test(c)));
    const after = await api('GET', '/api/auth/session', { token: a.json.token });
    assert.equal(after.status, 401);
    assert.match(after.json.error, /invalid session: it ended at/);
    assert.equal((await api('GET', '/api/auth/session', { token: b.json.token })).status, 200, 'the other session lives');

    const pw = await cli(['user', 'passwd', 'frank'], 'frank-password-2\n');
    assert.equal(pw.code, 0, pw.stderr);
    assert.equal((await api('GET', '/api/auth/session', { token: b.json.token })).status, 401, 'passwd ends sessions');
    assert.equal((await login('frank', 'frank-password-1')).status, 401, 'the old password no longer works');
    const c = await login('frank', 'frank-password-2');
    assert.equal(c.status, 200, c.text);
    const dis = await cli(['user', 'disable', 'frank']);
    assert.equal(dis.code, 0, dis.stderr);
    assert.equal((await api('GET', '/api/auth/session', { token: c.json.token })).status, 401, 'disable ends sessions');
    assert.equal((await login('frank', 'frank-password-2')).status, 401, 'a disabled user cannot log in');
    assert.match((await cli(['user', 'list'])).stdout, /frank\s+gold\s+tenant\s+\S+\s+disabled/);
    // a session token is not an API key, and a key is not a session
    const fake = await api('GET', '/api/auth/session', { token: 'abxs_' + '0'.repeat(64) });
    assert.equal(fake.status, 401);
    assert.match(fake.json.error, /no such session/);
});

test('rate limiting: per user, then per source address; 429 names the retry time', async () => {
    // a hub of its own: the other tests' failures from 127.0.0.1 do not count here
    const limits = await startHub(pg.url, { args: ['--login-max-failures', '3', '--login-max-failures-addr', '6'] });
    const login = (u, p) => api('POST', '/api/auth/login', { body: { username: u, password: p }, base: limits.base });
    try {
    await addUser('gina', 'plum', 'gina-password-1');
    for (let i = 0; i < 3; i++) assert.equal((await login('gina', `wrong-${i}-password`)).status, 401);
    const limited = await login('gina', 'gina-password-1');
    assert.equal(limited.status, 429, limited.text);
    assert.equal(limited.json.errorCode, 'RATE_LIMITED');
    assert.match(limited.json.error, /too many failed logins for user 'gina': retry in \d+ s/);
    const retry = Number(limited.headers.get('retry-after'));
    assert.ok(retry > 0 && retry <= 900, `Retry-After ${retry}`);
    assert.equal(limited.json.detail.retryAfterSeconds, retry);
    // other users from the same address still log in until the address limit
    await addUser('hank', 'plum', 'hank-password-1');
    assert.equal((await login('hank', 'hank-password-1')).status, 200);
    // 3 more failures (6 from this address in total, gina's included) lock the address
    for (let i = 0; i < 3; i++) assert.equal((await login(`stranger${i}`, 'some-password')).status, 401);
    const addr = await login('hank', 'hank-password-1');
    assert.equal(addr.status, 429, addr.text);
    assert.match(addr.json.error, /too many failed logins for address 127\.0\.0\.1/);
    } finally {
        await limits.proc.stop();
    }
});

test('sessions expire', async () => {
    const short = await startHub(pg.url, { args: ['--session-ttl', '2s'] });
    try {
        await addUser('ivy', 'navy', 'ivy-password-1');
        const r = await login('ivy', 'ivy-password-1', short.base);
        assert.equal(r.status, 200, r.text);
        assert.equal((await api('GET', '/api/auth/session', { token: r.json.token, base: short.base })).status, 200);
        const gone = await waitFor(async () => {
            const s = await api('GET', '/api/auth/session', { token: r.json.token, base: short.base });
            return s.status === 401 ? s : null;
        }, { timeoutMs: 10000, what: 'the 2 s session to expire' });
        assert.match(gone.json.error, /invalid session: it expired at/);
    } finally {
        await short.proc.stop();
    }
});
