// The egress gateway (agent/egress/gateway.c) between namespaces made here:
// a "sandbox" netns behind the egress netns (agent/egress/netns.c), the
// gateway in this (the host's) namespace with its listener in the egress one,
// and an "internet" netns behind a veth from the host holding 198.51.100.2
// (TEST-NET-2, so a "public" address by the policy, reachable only on this
// machine). A host listener on the veth's host address stands in for the hub.
// Checks: bytes spliced both ways intact (4 MiB, backpressure), the host's own
// address and private addresses refused and their listeners untouched,
// allowOut making everything else a deny, the per-sandbox connection limit.
// Nothing leaves this machine. Needs root.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { run, spawnProc, waitFor, buildDir } from './lib/harness.mjs';
import { cleanupsAfter, sh } from './lib/scaffold.mjs';

const netnsDriver = path.join(buildDir(), 'test_agent_egress_netns');
const gwDriver = path.join(buildDir(), 'test_agent_egress_gateway');
const tag = `${process.pid % 100000}`;
const EG = `abx-eggw-${tag}`;
const SB = `abx-sbgw-${tag}`;
const INET = `abx-ingw-${tag}`;
const HOSTIF = `abxg${tag}`;
const RANGE = '10.214.0.0/24';
const TCP = 15101;
const DNS = 15153;
const cfg = [EG, RANGE, String(TCP), String(DNS)];
const PUBLIC = '198.51.100.2';
const HOST = '198.51.100.1';

const cleanups = cleanupsAfter();

async function inSandbox(script) {
    const r = await run('ip', ['netns', 'exec', SB, process.execPath, '-e', script], { timeoutMs: 60000 });
    assert.equal(r.code, 0, `sandbox script failed: ${r.stderr}`);
    return JSON.parse(r.stdout);
}

// connect(host, port, send) in the sandbox: what came back, and how it ended.
const client = `
const net = require('net');
const one = (host, port, send, { keep = false } = {}) => new Promise((res) => {
    const s = net.connect(port, host, () => { if (send !== undefined) { if (keep) s.write(send); else s.end(send); } });
    const chunks = [];
    s.on('data', (d) => chunks.push(d));
    s.on('error', (e) => res({ error: e.code, bytes: Buffer.concat(chunks).length }));
    s.on('close', () => {
        const b = Buffer.concat(chunks);
        res({ bytes: b.length, text: b.length < 200 ? b.toString() : undefined,
              sha: require('crypto').createHash('sha256').update(b).digest('hex') });
    });
    if (keep) one.open.push(s);
});
one.open = [];
`;

