// A minimal agent end of the hub tunnel (protocol v1, shared/include/agentbox/tunnel.h)
// for tests that play a cluster themselves: a rogue-but-registered cluster that
// calls the hub's internal API directly, and records whatever the hub sends it.
//
//   const t = await connectTunnel({ port, cluster, token, onRequest });
//   const r = await t.call('POST', '/internal/v1/keys/validate', { body: {hash} });
//   t.received  // every stream the hub opened to us: {service, method, path, headers, body}
//   t.pings     // Date.now() of every WebSocket ping from the hub (answered)
//   t.mute();   // stop answering anything, pings included: a silent agent
//   t.close();
//
// WebSocket (RFC 6455) client framing is done by hand over node:http's
// upgrade, so the test needs no package. Only what the tests use is
// implemented: no SYNC replies, no WINDOW accounting beyond a large window.
import http from 'node:http';
import crypto from 'node:crypto';

const T = { HELLO: 1, WELCOME: 2, OPEN: 3, RESPONSE: 4, DATA: 5, END: 6, RESET: 7, WINDOW: 8, REPORT: 9, EVENT: 10, SYNC: 11 };
const WINDOW = 8 * 1024 * 1024;

function wsFrame(opcode, payload) {
    const mask = crypto.randomBytes(4);
    const n = payload.length;
    let head;
    if (n < 126) head = Buffer.from([0x80 | opcode, 0x80 | n]);
    else if (n < 65536) { head = Buffer.alloc(4); head[0] = 0x80 | opcode; head[1] = 0x80 | 126; head.writeUInt16BE(n, 2); }
    else { head = Buffer.alloc(10); head[0] = 0x80 | opcode; head[1] = 0x80 | 127; head.writeBigUInt64BE(BigInt(n), 2); }
    const body = Buffer.alloc(n);
    for (let i = 0; i < n; i++) body[i] = payload[i] ^ mask[i & 3];
    return Buffer.concat([head, mask, body]);
}

function tunFrame(type, id, payload = Buffer.alloc(0)) {
    const h = Buffer.alloc(8);
    h[0] = 1; h[1] = type; h.writeUInt32BE(id, 4);
    return Buffer.concat([h, Buffer.isBuffer(payload) ? payload : Buffer.from(payload)]);
}

const pairs = (headers) => Object.entries(headers).map(([k, v]) => [k, String(v)]);

