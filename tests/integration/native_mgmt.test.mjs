// The native management API (issue 16 part 1, reference §4.2-§4.4) as abx
// drives it: direct mode (<agent>/v1/... with AGENTBOX-API-KEY) and console
// mode (<hub>/api/clusters/<id>/v1/... with a Bearer key). Envs, member
// pools and scaling groups created, applied (PUT = desired state), scaled and
// deleted with the exact PUT rules; the native error shape everywhere; the
// pull secret's keep signal; and writes that survive an agent restart while
// the YAML directory stays the seed. Needs root (the local runtime).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { createKey, waitFor, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest, waitPool, poolStatus } from './lib/sandboxes.mjs';
import { requestJson } from './lib/scaffold.mjs';

let stack;
let alpha;
let manifests;
let admin;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 1 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    admin = (await createKey(stack.pg.url, 'ops', 'root', ['--admin'])).token;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 1, 'seed pool warm');
});

after(async () => {
    if (process.env.NM_DEBUG && alpha) console.log(alpha.proc.logs().split("\n").slice(-60).join("\n"));
    if (stack) await stack.stop();
    if (manifests) fs.rmSync(manifests, { recursive: true, force: true });
});

// abx direct mode: <clusterApi>/v1<path> with AGENTBOX-API-KEY.
async function direct(key, method, p, body) {
    return call(`${alpha.native}${p}`, key ? { 'AGENTBOX-API-KEY': key } : {}, method, body);
}
// abx console mode: <endpoint>/api/clusters/<cluster>/v1<path> with a Bearer key.
async function consoleCall(key, method, p, body) {
    return call(`${stack.hub.base}/api/clusters/alpha${p}`, { Authorization: `Bearer ${key}` }, method, body);
}
const call = (url, headers, method, body) => requestJson(url, { method, headers, body });

// The native error shape, never the E2B one.
function nativeError(r, status, re, code) {
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json.error, 'string', r.text);
    assert.equal(typeof r.json.errorCode, 'string', r.text);
    assert.equal(r.json.code, undefined, `E2B shape leaked: ${r.text}`);
    assert.equal(r.json.message, undefined, `E2B shape leaked: ${r.text}`);
    if (re) assert.match(r.json.error, re);
    if (code) assert.equal(r.json.errorCode, code);
}

const member1c = { config: { inlineResources: { requests: { cpu: '1', memory: '512Mi' } } }, replicas: 1 };

test('error shape, /ping and the cluster-level reads answer as the seed does', async () => {
    const ping = await call(`${alpha.native}/ping`, {}, 'GET');
    assert.equal(ping.status, 200);
    assert.deepEqual(ping.json, { status: 'ok' });

    const nokey = await direct(null, 'GET', '/v1/envs');
    nativeError(nokey, 401, /missing API key.*AGENTBOX-API-KEY/, 'UNAUTHORIZED');
    assert.doesNotMatch(nokey.json.error, /X-API-Key/);
    nativeError(await direct(stack.key, 'GET', '/v1/nothing-here'), 404, /no route/, 'NOT_FOUND');
    nativeError(await direct(stack.key, 'DELETE', '/v1/feature-gates'), 405, /not allowed/, 'METHOD_NOT_ALLOWED');
    // over the hub too: the agent's shape comes back through the tunnel
    nativeError(await consoleCall(admin, 'GET', '/v1/nothing-here'), 404, /no route/, 'NOT_FOUND');

    const gates = await direct(stack.key, 'GET', '/v1/feature-gates');
    assert.deepEqual(gates.json, { quota: false, instanceType: false, volumes: false });
    nativeError(await direct(stack.key, 'GET', '/v1/quotas'), 501, /quota provider.*'alpha'/);
    assert.deepEqual((await direct(stack.key, 'GET', '/v1/clusters')).json,
        { clusters: [{ id: 'alpha', name: 'alpha', local: true }] });
    assert.deepEqual((await direct(stack.key, 'GET', '/v1/instancetypes')).json, { items: [], total: 0 });
    assert.deepEqual((await direct(stack.key, 'GET', '/v1/volumes')).json, { items: [], total: 0 });
    const stats = await direct(stack.key, 'GET', '/v1/statistics/sandboxes');
    assert.equal(stats.status, 200, stats.text);
    assert.equal(stats.json.statistics.namespace, 'default');
    assert.equal(typeof stats.json.statistics.total, 'number');

    const tpls = await direct(stack.key, 'GET', '/v1/sandbox-templates');
    assert.equal(tpls.status, 200, tpls.text);
    assert.deepEqual(tpls.json.items.map((t) => t.name), ['envd']);
    assert.equal((await direct(stack.key, 'GET', '/v1/sandbox-templates/envd')).json.template.name, 'envd');
    nativeError(await direct(stack.key, 'GET', '/v1/sandbox-templates/nope'), 404, /'nope' not found/);
});

