// The native management API on the kube runtime (issues 15/16): writes
// through the seam (rt_object_write) become CRD writes on the in-test API
// server (tests/integration/lib/kubeapi.mjs, simulated kubelet with a real
// envd per Pod): a SandboxEnv created, its member pool rendered and warmed,
// a PUT that scales it, the immutable fields, a 409 when someone else wrote
// the Env meanwhile, the imagePullSecret as the dockerconfigjson Secret
// `ips-<env>` owned by the Env and referenced by the member Pods (set, kept,
// replaced, deleted), the hub's template catalogue applied as
// SandboxTemplate CRDs, and DELETE.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { adminKey, waitFor } from '../integration/lib/harness.mjs';
import { startStack } from '../integration/lib/sandboxes.mjs';
import { startKubeApiWith, kubeAgentArgs, podsOf as podsAt, live } from '../integration/lib/kubestack.mjs';
import { requestJson } from '../integration/lib/scaffold.mjs';

const TEMPLATE = {
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxTemplate', metadata: { name: 'envd' },
    spec: { idleImage: 'ghcr.io/scitix/agent-sandbox-idle:0.0.10', runtimes: [{ name: 'envd', port: 49983 }] },
};
const CR = '/apis/agents.navix.sh/v1alpha1';

let api, stack, alpha, admin;

