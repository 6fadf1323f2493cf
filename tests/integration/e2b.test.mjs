// The agent's E2B-compatible API (:8090) over HTTP, with real PostgreSQL, hub,
// agent (local runtime) and envd processes: auth, every route and shape,
// scoping to the caller, pagination and filters, reserved metadata, the
// exact 400 list, the fail-closed network rule, the 501 catalogue and its
// counter, logs, metrics, templates, /secrets and /api-keys relayed to the
// hub, console lifecycle data, chunked request bodies. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { run, hubBin, hubSecret, waitFor, startHub, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest, waitPool, envdBin } from './lib/sandboxes.mjs';

let stack;
let alpha;
let other; // a second principal in the same namespace (team t2, user u2)

// An env whose only member is in scaling group "small", and a standalone pool.
const GROUPED = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: grouped, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
  - clusterID: alpha
    members:
    - name: grouped-1c0gi
      config:
        scalingGroup: small
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: 1, defaultStartupTimeout: 60s}
`;
const PLAIN_POOL = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxPool
metadata: {name: plainpool, namespace: default}
spec:
  replicas: 1
  templateName: envd
`;

async function hubCli(args) {
    const r = await run(hubBin(), args, {
        env: { ...process.env, DATABASE_URL: stack.pg.url, AGENTBOX_HUB_SECRET: hubSecret },
    });
    assert.equal(r.code, 0, `agentbox-hub ${args.join(' ')}: ${r.stderr}`);
    return r.stdout.trim().split('\n').pop().trim();
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(envdBin()), `build agentbox-envd first (${envdBin()})`);
    // replicas is the pool's maximum concurrency (DESIGN §7): room for the lists' sandboxes
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 6 }), GROUPED, PLAIN_POOL]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    other = await hubCli(['key', 'create', '--team', 't2', '--user', 'u2']);
    await hubCli(['team', 'set-namespace', 't2', 'default']);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 6, 'six warm sandboxes', 60000);
});

let restartedHub; // stack.stop() knows only the hub it started

