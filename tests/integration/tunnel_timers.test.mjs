// The hub's session timers (issue 17): every session is pinged on the hub's
// timer wheel at its interval (a third of --tunnel-timeout, here 1 s), and
// a session that stops answering is dropped after the timeout while the
// others stay. A wheel that lost timers (or fired them only once) fails the
// ping counts; one that never checked liveness keeps the mute session.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startPostgres, runMigrate, startHub, addCluster, waitFor, metricValue } from './lib/harness.mjs';
import { connectTunnel } from './lib/tunnel_client.mjs';

const cleanups = [];
after(async () => {
    for (const c of cleanups.reverse()) await c();
});

test('every session is pinged each interval; a silent one is dropped, the others stay', async () => {
    const pg = await startPostgres();
    cleanups.push(() => pg.cleanup());
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    const hub = await startHub(pg.url, { args: ['--tunnel-timeout', '3s'] });
    cleanups.push(() => hub.proc.stop());
    const N = 8;
    const tokens = [];
    for (let i = 0; i < N; i++) tokens.push(await addCluster(pg.url, `wheel-${i}`));
    const clients = [];
    for (let i = 0; i < N; i++) {
        // the hub learns of new clusters on its next registry sync: retry until it does
        clients.push(await waitFor(async () => {
            try {
                return await connectTunnel({ port: hub.tunnelPort, cluster: `wheel-${i}`, token: tokens[i] });
            } catch (e) {
                if (/HTTP 401/.test(e.message)) return null;
                throw e;
            }
        }, { timeoutMs: 15000, what: `wheel-${i} accepted on the tunnel` }));
    }
    cleanups.push(() => clients.forEach((c) => c.close()));
    await waitFor(async () => (await metricValue(hub.base, 'agentbox_tunnel_sessions_online')) === N, {
        timeoutMs: 10000, what: `${N} sessions online`,
    });

    // pings keep coming to every session (not one ping, then nothing)
    const start = clients.map((c) => c.pings.length);
    await waitFor(() => clients.every((c, i) => c.pings.length >= start[i] + 3), {
        timeoutMs: 15000, what: 'three more pings on every session',
    });
    for (const c of clients) {
        const gaps = c.pings.slice(1).map((t, i) => t - c.pings[i]);
        // 1 s apart; generous on a loaded machine, but never a burst of pings
        assert.ok(gaps.every((g) => g >= 500), `pings at least 0.5 s apart: ${gaps}`);
    }

    // one agent goes silent: dropped after the 3 s timeout, the others stay
    const mute = clients[0];
    mute.mute();
    const t0 = Date.now();
    await waitFor(() => mute.closed, { timeoutMs: 15000, what: 'the hub to drop the silent session' });
    assert.ok(Date.now() - t0 >= 2000, `dropped only after the silence lasted the timeout (${Date.now() - t0} ms)`);
    await waitFor(async () => (await metricValue(hub.base, 'agentbox_tunnel_sessions_online')) === N - 1, {
        timeoutMs: 10000, what: `${N - 1} sessions online`,
    });
    const before = clients.slice(1).map((c) => c.pings.length);
    await waitFor(() => clients.slice(1).every((c, i) => c.pings.length >= before[i] + 2), {
        timeoutMs: 15000, what: 'the others still pinged',
    });
    assert.ok(clients.slice(1).every((c) => !c.closed), 'the answering sessions stay up');
});
