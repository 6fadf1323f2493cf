// Sandbox egress through the agent's gateway (issue 12), tried from inside
// real sandboxes created with the unmodified e2b SDK. A test network
// namespace behind a veth from the host stands in for the world: it holds a
// "public" address (198.18.N.2: the benchmarking range, public by the
// policy, reachable only on this machine, and used by no other test file,
// since they share the host's routes), a "private network" one (192.168.N.2) and the DNS
// stand-in the agent's --egress-resolver points at. The host's end of the
// veth (198.18.N.1) and 127.0.0.1 carry listeners standing in for the hub:
// they must receive nothing. Every check here fails on the old slirp4netns
// network (which reached the host's addresses and private networks, and
// ignored allowOut/denyOut). Nothing leaves this machine. Needs root.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startStack, manifestsDir, envManifest, waitPool, readSandboxState } from '../integration/lib/sandboxes.mjs';
import { run, spawnProc, waitFor, metricValue } from '../integration/lib/harness.mjs';

const tag = `${process.pid % 100000}`;
const INET = `abx-ine2e-${tag}`;
const HOSTIF = `abxe${tag}`;
// one /24 per run: the host's routes are shared with any other run of this file
const NET = 1 + (process.pid % 250);
const PUBLIC = `198.18.${NET}.2`;
const HOST = `198.18.${NET}.1`;
const PRIVATE = `192.168.${NET}.2`;
const PRIVATE_HOST = `192.168.${NET}.1`;
const LIMIT = 1100; // --egress-conns-per-sandbox of this agent

let stack;
let alpha;
let E2B;
let world; // the stand-in world's server process
let hubStandIn; // listeners on the host's own addresses
const made = [];
const cleanups = [];

