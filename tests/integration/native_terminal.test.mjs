// The sandbox terminal and log stream of the native API (issue 16, reference
// §4.1/§4.2): POST /v1/sandboxes/{id}/exec-token → {token} (single use, 30 s,
// Running only), GET /v1/sandboxes/{id}/terminal?token= — a WebSocket PTY
// shell through the sandbox's envd, authenticated by the token instead of the
// API key (reuse, expiry, another sandbox's token → 401), bytes both ways,
// resize, exit, and a closed socket kills the shell; GET .../logs/stream,
// NDJSON that follows the log until the sandbox goes. The WebSocket client is
// written out here (RFC 6455 framing over a raw socket). Needs root.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createKey, waitFor, assertSanitizerClean } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest, native, claim, waitPool, readSandboxState } from './lib/sandboxes.mjs';

let stack;
let alpha;
let manifests;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    manifests = manifestsDir([envManifest('term', ['alpha'], { replicas: 3 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'term-1c0gi', (s) => s.idle === 3, 'pool warm');
});

after(async () => {
    if (stack) await stack.stop();
    if (manifests) fs.rmSync(manifests, { recursive: true, force: true });
});

async function execToken(id, key = stack.key) {
    return native(alpha, key, 'POST', `/v1/sandboxes/${id}/exec-token`);
}

// Opens GET <path> as a WebSocket. Resolves {status, headers, ws} where ws
// (on 101) has send(bytes|string), text (all output so far), waitFor(re),
// closed (a promise of {code, reason}) and end().
function openWs(p) {
    const url = new URL(alpha.native + p);
    const key = crypto.randomBytes(16).toString('base64');
    return new Promise((resolve, reject) => {
        const sock = net.connect(Number(url.port), url.hostname);
        let buf = Buffer.alloc(0);
        let ws = null;
        sock.on('error', reject);
        sock.on('connect', () => {
            sock.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: ${url.host}\r\nUpgrade: websocket\r\n` +
                `Connection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\n\r\n`);
        });
        let refused = null; // a non-101 answer: {status, headers, want}
        const refusalDone = () => {
            if (buf.length < refused.want) return;
            sock.destroy();
            resolve({ status: refused.status, headers: refused.headers, body: buf.subarray(0, refused.want).toString() });
        };
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            if (refused) return refusalDone();
            if (!ws) {
                const end = buf.indexOf('\r\n\r\n');
                if (end < 0) return;
                const head = buf.subarray(0, end).toString();
                const status = Number(head.split(' ')[1]);
                const headers = {};
                for (const l of head.split('\r\n').slice(1)) {
                    const i = l.indexOf(':');
                    headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
                }
                buf = buf.subarray(end + 4);
                if (status !== 101) {
                    // a refusal: its body, by Content-Length (the connection may stay open)
                    refused = { status, headers, want: Number(headers['content-length'] || 0) };
                    return refusalDone();
                }
                const want = crypto.createHash('sha1').update(key + '258EAFA5-E914-47DA-95CA-C5AB0DC85B11').digest('base64');
                assert.equal(headers['sec-websocket-accept'], want);
                ws = makeWs(sock);
                resolve({ status, headers, ws });
            }
            ws.feed(buf);
            buf = Buffer.alloc(0);
        });
    });
}

function makeWs(sock) {
    let pending = Buffer.alloc(0);
    let closeResolve;
    const ws = {
        text: '',
        closed: new Promise((r) => { closeResolve = r; }),
        frame(op, payload) {
            const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
            const mask = crypto.randomBytes(4);
            const len = data.length;
            const head = len < 126 ? Buffer.from([0x80 | op, 0x80 | len])
                : Buffer.from([0x80 | op, 0x80 | 126, len >> 8, len & 255]);
            const masked = Buffer.from(data.map((b, i) => b ^ mask[i % 4]));
            sock.write(Buffer.concat([head, mask, masked]));
        },
        send(x) { this.frame(typeof x === 'string' && x.startsWith('{') ? 1 : 2, x); },
        control(obj) { this.frame(1, JSON.stringify(obj)); },
        feed(d) {
            pending = Buffer.concat([pending, d]);
            while (pending.length >= 2) {
                const op = pending[0] & 0x0f;
                let len = pending[1] & 0x7f;
                let off = 2;
                if (len === 126) { if (pending.length < 4) return; len = pending.readUInt16BE(2); off = 4; }
                else if (len === 127) { if (pending.length < 10) return; len = Number(pending.readBigUInt64BE(2)); off = 10; }
                if (pending.length < off + len) return;
                const payload = pending.subarray(off, off + len);
                pending = pending.subarray(off + len);
                if (op === 2 || op === 1) this.text += payload.toString('latin1');
                if (op === 8) closeResolve({ code: payload.readUInt16BE(0), reason: payload.subarray(2).toString() });
            }
        },
        async waitFor(re, what) {
            return waitFor(() => re.exec(this.text), { timeoutMs: 15000, intervalMs: 20, what: `${what}; output so far: ${JSON.stringify(this.text.slice(-300))}` });
        },
        end() { sock.destroy(); },
    };
    sock.on('close', () => closeResolve({ code: 1006, reason: 'socket closed' }));
    return ws;
}

async function shellAlive(id, pid) {
    const r = await native(alpha, stack.key, 'POST', `/v1/sandboxes/${id}/exec`, { command: `kill -0 ${pid}` });
    assert.equal(r.status, 200, r.text);
    return r.json.exitCode === 0;
}

test('exec-token opens one PTY shell: bytes both ways, resize, exit; reuse, expiry and another sandbox are 401', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'term' });
    const b = await claim(alpha, stack.key, { poolName: 'term' });
    const late = await execToken(a.sandboxId); // used after it expired, at the end
    assert.equal(late.status, 200, late.text);
    const issuedAt = Date.now();

    const t1 = await execToken(a.sandboxId);
    assert.equal(t1.status, 200, t1.text);
    assert.match(t1.json.token, /^abxt_[0-9a-f]{64}$/);

    // Not the API key, and not a token that was never issued.
    const nokey = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal`);
    assert.equal(nokey.status, 401);
    assert.match(JSON.parse(nokey.body).error, /missing exec token/);
    const forged = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=abxt_${'0'.repeat(64)}`);
    assert.equal(forged.status, 401);
    assert.equal(JSON.parse(forged.body).errorCode, 'UNAUTHORIZED');
    const apiKeyAsToken = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${encodeURIComponent(stack.key)}`);
    assert.equal(apiKeyAsToken.status, 401, 'the API key is not an exec token');

    // A's token on B: refused, and consumed.
    const tb = await execToken(a.sandboxId);
    const cross = await openWs(`/v1/sandboxes/${b.sandboxId}/terminal?token=${tb.json.token}`);
    assert.equal(cross.status, 401);
    assert.equal((await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${tb.json.token}`)).status, 401,
        'a token tried on another sandbox is used up');

    const { status, ws, body } = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${t1.json.token}&cols=100&rows=30`);
    assert.equal(status, 101, body);
    ws.send('echo hi-$((6*7)); tty\n');
    await ws.waitFor(/hi-42/, 'the shell answers');
    await ws.waitFor(/\/dev\/pts\/\d+/, 'a real PTY');
    ws.send('stty size\n');
    await ws.waitFor(/30 100/, 'the size asked for at open');
    ws.control({ resize: { cols: 123, rows: 45 } });
    ws.send('stty size\n');
    await ws.waitFor(/45 123/, 'the resize reached the PTY');
    ws.control({ input: 'echo via-$((1+1))-text\n' });
    await ws.waitFor(/via-2-text/, 'text input');

    // The token opened one terminal: a second open is refused.
    const again = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${t1.json.token}`);
    assert.equal(again.status, 401);
    assert.match(JSON.parse(again.body).error, /already used/);

    ws.send('exit 3\n');
    assert.deepEqual(await ws.closed, { code: 1000, reason: 'exited 3' });
    ws.end();

    // Expired: issued over 30 s ago and never used.
    await waitFor(() => Date.now() - issuedAt > 30500, { timeoutMs: 40000, intervalMs: 200, what: 'the token to age past 30 s' });
    const expired = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${late.json.token}`);
    assert.equal(expired.status, 401);
    assert.match(JSON.parse(expired.body).error, /expired/);

    for (const s of [a, b]) assert.equal((await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${s.sandboxId}`)).status, 202);
});

test('closing the WebSocket kills the shell; exec-token is the caller\'s own sandbox only and Running only', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'term' });
    const t = await execToken(a.sandboxId);
    const { status, ws, body } = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${t.json.token}`);
    assert.equal(status, 101, body);
    ws.send('echo shellpid=$$\n');
    const m = await ws.waitFor(/shellpid=(\d+)/, 'the shell pid');
    const pid = Number(m[1]);
    assert.ok(await shellAlive(a.sandboxId, pid), 'the shell runs while the socket is open');
    ws.end();
    await waitFor(async () => !(await shellAlive(a.sandboxId, pid)), { timeoutMs: 10000, what: 'the shell killed with its socket' });

    const stranger = await createKey(stack.pg.url, 'other-team', 'mallory');
    const r = await execToken(a.sandboxId, stranger.token);
    assert.equal(r.status, 404, r.text);
    assert.equal((await native(alpha, stack.key, 'POST', '/v1/sandboxes/nope/exec-token')).status, 404);
    assert.equal((await native(alpha, null, 'POST', `/v1/sandboxes/${a.sandboxId}/exec-token`)).status, 401);
    assert.equal((await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${a.sandboxId}`)).status, 202);
    const gone = await execToken(a.sandboxId);
    assert.ok(gone.status === 404 || gone.status === 409, gone.text);
});

// The host directory of sandbox id (its state record names it).
function sandboxDir(id) {
    const root = path.join(alpha.stateDir, 'sandboxes');
    for (const d of fs.readdirSync(root)) {
        try {
            const st = readSandboxState(path.join(root, d));
            if (st.info && st.info.id === id) return path.join(root, d);
        } catch {
            /* mid-spawn */
        }
    }
    throw new Error(`no directory for ${id}`);
}

test('logs/stream: NDJSON of the last lines, then each new one, until the sandbox goes', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'term' });
    const log = path.join(sandboxDir(a.sandboxId), 'data', 'envd.log'); // on the sandbox's own space
    fs.appendFileSync(log, '2026-01-01T00:00:00Z INFO before-stream-1\n2026-01-01T00:00:01Z INFO before-stream-2\n');

    assert.equal((await native(alpha, null, 'GET', `/v1/sandboxes/${a.sandboxId}/logs/stream`)).status, 401);
    const stranger = await createKey(stack.pg.url, 'other-team2', 'eve');
    assert.equal((await native(alpha, stranger.token, 'GET', `/v1/sandboxes/${a.sandboxId}/logs/stream`)).status, 404);
    assert.equal((await native(alpha, stack.key, 'GET', `/v1/sandboxes/${a.sandboxId}/logs/stream?lines=x`)).status, 400);

    const res = await fetch(`${alpha.native}/v1/sandboxes/${a.sandboxId}/logs/stream?lines=1`, { headers: { 'AGENTBOX-API-KEY': stack.key } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /application\/x-ndjson/);
    const reader = res.body.getReader();
    const lines = [];
    let partial = '';
    let ended = false;
    const pump = (async () => {
        const dec = new TextDecoder();
        for (;;) {
            const { value, done } = await reader.read();
            if (done) { ended = true; return; }
            partial += dec.decode(value, { stream: true });
            let i;
            while ((i = partial.indexOf('\n')) >= 0) {
                lines.push(JSON.parse(partial.slice(0, i)));
                partial = partial.slice(i + 1);
            }
        }
    })();
    await waitFor(() => lines.length >= 1, { what: 'the backlog line' });
    assert.match(lines[0].line, /before-stream-2/, 'lines=1: only the last line first');
    assert.equal(lines[0].timestamp, '2026-01-01T00:00:01.000Z');

    for (let k = 1; k <= 3; k++) fs.appendFileSync(log, `2026-01-01T00:00:0${k + 1}Z INFO after-${k}\n`);
    fs.appendFileSync(log, '2026-01-01T00:00:04Z INFO same-ms-second\n'); // the same millisecond as after-3
    await waitFor(() => lines.length >= 5, { what: `followed lines; got ${JSON.stringify(lines)}` });
    assert.deepEqual(lines.map((l) => l.line.split(' ').pop()), ['before-stream-2', 'after-1', 'after-2', 'after-3', 'same-ms-second']);

    assert.equal((await native(alpha, stack.key, 'DELETE', `/v1/sandboxes/${a.sandboxId}`)).status, 202);
    await waitFor(() => ended, { timeoutMs: 10000, what: 'the stream to end with the sandbox' });
    await pump;
    assert.equal(lines.length, 5, 'no line twice');
});

test('an agent stopped with a terminal and a log stream open exits clean (no leak, no use after free)', async () => {
    const a = await claim(alpha, stack.key, { poolName: 'term' });
    const t = await execToken(a.sandboxId);
    const { status, ws, body } = await openWs(`/v1/sandboxes/${a.sandboxId}/terminal?token=${t.json.token}`);
    assert.equal(status, 101, body);
    ws.send('echo ready-$((2*3))\n');
    await ws.waitFor(/ready-6/, 'the shell answers');
    const res = await fetch(`${alpha.native}/v1/sandboxes/${a.sandboxId}/logs/stream`, { headers: { 'AGENTBOX-API-KEY': stack.key } });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read(); // the stream is live
    await alpha.proc.stop();
    assertSanitizerClean(alpha.proc);
    await ws.closed;
    await reader.cancel().catch(() => {});
});