async function k(method, p, body, type = 'application/json') {
    const r = await fetch(`${api.url}${p}`, {
        method, headers: body !== undefined ? { 'Content-Type': type } : {}, body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    return { status: r.status, json: text ? JSON.parse(text) : undefined, text };
}
const getEnv = async (name) => k('GET', `${CR}/namespaces/default/sandboxenvs/${name}`);
const getSecret = async (name) => k('GET', `/api/v1/namespaces/default/secrets/${name}`);

const direct = (method, p, body, key = stack.key) => requestJson(`${alpha.native}${p}`, { method, headers: { 'AGENTBOX-API-KEY': key }, body });

const podsOf = async (pool) => live(await podsAt(api, pool));
const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

before(async () => {
    assert.equal(process.getuid(), 0, 'the stack needs root');
    let kc;
    ({ api, kc } = await startKubeApiWith({ prefix: 'agentbox-kube-native-', kubectl: false }));
    assert.equal((await k('POST', `${CR}/sandboxtemplates`, TEMPLATE)).status, 201);
    stack = await startStack({ clusters: ['alpha'], agentArgs: kubeAgentArgs(kc, '--no-leader-election') });
    alpha = stack.agents.alpha;
    admin = await adminKey(stack.hub.base);
    await waitFor(async () => (await direct('GET', '/v1/sandbox-templates')).json?.total === 1, { what: 'the template through the reflector' });
});

after(async () => {
    if (process.env.KN_DEBUG && alpha) console.log(logs());
    if (stack) await stack.stop();
    if (api) await api.close();
});

test('an env written through the native API is a SandboxEnv CRD, and its member pool warms Pods', async () => {
    const created = await direct('POST', '/v1/envs', { name: 'web', templateRef: { name: 'envd' }, labels: { tier: 'web' } });
    assert.equal(created.status, 201, created.text + logs());
    assert.equal(created.json.env.source, 'api');
    assert.deepEqual(created.json.editable.labels, { tier: 'web' });
    assert.deepEqual(created.json.editable.annotations, {}, 'the runtime\'s own annotations are not shown');
    const crd = await getEnv('web');
    assert.equal(crd.status, 200);
    assert.equal(crd.json.spec.templateRef.name, 'envd');
    assert.equal(crd.json.metadata.labels.tier, 'web');
    assert.equal((await direct('POST', '/v1/envs', { name: 'web', templateRef: { name: 'envd' } })).status, 409);
    const missing = await direct('POST', '/v1/envs', { name: 'bad', templateRef: { name: 'missing' } });
    assert.equal(missing.status, 400, missing.text);
    assert.match(missing.json.error, /SandboxTemplate 'missing'/);
    assert.equal((await getEnv('bad')).status, 404, 'a refused write writes nothing');

    const member = { config: { inlineResources: { requests: { cpu: '1', memory: '512Mi' } } }, replicas: 1 };
    const added = await direct('POST', '/v1/envs/web/sandboxpools', member);
    assert.equal(added.status, 202, added.text + logs());
    assert.equal(added.json.template.name, 'web-1c0gi');
    const members = (await getEnv('web')).json.spec.clusters.find((c) => c.clusterID === 'alpha').members;
    assert.deepEqual(members.map((m) => m.name), ['web-1c0gi']);
    await waitFor(async () => (await podsOf('web-1c0gi')).length === 1, { timeoutMs: 20000, what: 'the member pool\'s Pod' });

    // a PUT scales it (the CRD's member spec), and the reconciler follows
    const sc = await direct('PUT', '/v1/envs/web/sandboxpools/web-1c0gi', { replicas: 2 });
    assert.equal(sc.status, 200, sc.text + logs());
    assert.equal(sc.json.pool.replicas, 2);
    const m2 = (await getEnv('web')).json.spec.clusters.find((c) => c.clusterID === 'alpha').members[0];
    assert.equal(m2.spec.replicas, 2);
    await waitFor(async () => (await podsOf('web-1c0gi')).length === 2, { timeoutMs: 20000, what: 'two Pods after the scale' });

    // templateRef is fixed at create: a PUT changing it is refused naming the value in force
    const editable = (await direct('GET', '/v1/envs/web')).json.editable;
    const bad = await direct('PUT', '/v1/envs/web', { ...editable, templateRef: { name: 'other' } });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.json.error, /templateRef/);
    assert.match(bad.json.error, /envd/);
});

test('a PUT that meets a newer resourceVersion is a 409 naming it, and nothing is overwritten', async () => {
    assert.equal((await direct('POST', '/v1/envs', { name: 'conf', templateRef: { name: 'envd' } })).status, 201);
    const editable = (await direct('GET', '/v1/envs/conf')).json.editable;
    // the agent's PUT waits at the API server while someone else writes the Env
    api.inject({ method: 'PUT', path: /sandboxenvs\/conf$/, delayMs: 600 });
    const seenBefore = api.requests.length;
    const put = direct('PUT', '/v1/envs/conf', { ...editable, overrides: { defaultIdleTimeout: '5m' } });
    // the PUT has reached the server (the injected delay holds it there)
    await waitFor(async () => api.requests.slice(seenBefore)
        .some((q) => q.method === 'PUT' && /sandboxenvs\/conf$/.test(q.path)), { timeoutMs: 5000, what: 'the agent\'s PUT at the API server' });
    const other = await k('PATCH', `${CR}/namespaces/default/sandboxenvs/conf`, { metadata: { labels: { by: 'kubectl' } } }, 'application/merge-patch+json');
    assert.equal(other.status, 200, other.text);
    const r = await put;
    assert.equal(r.status, 409, r.text + logs());
    assert.match(r.json.error, /changed by someone else/);
    assert.match(r.json.error, new RegExp(`resourceVersion ${other.json.metadata.resourceVersion}`));
    const now = (await getEnv('conf')).json;
    assert.equal(now.metadata.labels.by, 'kubectl', 'the other write stands');
    assert.equal(now.spec.overrides?.defaultIdleTimeout, undefined, 'ours did not land');
    assert.equal((await direct('DELETE', '/v1/envs/conf')).status, 202);
});

test('imagePullSecret is the dockerconfigjson Secret ips-<env>, owned by the Env, in the member Pods', async () => {
    assert.equal((await direct('POST', '/v1/envs', { name: 'priv', templateRef: { name: 'envd' } })).status, 201);
    const member = { config: { inlineResources: { requests: { cpu: '1', memory: '512Mi' } } }, replicas: 1 };
    assert.equal((await direct('POST', '/v1/envs/priv/sandboxpools', member)).status, 202);
    const base = (await direct('GET', '/v1/envs/priv')).json.editable;
    const secret = { registries: [{ registry: 'registry.example', username: 'bot', password: 'hunter2-secret' }] };
    const set = await direct('PUT', '/v1/envs/priv', { ...base, overrides: { imagePullSecret: secret } });
    assert.equal(set.status, 200, set.text + logs());
    assert.doesNotMatch(set.text, /hunter2/);
    assert.deepEqual(set.json.editable.overrides, { imagePullSecretConfigured: true });

    const env = (await getEnv('priv')).json;
    assert.doesNotMatch(JSON.stringify(env), /hunter2/, 'the credentials are not in the Env');
    const s = await getSecret('ips-priv');
    assert.equal(s.status, 200, s.text);
    assert.equal(s.json.type, 'kubernetes.io/dockerconfigjson');
    assert.deepEqual(s.json.metadata.ownerReferences.map((o) => [o.kind, o.name, o.uid, o.controller]),
        [['SandboxEnv', 'priv', env.metadata.uid, true]]);
    const cfg = JSON.parse(Buffer.from(s.json.data['.dockerconfigjson'], 'base64').toString());
    assert.equal(cfg.auths['registry.example'].username, 'bot');
    assert.equal(Buffer.from(cfg.auths['registry.example'].auth, 'base64').toString(), 'bot:hunter2-secret');
    // the member Pods pull with it
    await waitFor(async () => {
        const ps = await podsOf('priv-1c0gi');
        return ps.length === 1 && (ps[0].spec.imagePullSecrets ?? []).some((x) => x.name === 'ips-priv');
    }, { timeoutMs: 20000, what: 'a member Pod with imagePullSecrets ips-priv' });

    // echoing the flag keeps the Secret as it is
    const got = await direct('GET', '/v1/envs/priv');
    assert.doesNotMatch(got.text, /hunter2/);
    const keep = await direct('PUT', '/v1/envs/priv', got.json.editable);
    assert.equal(keep.status, 200, keep.text);
    assert.deepEqual(keep.json.editable.overrides, { imagePullSecretConfigured: true });
    assert.equal((await getSecret('ips-priv')).json.metadata.resourceVersion, s.json.metadata.resourceVersion);
    // a new secret replaces it
    const secret2 = { registries: [{ registry: 'registry.example', username: 'bot2', password: 'p2' }] };
    assert.equal((await direct('PUT', '/v1/envs/priv', { ...base, overrides: { imagePullSecret: secret2 } })).status, 200);
    const s2 = JSON.parse(Buffer.from((await getSecret('ips-priv')).json.data['.dockerconfigjson'], 'base64').toString());
    assert.equal(s2.auths['registry.example'].username, 'bot2');
    // neither flag nor secret: deleted
    const drop = await direct('PUT', '/v1/envs/priv', { ...base, overrides: {} });
    assert.equal(drop.status, 200, drop.text);
    assert.deepEqual(drop.json.editable.overrides, {});
    assert.equal((await getSecret('ips-priv')).status, 404);
    // set again, then the Env's DELETE takes the Secret with it
    assert.equal((await direct('PUT', '/v1/envs/priv', { ...base, overrides: { imagePullSecret: secret } })).status, 200);
    assert.equal((await getSecret('ips-priv')).status, 200);
    const del = await direct('DELETE', '/v1/envs/priv');
    assert.equal(del.status, 202, del.text);
    assert.equal((await getEnv('priv')).status, 404);
    assert.equal((await getSecret('ips-priv')).status, 404);
    await waitFor(async () => (await podsOf('priv-1c0gi')).length === 0, { timeoutMs: 20000, what: 'the member pool\'s Pods gone' });
});

test('the hub\'s template catalogue lands as SandboxTemplate CRDs and leaves with its DELETE', async () => {
    const tpl = { ...TEMPLATE, metadata: { name: 'hubtpl' }, spec: { ...TEMPLATE.spec, description: 'from the hub' } };
    const post = await fetch(`${stack.hub.base}/api/v1/admin/sandbox-templates`, {
        method: 'POST', headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ crdJson: JSON.stringify(tpl) }),
    });
    assert.equal(post.status, 201, await post.text());
    const crd = await waitFor(async () => {
        const r = await k('GET', `${CR}/sandboxtemplates/hubtpl`);
        return r.status === 200 ? r.json : null;
    }, { timeoutMs: 15000, what: 'the SandboxTemplate CRD' });
    assert.equal(crd.metadata.labels['agentbox.io/sync-source'], 'global');
    assert.equal(crd.spec.description, 'from the hub');
    const listed = (await direct('GET', '/v1/sandbox-templates')).json.items.find((t) => t.name === 'hubtpl');
    assert.equal(listed.syncSource, 'global');
    // another change makes the agent pull everything again; the CRD it already
    // wrote (which the API server defaulted: runtimes[].protocol) is not rewritten
    const second = { ...TEMPLATE, metadata: { name: 'second' } };
    const p2 = await fetch(`${stack.hub.base}/api/v1/admin/sandbox-templates`, {
        method: 'POST', headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' }, body: JSON.stringify({ crdJson: second }),
    });
    assert.equal(p2.status, 201);
    await waitFor(async () => (await k('GET', `${CR}/sandboxtemplates/second`)).status === 200, { timeoutMs: 15000, what: 'second applied' });
    const writes = alpha.proc.logs().split('\n').filter((l) => /catalogue template applied/.test(l) && /template=hubtpl\b/.test(l));
    assert.equal(writes.length, 1, writes.join('\n'));
    await fetch(`${stack.hub.base}/api/v1/admin/sandbox-templates/second`, { method: 'DELETE', headers: { Authorization: `Bearer ${admin}` } });
    // an env on it serves
    assert.equal((await direct('POST', '/v1/envs', { name: 'onhub', templateRef: { name: 'hubtpl' } })).status, 201);
    assert.equal((await direct('DELETE', '/v1/envs/onhub')).status, 202);
    const del = await fetch(`${stack.hub.base}/api/v1/admin/sandbox-templates/hubtpl`, { method: 'DELETE', headers: { Authorization: `Bearer ${admin}` } });
    assert.equal(del.status, 200);
    await waitFor(async () => (await k('GET', `${CR}/sandboxtemplates/hubtpl`)).status === 404, { timeoutMs: 15000, what: 'the CRD deleted' });
    assert.equal((await k('GET', `${CR}/sandboxtemplates/envd`)).status, 200, 'the cluster\'s own template stays');
});