// Resolves once WELCOME arrived. onRequest(req) → {status, headers, body} answers
// a stream the hub opened (default 200 {}), after it was recorded in received.
export function connectTunnel({ port, cluster, token, onRequest }) {
    return new Promise((resolve, reject) => {
        const req = http.request({
            host: '127.0.0.1', port, path: '/v1/tunnel', agent: false,
            headers: {
                Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13',
                'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64'),
                'Sec-WebSocket-Protocol': 'agentbox.tunnel.v1',
                Authorization: `Bearer ${token}`, 'X-AgentBox-Cluster': cluster,
            },
        });
        req.on('response', (res) => reject(new Error(`tunnel upgrade refused: HTTP ${res.statusCode}`)));
        req.on('error', reject);
        req.on('upgrade', (res, sock, head) => {
            const t = {
                welcome: null, events: [], received: [], nextId: 1, pings: [], muted: false,
                calls: new Map(), served: new Map(), closed: false,
            };
            t.mute = () => { t.muted = true; };
            const send = (type, id, payload) => { if (!t.closed && !t.muted) sock.write(wsFrame(2, tunFrame(type, id, payload))); };
            const sendJson = (type, id, obj) => send(type, id, Buffer.from(JSON.stringify(obj)));
            t.close = () => { t.closed = true; sock.destroy(); };
            t.call = (method, path, { headers = {}, body, service = 'hub' } = {}) => new Promise((res2, rej2) => {
                const id = t.nextId; t.nextId += 2;
                const buf = body === undefined ? Buffer.alloc(0)
                    : Buffer.isBuffer(body) ? body : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
                const h = { ...headers };
                if (buf.length && !Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['Content-Type'] = 'application/json';
                t.calls.set(id, { resolve: res2, reject: rej2, status: 0, headers: [], chunks: [] });
                sendJson(T.OPEN, id, { service, method, path, headers: pairs(h), window: WINDOW });
                for (let o = 0; o < buf.length; o += 32768) send(T.DATA, id, buf.subarray(o, o + 32768));
                send(T.END, id);
            });
            const onTun = async (m) => {
                const type = m[1], id = m.readUInt32BE(4), p = m.subarray(8);
                if (type === T.WELCOME) { t.welcome = JSON.parse(p); resolve(t); return; }
                if (type === T.EVENT) { t.events.push(JSON.parse(p)); return; }
                if (type === T.SYNC || type === T.WINDOW) return;
                const c = t.calls.get(id);
                if (c) {
                    if (type === T.RESPONSE) { const r = JSON.parse(p); c.status = r.status; c.headers = r.headers; }
                    else if (type === T.DATA) { c.chunks.push(Buffer.from(p)); send(T.WINDOW, id, (() => { const b = Buffer.alloc(4); b.writeUInt32BE(p.length || 1); return b; })()); }
                    else if (type === T.END) {
                        t.calls.delete(id);
                        const body = Buffer.concat(c.chunks);
                        let json = null;
                        try { json = JSON.parse(body); } catch { /* not JSON */ }
                        c.resolve({ status: c.status, headers: Object.fromEntries(c.headers.map(([k, v]) => [k.toLowerCase(), v])), body, text: body.toString(), json });
                    } else if (type === T.RESET) { t.calls.delete(id); c.reject(new Error(`stream reset: ${p}`)); }
                    return;
                }
                if (type === T.OPEN) {
                    const o = JSON.parse(p);
                    t.served.set(id, { service: o.service, method: o.method, path: o.path, headers: o.headers, chunks: [] });
                    return;
                }
                const s = t.served.get(id);
                if (!s) return;
                if (type === T.DATA) s.chunks.push(Buffer.from(p));
                else if (type === T.RESET) t.served.delete(id);
                else if (type === T.END) {
                    t.served.delete(id);
                    const rec = { service: s.service, method: s.method, path: s.path, headers: s.headers, body: Buffer.concat(s.chunks).toString() };
                    t.received.push(rec);
                    const a = (onRequest && (await onRequest(rec))) || { status: 200, body: {} };
                    const out = Buffer.from(typeof a.body === 'string' ? a.body : JSON.stringify(a.body ?? {}));
                    sendJson(T.RESPONSE, id, { status: a.status, headers: pairs({ 'Content-Type': 'application/json', ...(a.headers || {}) }), window: WINDOW });
                    if (out.length) send(T.DATA, id, out);
                    send(T.END, id);
                }
            };
            // WebSocket framing from the server (unmasked), fragments reassembled
            let acc = head && head.length ? Buffer.from(head) : Buffer.alloc(0);
            let frag = [];
            const pump = () => {
                for (;;) {
                    if (acc.length < 2) return;
                    const fin = acc[0] & 0x80, op = acc[0] & 0x0f;
                    let n = acc[1] & 0x7f, off = 2;
                    if (n === 126) { if (acc.length < 4) return; n = acc.readUInt16BE(2); off = 4; }
                    else if (n === 127) { if (acc.length < 10) return; n = Number(acc.readBigUInt64BE(2)); off = 10; }
                    if (acc[1] & 0x80) off += 4; // a server never masks; tolerate it anyway
                    if (acc.length < off + n) return;
                    const payload = acc.subarray(off, off + n);
                    acc = acc.subarray(off + n);
                    if (op === 9) {
                        t.pings.push(Date.now());
                        if (!t.muted) sock.write(wsFrame(10, payload));
                        continue;
                    }
                    if (op === 8) { t.closed = true; sock.end(); return; }
                    if (op === 2 || op === 0) {
                        frag.push(Buffer.from(payload));
                        if (fin) { const m = Buffer.concat(frag); frag = []; onTun(m).catch(() => {}); }
                    }
                }
            };
            sock.on('data', (d) => { acc = Buffer.concat([acc, d]); pump(); });
            sock.on('error', () => {});
            sock.on('close', () => {
                t.closed = true;
                for (const c of t.calls.values()) c.reject(new Error('tunnel closed'));
                t.calls.clear();
                if (!t.welcome) reject(new Error('tunnel closed before WELCOME'));
            });
            sendJson(T.HELLO, 0, { cluster, version: 'test-rogue', protocol: 1, services: ['e2b', 'data', 'native'] });
            pump();
        });
        req.end();
    });
}

// --- assertions signed in the test, with the hub secret (shared/README.md "Assertions") ---

const b64u = (b) => Buffer.from(b).toString('base64url');

// The hub's Ed25519 key from its secret: HKDF-SHA256 seed, as
// asrt_signer_from_secret_gen (generation 0: the info has no number).
export function hubAssertionKey(secret, generation = 0) {
    const info = generation ? `ed25519 seed ${generation}` : 'ed25519 seed';
    const seed = Buffer.from(crypto.hkdfSync('sha256', Buffer.from(secret), Buffer.from('agentbox assertion signing key v1'),
        Buffer.from(info), 32));
    const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
    const priv = crypto.createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
    const raw = crypto.createPublicKey(priv).export({ format: 'der', type: 'spki' }).subarray(-32);
    const kid = crypto.createHash('sha256').update(raw).digest().subarray(0, 8).toString('hex');
    return { priv, kid, text: `ed25519:${kid}:${b64u(raw)}` };
}

// Signs claims (every member of assertion.h, in its order) with key.
export function signAssertion(key, c) {
    const payload = JSON.stringify({
        v: 1, kid: key.kid, key: c.key, team: c.team, user: c.user, ns: c.ns, role: c.role || 'tenant',
        mode: c.mode || 'unrestricted', aud: c.aud, rid: c.rid || 'test-rid', iat: c.iat, exp: c.exp,
    });
    const p = b64u(payload);
    const sig = crypto.sign(null, Buffer.concat([Buffer.from('agentbox-assertion-v1.'), Buffer.from(p)]), key.priv);
    return `${p}.${b64u(sig)}`;
}
