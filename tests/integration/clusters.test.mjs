// `agentbox-hub cluster ...` and the hub's cluster registry (GET /api/clusters)
// against a real PostgreSQL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import {
    startPostgres, runMigrate, hubBin, psqlAt, run, startHub, httpJson, waitFor, freePort, PG_BIN,
    buildDir, spawnProc, tempDir,
    adminHeaders,
} from './lib/harness.mjs';

let pg;
let url;

before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
    url = await pg.createDatabase(`clusters_${process.pid}`);
    const m = await runMigrate(url);
    assert.equal(m.code, 0, `migrate failed:\n${m.stdout}\n${m.stderr}`);
});
after(async () => {
    if (pg) await pg.cleanup();
});

const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const TOKEN_RE = /^abxc_[0-9a-f]{64}$/;

function cli(args, env = {}) {
    return run(hubBin(), ['cluster', ...args], {
        env: { ...process.env, DATABASE_URL: url, USER: 'tester', ...env },
    });
}

// The last line of stdout, which `add` and `rotate-token` reserve for the token.
const lastLine = (out) => out.trimEnd().split('\n').pop();

async function addCluster(id, extra = []) {
    const r = await cli(['add', id, ...extra]);
    assert.equal(r.code, 0, `cluster add ${id} failed:\n${r.stdout}\n${r.stderr}`);
    const token = lastLine(r.stdout);
    assert.match(token, TOKEN_RE, `last line of stdout is not a token:\n${r.stdout}`);
    return token;
}

async function listJson() {
    const r = await cli(['list', '--json']);
    assert.equal(r.code, 0, `cluster list --json failed:\n${r.stderr}`);
    return JSON.parse(r.stdout).clusters;
}

// Everything in the database as SQL text (data only).
async function dumpData() {
    const r = await run(path.join(PG_BIN, 'pg_dump'), ['--data-only', '--no-owner', '-d', url]);
    assert.equal(r.code, 0, `pg_dump failed: ${r.stderr}`);
    return r.stdout;
}

test('add prints a token of the right shape once and stores only its hash', async () => {
    const token = await addCluster('alpha', ['--name', 'Alpha One', '--region', 'eu-west']);
    const row = await psqlAt(url, "SELECT name, region, token_hash, disabled FROM clusters WHERE id = 'alpha'");
    assert.equal(row, `Alpha One|eu-west|${sha256(token)}|f`);

    const dump = await dumpData();
    assert.ok(dump.includes(sha256(token)), 'the hash should be stored');
    assert.ok(!dump.includes(token.slice(5)), 'the raw token (or its hex part) is stored somewhere');

    const audit = await psqlAt(url,
        "SELECT actor, action, target, cluster_id, outcome FROM audit_log WHERE action = 'cluster.add' AND target = 'alpha'");
    assert.equal(audit, 'cli:tester|cluster.add|alpha|alpha|ok');
    const details = await psqlAt(url,
        "SELECT details::text FROM audit_log WHERE action = 'cluster.add' AND target = 'alpha'");
    assert.ok(!details.includes(token.slice(5)), 'the audit log holds the token');
});

test('adding an existing id is refused, naming it, and keeps the old token', async () => {
    const token = await addCluster('dup');
    const r = await cli(['add', 'dup']);
    assert.equal(r.code, 1, `second add did not fail:\n${r.stdout}\n${r.stderr}`);
    assert.match(r.stderr, /cluster 'dup' already exists/);
    assert.match(r.stderr, /rotate-token dup/);
    assert.doesNotMatch(r.stdout, /abxc_/);
    assert.equal(await psqlAt(url, "SELECT token_hash FROM clusters WHERE id = 'dup'"), sha256(token));
    assert.equal(await psqlAt(url, "SELECT count(*) FROM audit_log WHERE action = 'cluster.add' AND target = 'dup'"), '1');
});