after(async () => {
    if (restartedHub) await restartedHub.proc.stop();
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

// One E2B call; body objects are sent as JSON, chunked when chunked is set.
async function e2b(method, p, { key = stack.key, headers, body, chunked = false } = {}) {
    const h = headers || (key ? { 'X-API-Key': key } : {});
    const init = { method, headers: { ...h } };
    if (body !== undefined) {
        const text = typeof body === 'string' ? body : JSON.stringify(body);
        init.headers['Content-Type'] = 'application/json';
        if (chunked) {
            const enc = new TextEncoder().encode(text);
            init.body = new ReadableStream({
                start(c) {
                    // two chunks, as the SDK's undici does for a streamed body
                    c.enqueue(enc.slice(0, Math.floor(enc.length / 2)));
                    c.enqueue(enc.slice(Math.floor(enc.length / 2)));
                    c.close();
                },
            });
            init.duplex = 'half';
        } else {
            init.body = text;
        }
    }
    const res = await fetch(alpha.e2b + p, init);
    const text = await res.text();
    let json;
    try {
        json = text ? JSON.parse(text) : undefined;
    } catch {
        json = undefined;
    }
    return { status: res.status, headers: res.headers, text, json };
}

async function create(body, opts = {}) {
    const r = await e2b('POST', '/v2/sandboxes', { body, ...opts });
    assert.equal(r.status, 201, r.text + logs());
    return r.json;
}

async function kill(id) {
    const r = await e2b('DELETE', `/sandboxes/${id}`);
    assert.equal(r.status, 204, r.text);
}

function expectError(r, status, substring) {
    assert.equal(r.status, status, `${r.text} (expected: ${substring})`);
    assert.equal(r.json.code, status, r.text);
    assert.equal(typeof r.json.message, 'string');
    if (substring) assert.ok(r.json.message.includes(substring), `"${r.json.message}" lacks "${substring}"`);
}

test('health is open, everything else needs a key, and every answer carries the server version', async () => {
    const h = await fetch(`${alpha.e2b}/health`);
    assert.equal(h.status, 204);
    assert.ok(h.headers.get('x-agentbox-server-version'));

    const none = await e2b('GET', '/sandboxes', { key: null });
    expectError(none, 401, 'missing API key');
    assert.ok(none.headers.get('x-agentbox-server-version'));
    expectError(await e2b('GET', '/sandboxes', { key: 'agbx_' + '0'.repeat(64) }), 401, 'invalid API key');
    const alt = await e2b('GET', '/sandboxes', { headers: { 'AGENTBOX-API-KEY': stack.key } });
    assert.equal(alt.status, 200, alt.text);
    assert.ok(alt.headers.get('x-agentbox-server-version'));
    // 501s and 404s are authenticated like the rest
    expectError(await e2b('POST', '/sandboxes/x/pause', { key: null, body: {} }), 401);
});

test('create (v2, chunked) answers an armed sandbox in the Sandbox shape, with its metadata stored', async () => {
    const sb = await create({
        templateID: 'demo', timeout: 120,
        // secret-names is the hub's claim record (what the vault may resolve): a caller cannot seed it
        metadata: { k: 'v', team: 'red', 'agentbox.scitix.ai/startup-timeout': '30', 'agentbox.scitix.ai/secret-names': '["X"]' },
        envVars: { FOO: 'bar' }, secure: true, autoPauseMemory: true,
    }, { chunked: true });
    assert.deepEqual(Object.keys(sb).sort(),
        ['alias', 'clientID', 'domain', 'envdAccessToken', 'envdVersion', 'sandboxID', 'templateID', 'trafficAccessToken']);
    assert.match(sb.sandboxID, /^alpha-[a-z0-9]{20}$/);
    assert.equal(sb.templateID, 'demo-1c0gi');
    assert.equal(sb.alias, 'demo', 'alias: the env it was created by (E2B: the template name)');
    assert.equal(sb.clientID, 'default');
    assert.equal(sb.envdVersion, '0.6.13');
    assert.match(sb.envdAccessToken, /^[0-9a-f]{64}$/);
    assert.equal(sb.domain, null);
    assert.equal(sb.trafficAccessToken, '');

    const g = await e2b('GET', `/sandboxes/${sb.sandboxID}`);
    assert.equal(g.status, 200, g.text);
    assert.equal(g.json.sandboxID, sb.sandboxID);
    assert.equal(g.json.state, 'running');
    assert.deepEqual(g.json.metadata, { k: 'v', team: 'red' }, 'reserved keys are consumed and removed');
    assert.equal(g.json.cpuCount, 1);
    assert.equal(g.json.diskSizeMB, 0);
    assert.equal(g.json.domain, null);
    assert.equal(g.json.alias, 'demo');
    assert.equal(g.json.envdAccessToken, sb.envdAccessToken, 'the owner gets the token (the 1.x SDK connects with it)');
    assert.match(g.json.startedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    const life = Date.parse(g.json.endAt) - Date.parse(g.json.startedAt);
    assert.ok(life >= 118000 && life <= 122000, `endAt is timeout after start (${life} ms)`);
    await kill(sb.sandboxID);
});

test('POST /sandboxes (v1) creates too, and a kill of a killed sandbox is 404 with code 404', async () => {
    const r = await e2b('POST', '/sandboxes', { body: { templateID: 'demo' }, chunked: true });
    assert.equal(r.status, 201, r.text + logs());
    await kill(r.json.sandboxID);
    expectError(await e2b('DELETE', `/sandboxes/${r.json.sandboxID}`), 404, 'not found');
    expectError(await e2b('GET', `/sandboxes/${r.json.sandboxID}`), 404);
    expectError(await e2b('GET', '/sandboxes/not-an-id'), 404);
});

test('timeout, refreshes and connect', async () => {
    const sb = await create({ templateID: 'demo', timeout: 60 });
    const id = sb.sandboxID;
    for (const body of [{}, { timeout: 0 }, { timeout: -5 }, { timeout: 'x' }]) {
        expectError(await e2b('POST', `/sandboxes/${id}/timeout`, { body }), 400,
            'timeout must be a positive integer number of seconds');
    }
    const t = await e2b('POST', `/sandboxes/${id}/timeout`, { body: { timeout: 600 }, chunked: true });
    assert.equal(t.status, 204, t.text);
    let g = await e2b('GET', `/sandboxes/${id}`);
    const left = Date.parse(g.json.endAt) - Date.now();
    assert.ok(left > 590000 && left <= 601000, `endAt moved to now + 600 s (${left})`);

    assert.equal((await e2b('POST', `/sandboxes/${id}/refreshes`, { body: {} })).status, 204);
    assert.equal((await e2b('POST', `/sandboxes/${id}/refreshes`, { body: { duration: 30 } })).status, 204);
    g = await e2b('GET', `/sandboxes/${id}`);
    assert.ok(Date.parse(g.json.endAt) - Date.now() <= 31000, 'refreshes with a duration sets the timeout');

    for (const p of [`/sandboxes/${id}/connect`, `/v2/sandboxes/${id}/connect`]) {
        const c = await e2b('POST', p, { body: { timeout: 300 }, chunked: true });
        assert.equal(c.status, 200, c.text);
        assert.equal(c.json.sandboxID, id);
        assert.equal(c.json.envdAccessToken, sb.envdAccessToken, 'connect hands out the same token');
    }
    g = await e2b('GET', `/sandboxes/${id}`);
    assert.ok(Date.parse(g.json.endAt) - Date.now() > 290000, 'connect replaced the timeout');
    await kill(id);
    expectError(await e2b('POST', `/v2/sandboxes/${id}/connect`, { body: {} }), 404);
    expectError(await e2b('POST', `/sandboxes/${id}/timeout`, { body: { timeout: 5 } }), 404);
});

test("another principal's sandbox is 404 everywhere and absent from its lists", async () => {
    const sb = await create({ templateID: 'demo', metadata: { owner: 'first' } });
    const id = sb.sandboxID;
    for (const [m, p, body] of [
        ['GET', `/sandboxes/${id}`], ['DELETE', `/sandboxes/${id}`],
        ['POST', `/sandboxes/${id}/timeout`, { timeout: 5 }], ['POST', `/sandboxes/${id}/refreshes`, {}],
        ['POST', `/sandboxes/${id}/connect`, {}], ['POST', `/v2/sandboxes/${id}/connect`, {}],
        ['GET', `/sandboxes/${id}/logs`], ['GET', `/v2/sandboxes/${id}/logs`],
        ['PUT', `/sandboxes/${id}/network`, {}],
    ]) {
        expectError(await e2b(m, p, { key: other, body }), 404);
    }
    const l1 = await e2b('GET', '/sandboxes', { key: other });
    assert.deepEqual(l1.json, []);
    const l2 = await e2b('GET', '/v2/sandboxes', { key: other });
    assert.deepEqual(l2.json, []);
    assert.equal(l2.headers.get('x-total-running'), '0');
    const mine = await e2b('GET', '/sandboxes');
    assert.ok(mine.json.some((s) => s.sandboxID === id));
    assert.equal((await e2b('GET', `/sandboxes/${id}`)).status, 200, 'still alive after the other key tried');
    await kill(id);
});

test('v2 list: metadata and state filters, limit, nextToken, X-Next-Token, X-Total-Running', async () => {
    const ids = [];
    for (let i = 0; i < 3; i++) {
        ids.push((await create({ templateID: 'demo', metadata: { batch: 'p', n: String(i), 'odd key': 'a b&c' } })).sandboxID);
    }
    const other1 = (await create({ templateID: 'demo', metadata: { batch: 'q' } })).sandboxID;
    try {
        const q = encodeURIComponent(new URLSearchParams({ batch: 'p' }).toString());
        let r = await e2b('GET', `/v2/sandboxes?metadata=${q}&state=running,paused&limit=2`);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.length, 2);
        assert.equal(r.headers.get('x-total-running'), '3');
        const next = r.headers.get('x-next-token');
        assert.ok(next, 'a next token while more remain');
        assert.match(next, /^[A-Za-z0-9_-]+$/, 'base64url without padding');
        const r2 = await e2b('GET', `/v2/sandboxes?metadata=${q}&limit=2&nextToken=${next}`);
        assert.equal(r2.json.length, 1);
        assert.ok(!r2.headers.get('x-next-token'), 'no token on the last page');
        const seen = [...r.json, ...r2.json].map((s) => s.sandboxID).sort();
        assert.deepEqual(seen, [...ids].sort());
        for (const s of [...r.json, ...r2.json]) {
            assert.equal(s.state, 'running');
            assert.equal(s.metadata.batch, 'p');
            assert.ok(!('domain' in s), 'ListedSandbox has no domain');
        }
        // two pairs must both match; a value with reserved characters survives the double encoding
        const q2 = encodeURIComponent(new URLSearchParams({ batch: 'p', 'odd key': 'a b&c', n: '1' }).toString());
        r = await e2b('GET', `/v2/sandboxes?metadata=${q2}`);
        assert.deepEqual(r.json.map((s) => s.sandboxID), [ids[1]]);
        r = await e2b('GET', `/v2/sandboxes?metadata=${q}&state=paused`);
        assert.deepEqual(r.json, [], 'nothing is ever paused');
        expectError(await e2b('GET', '/v2/sandboxes?metadata=novalue'), 400, 'invalid metadata filter');
        // a NUL inside the filter would cut "batch%00x" to "batch" (or "p%00q" to "p") and match
        // sandboxes the caller did not ask for: refused, naming the part
        r = await e2b('GET', `/v2/sandboxes?metadata=${encodeURIComponent('batch%00x=p')}`);
        expectError(r, 400, 'the key of pair 1');
        r = await e2b('GET', `/v2/sandboxes?metadata=${encodeURIComponent('batch=p%00q')}`);
        expectError(r, 400, 'the value of "batch"');
        r = await e2b('GET', `/v2/sandboxes?metadata=${q}&nextToken=%%%garbage`);
        assert.equal(r.json.length, 3, 'a malformed token means the first page');
        r = await e2b('GET', '/sandboxes');
        assert.ok(r.json.some((s) => s.sandboxID === other1));
    } finally {
        for (const id of [...ids, other1]) await kill(id);
    }
});

test('templateID grammar: bare names are envs only, local:: reaches pools, other clusters are forwarded', async () => {
    expectError(await e2b('POST', '/v2/sandboxes', { body: {} }), 400, 'templateID is required');
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: '  ' } }), 400, 'templateID is required');
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: 'alpha::' } }), 400, 'templateID is required');
    expectError(await e2b('POST', '/v2/sandboxes', { body: '' }), 400, 'templateID is required');
    expectError(await e2b('POST', '/v2/sandboxes', { body: '{"templateID":' }), 400, 'not valid JSON');
    const nf = await e2b('POST', '/v2/sandboxes', { body: { templateID: 'nosuch' } });
    expectError(nf, 400, 'GET /templates lists');
    // a standalone pool is never reached by a bare name
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: 'plainpool' } }), 400, 'not found');
    const sb = await create({ templateID: 'alpha::plainpool' });
    assert.equal(sb.templateID, 'plainpool');
    await kill(sb.sandboxID);
    const e = await create({ templateID: ' alpha :: demo ' });
    assert.equal(e.templateID, 'demo-1c0gi');
    await kill(e.sandboxID);
    // another cluster: forwarded through the hub, which has no session for it
    const f = await e2b('POST', '/v2/sandboxes', { body: { templateID: 'beta::demo' } });
    assert.equal(f.status, 503, f.text);
    assert.equal(f.json.code, 503);
    assert.ok(/beta/.test(f.json.message), f.text);
    // id-addressed calls for another cluster's id go there too
    const g = await e2b('GET', `/sandboxes/beta-${'a'.repeat(20)}`);
    assert.equal(g.status, 503, g.text);
});

