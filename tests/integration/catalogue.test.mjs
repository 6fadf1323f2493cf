// The template catalogue on the hub (issue 16): SandboxTemplates stored once
// in PostgreSQL, written by admins through /api/v1/admin/sandbox-templates
// (body {crdJson}), broadcast to every connected cluster and pulled in full
// by an agent when it connects, applied through each runtime's write seam.
// Two agents on the local runtime (root: namespaces), a third started after
// the write, and one that was down while the catalogue changed.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { adminKey, waitFor } from './lib/harness.mjs';
import { startStack, manifestsDir, native, waitPool } from './lib/sandboxes.mjs';
import { requestJson } from './lib/scaffold.mjs';

let stack;
let manifests;
let admin;
// one manifests directory per agent, as in any deployment: an agent's API
// writes go to its directory's overlay, which two agents must not share
const dirs = {};
const dirOf = (id) => (dirs[id] ??= manifestsDir([]));
let firstHub; // stack.stop stops the hub startStack made; a restarted one is ours to stop

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = dirOf('alpha');
    stack = await startStack({ clusters: ['alpha'], manifests });
    await stack.launch('beta', { manifestsDir: dirOf('beta') });
    admin = await adminKey(stack.hub.base);
    firstHub = stack.hub;
});

after(async () => {
    if (process.env.CAT_DEBUG && stack) {
        for (const a of Object.values(stack.agents)) console.log(a.proc.logs().split('\n').slice(-40).join('\n'));
        console.log(stack.hub.proc.logs().split('\n').slice(-40).join('\n'));
    }
    if (stack && stack.hub !== firstHub) await stack.hub.proc.stop();
    if (stack) await stack.stop();
    for (const d of Object.values(dirs)) fs.rmSync(d, { recursive: true, force: true });
});

const hub = (key, method, p, body) => requestJson(`${stack.hub.base}${p}`, { method, headers: { Authorization: `Bearer ${key}` }, body });

function tpl(name, extra = {}) {
    return {
        apiVersion: 'agents.navix.sh/v1alpha1',
        kind: 'SandboxTemplate',
        metadata: { name, annotations: { 'agentbox.navix.sh/docs': `# ${name}` } },
        spec: {
            idleImage: 'ghcr.io/scitix/agent-sandbox-idle:0.0.10',
            runtimes: [{ name: 'envd', port: 49983 }],
            description: `the ${name} template`,
            ...extra,
        },
    };
}

async function agentTemplates(agent) {
    const r = await native(agent, stack.key, 'GET', '/v1/sandbox-templates');
    assert.equal(r.status, 200, r.text);
    return r.json.items;
}

async function waitTemplate(agent, name, present, pred = () => true, timeoutMs = 15000) {
    return waitFor(async () => {
        const t = (await agentTemplates(agent)).find((x) => x.name === name);
        return present ? (t && pred(t) ? t : null) : !t;
    }, { timeoutMs, what: `template ${name} ${present ? 'on' : 'gone from'} ${agent.id}` });
}

function apiError(r, status, re, code) {
    assert.equal(r.status, status, r.text);
    assert.equal(typeof r.json.error, 'string', r.text);
    if (re) assert.match(r.json.error, re);
    if (code) assert.equal(r.json.errorCode, code);
}

