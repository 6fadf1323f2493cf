// The egress namespace (agent/egress/netns.c) with namespaces made here only:
// a "sandbox" netns, the egress netns, a stand-in gateway listening inside the
// egress netns. A TCP connect from the sandbox to an arbitrary address lands on
// the gateway port with its original destination intact; DNS lands on the DNS
// port; other UDP is dropped; the host's own namespace gets no interface and
// no rule; everything is gone afterwards. Every address is inside the test's
// namespaces (198.51.100.0/24 is TEST-NET-2 and the egress netns has no route
// anywhere), so nothing leaves this machine. Needs root.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { run, spawnProc, waitFor, buildDir } from './lib/harness.mjs';
import { cleanupsAfter, sh } from './lib/scaffold.mjs';

const driver = path.join(buildDir(), 'test_agent_egress_netns');
const tag = `${process.pid % 100000}`;
const EG = `abx-egtest-${tag}`;
const SB = `abx-sbtest-${tag}`;
const RANGE = '10.215.0.0/24';
const TCP = 15001;
const DNS = 15053;
const UDP = 9999;
const SLOT = 3;
const cfg = [EG, RANGE, String(TCP), String(DNS)];

const cleanups = cleanupsAfter();

const inNs = (ns, cmd, args) => run('ip', ['netns', 'exec', ns, cmd, ...args]);

// What this test could have put into the host's own namespace: interfaces of
// its veth (by name or by a peer in its namespaces) and the egress table.
// Other tests may change the host's namespace meanwhile, so only ours count.
async function hostLeftovers() {
    const links = (await sh('ip', ['-o', 'link', 'show']))
        .split('\n')
        .filter((l) => /^\d+: eg\d+[@:]/.test(l) || l.includes(EG) || l.includes(SB));
    const nft = (await sh('nft', ['list', 'ruleset'])).includes('agentbox_egress');
    return { links, nft };
}

// Runs a node script inside the sandbox netns; resolves its stdout.
async function inSandbox(script) {
    const r = await inNs(SB, process.execPath, ['-e', script]);
    assert.equal(r.code, 0, `sandbox script failed: ${r.stderr}`);
    return r.stdout;
}