test('native create: unknown pool lists the available ones; an image is refused, not ignored', async () => {
    const r = await direct(stack.key, 'POST', '/v1/sandboxes', { poolName: 'nope' });
    nativeError(r, 404, /'nope' not found/);
    assert.ok(Array.isArray(r.json.detail.availablePools), r.text);
    const demo = r.json.detail.availablePools.find((p) => p.name === 'demo-1c0gi');
    assert.ok(demo, r.text);
    assert.deepEqual(Object.keys(demo).sort(), ['idle', 'name', 'namespace', 'running', 'starting']);
    assert.equal(typeof r.json.detail.hint, 'string');

    const img = await direct(stack.key, 'POST', '/v1/sandboxes', { poolName: 'demo', image: 'ubuntu:22.04' });
    nativeError(img, 400, /image overrides need the kube runtime: cluster 'alpha' runs the local runtime/);
    nativeError(await direct(stack.key, 'POST', '/v1/sandboxes', {}), 400, /poolName is required/);

    // the reserved metadata key picks the member's scaling group, and is not kept as metadata
    const grp = 'agentbox.scitix.ai/scaling-group';
    const sb = await direct(stack.key, 'POST', '/v1/sandboxes', { poolName: 'demo', metadata: { [grp]: '1c0gi', app: 'x' } });
    assert.equal(sb.status, 201, sb.text);
    assert.equal(sb.json.sandbox.poolName, 'demo-1c0gi');
    assert.deepEqual(sb.json.sandbox.metadata, { app: 'x' });
    const wrong = await direct(stack.key, 'POST', '/v1/sandboxes', { poolName: 'demo', metadata: { [grp]: '9c9gi' } });
    assert.ok(wrong.status >= 400 && wrong.status < 500, wrong.text);
    assert.match(wrong.json.error, /9c9gi/);
    // list by status (a comma list)
    const id = sb.json.sandbox.sandboxId;
    const running = await direct(stack.key, 'GET', '/v1/sandboxes?status=Starting,Running');
    assert.ok(running.json.items.some((x) => x.sandboxId === id), running.text);
    const stopping = await direct(stack.key, 'GET', '/v1/sandboxes?status=Stopping');
    assert.ok(!stopping.json.items.some((x) => x.sandboxId === id), stopping.text);
    // native timeout: a duration string, 204
    const to = await direct(stack.key, 'PUT', `/v1/sandboxes/${id}/timeout`, { timeout: '30m' });
    assert.equal(to.status, 204, to.text);
    const after = (await direct(stack.key, 'GET', `/v1/sandboxes/${id}`)).json.sandbox;
    const left = Date.parse(after.expiresAt) - Date.now();
    assert.ok(left > 29 * 60000 && left <= 30 * 60000 + 5000, `expires in ${left} ms`);
    nativeError(await direct(stack.key, 'PUT', `/v1/sandboxes/${id}/timeout`, { timeout: 30 }), 400, /duration string/);
    assert.equal((await direct(stack.key, 'GET', `/v1/sandboxes/${id}/is_ready`)).status, 200);
    const logs = await direct(stack.key, 'GET', `/v1/sandboxes/${id}/logs?lines=10`);
    assert.equal(logs.status, 200, logs.text);
    assert.ok(Array.isArray(logs.json.logs), logs.text);
    nativeError(await direct(stack.key, 'GET', `/v1/sandboxes/${id}/logs?lines=10001`), 400, /lines must be/);
    // exec (deprecated in the seed, still served): through the sandbox's envd
    const ex = await direct(stack.key, 'POST', `/v1/sandboxes/${id}/exec`, { command: 'echo out; echo err >&2; exit 3' });
    assert.equal(ex.status, 200, ex.text);
    assert.deepEqual(ex.json, { exitCode: 3, stdout: 'out\n', stderr: 'err\n' });
    nativeError(await direct(stack.key, 'POST', `/v1/sandboxes/${id}/exec`, { command: '' }), 400, /command is required/);
    nativeError(await direct(stack.key, 'POST', `/v1/sandboxes/${id}/exec`, { command: 'true', timeoutSeconds: 301 }), 400,
        /timeoutSeconds must be an integer from 1 to 300/);
    const tok = await direct(stack.key, 'POST', `/v1/sandboxes/${id}/exec-token`);
    assert.equal(tok.status, 200, tok.text); // the terminal itself: native_terminal.test.mjs
    assert.match(tok.json.token, /^abxt_[0-9a-f]{64}$/);
    const stranger = await createKey(stack.pg.url, 'z', 'z');
    nativeError(await direct(stranger.token, 'POST', `/v1/sandboxes/${id}/exec`, { command: 'id' }), 404, /not found/);
    assert.equal((await direct(stack.key, 'DELETE', `/v1/sandboxes/${id}`)).status, 202);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 1 && s.running === 0, 'demo refilled');
});