test('admin writes are validated and refused to anyone else', async () => {
    // a tenant key (and no key) cannot write; reading is for everyone
    apiError(await hub(stack.key, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: JSON.stringify(tpl('nope')) }),
        403, /admin/, 'FORBIDDEN');
    apiError(await hub(stack.key, 'GET', '/api/v1/admin/sandbox-templates'), 403, /admin/);
    apiError(await hub(stack.key, 'DELETE', '/api/v1/admin/sandbox-templates/nope'), 403, /admin/);
    assert.equal((await fetch(`${stack.hub.base}/api/v1/admin/sandbox-templates`, { method: 'POST', body: '{}' })).status, 401);
    assert.equal((await hub(stack.key, 'GET', '/api/v1/sandbox-templates')).status, 200);

    // errors name the field
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', {}), 400, /crdJson/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: '{not json' }), 400, /crdJson.*not valid JSON/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('Bad_Name') }), 400, /metadata\.name/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: { ...tpl('k'), kind: 'SandboxPool' } }), 400, /'kind'/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: { ...tpl('k'), spec: undefined } }), 400, /'spec' is required/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates',
        { crdJson: tpl('k', { runtimes: [{ name: 'envd', port: 70000 }] }) }), 400, /spec\.runtimes\[0\]\.port/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('k', { replicas: 3 }) }), 400, /spec\.replicas/);
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates',
        { crdJson: tpl('k', { description: 'x'.repeat(70 * 1024) }) }), 400, /over the 65536-byte limit/);
    apiError(await hub(admin, 'PUT', '/api/v1/admin/sandbox-templates/other', { crdJson: tpl('k') }), 400, /path names template 'other'/);
    apiError(await hub(admin, 'PUT', '/api/v1/admin/sandbox-templates/k', { crdJson: tpl('k') }), 404, /'k' not found/);
    apiError(await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/k'), 404, /'k' not found/);
    assert.equal((await hub(admin, 'GET', '/api/v1/admin/sandbox-templates')).json.total, 0);
});

test('a template written on the hub reaches both clusters, serves an env, and goes away on DELETE', async () => {
    const { alpha, beta } = stack.agents;
    const created = await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: JSON.stringify(tpl('py')) });
    assert.equal(created.status, 201, created.text);
    assert.equal(created.json.name, 'py');
    apiError(await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('py') }), 409, /already exists/);

    // stored once, read back whole, with the sync label
    const adm = await hub(admin, 'GET', '/api/v1/admin/sandbox-templates');
    assert.equal(adm.json.total, 1);
    const stored = JSON.parse(adm.json.items[0].crdJson);
    assert.equal(stored.metadata.labels['agentbox.io/sync-source'], 'global');
    assert.equal(stored.spec.description, 'the py template');
    const rows = await (await import('./lib/harness.mjs')).psqlAt(stack.pg.url, 'SELECT name FROM sandbox_templates');
    assert.match(rows, /py/);
    const pub = await hub(stack.key, 'GET', '/api/v1/sandbox-templates/py');
    assert.equal(pub.status, 200, pub.text);
    assert.equal(pub.json.template.syncSource, 'global');

    for (const a of [alpha, beta]) {
        const t = await waitTemplate(a, 'py', true);
        assert.equal(t.syncSource, 'global');
        assert.equal(t.description, 'the py template');
        assert.equal(t.annotations['agentbox.navix.sh/docs'], '# py');
    }
    // the clusters' own template is still there and still theirs
    assert.equal((await agentTemplates(alpha)).find((x) => x.name === 'envd').syncSource, 'local');

    // an env on beta with templateRef py serves a sandbox
    const env = await native(beta, stack.key, 'POST', '/v1/envs', { name: 'pyenv', templateRef: { name: 'py' } });
    assert.equal(env.status, 201, env.text);
    const member = { config: { inlineResources: { requests: { cpu: '1', memory: '512Mi' } } }, replicas: 1 };
    assert.equal((await native(beta, stack.key, 'POST', '/v1/envs/pyenv/sandboxpools', member)).status, 202);
    await waitPool(beta, 'pyenv-1c0gi', (s) => s.idle === 1, 'py pool warm');
    const sb = await native(beta, stack.key, 'POST', '/v1/sandboxes', { poolName: 'pyenv' });
    assert.equal(sb.status, 201, sb.text);
    const got = await native(beta, stack.key, 'GET', `/v1/sandboxes/${sb.json.sandbox.sandboxId}`);
    assert.equal(got.status, 200, got.text);

    // templateRef is fixed at create: a PUT changing it names the value in force
    const editable = (await native(beta, stack.key, 'GET', '/v1/envs/pyenv')).json.editable;
    const put = await native(beta, stack.key, 'PUT', '/v1/envs/pyenv', { ...editable, templateRef: { name: 'envd' } });
    assert.equal(put.status, 400, put.text);
    assert.match(put.json.error, /templateRef/);
    assert.match(put.json.error, /py/);

    // a replaced template reaches the clusters too
    const upd = await hub(admin, 'PUT', '/api/v1/admin/sandbox-templates/py', { crdJson: tpl('py', { description: 'py, version 2' }) });
    assert.equal(upd.status, 200, upd.text);
    for (const a of [alpha, beta]) await waitTemplate(a, 'py', true, (t) => t.description === 'py, version 2');

    assert.equal((await native(beta, stack.key, 'DELETE', `/v1/sandboxes/${sb.json.sandbox.sandboxId}`)).status, 202);
    assert.equal((await native(beta, stack.key, 'DELETE', '/v1/envs/pyenv')).status, 202);
    const del = await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/py');
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.json, { name: 'py', status: 'Deleted' });
    for (const a of [alpha, beta]) await waitTemplate(a, 'py', false);
    assert.ok((await agentTemplates(alpha)).find((x) => x.name === 'envd'), 'the cluster\'s own template stays');
    apiError(await hub(stack.key, 'GET', '/api/v1/sandbox-templates/py'), 404, /not found/);
});