test('reserved metadata: image override refused on the local runtime, scaling group, no-wait', async () => {
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: 'demo//ubuntu:22.04' } }), 400, 'kube runtime');
    expectError(await e2b('POST', '/v2/sandboxes', {
        body: { templateID: 'demo', metadata: { 'agentbox.scitix.ai/image': 'ubuntu:22.04' } },
    }), 400, 'kube runtime');
    expectError(await e2b('POST', '/v2/sandboxes', {
        body: { templateID: 'grouped', metadata: { 'agentbox.scitix.ai/scaling-group': 'large' } },
    }), 503, 'no eligible members in scaling group "large"');
    const g = await create({ templateID: 'grouped', metadata: { 'agentbox.scitix.ai/scaling-group': 'small' } });
    assert.equal(g.templateID, 'grouped-1c0gi');
    await kill(g.sandboxID);

    const t0 = Date.now();
    const nw = await create({
        templateID: 'demo',
        metadata: { 'agentbox.scitix.ai/no-wait': 'true', 'agentbox.scitix.ai/allow-private-networks': 'true', x: '1' },
    });
    assert.match(nw.sandboxID, /^alpha-[a-z0-9]{20}$/);
    assert.ok(Date.now() - t0 < 5000);
    const ready = await waitFor(async () => {
        const r = await e2b('GET', `/sandboxes/${nw.sandboxID}`);
        return r.status === 200 ? r.json : null;
    }, { what: 'the no-wait sandbox armed' });
    assert.deepEqual(ready.metadata, { x: '1' });
    await kill(nw.sandboxID);
});

