// Protocol v1 on the wire is RFC 6455 whichever framing a side runs
// (--tunnel-framing: wslay on raw sockets, the default, or lws's WebSocket
// role, the code of before): an agent of the old framing joins a hub of the
// new one and the other way round, a relay crosses both, the refusal still
// names the status, and a hub close still reaches the old agent with its
// reason. Plain ws:// here; tunnel_net.test.mjs covers wss://.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import net from 'node:net';
import {
    startHub, httpGet, waitFor, addCluster, startAgent,
    waitClusterOnline, metricValue, adminHeaders,
} from './lib/harness.mjs';
import { cleanupsAfter, sharedDatabase } from './lib/scaffold.mjs';

const cleanups = cleanupsAfter();
const database = sharedDatabase(cleanups);

async function hubWith(framing) {
    const pg = await database();
    const hub = await startHub(pg.url, { args: ['--tunnel-framing', framing] });
    cleanups.push(() => hub.proc.stop());
    await waitFor(() => new RegExp(`framing=${framing}`).test(hub.proc.logs()), { what: `the hub on ${framing} framing` });
    return { pg, hub };
}

async function agentWith(pg, hub, id, framing, extra = []) {
    const token = await addCluster(pg.url, id);
    const a = await startAgent(id, {
        hubUrl: hub.tunnelUrl, token, args: ['--tunnel-framing', framing, '--enable-diag', ...extra],
    });
    cleanups.push(() => a.proc.stop());
    return { agent: a, token };
}

// 4 MiB through alpha → hub → beta, byte-exact (diag/bytes is a fixed pattern).
async function relayBytes(hub, from, to) {
    const headers = await adminHeaders(hub.base);
    const n = 4 << 20;
    const r = await httpGet(`${from.native}/v1/relay/${to}/native/v1/diag/bytes?n=${n}`, { headers, timeoutMs: 30000 });
    assert.equal(r.status, 200, String(r.body).slice(0, 300));
    assert.equal(r.body.length, n);
    const direct = await httpGet(`${from.native}/v1/diag/bytes?n=${n}`, { headers, timeoutMs: 30000 });
    assert.equal(direct.status, 200);
    assert.ok(r.body === direct.body, 'relayed bytes differ from the pattern');
}

for (const [hubF, oldF] of [['wslay', 'lws'], ['lws', 'wslay']]) {
    test(`a ${oldF}-framed agent joins a ${hubF}-framed hub; a relay crosses both framings`, async () => {
        const { pg, hub } = await hubWith(hubF);
        const { agent: alpha } = await agentWith(pg, hub, `a${hubF}`, oldF);
        const { agent: beta } = await agentWith(pg, hub, `b${hubF}`, hubF);
        await waitClusterOnline(hub.base, `a${hubF}`, true, 15000);
        await waitClusterOnline(hub.base, `b${hubF}`, true, 15000);
        await relayBytes(hub, alpha, `b${hubF}`);
        await relayBytes(hub, beta, `a${hubF}`);
        // the hub's pings reach the agent of the other framing and are answered
        assert.equal(await metricValue(alpha.e2b, 'agentbox_tunnel_connected'), 1);
    });
}

test('an lws-framed agent with a wrong token reads the wslay hub\'s 401', async () => {
    const { pg, hub } = await hubWith('wslay');
    await addCluster(pg.url, 'oldbad');
    const bad = 'abxc_' + '1'.repeat(64);
    const a = await startAgent('oldbad', { hubUrl: hub.tunnelUrl, token: bad, args: ['--tunnel-framing', 'lws'] });
    cleanups.push(() => a.proc.stop());
    await waitFor(() => /HTTP 401/.test(a.proc.logs()), { timeoutMs: 10000, what: 'the old agent to log HTTP 401' });
    assert.match(a.proc.logs(), /join-token/);
});

test('a superseded lws-framed agent reads the wslay hub\'s close reason', async () => {
    const { pg, hub } = await hubWith('wslay');
    const { agent: first, token } = await agentWith(pg, hub, 'twin', 'lws');
    await waitClusterOnline(hub.base, 'twin', true, 15000);
    const second = await startAgent('twin', { hubUrl: hub.tunnelUrl, token, args: ['--tunnel-framing', 'wslay'] });
    cleanups.push(() => second.proc.stop());
    await waitFor(() => /superseded/.test(first.proc.logs()), { timeoutMs: 15000, what: 'the first agent to log superseded' });
});

test('the wslay hub refuses a plain HTTP request and a text frame', async () => {
    const { pg, hub } = await hubWith('wslay');
    const r = await httpGet(`http://127.0.0.1:${hub.tunnelPort}/v1/tunnel`);
    assert.equal(r.status, 426);
    assert.match(String(r.body), /agentbox.tunnel.v1/);
    // an upgraded connection that sends a text frame is closed by the hub
    const token = await addCluster(pg.url, 'texter');
    const upgrade = () => new Promise((res, rej) => {
        const sock = net.connect(hub.tunnelPort, '127.0.0.1');
        const st = { sock, got: Buffer.alloc(0), ended: false };
        sock.on('data', (d) => {
            st.got = Buffer.concat([st.got, d]);
            if (st.got.includes('\r\n\r\n')) res(st);
        });
        sock.on('close', () => { st.ended = true; });
        sock.on('error', rej);
        sock.write(`GET /v1/tunnel HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
            `Sec-WebSocket-Key: ${crypto.randomBytes(16).toString('base64')}\r\nSec-WebSocket-Version: 13\r\n` +
            `Sec-WebSocket-Protocol: agentbox.tunnel.v1\r\nAuthorization: Bearer ${token}\r\nX-AgentBox-Cluster: texter\r\n\r\n`);
    });
    // the hub picks a new cluster up within 2 s: 401 until then
    const st = await waitFor(async () => {
        const u = await upgrade();
        if (/^HTTP\/1\.1 101 /.test(u.got.toString('latin1'))) return u;
        u.sock.destroy();
        return null;
    }, { timeoutMs: 10000, what: 'the 101 for texter' });
    cleanups.push(() => st.sock.destroy());
    const sock = st.sock;
    const mask = crypto.randomBytes(4);
    const text = Buffer.from('{"hello":1}');
    sock.write(Buffer.concat([Buffer.from([0x81, 0x80 | text.length]), mask, Buffer.from(text.map((b, i) => b ^ mask[i & 3]))]));
    await waitFor(() => st.ended, { timeoutMs: 5000, what: 'the hub to close the connection' });
    const close = st.got.indexOf(Buffer.from([0x88]));
    assert.ok(close > 0, 'a close frame came before the end');
    assert.match(st.got.subarray(close).toString('latin1'), /text frames are not part of the protocol/);
});