test('invalid ids are refused with the rule and nothing is stored', async () => {
    const before = await psqlAt(url, 'SELECT count(*) FROM clusters');
    const upper = await cli(['add', 'Prod']);
    assert.equal(upper.code, 2);
    assert.match(upper.stderr, /invalid cluster id 'Prod'/);
    assert.match(upper.stderr, /lowercase letters, digits and '-'/);

    const long = 'a'.repeat(25);
    const tooLong = await cli(['add', long]);
    assert.equal(tooLong.code, 2);
    assert.match(tooLong.stderr, /longer than 24 characters/);

    const dash = await cli(['add', '-x']);
    assert.equal(dash.code, 2);
    const none = await cli(['add']);
    assert.equal(none.code, 2);
    assert.match(none.stderr, /missing the cluster ID/);
    assert.equal(await psqlAt(url, 'SELECT count(*) FROM clusters'), before);

    // 24 characters is the limit, and fine.
    await addCluster('b'.repeat(24));
});

test('list shows a new cluster offline, as a table and as JSON', async () => {
    await addCluster('listed', ['--name', 'Listed', '--region', 'us-east']);
    const table = await cli(['list']);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trimEnd().split('\n');
    assert.match(lines[0], /^ID\s+NAME\s+REGION\s+STATUS\s+ONLINE\s+LAST SEEN\s+EPOCH\s+AGENT VERSION\s+NAMESPACES$/);
    const row = lines.find((l) => l.startsWith('listed '));
    assert.ok(row, `no row for 'listed':\n${table.stdout}`);
    assert.match(row, /^listed\s+Listed\s+us-east\s+enabled\s+no\s+-\s+-\s+-\s+\*$/);
    // Aligned: every column starts at the same offset on every line.
    const col = lines[0].indexOf('ONLINE');
    for (const l of lines.slice(1)) assert.match(l.slice(col), /^(yes|no) /, `misaligned line: ${l}`);

    const ids = (await listJson()).map((c) => c.id);
    assert.deepEqual(ids, [...ids].sort(), 'list --json is not sorted by id');
    const c = (await listJson()).find((x) => x.id === 'listed');
    assert.deepEqual(c, {
        id: 'listed', name: 'Listed', region: 'us-east', disabled: false, online: false,
        lastSeen: null, epoch: null, agentVersion: null, namespaces: null,
    });

    // namespaces assigned at registration, normalised; bad names refused naming them
    await addCluster('scoped', ['--namespaces', 'team-a, team-b,team-a']);
    assert.deepEqual((await listJson()).find((x) => x.id === 'scoped').namespaces, ['team-a', 'team-b']);
    const scopedRow = (await cli(['list'])).stdout.split('\n').find((l) => l.startsWith('scoped '));
    assert.match(scopedRow, /\steam-a,team-b$/);
    const bad = await cli(['add', 'badns', '--namespaces', 'Team_A']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /namespace 'Team_A' is invalid/);
});

test('list shows a session row as online only while it is recent and connected', async () => {
    await addCluster('sess');
    await psqlAt(url, "INSERT INTO cluster_sessions (cluster_id, hub_instance, agent_version) VALUES ('sess', 'it', '9.9.9')");
    let c = (await listJson()).find((x) => x.id === 'sess');
    assert.equal(c.online, true);
    assert.equal(c.agentVersion, '9.9.9');
    assert.ok(Number.isInteger(c.epoch) && c.epoch > 0);
    assert.match(c.lastSeen, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);

    await psqlAt(url, "UPDATE cluster_sessions SET last_seen = now() - interval '31 seconds' WHERE cluster_id = 'sess'");
    c = (await listJson()).find((x) => x.id === 'sess');
    assert.equal(c.online, false, 'a session not seen for 31 s is online');

    await psqlAt(url, "UPDATE cluster_sessions SET last_seen = now(), connected = false, disconnected_at = now() WHERE cluster_id = 'sess'");
    c = (await listJson()).find((x) => x.id === 'sess');
    assert.equal(c.online, false, 'a disconnected session is online');
});

