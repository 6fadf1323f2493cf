// The tunnel across a real network boundary: TLS with a CA made here, and a
// partition made with network namespaces (the agent in its own netns behind
// a veth pair; the link goes down and comes back).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
    startHub, httpJson, waitFor, run, tempDir, freePort,
    addCluster, startAgent, waitClusterOnline, spawnProc, agentBin, metricValue,
    adminHeaders,
} from './lib/harness.mjs';
import { cleanupsAfter, sharedDatabase, sh } from './lib/scaffold.mjs';

const cleanups = cleanupsAfter();
const database = sharedDatabase(cleanups);

test('TLS: the agent verifies the hub against a CA generated here', async () => {
    const pg = await database();
    const dir = tempDir('agentbox-tls-');
    const f = (n) => path.join(dir, n);
    await sh('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=agentbox test CA',
        '-keyout', f('ca.key'), '-out', f('ca.pem')]);
    await sh('openssl', ['req', '-newkey', 'rsa:2048', '-nodes', '-subj', '/CN=localhost',
        '-keyout', f('hub.key'), '-out', f('hub.csr')]);
    fs.writeFileSync(f('ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
    await sh('openssl', ['x509', '-req', '-in', f('hub.csr'), '-CA', f('ca.pem'), '-CAkey', f('ca.key'),
        '-CAcreateserial', '-days', '1', '-extfile', f('ext.cnf'), '-out', f('hub.pem')]);
    const hub = await startHub(pg.url, { args: ['--tls-cert', f('hub.pem'), '--tls-key', f('hub.key')] });
    cleanups.push(() => hub.proc.stop());
    const token = await addCluster(pg.url, 'tlsok');
    const good = await startAgent('tlsok', {
        hubUrl: `wss://localhost:${hub.tunnelPort}`, token, args: ['--hub-ca', f('ca.pem')],
    });
    cleanups.push(() => good.proc.stop());
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/tlsok/v1/ping`, { headers: await adminHeaders(hub.base) })).status === 200, {
        timeoutMs: 10000, what: 'tlsok reachable over wss',
    });

    // the default framing (wslay) runs its own TLS client over a raw socket
    // (tls_client.c); an agent of the old framing (lws's WebSocket client)
    // joins the same hub
    const token3 = await addCluster(pg.url, 'tlsold');
    const old = await startAgent('tlsold', {
        hubUrl: `wss://localhost:${hub.tunnelPort}`, token: token3, args: ['--hub-ca', f('ca.pem'), '--tunnel-framing', 'lws'],
    });
    cleanups.push(() => old.proc.stop());
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/tlsold/v1/ping`, { headers: await adminHeaders(hub.base) })).status === 200, {
        timeoutMs: 10000, what: 'tlsold (lws framing) reachable over wss',
    });

    // an agent that trusts another CA refuses the hub and keeps retrying
    await sh('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '1', '-subj', '/CN=other CA',
        '-keyout', f('other.key'), '-out', f('other.pem')]);
    const token2 = await addCluster(pg.url, 'tlsbad');
    const bad = await startAgent('tlsbad', {
        hubUrl: `wss://localhost:${hub.tunnelPort}`, token: token2, args: ['--hub-ca', f('other.pem')],
    });
    cleanups.push(() => bad.proc.stop());
    await waitFor(async () => (await metricValue(bad.e2b, 'agentbox_tunnel_reconnects_total')) >= 2, {
        timeoutMs: 10000, what: 'the agent with the wrong CA to keep failing (agentbox_tunnel_reconnects_total)',
    });
    assert.equal(await metricValue(bad.e2b, 'agentbox_tunnel_connected'), 0);
    // the refusal names the certificate (tls_client.c), not just "connection closed"
    assert.match(bad.proc.logs(), /certificate does not verify/);
    const r = await httpJson(`${hub.base}/api/clusters/tlsbad/v1/ping`, { headers: await adminHeaders(hub.base) });
    assert.equal(r.status, 503);
});