let setupDone = false;
async function setup() {
    if (setupDone) return;
    setupDone = true;
    cleanups.push(() => run('ip', ['netns', 'del', SB]));
    cleanups.push(() => run('ip', ['netns', 'del', EG]));
    cleanups.push(() => run('ip', ['netns', 'del', INET]));
    cleanups.push(() => run('ip', ['link', 'del', HOSTIF]));
    await sh('ip', ['netns', 'add', SB]);
    await sh('ip', ['netns', 'add', INET]);
    await sh(netnsDriver, ['create', ...cfg]);
    await sh(netnsDriver, ['attach', ...cfg, '2', `/run/netns/${SB}`]);
    // the stand-in internet, reachable from the host's namespace only
    await sh('ip', ['link', 'add', HOSTIF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', INET]);
    await sh('ip', ['addr', 'add', `${HOST}/24`, 'dev', HOSTIF]);
    await sh('ip', ['link', 'set', HOSTIF, 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'addr', 'add', `${PUBLIC}/24`, 'dev', 'eth0']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'eth0', 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'lo', 'up']);
    // "internet" server: "big" → 4 MiB of a known pattern; anything else echoed; logs each connection
    const server = spawnProc('internet', 'ip', ['netns', 'exec', INET, process.execPath, '-e', `
        const net = require('net');
        const big = Buffer.alloc(4 << 20);
        for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 12)) & 255;
        const srv = (port) => net.createServer((s) => {
            console.log('conn ' + port);
            let first = true;
            s.on('data', (d) => {
                if (first && d.toString() === 'big') { s.end(big); first = false; return; }
                first = false;
                s.write(d);
            });
            s.on('end', () => s.end());
            s.on('error', () => {});
        }).listen(port, () => console.log('listening ' + port));
        srv(8080); srv(8081); srv(80); srv(443);
        // a resolver: every A query is answered ${PUBLIC}, TTL 60
        const dns = require('dgram').createSocket('udp4');
        dns.on('message', (m, from) => {
            let o = 12, name = [];
            while (m[o]) { name.push(m.slice(o + 1, o + 1 + m[o]).toString()); o += m[o] + 1; }
            console.log('dns ' + name.join('.'));
            const q = m.slice(12, o + 5);
            const hdr = Buffer.from([m[0], m[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            const ans = Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ${PUBLIC.split('.').join(', ')}]);
            dns.send(Buffer.concat([hdr, q, ans]), from.port, from.address);
        });
        dns.bind(53, '${PUBLIC}', () => console.log('listening dns'));
    `]);
    cleanups.push(() => server.stop());
    await waitFor(() => ['8081', '80', '443', 'dns'].every((p) => server.logs().includes(`listening ${p}\n`)), {
        what: 'the internet server',
    });
    // the "hub" on the host's own address
    const hub = spawnProc('hub', process.execPath, ['-e', `
        require('net').createServer((s) => { console.log('HUB REACHED'); s.end('hub'); })
            .listen(17700, '${HOST}', () => console.log('listening'));
    `]);
    cleanups.push(() => hub.stop());
    await waitFor(() => hub.logs().includes('listening'), { what: 'the host listener' });
    setup.server = server;
    setup.hub = hub;
}

// SIGTERM, and a clean exit: no sanitizer report, every connection freed.
async function stopClean(gw) {
    const { code, signal } = await gw.stop();
    assert.equal(code, 0, `gateway exit ${code} ${signal}: ${gw.logs()}`);
}

async function startGateway(network, { maxConns = 0, internet = true, resolver } = {}) {
    const gw = spawnProc('gateway', gwDriver, [
        'serve', ...cfg, String(internet), 'false', String(maxConns), JSON.stringify(network),
        ...(resolver ? [resolver] : []),
    ]);
    await waitFor(() => gw.logs().includes('ready') || !gw.running(), { what: 'gateway ready' });
    assert.ok(gw.running(), `gateway exited: ${gw.logs()}`);
    gw.denials = () =>
        gw
            .logs()
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));
    return gw;
}