test('an agent restarted after the catalogue changed catches up on the CRDs; envs written before stay', async () => {
    const hubCall = (method, p, body) => fetch(`${stack.hub.base}${p}`, {
        method, headers: { Authorization: `Bearer ${admin}`, 'Content-Type': 'application/json' }, body: body && JSON.stringify(body),
    });
    const mk = (name) => ({ ...TEMPLATE, metadata: { name }, spec: { ...TEMPLATE.spec, description: name } });
    assert.equal((await hubCall('POST', '/api/v1/admin/sandbox-templates', { crdJson: mk('stale') })).status, 201);
    await waitFor(async () => (await k('GET', `${CR}/sandboxtemplates/stale`)).status === 200, { timeoutMs: 15000, what: 'stale applied' });

    await alpha.proc.stop();
    assert.equal((await hubCall('DELETE', '/api/v1/admin/sandbox-templates/stale')).status, 200);
    assert.equal((await hubCall('POST', '/api/v1/admin/sandbox-templates', { crdJson: mk('fresh') })).status, 201);
    assert.equal((await k('GET', `${CR}/sandboxtemplates/stale`)).status, 200, 'nobody removed it while the agent was down');
    alpha = await stack.launch('alpha', { stateDir: alpha.stateDir });

    await waitFor(async () => (await k('GET', `${CR}/sandboxtemplates/fresh`)).status === 200, { timeoutMs: 20000, what: 'fresh applied after the restart' });
    await waitFor(async () => (await k('GET', `${CR}/sandboxtemplates/stale`)).status === 404, { timeoutMs: 20000, what: 'stale removed after the restart' });
    const web = await direct('GET', '/v1/envs/web');
    assert.equal(web.status, 200, web.text);
    assert.equal(web.json.env.source, 'api');
    assert.equal(web.json.env.pools[0].name, 'web-1c0gi');
});
