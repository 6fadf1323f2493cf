// Secrets injected on the way out, and network.egressProxy, through the
// egress gateway (agent/egress/gateway.c with intercept.c, ca.c, socks5.c)
// between namespaces made here, as egress_gateway.test.mjs does: a "sandbox"
// netns behind the egress netns, the gateway (test_agent_egress_intercept's
// driver) in this namespace, and an "internet" netns holding 203.0.113.202 and
// .203 (TEST-NET-3: public by the policy, reachable only on this machine).
// In the internet: an HTTPS server with a certificate from a test CA (the
// gateway is given that CA as its extra upstream bundle), one on .3 with a
// certificate from a CA nobody trusts, an HTTP server, an echo port, a SOCKS5
// proxy with a login (written here), a server that is not SOCKS, and a
// resolver. The sandbox trusts only the per-sandbox CA the gateway wrote.
// Checks: the rule's header carries the vault secret on every request of a
// keep-alive connection while the sandbox sends and sees only the decoy; the
// secret is in no answer to the sandbox and in none of the gateway's output;
// plain HTTP on port 80 likewise; a host without rules is spliced unread (the
// sandbox sees the real certificate); an upstream whose certificate does not
// verify, and a rule's name sent to an address it does not resolve to, get
// nothing; egressProxy tunnels through SOCKS5 with the login, and a proxy that
// is not SOCKS5, refuses the login, or is not there fails closed with its
// reason. Nothing leaves this machine. Needs root.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { run, spawnProc, waitFor, buildDir, tempDir, removeTempDir } from './lib/harness.mjs';
import { cleanupsAfter } from './lib/scaffold.mjs';

const netnsDriver = path.join(buildDir(), 'test_agent_egress_netns');
const driver = path.join(buildDir(), 'test_agent_egress_intercept');
const tag = `${process.pid % 100000}`;
const EG = `abx-egic-${tag}`;
const SB = `abx-sbic-${tag}`;
const INET = `abx-inic-${tag}`;
const HOSTIF = `abxi${tag}`;
const RANGE = '10.217.0.0/24';
const TCP = 15201;
const DNS = 15253;
const cfg = [EG, RANGE, String(TCP), String(DNS)];
// TEST-NET-3, a /29 of its own: other tests' veths hold 198.51.100.0/24, and a
// second route to the same subnet would send this test's packets into theirs
const PUBLIC = '203.0.113.202';
const ROGUE = '203.0.113.203';
const HOST = '203.0.113.201';
const SECRET = `sk-live-${tag}-9f8e7d6c5b4a39281706`;
const DECOY = 'sk-decoy-not-the-secret';

const cleanups = cleanupsAfter();

async function sh(cmd, args, opts) {
    const r = await run(cmd, args, opts);
    assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
}

async function inSandbox(script) {
    const r = await run('ip', ['netns', 'exec', SB, process.execPath, '-e', script], { timeoutMs: 60000 });
    assert.equal(r.code, 0, `sandbox script failed: ${r.stderr}`);
    return JSON.parse(r.stdout);
}

// Certificates: a test CA for the "public" servers, a rogue CA nobody trusts.
async function makeCerts(dir) {
    const o = (args) => sh('openssl', args, { cwd: dir });
    const conf = (name, sans) => {
        fs.writeFileSync(path.join(dir, `${name}.ext`), `subjectAltName=${sans}\nextendedKeyUsage=serverAuth\n`);
    };
    for (const ca of ['ca', 'rogue']) {
        await o(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
            '-subj', `/CN=test ${ca} CA`, '-keyout', `${ca}.key`, '-out', `${ca}.pem`,
            '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign']);
    }
    const leaf = async (name, ca, sans) => {
        conf(name, sans);
        await o(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', `/CN=${name}`,
            '-keyout', `${name}.key`, '-out', `${name}.csr`]);
        await o(['x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.pem`, '-CAkey', `${ca}.key`, '-CAcreateserial',
            '-days', '2', '-out', `${name}.pem`, '-extfile', `${name}.ext`]);
    };
    await leaf('public', 'ca', 'DNS:api.test,DNS:other.test,DNS:plain.test');
    await leaf('bad', 'rogue', 'DNS:bad.test');
}