test('envs, pools and groups: create, apply, scale, delete with the PUT rules of §4.4', async () => {
    // abx create envs
    const created = await direct(stack.key, 'POST', '/v1/envs', { name: 'web', templateRef: { name: 'envd' }, labels: { tier: 'web' } });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.json.env.name, 'web');
    assert.equal(created.json.env.namespace, 'default');
    assert.deepEqual(created.json.editable, {
        templateRef: { name: 'envd' }, mode: 'WarmPool', overrides: {}, labels: { tier: 'web' }, annotations: {},
    });
    nativeError(await direct(stack.key, 'POST', '/v1/envs', { name: 'web', templateRef: { name: 'envd' } }), 409, /already exists/);
    nativeError(await direct(stack.key, 'POST', '/v1/envs', { name: 'bad', templateRef: { name: 'missing' } }), 400,
        /templateRef.name' names SandboxTemplate 'missing'/);
    nativeError(await direct(stack.key, 'POST', '/v1/envs', { name: 'a'.repeat(25), templateRef: { name: 'envd' } }), 400,
        /exceeds 24-char cap/);

    // abx create pools (a member of this cluster's segment): the pool warms up
    const added = await direct(stack.key, 'POST', '/v1/envs/web/sandboxpools', member1c);
    assert.equal(added.status, 202, added.text);
    assert.equal(added.json.template.name, 'web-1c0gi');
    assert.equal(added.json.template.scalingGroup, '1c0gi');
    await waitPool(alpha, 'web-1c0gi', (s) => s.idle === 1, 'added pool warm');
    const list = await direct(stack.key, 'GET', '/v1/envs/web/sandboxpools');
    assert.equal(list.json.total, 1);
    assert.deepEqual(Object.keys(list.json).sort(), ['items', 'limit', 'offset', 'total']);
    nativeError(await direct(stack.key, 'POST', '/v1/envs/web/sandboxpools', { config: {} }), 400,
        /one of instanceType or inlineResources must be supplied/);

    // abx scale pools web web-1c0gi --replicas 2 (the PUT)
    const scaled = await direct(stack.key, 'PUT', '/v1/envs/web/sandboxpools/web-1c0gi', { replicas: 2 });
    assert.equal(scaled.status, 200, scaled.text);
    assert.equal(scaled.json.pool.replicas, 2);
    await waitPool(alpha, 'web-1c0gi', (s) => s.idle === 2, 'scaled to two');
    const immut = await direct(stack.key, 'PUT', '/v1/envs/web/sandboxpools/web-1c0gi',
        { replicas: 2, inlineResources: { requests: { cpu: '4' } } });
    nativeError(immut, 400, /field 'inlineResources' is immutable: the value in force is \{"requests":\{"cpu":"1","memory":"512Mi"\}\}/);
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web/sandboxpools/web-1c0gi', { replicas: 2, image: 'x' }), 400,
        /unknown field 'image'/);
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web/sandboxpools/nope', { replicas: 1 }), 404, /'nope' is not a member/);

    // scaling groups appear because a member declares one
    const groups = await direct(stack.key, 'GET', '/v1/envs/web/autoscaling/groups');
    // status: the live numbers on this cluster (autoscale.test.mjs covers them)
    assert.equal(groups.json.items[0].status.autoscalingActive, false);
    assert.equal(groups.json.items[0].status.totalDesired, 2);
    delete groups.json.items[0].status;
    assert.deepEqual(groups.json, { items: [{ name: '1c0gi', enabled: false, members: ['web-1c0gi'] }], total: 1 });
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web/autoscaling/groups/9c9gi', {}), 404, /declared by no member/);
    const gput = await direct(stack.key, 'PUT', '/v1/envs/web/autoscaling/groups/1c0gi',
        { enabled: true, minReplicas: 1, maxReplicas: 3 });
    assert.equal(gput.status, 200, gput.text);
    assert.deepEqual(gput.json.editable, { enabled: true, minReplicas: 1, maxReplicas: 3 });
    // replicas belongs to the autoscaler now; min/max are still accepted
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web/sandboxpools/web-1c0gi', { replicas: 3 }), 400,
        /belongs to the autoscaler: scaling group '1c0gi'/);
    // desired state: omitting maxReplicas lifts the ceiling
    const lifted = await direct(stack.key, 'PUT', '/v1/envs/web/autoscaling/groups/1c0gi', { enabled: true });
    assert.deepEqual(lifted.json.editable, { enabled: true });
    assert.deepEqual((await direct(stack.key, 'GET', '/v1/envs/web/autoscaling')).json,
        { spec: { groups: [{ name: '1c0gi', enabled: true }] } });
    const gdel = await direct(stack.key, 'DELETE', '/v1/envs/web/autoscaling/groups/1c0gi');
    assert.deepEqual(gdel.json, { name: '1c0gi', status: 'Deleted' });
    nativeError(await direct(stack.key, 'DELETE', '/v1/envs/web/autoscaling/groups/1c0gi'), 404, /no policy/);

    // abx apply envs web: PUT = desired state
    const got = await direct(stack.key, 'GET', '/v1/envs/web');
    const editable = got.json.editable;
    const put1 = await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, overrides: { defaultIdleTimeout: '10m', image: 'a:1' } });
    assert.equal(put1.status, 200, put1.text);
    assert.deepEqual(put1.json.editable.overrides, { defaultIdleTimeout: '10m', image: 'a:1' });
    const put2 = await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, overrides: { image: 'a:2' } });
    assert.deepEqual(put2.json.editable.overrides, { image: 'a:2' }, 'overrides are replaced wholesale');
    const put3 = await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, overrides: {} });
    assert.deepEqual(put3.json.editable.overrides, {}, 'overrides: {} clears them');
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, templateRef: { name: 'other' } }), 400,
        /field 'templateRef' is immutable: send back the value in force, \{"name":"envd"\}/);
    const { labels, ...noLabels } = editable;
    assert.deepEqual(labels, { tier: 'web' });
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web', noLabels), 400,
        /field 'labels' is immutable: send back the value in force, \{"tier":"web"\} \(it was omitted\)/);
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, clusters: [] }), 400, /unknown field 'clusters'/);
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/web', { ...editable, overrides: { defaultIdleTimeout: 'soon' } }), 400,
        /overrides.defaultIdleTimeout/);
    // the pool kept its members through the env PUTs (the image is identity:
    // its idle sandboxes rolled, native_rolls.test.mjs)
    await waitPool(alpha, 'web-1c0gi', (s) => s.idle === 2 && s.starting === 0 && s.stopping === 0, 'rolled back to two idle');

    // events: newest first, bounded
    const ev = await direct(stack.key, 'GET', '/v1/envs/web/events');
    assert.equal(ev.status, 200, ev.text);
    const reasons = ev.json.items.map((e) => e.reason);
    assert.equal(reasons[reasons.length - 1], 'Created');
    assert.ok(reasons.indexOf('Scaled') > reasons.indexOf('ScalingGroupDeleted'), reasons.join());
    assert.ok(reasons.includes('PoolAdded'), reasons.join());
    assert.equal((await direct(stack.key, 'GET', '/v1/envs/web/events?limit=1')).json.items.length, 1);
    nativeError(await direct(stack.key, 'GET', '/v1/envs/web/events?limit=501'), 400, /limit must be an integer from 1 to 500/);

    // another tenant's namespace: the env does not exist for it
    const other = await createKey(stack.pg.url, 'x', 'y');
    nativeError(await direct(other.token, 'GET', '/v1/envs/web'), 404, /not found in namespace 't-x-y'/);
    nativeError(await direct(other.token, 'PUT', '/v1/envs/web/sandboxpools/web-1c0gi', { replicas: 0 }), 404);
    nativeError(await direct(other.token, 'DELETE', '/v1/envs/web?namespace=default'), 404, /not found in namespace 't-x-y'/);
    nativeError(await direct(other.token, 'PUT', '/v1/envs/web?namespace=default', editable), 404);
    nativeError(await direct(other.token, 'DELETE', '/v1/envs/web/sandboxpools/web-1c0gi?namespace=default'), 404);
    assert.equal((await poolStatus(alpha, 'web-1c0gi')).idle, 2, 'a stranger scaled nothing');
    assert.equal((await direct(stack.key, 'GET', '/v1/envs/web')).status, 200, 'nor deleted it');

    // abx delete pools, then envs
    const pdel = await direct(stack.key, 'DELETE', '/v1/envs/web/sandboxpools/web-1c0gi');
    assert.equal(pdel.status, 202, pdel.text);
    await waitFor(async () => (await poolStatus(alpha, 'web-1c0gi')).idle === undefined, { what: 'pool removed' });
    const edel = await direct(stack.key, 'DELETE', '/v1/envs/web');
    assert.deepEqual(edel.json, { name: 'web', namespace: 'default', status: 'Terminating' });
    assert.equal(edel.status, 202);
    nativeError(await direct(stack.key, 'GET', '/v1/envs/web'), 404);
});

