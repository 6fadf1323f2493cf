// The egress gateway on the kube runtime (issue 15): an Env with
// overrides.gateway.enabled gets, in every Pod, the egress-init init
// container (the nftables redirect, the only container with NET_ADMIN) and
// the egress-proxy sidecar (agentbox-egress, NET_RAW only), against the
// in-test API server whose simulated kubelet gives each Pod its own network
// namespace and runs the init container, the sidecar and envd in it as real
// processes with their securityContext's capabilities. From inside real SDK
// sandboxes, what tests/e2e/egress.test.mjs proves on the local runtime:
// internet off → refused; allowOut a test server → reachable, anything else
// refused; the always-denied tier (metadata address, the node, the Pod's own
// address, loopback gateway ports) refused at once; UDP dropped;
// allow-private-networks; network.egressProxy through a SOCKS5 stand-in; the
// sandbox cannot flush the rules or leave them; PUT network on a live
// sandbox; the seed's 400 on an Env without the gateway. Then usage and logs
// on kube: the E2B /logs and /metrics and the e2b CLI's `sandbox logs` and
// `sandbox metrics`.
//
// The "world" is addresses on a veth pair whose both ends stay in the host's
// namespace (nothing is forwarded; the Pods reach them as the node's own):
// 198.19.N.2 stands in for a public server (the benchmarking range, used by
// no other test file) with an echo server, a UDP sink and the DNS server the
// agent's --egress-resolver names; 172.30.N.2 for a private network. A
// wildcard listener stands in for the node's services. Nothing leaves this
// machine. Needs root.
import { test, before, after, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { startKubeApi } from '../integration/lib/kubeapi.mjs';
import { buildDir, repoRoot, run, tempDir, waitFor } from '../integration/lib/harness.mjs';
import { startStack, envdBin } from '../integration/lib/sandboxes.mjs';

const IDLE = 'ghcr.io/scitix/agent-sandbox-idle:0.0.10';
const RUN = 'ghcr.io/scitix/agent-sandbox-envd:0.9.0-2';
const tag = `${process.pid % 100000}`;
const N = 1 + (process.pid % 250);
const PUBLIC = `198.19.${N}.2`;
const PRIVATE = `172.30.${N}.2`;
const WORLD_IF = `abxk${tag}`;
const KUBECTL = process.env.AGENTBOX_KUBECTL || '/usr/bin/kubectl';
const CLI = path.join(repoRoot(), 'tests', 'node_modules', '@e2b', 'cli', 'dist', 'index.js');

const TEMPLATE = {
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxTemplate', metadata: { name: 'eg-envd' },
    spec: {
        idleImage: IDLE,
        runtimes: [{ name: 'envd', port: 49983, protocol: 'TCP', readinessProbe: { httpGet: { port: 49983, path: '/health' } } }],
        template: { spec: { automountServiceAccountToken: false, containers: [{ name: 'sandbox', image: RUN, ports: [{ name: 'envd', containerPort: 49983 }] }] } },
    },
};
const env = (name, gateway) => ({
    apiVersion: 'agents.navix.sh/v1alpha1', kind: 'SandboxEnv', metadata: { name, namespace: 'default' },
    spec: {
        templateRef: { name: 'eg-envd' }, mode: 'WarmPool',
        ...(gateway ? { overrides: { gateway: { enabled: true } } } : {}),
        clusters: [{ clusterID: 'alpha', members: [{ name: `${name}-1c1gi`, config: { inlineResources: { requests: { cpu: '1', memory: '1Gi' }, limits: { cpu: '1', memory: '1Gi' } } }, spec: { replicas: gateway ? 2 : 1, defaultStartupTimeout: '30s' } }] }],
    },
});

let api, stack, alpha, E2B, kc, kdir;
const world = { conns: [], udp: [], dns: [], node: [] };
const closers = [];

async function sh(cmd, args) {
    const r = await run(cmd, args);
    assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
}
async function post(p, body) {
    const r = await fetch(`${api.url}${p}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    assert.ok(r.status === 201, `${p}: ${r.status} ${await r.text()}`);
}
async function listPods(pool) {
    const r = await fetch(`${api.url}/api/v1/namespaces/default/pods?labelSelector=${encodeURIComponent(`agentbox.navix.sh/sandbox-pool=${pool}`)}`);
    return (await r.json()).items.filter((p) => !p.metadata.deletionTimestamp);
}
const ready = (p) => (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
const phaseOf = (p) => p.metadata.labels?.['agentbox.navix.sh/sandbox-phase'];
const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

before(async () => {
    assert.equal(process.getuid(), 0, 'Pod network namespaces need root');
    // the world: both ends of the veth in the host's namespace, so nothing is forwarded
    closers.push(() => run('ip', ['link', 'del', WORLD_IF]));
    await sh('ip', ['link', 'add', WORLD_IF, 'type', 'veth', 'peer', 'name', `${WORLD_IF}p`]);
    await sh('ip', ['addr', 'add', `${PUBLIC}/32`, 'dev', WORLD_IF]);
    await sh('ip', ['addr', 'add', `${PRIVATE}/32`, 'dev', WORLD_IF]);
    await sh('ip', ['link', 'set', WORLD_IF, 'up']);
    await sh('ip', ['link', 'set', `${WORLD_IF}p`, 'up']);
    for (const host of [PUBLIC, PRIVATE]) {
        const srv = net.createServer((s) => {
            world.conns.push(host);
            s.on('data', (d) => s.write(d));
            s.on('end', () => s.end());
            s.on('error', () => {});
        });
        await new Promise((r) => srv.listen(8080, host, r));
        closers.push(() => srv.close());
    }
    // a SOCKS5 proxy (no login) for network.egressProxy: logs each CONNECT
    world.socks = [];
    // half-open: the gateway passes the sandbox's FIN on, and the answer still comes back
    const socks = net.createServer({ allowHalfOpen: true }, (c) => {
        c.once('data', (hello) => {
            if (hello[0] !== 5) return void c.destroy();
            c.write(Buffer.from([5, 0]));
            c.once('data', (req) => {
                if (req[0] !== 5 || req[1] !== 1 || req[3] !== 1) return void c.destroy();
                const host = [...req.subarray(4, 8)].join('.'), port = req.readUInt16BE(8);
                world.socks.push(`${host}:${port}`);
                c.pause(); // nothing may be lost while the upstream connects
                const up = net.connect(port, host, () => {
                    c.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
                    c.pipe(up);
                    up.pipe(c);
                });
                up.on('error', () => c.destroy());
            });
        });
        c.on('error', () => {});
    });
    await new Promise((r) => socks.listen(1080, PUBLIC, r));
    closers.push(() => socks.close());
    // the node's services: any connection from a Pod to its node address lands here
    const node = net.createServer((s) => { world.node.push(s.remoteAddress); s.end('node'); });
    await new Promise((r) => node.listen(0, '0.0.0.0', r));
    world.nodePort = node.address().port;
    closers.push(() => node.close());
    const udp = dgram.createSocket('udp4');
    udp.on('message', (m) => world.udp.push(m.toString()));
    await new Promise((r) => udp.bind(9999, PUBLIC, r));
    closers.push(() => udp.close());
    // DNS: pub.test → PUBLIC, anything else NXDOMAIN
    const dns = dgram.createSocket('udp4');
    dns.on('message', (m, from) => {
        let o = 12;
        const name = [];
        while (m[o]) { name.push(m.subarray(o + 1, o + 1 + m[o]).toString()); o += m[o] + 1; }
        const qname = name.join('.').toLowerCase(), qtype = m.readUInt16BE(o + 1);
        world.dns.push(qname);
        const ok = qname === 'pub.test' && qtype === 1;
        const hdr = Buffer.from([m[0], m[1], 0x81, ok ? 0x80 : 0x83, 0, 1, 0, ok ? 1 : 0, 0, 0, 0, 0]);
        const ans = ok ? Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...PUBLIC.split('.').map(Number)]) : Buffer.alloc(0);
        dns.send(Buffer.concat([hdr, m.subarray(12, o + 5), ans]), from.port, from.address);
    });
    await new Promise((r) => dns.bind(53, PUBLIC, r));
    closers.push(() => dns.close());

    api = await startKubeApi({ kubelet: { envd: envdBin(), netns: true, bins: { 'agentbox-egress': path.join(buildDir(), 'agentbox-egress') } }, bookmarkMs: 500 });
    await post('/apis/agents.navix.sh/v1alpha1/sandboxtemplates', TEMPLATE);
    await post('/apis/agents.navix.sh/v1alpha1/namespaces/default/sandboxenvs', env('eg', true));
    await post('/apis/agents.navix.sh/v1alpha1/namespaces/default/sandboxenvs', env('plain', false));
    kdir = tempDir('agentbox-kube-egress-');
    kc = api.kubeconfig(kdir);
    stack = await startStack({ clusters: ['alpha'], agentArgs: ['--runtime', 'kube', '--kubeconfig', kc, '--namespace', 'default', '--egress-resolver', `${PUBLIC}:53`] });
    alpha = stack.agents.alpha;
    await waitFor(async () => {
        const ps = await listPods('eg-1c1gi');
        return ps.length === 2 && ps.every((p) => ready(p) && phaseOf(p) === 'idle');
    }, { timeoutMs: 60000, what: 'two idle Ready Pods with the egress sidecar' }).catch(async (e) => {
        e.message += `\npods: ${JSON.stringify((await listPods('eg-1c1gi')).map((p) => p.status), null, 1).slice(0, 3000)}${logs()}`;
        throw e;
    });
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (stack) await stack.stop();
    if (api) await api.close();
    for (const fn of closers.reverse()) await Promise.resolve().then(fn).catch(() => {});
});

const made = [];
// a failed test's sandboxes go too: the next test needs the pool's Pods
afterEach(async () => {
    while (made.length) await made.pop().kill().catch(() => {});
});
async function create(envName, opts = {}) {
    const s = await E2B.Sandbox.create(envName, { timeoutMs: 300000, ...opts });
    made.push(s);
    return s;
}

// In-sandbox client: each target {host, port, send?} → {ok, text, error, ms}.
const CLIENT = `
const net = require('net');
const targets = JSON.parse(process.argv[2]);
const one = (t) => new Promise((res) => {
    const t0 = Date.now();
    const s = net.connect({ host: t.host, port: t.port });
    const chunks = [];
    let done = false;
    const end = (r) => { if (!done) { done = true; res({ ...r, ms: Date.now() - t0 }); } };
    s.setTimeout(5000, () => { s.destroy(); end({ error: 'TIMEOUT' }); });
    s.on('connect', () => { if (t.send !== undefined) s.end(t.send); });
    s.on('data', (d) => chunks.push(d));
    s.on('error', (e) => end({ error: e.code }));
    s.on('close', () => { const b = Buffer.concat(chunks); end({ ok: b.length > 0, text: b.toString().slice(0, 200) }); });
});
Promise.all(targets.map(one)).then((r) => console.log(JSON.stringify(r)));
`;
async function connectFrom(s, targets) {
    await s.files.write('/tmp/kegress-client.js', CLIENT);
    const r = await s.commands.run(`node /tmp/kegress-client.js '${JSON.stringify(targets)}'`, { timeoutMs: 60000 });
    return JSON.parse(r.stdout);
}
async function podOf(id) {
    const ps = await listPods('eg-1c1gi');
    const p = ps.find((x) => x.metadata.annotations?.['agentbox.navix.sh/sandbox-id'] === id || x.metadata.labels?.['agentbox.navix.sh/sandbox-id'] === id);
    assert.ok(p, `the Pod of ${id}`);
    return p;
}

test('an Env with the gateway: the sidecar and init container in its Pods, NET_ADMIN only in the init container', async () => {
    const [p] = await listPods('eg-1c1gi');
    const names = (p.spec.initContainers ?? []).map((c) => c.name);
    assert.deepEqual(names.slice(0, 2), ['egress-init', 'egress-proxy']);
    const [init, side] = p.spec.initContainers;
    assert.deepEqual(init.securityContext.capabilities, { drop: ['ALL'], add: ['NET_ADMIN'] });
    assert.deepEqual(side.securityContext.capabilities, { drop: ['ALL'], add: ['NET_RAW'] });
    assert.equal(side.restartPolicy, 'Always');
    const drop = p.spec.containers[0].securityContext.capabilities.drop;
    assert.ok(drop.includes('NET_ADMIN') && drop.includes('NET_RAW'), JSON.stringify(drop));
    assert.ok(!JSON.stringify(p.spec.containers[0]).includes('AGENTBOX_EGRESS_TOKEN'), 'the token is the sidecar\'s only');
    // the init container ran to completion, the sidecar runs
    const st = p.status.initContainerStatuses;
    assert.equal(st[0].state.terminated?.exitCode, 0, JSON.stringify(st));
    assert.ok(st[1].state.running, JSON.stringify(st));
    // an Env without it: no sidecar
    const [q] = await listPods('plain-1c1gi');
    assert.ok(!(q.spec.initContainers ?? []).some((c) => c.name === 'egress-proxy'));
});

test('internet off: nothing leaves, DNS fails fast', async () => {
    const s = await create('eg', { allowInternetAccess: false });
    const before = world.conns.length;
    const r = await connectFrom(s, [{ host: PUBLIC, port: 8080, send: 'ping' }]);
    assert.ok(!r[0].ok, JSON.stringify(r));
    assert.notEqual(r[0].error, 'TIMEOUT', 'refused at once');
    const d = await s.commands.run(`node -e "require('dns').resolve4('pub.test', (e, a) => console.log(e ? e.code : a.join()))"`, { timeoutMs: 30000 });
    assert.doesNotMatch(d.stdout, /198\.19/, d.stdout);
    assert.equal(world.conns.length, before, 'the world heard nothing');
    await s.kill();
});

test('allowOut a test server: reachable; private, metadata, the node, the Pod itself, the gateway ports and UDP refused', async () => {
    const s = await create('eg', { network: { allowOut: [PUBLIC] } });
    const pod = await podOf(s.sandboxId);
    const podIP = pod.status.podIP, nodeIP = pod.status.hostIP;
    const before = world.conns.filter((h) => h === PRIVATE).length;
    const r = await connectFrom(s, [
        { host: PUBLIC, port: 8080, send: 'ping' },
        { host: PRIVATE, port: 8080, send: 'x' },
        { host: '169.254.169.254', port: 80, send: 'GET / HTTP/1.0\r\n\r\n' },
        { host: nodeIP, port: world.nodePort, send: 'x' },
        { host: podIP, port: 15000, send: 'PUT /policy HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}' },
        { host: '127.0.0.1', port: 15000, send: 'x' },
        { host: '127.0.0.1', port: 15001, send: 'x' },
    ]);
    assert.equal(r[0].text, 'ping', `allowed: ${JSON.stringify(r[0])}${logs()}`);
    for (const x of r.slice(1)) assert.ok(!x.ok, `refused: ${JSON.stringify(r)}`);
    for (const x of r.slice(1)) assert.notEqual(x.error, 'TIMEOUT', `at once: ${JSON.stringify(r)}`);
    assert.equal(world.conns.filter((h) => h === PRIVATE).length, before, 'the private listener heard nothing');
    assert.deepEqual(world.node, [], 'the node listener heard nothing');
    // the control port from the cluster network: only this Pod's token opens it
    const tokenOf = (x) => x.spec.initContainers.find((c) => c.name === 'egress-proxy').env.find((e) => e.name === 'AGENTBOX_EGRESS_TOKEN').value;
    const other = (await listPods('eg-1c1gi')).find((x) => x.metadata.name !== pod.metadata.name);
    const open = JSON.stringify({ internet: true, network: null });
    for (const auth of [undefined, 'Bearer nope-nope-nope-nope', `Bearer ${tokenOf(other)}`]) {
        const r = await fetch(`http://${podIP}:15000/policy`, { method: 'PUT', headers: { 'Content-Type': 'application/json', ...(auth ? { Authorization: auth } : {}) }, body: open });
        assert.equal(r.status, 401, `control API with ${auth}`);
    }
    // names: resolved through the sidecar's DNS relay
    const d = await s.commands.run(`node -e "require('dns').resolve4('pub.test', (e, a) => console.log(e ? e.code : a.join()))"`, { timeoutMs: 30000 });
    assert.equal(d.stdout.trim(), PUBLIC);
    // UDP other than DNS is dropped
    await s.commands.run(`node -e "const s=require('dgram').createSocket('udp4'); s.send('leak', 9999, '${PUBLIC}', () => s.close())"`);
    // the refusals are the sidecar's to log (the container log API has them)
    const side = await fetch(`${api.url}/api/v1/namespaces/default/pods/${pod.metadata.name}/log?container=egress-proxy`).then((x) => x.text());
    assert.match(side, /egress refused.*reason=metadata/);
    assert.match(side, /reason=host_address/);
    // the same through the real kubectl: the in-test server's log API speaks Kubernetes
    assert.ok(fs.existsSync(KUBECTL), `kubectl is needed (${KUBECTL})`);
    const kl = await run(KUBECTL, ['--kubeconfig', kc, 'logs', pod.metadata.name, '-c', 'egress-proxy', '--tail', '50'], { env: { ...process.env, HOME: kdir } });
    assert.equal(kl.code, 0, kl.stderr);
    assert.match(kl.stdout, /egress refused/);
    const init = await run(KUBECTL, ['--kubeconfig', kc, 'logs', pod.metadata.name, '-c', 'egress-init'], { env: { ...process.env, HOME: kdir } });
    assert.match(init.stdout, /egress redirect installed/, init.stderr);
    assert.deepEqual(world.udp, [], 'no UDP left the Pod');
    await s.kill();
});

