// The local runtime behind the agent's native API, with real PostgreSQL, hub,
// agent and envd processes: warm-pool claims and replacement, FIFO of
// waiting claims, the idle timeout (and data-plane traffic resetting it),
// kill -9 + restart re-adoption without orphans, and isolation of a
// sandbox (pids, other sandboxes' files, the host's loopback ports, with
// and without internet). Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { waitFor } from './lib/harness.mjs';
import {
    startStack, manifestsDir, envManifest, native, claim, poolStatus, waitPool, envdProcesses,
    envdBin,
} from './lib/sandboxes.mjs';

process.env.E2B_API_KEY ??= 'unused';
const { Sandbox } = await import('e2b');

// Sandboxes of pool `gated-1c0gi` start only when the test hands out a token:
// the wrapper (run as the sandbox's program) waits for a file in its own
// home, which the test writes from the host, then execs envd. A sandbox sees
// only its program file of the host (read-only in /.agentbox), so the test
// puts envd into the sandbox's home with the token.
const gate = fs.mkdtempSync('/var/tmp/agentbox-gate-');
const wrapper = path.join(gate, 'envd-gated');

let stack;
let alpha;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(envdBin()), `build agentbox-envd first (${envdBin()})`);
    fs.writeFileSync(wrapper, `#!/bin/sh
# a sandbox program: wait for a token in our home, then become envd
while [ ! -e /home/user/.go ]; do sleep 0.02; done
rm -f /home/user/.go
exec /home/user/.envd "$@"
`, { mode: 0o755 });
    const manifests = manifestsDir([
        envManifest('demo', ['alpha'], { replicas: 3 }), // the isolation test claims 3 at once
        envManifest('brief', ['alpha'], { replicas: 2, idleTimeout: '2s' }),
    ]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 3, 'three warm sandboxes');
});

after(async () => {
    if (stack) await stack.stop();
    fs.rmSync(gate, { recursive: true, force: true });
});

const sdk = (sb, agent = alpha) => new Sandbox({
    sandboxId: sb.sandboxId, envdAccessToken: sb.envdAccessToken, envdVersion: '0.6.13',
    sandboxUrl: agent.data, apiKey: 'unused',
});