test('concurrent writes to one env all land (each computed from the object in force)', async () => {
    assert.equal((await direct(stack.key, 'POST', '/v1/envs', { name: 'conc', templateRef: { name: 'envd' } })).status, 201);
    const sizes = ['1', '2', '3', '4'];
    const adds = await Promise.all(sizes.map((cpu) => direct(stack.key, 'POST', '/v1/envs/conc/sandboxpools',
        { config: { inlineResources: { requests: { cpu, memory: '512Mi' } } }, replicas: 0 })));
    for (const a of adds) assert.equal(a.status, 202, a.text);
    assert.deepEqual(adds.map((a) => a.json.template.name).sort(), ['conc-1c0gi', 'conc-2c0gi', 'conc-3c0gi', 'conc-4c0gi']);
    const puts = await Promise.all(sizes.map((cpu, i) => direct(stack.key, 'PUT', `/v1/envs/conc/sandboxpools/conc-${cpu}c0gi`,
        { replicas: 0, maxReplicas: 10 + i })));
    for (const r of puts) assert.equal(r.status, 200, r.text);
    const pools = (await direct(stack.key, 'GET', '/v1/envs/conc/sandboxpools')).json.items;
    assert.deepEqual(pools.map((x) => [x.name, x.maxReplicas]).sort(),
        [['conc-1c0gi', 10], ['conc-2c0gi', 11], ['conc-3c0gi', 12], ['conc-4c0gi', 13]]);
    assert.equal((await direct(stack.key, 'DELETE', '/v1/envs/conc')).status, 202);
});