test('a no-wait create still waiting for a sandbox can be seen and killed by its owner only, and never runs', async () => {
    // grouped-1c0gi has one place: while g holds it, a no-wait create waits
    await waitPool(alpha, 'grouped-1c0gi', (s) => s.idle === 1, 'grouped warm', 60000);
    const g = await create({ templateID: 'grouped' });
    const nw = await create({ templateID: 'grouped', metadata: { 'agentbox.scitix.ai/no-wait': 'true', y: '2' } });
    await waitPool(alpha, 'grouped-1c0gi', (s) => s.pending === 1, 'the no-wait claim waiting');
    // another tenant neither sees nor kills it
    expectError(await e2b('GET', `/sandboxes/${nw.sandboxID}`, { key: other }), 404);
    expectError(await e2b('DELETE', `/sandboxes/${nw.sandboxID}`, { key: other }), 404);
    const seen = await e2b('GET', `/sandboxes/${nw.sandboxID}`);
    assert.equal(seen.status, 200, seen.text);
    assert.deepEqual(seen.json.metadata, { y: '2' });
    await kill(nw.sandboxID);
    const gone = await waitPool(alpha, 'grouped-1c0gi', (s) => s.pending === 0, 'the no-wait claim gone');
    assert.equal(gone.running, 1, 'only g runs');
    expectError(await e2b('GET', `/sandboxes/${nw.sandboxID}`), 404);
    // g's place refilled: the killed claim does not take it
    await kill(g.sandboxID);
    const after = await waitPool(alpha, 'grouped-1c0gi', (s) => s.idle === 1 && s.stopping === 0, 'grouped refilled', 60000);
    assert.equal(after.running, 0, JSON.stringify(after));
    expectError(await e2b('GET', `/sandboxes/${nw.sandboxID}`), 404);
});

// The exact 400 list of create (reference §2.3, §5.5): [body fields, words of the message].
const REFUSALS = [
    [{ autoPause: true }, 'autoPause is not supported'],
    [{ autoResume: { enabled: true } }, 'autoResume is not supported'],
    [{ iam: { tokens: { gh: { audience: 'x' } } } }, 'POST /secrets'],
    [{ mcp: { github: {} } }, 'mcp is not supported'],
    [{ volumeMounts: [{ name: 'v', path: '/data' }] }, 'SandboxEnv'],
    [{ network: { egressProxy: { address: 'socks5://169.254.169.254:1080' } } }, 'network.egressProxy.address 169.254.169.254 is a metadata address'],
    [{ network: { httpsPorts: [8443] } }, 'network.httpsPorts is not supported'],
    [{ network: { maskRequestHost: 'x' } }, 'network.maskRequestHost is not supported'],
    [{ network: { rules: { '*.github.com': [{ transform: { headers: { A: '${e2b.secrets.gh}' } } }] } } }, 'wildcard'],
    [{ network: { rules: { 'api.github.com': [{ transform: { headers: { A: 'literal-token' } } }] } } }, 'literal value'],
    [{ network: { rules: { 'api.github.com': [{ transform: { headers: { A: 'Bearer {{gh}}' } } }] } } }, '{{ }}'],
    [{ network: { rules: { 'api.github.com': [{ transform: { headers: { A: '${e2b.identity.token}' } } }] } } }, 'e2b.identity'],
    [{ network: { rules: { 'api.github.com': [{ transform: { headers: { A: '${e2b.secrets.}' } } }] } } }, 'malformed'],
    [{ network: { rules: { 'api.github.com': [{ transform: { headers: { A: '${e2b.secrets.gh}' } } }] } }, allow_internet_access: false }, 'nothing can reach'],
    [{ network: { allowOut: ['*.com'] } }, 'network.allowOut[0]'],
    [{ network: { denyOut: 'x' } }, 'network.denyOut must be an array'],
];