test('egress netns: redirect TCP and DNS to the gateway, drop other UDP, leave the host alone', async () => {
    assert.ok(fs.existsSync(driver), `${driver} is built`);
    assert.deepEqual(await hostLeftovers(), { links: [], nft: false }, 'a clean host to start');

    await sh('ip', ['netns', 'add', SB]);
    cleanups.push(() => run('ip', ['netns', 'del', SB]));
    cleanups.push(() => run('ip', ['netns', 'del', EG]));

    await sh(driver, ['create', ...cfg]);
    const link = JSON.parse(await sh(driver, ['attach', ...cfg, String(SLOT), `/run/netns/${SB}`]));
    assert.deepEqual(link, { egress_if: `eg${SLOT}`, gateway: '10.215.0.13', sandbox: '10.215.0.14' });

    // the rules are there, in the egress namespace only
    const rules = await sh('ip', ['netns', 'exec', EG, 'nft', 'list', 'table', 'inet', 'agentbox_egress']);
    assert.match(rules, new RegExp(`udp dport 53 redirect to :${DNS}`));
    assert.match(rules, new RegExp(`meta l4proto tcp redirect to :${TCP}`));
    assert.match(rules, /hook input priority filter; policy drop;/);
    assert.match(rules, /hook forward priority filter; policy drop;/);
    assert.deepEqual(await hostLeftovers(), { links: [], nft: false }, 'nothing in the host namespace');
    // the sandbox sees one veth and a default route via the gateway
    const sbRoutes = await sh('ip', ['netns', 'exec', SB, 'ip', 'route', 'show', 'default']);
    assert.match(sbRoutes, /default via 10\.215\.0\.13 dev eth0/);

    // a second create (a restarted agent) adopts: one table, the link kept
    await sh(driver, ['create', ...cfg]);
    const again = await sh('ip', ['netns', 'exec', EG, 'nft', 'list', 'ruleset']);
    assert.equal(again.split('table inet agentbox_egress').length - 1, 1);
    await sh('ip', ['netns', 'exec', EG, 'ip', 'link', 'show', 'dev', `eg${SLOT}`]);

    const gw = spawnProc('gateway', driver, ['listen', ...cfg, String(UDP)]);
    cleanups.push(() => gw.stop());
    await waitFor(() => gw.logs().includes('ready'), { what: 'stand-in gateway ready' });
    const events = () =>
        gw
            .logs()
            .split('\n')
            .filter((l) => l.startsWith('{'))
            .map((l) => JSON.parse(l));

    // TCP to an arbitrary address, and to the gateway's own address on another port
    const tcp = await inSandbox(`
        const net = require('net');
        const one = (host, port) => new Promise((res) => {
            const s = net.connect(port, host);
            let got = '';
            s.on('data', (d) => (got += d));
            s.on('close', () => res(got.trim()));
            s.on('error', (e) => res('error ' + e.code));
        });
        (async () => {
            console.log(await one('198.51.100.7', 443));
            console.log(await one('10.215.0.13', 22));
            console.log(await one('127.0.0.1', ${TCP}));
        })();`);
    assert.deepEqual(tcp.trim().split('\n'), ['gateway', 'gateway', 'error ECONNREFUSED']);
    await waitFor(() => events().filter((e) => e.tcp).length >= 2, { what: 'two TCP connections' });
    assert.deepEqual(
        events().filter((e) => e.tcp).map((e) => e.orig),
        ['198.51.100.7:443', '10.215.0.13:22'],
    );

    // UDP: two non-DNS datagrams, then a DNS query, in this order on one path.
    // Once the DNS query has arrived, the earlier datagrams would have too.
    await inSandbox(`
        const u = require('dgram').createSocket('udp4');
        const send = (m, p, h) => new Promise((r) => u.send(m, p, h, r));
        (async () => {
            await send('lost-far', ${UDP}, '198.51.100.7');
            await send('lost-gw', ${UDP}, '10.215.0.13');
            await send('query', 53, '198.51.100.7');
            u.close();
        })();`);
    await waitFor(() => events().some((e) => e.dns === 'query'), { what: 'the DNS query at the gateway' });
    assert.deepEqual(events().filter((e) => e.udp !== undefined), [], 'non-DNS UDP was dropped');
    await gw.stop();

    // teardown: both ends of the veth, then the namespace
    await sh(driver, ['detach', ...cfg, String(SLOT)]);
    assert.notEqual((await inNs(EG, 'ip', ['link', 'show', 'dev', `eg${SLOT}`])).code, 0);
    assert.notEqual((await inNs(SB, 'ip', ['link', 'show', 'dev', 'eth0'])).code, 0);
    await sh(driver, ['detach', ...cfg, String(SLOT)]); // absent is fine
    await sh(driver, ['destroy', ...cfg]);
    assert.equal(fs.existsSync(`/run/netns/${EG}`), false);
    await sh(driver, ['destroy', ...cfg]); // absent is fine
    assert.deepEqual(await hostLeftovers(), { links: [], nft: false });
});

test('egress netns: a bad sandbox namespace path is an error that names it, and leaves nothing', async () => {
    cleanups.push(() => run('ip', ['netns', 'del', EG]));
    await sh(driver, ['create', ...cfg]);
    const r = await run(driver, ['attach', ...cfg, '1', '/run/netns/does-not-exist']);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /sandbox network namespace \/run\/netns\/does-not-exist/);
    assert.notEqual((await inNs(EG, 'ip', ['link', 'show', 'dev', 'eg1'])).code, 0);
    const bad = await run(driver, ['create', '../x', RANGE, String(TCP), String(DNS)]);
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /egress namespace name/);
    await sh(driver, ['destroy', ...cfg]);
});