test('imagePullSecret is write-only; imagePullSecretConfigured is the keep signal', async () => {
    assert.equal((await direct(stack.key, 'POST', '/v1/envs', { name: 'priv', templateRef: { name: 'envd' } })).status, 201);
    const base = (await direct(stack.key, 'GET', '/v1/envs/priv')).json.editable;
    const secret = { registries: [{ registry: 'registry.example', username: 'bot', password: 'hunter2-secret' }] };
    const set = await direct(stack.key, 'PUT', '/v1/envs/priv', { ...base, overrides: { imagePullSecret: secret } });
    assert.equal(set.status, 200, set.text);
    assert.doesNotMatch(set.text, /hunter2/);
    assert.deepEqual(set.json.editable.overrides, { imagePullSecretConfigured: true });
    const got = await direct(stack.key, 'GET', '/v1/envs/priv');
    assert.doesNotMatch(got.text, /hunter2/);
    // kept by the agent for its own pulls: 0600, not in the manifest
    const overlay = path.join(manifests, '.agentbox-api');
    const file = path.join(overlay, 'env.default.priv.pull-secret.json');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.match(fs.readFileSync(file, 'utf8'), /hunter2-secret/);
    assert.doesNotMatch(fs.readFileSync(path.join(overlay, 'env.default.priv.yaml'), 'utf8'), /hunter2/);
    // echoing the flag keeps it
    const keep = await direct(stack.key, 'PUT', '/v1/envs/priv', got.json.editable);
    assert.deepEqual(keep.json.editable.overrides, { imagePullSecretConfigured: true });
    assert.ok(fs.existsSync(file));
    // neither flag nor secret: deleted
    const drop = await direct(stack.key, 'PUT', '/v1/envs/priv', { ...base, overrides: {} });
    assert.deepEqual(drop.json.editable.overrides, {});
    assert.ok(!fs.existsSync(file), 'the secret is removed');
    nativeError(await direct(stack.key, 'PUT', '/v1/envs/priv', { ...base, overrides: { imagePullSecret: { registries: [{ registry: 'r' }] } } }), 400,
        /registries\[0\].username is required/);
    assert.equal((await direct(stack.key, 'DELETE', '/v1/envs/priv')).status, 202);
});