test('a claim takes a warm sandbox, armed; its replacement starts after its release', async () => {
    const envs = await native(alpha, stack.key, 'GET', '/v1/envs');
    assert.equal(envs.status, 200, envs.text);
    const demo = envs.json.items.find((e) => e.name === 'demo');
    assert.ok(demo, envs.text);
    assert.equal(demo.pools[0].name, 'demo-1c0gi');
    assert.equal(demo.pools[0].idle, 3);

    const t0 = Date.now();
    const sb = await claim(alpha, stack.key, { poolName: 'demo', timeout: 120 });
    assert.match(sb.sandboxId, /^alpha-[a-z0-9]{20}$/);
    assert.equal(sb.status, 'Running');
    assert.equal(sb.poolName, 'demo-1c0gi');
    assert.equal(sb.namespace, 'default');
    assert.match(sb.envdAccessToken, /^[0-9a-f]{48}$/);
    assert.ok(Date.now() - t0 < 5000, 'a warm claim does not wait for a sandbox to start');

    // armed: envd runs commands for the token holder right away
    const r = await sdk(sb).commands.run('echo armed');
    assert.equal(r.stdout, 'armed\n');
    // replicas is the pool's maximum concurrency (DESIGN §7): the claimed
    // one counts, so no replacement starts until it is released
    const s = await waitPool(alpha, 'demo-1c0gi', (x) => x.idle === 2 && x.running === 1,
        'two idle beside the claimed one');
    assert.equal(s.pending, 0);
    assert.equal(s.starting, 0, 'no sandbox beyond replicas');

    const got = await native(alpha, stack.key, 'GET', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.sandbox.envdAccessToken, undefined, 'the token is shown only on create');
    const list = await native(alpha, stack.key, 'GET', '/v1/sandboxes?poolName=demo');
    assert.ok(list.json.items.some((x) => x.sandboxId === sb.sandboxId), list.text);

    const del = await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(del.status, 202, del.text);
    assert.equal(del.json.status, 'Terminated');
    const gone = await native(alpha, stack.key, 'GET', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(gone.status, 404);
    assert.match(gone.json.error, /not found/);
    await waitPool(alpha, 'demo-1c0gi', (x) => x.idle === 3 && x.running === 0, 'a replacement after the release');
});

test('native create refuses bad input with messages naming the field', async () => {
    const cases = [
        [{}, 400, /poolName is required/],
        [{ poolName: 'demo', timeout: -1 }, 400, /timeout must be a positive number/],
        [{ poolName: 'beta::demo' }, 400, /names cluster 'beta'.*cluster 'alpha' only/],
        [{ poolName: 'demo//ubuntu:22.04' }, 400, /kube runtime/],
        [{ poolName: 'nope' }, 404, /env or pool 'nope' not found in namespace 'default'/],
    ];
    for (const [body, status, re] of cases) {
        const r = await native(alpha, stack.key, 'POST', '/v1/sandboxes', body);
        assert.equal(r.status, status, `${JSON.stringify(body)} → ${r.text}`);
        assert.match(r.json.error, re);
    }
    const unauth = await fetch(`${alpha.native}/v1/sandboxes`);
    assert.equal(unauth.status, 401);
});

test('waiting claims are served first in, first out', async () => {
    // a gated pool: its sandboxes start only with a token each
    // (replicas 3: the pool starts them at once; each waits for its token)
    const dir = manifestsDir([envManifest('gated', ['gamma'], { replicas: 3 })]);
    const gated = await stack.launch('gamma', { manifestsDir: dir, envdPath: wrapper });
    try {
        const order = [];
        const pending = [];
        for (let i = 0; i < 3; i++) {
            pending.push(claim(gated, stack.key, { poolName: 'gated', timeout: 60 }).then((sb) => {
                order.push(i);
                return sb;
            }));
            // the claim is queued before the next one is sent
            await waitPool(gated, 'gated-1c0gi', (s) => s.pending === i + 1, `claim ${i} queued`);
        }
        // one token to one waiting sandbox (not yet listening, no token yet)
        const handOut = () => {
            const root = path.join(gated.stateDir, 'sandboxes');
            const waiting = fs.readdirSync(root).filter((d) =>
                fs.existsSync(path.join(root, d, 'home')) &&
                !fs.existsSync(path.join(root, d, 'home', '.go')) &&
                !fs.existsSync(path.join(root, d, 'run', 'envd.sock')));
            if (waiting.length === 0) return false;
            fs.copyFileSync(envdBin(), path.join(root, waiting[0], 'home', '.envd'));
            fs.chmodSync(path.join(root, waiting[0], 'home', '.envd'), 0o755);
            fs.writeFileSync(path.join(root, waiting[0], 'home', '.go'), '');
            return true;
        };
        for (let i = 0; i < 3; i++) {
            await waitFor(handOut, { timeoutMs: 20000, what: 'a gated sandbox waiting for its token' });
            await waitFor(() => order.length === i + 1, { timeoutMs: 20000, what: `claim ${i} served` });
        }
        assert.deepEqual(order, [0, 1, 2]);
        await Promise.all(pending);
    } finally {
        await gated.proc.stop();
    }
});

test('the idle timeout ends a sandbox without traffic; data-plane traffic keeps one alive', async () => {
    await waitPool(alpha, 'brief-1c0gi', (s) => s.idle >= 1, 'a warm brief sandbox');
    const quiet = await claim(alpha, stack.key, { poolName: 'brief', timeout: 300 });
    const busy = await claim(alpha, stack.key, { poolName: 'brief', timeout: 300 });
    const t0 = Date.now();
    let stop = false;
    const keepBusy = (async () => {
        while (!stop) {
            // only traffic envd authenticates counts as activity (issue 13)
            const r = await fetch(`${alpha.data}/files?path=/home/user/.keep`, {
                headers: {
                    'E2b-Sandbox-Id': busy.sandboxId, 'E2b-Sandbox-Port': '49983',
                    'X-Access-Token': busy.envdAccessToken,
                },
            });
            await r.arrayBuffer();
            await new Promise((res) => setTimeout(res, 250));
        }
    })();
    try {
        await waitFor(async () => (await native(alpha, stack.key, 'GET', `/v1/sandboxes/${quiet.sandboxId}`)).status === 404,
            { timeoutMs: 10000, what: 'the quiet sandbox to be reclaimed' });
        const took = Date.now() - t0;
        assert.ok(took >= 1500, `reclaimed after ${took} ms, before its 2 s idle timeout`);
        // well past the idle timeout, the busy one still runs
        await waitFor(() => Date.now() - t0 > 4000, { timeoutMs: 6000, what: '4 s to pass' });
        const b = await native(alpha, stack.key, 'GET', `/v1/sandboxes/${busy.sandboxId}`);
        assert.equal(b.status, 200, 'traffic through the data plane resets the idle timeout');
        const dp = await fetch(`${alpha.data}/sandboxes/${quiet.sandboxId}/49983/health`);
        assert.equal(dp.status, 502);
        assert.deepEqual(await dp.json(), { error: 'sandbox not found' });
    } finally {
        stop = true;
        await keepBusy;
    }
});

test('kill -9 of the agent, then a restart re-adopts its sandboxes and leaves no orphans', async () => {
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 3 && s.starting === 0, 'demo settled');
    const sb = await claim(alpha, stack.key, { poolName: 'demo', timeout: 300 });
    await sdk(sb).files.write('/home/user/kept.txt', 'survives the agent');
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2 && s.running === 1 && s.starting === 0, 'demo settled with a claim');
    const before = envdProcesses(alpha.stateDir).map((p) => p.pid).sort();
    assert.ok(before.length >= 3, `envd processes before: ${before}`);

    process.kill(alpha.proc.pid, 'SIGKILL'); // the agent only, not its sandboxes
    await alpha.proc.exited;
    const again = await stack.launch('alpha', { stateDir: alpha.stateDir });
    alpha = again;

    const s = await waitPool(alpha, 'demo-1c0gi', (x) => x.running === 1 && x.idle === 2, 'demo re-adopted');
    assert.equal(s.starting, 0, 're-adopted idle sandboxes are not replaced');
    const after = envdProcesses(alpha.stateDir).map((p) => p.pid).sort();
    // every envd process of this state directory is one the new agent knows
    const known = fs.readdirSync(path.join(alpha.stateDir, 'sandboxes'));
    for (const p of envdProcesses(alpha.stateDir)) assert.ok(known.includes(p.dir), `orphan envd ${p.pid}`);
    for (const pid of before) assert.ok(after.includes(pid), `envd ${pid} was restarted or lost`);

    const got = await native(alpha, stack.key, 'GET', `/v1/sandboxes/${sb.sandboxId}`);
    assert.equal(got.status, 200, got.text);
    assert.equal(await sdk(sb).files.read('/home/user/kept.txt'), 'survives the agent');
    await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
});

