// The autoscaler on the local runtime (issue 16, reference §6.6) with short
// windows: a burst of waiting claims scales a group up by its mode (+1,
// +ceil(N/2), to 2N), the cooldown spaces scale-ups, idle sandboxes are
// removed after the idle timeout (stepwise, to minReplicas), the protection
// window lets a claim cancel a marked scale-down, and every decision is an
// env Event, a metric and visible in the groups API. Waits on conditions
// with deadlines. Needs root (the local runtime).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { waitFor, metricValue, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, manifestsDir, native, waitPool } from './lib/sandboxes.mjs';

// An env whose one member (<env>-1c0gi, group 1c0gi) starts with `replicas`.
const envYaml = (env, { replicas, mode = 'Default', min = 0, max = 10, cooldown = 30, idleThreshold = 0,
    quiet = 300, idleTimeout = 300, stabilization = 1, protection = 0 }) => `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${env}, namespace: default}
spec:
  templateRef: {name: envd}
  autoscaling:
    groups:
    - name: 1c0gi
      enabled: true
      minReplicas: ${min}
      maxReplicas: ${max}
      scaleUpPolicy: {mode: ${mode}, cooldownSeconds: ${cooldown}, idleThresholdSeconds: ${idleThreshold}, idleZeroQuietWindowSeconds: ${quiet}}
      scaleDownPolicy: {idleTimeoutSeconds: ${idleTimeout}, stabilizationSeconds: ${stabilization}, protectionWindowSeconds: ${protection}}
  clusters:
  - clusterID: alpha
    members:
    - name: ${env}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: ${replicas}, defaultStartupTimeout: 60s}
`;

// Each test adds its envs to the manifest directory when it starts (the
// agent reloads it within 2 s), so no env's clock runs before its test.
const addEnvs = (envs) => {
    for (const [name, opts] of Object.entries(envs))
        fs.writeFileSync(path.join(manifests, `as-${name}.yaml`), envYaml(name, opts));
};

let stack;
let alpha;
let manifests;
const held = [];

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = manifestsDir([]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
});

after(async () => {
    if (process.env.AS_DEBUG && alpha) console.log(alpha.proc.logs().split('\n').slice(-80).join('\n'));
    if (stack) await stack.stop();
    if (manifests) fs.rmSync(manifests, { recursive: true, force: true });
});

const events = async (env) => {
    const r = await native(alpha, stack.key, 'GET', `/v1/envs/${env}/events`);
    assert.equal(r.status, 200, r.text);
    return r.json.items.slice().reverse(); // oldest first
};
const waitEvent = (env, reason, pred = () => true, timeoutMs = 20000) => waitFor(async () => {
    const ev = (await events(env)).filter((e) => e.reason === reason && pred(e));
    return ev.length ? ev : null;
}, { timeoutMs, what: `${env}: a ${reason} event` });
const group = async (env) => {
    const r = await native(alpha, stack.key, 'GET', `/v1/envs/${env}/autoscaling/groups/1c0gi`);
    assert.equal(r.status, 200, r.text);
    return r.json.group;
};

// Claims every sandbox of env (n of them), then `waiting` more that queue;
// resolves the held ones, leaves the waiting ones pending.
async function burst(env, n, waiting) {
    await waitPool(alpha, `${env}-1c0gi`, (s) => s.idle === n, `${env} warm`, 60000);
    for (let i = 0; i < n; i++) {
        const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: env, timeout: 600 });
        assert.equal(r.status, 201, r.text);
        held.push(r.json.sandbox.sandboxId);
    }
    const queued = [];
    for (let i = 0; i < waiting; i++)
        queued.push(native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: env, timeout: 600 })
            .then((r) => { if (r.status === 201) held.push(r.json.sandbox.sandboxId); return r; }));
    await waitPool(alpha, `${env}-1c0gi`, (s) => s.pending >= 1 || s.starting >= 1, `${env} claims queued`);
    return queued;
}

test('a burst scales up by mode: Conservative +1, Default +ceil(N/2), Aggressive to 2N', async () => {
    addEnvs({
        'up-c': { replicas: 3, mode: 'Conservative' },
        'up-d': { replicas: 3, mode: 'Default' },
        'up-a': { replicas: 3, mode: 'Aggressive' },
    });
    const expect = { 'up-c': '(3 -> 4)', 'up-d': '(3 -> 5)', 'up-a': '(3 -> 6)' };
    const queued = [];
    // one waiting claim each: the step is the mode's whatever the demand
    for (const env of Object.keys(expect)) queued.push(...await burst(env, 3, 1));
    for (const [env, step] of Object.entries(expect)) {
        const [first] = await waitEvent(env, 'ScaledUp');
        assert.ok(first.message.includes(step), `${env}: ${first.message}`);
        assert.match(first.message, /^group 1c0gi: scale-up: \d+ claim\(s\) waiting/);
        const g = await group(env);
        assert.equal(g.status.autoscalingActive, true);
        assert.equal(g.status.totalDesired, Number(step.match(/-> (\d+)/)[1]), JSON.stringify(g.status));
        assert.ok(g.status.lastScaleUpTime, 'the groups API shows the last scale-up');
        assert.equal(g.status.members[0].name, `${env}-1c0gi`);
        assert.equal(g.status.members[0].scaleUpHeadroom, 10 - g.status.totalDesired);
        const m = await metricValue(alpha.metrics,
            `agentbox_autoscaler_decisions_total{env="${env}",group="1c0gi",direction="up"}`);
        assert.ok(m >= 1, `${env}: decisions metric ${m}`);
    }
    // the waiting claims are served by what the autoscaler added
    for (const r of await Promise.all(queued)) assert.equal(r.status, 201, r.text);
});