test('partition: the hub sees the cluster go offline, and the agent comes back by itself', async () => {
    const pg = await database();
    const tag = `abx${process.pid % 100000}`;
    const ns = `${tag}ns`, vh = `${tag}h`, vn = `${tag}n`;
    const octet = 100 + (process.pid % 100);
    const hubIp = `10.213.${octet}.1`, agentIp = `10.213.${octet}.2`;
    await sh('ip', ['netns', 'add', ns]);
    cleanups.push(() => run('ip', ['netns', 'del', ns]));
    await sh('ip', ['link', 'add', vh, 'type', 'veth', 'peer', 'name', vn]);
    cleanups.push(() => run('ip', ['link', 'del', vh]));
    await sh('ip', ['link', 'set', vn, 'netns', ns]);
    await sh('ip', ['addr', 'add', `${hubIp}/24`, 'dev', vh]);
    await sh('ip', ['link', 'set', vh, 'up']);
    await sh('ip', ['netns', 'exec', ns, 'ip', 'addr', 'add', `${agentIp}/24`, 'dev', vn]);
    await sh('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', vn, 'up']);
    await sh('ip', ['netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up']);

    const tport = await freePort();
    const hub = await startHub(pg.url, { tunnelPort: tport, args: ['--tunnel-listen', `${hubIp}:${tport}`, '--tunnel-timeout', '3s'] });
    cleanups.push(() => hub.proc.stop());
    const token = await addCluster(pg.url, 'island');
    const state = tempDir('agentbox-island-');
    const ports = [await freePort(), await freePort(), await freePort(), await freePort()];
    // nsenter joins only the network namespace: `ip netns exec` would also
    // remount /sys, hiding the cgroup controllers the local runtime requires.
    const agent = spawnProc('agent-island', 'nsenter', [`--net=/run/netns/${ns}`, agentBin(), 'serve',
        // ws:// to a veth address on this machine: not loopback, so it needs the opt-out
        '--cluster-id', 'island', '--state-dir', state, '--hub-url', `ws://${hubIp}:${tport}`, '--insecure-tunnel',
        '--e2b-listen', `127.0.0.1:${ports[0]}`, '--data-listen', `127.0.0.1:${ports[1]}`,
        '--native-listen', `127.0.0.1:${ports[2]}`, '--metrics-listen', `127.0.0.1:${ports[3]}`, '--tunnel-ping-interval', '1s', '--tunnel-timeout', '3s',
        '--reconnect-min', '100ms', '--reconnect-max', '1s'], { ...process.env, AGENTBOX_JOIN_TOKEN: token });
    cleanups.push(() => agent.stop());
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/island/v1/ping`, { headers: await adminHeaders(hub.base) })).status === 200, {
        timeoutMs: 15000, what: `island reachable through the tunnel\n${agent.logs()}`,
    });

    await sh('ip', ['link', 'set', vh, 'down']);
    // the hub notices the silence (3 s timeout) and the cluster goes offline
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/island/v1/ping`, { headers: await adminHeaders(hub.base) })).status === 503, {
        timeoutMs: 15000, what: 'island unreachable after the link went down',
    });
    const t0 = Date.now();
    const r = await httpJson(`${hub.base}/api/clusters/island/v1/ping`, { headers: await adminHeaders(hub.base) });
    assert.equal(r.status, 503);
    assert.match(r.json.message, /island/);
    assert.ok(Date.now() - t0 < 100, 'a request to an offline cluster fails fast');
    await waitFor(() => /hub silent; dropping the tunnel/.test(agent.logs()), {
        timeoutMs: 10000, what: "the agent's watchdog to drop the silent tunnel",
    });

    await sh('ip', ['link', 'set', vh, 'up']);
    await waitFor(async () => (await httpJson(`${hub.base}/api/clusters/island/v1/ping`, { headers: await adminHeaders(hub.base) })).status === 200, {
        timeoutMs: 15000, what: 'island back after the link returned',
    });
    await waitClusterOnline(hub.base, 'island', true, 5000);
});