let dir;
let setupDone = false;
async function setup() {
    if (setupDone) return;
    setupDone = true;
    dir = tempDir('abx-egress-ic-');
    fs.chmodSync(dir, 0o755);
    cleanups.push(() => removeTempDir(dir));
    await makeCerts(dir);
    cleanups.push(() => run('ip', ['netns', 'del', SB]));
    cleanups.push(() => run('ip', ['netns', 'del', EG]));
    cleanups.push(() => run('ip', ['netns', 'del', INET]));
    cleanups.push(() => run('ip', ['link', 'del', HOSTIF]));
    await sh('ip', ['netns', 'add', SB]);
    await sh('ip', ['netns', 'add', INET]);
    await sh(netnsDriver, ['create', ...cfg]);
    await sh(netnsDriver, ['attach', ...cfg, '2', `/run/netns/${SB}`]);
    await sh('ip', ['link', 'add', HOSTIF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', INET]);
    await sh('ip', ['addr', 'add', `${HOST}/29`, 'dev', HOSTIF]);
    await sh('ip', ['link', 'set', HOSTIF, 'up']);
    for (const a of [PUBLIC, ROGUE]) await sh('ip', ['netns', 'exec', INET, 'ip', 'addr', 'add', `${a}/29`, 'dev', 'eth0']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'eth0', 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'lo', 'up']);
    const server = spawnProc('internet', 'ip', ['netns', 'exec', INET, process.execPath, '-e', `
        const fs = require('fs'), net = require('net'), http = require('http'), https = require('https');
        const rd = (f) => fs.readFileSync(${JSON.stringify(dir)} + '/' + f);
        const big = Buffer.alloc(4 << 20);
        for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 12)) & 255;
        // Every request is logged (headers and the connection's port); the answer never echoes them.
        const handler = (tag) => (req, res) => {
            let body = '';
            req.on('data', (d) => (body += d));
            req.on('end', () => {
                console.log('REQ ' + JSON.stringify({ tag, host: req.headers.host, url: req.url,
                    auth: req.headers.authorization || null, org: req.headers['x-org'] || null,
                    port: req.socket.remotePort, body: body.length > 200 ? body.length : body }));
                if (req.url === '/big') return res.end(big);
                res.end('answer for ' + req.url);
            });
        };
        https.createServer({ key: rd('public.key'), cert: rd('public.pem') }, handler('public'))
            .listen(443, '${PUBLIC}', () => console.log('listening 443'));
        const rogue = https.createServer({ key: rd('bad.key'), cert: rd('bad.pem') }, handler('rogue'));
        rogue.on('connection', () => console.log('ROGUE CONN'));
        rogue.listen(443, '${ROGUE}', () => console.log('listening rogue'));
        http.createServer(handler('plain')).listen(80, '${PUBLIC}', () => console.log('listening 80'));
        net.createServer((s) => { s.on('data', (d) => s.write(d)); s.on('end', () => s.end()); s.on('error', () => {}); })
            .listen(8080, '${PUBLIC}', () => console.log('listening 8080'));
        // SOCKS5 (RFC 1928 CONNECT, RFC 1929 login u/p), logging what it was asked
        // half-open on both legs, so the sandbox's end of sending is passed on, not a close
        net.createServer({ allowHalfOpen: true }, (c) => {
            let st = 'greet', buf = Buffer.alloc(0);
            c.on('error', () => {});
            c.on('data', (d) => {
                buf = Buffer.concat([buf, d]);
                if (st === 'greet' && buf.length >= 2 && buf.length >= 2 + buf[1]) {
                    const methods = [...buf.slice(2, 2 + buf[1])];
                    buf = buf.slice(2 + buf[1]);
                    if (!methods.includes(2)) { c.end(Buffer.from([5, 0xff])); return; }
                    c.write(Buffer.from([5, 2]));
                    st = 'auth';
                }
                if (st === 'auth' && buf.length >= 2 && buf.length >= 3 + buf[1] && buf.length >= 3 + buf[1] + buf[2 + buf[1]]) {
                    const ul = buf[1], user = buf.slice(2, 2 + ul).toString(), pl = buf[2 + ul];
                    const pass = buf.slice(3 + ul, 3 + ul + pl).toString();
                    buf = buf.slice(3 + ul + pl);
                    console.log('SOCKS LOGIN ' + user);
                    if (user !== 'u' || pass !== 'p') { c.end(Buffer.from([1, 1])); return; }
                    c.write(Buffer.from([1, 0]));
                    st = 'req';
                }
                if (st === 'req' && buf.length >= 10 && buf[3] === 1) {
                    const ip = [...buf.slice(4, 8)].join('.'), port = buf.readUInt16BE(8);
                    const rest = buf.slice(10);
                    st = 'tunnel';
                    console.log('SOCKS CONNECT ' + ip + ':' + port);
                    const up = net.connect({ port, host: ip, allowHalfOpen: true }, () => {
                        c.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
                        if (rest.length) up.write(rest);
                        c.pipe(up); up.pipe(c);
                    });
                    up.on('error', () => c.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])));
                }
            });
        }).listen(1080, '${PUBLIC}', () => console.log('listening 1080'));
        net.createServer((c) => { c.on('error', () => {}); c.end('HTTP/1.1 400 Bad Request\\r\\n\\r\\n'); })
            .listen(1081, '${PUBLIC}', () => console.log('listening 1081'));
        // a resolver: bad.test is the rogue address, every other name the public one
        const dns = require('dgram').createSocket('udp4');
        dns.on('message', (m, from) => {
            let o = 12, name = [];
            while (m[o]) { name.push(m.slice(o + 1, o + 1 + m[o]).toString()); o += m[o] + 1; }
            const q = m.slice(12, o + 5), n = name.join('.');
            const ip = (n === 'bad.test' ? '${ROGUE}' : '${PUBLIC}').split('.').map(Number);
            const hdr = Buffer.from([m[0], m[1], 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
            const ans = Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...ip]);
            dns.send(Buffer.concat([hdr, q, ans]), from.port, from.address);
        });
        dns.bind(53, '${PUBLIC}', () => console.log('listening dns'));
    `]);
    cleanups.push(() => server.stop());
    await waitFor(
        () => ['443', 'rogue', '80', '8080', '1080', '1081', 'dns'].every((p) => server.logs().includes(`listening ${p}\n`)),
        { what: 'the internet servers' },
    );
    setup.server = server;
}

const requests = () =>
    setup.server
        .logs()
        .split('\n')
        .filter((l) => l.startsWith('REQ '))
        .map((l) => JSON.parse(l.slice(4)));

async function startGateway(network, { upstreamCa = path.join(dir, 'ca.pem') } = {}) {
    const caOut = path.join(dir, `sandbox-ca-${Date.now()}.pem`);
    const gw = spawnProc('gateway', driver, [
        'serve', ...cfg, JSON.stringify(network), `${PUBLIC}:53`, upstreamCa,
        JSON.stringify({ OPENAI: SECRET, ORG: 'org-42' }), caOut,
    ]);
    await waitFor(() => gw.logs().includes('ready') || !gw.running(), { what: 'gateway ready' });
    assert.ok(gw.running(), `gateway exited: ${gw.logs()}`);
    gw.caOut = caOut;
    gw.denials = () =>
        gw
            .logs()
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));
    return gw;
}