test('the cooldown spaces scale-ups', async () => {
    addEnvs({ cool: { replicas: 1, mode: 'Conservative', cooldown: 3 } });
    const queued = await burst('cool', 1, 3);
    const ups = await waitEvent('cool', 'ScaledUp', () => true, 30000).then(() =>
        waitFor(async () => {
            const ev = (await events('cool')).filter((e) => e.reason === 'ScaledUp');
            return ev.length >= 2 ? ev : null;
        }, { timeoutMs: 30000, what: 'two scale-ups of cool' }));
    assert.ok(ups[0].message.includes('(1 -> 2)'), ups[0].message);
    assert.ok(ups[1].message.includes('(2 -> 3)'), ups[1].message);
    const gap = Date.parse(ups[1].time) - Date.parse(ups[0].time);
    assert.ok(gap >= 2900, `scale-ups ${gap} ms apart, cooldown 3 s`);
    for (const r of await Promise.all(queued)) assert.equal(r.status, 201, r.text);
});

test('proactive: idle stayed 0 for the threshold after a create → one more, with no claim waiting', async () => {
    addEnvs({
        pro: { replicas: 1, mode: 'Conservative', cooldown: 30, idleThreshold: 2 },
        // the same without a create in the quiet window: never
        quiet: { replicas: 0, mode: 'Conservative', cooldown: 1, idleThreshold: 1, quiet: 30 },
    });
    await waitPool(alpha, 'pro-1c0gi', (s) => s.idle === 1, 'pro warm', 60000);
    const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: 'pro', timeout: 600 });
    assert.equal(r.status, 201, r.text);
    held.push(r.json.sandbox.sandboxId);
    const t0 = Date.now();
    const [up] = await waitEvent('pro', 'ScaledUp');
    assert.match(up.message, /scale-up: no idle sandbox for \d+s, a create \d+s ago; Conservative step \+1 \(1 -> 2\)/);
    assert.ok(Date.parse(up.time) - t0 >= 1500, 'after the 2 s idle threshold');
    // quiet: idle has been 0 all along, but nobody created: no scale-up
    const g = await waitFor(async () => {
        const x = await group('quiet');
        return x.status && x.status.lastDecision ? x : null;
    }, { what: 'quiet decided' });
    assert.equal(g.status.totalDesired, 0);
    assert.equal((await events('quiet')).filter((e) => e.reason === 'ScaledUp').length, 0);
});

test('idle sandboxes go after the idle timeout, stepwise, down to minReplicas', async () => {
    addEnvs({ down: { replicas: 3, mode: 'Conservative', idleTimeout: 3, stabilization: 1 } });
    const warm = await waitFor(async () => {
        const ev = await native(alpha, stack.key, 'GET', '/v1/envs/down/autoscaling/groups/1c0gi');
        return ev.status === 200 && ev.json.group.status && ev.json.group.status.totalIdle === 3 ? Date.now() : null;
    }, { timeoutMs: 60000, what: 'down warm' });
    const downs = await waitFor(async () => {
        const ev = (await events('down')).filter((e) => e.reason === 'ScaledDown');
        return ev.length >= 3 ? ev : null;
    }, { timeoutMs: 30000, what: 'down scaled to 0' });
    assert.deepEqual(downs.map((e) => e.message.match(/(\d+ -> \d+)\)/)[1]), ['3 -> 2', '2 -> 1', '1 -> 0']);
    // none went before all three had been idle (the 3 s idle timeout)
    assert.ok(Date.parse(downs[0].time) >= warm - 100, `first scale-down ${downs[0].time}, all idle at ${new Date(warm).toISOString()}`);
    assert.match(downs[0].message, /idle for 3s/);
    await waitPool(alpha, 'down-1c0gi', (s) => s.idle === 0 && s.starting === 0, 'down empty');
    const g = await group('down');
    assert.equal(g.status.totalDesired, 0);
    assert.ok(g.status.lastScaleDownTime);
    // min 0 and empty: a claim waits and the autoscaler brings one up for it
    const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: 'down', timeout: 600 });
    assert.equal(r.status, 201, r.text);
    held.push(r.json.sandbox.sandboxId);
    const [up] = await waitEvent('down', 'ScaledUp');
    assert.ok(up.message.includes('(0 -> 1)'), up.message);
});

