// An older e2b SDK (2.20.0, installed as `e2b-old`) against the agent's E2B
// API: it creates with POST /sandboxes (body with "secure": true and an
// always-present timeout) and connects with POST /sandboxes/{id}/connect and
// a required {"timeout": s} (reference e2b-protocol.md §1.3). Create,
// getInfo, commands, connect, kill; a recording proxy in front of the agent
// proves which routes the SDK used. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';

let stack;
let alpha;
let proxy;
let E2B;
const seen = []; // {method, path, body} of every control-plane request

// Forwards to the agent's e2b listener, recording each request.
function startProxy(target) {
    const t = new URL(target);
    const srv = http.createServer((req, res) => {
        const chunks = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', () => {
            const body = Buffer.concat(chunks);
            seen.push({ method: req.method, path: req.url.split('?')[0], body: body.toString() });
            const up = http.request({
                host: t.hostname, port: t.port, method: req.method, path: req.url,
                headers: { ...req.headers, host: t.host },
            }, (ur) => {
                res.writeHead(ur.statusCode, ur.headers);
                ur.pipe(res);
            });
            up.on('error', (e) => {
                res.writeHead(502, { 'Content-Type': 'application/json' });
                res.end(JSON.stringify({ code: 502, message: `proxy: ${e.message}` }));
            });
            up.end(body);
        });
    });
    return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve(srv)));
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 2 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm', 30000);
    proxy = await startProxy(alpha.e2b);
    process.env.E2B_API_URL = `http://127.0.0.1:${proxy.address().port}`;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b-old');
});

after(async () => {
    if (proxy) proxy.close();
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

test('e2b@2.20.0: create (POST /sandboxes), getInfo, commands.run, connect with timeout, kill', async () => {
    const { Sandbox, SandboxNotFoundError } = E2B;
    const sbx = await Sandbox.create('demo', { envs: { FOO: 'old-sdk' }, metadata: { suite: 'old' }, timeoutMs: 120000 });
    assert.match(sbx.sandboxId, /^alpha-[a-z0-9]{20}$/);
    const created = seen.find((r) => r.method === 'POST' && r.path === '/sandboxes');
    assert.ok(created, `the old SDK creates with POST /sandboxes; saw ${JSON.stringify(seen.map((r) => r.path))}`);
    const body = JSON.parse(created.body);
    assert.equal(body.secure, true, 'the old SDK sends secure: true');
    assert.equal(body.timeout, 120, 'and always a timeout (seconds)');
    assert.ok(!seen.some((r) => r.path === '/v2/sandboxes'), 'not the v2 route');

    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, 'demo-1c0gi');
    assert.deepEqual(info.metadata, { suite: 'old' });
    assert.equal(info.state, 'running');

    const r = await sbx.commands.run('echo "$FOO"');
    assert.equal(r.exitCode, 0, r.stderr + logs());
    assert.equal(r.stdout, 'old-sdk\n');

    const n = seen.length;
    const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 300000 });
    assert.equal(again.sandboxId, sbx.sandboxId);
    const conn = seen.slice(n).find((x) => x.method === 'POST' && x.path === `/sandboxes/${sbx.sandboxId}/connect`);
    assert.ok(conn, `connect is POST /sandboxes/{id}/connect; saw ${JSON.stringify(seen.slice(n).map((x) => x.path))}`);
    assert.equal(JSON.parse(conn.body).timeout, 300);
    assert.equal((await again.commands.run('echo hi')).stdout, 'hi\n', 'connect hands out a working token');
    const moved = await again.getInfo();
    const left = moved.endAt.getTime() - Date.now();
    assert.ok(left > 290000 && left <= 301000, `connect's timeout moved endAt (${left} ms left)`);

    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'kill of a gone sandbox is false');
    await assert.rejects(Sandbox.getInfo(sbx.sandboxId), (e) => e instanceof SandboxNotFoundError);
});