async function sh(cmd, args) {
    const r = await run(cmd, args);
    assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the egress namespace needs root');
    cleanups.push(() => run('ip', ['netns', 'del', INET]));
    cleanups.push(() => run('ip', ['link', 'del', HOSTIF]));
    await sh('ip', ['netns', 'add', INET]);
    await sh('ip', ['link', 'add', HOSTIF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', INET]);
    await sh('ip', ['addr', 'add', `${HOST}/24`, 'dev', HOSTIF]);
    await sh('ip', ['addr', 'add', `${PRIVATE_HOST}/24`, 'dev', HOSTIF]);
    await sh('ip', ['link', 'set', HOSTIF, 'up']);
    for (const a of [`${PUBLIC}/24`, `${PRIVATE}/24`])
        await sh('ip', ['netns', 'exec', INET, 'ip', 'addr', 'add', a, 'dev', 'eth0']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'eth0', 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'lo', 'up']);
    // echo servers (a connection logs "conn <addr>:<port>"), "big" → 1 MiB; UDP
    // 9999 logs what reaches it; DNS: pub.test → PUBLIC, priv.test → PRIVATE
    world = spawnProc('world', 'ip', ['netns', 'exec', INET, process.execPath, '-e', `
        const net = require('net');
        const big = Buffer.alloc(1 << 20, 7);
        for (const host of ['${PUBLIC}', '${PRIVATE}']) for (const port of [80, 8080]) {
            net.createServer((s) => {
                console.log('conn ' + host + ':' + port);
                let first = true;
                s.on('data', (d) => {
                    if (first && d.toString() === 'big') { first = false; s.end(big); return; }
                    if (first && d.toString().startsWith('GET ')) { first = false; s.end('HTTP/1.1 200 OK\\r\\ncontent-length: 5\\r\\nconnection: close\\r\\n\\r\\nhello'); return; }
                    first = false;
                    s.write(d);
                });
                s.on('end', () => s.end());
                s.on('error', () => {});
            }).listen(port, host, () => console.log('listening ' + host + ':' + port));
        }
        const u = require('dgram').createSocket('udp4');
        u.on('message', (m) => console.log('udp ' + m.toString()));
        u.bind(9999, '${PUBLIC}', () => console.log('listening udp'));
        const dns = require('dgram').createSocket('udp4');
        dns.on('message', (m, from) => {
            let o = 12, name = [];
            while (m[o]) { name.push(m.slice(o + 1, o + 1 + m[o]).toString()); o += m[o] + 1; }
            const qname = name.join('.').toLowerCase(), qtype = m.readUInt16BE(o + 1);
            console.log('dns ' + qname);
            const ip = qname === 'pub.test' ? '${PUBLIC}' : qname === 'priv.test' ? '${PRIVATE}' : null;
            const q = m.slice(12, o + 5);
            const ok = ip && qtype === 1;
            const hdr = Buffer.from([m[0], m[1], 0x81, ip ? 0x80 : 0x83, 0, 1, 0, ok ? 1 : 0, 0, 0, 0, 0]);
            const ans = ok ? Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...ip.split('.').map(Number)]) : Buffer.alloc(0);
            dns.send(Buffer.concat([hdr, q, ans]), from.port, from.address);
        });
        dns.bind(53, '${PUBLIC}', () => console.log('listening dns'));
    `]);
    cleanups.push(() => world.stop());
    await waitFor(() => world.logs().includes('listening dns') && world.logs().includes('listening udp') &&
        world.logs().includes(`listening ${PRIVATE}:8080`) && world.logs().includes(`listening ${PUBLIC}:80\n`), { what: 'the stand-in world' });
    // the "hub": listeners on the host's own addresses (its veth end and loopback)
    hubStandIn = { hits: [] };
    for (const host of [HOST, '127.0.0.1']) {
        const srv = net.createServer((s) => { hubStandIn.hits.push(host); s.end('hub'); });
        await new Promise((r) => srv.listen(0, host, r));
        hubStandIn[host] = srv.address().port;
        cleanups.push(() => srv.close());
    }
    // replicas is the pool's maximum concurrency (issue 14): 2 idle beside a running one
    const manifests = manifestsDir([envManifest('eg', ['alpha'], { replicas: 3 })]);
    stack = await startStack({
        clusters: ['alpha'], manifests,
        agentArgs: ['--egress-resolver', `${PUBLIC}:53`, '--egress-conns-per-sandbox', String(LIMIT)],
    });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'eg-1c0gi', (s) => s.idle === 3, 'eg warm', 60000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    for (const s of made) await s.kill().catch(() => {});
    if (stack) await stack.stop();
    for (const fn of cleanups.reverse()) {
        try {
            await fn();
        } catch {
            /* keep cleaning */
        }
    }
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

async function create(opts = {}) {
    const s = await E2B.Sandbox.create('eg', { timeoutMs: 300000, ...opts });
    made.push(s);
    return s;
}

// In-sandbox client: each target {host, port, send?, hold?} → {ok, text, error, ms}.
const CLIENT = `
const net = require('net');
const targets = JSON.parse(process.argv[2]);
const one = (t) => new Promise((res) => {
    const t0 = Date.now();
    const s = net.connect({ host: t.host, port: t.port });
    const chunks = [];
    let done = false;
    const end = (r) => { if (!done) { done = true; res({ ...r, ms: Date.now() - t0 }); } };
    s.setTimeout(t.timeoutMs || 5000, () => { s.destroy(); end({ error: 'TIMEOUT' }); });
    s.on('connect', () => { if (t.send !== undefined) s.end(t.send); });
    s.on('data', (d) => chunks.push(d));
    s.on('error', (e) => end({ error: e.code }));
    s.on('close', () => { const b = Buffer.concat(chunks); end({ ok: b.length > 0, bytes: b.length, text: b.length < 300 ? b.toString() : undefined }); });
});
Promise.all(targets.map(one)).then((r) => console.log(JSON.stringify(r)));
`;

async function connectFrom(s, targets) {
    await s.files.write('/tmp/client.js', CLIENT);
    const r = await s.commands.run(`node /tmp/client.js '${JSON.stringify(targets)}'`, { timeoutMs: 60000 });
    return JSON.parse(r.stdout);
}

async function echo(s, host, port = 8080) {
    const [r] = await connectFrom(s, [{ host, port, send: 'ping' }]);
    return r;
}

const seenByWorld = (host, port = 8080) => world.logs().split('\n').filter((l) => l === `conn ${host}:${port}`).length;

test('default policy: the public address works; the host, loopback, private and metadata addresses never receive anything', async () => {
    const s = await create();
    const before = { priv: seenByWorld(PRIVATE) };
    const r = await connectFrom(s, [
        { host: PUBLIC, port: 8080, send: 'ping' },
        { host: HOST, port: hubStandIn[HOST], send: 'x' },
        { host: '127.0.0.1', port: hubStandIn['127.0.0.1'], send: 'x' },
        { host: '10.0.2.2', port: hubStandIn['127.0.0.1'], send: 'x' }, // slirp's host alias
        { host: PRIVATE, port: 8080, send: 'x' },
        { host: '169.254.169.254', port: 80, send: 'GET / HTTP/1.0\r\n\r\n' },
        { host: '100.100.100.200', port: 80, send: 'x' },
    ]);
    assert.equal(r[0].text, 'ping', `public echo: ${JSON.stringify(r[0])}${logs()}`);
    for (const x of r.slice(1)) assert.ok(!x.ok, `refused: ${JSON.stringify(x)}`);
    // refused at once (a reset), never a hang
    for (const x of r.slice(1)) assert.notEqual(x.error, 'TIMEOUT', JSON.stringify(r));
    assert.deepEqual(hubStandIn.hits, [], 'the host listeners received nothing');
    assert.equal(seenByWorld(PRIVATE), before.priv, 'the private listener received nothing');
    // the route trick from outside the sandbox cannot help either: the gateway
    // judges the original destination, whatever route took it there
    const m = await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="private"}');
    assert.ok(m >= 1, `private refusals counted: ${m}`);
    assert.ok((await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="host_address"}')) >= 1);
    assert.ok((await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="metadata"}')) >= 1);
    assert.equal(await metricValue(alpha.e2b, 'agentbox_egress_connections'), 0, 'no connection left open');
    // one log line per sandbox and destination
    await echo(s, PRIVATE);
    await echo(s, PRIVATE);
    const lines = alpha.proc.logs().split('\n').filter((l) => l.includes('egress refused') && l.includes(s.sandboxId) && l.includes(`${PRIVATE}:8080`));
    assert.equal(lines.length, 1, lines.join('\n'));
    await s.kill();
});

// The sandbox's host pid (pid 1 of its namespaces), from the agent's state.
function sandboxPid(id) {
    const root = `${alpha.stateDir}/sandboxes`;
    for (const d of fs.readdirSync(root)) {
        try {
            const st = readSandboxState(`${root}/${d}`);
            if (st.info && st.info.id === id) return st.pid;
        } catch {
            /* mid-write */
        }
    }
    throw new Error(`no state record under ${root} names ${id}`);
}

test('the routing trick: 127.0.0.1 routed out of the sandbox never reaches the host', async () => {
    const s = await create();
    const pid = sandboxPid(s.sandboxId);
    const gw = (await s.commands.run('ip -4 route show default')).stdout.match(/via (\S+)/)[1];
    // what an attacker with NET_ADMIN in the sandbox would do (the sandbox has
    // none: tests/e2e/isolation.test.mjs); done here from outside, as root
    const inNs = (args) => sh('nsenter', [`--net=/proc/${pid}/ns/net`, ...args]);
    await inNs(['sysctl', '-qw', 'net.ipv4.conf.eth0.route_localnet=1']);
    await inNs(['ip', 'route', 'del', 'local', '127.0.0.0/8', 'table', 'local']);
    await inNs(['ip', 'route', 'del', 'local', '127.0.0.1', 'table', 'local']);
    await inNs(['ip', 'route', 'add', '127.0.0.1/32', 'via', gw, 'dev', 'eth0']);
    assert.match(await inNs(['ip', 'route', 'get', '127.0.0.1']), /via .* dev eth0/);
    const r = await connectFrom(s, [
        { host: '127.0.0.1', port: hubStandIn['127.0.0.1'], send: 'x', timeoutMs: 3000 },
        { host: '10.0.2.2', port: hubStandIn['127.0.0.1'], send: 'x', timeoutMs: 3000 },
        { host: HOST, port: hubStandIn[HOST], send: 'x', timeoutMs: 3000 },
    ]);
    for (const x of r) assert.ok(!x.ok, JSON.stringify(r));
    assert.deepEqual(hubStandIn.hits, [], 'the host listeners received nothing');
    // (the egress namespace drops a loopback destination as a martian before
    // the gateway sees it; were it let through, the gateway refuses loopback)
    assert.equal((await echo(s, PUBLIC)).text, 'ping', 'the public address still works');
    await s.kill();
});

test('DNS inside goes to the gateway and its resolver; UDP other than DNS and ICMP are dropped', async () => {
    const s = await create();
    const conf = (await s.commands.run('cat /etc/resolv.conf')).stdout;
    assert.match(conf, /^nameserver 10\.200\.\d+\.\d+$/m, conf);
    const r = await s.commands.run(`node -e "require('dns').lookup('pub.test', {family: 4}, (e, a) => console.log(e ? e.code : a))"`);
    assert.equal(r.stdout.trim(), PUBLIC);
    assert.ok(world.logs().includes('dns pub.test'));
    // a hard-coded nameserver is the gateway too (every port-53 packet is)
    const r2 = await s.commands.run(`node -e "const d = new (require('dns').Resolver)(); d.setServers(['9.9.9.9']); d.resolve4('pub.test', (e, a) => console.log(e ? e.code : a[0]))"`);
    assert.equal(r2.stdout.trim(), PUBLIC);
    await s.commands.run(`node -e "const u = require('dgram').createSocket('udp4'); u.send('leak', 9999, '${PUBLIC}', () => setTimeout(() => u.close(), 200))"`);
    await echo(s, PUBLIC); // the TCP path is fine meanwhile
    assert.ok(!world.logs().includes('udp leak'), 'UDP to a non-DNS port never arrives');
    // ICMP: an echo request from the sandbox's namespace (sent from outside as
    // root: the sandbox has no NET_RAW) gets no reply; the host's own gets one
    const icmp = `
import socket, struct, sys, select
s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def csum(b):
    t = sum(struct.unpack('!%dH' % (len(b) // 2), b)); t = (t >> 16) + (t & 0xffff); t += t >> 16
    return ~t & 0xffff
pkt = struct.pack('!BBHHH', 8, 0, 0, 7, 1) + b'abxegress'
pkt = pkt[:2] + struct.pack('!H', csum(pkt + b'\\0')) + pkt[4:]
s.sendto(pkt, (sys.argv[1], 0))
while True:
    r, _, _ = select.select([s], [], [], 3)
    if not r: print('none'); break
    d = s.recv(2048)
    if d[20] == 0 and d[24:26] == struct.pack('!H', 7): print('reply'); break
`;
    fs.writeFileSync('/tmp/abx-icmp.py', icmp);
    cleanups.push(() => fs.rmSync('/tmp/abx-icmp.py', { force: true }));
    assert.equal((await sh('python3', ['/tmp/abx-icmp.py', PUBLIC])).trim(), 'reply', 'the probe works from the host');
    const pid = sandboxPid(s.sandboxId);
    assert.equal((await sh('nsenter', [`--net=/proc/${pid}/ns/net`, 'python3', '/tmp/abx-icmp.py', PUBLIC])).trim(), 'none',
        'ICMP from a sandbox is dropped');
    await s.kill();
});

test('internet off: nothing leaves and DNS fails fast', async () => {
    const s = await create({ allowInternetAccess: false });
    const before = await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="internet_off"}');
    const r = await echo(s, PUBLIC);
    // the gateway took the connection and reset it (no silent drop, no route error)
    assert.equal(r.error, 'ECONNRESET', JSON.stringify(r));
    assert.ok((await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="internet_off"}')) > before);
    const dnsSeen = () => world.logs().split('\n').filter((l) => l === 'dns pub.test').length;
    const dnsBefore = dnsSeen();
    const t0 = Date.now();
    const d = await s.commands.run(`node -e "const d = new (require('dns').Resolver)(); d.resolve4('pub.test', (e, a) => console.log(e ? e.code : a[0]))"`);
    assert.equal(d.stdout.trim(), 'EREFUSED', 'the gateway answers REFUSED itself');
    assert.ok(Date.now() - t0 < 3000, `DNS refused at once, took ${Date.now() - t0} ms`);
    assert.equal(dnsSeen(), dnsBefore, 'the query was never relayed to the resolver');
    await s.kill();
});

test('allowOut / denyOut, row by row', async () => {
    const rows = [
        // [network, metadata, {target: reachable?}]
        [{ allowOut: [PUBLIC] }, {}, { pub: true, pub80: true, priv: false }],
        [{ allowOut: [`198.18.${NET}.0/24`] }, {}, { pub: true, priv: false }],
        [{ allowOut: ['203.0.113.7'] }, {}, { pub: false, priv: false }],
        [{ denyOut: [PUBLIC] }, {}, { pub: false, priv: false }],
        [{ allowOut: ['*'] }, {}, { pub: true, priv: false }],
        [{ allowOut: [] }, {}, { pub: true, priv: false }],
        [{ allowOut: [PRIVATE] }, {}, { pub: false, priv: true }],
        [{}, { 'agentbox.scitix.ai/allow-private-networks': 'true' }, { pub: true, priv: true }],
        [{ denyOut: ['192.168.0.0/16'] }, { 'agentbox.scitix.ai/allow-private-networks': 'true' }, { pub: true, priv: false }],
    ];
    for (const [network, metadata, want] of rows) {
        const s = await create({ network, metadata });
        const targets = { pub: [PUBLIC, 8080], pub80: [PUBLIC, 80], priv: [PRIVATE, 8080] };
        const names = Object.keys(want);
        const r = await connectFrom(s, names.map((k) => ({ host: targets[k][0], port: targets[k][1], send: 'ping' })));
        names.forEach((k, i) => assert.equal(!!r[i].ok, want[k], `${JSON.stringify(network)} ${JSON.stringify(metadata)} ${k}: ${JSON.stringify(r[i])}`));
        await s.kill();
    }
});

test('allowOut by host name: the name must resolve, through the gateway, to the address dialled', async () => {
    const s = await create({ network: { allowOut: ['pub.test'] } });
    // first: the create with a name in allowOut succeeded (else every refusal below proves nothing)
    assert.ok(s.sandboxId && (await s.isRunning()), 'the create with allowOut by host name runs');
    assert.equal((await s.commands.run('echo up')).stdout, 'up\n');
    const get = (host) => `GET / HTTP/1.1\r\nHost: ${host}\r\n\r\n`;
    // not resolved yet: a Host header alone vouches for nothing
    let [r] = await connectFrom(s, [{ host: PUBLIC, port: 80, send: get('pub.test') }]);
    assert.ok(!r.ok, JSON.stringify(r));
    await s.commands.run(`node -e "require('dns').lookup('pub.test', {family: 4}, () => {})"`);
    [r] = await connectFrom(s, [{ host: PUBLIC, port: 80, send: get('pub.test') }]);
    assert.match(r.text || '', /hello/, JSON.stringify(r));
    // another name, and the right name on another port (CIDR-only there): refused
    const rr = await connectFrom(s, [{ host: PUBLIC, port: 80, send: get('other.test') }, { host: PUBLIC, port: 8080, send: 'x' }]);
    assert.ok(!rr[0].ok && !rr[1].ok, JSON.stringify(rr));
    await s.kill();
});

test('PUT /sandboxes/{id}/network: a live sandbox gets the new policy; open connections keep going', async () => {
    const s = await create();
    // a connection opened under the old policy, held across the update
    await s.files.write('/tmp/hold.js', `
        const fs = require('fs');
        const c = require('net').connect(8080, '${PUBLIC}', () => c.write('before'));
        let got = '';
        c.on('data', (d) => {
            got += d;
            if (got === 'before') {
                fs.writeFileSync('/tmp/held', 'open');
                const t = setInterval(() => { if (fs.existsSync('/tmp/go')) { clearInterval(t); c.write('after'); } }, 20);
            }
            if (got === 'beforeafter') { fs.writeFileSync('/tmp/hold.out', 'HELD'); c.end(); }
        });
        c.on('error', (e) => fs.writeFileSync('/tmp/hold.out', 'ERR ' + e.code));
    `);
    await s.commands.run('setsid nohup node /tmp/hold.js >/dev/null 2>&1 < /dev/null &');
    const cat = async (f) => (await s.commands.run(`cat ${f} 2>/dev/null || true`)).stdout;
    await waitFor(async () => (await cat('/tmp/held')) === 'open', { what: 'the held connection open' });
    await s.updateNetwork({ denyOut: [PUBLIC] });
    const r = await echo(s, PUBLIC);
    assert.ok(!r.ok, `a new connection sees the new policy: ${JSON.stringify(r)}`);
    await s.commands.run('touch /tmp/go');
    await waitFor(async () => (await cat('/tmp/hold.out')) !== '', { what: 'the held connection\'s end' });
    assert.equal(await cat('/tmp/hold.out'), 'HELD', 'the open connection kept going');
    // and back: an empty policy is the public internet again
    await E2B.Sandbox.updateNetwork(s.sandboxId, {});
    assert.equal((await echo(s, PUBLIC)).text, 'ping');
    // internet off on a live sandbox
    await E2B.Sandbox.updateNetwork(s.sandboxId, { allowInternetAccess: false });
    assert.ok(!(await echo(s, PUBLIC)).ok);
    await s.kill();
});

test('1,000 concurrent connections from one sandbox, and a flood bounded by the per-sandbox limit', async () => {
    const s = await create();
    // under the limit: all of them spliced (held open together, then echoed)
    await s.files.write('/tmp/many.js', `
        const net = require('net');
        const n = Number(process.argv[2]);
        // every spliced connection is held open until each of the n has been
        // judged (echoed or reset), so at most the limit can be echoed: the
        // gateway may accept from its backlog after the client saw 'connect'
        let ok = 0, reset = 0, done = 0;
        const socks = [];
        const settle = () => { if (ok + reset === n) socks.forEach((x) => x.end()); };
        for (let i = 0; i < n; i++) {
            const c = net.connect(8080, '${PUBLIC}', () => c.write('p'));
            socks.push(c);
            let seen = false;
            c.on('data', () => { if (!seen) { seen = true; ok++; settle(); } });
            c.on('error', () => { if (!seen) { seen = true; reset++; settle(); } });
            c.on('close', () => { if (!seen) { seen = true; reset++; settle(); } if (++done === n) console.log(JSON.stringify({ ok, reset })); });
        }
        setTimeout(() => { socks.forEach((x) => x.destroy()); }, 40000);
    `);
    const r = JSON.parse((await s.commands.run('node /tmp/many.js 1000', { timeoutMs: 60000 })).stdout);
    assert.equal(r.ok, 1000, JSON.stringify(r));
    // over the limit (LIMIT held open): the rest are reset at once, counted as conn_limit
    const before = await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="conn_limit"}');
    const f = JSON.parse((await s.commands.run(`node /tmp/many.js ${LIMIT + 200}`, { timeoutMs: 60000 })).stdout);
    assert.ok(f.reset >= 1 && f.ok <= LIMIT, JSON.stringify(f));
    const after = await metricValue(alpha.e2b, 'agentbox_egress_denied_total{reason="conn_limit"}');
    assert.ok(after > before, `conn_limit counted: ${before} → ${after}`);
    // room comes back as connections close
    assert.equal((await echo(s, PUBLIC)).text, 'ping');
    assert.ok(alpha.proc.running(), logs());
    await s.kill();
});

test('teardown leaves no veth; a restarted agent re-adopts its sandboxes and their policy', async () => {
    const nsName = fs.readFileSync(`${alpha.stateDir}/egress-netns`, 'utf8').trim();
    const links = async () => (await sh('ip', ['netns', 'exec', nsName, 'ip', '-o', 'link'])).split('\n').filter((l) => /: eg\d+[@:]/.test(l)).length;
    let s = await create({ network: { denyOut: [PRIVATE] } });
    await waitPool(alpha, 'eg-1c0gi', (p) => p.idle === 2, 'eg warm again', 30000);
    // one veth per sandbox: 2 idle and 1 running (an earlier test's killed
    // sandbox may still be going)
    await waitFor(async () => (await links()) === 3, { what: 'three veths', timeoutMs: 30000 });
    // the host's own namespace holds no veth of the gateway
    assert.ok(!(await sh('ip', ['-o', 'link'])).split('\n').some((l) => /: eg\d+[@:]/.test(l)));
    // a veth of a sandbox that is gone (slot 4000: nobody's), left behind
    await sh('ip', ['-n', nsName, 'link', 'add', 'eg4000', 'type', 'veth', 'peer', 'name', 'x4000']);
    process.kill(alpha.proc.pid, 'SIGKILL'); // the agent only, not its sandboxes
    await alpha.proc.exited;
    alpha = await stack.launch('alpha', { stateDir: alpha.stateDir });
    process.env.E2B_API_URL = alpha.e2b; // the new agent listens on new ports
    process.env.E2B_SANDBOX_URL = alpha.data;
    s = await E2B.Sandbox.connect(s.sandboxId);
    made.push(s);
    assert.equal((await echo(s, PUBLIC)).text, 'ping', `re-adopted sandbox reaches the public address${logs()}`);
    assert.ok(!(await echo(s, PRIVATE)).ok, 'and its policy came back with it');
    assert.ok(!(await sh('ip', ['-n', nsName, '-o', 'link'])).includes('eg4000'), 'the leftover veth was removed');
    await s.kill();
    // its place is filled again: one veth per sandbox, so the killed one's is gone
    await waitPool(alpha, 'eg-1c0gi', (p) => p.idle === 3 && p.running === 0 && p.starting === 0 && p.stopping === 0,
        'eg refilled after the kill', 30000);
    await waitFor(async () => (await links()) === 3, { what: 'the killed sandbox\'s veth gone', timeoutMs: 10000 });
});
