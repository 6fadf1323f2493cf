// The hub's tunnel input budget (issue 17): past a few milliseconds of
// tunnel input in one loop turn, a session's input waits for a later turn
// with its socket paused, so a burst of reports from thousands of agents does
// not hold every timer and HTTP answer behind it. What must hold while it
// does: every report is applied (nothing dropped), every session stays up (a
// byte out of order or lost breaks the WebSocket framing and drops the
// session), and the hub answers /healthz meanwhile. The deferral counter
// proves the burst really went past the budget; without the budget the test
// fails on it.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { startPostgres, runMigrate, startHub, waitFor, metricValue, httpGet, tempDir } from './lib/harness.mjs';
import { registerClusters, startClient } from './lib/simagents.mjs';

const cleanups = [];
after(async () => {
    for (const c of cleanups.reverse()) await c();
});

const AGENTS = 3000;

test('a burst of reports past the turn budget waits, and every report is applied in order', async () => {
    const pg = await startPostgres();
    cleanups.push(() => pg.cleanup());
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    const dir = tempDir('agentbox-budget-');
    const agentsFile = await registerClusters(pg, dir, AGENTS);
    const hub = await startHub(pg.url);
    cleanups.push(() => hub.proc.stop());
    const client = startClient(hub, agentsFile, dir, 1000);
    cleanups.push(() => client.quit());

    client.send(`target ${AGENTS}`);
    const ready = await client.next('ready', 120000);
    assert.equal(ready.established, AGENTS, JSON.stringify(ready));

    // each 100 ms, 60 agents report at once (ten records each)
    await waitFor(async () => (await metricValue(hub.base, 'agentbox_tunnel_rx_deferred_total')) > 0, {
        timeoutMs: 60000, intervalMs: 250, what: 'tunnel input deferred past the turn budget',
    });
    const hz = await httpGet(`${hub.base}/healthz`);
    assert.equal(hz.status, 200, 'the hub answers while input waits');

    client.send('hold');
    // the hold is taken on the client's loop: a stats line after it counts every report sent
    client.send('stats');
    const st = await client.next('stats', 10000);
    assert.ok(st.reports > 0, JSON.stringify(st));
    const applied = () => metricValue(hub.base, 'agentbox_federation_reports_total{outcome="applied"}');
    await waitFor(async () => (await applied()) === st.reports, {
        timeoutMs: 30000, intervalMs: 200,
        what: `the hub applying all ${st.reports} reports sent`,
    }).catch(async (e) => {
        throw new Error(`${e.message}: applied ${await applied()}`);
    });
    assert.equal(await metricValue(hub.base, 'agentbox_federation_reports_total{outcome="refused"}') ?? 0, 0);
    assert.equal(st.drops, 0, 'no session dropped');
    assert.equal(st.established, AGENTS);
    assert.equal(await metricValue(hub.base, 'agentbox_tunnel_sessions_online'), AGENTS);
});