test('an agent started after the write, and one that was down, catch up when they connect', async () => {
    assert.equal((await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('early') })).status, 201);
    await waitTemplate(stack.agents.beta, 'early', true);

    const gamma = await stack.launch('gamma', { manifestsDir: dirOf('gamma') });
    await waitTemplate(gamma, 'early', true, (t) => t.syncSource === 'global');

    // beta goes down; the catalogue changes; beta comes back with the same state
    const beta = stack.agents.beta;
    await beta.proc.stop();
    assert.equal((await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('late') })).status, 201);
    assert.equal((await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/early')).status, 200);
    const beta2 = await stack.launch('beta', { stateDir: beta.stateDir, manifestsDir: dirOf('beta') });
    await waitTemplate(beta2, 'late', true);
    await waitTemplate(beta2, 'early', false);
    for (const a of [stack.agents.alpha, gamma]) {
        await waitTemplate(a, 'late', true);
        await waitTemplate(a, 'early', false);
    }
    // alpha pulled the whole catalogue on each change, but wrote 'early' only once:
    // an unchanged template (same digest) is not written again
    const applied = stack.agents.alpha.proc.logs().split('\n').filter((l) => /catalogue template applied/.test(l) && /template=early\b/.test(l));
    assert.equal(applied.length, 1, applied.join('\n'));
});

test('abx admin-templates on an agent (direct and console mode) write the hub\'s catalogue; tenants are refused', async () => {
    const { alpha, beta } = stack.agents;
    const direct = async (key, method, p, body) => {
        const res = await fetch(`${alpha.native}${p}`, {
            method, headers: { 'AGENTBOX-API-KEY': key, ...(body ? { 'Content-Type': 'application/json' } : {}) },
            body: body && JSON.stringify(body),
        });
        const text = await res.text();
        return { status: res.status, json: text ? JSON.parse(text) : undefined, text };
    };
    // a tenant key: refused on the agent, nothing reaches the catalogue
    const t = await direct(stack.key, 'POST', '/v1/admin/sandbox-templates', { crdJson: tpl('viaagent') });
    apiError(t, 403, /admin api key required/);
    // the admin key straight at alpha's native API
    const c = await direct(admin, 'POST', '/v1/admin/sandbox-templates', { crdJson: JSON.stringify(tpl('viaagent')) });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.name, 'viaagent');
    apiError(await direct(admin, 'POST', '/v1/admin/sandbox-templates', { crdJson: tpl('Bad') }), 400, /metadata\.name/);
    await waitTemplate(beta, 'viaagent', true);
    const listed = await direct(admin, 'GET', '/v1/admin/sandbox-templates');
    assert.equal(listed.status, 200, listed.text);
    assert.ok(listed.json.items.some((i) => i.name === 'viaagent'));
    // console mode: <hub>/api/clusters/<id>/v1/admin/... reaches the same catalogue
    const put = await hub(admin, 'PUT', '/api/clusters/alpha/v1/admin/sandbox-templates/viaagent',
        { crdJson: tpl('viaagent', { description: 'via the console' }) });
    assert.equal(put.status, 200, put.text);
    await waitTemplate(beta, 'viaagent', true, (x) => x.description === 'via the console');
    apiError(await hub(stack.key, 'DELETE', '/api/clusters/alpha/v1/admin/sandbox-templates/viaagent'), 403, /admin/);
    assert.equal((await direct(admin, 'DELETE', '/v1/admin/sandbox-templates/viaagent')).status, 200);
    await waitTemplate(beta, 'viaagent', false);
});