test('console mode through the hub: the same calls at /api/clusters/{id}/v1/...', async () => {
    const c = await consoleCall(admin, 'POST', '/v1/envs', { name: 'hubenv', templateRef: { name: 'envd' } });
    assert.equal(c.status, 201, c.text);
    const add = await consoleCall(admin, 'POST', '/v1/envs/hubenv/sandboxpools', member1c);
    assert.equal(add.status, 202, add.text);
    const sc = await consoleCall(admin, 'PUT', '/v1/envs/hubenv/sandboxpools/hubenv-1c0gi', { replicas: 0 });
    assert.equal(sc.status, 200, sc.text);
    nativeError(await consoleCall(admin, 'PUT', '/v1/envs/hubenv', { templateRef: { name: 'envd' } }), 400,
        /field 'mode' is immutable/);
    const g = await consoleCall(admin, 'GET', '/v1/envs/hubenv');
    assert.equal(g.status, 200, g.text);
    assert.equal(g.json.env.pools[0].name, 'hubenv-1c0gi');
    assert.equal(g.json.env.pools[0].replicas, 0);
    // the tenant key reaches its own namespace's envs through the hub too
    assert.equal((await consoleCall(stack.key, 'GET', '/v1/envs/demo')).status, 200);
    assert.equal((await consoleCall(admin, 'DELETE', '/v1/envs/hubenv')).status, 202);
});