async function stopClean(gw) {
    const { code, signal } = await gw.stop();
    assert.equal(code, 0, `gateway exit ${code} ${signal}: ${gw.logs()}`);
    assert.equal(gw.logs().includes(SECRET), false, 'the secret is in none of the gateway output');
}

// In the sandbox: resolve through the gateway (any address: nftables sends DNS
// to it), then HTTPS / HTTP with the decoy in the Authorization header.
const client = (caFile) => `
const dns = require('dns'), https = require('https'), http = require('http'), net = require('net'), fs = require('fs');
const r = new dns.promises.Resolver(); r.setServers(['10.217.0.1']);
const ca = fs.readFileSync(${JSON.stringify(caFile)});
const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
const get = (mod, opts) => new Promise((res) => {
    const req = mod.request(opts, (resp) => {
        let body = '';
        const issuer = resp.socket.getPeerCertificate ? (resp.socket.getPeerCertificate().issuer || {}).CN : undefined;
        resp.setEncoding('latin1');
        resp.on('data', (d) => (body += d));
        resp.on('end', () => res({ status: resp.statusCode, body, issuer }));
    });
    req.on('error', (e) => res({ error: e.code || e.message }));
    req.end(opts.body);
});
const tls = async (name, { ip, caPem = ca, path = '/', body, extra = {} } = {}) => get(https, {
    host: ip || (await r.resolve4(name))[0], port: 443, servername: name, ca: caPem, agent, path, method: body ? 'POST' : 'GET', body,
    headers: { host: name, authorization: 'Bearer ${DECOY}', ...extra } });
const plain = async (name, path = '/') => get(http, { host: (await r.resolve4(name))[0], port: 80, path,
    headers: { host: name, authorization: 'Bearer ${DECOY}' } });
const one = (host, port, send) => new Promise((res) => {
    const s = net.connect(port, host, () => s.end(send));
    const chunks = [];
    s.on('data', (d) => chunks.push(d));
    s.on('error', (e) => res({ error: e.code, text: Buffer.concat(chunks).toString() }));
    s.on('close', () => res({ text: Buffer.concat(chunks).toString() }));
});
`;