test('rotate-token prints a new token and replaces the hash', async () => {
    const old = await addCluster('rot');
    const r = await cli(['rotate-token', 'rot']);
    assert.equal(r.code, 0, r.stderr);
    const token = lastLine(r.stdout);
    assert.match(token, TOKEN_RE);
    assert.notEqual(token, old);
    assert.equal(await psqlAt(url, "SELECT token_hash FROM clusters WHERE id = 'rot'"), sha256(token));
    assert.ok(!(await dumpData()).includes(token.slice(5)), 'the rotated token is stored');
    assert.equal(await psqlAt(url,
        "SELECT actor FROM audit_log WHERE action = 'cluster.rotate_token' AND target = 'rot'"), 'cli:tester');

    const missing = await cli(['rotate-token', 'nosuch']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no cluster 'nosuch'/);
    assert.doesNotMatch(missing.stdout, /abxc_/);
});

test('disable and enable toggle the flag, once each', async () => {
    await addCluster('tog');
    const d = await cli(['disable', 'tog']);
    assert.equal(d.code, 0, d.stderr);
    assert.equal(await psqlAt(url, "SELECT disabled, disabled_at IS NOT NULL FROM clusters WHERE id = 'tog'"), 't|t');
    assert.equal((await listJson()).find((x) => x.id === 'tog').disabled, true);
    const table = await cli(['list']);
    assert.match(table.stdout, /^tog\s+-\s+-\s+disabled\s/m);

    const again = await cli(['disable', 'tog']);
    assert.equal(again.code, 0);
    assert.match(again.stdout, /already disabled/);

    const e = await cli(['enable', 'tog']);
    assert.equal(e.code, 0, e.stderr);
    assert.equal(await psqlAt(url, "SELECT disabled, disabled_at IS NULL FROM clusters WHERE id = 'tog'"), 'f|t');
    assert.equal(await psqlAt(url,
        "SELECT string_agg(action, ',' ORDER BY id) FROM audit_log WHERE target = 'tog' AND action <> 'cluster.add'"),
    'cluster.disable,cluster.enable');

    const missing = await cli(['enable', 'ghost']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no cluster 'ghost'/);
});

test('every subcommand has --help; an unknown one is a usage error', async () => {
    for (const sub of ['add', 'list', 'rotate-token', 'disable', 'enable']) {
        const r = await cli([sub, '--help']);
        assert.equal(r.code, 0, `${sub} --help: ${r.stderr}`);
        assert.match(r.stdout, new RegExp(`agentbox-hub cluster ${sub}`));
        assert.match(r.stdout, /--database-url/);
    }
    assert.match((await cli(['add', '--help'])).stdout, /--region/);
    assert.match((await cli(['list', '--help'])).stdout, /--json/);
    const bad = await cli(['frobnicate']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /unknown command 'frobnicate'/);
});

test('a database that cannot be reached is an error naming the fix', async () => {
    const port = await freePort();
    const r = await cli(['list'], { DATABASE_URL: `postgres://x:y@127.0.0.1:${port}/none` });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /cannot connect to PostgreSQL/);
    assert.match(r.stderr, /DATABASE_URL/);
});

// `serve` gets a free tunnel port too when it has one to listen on.
async function hubArgs() {
    const help = await run(hubBin(), ['serve', '--help']);
    if (!help.stdout.includes('--tunnel-listen')) return [];
    return ['--tunnel-listen', `127.0.0.1:${await freePort()}`];
}