test('writes persist across an agent restart; the YAML directory stays the seed', async () => {
    assert.equal((await direct(stack.key, 'POST', '/v1/envs', { name: 'kept', templateRef: { name: 'envd' } })).status, 201);
    assert.equal((await direct(stack.key, 'POST', '/v1/envs/kept/sandboxpools', { ...member1c, replicas: 2 })).status, 202);
    // the seed env scaled through the API (the YAML file is not rewritten)
    const seedFile = path.join(manifests, 'env-0.yaml');
    const seedText = fs.readFileSync(seedFile, 'utf8');
    assert.equal((await direct(stack.key, 'PUT', '/v1/envs/demo/sandboxpools/demo-1c0gi', { replicas: 2 })).status, 200);
    assert.equal(fs.readFileSync(seedFile, 'utf8'), seedText);
    await waitPool(alpha, 'kept-1c0gi', (s) => s.idle === 2, 'kept warm');
    const eventsBefore = (await direct(stack.key, 'GET', '/v1/envs/kept/events')).json.items;
    assert.deepEqual(eventsBefore.map((e) => e.reason), ['PoolAdded', 'Created']);

    const restart = async ({ graceful = false } = {}) => {
        if (graceful) {
            // a clean exit runs LeakSanitizer over everything the API calls above allocated
            await alpha.proc.stop();
            assertSanitizerClean(alpha.proc);
        } else {
            process.kill(alpha.proc.pid, 'SIGKILL');
            await alpha.proc.exited;
        }
        alpha = await stack.launch('alpha', { stateDir: alpha.stateDir });
    };
    await restart({ graceful: true });
    // env events persist too (a bounded file beside the API overlay)
    const eventsAfter = await direct(stack.key, 'GET', '/v1/envs/kept/events');
    assert.equal(eventsAfter.status, 200, eventsAfter.text);
    assert.deepEqual(eventsAfter.json.items, eventsBefore, 'the restarted agent lists the same events');
    assert.ok((await direct(stack.key, 'GET', '/v1/envs/demo/events')).json.items.some((e) => e.reason === 'Scaled'));
    assert.ok(fs.existsSync(path.join(manifests, '.agentbox-events.ndjson')));
    const kept = await direct(stack.key, 'GET', '/v1/envs/kept');
    assert.equal(kept.status, 200, kept.text);
    assert.equal(kept.json.env.source, 'api');
    assert.equal(kept.json.env.pools[0].replicas, 2);
    const demo = await direct(stack.key, 'GET', '/v1/envs/demo/sandboxpools/demo-1c0gi');
    assert.equal(demo.json.pool.replicas, 2, 'the API write over the seed survived');
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'demo at the written size after restart');

    // an operator's later hand edit of the seed file wins over the API write
    fs.writeFileSync(seedFile, seedText.replace('replicas: 1', 'replicas: 3'));
    await waitFor(async () => (await direct(stack.key, 'GET', '/v1/envs/demo/sandboxpools/demo-1c0gi')).json.pool.replicas === 3,
        { what: 'the hand edit taken', timeoutMs: 10000 });

    // deletes persist too, including a seed object's (a tombstone)
    assert.equal((await direct(stack.key, 'DELETE', '/v1/envs/kept')).status, 202);
    assert.equal((await direct(stack.key, 'DELETE', '/v1/envs/demo')).status, 202);
    await restart();
    nativeError(await direct(stack.key, 'GET', '/v1/envs/kept'), 404);
    nativeError(await direct(stack.key, 'GET', '/v1/envs/demo'), 404);
    assert.ok(fs.existsSync(seedFile), 'the seed file itself is left alone');
    await waitFor(async () => (await poolStatus(alpha, 'demo-1c0gi')).idle === undefined, { what: 'demo pool gone' });
});
