// Vault secrets injected on the way out, and network.egressProxy, from inside
// real sandboxes created with the unmodified e2b SDK (issue 12 part 2). A test
// network namespace behind a veth from the host stands in for the world: an
// HTTPS server for api.test with a certificate from a test CA (the agent is
// given that CA with --egress-upstream-ca), a SOCKS5 proxy with a login, an
// echo port and a resolver (198.18.215.0/24: public by the policy, reachable
// only on this machine, used by no other test file). The secret is stored in
// the hub's vault through the E2B API; the sandbox gets only the decoy in its
// envs. Checks: the server receives the secret in the rule's header; the
// secret is nowhere the sandbox can look (environment, /proc/*/environ, the
// files envd wrote, what the server answered) nor in the agent's log; the
// create's refusals; SOCKS5 through the proxy with its login, and a proxy
// that is not there failing closed. Nothing leaves this machine. Needs root.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { run, spawnProc, waitFor, tempDir, removeTempDir } from '../integration/lib/harness.mjs';

const tag = `${process.pid % 100000}`;
const INET = `abx-inse-${tag}`;
const HOSTIF = `abxs${tag}`;
const PUBLIC = '198.18.215.2';
const HOST = '198.18.215.1';
const SECRET = `sk-live-${tag}-0a1b2c3d4e5f60718293`;
const DECOY = 'sk-decoy-0000';

let stack;
let alpha;
let E2B;
let world;
let dir;
const made = [];
const cleanups = [];