test('allow-private-networks opens the private tier on kube, never the metadata address or the node', async () => {
    const s = await create('eg', { metadata: { 'agentbox.scitix.ai/allow-private-networks': 'true' } });
    const pod = await podOf(s.sandboxId);
    const r = await connectFrom(s, [
        { host: PRIVATE, port: 8080, send: 'priv' },
        { host: '169.254.169.254', port: 80, send: 'x' },
        { host: pod.status.hostIP, port: world.nodePort, send: 'x' },
    ]);
    assert.equal(r[0].text, 'priv', JSON.stringify(r));
    assert.ok(!r[1].ok && !r[2].ok, JSON.stringify(r));
    assert.deepEqual(world.node, [], 'the node listener heard nothing');
    await s.kill();
});

test('network.egressProxy on kube: allowed connections leave through the SOCKS5 proxy', async () => {
    const s = await create('eg', { network: { allowOut: [PUBLIC], egressProxy: { address: `${PUBLIC}:1080` } } });
    const before = world.socks.length;
    const r = await connectFrom(s, [{ host: PUBLIC, port: 8080, send: 'via-proxy' }, { host: PRIVATE, port: 8080, send: 'x' }]);
    assert.equal(r[0].text, 'via-proxy', `${JSON.stringify(r)} socks=${JSON.stringify(world.socks)} side=${await fetch(`${api.url}/api/v1/namespaces/default/pods/${(await podOf(s.sandboxId)).metadata.name}/log?container=egress-proxy&tailLines=5`).then((x) => x.text())}`);
    assert.ok(!r[1].ok, JSON.stringify(r));
    assert.deepEqual(world.socks.slice(before), [`${PUBLIC}:8080`], 'one CONNECT, to the allowed destination only');
    await s.kill();
});