// Runs a shell command in the sandbox; resolves {exitCode, stdout, stderr}.
async function sh(sb, cmd) {
    try {
        return await sdk(sb).commands.run(cmd, { timeoutMs: 20000 });
    } catch (e) {
        if (e.exitCode !== undefined) return { exitCode: e.exitCode, stdout: e.stdout, stderr: e.stderr };
        throw e;
    }
}

test('isolation: host pids, other sandboxes and the host loopback are out of reach', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'demo', timeout: 120 });
    const b = await claim(alpha, stack.key, { poolName: 'demo', timeout: 120 });
    const c = await claim(alpha, stack.key, { poolName: 'demo', timeout: 120, allowInternetAccess: true });
    let accepted = 0;
    const server = net.createServer((sock) => {
        accepted++;
        sock.destroy();
    });
    await new Promise((res) => server.listen(0, '127.0.0.1', res));
    const port = server.address().port;
    try {
        // pids: the namespace shows its own few processes, never the agent
        const ps = await sh(a, 'ls /proc | grep -E "^[0-9]+$"');
        const pids = ps.stdout.trim().split('\n').map(Number);
        assert.ok(pids.length < 10, `a sandbox sees ${pids.length} pids`);
        assert.ok(!pids.includes(alpha.proc.pid) || alpha.proc.pid < 10, 'the agent pid is not visible');
        const host = await sh(a, `test -e /proc/${process.pid} && echo visible || echo hidden`);
        assert.ok(process.pid < 10 || host.stdout.trim() === 'hidden', 'the test runner pid is visible');

        // files: what a writes is not in b's home, nor reachable via the state directory
        await sh(a, 'echo secret-of-a > /home/user/secret.txt');
        const own = await sh(b, 'cat /home/user/secret.txt');
        assert.notEqual(own.exitCode, 0);
        const via = await sh(b, `cat ${alpha.stateDir}/sandboxes/*/home/secret.txt`);
        assert.notEqual(via.exitCode, 0, 'another sandbox directory is readable through the host path');
        assert.doesNotMatch(via.stdout, /secret-of-a/);

        // network: the host's loopback port cannot be reached, without or with internet
        const probe = (host) => `timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${port}' && echo connected || echo refused`;
        const noNet = await sh(a, probe('127.0.0.1'));
        assert.match(noNet.stdout, /refused/);
        const withNet = await sh(c, probe('127.0.0.1'));
        assert.match(withNet.stdout, /refused/);
        // slirp's host alias is just an address now: the egress gateway takes
        // the handshake (so bash may say "connected") and resets it unopened
        await sh(c, probe('10.0.2.2'));
        assert.equal(accepted, 0, 'the host server saw a connection from a sandbox');
    } finally {
        server.close();
        for (const s of [a, b, c]) await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${s.sandboxId}`);
    }
});

// pid 1 of a sandbox is the program itself (forked by the envd zygote, which
// holds nothing of the agent's; or exec'd, replacing a clone of the agent),
// and the sandbox's / is built from read-only system directories: the
// agent's environment, its state directory and the host's credentials stay
// out of reach.
test('a sandbox cannot read the agent\'s secrets or the host\'s files', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'demo', timeout: 60 });
    try {
        const argv = await sh(a, 'cat /proc/1/cmdline /proc/1/environ | tr "\\0" " "');
        assert.doesNotMatch(argv.stdout, /abxc_[0-9a-f]{64}/, 'the join token is readable');
        const shadow = await sh(a, 'cat /etc/shadow; echo end');
        assert.doesNotMatch(shadow.stdout, /root:/, "the host's /etc/shadow is readable");
        const state = await sh(a, `ls ${alpha.stateDir} 2>&1; ls /work /root 2>&1; echo end`);
        assert.doesNotMatch(state.stdout, /sandboxes/, "the agent's state directory is visible");
    } finally {
        await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${a.sandboxId}`);
    }
});
