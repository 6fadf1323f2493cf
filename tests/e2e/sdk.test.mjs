// The real e2b SDK (2.51.0) against the agent's E2B API, unchanged: the
// control plane at E2B_API_URL (the agent's :8090) and envd through
// E2B_SANDBOX_URL (its data plane). Create, getInfo, list with a metadata
// query and pagination, setTimeout, connect, kill (and kill of a gone
// sandbox), commands with the create's env vars, files, secrets, a create
// forwarded to another cluster through the hub, and errors surfacing as the
// SDK's own classes with our messages. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';

let stack;
let alpha;
let E2B;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 3 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 3, 'alpha warm', 30000);
    await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle >= 1, 'beta warm', 30000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

test('create, getInfo, commands with the env vars of the create, files, setTimeout, connect, kill', async () => {
    const { Sandbox, SandboxNotFoundError } = E2B;
    const sbx = await Sandbox.create('demo', { envs: { FOO: 'from-create' }, metadata: { suite: 'sdk' }, timeoutMs: 120000 });
    assert.match(sbx.sandboxId, /^alpha-[a-z0-9]{20}$/);

    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'demo-1c0gi');
    assert.deepEqual(info.metadata, { suite: 'sdk' });
    assert.equal(info.state, 'running');

    const r = await sbx.commands.run('echo "$FOO"');
    assert.equal(r.exitCode, 0, r.stderr + logs());
    assert.equal(r.stdout, 'from-create\n');

    await sbx.files.write('/home/user/a.txt', 'hello world');
    assert.equal(await sbx.files.read('/home/user/a.txt'), 'hello world');

    await sbx.setTimeout(600000);
    const after = await sbx.getInfo();
    const left = after.endAt.getTime() - Date.now();
    assert.ok(left > 590000 && left <= 601000, `setTimeout moved endAt (${left} ms left)`);

    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300000 });
    assert.equal(again.sandboxId, sbx.sandboxId);
    assert.equal((await again.commands.run('echo hi')).stdout, 'hi\n', 'connect hands out a working token');

    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'kill of a gone sandbox is false');
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e instanceof SandboxNotFoundError);
});

test('list with a metadata query, paginated', async () => {
    const { Sandbox } = E2B;
    const made = [];
    // pinned to alpha: replicas 3 is alpha's concurrency, so all 3 run there
    for (let i = 0; i < 3; i++) made.push(await Sandbox.create('alpha::demo', { metadata: { page: 'yes', i: String(i) } }));
    try {
        const p = Sandbox.list({ query: { metadata: { page: 'yes' } }, limit: 2 });
        const first = await p.nextItems();
        assert.equal(first.length, 2);
        assert.equal(p.hasNext, true);
        const second = await p.nextItems();
        assert.equal(second.length, 1);
        assert.equal(p.hasNext, false);
        assert.deepEqual([...first, ...second].map((s) => s.sandboxId).sort(), made.map((s) => s.sandboxId).sort());
        const one = await Sandbox.list({ query: { metadata: { page: 'yes', i: '2' } } }).nextItems();
        assert.deepEqual(one.map((s) => s.sandboxId), [made[2].sandboxId]);
    } finally {
        for (const s of made) await s.kill();
    }
});

test('secrets: create, list, getInfo, update, exists, destroy', async () => {
    const { Secret, SecretNotFoundError } = E2B;
    const s = await Secret.create('sdk_token', 'v1', { metadata: { a: 'b' } });
    assert.equal(s.name, 'sdk_token');
    const page = await Secret.list().nextItems();
    assert.ok(page.some((x) => x.name === 'sdk_token'));
    const u = await Secret.update('sdk_token', 'v2');
    assert.equal(u.version, 2);
    assert.equal((await Secret.getInfo('sdk_token')).version, 2);
    assert.equal(await Secret.exists('sdk_token'), true);
    assert.equal(await Secret.destroy('sdk_token'), true);
    assert.equal(await Secret.exists('sdk_token'), false);
    assert.equal(await Secret.destroy('sdk_token'), false);
    await assert.rejects(Secret.getInfo('sdk_token'), (e) => e instanceof SecretNotFoundError);
});

test('a create for another cluster is forwarded through the hub, and so is everything after it', async () => {
    const { Sandbox } = E2B;
    const sbx = await Sandbox.create('beta::demo', { envs: { WHERE: 'beta' } });
    assert.match(sbx.sandboxId, /^beta-[a-z0-9]{20}$/);
    const info = await Sandbox.getInfo(sbx.sandboxId);
    assert.equal(info.templateId, 'demo-1c0gi');
    const r = await sbx.commands.run('echo "$WHERE"');
    assert.equal(r.stdout, 'beta\n');
    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false);
});

test('errors surface as the SDK classes with our messages', async () => {
    const { Sandbox, SandboxError, AuthenticationError } = E2B;
    await assert.rejects(Sandbox.create('nosuch'), (e) => e instanceof SandboxError && /GET \/templates lists/.test(e.message));
    await assert.rejects(Sandbox.create('demo', { network: { egressProxy: { address: '127.0.0.1:1080' } } }),
        (e) => e instanceof SandboxError && /egressProxy\.address 127\.0\.0\.1 is a loopback address/.test(e.message));
    await assert.rejects(Sandbox.create('demo//ubuntu:22.04'),
        (e) => e instanceof SandboxError && /kube runtime/.test(e.message));
    await assert.rejects(Sandbox.create('demo', { apiKey: `agbx_${'0'.repeat(64)}` }),
        (e) => e instanceof AuthenticationError);
    const sbx = await Sandbox.create('demo');
    await assert.rejects(sbx.pause(), (e) => e instanceof SandboxError && /pause and resume are not supported/.test(e.message));
    // no Prometheus: the runtime's own usage, in E2B's shape
    const metrics = await sbx.getMetrics();
    assert.equal(metrics.length, 1);
    assert.ok(metrics[0].memUsed > 0 && metrics[0].cpuCount === 1 && metrics[0].timestamp instanceof Date, JSON.stringify(metrics));
    await sbx.kill();
});
