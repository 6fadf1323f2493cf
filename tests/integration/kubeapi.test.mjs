// The in-test Kubernetes API server (lib/kubeapi.mjs): its semantics checked
// directly over HTTP (one resourceVersion counter, watch resumption and 410,
// 409 on stale versions, finalizers, status subresource, patches, auth), and
// the real kubectl driving it (apply of the seed's samples, get -o yaml,
// get -w, a conflicting patch, delete held by a finalizer) so the server speaks
// Kubernetes and not only what our own client expects.
//
// kubectl (client-go) never sends a bearer token over plain http, so the
// kubectl tests run against a server without auth; auth is checked directly.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { tempDir, waitFor } from './lib/harness.mjs';
import { startKubeApi } from './lib/kubeapi.mjs';
import { KUBECTL, kubectlAt } from './lib/kubestack.mjs';

const POOLS = '/apis/agents.navix.sh/v1alpha1/namespaces/default/sandboxpools';
const PODS = '/api/v1/namespaces/default/pods';
const LEASES = '/apis/coordination.k8s.io/v1/namespaces/default/leases';

const servers = [];
after(async () => {
    for (const s of servers) await s.close();
});

async function server(opts) {
    const s = await startKubeApi(opts);
    servers.push(s);
    return s;
}

// One request; resolves {code, body (parsed when JSON), headers}.
async function call(api, method, p, body, { ctype = 'application/json', token } = {}) {
    const headers = { Accept: 'application/json' };
    if (body !== undefined) headers['Content-Type'] = ctype;
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(api.url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let parsed = text;
    try {
        parsed = JSON.parse(text);
    } catch {
        /* not JSON */
    }
    return { code: res.status, body: parsed, headers: res.headers };
}

// A watch stream: events accumulate in w.events; w.ended once the server ends it.
function watch(api, p, query) {
    const w = { events: [], ended: false, buf: '' };
    const qs = new URLSearchParams({ watch: '1', ...query }).toString();
    w.req = http.get(`${api.url}${p}?${qs}`, (res) => {
        w.status = res.statusCode;
        res.setEncoding('utf8');
        res.on('data', (d) => {
            w.buf += d;
            let i;
            while ((i = w.buf.indexOf('\n')) >= 0) {
                const line = w.buf.slice(0, i);
                w.buf = w.buf.slice(i + 1);
                if (line) w.events.push(JSON.parse(line));
            }
        });
        res.on('end', () => (w.ended = true));
        res.on('close', () => (w.ended = true));
    });
    w.req.on('error', () => (w.ended = true));
    w.close = () => w.req.destroy();
    return w;
}

const pool = (name, replicas = 1, extra = {}) => ({
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxPool',
    metadata: { name, ...extra }, spec: { replicas, template: { spec: { containers: [{ name: 'sandbox', image: 'busybox:1' }] } } },
});
const pod = (name, labels = {}) => ({
    apiVersion: 'v1', kind: 'Pod', metadata: { name, labels }, spec: { containers: [{ name: 'sandbox', image: 'idle:1' }] },
});

test('one resourceVersion counter across kinds; no-op writes do not bump it', async () => {
    const api = await server();
    const a = await call(api, 'POST', POOLS, pool('rv-a'));
    const b = await call(api, 'POST', PODS, pod('rv-b'));
    const c = await call(api, 'POST', LEASES, { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'rv-c' }, spec: { holderIdentity: 'x', renewTime: '2025-06-01T12:10:04.123456Z' } });
    assert.deepEqual([a.code, b.code, c.code], [201, 201, 201]);
    const rvs = [a, b, c].map((r) => Number(r.body.metadata.resourceVersion));
    assert.ok(rvs[0] < rvs[1] && rvs[1] < rvs[2], `strictly increasing across kinds: ${rvs}`);
    assert.equal(c.body.spec.renewTime, '2025-06-01T12:10:04.123456Z', 'MicroTime round-trips');
    assert.match(a.body.metadata.uid, /^[0-9a-f-]{36}$/);
    assert.match(a.body.metadata.creationTimestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    assert.equal(a.body.metadata.generation, 1);
    assert.equal(a.body.spec.podCreationImagePolicy, 'IdleImage', 'CRD default applied');

    const list = await call(api, 'GET', '/api/v1/pods');
    assert.equal(list.body.kind, 'PodList');
    assert.equal(list.body.metadata.resourceVersion, String(rvs[2]), 'list RV is the global counter');

    const same = await call(api, 'PUT', `${POOLS}/rv-a`, a.body);
    assert.equal(same.code, 200);
    assert.equal(same.body.metadata.resourceVersion, a.body.metadata.resourceVersion, 'no-op PUT keeps the RV');
    assert.equal(api.resourceVersion, String(rvs[2]));

    const dup = await call(api, 'POST', POOLS, pool('rv-a'));
    assert.equal(dup.code, 409);
    assert.equal(dup.body.reason, 'AlreadyExists');
    assert.equal(dup.body.message, 'sandboxpools.agents.navix.sh "rv-a" already exists');
    const bad = await call(api, 'POST', POOLS, pool('rv-neg', -1));
    assert.equal(bad.code, 422);
    assert.equal(bad.body.details.causes[0].field, 'spec.replicas');
    // unknown fields are pruned with a Warning (trap 32), or refused under Strict
    const typo = pool('typo');
    typo.spec.replicaz = 3;
    typo.spce = {};
    const pruned = await call(api, 'POST', POOLS, typo);
    assert.equal(pruned.code, 201);
    assert.equal(pruned.body.spec.replicaz, undefined);
    assert.equal(pruned.body.spce, undefined);
    assert.match(pruned.headers.get('warning'), /299 - "unknown field \\"spec.replicaz\\""/);
    assert.ok(pruned.body.spec.template.spec.containers, 'the schemaless template is kept whole');
    const strict = await call(api, 'POST', `${POOLS}?fieldValidation=Strict`, { ...typo, metadata: { name: 'typo2' } });
    assert.equal(strict.code, 400);
    assert.match(strict.body.message, /unknown field "spec.replicaz"/);
    const missing = await call(api, 'GET', `${POOLS}/nope`);
    assert.equal(missing.code, 404);
    assert.equal(missing.body.kind, 'Status');
    assert.equal(missing.body.message, 'sandboxpools.agents.navix.sh "nope" not found');
    assert.equal((await call(api, 'GET', '/apis/agents.navix.sh/v1alpha1/nothings')).code, 404);
    assert.equal((await call(api, 'POST', '/api/v1/namespaces/default/pods', { kind: 'Pod', metadata: { name: 'x', namespace: 'other' }, spec: {} })).code, 400);
});

test('409 on a stale resourceVersion (PUT, merge patch), 422 for CR PUT without one and a failed JSON-patch test', async () => {
    const api = await server();
    const v1 = (await call(api, 'POST', POOLS, pool('cf'))).body;
    const v2 = (await call(api, 'PATCH', `${POOLS}/cf`, { spec: { replicas: 2 } }, { ctype: 'application/merge-patch+json' })).body;
    assert.equal(v2.spec.replicas, 2);
    assert.equal(v2.metadata.generation, 2, 'spec change bumps generation');
    assert.notEqual(v2.metadata.resourceVersion, v1.metadata.resourceVersion);

    const stale = await call(api, 'PUT', `${POOLS}/cf`, { ...v1, spec: { ...v1.spec, replicas: 5 } });
    assert.equal(stale.code, 409);
    assert.equal(stale.body.reason, 'Conflict');
    assert.equal(stale.body.message, 'Operation cannot be fulfilled on sandboxpools.agents.navix.sh "cf": the object has been modified; please apply your changes to the latest version and try again');
    assert.deepEqual(stale.body.details, { name: 'cf', group: 'agents.navix.sh', kind: 'sandboxpools' });

    const stalePatch = await call(api, 'PATCH', `${POOLS}/cf`, { metadata: { resourceVersion: v1.metadata.resourceVersion }, spec: { replicas: 7 } }, { ctype: 'application/merge-patch+json' });
    assert.equal(stalePatch.code, 409);
    const noRv = structuredClone(v2);
    delete noRv.metadata.resourceVersion;
    const put = await call(api, 'PUT', `${POOLS}/cf`, noRv);
    assert.equal(put.code, 422);
    assert.match(put.body.message, /must be specified for an update/);
    const test = await call(api, 'PATCH', `${POOLS}/cf`, [
        { op: 'test', path: '/metadata/resourceVersion', value: v1.metadata.resourceVersion },
        { op: 'replace', path: '/spec/replicas', value: 9 },
    ], { ctype: 'application/json-patch+json' });
    assert.equal(test.code, 422, 'a failed JSON-patch test is 422');
    assert.equal(api.peek('sandboxpools', 'default', 'cf').spec.replicas, 2, 'nothing written by refused requests');
    const smp = await call(api, 'PATCH', `${POOLS}/cf`, { spec: { replicas: 1 } }, { ctype: 'application/strategic-merge-patch+json' });
    assert.equal(smp.code, 415, 'strategic merge on a CR');

    // Pods: strategic merge by container name changes one image; other spec changes are 422.
    const p = (await call(api, 'POST', PODS, pod('swap'))).body;
    const sw = await call(api, 'PATCH', `${PODS}/swap`, { metadata: { resourceVersion: p.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'task:2' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    assert.equal(sw.code, 200);
    assert.equal(sw.body.spec.containers.length, 1);
    assert.equal(sw.body.spec.containers[0].image, 'task:2');
    assert.equal(sw.body.spec.containers[0].terminationMessagePath, '/dev/termination-log', 'other container fields kept');
    const again = await call(api, 'PATCH', `${PODS}/swap`, { metadata: { resourceVersion: p.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'task:3' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    assert.equal(again.code, 409, 'the second claim on the same Pod version loses');
    const forbidden = await call(api, 'PATCH', `${PODS}/swap`, { spec: { hostNetwork: true } }, { ctype: 'application/strategic-merge-patch+json' });
    assert.equal(forbidden.code, 422);
    assert.match(forbidden.body.message, /pod updates may not change fields other than/);
});

test('status subresource: main endpoint keeps status, /status keeps spec and metadata, generation only on spec', async () => {
    const api = await server();
    const created = (await call(api, 'POST', POOLS, { ...pool('st'), status: { idleReplicas: 9 } })).body;
    assert.equal(created.status, undefined, 'status in a create body is dropped');
    const st = await call(api, 'PUT', `${POOLS}/st/status`, { ...created, metadata: { ...created.metadata, labels: { x: 'y' } }, spec: { replicas: 4 }, status: { idleReplicas: 1 } });
    assert.equal(st.code, 200);
    assert.equal(st.body.status.idleReplicas, 1);
    assert.equal(st.body.spec.replicas, 1, '/status ignores spec');
    assert.equal(st.body.metadata.labels, undefined, '/status ignores labels on CRs');
    assert.equal(st.body.metadata.generation, 1, '/status never bumps generation');
    const main = await call(api, 'PATCH', `${POOLS}/st`, { status: { idleReplicas: 5 } }, { ctype: 'application/merge-patch+json' });
    assert.equal(main.body.status.idleReplicas, 1, 'main endpoint ignores status');
    assert.equal(main.body.metadata.resourceVersion, st.body.metadata.resourceVersion, 'and that was a no-op');
    const scale = await call(api, 'GET', `${POOLS}/st/scale`);
    assert.equal(scale.body.kind, 'Scale');
    assert.equal(scale.body.spec.replicas, 1);
    const scaled = await call(api, 'PATCH', `${POOLS}/st/scale`, { spec: { replicas: 3 } }, { ctype: 'application/merge-patch+json' });
    assert.equal(scaled.body.spec.replicas, 3);
    assert.equal(api.peek('sandboxpools', 'default', 'st').metadata.generation, 2);
});

test('watch: from a list RV sees later events in order, bookmarks move the RV, selector transitions, 410 after compaction', async () => {
    const api = await server({ bookmarkMs: 100, historyLimit: 1000 });
    await call(api, 'POST', PODS, pod('w-1', { phase: 'idle' }));
    const list = await call(api, 'GET', PODS, undefined);
    const from = list.body.metadata.resourceVersion;
    assert.equal(list.body.items[0].kind, undefined, 'built-in list items lack kind');

    const all = watch(api, PODS, { resourceVersion: from, allowWatchBookmarks: 'true' });
    const idle = watch(api, PODS, { resourceVersion: from, labelSelector: 'phase in (idle)' });
    await waitFor(() => all.status === 200 && idle.status === 200, { what: 'watches to start' });
    await call(api, 'POST', PODS, pod('w-2', { phase: 'idle' }));
    await call(api, 'PATCH', `${PODS}/w-1`, { metadata: { labels: { phase: 'running' } } }, { ctype: 'application/merge-patch+json' });
    await call(api, 'DELETE', `${PODS}/w-2`);
    await waitFor(() => all.events.filter((e) => e.type !== 'BOOKMARK').length >= 3, { what: 'three events' });
    const seen = all.events.filter((e) => e.type !== 'BOOKMARK').map((e) => `${e.type} ${e.object.metadata.name}`);
    assert.deepEqual(seen, ['ADDED w-2', 'MODIFIED w-1', 'DELETED w-2']);
    assert.ok(all.events.filter((e) => e.type !== 'BOOKMARK').every((e) => e.object.kind === 'Pod'), 'watch objects carry kind');
    const rvs = all.events.filter((e) => e.type !== 'BOOKMARK').map((e) => Number(e.object.metadata.resourceVersion));
    assert.ok(rvs[0] > Number(from) && rvs[0] < rvs[1] && rvs[1] < rvs[2], `event RVs increase: ${rvs}`);
    await waitFor(() => all.events.some((e) => e.type === 'BOOKMARK' && e.object.metadata.resourceVersion === String(rvs[2])), { what: 'a bookmark at the latest RV' });
    const bm = all.events.find((e) => e.type === 'BOOKMARK');
    assert.equal(bm.object.metadata.name, undefined, 'a bookmark is not an object');

    await waitFor(() => idle.events.length >= 3, { what: 'selector watch events' });
    const leaving = idle.events.map((e) => `${e.type} ${e.object.metadata.name} ${e.object.metadata.labels.phase}`);
    assert.deepEqual(leaving, ['ADDED w-2 idle', 'DELETED w-1 idle', 'DELETED w-2 idle'], 'leaving the selector is DELETED with the prior content');
    all.close();
    idle.close();

    // resume from an event's RV: exactly the later events
    const resumed = watch(api, PODS, { resourceVersion: String(rvs[0]) });
    await waitFor(() => resumed.events.length >= 2, { what: 'resumed events' });
    assert.deepEqual(resumed.events.map((e) => e.type), ['MODIFIED', 'DELETED']);
    resumed.close();

    api.compact();
    const old = watch(api, PODS, { resourceVersion: from });
    await waitFor(() => old.ended, { what: 'the too-old watch to end' });
    assert.equal(old.status, 200);
    assert.equal(old.events.length, 1);
    assert.equal(old.events[0].type, 'ERROR');
    assert.equal(old.events[0].object.code, 410);
    api.options.watch410 = 'http';
    const old2 = watch(api, PODS, { resourceVersion: from });
    await waitFor(() => old2.ended && old2.status, { what: 'HTTP 410' });
    assert.equal(old2.status, 410);
    const exact = await call(api, 'GET', `${PODS}?resourceVersion=${from}&resourceVersionMatch=Exact`);
    assert.equal(exact.code, 410);
    const tooNew = await call(api, 'GET', `${PODS}?resourceVersion=999999&resourceVersionMatch=NotOlderThan`);
    assert.equal(tooNew.code, 504);
    assert.equal(tooNew.body.details.causes[0].reason, 'ResourceVersionTooLarge');

    // the bounded history window alone (no explicit compaction) also yields 410
    const small = await server({ historyLimit: 2 });
    const start = (await call(small, 'POST', PODS, pod('h-0'))).body.metadata.resourceVersion;
    for (let i = 1; i <= 3; i++) await call(small, 'POST', PODS, pod(`h-${i}`));
    const fell = watch(small, PODS, { resourceVersion: start });
    await waitFor(() => fell.ended, { what: 'history-window watch to end' });
    assert.equal(fell.events[0]?.object?.code, 410);
});

test('finalizers keep a deleted object until removed; none can be added meanwhile', async () => {
    const api = await server();
    await call(api, 'POST', POOLS, pool('fin', 1, { finalizers: ['agentbox.navix.sh/test'] }));
    const w = watch(api, POOLS, {});
    const del = await call(api, 'DELETE', `${POOLS}/fin`);
    assert.equal(del.code, 200);
    assert.ok(del.body.metadata.deletionTimestamp, 'deletion is marked');
    assert.equal(del.body.metadata.generation, 2, 'first deletionTimestamp bumps generation');
    const still = await call(api, 'GET', `${POOLS}/fin`);
    assert.equal(still.code, 200, 'the object stays');
    const add = await call(api, 'PATCH', `${POOLS}/fin`, { metadata: { finalizers: ['agentbox.navix.sh/test', 'other/x'] } }, { ctype: 'application/merge-patch+json' });
    assert.equal(add.code, 422);
    assert.match(add.body.message, /no new finalizers can be added/);
    const rm = await call(api, 'PATCH', `${POOLS}/fin`, { metadata: { resourceVersion: still.body.metadata.resourceVersion, finalizers: null } }, { ctype: 'application/merge-patch+json' });
    assert.equal(rm.code, 200);
    assert.equal((await call(api, 'GET', `${POOLS}/fin`)).code, 404);
    await waitFor(() => w.events.some((e) => e.type === 'DELETED'), { what: 'DELETED event' });
    assert.deepEqual(w.events.map((e) => e.type), ['ADDED', 'MODIFIED', 'DELETED']);
    w.close();

    // delete preconditions
    const p = (await call(api, 'POST', PODS, pod('pre'))).body;
    const wrong = await call(api, 'DELETE', `${PODS}/pre`, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: 'not-the-uid' } });
    assert.equal(wrong.code, 409);
    const ok = await call(api, 'DELETE', `${PODS}/pre`, { kind: 'DeleteOptions', apiVersion: 'v1', preconditions: { uid: p.metadata.uid } });
    assert.equal(ok.code, 200);
    assert.equal(ok.body.kind, 'Pod', 'an unscheduled Pod vanishes at once and is returned');
    assert.equal((await call(api, 'GET', `${PODS}/pre`)).code, 404);
});

test('bearer token required and rotatable; pagination with continue; fault injection', async () => {
    const api = await server({ token: 'one' });
    assert.equal((await call(api, 'GET', PODS)).code, 401);
    assert.equal((await call(api, 'GET', PODS, undefined, { token: 'one' })).code, 200);
    api.setToken('two');
    assert.equal((await call(api, 'GET', PODS, undefined, { token: 'one' })).code, 401);
    for (let i = 0; i < 5; i++) await call(api, 'POST', PODS, pod(`pg-${i}`), { token: 'two' });
    const names = [];
    let cont = '';
    let pages = 0;
    let rv;
    do {
        const r = await call(api, 'GET', `${PODS}?limit=2${cont ? `&continue=${encodeURIComponent(cont)}` : ''}`, undefined, { token: 'two' });
        if (pages === 0) await call(api, 'POST', PODS, pod('pg-late'), { token: 'two' }); // not in the snapshot
        rv ??= r.body.metadata.resourceVersion;
        assert.equal(r.body.metadata.resourceVersion, rv, 'all pages share the first page RV');
        names.push(...r.body.items.map((x) => x.metadata.name));
        cont = r.body.metadata.continue ?? '';
        pages++;
    } while (cont);
    assert.deepEqual(names, ['pg-0', 'pg-1', 'pg-2', 'pg-3', 'pg-4']);
    assert.equal(pages, 3);
    const expired = await call(api, 'GET', `${PODS}?limit=2&continue=${Buffer.from('{"id":"x","offset":2}').toString('base64url')}`, undefined, { token: 'two' });
    assert.equal(expired.code, 410);

    api.inject({ method: 'GET', path: /\/pods/, status: 429, plain: 'Too many requests, please try again later.', retryAfter: 1 });
    const limited = await call(api, 'GET', PODS, undefined, { token: 'two' });
    assert.equal(limited.code, 429);
    assert.equal(limited.headers.get('retry-after'), '1');
    assert.equal(limited.body, 'Too many requests, please try again later.');
    assert.equal((await call(api, 'GET', PODS, undefined, { token: 'two' })).code, 200, 'injection used up');
    assert.ok(api.requests.some((r) => r.code === 429 && r.method === 'GET'), 'request log records the refusal');
    const sel = await call(api, 'GET', `${PODS}?fieldSelector=spec.bogus%3Dx`, undefined, { token: 'two' });
    assert.equal(sel.code, 400);
    assert.equal(sel.body.message, 'field label not supported: spec.bogus');
});

// --- the real kubectl ------------------------------------------------------------------

const kubectl = (kc, args, opts) => kubectlAt(kc, path.dirname(kc))(args, opts);

const SAMPLES = `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata:
  name: e2b-envd
spec:
  version: 0.0.1
  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10
  runtimes:
  - name: envd
    port: 49983
    protocol: TCP
    readinessProbe: {httpGet: {port: 49983, path: /health}}
  template:
    spec:
      automountServiceAccountToken: false
      containers:
      - name: sandbox
        image: ghcr.io/scitix/agent-sandbox-envd:0.9.0-2
        resources:
          requests: {cpu: "1", memory: 2Gi}
          limits: {cpu: "1", memory: 2Gi}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: e2b, namespace: default}
spec:
  templateRef: {name: e2b-envd}
  mode: WarmPool
  autoscaling:
    groups: [{name: 1c2gi, enabled: true, minReplicas: 0, maxReplicas: 4}]
  clusters:
  - clusterID: alpha
    members:
    - name: e2b-1c2gi
      config:
        scalingGroup: 1c2gi
        inlineResources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
      spec: {replicas: 2}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxPool
metadata:
  name: e2b-1c2gi
  namespace: default
  finalizers: [agentbox.navix.sh/test-hold]
spec:
  replicas: 2
  templateName: e2b-envd
  idleImage: ghcr.io/scitix/agent-sandbox-idle:0.0.10
  template:
    spec:
      containers: [{name: sandbox, image: ghcr.io/scitix/agent-sandbox-envd:0.9.0-2}]
`;

test('the real kubectl: apply the samples, get -o yaml, get -w, a stale patch conflicts, delete waits on a finalizer', async () => {
    assert.ok(fs.existsSync(KUBECTL), `kubectl is needed (${KUBECTL}; scripts/deps.sh installs kubernetes-client)`);
    const api = await server({ bookmarkMs: 500 });
    const dir = tempDir('agentbox-kubectl-');
    const kc = api.kubeconfig(dir);
    const file = path.join(dir, 'samples.yaml');
    fs.writeFileSync(file, SAMPLES);

    const applied = await kubectl(kc, ['apply', '-f', file]);
    assert.equal(applied.code, 0, applied.stderr);
    assert.match(applied.stdout, /sandboxtemplate.agents.navix.sh\/e2b-envd created/);
    assert.match(applied.stdout, /sandboxenv.agents.navix.sh\/e2b created/);
    assert.match(applied.stdout, /sandboxpool.agents.navix.sh\/e2b-1c2gi created/);
    // new kubectl reads our OpenAPI v3 and leaves validation to the server
    // (fieldValidation=Strict); old ones (Debian's 1.20) validate with the v2 document
    assert.ok(api.requests.some((r) => r.method === 'POST' && r.query.fieldValidation === 'Strict') ||
        api.requests.some((r) => r.path === '/openapi/v2' && r.code === 200), 'kubectl accepted our OpenAPI');

    const env = api.peek('sandboxenvs', 'default', 'e2b');
    assert.equal(env.spec.autoscaling.groups[0].scaleUpPolicy.mode, 'Default', 'schema defaults applied');
    const reapply = await kubectl(kc, ['apply', '-f', file]);
    assert.equal(reapply.code, 0, reapply.stderr);

    const yaml = await kubectl(kc, ['get', 'sbp', 'e2b-1c2gi', '-o', 'yaml']);
    assert.equal(yaml.code, 0, yaml.stderr);
    assert.match(yaml.stdout, /kind: SandboxPool/);
    assert.match(yaml.stdout, /replicas: 2/);
    assert.match(yaml.stdout, /uid: [0-9a-f-]{36}/);
    const rvNow = api.peek('sandboxpools', 'default', 'e2b-1c2gi').metadata.resourceVersion;
    assert.match(yaml.stdout, new RegExp(`resourceVersion: "${rvNow}"`));
    // a CustomResourceDefinition applies too (the charts will ship the three under crds/)
    const crd = path.join(dir, 'crd.yaml');
    fs.writeFileSync(crd, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sandboxpools.agents.navix.sh
  annotations: {helm.sh/resource-policy: keep}
spec:
  group: agents.navix.sh
  names: {kind: SandboxPool, listKind: SandboxPoolList, plural: sandboxpools, singular: sandboxpool, shortNames: [sbp]}
  scope: Namespaced
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}, scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.runningReplicas, labelSelectorPath: .status.selector}}
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, required: [replicas], properties: {replicas: {type: integer, minimum: 0}}}}}}
`);
    const crdApplied = await kubectl(kc, ['apply', '-f', crd]);
    assert.equal(crdApplied.code, 0, crdApplied.stderr);
    assert.match(crdApplied.stdout, /customresourcedefinition.apiextensions.k8s.io\/sandboxpools.agents.navix.sh created/);
    assert.equal(api.peek('customresourcedefinitions', '', 'sandboxpools.agents.navix.sh').spec.scope, 'Namespaced');
    const tmpl = await kubectl(kc, ['get', 'sandboxtemplates', '-o', 'name']);
    assert.equal(tmpl.stdout.trim(), 'sandboxtemplate.agents.navix.sh/e2b-envd');

    // get -w: the list, then our change arrives on the watch
    const watcher = spawn(KUBECTL, ['--kubeconfig', kc, 'get', 'sandboxpools', '-w', '-o', 'jsonpath={.metadata.name} {.spec.replicas}{"\\n"}'], { env: { ...process.env, HOME: dir } });
    let out = '';
    watcher.stdout.on('data', (d) => (out += d));
    watcher.stderr.on('data', (d) => (out += d));
    try {
        await waitFor(() => out.includes('e2b-1c2gi 2'), { what: `kubectl get -w initial list (${out})` });
        await waitFor(() => api.requests.some((r) => r.query.watch === 'true' || r.query.watch === '1'), { what: 'kubectl to start watching' });
        const sc = await call(api, 'PATCH', `${POOLS}/e2b-1c2gi`, { spec: { replicas: 3 } }, { ctype: 'application/merge-patch+json' });
        assert.equal(sc.code, 200);
        await waitFor(() => out.includes('e2b-1c2gi 3'), { what: `kubectl get -w to print the change (${out})` });
    } finally {
        watcher.kill('SIGKILL');
    }

    // a patch carrying an old resourceVersion is a conflict, reported by kubectl
    const stale = await kubectl(kc, ['patch', 'sbp', 'e2b-1c2gi', '--type=merge', '-p', JSON.stringify({ metadata: { resourceVersion: rvNow }, spec: { replicas: 9 } })]);
    assert.notEqual(stale.code, 0);
    assert.match(stale.stderr, /Conflict|the object has been modified/);
    assert.equal(api.peek('sandboxpools', 'default', 'e2b-1c2gi').spec.replicas, 3);
    const fresh = await kubectl(kc, ['patch', 'sbp', 'e2b-1c2gi', '--type=merge', '-p', '{"spec":{"replicas":1}}']);
    assert.equal(fresh.code, 0, fresh.stderr);
    assert.equal(api.peek('sandboxpools', 'default', 'e2b-1c2gi').spec.replicas, 1);
    const bad = await kubectl(kc, ['patch', 'sbp', 'e2b-1c2gi', '--type=merge', '-p', '{"spec":{"replicas":-1}}']);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /greater than or equal to 0/);

    // delete waits (over a watch) until the finalizer is gone
    const deleting = kubectl(kc, ['delete', 'sbp', 'e2b-1c2gi', '--timeout=30s']);
    await waitFor(() => api.peek('sandboxpools', 'default', 'e2b-1c2gi')?.metadata.deletionTimestamp, { what: 'deletionTimestamp' });
    let done = false;
    deleting.then(() => (done = true));
    await waitFor(() => api.requests.some((r) => r.path === POOLS && (r.query.watch === 'true' || r.query.watch === '1') && (r.query.fieldSelector ?? '').includes('e2b-1c2gi')), { what: 'kubectl delete to watch the pool' });
    assert.equal(done, false, 'kubectl delete is still waiting on the finalizer');
    const rm = await kubectl(kc, ['patch', 'sbp', 'e2b-1c2gi', '--type=json', '-p', '[{"op":"remove","path":"/metadata/finalizers"}]']);
    assert.equal(rm.code, 0, rm.stderr);
    const d = await deleting;
    assert.equal(d.code, 0, d.stderr);
    assert.match(d.stdout, /sandboxpool.agents.navix.sh "e2b-1c2gi" deleted/);
    const gone = await kubectl(kc, ['get', 'sbp', 'e2b-1c2gi']);
    assert.notEqual(gone.code, 0);
    assert.match(gone.stderr, /NotFound/);
});

// --- the simulated kubelet --------------------------------------------------------------

const condOf = (p, type) => p?.status?.conditions?.find((c) => c.type === type)?.status;
const csOf = (p) => p?.status?.containerStatuses?.[0];

test('kubelet: schedules a Pod, runs it Ready on 127.0.0.1, restarts it in place on an image change', async () => {
    const api = await server({ kubelet: { pullDelayMs: 150 } });
    const w = watch(api, PODS, {});
    await call(api, 'POST', PODS, pod('k-1'));
    const running = await waitFor(() => {
        const p = api.peek('pods', 'default', 'k-1');
        return condOf(p, 'Ready') === 'True' && p;
    }, { what: 'k-1 Ready' });
    assert.equal(running.spec.nodeName, 'node-1');
    assert.equal(condOf(running, 'PodScheduled'), 'True');
    assert.equal(running.status.phase, 'Running');
    assert.equal(running.status.podIP, '127.0.0.1');
    assert.deepEqual(running.status.podIPs, [{ ip: '127.0.0.1' }]);
    const cs0 = csOf(running);
    assert.equal(cs0.image, 'idle:1');
    assert.ok(cs0.state.running);
    assert.equal(cs0.restartCount, 0);
    assert.match(cs0.imageID, /@sha256:[0-9a-f]{64}$/);
    assert.match(cs0.containerID, /^containerd:\/\//);

    // the swap: one patch; Ready goes False while the new image is pulled, then True
    const sw = await call(api, 'PATCH', `${PODS}/k-1`, { metadata: { resourceVersion: running.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'task:9' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    assert.equal(sw.code, 200);
    await waitFor(() => condOf(api.peek('pods', 'default', 'k-1'), 'Ready') === 'False', { what: 'Ready False during the pull' });
    const swapped = await waitFor(() => {
        const p = api.peek('pods', 'default', 'k-1');
        return condOf(p, 'Ready') === 'True' && csOf(p).image === 'task:9' && p;
    }, { what: 'k-1 Ready on task:9' });
    const cs1 = csOf(swapped);
    assert.equal(cs1.restartCount, 1);
    assert.notEqual(cs1.containerID, cs0.containerID, 'a new container');
    assert.notEqual(cs1.imageID, cs0.imageID);
    assert.equal(cs1.lastState.terminated.containerID, cs0.containerID);
    assert.equal(swapped.status.podIP, '127.0.0.1', 'podIP unchanged');
    assert.equal(swapped.status.phase, 'Running', 'phase stays Running through the swap');
    const evs = (await call(api, 'GET', '/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dk-1')).body.items;
    assert.ok(evs.some((e) => e.reason === 'Killing' && /definition changed, will be restarted/.test(e.message)), 'Killing event');
    assert.ok(evs.some((e) => e.reason === 'Pulled' && e.message.includes('task:9')));
    // kubelet writes are watched MODIFIED events with increasing RVs
    const mods = w.events.filter((e) => e.type === 'MODIFIED').map((e) => Number(e.object.metadata.resourceVersion));
    assert.ok(mods.length >= 5, `several status writes watched (${mods.length})`);
    assert.ok(mods.every((v, i) => i === 0 || v > mods[i - 1]));
    w.close();

    // deleting a scheduled Pod: Terminating, then gone once the kubelet stopped it
    const del = await call(api, 'DELETE', `${PODS}/k-1`);
    assert.equal(del.code, 200);
    assert.ok(del.body.metadata.deletionTimestamp, 'a scheduled Pod lingers');
    await waitFor(async () => (await call(api, 'GET', `${PODS}/k-1`)).code === 404, { what: 'k-1 gone' });
});

test('kubelet: a failed pull is ErrImagePull then ImagePullBackOff with the image named; a finalizer holds a stopped Pod', async () => {
    const api = await server({ kubelet: { failImages: /^bad\// } });
    await call(api, 'POST', PODS, { ...pod('k-2'), metadata: { name: 'k-2', finalizers: ['agentbox.navix.sh/sandbox-protection'] } });
    const ready = await waitFor(() => {
        const p = api.peek('pods', 'default', 'k-2');
        return condOf(p, 'Ready') === 'True' && p;
    }, { what: 'k-2 Ready' });
    await call(api, 'PATCH', `${PODS}/k-2`, { metadata: { resourceVersion: ready.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'bad/missing:1' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    const failed = await waitFor(() => {
        const p = api.peek('pods', 'default', 'k-2');
        return csOf(p)?.state?.waiting?.reason === 'ImagePullBackOff' && p;
    }, { what: 'ImagePullBackOff' });
    assert.equal(condOf(failed, 'Ready'), 'False');
    assert.match(csOf(failed).state.waiting.message, /bad\/missing:1/);
    const evs = (await call(api, 'GET', '/api/v1/namespaces/default/events?fieldSelector=reason%3DFailed')).body.items;
    assert.ok(evs.some((e) => e.involvedObject.name === 'k-2' && e.message.includes('bad/missing:1') && e.type === 'Warning'));

    // back to a good image: runs again
    const cur = api.peek('pods', 'default', 'k-2');
    await call(api, 'PATCH', `${PODS}/k-2`, { metadata: { resourceVersion: cur.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'idle:1' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    await waitFor(() => condOf(api.peek('pods', 'default', 'k-2'), 'Ready') === 'True' && csOf(api.peek('pods', 'default', 'k-2')).image === 'idle:1', { what: 'k-2 Ready again' });

    await call(api, 'DELETE', `${PODS}/k-2`);
    const held = await waitFor(() => {
        const p = api.peek('pods', 'default', 'k-2');
        return p?.status?.phase === 'Succeeded' && p;
    }, { what: 'k-2 stopped' });
    assert.ok(held.metadata.deletionTimestamp);
    assert.equal(condOf(held, 'Ready'), 'False');
    const rm = await call(api, 'PATCH', `${PODS}/k-2`, { metadata: { resourceVersion: held.metadata.resourceVersion, finalizers: null } }, { ctype: 'application/merge-patch+json' });
    assert.equal(rm.code, 200);
    assert.equal((await call(api, 'GET', `${PODS}/k-2`)).code, 404);
});
