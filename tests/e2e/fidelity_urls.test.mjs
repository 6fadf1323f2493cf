// Issue 14 item 6, the URLs the SDK builds from the `domain` the API returns:
// an agent started with --data-domain answers it, so the unmodified SDK
// (2.51.0, without E2B_SANDBOX_URL) reaches envd as
// https://49983-<id>.<domain>, getHost(port) names a server inside the
// sandbox, and the signed uploadUrl / downloadUrl carry the sandbox in their
// host. The host form needs TLS and a wildcard name: an HTTPS front on
// loopback (lib/tlsfront.mjs) stands in for the ingress, the domain carries
// its port. The hub started with --data-domain answers its own domain through
// /e2b and relays the host form from --data-listen to the owning cluster (a
// second front, for the hub's domain). Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { startTlsFront } from '../integration/lib/tlsfront.mjs';
import { waitFor, freePort } from '../integration/lib/harness.mjs';

let stack;
let alpha;
let front;
let hubFront;
let hubData;
let E2B;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    front = await startTlsFront({ domain: 'agentbox.test', api: () => alpha.e2b, data: () => alpha.data });
    hubData = `http://127.0.0.1:${await freePort()}`;
    hubFront = await startTlsFront({ domain: 'hub.test', api: () => `${stack.hub.base}/e2b`, data: hubData });
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 2 })]);
    stack = await startStack({
        clusters: ['alpha'], manifests, agentArgs: ['--data-domain', front.domain],
        hubArgs: ['--data-domain', hubFront.domain, '--data-listen', new URL(hubData).host],
    });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm', 60000);
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0'; // the front's self-signed certificate
    delete process.env.E2B_SANDBOX_URL;
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (front) await front.close();
    if (hubFront) await hubFront.close();
    if (stack) await stack.stop();
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;
const hubLogs = () => `\nhub log:\n${stack.hub.proc.logs().split('\n').slice(-20).join('\n')}${logs()}`;

test('domain: envd, getHost(port) and signed upload/download URLs through the host form', async () => {
    const { Sandbox } = E2B;
    const sbx = await Sandbox.create('demo');
    try {
        const info = await Sandbox.getInfo(sbx.sandboxId);
        assert.equal(info.sandboxDomain, front.domain, 'GET /sandboxes/{id} returns the configured data domain');
        assert.equal((await sbx.commands.run('echo via-host')).stdout, 'via-host\n', `envd through https://49983-<id>.<domain>${logs()}`);

        assert.equal(sbx.getHost(3000), `3000-${sbx.sandboxId}.${front.domain}`);
        await sbx.files.write('/home/user/www/index.html', 'served from inside');
        await sbx.commands.run('cd /home/user/www && python3 -m http.server 3000 --bind 127.0.0.1', { background: true });
        const page = await waitFor(async () => {
            const r = await fetch(`https://${sbx.getHost(3000)}/index.html`).catch(() => null);
            return r && r.status === 200 ? r.text() : null;
        }, { timeoutMs: 20000, what: 'the server inside to answer through getHost(3000)' });
        assert.equal(page, 'served from inside');

        const up = await sbx.uploadUrl('/home/user/up.txt');
        assert.ok(new URL(up).host.startsWith(`49983-${sbx.sandboxId}.`), up);
        const form = new FormData();
        form.append('file', new Blob(['uploaded by url']), 'up.txt');
        const u = await fetch(up, { method: 'POST', body: form });
        assert.equal(u.status, 200, await u.text());
        const down = await sbx.downloadUrl('/home/user/up.txt');
        const d = await fetch(down);
        assert.equal(d.status, 200);
        assert.equal(await d.text(), 'uploaded by url');
        assert.equal(await sbx.files.read('/home/user/up.txt'), 'uploaded by url');
    } finally {
        await sbx.kill();
    }
});

test('through the hub: its data domain, envd, getHost(port) and signed URLs via --data-listen', async () => {
    const { Sandbox } = E2B;
    const opts = { apiUrl: `${stack.hub.base}/e2b`, apiKey: stack.key };
    const sbx = await Sandbox.create('demo', opts);
    try {
        assert.ok(sbx.sandboxId.startsWith('alpha-'), sbx.sandboxId);
        const info = await Sandbox.getInfo(sbx.sandboxId, opts);
        assert.equal(info.sandboxDomain, hubFront.domain, 'the hub answers its own data domain, not the cluster\'s');
        assert.equal(sbx.getHost(3000), `3000-${sbx.sandboxId}.${hubFront.domain}`);
        // envd through https://49983-<id>.<hub domain>: the hub's data listener, then the tunnel
        assert.equal((await sbx.commands.run('echo via-hub')).stdout, 'via-hub\n', `envd through the hub${hubLogs()}`);

        await sbx.files.write('/home/user/www/index.html', 'served through the hub');
        await sbx.commands.run('cd /home/user/www && python3 -m http.server 3000 --bind 127.0.0.1', { background: true });
        const page = await waitFor(async () => {
            const r = await fetch(`https://${sbx.getHost(3000)}/index.html`).catch(() => null);
            return r && r.status === 200 ? r.text() : null;
        }, { timeoutMs: 20000, what: 'the server inside to answer through the hub at getHost(3000)' });
        assert.equal(page, 'served through the hub');

        const up = await sbx.uploadUrl('/home/user/hub-up.txt');
        assert.ok(new URL(up).host.startsWith(`49983-${sbx.sandboxId}.hub.test`), up);
        const form = new FormData();
        form.append('file', new Blob(['uploaded through the hub']), 'hub-up.txt');
        const u = await fetch(up, { method: 'POST', body: form });
        assert.equal(u.status, 200, await u.text());
        const d = await fetch(await sbx.downloadUrl('/home/user/hub-up.txt'));
        assert.equal(d.status, 200);
        assert.equal(await d.text(), 'uploaded through the hub');

        // the host names the sandbox: a forged id under the hub's domain is refused, not relayed elsewhere
        const bad = await fetch(`https://49983-nosuchcluster-0000000000000000.${hubFront.domain}/health`);
        assert.notEqual(bad.status, 200);
    } finally {
        await sbx.kill();
    }
});