test('create refuses what AgentBox cannot honour, each 400 naming the alternative', async () => {
    const rule = (ref) => ({ network: { rules: { 'api.github.com': [{ transform: { headers: { Authorization: `Bearer \${e2b.secrets.${ref}}` } } }] } } });
    // secret names are checked against the caller's vault first
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: 'demo', ...rule('gh') } }), 400,
        'unknown secret "gh": this user has no secrets yet');
    assert.equal((await e2b('POST', '/secrets', { body: { name: 'gh', value: 'token' } })).status, 201);
    expectError(await e2b('POST', '/v2/sandboxes', { body: { templateID: 'demo', ...rule('nope') } }), 400,
        'unknown secret "nope". Existing secrets: gh');
    for (const [extra, words] of REFUSALS) {
        const r = await e2b('POST', '/v2/sandboxes', { body: { templateID: 'demo', ...extra } });
        expectError(r, 400, words);
    }
    // rules with known secrets: the sandbox is created once the hub's vault resolved them for
    // this claim (the gateway injects them; tests/integration/egress_intercept.test.mjs)
    const withRules = await create({ templateID: 'demo', ...rule('gh') });
    await kill(withRules.sandboxID);
    // allowOut / denyOut are enforced by the local runtime's egress gateway (tests/e2e/egress.test.mjs)
    const filtered = await create({ templateID: 'demo', network: { allowOut: ['1.1.1.1'], denyOut: ['10.0.0.0/8'] } });
    await kill(filtered.sandboxID);
    // empty lists and false flags are no filtering and no refusal
    const ok = await create({
        templateID: 'demo', autoPause: false, autoResume: { enabled: false }, iam: { tokens: {} },
        volumeMounts: [], network: { allowOut: [], denyOut: [] }, allow_internet_access: false,
    });
    await kill(ok.sandboxID);
    assert.equal((await e2b('DELETE', '/secrets/gh')).status, 204);
});

test('PUT /sandboxes/{id}/network updates a live sandbox, with the create\'s refusals', async () => {
    const sb = await create({ templateID: 'demo', allow_internet_access: false });
    const id = sb.sandboxID;
    assert.equal((await e2b('PUT', `/sandboxes/${id}/network`, { body: { allowOut: ['1.2.3.4'] } })).status, 204);
    expectError(await e2b('PUT', `/sandboxes/${id}/network`, { body: { egressProxy: { address: 'x' } } }), 400, 'egressProxy');
    expectError(await e2b('PUT', `/sandboxes/${id}/network`, { body: { allowOut: ['not a host'] } }), 400, 'network.allowOut[0]');
    expectError(await e2b('PUT', `/sandboxes/${id}/network`, { body: { allow_internet_access: 'yes' } }), 400, 'boolean');
    assert.equal((await e2b('PUT', `/sandboxes/${id}/network`, { body: { allow_internet_access: true } })).status, 204);
    assert.equal((await e2b('PUT', `/sandboxes/${id}/network`, { body: {} })).status, 204);
    expectError(await e2b('PUT', '/sandboxes/nosuch/network', { body: {} }), 404, 'nosuch');
    await kill(id);
});

// [method, path, operation, category, words of the catalogue message]
const CATALOGUE = [
    ['POST', '/sandboxes/S/pause', 'PostSandboxesSandboxIDPause', 'architectural', 'timeout'],
    ['POST', '/sandboxes/S/resume', 'PostSandboxesSandboxIDResume', 'architectural', 'timeout'],
    ['POST', '/sandboxes/S/snapshots', 'PostSandboxesSandboxIDSnapshots', 'architectural', 'volume'],
    ['GET', '/snapshots', 'GetSnapshots', 'architectural', 'snapshots'],
    ['POST', '/sandboxes/S/fork', 'PostSandboxesSandboxIDFork', 'architectural', 'copy'],
    ['GET', '/volumes', 'GetVolumes', 'architectural', 'SandboxEnv'],
    ['POST', '/volumes', 'PostVolumes', 'architectural', 'SandboxEnv'],
    ['GET', '/volumes/v1', 'GetVolumesVolumeID', 'architectural', 'SandboxEnv'],
    ['DELETE', '/volumes/v1', 'DeleteVolumesVolumeID', 'architectural', 'SandboxEnv'],
    ['GET', '/nodes', 'GetNodes', 'architectural', 'console'],
    ['GET', '/nodes/n1', 'GetNodesNodeID', 'architectural', 'console'],
    ['POST', '/nodes/n1', 'PostNodesNodeID', 'architectural', 'console'],
    ['GET', '/teams', 'GetTeams', 'architectural', 'console'],
    ['GET', '/teams/t/metrics', 'GetTeamsTeamIDMetrics', 'architectural', 'console'],
    ['GET', '/teams/t/metrics/max', 'GetTeamsTeamIDMetricsMax', 'architectural', 'console'],
    ['GET', '/admin/sandboxes/running-counts', 'GetAdminSandboxesRunningCounts', 'architectural', 'console'],
    ['POST', '/admin/teams/t/builds/cancel', 'PostAdminTeamsTeamIDBuildsCancel', 'architectural', 'console'],
    ['POST', '/admin/teams/t/api-keys', 'PostAdminTeamsTeamIDApiKeys', 'architectural', 'console'],
    ['DELETE', '/admin/teams/t/api-keys/k', 'DeleteAdminTeamsTeamIDApiKeysApiKeyID', 'architectural', 'console'],
    ['POST', '/admin/teams/t/sandboxes/kill', 'PostAdminTeamsTeamIDSandboxesKill', 'architectural', 'console'],
    ['POST', '/access-tokens', 'PostAccessTokens', 'architectural', 'X-API-Key'],
    ['DELETE', '/access-tokens/a', 'DeleteAccessTokensAccessTokenID', 'architectural', 'X-API-Key'],
    ['POST', '/templates', 'PostTemplates', 'platform', 'GET /templates'],
    ['POST', '/templates/demo', 'PostTemplatesTemplateID', 'platform', 'prebuilt image'],
    ['PATCH', '/templates/demo', 'PatchTemplatesTemplateID', 'platform', 'prebuilt image'],
    ['DELETE', '/templates/demo', 'DeleteTemplatesTemplateID', 'platform', 'prebuilt image'],
    ['POST', '/templates/demo/builds/b1', 'PostTemplatesTemplateIDBuildsBuildID', 'platform', 'prebuilt image'],
    ['GET', '/templates/demo/builds/b1/logs', 'GetTemplatesTemplateIDBuildsBuildIDLogs', 'platform', 'prebuilt image'],
    ['GET', '/templates/demo/builds/b1/status', 'GetTemplatesTemplateIDBuildsBuildIDStatus', 'platform', 'prebuilt image'],
    ['GET', '/templates/demo/files/h', 'GetTemplatesTemplateIDFilesHash', 'platform', 'prebuilt image'],
    ['POST', '/v2/templates', 'PostV2Templates', 'platform', 'prebuilt image'],
    ['PATCH', '/v2/templates/demo', 'PatchV2TemplatesTemplateID', 'platform', 'prebuilt image'],
    ['POST', '/v2/templates/demo/builds/b1', 'PostV2TemplatesTemplateIDBuildsBuildID', 'platform', 'prebuilt image'],
    ['POST', '/v3/templates', 'PostV3Templates', 'platform', 'prebuilt image'],
    ['GET', '/templates/demo/tags', 'GetTemplatesTemplateIDTags', 'platform', 'image tag'],
    ['POST', '/templates/tags', 'PostTemplatesTags', 'platform', 'image tag'],
    ['DELETE', '/templates/tags', 'DeleteTemplatesTags', 'platform', 'image tag'],
    ['GET', '/templates/aliases/demo', 'GetTemplatesAliasesAlias', 'unimplemented', 'Env name'],
    ['GET', '/v2/templates', 'GetV2Templates', 'unimplemented', 'GET /templates'],
    ['PATCH', '/api-keys/k', 'PatchApiKeysApiKeyID', 'unimplemented', 'delete it'],
];

