// Issue 14, E2B API items, with the real e2b SDK (2.51.0) against the agent's
// E2B API and data plane. 3: `timeout` is the idle timeout (DESIGN §7):
// authenticated envd traffic and open streams push the end, silence reclaims,
// setTimeout sets it anew, endAt tells the truth. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { waitFor } from '../integration/lib/harness.mjs';

let stack;
let alpha;
let E2B;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 2 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm', 30000);
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