async function sh(cmd, args, opts) {
    const r = await run(cmd, args, opts);
    assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the egress namespace needs root');
    dir = tempDir('abx-e2e-secrets-');
    fs.chmodSync(dir, 0o755);
    cleanups.push(() => removeTempDir(dir));
    const o = (args) => sh('openssl', args, { cwd: dir });
    await o(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '2',
        '-subj', '/CN=e2e test CA', '-keyout', 'ca.key', '-out', 'ca.pem',
        '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign']);
    fs.writeFileSync(path.join(dir, 'leaf.ext'), 'subjectAltName=DNS:api.test\nextendedKeyUsage=serverAuth\n');
    await o(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-subj', '/CN=api.test',
        '-keyout', 'leaf.key', '-out', 'leaf.csr']);
    await o(['x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-days', '2',
        '-out', 'leaf.pem', '-extfile', 'leaf.ext']);
    cleanups.push(() => run('ip', ['netns', 'del', INET]));
    cleanups.push(() => run('ip', ['link', 'del', HOSTIF]));
    await sh('ip', ['netns', 'add', INET]);
    await sh('ip', ['link', 'add', HOSTIF, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', INET]);
    await sh('ip', ['addr', 'add', `${HOST}/24`, 'dev', HOSTIF]);
    await sh('ip', ['link', 'set', HOSTIF, 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'addr', 'add', `${PUBLIC}/24`, 'dev', 'eth0']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'eth0', 'up']);
    await sh('ip', ['netns', 'exec', INET, 'ip', 'link', 'set', 'lo', 'up']);
    world = spawnProc('world', 'ip', ['netns', 'exec', INET, process.execPath, '-e', `
        const fs = require('fs'), net = require('net'), https = require('https');
        const rd = (f) => fs.readFileSync(${JSON.stringify(dir)} + '/' + f);
        https.createServer({ key: rd('leaf.key'), cert: rd('leaf.pem') }, (req, res) => {
            console.log('REQ ' + JSON.stringify({ url: req.url, auth: req.headers.authorization || null }));
            res.end('answer for ' + req.url); // never echoes what it received
        }).listen(443, '${PUBLIC}', () => console.log('listening 443'));
        net.createServer((s) => { s.on('data', (d) => s.write(d)); s.on('end', () => s.end()); s.on('error', () => {}); })
            .listen(8080, '${PUBLIC}', () => console.log('listening 8080'));
        // SOCKS5 with the login u/p (RFC 1928, RFC 1929), logging what it was asked
        net.createServer({ allowHalfOpen: true }, (c) => {
            let st = 'greet', buf = Buffer.alloc(0);
            c.on('error', () => {});
            c.on('data', (d) => {
                buf = Buffer.concat([buf, d]);
                if (st === 'greet' && buf.length >= 2 && buf.length >= 2 + buf[1]) {
                    const m = [...buf.slice(2, 2 + buf[1])];
                    buf = buf.slice(2 + buf[1]);
                    if (!m.includes(2)) return c.end(Buffer.from([5, 0xff]));
                    c.write(Buffer.from([5, 2]));
                    st = 'auth';
                }
                if (st === 'auth' && buf.length >= 3 + buf[1] && buf.length >= 3 + buf[1] + buf[2 + buf[1]]) {
                    const ul = buf[1], user = buf.slice(2, 2 + ul).toString(), pl = buf[2 + ul];
                    const pass = buf.slice(3 + ul, 3 + ul + pl).toString();
                    buf = buf.slice(3 + ul + pl);
                    if (user !== 'u' || pass !== 'p') return c.end(Buffer.from([1, 1]));
                    c.write(Buffer.from([1, 0]));
                    st = 'req';
                }
                if (st === 'req' && buf.length >= 10 && buf[3] === 1) {
                    const ip = [...buf.slice(4, 8)].join('.'), port = buf.readUInt16BE(8);
                    st = 'tunnel';
                    console.log('SOCKS CONNECT ' + ip + ':' + port);
                    const up = net.connect({ port, host: ip, allowHalfOpen: true }, () => {
                        c.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
                        c.pipe(up); up.pipe(c);
                    });
                    up.on('error', () => c.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0])));
                }
            });
        }).listen(1080, '${PUBLIC}', () => console.log('listening 1080'));
        const dns = require('dgram').createSocket('udp4');
        dns.on('message', (m, from) => {
            let o = 12, name = [];
            while (m[o]) { name.push(m.slice(o + 1, o + 1 + m[o]).toString()); o += m[o] + 1; }
            const qname = name.join('.').toLowerCase(), qtype = m.readUInt16BE(o + 1);
            const ok = qname === 'api.test' && qtype === 1;
            const q = m.slice(12, o + 5);
            const hdr = Buffer.from([m[0], m[1], 0x81, qname === 'api.test' ? 0x80 : 0x83, 0, 1, 0, ok ? 1 : 0, 0, 0, 0, 0]);
            const ans = ok ? Buffer.from([0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ${PUBLIC.split('.').join(', ')}]) : Buffer.alloc(0);
            dns.send(Buffer.concat([hdr, q, ans]), from.port, from.address);
        });
        dns.bind(53, '${PUBLIC}', () => console.log('listening dns'));
    `]);
    cleanups.push(() => world.stop());
    await waitFor(() => ['443', '8080', '1080', 'dns'].every((p) => world.logs().includes(`listening ${p}\n`)),
        { what: 'the stand-in world' });
    const manifests = manifestsDir([envManifest('eg', ['alpha'], { replicas: 1 })]);
    stack = await startStack({
        clusters: ['alpha'], manifests,
        agentArgs: ['--egress-resolver', `${PUBLIC}:53`, '--egress-upstream-ca', path.join(dir, 'ca.pem')],
    });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'eg-1c0gi', (s) => s.idle === 1, 'eg warm', 30000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
    // the secret goes into the hub's vault through the E2B API, write-only
    const r = await fetch(`${alpha.e2b}/secrets`, {
        method: 'POST', headers: { 'X-API-Key': stack.key, 'Content-Type': 'application/json' },
        body: JSON.stringify({ name: 'OPENAI', value: SECRET }),
    });
    assert.equal(r.status, 201, await r.text());
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

const RULES = {
    allowOut: ['api.test', `${PUBLIC}/32`],
    rules: { 'api.test': [{ transform: { headers: { Authorization: 'Bearer ${e2b.secrets.OPENAI}' } } }] },
};

// In the sandbox: two HTTPS requests to api.test with the decoy, trusting what
// envd installed (NODE_EXTRA_CA_CERTS), and what came back.
const CLIENT = `
const https = require('https');
const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
const get = (p) => new Promise((res) => {
    const req = https.request({ host: 'api.test', path: p, agent,
        headers: { authorization: 'Bearer ' + process.env.OPENAI_API_KEY } }, (r) => {
        let b = '';
        const issuer = (r.socket.getPeerCertificate().issuer || {}).CN;
        r.on('data', (d) => (b += d));
        r.on('end', () => res({ status: r.statusCode, body: b, issuer }));
    });
    req.on('error', (e) => res({ error: e.code || e.message }));
    req.end();
});
(async () => console.log(JSON.stringify([await get('/one'), await get('/two')])))();
`;

test('secrets: the rule puts the vault secret into the request; the sandbox only ever holds the decoy', async () => {
    const s = await create({ envs: { OPENAI_API_KEY: DECOY }, network: RULES });
    await s.files.write('/tmp/client.js', CLIENT);
    const n = world.logs().split('\n').filter((l) => l.startsWith('REQ ')).length;
    const r = await s.commands.run('node /tmp/client.js', { timeoutMs: 60000 });
    const out = JSON.parse(r.stdout);
    assert.deepEqual(out.map((x) => [x.status, x.body]), [[200, 'answer for /one'], [200, 'answer for /two']],
        r.stdout + r.stderr + logs());
    assert.match(out[0].issuer, /^agentbox egress CA /, 'the sandbox was shown the gateway leaf');
    const seen = world.logs().split('\n').filter((l) => l.startsWith('REQ ')).slice(n).map((l) => JSON.parse(l.slice(4)));
    assert.deepEqual(seen, [{ url: '/one', auth: `Bearer ${SECRET}` }, { url: '/two', auth: `Bearer ${SECRET}` }]);
    // what code inside sees: the decoy, and the secret nowhere it can look
    assert.equal((await s.commands.run('echo "$OPENAI_API_KEY"')).stdout, `${DECOY}\n`);
    const hunt = await s.commands.run(
        `cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c -F '${SECRET}';` +
        ` grep -r -l -F '${SECRET}' /tmp /home /etc /run 2>/dev/null | head -5; echo done`,
        { timeoutMs: 60000 });
    assert.equal(hunt.stdout, '0\ndone\n', hunt.stdout + hunt.stderr);
    assert.equal(r.stdout.includes(SECRET), false);
    assert.equal(alpha.proc.logs().includes(SECRET), false, 'the agent never logs the value');
    await s.kill();
});

test('secrets: the create refuses rules it cannot honour, naming why', async () => {
    const bad = async (network, words) => {
        await assert.rejects(create({ network }), (e) => {
            assert.ok(e.message.includes(words), `"${e.message}" lacks "${words}"`);
            return true;
        });
    };
    const rule = (host, value) => ({ [host]: [{ transform: { headers: { Authorization: value } } }] });
    await bad({ allowOut: ['api.test'], rules: rule('api.test', 'Bearer sk-plaintext') }, 'literal value');
    await bad({ allowOut: ['*.test'], rules: rule('*.test', 'Bearer ${e2b.secrets.OPENAI}') }, 'wildcard');
    await bad({ allowOut: ['api.test'], rules: rule('other.test', 'Bearer ${e2b.secrets.OPENAI}') }, 'other.test');
    await bad({ allowOut: ['api.test'], rules: rule('api.test', 'Bearer ${e2b.secrets.NOPE}') }, 'unknown secret "nope"'); // names are case-insensitive
});

test('egressProxy: TCP goes through the SOCKS5 proxy with its login; a proxy that is not there fails closed', async () => {
    const s = await create({ network: { egressProxy: { address: `${PUBLIC}:1080`, username: 'u', password: 'p' } } });
    const client = (port) => `node -e "const s=require('net').connect(${port},'${PUBLIC}',()=>s.end('via proxy'));let b='';s.on('data',d=>b+=d);s.on('error',e=>{console.log('ERR '+e.code)});s.on('close',()=>console.log('GOT '+b))"`;
    const n = world.logs().split('\n').filter((l) => l.startsWith('SOCKS CONNECT')).length;
    const r = await s.commands.run(client(8080), { timeoutMs: 30000 });
    assert.match(r.stdout, /GOT via proxy/, r.stdout + r.stderr + logs());
    assert.deepEqual(world.logs().split('\n').filter((l) => l.startsWith('SOCKS CONNECT')).slice(n), [`SOCKS CONNECT ${PUBLIC}:8080`]);
    await s.kill();
    const gone = await create({ network: { egressProxy: { address: `${PUBLIC}:1081` } } });
    const g = await gone.commands.run(client(8080), { timeoutMs: 30000 });
    assert.doesNotMatch(g.stdout, /GOT via proxy/, g.stdout);
    await waitFor(() => /reason="?proxy_unreachable/.test(alpha.proc.logs()) || /proxy_unreachable/.test(alpha.proc.logs()),
        { what: 'the proxy_unreachable refusal logged' });
    await gone.kill();
});
