// Routing steps 3 and 4 across clusters (DESIGN §6, reference §1.6) fed by
// the autoscaler's headroom, with two agents on the local runtime: an env on
// both, nobody idle. fx4: alpha's member is at its maxReplicas (headroom 0),
// beta's is empty but may grow → an alpha create is forwarded to beta (step
// 4) and served once beta's autoscaler scales up. fx3: alpha may grow too →
// the create stays on alpha (step 3) and alpha's autoscaler serves it.
// Needs root (the local runtime).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor, metricValue, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, manifestsDir, native, waitPool } from './lib/sandboxes.mjs';
import { requestJson } from './lib/scaffold.mjs';

const member = (env, c, replicas, max) => `  - clusterID: ${c}
    members:
    - name: ${env}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
        maxReplicas: ${max}
      spec: {replicas: ${replicas}, defaultStartupTimeout: 60s}
`;
const envYaml = (env, alphaMax) => `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${env}, namespace: default}
spec:
  templateRef: {name: envd}
  autoscaling:
    groups:
    - name: 1c0gi
      enabled: true
      minReplicas: 0
      scaleUpPolicy: {mode: Conservative, cooldownSeconds: 1, idleThresholdSeconds: 0}
      scaleDownPolicy: {idleTimeoutSeconds: 600}
  clusters:
${member(env, 'alpha', 1, alphaMax)}${member(env, 'beta', 0, 4)}`;

let stack;
let alpha;
let beta;
let manifests;

const e2b = (base, method, p, body) => requestJson(base + p, { method, headers: { 'X-API-Key': stack.key }, body });
const create = (base, templateID) => e2b(base, 'POST', '/sandboxes', { templateID, timeout: 300 });
const route = async (env) => (await native(alpha, stack.key, 'GET', `/v1/federation/route?env=${env}`)).json;
const events = async (agent, env) =>
    (await native(agent, stack.key, 'GET', `/v1/envs/${env}/events`)).json.items;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = manifestsDir([envYaml('fx4', 1), envYaml('fx3', 3)]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    beta = stack.agents.beta;
    for (const env of ['fx4', 'fx3'])
        await waitPool(alpha, `${env}-1c0gi`, (s) => s.idle === 1, `alpha ${env} warm`, 60000);
});

after(async () => {
    if (process.env.AS_DEBUG) for (const a of [alpha, beta]) if (a) console.log(a.proc.logs().split('\n').slice(-60).join('\n'));
    if (stack) await stack.stop();
    if (manifests) fs.rmSync(manifests, { recursive: true, force: true });
});

// Takes alpha's one idle sandbox of env, then waits until the hub has seen
// alpha at idle 0 and what it says for the next create.
async function exhaustAlpha(env, step) {
    const first = await create(alpha.e2b, env);
    assert.equal(first.status, 201, first.text);
    assert.match(first.json.sandboxID, /^alpha-/);
    return waitFor(async () => {
        const r = await route(env);
        return r && r.step === step ? r : null;
    }, { timeoutMs: 20000, what: `${env}: route step ${step}` });
}

test('step 4: alpha at its ceiling, beta can scale → forwarded to beta and served after it scales up', async () => {
    const r = await exhaustAlpha('fx4', 4);
    assert.equal(r.action, 'forward');
    assert.equal(r.cluster, 'beta');
    assert.equal(r.pool, 'fx4-1c0gi');
    assert.equal(r.fromHub, true);
    const before4 = (await metricValue(alpha.metrics, 'agentbox_route_decisions_total{step="4"}')) || 0;
    const t0 = Date.now();
    const sb = await create(alpha.e2b, 'fx4');
    assert.equal(sb.status, 201, sb.text);
    assert.match(sb.json.sandboxID, /^beta-[a-z0-9]{20}$/, 'served by beta');
    assert.equal(await metricValue(alpha.metrics, 'agentbox_route_decisions_total{step="4"}'), before4 + 1);
    // beta had nothing: its autoscaler made the sandbox for the waiting claim
    const up = (await events(beta, 'fx4')).find((e) => e.reason === 'ScaledUp');
    assert.ok(up, 'beta scaled up');
    assert.match(up.message, /1 claim\(s\) waiting.*\(0 -> 1\)/);
    assert.ok(Date.parse(up.time) >= t0 - 1000);
    const m = await metricValue(beta.metrics, 'agentbox_autoscaler_decisions_total{env="fx4",group="1c0gi",direction="up"}');
    assert.ok(m >= 1);
    // alpha never scaled past its member's maxReplicas
    assert.equal((await events(alpha, 'fx4')).filter((e) => e.reason === 'ScaledUp').length, 0);
});

test('step 3: alpha can grow itself → the create stays on alpha, its autoscaler serves it', async () => {
    const r = await exhaustAlpha('fx3', 3);
    assert.equal(r.action, 'local');
    const sb = await create(alpha.e2b, 'fx3');
    assert.equal(sb.status, 201, sb.text);
    assert.match(sb.json.sandboxID, /^alpha-/, 'served on alpha');
    const up = (await events(alpha, 'fx3')).find((e) => e.reason === 'ScaledUp');
    assert.ok(up, 'alpha scaled up');
    assert.match(up.message, /\(1 -> 2\)/);
    assert.equal((await events(beta, 'fx3')).filter((e) => e.reason === 'ScaledUp').length, 0, 'beta untouched');
});

test('the agents stop cleanly: no sanitizer report after the autoscaler ran', async () => {
    for (const a of [alpha, beta]) {
        // a sandbox a worker holds at shutdown is left to the process's end
        // by design (local.c op_free): stop once none is
        await waitFor(async () => {
            const t = await (await fetch(`${a.metrics}/metrics`)).text();
            return !t.split('\n').some((l) => /^agentbox_pool_(starting|stopping|pending)\{/.test(l) && !/ 0$/.test(l));
        }, { timeoutMs: 30000, what: 'no sandbox starting, stopping or waited for' });
        await a.proc.stop();
        assertSanitizerClean(a.proc);
    }
});