const RULES = {
    allowOut: ['api.test', 'other.test', 'plain.test', 'bad.test'],
    rules: {
        'api.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.OPENAI}', 'X-Org': '${e2b.secrets.ORG}' } } }],
        'plain.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.OPENAI}' } } }],
        'bad.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.OPENAI}' } } }],
    },
};

test('intercept: the rule injects the vault secret into every HTTPS request; the sandbox holds only the decoy', async () => {
    await setup();
    const gw = await startGateway(RULES);
    try {
        const before = requests().length;
        const r = await inSandbox(`${client(gw.caOut)}
            (async () => {
                const a = await tls('api.test', { path: '/v1/one' });
                const b = await tls('api.test', { path: '/v1/two', body: 'x'.repeat(3 << 20) });
                const big = await tls('api.test', { path: '/big' });
                big.sha = require('crypto').createHash('sha256').update(Buffer.from(big.body, 'latin1')).digest('hex');
                big.len = big.body.length;
                delete big.body;
                console.log(JSON.stringify({ a, b, big }));
            })();`);
        assert.equal(r.a.status, 200, JSON.stringify(r));
        assert.equal(r.a.body, 'answer for /v1/one');
        assert.equal(r.b.body, 'answer for /v1/two');
        // the sandbox was shown the gateway's leaf, from its own CA
        assert.equal(r.a.issuer, 'agentbox egress CA isbx-itest');
        assert.equal(JSON.stringify(r).includes(SECRET), false, 'the sandbox never saw the secret');
        const seen = requests().slice(before);
        // 4 MiB down and 3 MiB up through the intercept, intact (backpressure both ways)
        const crypto = await import('node:crypto');
        const big = Buffer.alloc(4 << 20);
        for (let i = 0; i < big.length; i++) big[i] = (i * 7 + (i >> 12)) & 255;
        assert.equal(r.big.len, 4 << 20);
        assert.equal(r.big.sha, crypto.createHash('sha256').update(big).digest('hex'));
        assert.equal(seen.length, 3);
        for (const q of seen) {
            assert.equal(q.tag, 'public');
            assert.equal(q.auth, `Bearer ${SECRET}`, 'the decoy was replaced by the secret');
            assert.equal(q.org, 'org-42');
        }
        assert.equal(seen[1].body, 3 << 20, 'the body passed whole');
        assert.equal(seen[0].port, seen[1].port, 'the requests on one upstream connection (keep-alive)');
        assert.equal(seen[0].port, seen[2].port);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('intercept: plain HTTP on port 80 gets the header too; a host without rules is spliced unread', async () => {
    await setup();
    const gw = await startGateway(RULES);
    try {
        const before = requests().length;
        const r = await inSandbox(`${client(gw.caOut)}
            (async () => {
                const p = await plain('plain.test', '/p');
                const o = await tls('other.test', { caPem: fs.readFileSync(${JSON.stringify(path.join(dir, 'ca.pem'))}), path: '/o' });
                console.log(JSON.stringify({ p, o }));
            })();`);
        assert.equal(r.p.body, 'answer for /p');
        assert.equal(r.o.body, 'answer for /o');
        assert.equal(r.o.issuer, 'test ca CA', 'the real server certificate: not intercepted');
        const seen = requests().slice(before);
        assert.deepEqual(seen.map((q) => [q.tag, q.url, q.auth]), [
            ['plain', '/p', `Bearer ${SECRET}`],
            ['public', '/o', `Bearer ${DECOY}`],
        ]);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('intercept: an upstream that does not verify, and a rule name sent to another address, get nothing', async () => {
    await setup();
    const gw = await startGateway(RULES);
    try {
        const before = requests().length;
        const r = await inSandbox(`${client(gw.caOut)}
            (async () => {
                const bad = await tls('bad.test');
                // api.test's name, dialled at an address it does not resolve to
                const spoof = await tls('api.test', { ip: '${ROGUE}' });
                console.log(JSON.stringify({ bad, spoof }));
            })();`);
        assert.ok(r.bad.error, `bad.test must fail: ${JSON.stringify(r.bad)}`);
        assert.ok(r.spoof.error, `the spoofed name must fail: ${JSON.stringify(r.spoof)}`);
        assert.equal(requests().slice(before).length, 0, 'no request reached any server');
        await waitFor(() => gw.denials().length >= 2, { what: 'two refusals' });
        assert.deepEqual(gw.denials().map((d) => [d.denied, d.dst]), [
            ['intercept', `${ROGUE}:443`],
            ['not_allowed', `${ROGUE}:443`],
        ]);
        assert.match(gw.logs(), /upstream certificate of bad\.test did not verify/);
        await stopClean(gw);
    } finally {
        await gw.stop();
    }
});

test('egressProxy: allowed TCP goes through SOCKS5 with the login; a bad proxy fails closed with its reason', async () => {
    await setup();
    const proxied = async (proxy, send) => {
        const gw = await startGateway({ egressProxy: proxy });
        try {
            const r = await inSandbox(`${client(gw.caOut)}
                (async () => console.log(JSON.stringify(await one('${PUBLIC}', 8080, ${JSON.stringify(send)}))))();`);
            if (r.error === undefined && r.text === send) await stopClean(gw);
            r.logs = gw.logs();
            return { r, gw };
        } finally {
            await gw.stop();
        }
    };
    const logins = () => setup.server.logs().split('\n').filter((l) => l.startsWith('SOCKS ')).length;
    let n = logins();
    let { r } = await proxied({ address: `${PUBLIC}:1080`, username: 'u', password: 'p' }, 'through the proxy');
    assert.equal(r.text, 'through the proxy', `${JSON.stringify(r)} ${setup.server.logs()}`);
    const socks = setup.server.logs().split('\n').filter((l) => l.startsWith('SOCKS ')).slice(n);
    assert.deepEqual(socks, ['SOCKS LOGIN u', `SOCKS CONNECT ${PUBLIC}:8080`]);

    const refusedBy = async (proxy, reason) => {
        const { r: out, gw } = await proxied(proxy, 'never');
        assert.notEqual(out.text, 'never', `${reason}: nothing may come back`);
        await waitFor(() => gw.denials().length >= 1, { what: `the ${reason} refusal` });
        assert.deepEqual(gw.denials().map((d) => [d.denied, d.dst]), [[reason, `${PUBLIC}:8080`]]);
    };
    n = logins();
    await refusedBy({ address: `${PUBLIC}:1080`, username: 'u', password: 'wrong' }, 'proxy_auth');
    await refusedBy({ address: `${PUBLIC}:1080` }, 'proxy_auth'); // the proxy demands a login
    await refusedBy({ address: `${PUBLIC}:1081` }, 'proxy_not_socks');
    await refusedBy({ address: `${PUBLIC}:1082` }, 'proxy_unreachable');
    assert.equal(
        setup.server.logs().split('\n').filter((l) => l.startsWith('SOCKS CONNECT')).length,
        1,
        'no CONNECT after a failed login',
    );
});