test('gateway: public traffic is spliced intact both ways; the host and private addresses are refused', async () => {
    await setup();
    const gw = await startGateway({});
    try {
        const r = await inSandbox(`${client}
            (async () => {
                const out = {};
                out.echo = await one('${PUBLIC}', 8080, 'hello through the gateway');
                out.big = await one('${PUBLIC}', 8081, 'big');
                out.hub = await one('${HOST}', 17700, 'x');
                out.priv = await one('10.214.0.1', 22, 'x');
                console.log(JSON.stringify(out));
            })();`);
        assert.equal(r.echo.text, 'hello through the gateway');
        assert.equal(r.big.bytes, 4 << 20);
        const crypto = await import('node:crypto');
        const big = Buffer.alloc(4 << 20);
        for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 12)) & 255;
        assert.equal(r.big.sha, crypto.createHash('sha256').update(big).digest('hex'));
        assert.equal(r.hub.bytes, 0, 'nothing came back from the host listener');
        assert.equal(r.priv.bytes, 0);
        await waitFor(() => gw.denials().length >= 2, { what: 'two refusals' });
        assert.deepEqual(
            gw.denials().map((d) => [d.denied, d.dst]),
            [['host_address', `${HOST}:17700`], ['private', '10.214.0.1:22']],
        );
        assert.equal(setup.hub.logs().includes('HUB REACHED'), false, 'the host listener was never reached');
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('gateway: allowOut makes everything else a deny; internet off refuses all', async () => {
    await setup();
    let gw = await startGateway({ allowOut: [`${PUBLIC}/32`], denyOut: [] });
    try {
        const r = await inSandbox(`${client}
            (async () => {
                console.log(JSON.stringify({
                    ok: await one('${PUBLIC}', 8080, 'allowed'),
                    other: await one('198.51.100.3', 8080, 'x'),
                }));
            })();`);
        assert.equal(r.ok.text, 'allowed');
        assert.equal(r.other.bytes, 0);
        await waitFor(() => gw.denials().length >= 1, { what: 'a refusal' });
        assert.deepEqual(gw.denials().map((d) => d.denied), ['not_allowed']);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
    gw = await startGateway({}, { internet: false });
    try {
        const conns = setup.server.logs().split('\n').filter((l) => l.startsWith('conn')).length;
        const r = await inSandbox(`${client}
            (async () => console.log(JSON.stringify(await one('${PUBLIC}', 8080, 'x'))))();`);
        assert.equal(r.bytes, 0);
        await waitFor(() => gw.denials().length >= 1, { what: 'a refusal' });
        assert.deepEqual(gw.denials().map((d) => d.denied), ['internet_off']);
        assert.equal(setup.server.logs().split('\n').filter((l) => l.startsWith('conn')).length, conns);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('gateway: a sandbox is held to its connection limit, and gets room back as connections close', async () => {
    await setup();
    const gw = await startGateway({}, { maxConns: 4 });
    try {
        const r = await inSandbox(`${client}
            (async () => {
                const out = {};
                // four held open, each proven spliced by an echo
                const held = [0, 1, 2, 3].map(() => new Promise((res) => {
                    const s = require('net').connect(8080, '${PUBLIC}', () => s.write('ping'));
                    s.once('data', (d) => res({ s, text: d.toString() }));
                    s.on('error', (e) => res({ error: e.code }));
                }));
                const open = await Promise.all(held);
                out.held = open.map((o) => o.text || o.error);
                out.fifth = await one('${PUBLIC}', 8080, 'x');
                for (const o of open) o.s && o.s.destroy();
                // room again once the gateway saw them close
                for (let i = 0; i < 200; i++) {
                    out.after = await one('${PUBLIC}', 8080, 'again');
                    if (out.after.text === 'again') break;
                    await new Promise((r) => setTimeout(r, 20));
                }
                console.log(JSON.stringify(out));
            })();`);
        assert.deepEqual(r.held, ['ping', 'ping', 'ping', 'ping']);
        assert.equal(r.fifth.bytes, 0);
        assert.equal(r.after.text, 'again');
        assert.ok(gw.denials().some((d) => d.denied === 'conn_limit'));
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('gateway: 1,000 concurrent connections from one sandbox all get their own bytes back', async () => {
    await setup();
    const gw = await startGateway({}); // default limit: EGRESS_CONNS_PER_SANDBOX (1024)
    try {
        const r = await inSandbox(`
            const net = require('net');
            const N = 1000;
            const opened = [];
            let connected = 0;
            const all = Array.from({ length: N }, (_, i) => new Promise((res) => {
                const s = net.connect(8080, '${PUBLIC}');
                opened.push(s);
                let got = '';
                s.on('connect', () => {
                    // every connection is open at once before any is answered
                    if (++connected === N) for (const o of opened) o.write('conn-' + o.idx + ';');
                });
                s.idx = i;
                s.on('data', (d) => {
                    got += d;
                    if (got.endsWith(';')) { s.end(); }
                });
                s.on('close', () => res(got === 'conn-' + i + ';'));
                s.on('error', () => res(false));
            }));
            Promise.all(all).then((ok) => console.log(JSON.stringify({ ok: ok.filter(Boolean).length })));
        `);
        assert.equal(r.ok, 1000);
        assert.deepEqual(gw.denials(), []);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('gateway: a sandbox opening and dropping connections as fast as it can leaves it serving', async () => {
    await setup();
    const gw = await startGateway({}, { maxConns: 64 });
    try {
        const r = await inSandbox(`
            const net = require('net');
            const deadline = Date.now() + 3000;
            let opened = 0, inflight = 0;
            const storm = () => new Promise((done) => {
                const next = () => {
                    while (inflight < 200 && Date.now() < deadline) {
                        inflight++;
                        opened++;
                        const s = net.connect(8080, '${PUBLIC}');
                        // half of them sent a byte first, half are dropped mid-connect
                        s.on('connect', () => { if (opened % 2) s.write('x'); s.destroy(); });
                        s.on('error', () => {});
                        s.on('close', () => { inflight--; next(); });
                    }
                    if (inflight === 0) done();
                };
                next();
            });
            const echo = () => new Promise((res) => {
                const s = net.connect(8080, '${PUBLIC}', () => s.end('still here'));
                let got = '';
                s.on('data', (d) => (got += d));
                s.on('close', () => res(got));
                s.on('error', () => res(''));
            });
            (async () => {
                await storm();
                // the limit frees up as the gateway sees the closes: ask until it answers
                let after = '';
                for (let i = 0; i < 250 && after !== 'still here'; i++) {
                    after = await echo();
                    if (after !== 'still here') await new Promise((r) => setTimeout(r, 20));
                }
                console.log(JSON.stringify({ opened, after }));
            })();`);
        assert.ok(r.opened > 1000, `the storm opened ${r.opened} connections`);
        assert.equal(r.after, 'still here');
        assert.ok(gw.running(), 'the gateway survived');
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

// A DNS query for name from the sandbox to an arbitrary resolver address (the
// redirect takes it to the gateway): the answer's id, rcode and first A record.
const dnsClient = (name, id) => `
    const u = require('dgram').createSocket('udp4');
    const labels = ${JSON.stringify('NAME')}.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]));
    const q = Buffer.concat([Buffer.from([${id >> 8}, ${id & 255}, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]), ...labels,
        Buffer.from([0, 0, 1, 0, 1])]);
    const t = setTimeout(() => { console.log(JSON.stringify({ timeout: true })); process.exit(0); }, 5000);
    u.on('message', (m) => {
        clearTimeout(t);
        const an = m.readUInt16BE(6);
        const a = an ? [...m.slice(m.length - 4)].join('.') : null;
        console.log(JSON.stringify({ id: m.readUInt16BE(0), rcode: m[3] & 15, an, a }));
        u.close();
    });
    u.send(q, 53, '203.0.113.53');
`.replace('"NAME"', JSON.stringify(name));

test('gateway: DNS is relayed to the resolver with internet on, refused at once with internet off', async () => {
    await setup();
    let gw = await startGateway({}, { resolver: `${PUBLIC}:53` });
    try {
        const r = await inSandbox(dnsClient('Api.Example.COM', 0x4242));
        assert.deepEqual(r, { id: 0x4242, rcode: 0, an: 1, a: PUBLIC });
        assert.ok(setup.server.logs().includes('dns Api.Example.COM'));
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
    gw = await startGateway({}, { internet: false, resolver: `${PUBLIC}:53` });
    try {
        const started = Date.now();
        const r = await inSandbox(dnsClient('off.example', 7));
        assert.deepEqual(r, { id: 7, rcode: 5, an: 0, a: null }, 'REFUSED, not a timeout');
        assert.ok(Date.now() - started < 4000);
        assert.equal(setup.server.logs().includes('dns off.example'), false, 'the resolver never saw it');
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('gateway: on ports 80 and 443 a host name in allowOut opens only when the sandbox resolved it to that address', async () => {
    await setup();
    const gw = await startGateway({ allowOut: ['api.example.com', 'unresolved.example'] }, {
        resolver: `${PUBLIC}:53`,
    });
    try {
        const resolved = await inSandbox(dnsClient('api.example.com', 1));
        assert.equal(resolved.a, PUBLIC);
        const conns = (port) => setup.server.logs().split('\n').filter((l) => l === `conn ${port}`).length;
        const tlsBefore = conns(443);
        const r = await inSandbox(`${client}
            const tls = require('tls');
            const hello = (servername) => new Promise((res) => {
                const s = tls.connect({ host: '${PUBLIC}', port: 443, servername, rejectUnauthorized: false });
                s.on('error', (e) => res(e.code || 'error'));
                s.on('close', () => res('closed'));
                setTimeout(() => { s.destroy(); }, 1500);
            });
            const get = (port, host) => one('${PUBLIC}', port, 'GET / HTTP/1.1\\r\\nHost: ' + host + '\\r\\n\\r\\n');
            (async () => {
                console.log(JSON.stringify({
                    named: await get(80, 'api.example.com'),
                    other: await get(80, 'other.example'),
                    unverified: await get(80, 'unresolved.example'),
                    otherPort: await get(8080, 'api.example.com'),
                    tlsNamed: await hello('api.example.com'),
                }));
            })();`);
        assert.equal(r.named.text, 'GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n');
        assert.equal(r.other.bytes, 0);
        assert.equal(r.unverified.bytes, 0, 'a name the sandbox never resolved to this address does not count');
        assert.equal(r.otherPort.bytes, 0, 'other ports are CIDR-only');
        assert.equal(conns(443), tlsBefore + 1, 'the ClientHello for api.example.com was let through');
        await waitFor(() => gw.denials().length >= 3, { what: 'three refusals' });
        assert.deepEqual(
            gw.denials().map((d) => [d.denied, d.dst]),
            [
                ['not_allowed', `${PUBLIC}:80`],
                ['not_allowed', `${PUBLIC}:80`],
                ['not_allowed', `${PUBLIC}:8080`],
            ],
        );
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});