test('the protection window: a claim during it cancels the marked scale-down; else it goes', async () => {
    addEnvs({ prot: { replicas: 1, idleTimeout: 1, protection: 4 }, prot2: { replicas: 1, idleTimeout: 1, protection: 2 } });
    await waitPool(alpha, 'prot-1c0gi', (s) => s.idle === 1, 'prot warm', 60000);
    const [mark] = await waitEvent('prot', 'ScaleDownMarked');
    assert.match(mark.message, /marked; removed in 4s unless claimed/);
    assert.equal((await group('prot')).status.scaleDownMarked, true);
    const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', { poolName: 'prot', timeout: 600 });
    assert.equal(r.status, 201, r.text);
    held.push(r.json.sandbox.sandboxId);
    const [cancel] = await waitEvent('prot', 'ScaleDownCancelled');
    assert.ok(Date.parse(cancel.time) - Date.parse(mark.time) >= 3900, 'decided when the window ended');
    assert.equal((await group('prot')).status.totalDesired, 1);
    assert.equal((await events('prot')).filter((e) => e.reason === 'ScaledDown').length, 0);

    // unclaimed: removed once the window is over, not before
    const [mark2] = await waitEvent('prot2', 'ScaleDownMarked');
    const [down] = await waitEvent('prot2', 'ScaledDown');
    assert.ok(Date.parse(down.time) - Date.parse(mark2.time) >= 1900, 'after the 2 s window');
    assert.ok(/1 -> 0\)/.test(down.message), down.message);
});

test('groups API: live numbers; a group no member declares is gone', async () => {
    const list = await native(alpha, stack.key, 'GET', '/v1/envs/up-a/autoscaling/groups');
    assert.equal(list.status, 200, list.text);
    assert.equal(list.json.total, 1);
    const g = list.json.items[0];
    assert.equal(g.name, '1c0gi');
    assert.equal(g.enabled, true);
    assert.deepEqual(g.members, ['up-a-1c0gi']);
    assert.equal(typeof g.status.totalRunning, 'number');
    assert.ok(g.status.totalRunning >= 3, JSON.stringify(g.status));
    assert.equal(typeof g.status.lastDecision, 'string');
    const e = await native(alpha, stack.key, 'GET', '/v1/envs/up-a/autoscaling/groups/1c0gi');
    assert.equal(e.json.editable.status, undefined, 'live numbers are not editable');

    // the member moves to a group it declares alone (no policy entry): 1c0gi
    // is gone, the new one appears with the defaults (off), and the
    // manifest's replicas are in force again
    fs.writeFileSync(path.join(manifests, 'as-up-a.yaml'), `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: up-a, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
  - clusterID: alpha
    members:
    - name: up-a-1c0gi
      config:
        scalingGroup: solo
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec: {replicas: 3, defaultStartupTimeout: 60s}
`);
    const solo = await waitFor(async () => {
        const l = await native(alpha, stack.key, 'GET', '/v1/envs/up-a/autoscaling/groups');
        const names = l.json.items.map((x) => x.name);
        return names.length === 1 && names[0] === 'solo' && l.json.items[0].status &&
            l.json.items[0].status.totalDesired === 3 ? l.json.items[0] : null;
    }, { timeoutMs: 15000, what: 'the group follows its member' });
    assert.equal(solo.enabled, false);
    assert.equal(solo.status.autoscalingActive, false);
    assert.equal(solo.status.members[0].scaleUpHeadroom, undefined, 'no headroom without autoscaling');
    const gone = await native(alpha, stack.key, 'GET', '/v1/envs/up-a/autoscaling/groups/1c0gi');
    assert.equal(gone.status, 404, gone.text);
    assert.match(gone.json.error, /scaling group '1c0gi' is declared by no member/);
});

// Sandboxes a worker holds at shutdown (spawning, being removed) are left to
// the process's end by design (local.c op_free): stop once none is.
const settled = (agent) => waitFor(async () => {
    const t = await (await fetch(`${agent.metrics}/metrics`)).text();
    const busy = t.split('\n').filter((l) => /^agentbox_pool_(starting|stopping|pending)\{/.test(l) && !/ 0$/.test(l));
    return busy.length === 0;
}, { timeoutMs: 30000, what: 'no sandbox starting, stopping or waited for' });

test('the agent stops cleanly: no sanitizer report after the autoscaler ran', async () => {
    await settled(alpha);
    await alpha.proc.stop();
    assertSanitizerClean(alpha.proc);
});
