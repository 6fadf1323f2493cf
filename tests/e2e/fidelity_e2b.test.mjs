// Issue 14, E2B API items, with the real e2b SDK (2.51.0) against the agent's
// E2B API and data plane. 3: `timeout` is the idle timeout (DESIGN §7):
// authenticated envd traffic and open streams push the end, silence reclaims,
// setTimeout sets it anew, endAt tells the truth. 4: a pool's `replicas` is
// its maximum concurrency: a claim that finds nothing idle waits and is
// served once one is released; `replicas: 0` never starts one. 5: a bare
// name that is not an env of the agent's cluster is a 400 naming
// CLUSTER_ID::name, never forwarded. 9: an agent's lists show the caller's
// sandboxes on every cluster (the hub's merged list). Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, manifestsDir, envManifest, waitPool, poolStatus } from '../integration/lib/sandboxes.mjs';
import { waitFor } from '../integration/lib/harness.mjs';

let stack;
let alpha;
let E2B;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([
        envManifest('demo', ['alpha', 'beta'], { replicas: 2 }),
        envManifest('cap', ['alpha'], { replicas: 2 }),
        envManifest('none', ['alpha'], { replicas: 0 }),
        envManifest('onbeta', ['beta'], { replicas: 1 }),
    ]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm', 60000);
    await waitPool(alpha, 'cap-1c0gi', (s) => s.idle === 2, 'cap warm', 60000);
    await waitPool(stack.agents.beta, 'onbeta-1c0gi', (s) => s.idle === 1, 'beta onbeta warm', 60000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;
const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

test('timeout is the idle timeout: activity keeps a sandbox, silence reclaims it, endAt tells the truth', async () => {
    const { Sandbox } = E2B;
    const busy = await Sandbox.create('alpha::demo', { timeoutMs: 5000 });
    const quiet = await Sandbox.create('alpha::demo', { timeoutMs: 5000 });
    const t0 = Date.now();
    try {
        const info0 = await quiet.getInfo();
        const left0 = info0.endAt.getTime() - t0;
        assert.ok(left0 > 2000 && left0 <= 6000, `endAt of a fresh sandbox is ~5 s away (${left0} ms)`);
        // a command every 2 s on the busy one; the quiet one hears nothing
        while (Date.now() - t0 < 11000) {
            const r = await busy.commands.run('echo alive');
            assert.equal(r.stdout, 'alive\n', logs());
            await sleep(2000);
        }
        assert.equal(await busy.isRunning(), true, `the busy sandbox outlived its 5 s timeout${logs()}`);
        const info = await busy.getInfo();
        const left = info.endAt.getTime() - Date.now();
        assert.ok(left > 1000 && left <= 5000, `endAt is the last activity + 5 s (${left} ms left)`);
        // the quiet one is gone (isRunning asks envd's /health, which is not activity)
        const list = await Sandbox.list().nextItems();
        assert.ok(!list.some((s) => s.sandboxId === quiet.sandboxId), 'the silent sandbox was reclaimed');
        assert.ok(list.some((s) => s.sandboxId === busy.sandboxId), 'the busy one is listed');
        assert.equal(await quiet.isRunning(), false);

        // an open stream is activity even when nothing flows through it
        const r = await busy.commands.run('sleep 8; echo slept', { timeoutMs: 30000 });
        assert.equal(r.stdout, 'slept\n', `a silent 8 s command outlived the 5 s idle timeout${logs()}`);

        // setTimeout sets the idle timeout anew: 2 s from now, then silence
        await busy.setTimeout(2000);
        const set = await busy.getInfo();
        const leftSet = set.endAt.getTime() - Date.now();
        assert.ok(leftSet > 0 && leftSet <= 2500, `setTimeout(2000) moved endAt (${leftSet} ms left)`);
        const tSet = Date.now();
        await waitFor(async () => !(await Sandbox.list().nextItems()).some((s) => s.sandboxId === busy.sandboxId),
            { timeoutMs: 8000, intervalMs: 200, what: 'the busy sandbox to idle out after setTimeout(2000)' });
        const took = Date.now() - tSet;
        assert.ok(took >= 1000, `reclaimed ${took} ms after setTimeout(2000)`);
    } finally {
        await Sandbox.kill(busy.sandboxId).catch(() => {});
        await Sandbox.kill(quiet.sandboxId).catch(() => {});
    }
});

test('replicas is the maximum concurrency: the next claim waits and is served on a release', async () => {
    const { Sandbox } = E2B;
    const a = await Sandbox.create('alpha::cap');
    const b = await Sandbox.create('alpha::cap');
    let killedAt = 0;
    let third;
    try {
        const st = await poolStatus(alpha, 'cap-1c0gi');
        assert.equal(st.idle + st.running + st.starting, 2, `replicas 2 counts every state: ${JSON.stringify(st)}`);
        const waiting = Sandbox.create('alpha::cap').then((s) => {
            third = s;
            return Date.now();
        });
        const queued = await waitPool(alpha, 'cap-1c0gi', (s) => s.pending === 1, 'the third claim to wait');
        assert.equal(queued.starting, 0, 'no sandbox started beyond replicas');
        assert.equal(queued.running, 2);
        assert.equal(third, undefined, 'the third claim is not served while both run');
        killedAt = Date.now();
        await a.kill();
        const servedAt = await waiting;
        assert.ok(servedAt >= killedAt, 'the waiting claim was served after the release');
        assert.equal((await third.commands.run('echo served')).stdout, 'served\n');
        const after = await poolStatus(alpha, 'cap-1c0gi');
        assert.ok(after.running + after.idle + after.starting <= 2, `never beyond replicas: ${JSON.stringify(after)}`);
    } finally {
        for (const s of [a, b, third]) if (s) await Sandbox.kill(s.sandboxId).catch(() => {});
    }
});

test('replicas: 0 never cold-starts: the claim waits for its startup timeout, then fails naming replicas', async () => {
    const { Sandbox } = E2B;
    const t0 = Date.now();
    await assert.rejects(
        Sandbox.create('alpha::none', { metadata: { 'agentbox.scitix.ai/startup-timeout': '2' } }),
        (e) => /has replicas 0 and never starts a sandbox/.test(e.message) || assert.fail(e.message));
    assert.ok(Date.now() - t0 >= 1500, 'the claim waited for its startup timeout');
    const st = await poolStatus(alpha, 'none-1c0gi');
    assert.deepEqual([st.idle, st.running, st.starting, st.pending], [0, 0, 0, 0], JSON.stringify(st));
});

test('a bare name that is not an env of this cluster is a 400 naming CLUSTER_ID::name, never forwarded', async () => {
    const { Sandbox } = E2B;
    const beta = stack.agents.beta;
    const before = await poolStatus(beta, 'onbeta-1c0gi');
    for (const name of ['onbeta', 'nosuch', 'cap-1c0gi']) {
        const r = await fetch(`${alpha.e2b}/v2/sandboxes`, {
            method: 'POST', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
            body: JSON.stringify({ templateID: name }),
        });
        const body = await r.json();
        assert.equal(r.status, 400, `${name}: ${JSON.stringify(body)}`);
        assert.equal(body.code, 400);
        assert.ok(body.message.includes(`CLUSTER_ID::${name}`), body.message);
        assert.match(body.message, /cluster 'alpha'/);
    }
    // the SDK surfaces it with the message
    await assert.rejects(Sandbox.create('onbeta'), (e) => e.message.includes('CLUSTER_ID::onbeta'));
    const after = await poolStatus(beta, 'onbeta-1c0gi');
    assert.equal(after.running, before.running, 'nothing was forwarded to beta');
    // the explicit form reaches beta's env, and the hub places the bare name
    const pinned = await Sandbox.create('beta::onbeta');
    assert.match(pinned.sandboxId, /^beta-/);
    await pinned.kill();
    await waitPool(beta, 'onbeta-1c0gi', (s) => s.idle === 1, 'onbeta refilled');
    const viaHub = await Sandbox.create('onbeta', { domain: undefined, apiUrl: `${stack.hub.base}/e2b`, sandboxUrl: `${stack.hub.base}/data` });
    assert.match(viaHub.sandboxId, /^beta-/, 'the hub front door places a bare name on any cluster');
    await Sandbox.kill(viaHub.sandboxId, { apiUrl: `${stack.hub.base}/e2b` });
});

test('an agent\'s lists show the caller\'s sandboxes on every cluster, as the hub\'s do', async () => {
    const { Sandbox } = E2B;
    const here = await Sandbox.create('alpha::demo', { metadata: { everywhere: 'yes' } });
    const there = await Sandbox.create('beta::demo', { metadata: { everywhere: 'yes' } });
    try {
        assert.match(there.sandboxId, /^beta-/);
        const ids = (await Sandbox.list({ query: { metadata: { everywhere: 'yes' } } }).nextItems()).map((s) => s.sandboxId).sort();
        assert.deepEqual(ids, [here.sandboxId, there.sandboxId].sort(), 'alpha\'s v2 list has beta\'s sandbox too');
        const v1 = await fetch(`${alpha.e2b}/sandboxes?metadata=${encodeURIComponent('everywhere=yes')}`, { headers: { 'X-API-Key': stack.key } });
        assert.equal(v1.status, 200);
        const listed = await v1.json();
        assert.deepEqual(listed.map((s) => s.sandboxID).sort(), ids, 'and so has its v1 list');
        const b = listed.find((s) => s.sandboxID === there.sandboxId);
        assert.equal(b.alias, 'demo');
        // the hub's list agrees
        const hub = await fetch(`${stack.hub.base}/e2b/v2/sandboxes?metadata=${encodeURIComponent('everywhere=yes')}`, { headers: { 'X-API-Key': stack.key } });
        assert.deepEqual((await hub.json()).map((s) => s.sandboxID).sort(), ids);
    } finally {
        await Sandbox.kill(here.sandboxId).catch(() => {});
        await Sandbox.kill(there.sandboxId).catch(() => {});
    }
});