test('the sandbox cannot flush the rules or mark its packets (no NET_ADMIN, no NET_RAW), even as root', async () => {
    const s = await create('eg', { network: { allowOut: [PUBLIC] } });
    const flush = await s.commands.run('nft flush ruleset', { user: 'root' }).catch((e) => e);
    assert.notEqual(flush.exitCode, 0, 'nft flush must fail');
    assert.match(`${flush.stderr}${flush.stdout}`, /Operation not permitted/);
    const add = await s.commands.run('nft add table inet evil', { user: 'root' }).catch((e) => e);
    assert.notEqual(add.exitCode, 0);
    // SO_MARK with the sidecar's mark (the redirect's exemption): refused
    const mark = await s.commands.run(`python3 -c "import socket; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, 36, 0xab0e); print('marked')"`, { user: 'root' }).catch((e) => e);
    assert.notEqual(mark.exitCode, 0, `SO_MARK must fail: ${mark.stdout}`);
    assert.match(`${mark.stderr}`, /Operation not permitted/);
    // and the policy still holds afterwards
    const r = await connectFrom(s, [{ host: PRIVATE, port: 8080, send: 'x' }, { host: PUBLIC, port: 8080, send: 'ok' }]);
    assert.ok(!r[0].ok && r[1].text === 'ok', JSON.stringify(r));
    await s.kill();
});