async function agentMetrics() {
    return (await fetch(`${alpha.metrics}/metrics`)).text();
}

function counter(text, op, cat) {
    const re = new RegExp(`^agentbox_e2b_unsupported_total\\{operation="${op}",category="${cat}"\\} (\\d+)`, 'm');
    const m = re.exec(text);
    return m ? Number(m[1]) : 0;
}

test('the 501 catalogue: every unsupported operation says what to use instead and is counted', async () => {
    const before = await agentMetrics();
    for (const [m, p, op, cat, words] of CATALOGUE) {
        const r = await e2b(m, p, { body: m === 'GET' || m === 'DELETE' ? undefined : {} });
        assert.equal(r.status, 501, `${m} ${p}: ${r.text}`);
        assert.match(r.headers.get('content-type'), /application\/json/);
        assert.equal(r.json.code, 501);
        assert.ok(r.json.message.includes(words), `${m} ${p}: "${r.json.message}" lacks "${words}"`);
    }
    const afterText = await agentMetrics();
    for (const [, , op, cat] of CATALOGUE) {
        assert.equal(counter(afterText, op, cat), counter(before, op, cat) + 1, `counter of ${op}`);
    }
});

test('logs: a live sandbox reads its envd output with levels and filters; an ended one needs the log service', async () => {
    const sb = await create({ templateID: 'demo' });
    const id = sb.sandboxID;
    const v1 = await e2b('GET', `/sandboxes/${id}/logs?limit=50`);
    assert.equal(v1.status, 200, v1.text);
    assert.ok(Array.isArray(v1.json.logs) && Array.isArray(v1.json.logEntries));
    assert.ok(v1.json.logEntries.length > 0, 'envd wrote at least its start line');
    const e = v1.json.logEntries[0];
    assert.deepEqual(Object.keys(e).sort(), ['fields', 'level', 'message', 'timestamp']);
    assert.deepEqual(e.fields, { container: 'envd', source: 'stdout' });
    assert.ok(['debug', 'info', 'warn', 'error'].includes(e.level));
    assert.equal(v1.json.logs[0].line, e.message);
    const serving = v1.json.logEntries.find((x) => x.message.includes('envd serving'));
    assert.ok(serving, v1.text);
    assert.equal(serving.level, 'info', 'INFO after the timestamp');

    const v2 = await e2b('GET', `/v2/sandboxes/${id}/logs?search=${encodeURIComponent('envd serving')}&direction=backward`);
    assert.equal(v2.status, 200, v2.text);
    assert.ok(v2.json.logs.length >= 1);
    assert.ok(v2.json.logs.every((x) => x.message.includes('envd serving')));
    const errOnly = await e2b('GET', `/v2/sandboxes/${id}/logs?level=error&search=${encodeURIComponent('envd serving')}`);
    assert.deepEqual(errOnly.json.logs, []);
    expectError(await e2b('GET', `/v2/sandboxes/${id}/logs?level=loud`), 400, 'level');
    await kill(id);
    const gone = await e2b('GET', `/sandboxes/${id}/logs`);
    expectError(gone, 501, '--log-service-url');
});