test('visibility rules: a tenant outside them sees the template neither on the hub nor on a cluster', async () => {
    const hidden = tpl('hidden', { visibility: { rules: [{ team: 'someone-else' }] } });
    assert.equal((await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: hidden })).status, 201);
    await waitFor(async () => {
        const r = await native(stack.agents.alpha, admin, 'GET', '/v1/sandbox-templates/hidden');
        return r.status === 200;
    }, { timeoutMs: 15000, what: 'hidden on alpha for the admin' });
    apiError(await hub(stack.key, 'GET', '/api/v1/sandbox-templates/hidden'), 404, /not found/);
    assert.ok(!(await hub(stack.key, 'GET', '/api/v1/sandbox-templates')).json.items.some((x) => x.name === 'hidden'));
    assert.equal((await hub(admin, 'GET', '/api/v1/sandbox-templates/hidden')).status, 200);
    assert.equal((await native(stack.agents.alpha, stack.key, 'GET', '/v1/sandbox-templates/hidden')).status, 404);
    assert.equal((await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/hidden')).status, 200);
});

test('the catalogue is PostgreSQL\'s: a restarted hub reads it back and the clusters keep in step', async () => {
    assert.equal((await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('durable') })).status, 201);
    await waitTemplate(stack.agents.alpha, 'durable', true);
    const { port, tunnelPort } = stack.hub;
    await stack.hub.proc.stop();
    const { startHub } = await import('./lib/harness.mjs');
    stack.hub = await startHub(stack.pg.url, { port, tunnelPort });
    const back = await waitFor(async () => {
        const r = await hub(admin, 'GET', '/api/v1/sandbox-templates/durable');
        return r.status === 200 ? r : null;
    }, { timeoutMs: 15000, what: 'the catalogue read back by the new hub' });
    assert.equal(back.json.template.description, 'the durable template');
    // the agents reconnect (a WELCOME: they pull) and a write after the restart reaches them
    assert.equal((await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/durable')).status, 200);
    for (const a of Object.values(stack.agents)) await waitTemplate(a, 'durable', false);
});

test('a change made to the table behind this hub (another replica, a hand edit) reaches the clusters within the reload', async () => {
    assert.equal((await hub(admin, 'POST', '/api/v1/admin/sandbox-templates', { crdJson: tpl('elsewhere') })).status, 201);
    await waitTemplate(stack.agents.alpha, 'elsewhere', true);
    const { psqlAt } = await import('./lib/harness.mjs');
    await psqlAt(stack.pg.url, `UPDATE sandbox_templates SET crd = jsonb_set(crd, '{spec,description}', '"edited elsewhere"') WHERE name = 'elsewhere'`);
    // the hub re-reads its table every 30 s
    await waitTemplate(stack.agents.alpha, 'elsewhere', true, (t) => t.description === 'edited elsewhere', 45000);
    assert.equal((await hub(admin, 'GET', '/api/v1/sandbox-templates/elsewhere')).json.template.description, 'edited elsewhere');
    assert.equal((await hub(admin, 'DELETE', '/api/v1/admin/sandbox-templates/elsewhere')).status, 200);
});