test('GET /api/clusters lists the clusters by id and picks up new ones within 3 s', async (t) => {
    await addCluster('zeta', ['--name', 'Zeta', '--region', 'ap-south']);
    await addCluster('beta');
    await psqlAt(url, "INSERT INTO cluster_sessions (cluster_id, hub_instance, agent_version, connected, disconnected_at) VALUES ('beta', 'it', '1.2.3', false, now())");
    const hub = await startHub(url, { args: await hubArgs() });
    t.after(() => hub.proc.stop());

    const list = await waitFor(async () => {
        const r = await httpJson(`${hub.base}/api/clusters`, { headers: await adminHeaders(hub.base) });
        return r.status === 200 ? r.json.clusters : null;
    }, { timeoutMs: 5000, what: 'GET /api/clusters to answer 200' });
    const ids = list.map((c) => c.id);
    assert.deepEqual(ids, [...ids].sort(), `not sorted by id: ${ids}`);
    const dbIds = (await psqlAt(url, 'SELECT id FROM clusters ORDER BY id')).split('\n');
    assert.deepEqual(ids, dbIds);
    for (const c of list) assert.equal(c.online, false, `${c.id} is online`);
    assert.deepEqual(list.find((c) => c.id === 'zeta'), {
        id: 'zeta', name: 'Zeta', region: 'ap-south', online: false, disabled: false,
        lastSeen: null, agentVersion: null, namespaces: null,
    });
    // A past session shows its time and agent version, offline.
    const beta = list.find((c) => c.id === 'beta');
    assert.equal(beta.online, false);
    assert.match(beta.lastSeen, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(beta.agentVersion, '1.2.3');

    const one = await httpJson(`${hub.base}/api/clusters/zeta`, { headers: await adminHeaders(hub.base) });
    assert.equal(one.status, 200);
    assert.equal(one.json.id, 'zeta');
    assert.equal(one.json.online, false);
    const missing = await httpJson(`${hub.base}/api/clusters/nowhere`, { headers: await adminHeaders(hub.base) });
    assert.equal(missing.status, 404);
    assert.match(missing.json.message, /'nowhere'/);
    const weird = await httpJson(`${hub.base}/api/clusters/%FFx%27`, { headers: await adminHeaders(hub.base) });
    assert.equal(weird.status, 404);
    assert.match(weird.json.message, /no cluster '\?x\?'/);

    // Added while the hub runs: visible within 3 s, without a restart.
    const t0 = Date.now();
    await addCluster('gamma', ['--region', 'eu-north']);
    const gamma = await waitFor(async () => {
        const r = await httpJson(`${hub.base}/api/clusters/gamma`, { headers: await adminHeaders(hub.base) });
        return r.status === 200 ? r.json : null;
    }, { timeoutMs: 3000, intervalMs: 100, what: 'cluster gamma in GET /api/clusters/gamma' });
    assert.equal(gamma.region, 'eu-north');
    assert.ok(Date.now() - t0 < 3500);
    const after = (await httpJson(`${hub.base}/api/clusters`, { headers: await adminHeaders(hub.base) })).json.clusters.map((c) => c.id);
    assert.deepEqual(after, [...after].sort(), `not sorted after gamma: ${after}`);

    // Disabling shows too.
    assert.equal((await cli(['disable', 'zeta'])).code, 0);
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/zeta`, { headers: await adminHeaders(hub.base) })).json.disabled === true,
        { timeoutMs: 3000, intervalMs: 100, what: 'zeta disabled in the API' });

    // The registry is loaded: the API answers from it (503 "not loaded" otherwise).
    const loaded = await httpJson(`${hub.base}/api/clusters`, { headers: await adminHeaders(hub.base) });
    assert.equal(loaded.status, 200, JSON.stringify(loaded.json));
    assert.ok(loaded.json.clusters.some((c) => c.id === 'gamma'));

    // A clean exit: no sanitizer report, no leak, no job left behind.
    const exit = await hub.proc.stop();
    assert.equal(exit.code, 0, `hub exited with ${exit.code}/${exit.signal}:\n${hub.proc.logs()}`);
});

test('GET /api/clusters answers 503 while the database cannot be reached (401 without a key)', async (t) => {
    const port = await freePort();
    const hub = await startHub(`postgres://x:y@127.0.0.1:${port}/none`, { args: await hubArgs() });
    t.after(() => hub.proc.stop());
    // the key cannot be checked, so neither can the registry be shown: 503, not 401
    const key = `agbx_${'0'.repeat(64)}`;
    const r = await httpJson(`${hub.base}/api/clusters`, { headers: { Authorization: `Bearer ${key}` } });
    assert.equal(r.status, 503, JSON.stringify(r.json));
    assert.equal((await httpJson(`${hub.base}/api/clusters`)).status, 401);
});

// The registry's session side, driven by a real agent over the tunnel: the
// session row, online in the API and the CLI, batched last_seen, and a
// rotated token closing the live session.
test('a tunnel session is online, seen, and closed when its token rotates', async (t) => {
    // A missing agent is a failure, not a pass: this is the test of the session side.
    const agentBin = path.join(buildDir(), 'agentbox-agent');
    assert.ok(fs.existsSync(agentBin), `no agent binary at ${agentBin}: build first or set AGENTBOX_BUILD_DIR`);
    const help = await run(agentBin, ['serve', '--help']);
    assert.match(help.stdout, /--hub-url/, `agentbox-agent serve --help names no --hub-url:\n${help.stdout}${help.stderr}`);
    const token = await addCluster('live');
    const tunnelPort = await freePort();
    const hub = await startHub(url, { args: ['--tunnel-listen', `127.0.0.1:${tunnelPort}`] });
    t.after(() => hub.proc.stop());
    const ports = [await freePort(), await freePort(), await freePort(), await freePort()];
    const agent = spawnProc('agent', agentBin, [
        'serve', '--cluster-id', 'live', '--hub-url', `ws://127.0.0.1:${tunnelPort}`,
        '--join-token', token, '--state-dir', tempDir(),
        '--e2b-listen', `127.0.0.1:${ports[0]}`, '--data-listen', `127.0.0.1:${ports[1]}`,
        '--native-listen', `127.0.0.1:${ports[2]}`, '--metrics-listen', `127.0.0.1:${ports[3]}`,
        '--tunnel-ping-interval', '1s',
    ]);
    t.after(() => agent.stop());

    const info = await waitFor(async () => {
        const r = await httpJson(`${hub.base}/api/clusters/live`, { headers: await adminHeaders(hub.base) });
        return r.status === 200 && r.json.online ? r.json : null;
    }, { timeoutMs: 10000, what: `cluster live online in the API; agent log:\n${agent.logs()}` });
    assert.match(info.lastSeen, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.ok(info.agentVersion, 'no agent version');
    const row = await psqlAt(url,
        "SELECT count(*), bool_and(connected), max(agent_version) FROM cluster_sessions WHERE cluster_id = 'live'");
    assert.equal(row, `1|t|${info.agentVersion}`);
    const listed = (await listJson()).find((x) => x.id === 'live');
    assert.equal(listed.online, true);
    assert.ok(listed.epoch > 0);

    // last_seen moves forward through the batched (10 s) write.
    await waitFor(async () => (await psqlAt(url,
        "SELECT last_seen > connected_at FROM cluster_sessions WHERE cluster_id = 'live'")) === 't',
    { timeoutMs: 15000, intervalMs: 250, what: 'last_seen written after connect' });

    const rot = await cli(['rotate-token', 'live']);
    assert.equal(rot.code, 0, rot.stderr);
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/live`, { headers: await adminHeaders(hub.base) })).json.online === false,
        { timeoutMs: 5000, intervalMs: 100, what: 'live offline after rotate-token' });
    await waitFor(async () => (await psqlAt(url,
        "SELECT count(*) FROM cluster_sessions WHERE cluster_id = 'live' AND connected")) === '0',
    { timeoutMs: 5000, intervalMs: 100, what: 'session row marked disconnected' });
    assert.equal((await listJson()).find((x) => x.id === 'live').online, false);
    assert.match(hub.proc.logs(), /cluster session revoked.*cluster=live.*token rotated/);
});
