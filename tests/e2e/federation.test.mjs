// The real e2b SDK (2.51.0), unchanged, against two addresses of one
// federation: agent alpha (its :8090 and :8091) and the hub's front doors
// (E2B_API_URL=$HUB/e2b, E2B_SANDBOX_URL=$HUB/data). Through each: create
// `beta::demo` (a sandbox alpha does not own), commands.run, a PTY session,
// a 10 MB file round trip, setTimeout, kill. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { waitFor } from '../integration/lib/harness.mjs';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';

let stack;
let E2B;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 2 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle === 2, 'beta warm', 30000);
    E2B = await import('e2b');
});

after(async () => {
    if (stack) await stack.stop();
});

const ways = () => ({
    'agent alpha': { apiUrl: stack.agents.alpha.e2b, sandboxUrl: stack.agents.alpha.data },
    'the hub': { apiUrl: `${stack.hub.base}/e2b`, sandboxUrl: `${stack.hub.base}/data` },
});

for (const way of ['agent alpha', 'the hub']) {
    test(`through ${way}: beta::demo with commands, a PTY, 10 MB of files, setTimeout, kill`, async () => {
        const { Sandbox, SandboxNotFoundError } = E2B;
        const opts = { ...ways()[way], apiKey: stack.key };
        await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle >= 1, 'beta has idle', 30000);
        const sbx = await Sandbox.create('beta::demo', { ...opts, envs: { WHERE: 'beta' }, timeoutMs: 120000 });
        assert.match(sbx.sandboxId, /^beta-[a-z0-9]{20}$/);

        const r = await sbx.commands.run('echo "$WHERE"');
        assert.equal(r.exitCode, 0, r.stderr);
        assert.equal(r.stdout, 'beta\n');

        let out = '';
        const dec = new TextDecoder();
        const pty = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d); } });
        await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('echo $((6*7))x\n'));
        await waitFor(() => out.includes('42x'), { timeoutMs: 10000, what: 'pty output' });
        await sbx.pty.kill(pty.pid);

        const big = randomBytes(10 * 1024 * 1024);
        await sbx.files.write('/home/user/big.bin', big.buffer.slice(big.byteOffset, big.byteOffset + big.length));
        const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' });
        assert.equal(back.length, big.length);
        assert.ok(Buffer.from(back).equals(big), '10 MB round trip is byte-identical');

        await sbx.setTimeout(600000);
        const info = await Sandbox.getInfo(sbx.sandboxId, opts);
        const left = info.endAt.getTime() - Date.now();
        assert.ok(left > 590000 && left <= 601000, `setTimeout moved endAt (${left} ms left)`);

        // both list the caller's sandboxes on every cluster (issue 14 item 9)
        const listed = await Sandbox.list(opts).nextItems();
        assert.ok(listed.some((s) => s.sandboxId === sbx.sandboxId), `${way} lists beta's sandbox`);

        assert.equal(await Sandbox.kill(sbx.sandboxId, opts), true);
        assert.equal(await Sandbox.kill(sbx.sandboxId, opts), false);
        await assert.rejects(Sandbox.getInfo(sbx.sandboxId, opts), (e) => e instanceof SandboxNotFoundError);
    });
}

test('through the hub: a bare create is placed by the hub and works end to end', async () => {
    const { Sandbox } = E2B;
    const opts = { ...ways()['the hub'], apiKey: stack.key };
    await waitPool(stack.agents.alpha, 'demo-1c0gi', (s) => s.idle >= 1, 'alpha has idle', 30000);
    const sbx = await Sandbox.create('demo', opts);
    assert.match(sbx.sandboxId, /^(alpha|beta)-/);
    assert.equal((await sbx.commands.run('echo hi')).stdout, 'hi\n');
    await sbx.kill();
});