test('metrics: without --prometheus-url the routes answer the runtime\'s usage; the agent exports cAdvisor-named series', async () => {
    const sb = await create({ templateID: 'demo' });
    const id = sb.sandboxID;
    const one = await e2b('GET', `/sandboxes/${id}/metrics`);
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.length, 1, one.text);
    const m = one.json[0];
    assert.deepEqual(Object.keys(m).sort(), ['cpuCount', 'cpuUsedPct', 'diskTotal', 'diskUsed', 'memCache',
        'memTotal', 'memUsed', 'timestamp', 'timestampUnix']);
    assert.equal(m.cpuCount, 1);
    assert.equal(m.memTotal, 512 * 1024 * 1024, 'the member pool\'s memory');
    assert.ok(m.memUsed > 0, 'envd has resident memory');
    assert.ok(Math.abs(m.timestampUnix * 1000 - Date.now()) < 10000);
    const many = await e2b('GET', `/sandboxes/metrics?sandbox_ids=${id},alpha-${'z'.repeat(20)}`);
    assert.equal(many.status, 200, many.text);
    assert.deepEqual(Object.keys(many.json.sandboxes), [id], 'unknown ids are left out');
    assert.ok(many.json.sandboxes[id].memUsed > 0);
    expectError(await e2b('GET', `/sandboxes/${id}/metrics?start=100&end=50`), 400, 'start must be earlier than end');
    const text = await waitFor(async () => {
        const t = await agentMetrics();
        return t.includes(`container_memory_working_set_bytes{namespace="default",pod="${id}",container="sandbox"}`) ? t : null;
    }, { timeoutMs: 20000, what: 'per-sandbox series on /metrics' });
    const mem = new RegExp(`^container_memory_working_set_bytes\\{namespace="default",pod="${id}",container="sandbox"\\} (\\S+)`, 'm').exec(text);
    assert.ok(Number(mem[1]) > 0, 'envd has resident memory');
    assert.match(text, new RegExp(`^container_cpu_usage_seconds_total\\{namespace="default",pod="${id}",container="sandbox"\\} `, 'm'));
    assert.match(text, new RegExp(`^container_fs_usage_bytes\\{namespace="default",pod="${id}",container="sandbox"\\} `, 'm'));
    await kill(id);
    await waitFor(async () => !(await agentMetrics()).includes(`pod="${id}"`),
        { timeoutMs: 20000, what: 'series of a killed sandbox removed' });
});

test('templates are the caller namespace envs; a miss says to pass an env name', async () => {
    const l = await e2b('GET', '/templates');
    assert.equal(l.status, 200, l.text);
    const names = l.json.map((t) => t.templateID);
    assert.deepEqual(names, ['demo', 'grouped']);
    const demo = l.json[0];
    assert.deepEqual(demo.aliases, ['demo', 'demo-1c0gi']);
    assert.deepEqual(demo.names, ['demo']);
    assert.equal(demo.buildStatus, 'ready');
    assert.equal(demo.public, false);
    assert.equal(demo.envdVersion, '0.6.13');
    const g = await e2b('GET', '/templates/demo');
    assert.equal(g.status, 200);
    assert.deepEqual(g.json.builds, []);
    const p = await e2b('GET', '/templates/plainpool');
    assert.equal(p.status, 200, 'a pool name answers with the legacy projection');
    assert.equal(p.json.public, true);
    expectError(await e2b('GET', '/templates/nosuch'), 404, 'pass a SandboxEnv name (GET /templates lists them)');
});

test('/secrets and /api-keys are relayed to the hub', async () => {
    const c = await e2b('POST', '/secrets', { body: { name: 'gh', value: 'v1', metadata: { a: 'b' } }, chunked: true });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.secretID, 'sec_gh');
    const l = await e2b('GET', '/secrets');
    assert.deepEqual(l.json.map((s) => s.name), ['gh']);
    assert.deepEqual((await e2b('GET', '/secrets', { key: other })).json, [], 'scoped to the caller');
    const u = await e2b('POST', '/secrets/gh', { body: { value: 'v2' } });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.currentVersion, 2);
    assert.equal((await e2b('GET', '/secrets/sec_gh')).json.name, 'gh');
    assert.equal((await e2b('DELETE', '/secrets/gh')).status, 204);
    assert.equal((await e2b('GET', '/secrets/gh')).status, 404);
    expectError(await e2b('GET', '/secrets', { key: 'agbx_' + '1'.repeat(64) }), 401);

    const keys = await e2b('GET', '/api-keys');
    assert.equal(keys.status, 200, keys.text);
    assert.ok(keys.json.length >= 1);
    for (const k of keys.json) {
        assert.equal(typeof k.name, 'string');
        assert.equal(k.mask.valueLength, 16);
        assert.ok(!('key' in k), 'a listing never returns a key');
    }
    expectError(await e2b('POST', '/api-keys', { body: '' }), 400, 'request body required');
    const nk = await e2b('POST', '/api-keys', { body: { name: 'ci' } });
    assert.equal(nk.status, 201, nk.text);
    assert.match(nk.json.key, /^agbx_[0-9a-f]{64}$/);
    assert.equal(nk.json.name, 'ci');
    assert.equal((await e2b('GET', '/templates', { key: nk.json.key })).status, 200, 'the new key works');
    assert.equal((await e2b('DELETE', `/api-keys/${nk.json.id}`)).status, 204);
    expectError(await e2b('DELETE', `/api-keys/${nk.json.id}`), 404);

    // The relays carried an assertion, never the key (DESIGN §9, §11): the hub's
    // bridge refuses and logs any raw credential header, and no key text
    // reaches the hub's log.
    const bearer = await e2b('GET', '/secrets', { headers: { Authorization: `Bearer ${stack.key}` } });
    assert.equal(bearer.status, 200, `a Bearer key is hashed too: ${bearer.text}`);
    const hubLog = stack.hub.proc.logs();
    assert.ok(!hubLog.includes('raw API key'), `the hub saw a raw key from the agent:\n${hubLog}`);
    assert.ok(!hubLog.includes(stack.key.slice(5)) && !hubLog.includes(nk.json.key.slice(5)),
        'no key text in the hub log');
});

