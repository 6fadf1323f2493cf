// The real e2b SDK (2.51.0) through the agent's data plane: a sandbox is
// claimed with the native API, and the SDK's Sandbox object is built from
// its id and envdAccessToken the way Sandbox.connect builds it, with
// E2B_SANDBOX_URL (sandboxUrl) pointing at the data plane. Commands (also
// streamed), 10 MB files both ways, a sandbox of another cluster through
// the hub, and isRunning() after the sandbox is gone.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import {
    startStack, manifestsDir, envManifest, native, claim, waitPool,
} from '../integration/lib/sandboxes.mjs';

process.env.E2B_API_KEY ??= 'unused-by-the-data-plane';
const { Sandbox, CommandExitError } = await import('e2b');

let stack;
let alpha;
let beta;
let sbA;
let sbB;

const connect = (sb, agent) => new Sandbox({
    sandboxId: sb.sandboxId,
    envdAccessToken: sb.envdAccessToken,
    envdVersion: '0.6.13',
    sandboxUrl: agent.data,
});

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 2 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    ({ alpha, beta } = stack.agents);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle >= 1, 'alpha warm');
    await waitPool(beta, 'demo-1c0gi', (s) => s.idle >= 1, 'beta warm');
    sbA = await claim(alpha, stack.key, { poolName: 'demo', timeout: 300 });
    sbB = await claim(beta, stack.key, { poolName: 'demo', timeout: 300 });
});

after(async () => {
    if (stack) await stack.stop();
});

test('the SDK addresses envd through the data plane', () => {
    const s = connect(sbA, alpha);
    assert.equal(s.envdApiUrl, alpha.data);
});

test('commands.run: output, exit codes, streamed stdout', async () => {
    const s = connect(sbA, alpha);
    const r = await s.commands.run('echo hello; echo warn >&2');
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, 'hello\n');
    assert.equal(r.stderr, 'warn\n');
    await assert.rejects(s.commands.run('exit 3'), (e) => e instanceof CommandExitError && e.exitCode === 3);

    // lines arrive while the command still runs (the Connect stream is not buffered)
    const seen = [];
    const t0 = Date.now();
    const done = await s.commands.run('echo one; sleep 1; echo two', {
        onStdout: (line) => seen.push([line.trim(), Date.now() - t0]),
    });
    assert.equal(done.exitCode, 0);
    assert.deepEqual(seen.map((x) => x[0]), ['one', 'two']);
    assert.ok(seen[1][1] - seen[0][1] >= 800, `lines 1 s apart arrived ${seen[1][1] - seen[0][1]} ms apart`);
});

test('files: 10 MB written and read back intact', async () => {
    const s = connect(sbA, alpha);
    const data = randomBytes(10 * 1024 * 1024);
    const info = await s.files.write('/home/user/big.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.length));
    assert.equal(info.path, '/home/user/big.bin');
    const back = Buffer.from(await s.files.read('/home/user/big.bin', { format: 'bytes' }));
    assert.equal(back.length, data.length);
    assert.equal(createHash('sha256').update(back).digest('hex'), createHash('sha256').update(data).digest('hex'));
    const r = await s.commands.run('stat -c %s /home/user/big.bin');
    assert.equal(r.stdout.trim(), String(data.length));
});

test('a sandbox of beta through alpha\'s data plane (relayed by the hub)', async () => {
    const s = connect(sbB, alpha);
    const r = await s.commands.run('hostname');
    assert.equal(r.exitCode, 0);
    await s.files.write('/home/user/x.txt', 'from alpha');
    assert.equal(await connect(sbB, beta).files.read('/home/user/x.txt'), 'from alpha');
    const data = randomBytes(2 * 1024 * 1024);
    await s.files.write('/home/user/y.bin', data.buffer.slice(data.byteOffset, data.byteOffset + data.length));
    const back = Buffer.from(await s.files.read('/home/user/y.bin', { format: 'bytes' }));
    assert.ok(back.equals(data), 'relayed bytes differ');
});

test('isRunning() is true while claimed and false once deleted (502 sandbox not found)', async () => {
    const sb = await claim(alpha, stack.key, { poolName: 'demo', timeout: 120 });
    const s = connect(sb, alpha);
    assert.equal(await s.isRunning(), true);
    const del = await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(del.status, 202);
    assert.equal(await s.isRunning(), false);
});

test('a server started inside a sandbox answers on its own loopback and through the data plane', async () => {
    const s = connect(sbA, alpha);
    await s.files.write('/home/user/site/index.html', 'served from inside\n');
    const server = await s.commands.run('cd /home/user/site && exec python3 -m http.server 3000 --bind 127.0.0.1', {
        background: true,
    });
    try {
        // the sandbox's own loopback
        let inside;
        for (let i = 0; i < 100; i++) {
            inside = await s.commands.run('python3 -c "import urllib.request as u; print(u.urlopen(\'http://127.0.0.1:3000/\').read().decode())"')
                .catch((e) => e);
            if (inside.exitCode === 0) break;
            await new Promise((r) => setTimeout(r, 100));
        }
        assert.equal(inside.exitCode, 0, String(inside.stderr || inside));
        assert.match(inside.stdout, /served from inside/);
        // the data plane, by header and by path
        const byHeader = await fetch(`${alpha.data}/index.html`, {
            headers: { 'E2b-Sandbox-Id': sbA.sandboxId, 'E2b-Sandbox-Port': '3000' },
        });
        assert.equal(byHeader.status, 200);
        assert.equal(await byHeader.text(), 'served from inside\n');
        const byPath = await fetch(`${alpha.data}/sandboxes/${sbA.sandboxId}/3000/index.html`);
        assert.equal(byPath.status, 200);
        assert.equal(await byPath.text(), 'served from inside\n');
        // and from another cluster's data plane, through the hub
        const viaBeta = await fetch(`${beta.data}/index.html`, {
            headers: { 'E2b-Sandbox-Id': sbA.sandboxId, 'E2b-Sandbox-Port': '3000' },
        });
        assert.equal(viaBeta.status, 200);
        assert.equal(await viaBeta.text(), 'served from inside\n');
    } finally {
        await server.kill();
    }
});