test('PUT /sandboxes/{id}/network changes a live sandbox\'s policy on kube', async () => {
    const s = await create('eg', { network: { allowOut: [PUBLIC] } });
    let r = await connectFrom(s, [{ host: PUBLIC, port: 8080, send: 'a' }]);
    assert.equal(r[0].text, 'a');
    const put = await fetch(`${alpha.e2b}/sandboxes/${s.sandboxId}/network`, {
        method: 'PUT', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ denyOut: [PUBLIC] }),
    });
    assert.equal(put.status, 204, await put.text());
    await waitFor(async () => !(await connectFrom(s, [{ host: PUBLIC, port: 8080, send: 'b' }]))[0].ok, { timeoutMs: 10000, what: 'the new policy in force' });
    const bad = await fetch(`${alpha.e2b}/sandboxes/${s.sandboxId}/network`, {
        method: 'PUT', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ allowOut: ['not a host!'] }),
    });
    assert.equal(bad.status, 400);
    // a release clears the sidecar's policy at once (before the old container is gone)
    const pod = await podOf(s.sandboxId);
    const sideLog = () => fetch(`${api.url}/api/v1/namespaces/default/pods/${pod.metadata.name}/log?container=egress-proxy`).then((x) => x.text());
    const count = (text, what) => text.split('\n').filter((l) => l.includes(what)).length;
    const before = await sideLog();
    assert.ok(count(before, 'egress policy set') >= 2, 'the claim and the update each pushed a policy');
    await s.kill();
    await waitFor(async () => count(await sideLog(), 'egress policy cleared') === count(before, 'egress policy cleared') + 1,
        { timeoutMs: 10000, what: 'the policy cleared on release' });
});