test('lifecycle reaches the console: claimed → running → ended with its reason', async () => {
    const sb = await create({ templateID: 'demo', metadata: { console: 'yes' } });
    const hubGet = async (p) => {
        const r = await fetch(stack.hub.base + p, { headers: { Authorization: `Bearer ${stack.key}` } });
        return { status: r.status, json: await r.json() };
    };
    const running = await waitFor(async () => {
        const r = await hubGet('/api/v1/sandboxes?cluster=alpha');
        const s = r.json.items && r.json.items.find((x) => x.id === sb.sandboxID);
        return s && s.state === 'running' ? s : null;
    }, { what: 'the sandbox running in the console' });
    assert.equal(running.pool, 'demo-1c0gi');
    assert.equal(running.env, 'demo');
    assert.equal(running.team, 't');
    assert.deepEqual(running.metadata, { console: 'yes' });
    await kill(sb.sandboxID);
    const ended = await waitFor(async () => {
        const r = await hubGet(`/api/v1/sandboxes?state=ended&limit=1000`);
        const s = r.json.items.find((x) => x.id === sb.sandboxID);
        return s && s.state === 'ended' ? s : null;
    }, { what: 'the sandbox ended in the console' });
    assert.equal(ended.endReason, 'killed');
    const st = await hubGet('/api/v1/statistics/sandboxes');
    assert.equal(st.status, 200);
    assert.ok(st.json.ended >= 1);
    assert.ok(st.json.byCluster.some((c) => c.cluster === 'alpha'));
    const otherView = await fetch(stack.hub.base + '/api/v1/sandboxes', { headers: { Authorization: `Bearer ${other}` } });
    const ov = await otherView.json();
    assert.ok(!ov.items.some((x) => x.id === sb.sandboxID), 'a tenant sees its own sandboxes only');
});

test('a sandbox that ends by its timeout is reported ended', async () => {
    const sb = await create({ templateID: 'demo', timeout: 1 });
    await waitFor(async () => (await e2b('GET', `/sandboxes/${sb.sandboxID}`)).status === 404,
        { timeoutMs: 15000, what: 'the sandbox timed out' });
    await waitFor(async () => {
        const r = await fetch(`${stack.hub.base}/api/v1/sandboxes?state=ended&limit=1000`, { headers: { Authorization: `Bearer ${stack.key}` } });
        const j = await r.json();
        const s = j.items.find((x) => x.id === sb.sandboxID);
        return s && s.endReason === 'ended';
    }, { timeoutMs: 15000, what: 'the timed-out sandbox ended in the console' });
});

test('events survive a hub outage without blocking creates, and arrive once it is back', async () => {
    const { port, tunnelPort } = stack.hub;
    await stack.hub.proc.stop();
    // creates keep working from the agent's key cache; the events queue meanwhile
    const t0 = Date.now();
    const sb = await create({ templateID: 'demo', metadata: { outage: 'yes' } });
    assert.ok(Date.now() - t0 < 5000, 'create does not wait for the hub');
    await kill(sb.sandboxID);
    restartedHub = await startHub(stack.pg.url, { port, tunnelPort });
    stack.hub = restartedHub;
    const ended = await waitFor(async () => {
        const r = await fetch(`${stack.hub.base}/api/v1/sandboxes?state=ended&limit=1000`, { headers: { Authorization: `Bearer ${stack.key}` } });
        if (r.status !== 200) return null;
        const s = (await r.json()).items.find((x) => x.id === sb.sandboxID);
        return s && s.state === 'ended' ? s : null;
    }, { timeoutMs: 20000, what: 'events queued during the outage delivered' });
    assert.equal(ended.endReason, 'killed');
    assert.deepEqual(ended.metadata, { outage: 'yes' });
    assert.match(await agentMetrics(), /^agentbox_e2b_events_dropped_total 0$/m, 'nothing dropped');
});

test('after PostgreSQL restarts, the hub prepares its statements again on the new connections: no batch is refused', async () => {
    const endedRow = async (metadata, what) => {
        const sb = await create({ templateID: 'demo', metadata });
        await kill(sb.sandboxID);
        const ended = await waitFor(async () => {
            const r = await fetch(`${stack.hub.base}/api/v1/sandboxes?state=ended&limit=1000`, { headers: { Authorization: `Bearer ${stack.key}` } });
            if (r.status !== 200) return null;
            const s = (await r.json()).items.find((x) => x.id === sb.sandboxID);
            return s && s.state === 'ended' ? s : null;
        }, { timeoutMs: 20000, what });
        assert.deepEqual(ended.metadata, metadata);
    };
    // prepared on the hub's connections of now
    await endedRow({ restart: 'before' }, 'the events before the restart stored');
    await stack.pg.stop();
    await stack.pg.start();
    await waitFor(async () => (await fetch(`${stack.hub.base}/readyz`)).status === 200,
        { timeoutMs: 15000, what: 'the hub ready again after PostgreSQL restarted' });
    await endedRow({ restart: 'after' }, 'the events after the restart stored');
    // the upsert ran prepared on connections that never prepared it, or ran
    // it prepared where the restart had dropped it: either is an error here
    assert.doesNotMatch(stack.pg.logs(), /prepared statement "abx_sandbox_event"/);
});

test('no sanitizer report in the agent, and none when SIGTERM stops it', async () => {
    assertSanitizerClean(alpha.proc);
    // agent_fini frees every module (the e2b layer included): LeakSanitizer,
    // which runs at exit, finds nothing and the exit code stays 0
    const exit = await alpha.proc.stop('SIGTERM');
    assert.equal(exit.code, 0, `agent exited with ${exit.code}/${exit.signal}:${logs()}`);
    assertSanitizerClean(alpha.proc);
    assert.match(alpha.proc.logs(), /agent stopping/);
});
