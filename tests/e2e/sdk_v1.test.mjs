// The last e2b 1.x SDK (1.13.2, "e2b-v1" in tests/package.json), unchanged,
// against the agent. 1.x has no E2B_API_URL / E2B_SANDBOX_URL: it speaks
// only https://api.<domain> and https://49983-<id>.<domain>, so the test puts
// an HTTPS front on loopback (lib/tlsfront.mjs) and gives the SDK that
// domain. Create, commands, files, Sandbox.connect(id) (the token comes from
// GET /sandboxes/{id}, issue 14 item 7), list with a metadata filter, kill.
// Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { startTlsFront } from '../integration/lib/tlsfront.mjs';

let stack;
let alpha;
let front;
let V1;
let opts;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 3 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 3, 'alpha warm', 60000);
    front = await startTlsFront({ domain: 'agentbox.test', api: alpha.e2b, data: alpha.data });
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0'; // the front's self-signed certificate
    V1 = await import('e2b-v1');
    opts = { apiKey: stack.key, domain: front.domain };
});

after(async () => {
    if (front) await front.close();
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

test('e2b 1.x: create, commands, files, connect(id) with the token GET hands its owner, kill', async () => {
    const { Sandbox } = V1;
    const sbx = await Sandbox.create('demo', { ...opts, envs: { FOO: 'one' }, metadata: { sdk: 'v1' } });
    try {
        assert.match(sbx.sandboxId, /^alpha-[a-z0-9]{20}$/);
        const r = await sbx.commands.run('echo "$FOO"');
        assert.equal(r.stdout, 'one\n', logs());
        await sbx.files.write('/home/user/v1.txt', 'from 1.x');
        assert.equal(await sbx.files.read('/home/user/v1.txt'), 'from 1.x');

        const info = await Sandbox.getInfo(sbx.sandboxId, opts);
        assert.equal(info.templateId, 'demo-1c0gi');
        assert.equal(info.name, 'demo', 'alias: the env it was created by');
        const again = await Sandbox.connect(sbx.sandboxId, opts);
        assert.equal((await again.commands.run('cat /home/user/v1.txt')).stdout, 'from 1.x',
            `connect(id) gets a working envd token${logs()}`);
    } finally {
        assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true);
    }
    assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false);
});

test('e2b 1.x: list honours the metadata filter', async () => {
    const { Sandbox } = V1;
    const a = await Sandbox.create('demo', { ...opts, metadata: { pick: 'a' } });
    const b = await Sandbox.create('demo', { ...opts, metadata: { pick: 'b' } });
    try {
        const all = await Sandbox.list(opts);
        assert.ok([a, b].every((s) => all.some((x) => x.sandboxId === s.sandboxId)), JSON.stringify(all));
        const onlyA = await Sandbox.list({ ...opts, query: { metadata: { pick: 'a' } } });
        assert.deepEqual(onlyA.map((x) => x.sandboxId), [a.sandboxId]);
        assert.deepEqual(onlyA[0].metadata, { pick: 'a' });
        const none = await Sandbox.list({ ...opts, query: { metadata: { pick: 'zzz' } } });
        assert.deepEqual(none, []);
    } finally {
        await Sandbox.kill(a.sandboxId, opts);
        await Sandbox.kill(b.sandboxId, opts);
    }
});