test('an Env without the gateway: a network policy is refused with the seed\'s 400', async () => {
    const r = await fetch(`${alpha.e2b}/sandboxes`, {
        method: 'POST', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'plain', network: { allowOut: [PUBLIC] } }),
    });
    const body = await r.text();
    assert.equal(r.status, 400, body);
    assert.match(body, /no egress gateway.*overrides\.gateway\.enabled/);
    // internet off cannot be enforced without the sidecar either: refused, not ignored
    const rr = await fetch(`${alpha.e2b}/sandboxes`, {
        method: 'POST', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ templateID: 'plain', allow_internet_access: false }),
    });
    assert.equal(rr.status, 400, await rr.text());
});

test('usage and logs on kube: E2B /logs and /metrics, e2b sandbox logs and metrics', async () => {
    const s = await create('plain');
    await s.commands.run('echo hello-from-kube; head -c 20000000 /dev/zero | sha256sum');
    const l = await waitFor(async () => {
        const r = await fetch(`${alpha.e2b}/sandboxes/${s.sandboxId}/logs`, { headers: { 'X-API-Key': stack.key } });
        const j = await r.json();
        return r.status === 200 && (j.logs ?? []).length > 0 ? j : null;
    }, { timeoutMs: 10000, what: 'envd log lines through the Pod log API' });
    assert.ok(l.logs.every((x) => typeof x.line === 'string' && x.timestamp), JSON.stringify(l.logs.slice(0, 2)));
    const m = await fetch(`${alpha.e2b}/sandboxes/${s.sandboxId}/metrics`, { headers: { 'X-API-Key': stack.key } });
    const mj = await m.json();
    assert.equal(m.status, 200, JSON.stringify(mj));
    assert.equal(mj.length, 1, JSON.stringify(mj));
    assert.ok(mj[0].memUsed > 0, `memory from PodMetrics: ${JSON.stringify(mj)}`);
    // several sandboxes at once: one PodMetrics list per namespace, not one GET each
    const t = await create('eg');
    const mark = api.requests.length;
    const both = await fetch(`${alpha.e2b}/sandboxes/metrics?sandbox_ids=${s.sandboxId},${t.sandboxId}`, { headers: { 'X-API-Key': stack.key } });
    const bj = await both.json();
    assert.equal(both.status, 200, JSON.stringify(bj));
    for (const id of [s.sandboxId, t.sandboxId]) assert.ok(bj.sandboxes[id]?.memUsed > 0, JSON.stringify(bj));
    const reads = api.requests.slice(mark).filter((r) => r.path.startsWith('/apis/metrics.k8s.io/'));
    assert.ok(reads.length >= 1 && reads.every((r) => r.path === '/apis/metrics.k8s.io/v1beta1/namespaces/default/pods'), JSON.stringify(reads.map((r) => r.path)));
    await t.kill();
    const cliEnv = {
        PATH: process.env.PATH, HOME: tempDir('agentbox-cli-home-'), TERM: 'xterm',
        E2B_API_URL: alpha.e2b, E2B_SANDBOX_URL: alpha.data, E2B_API_KEY: stack.key, npm_config_user_agent: 'npm/10.0.0 node/v20',
    };
    const cl = await run(process.execPath, [CLI, 'sandbox', 'logs', s.sandboxId, '--format', 'json'], { env: cliEnv, timeoutMs: 60000, input: '' });
    assert.equal(cl.code, 0, `${cl.stdout}\n${cl.stderr}`);
    assert.ok(cl.stdout.trim().length > 0, 'envd logged something');
    const cm = await run(process.execPath, [CLI, 'sandbox', 'metrics', s.sandboxId, '--format', 'json'], { env: cliEnv, timeoutMs: 60000, input: '' });
    assert.equal(cm.code, 0, `${cm.stdout}\n${cm.stderr}`);
    assert.match(cm.stdout, /memUsed|mem/i);
    await s.kill();
});
