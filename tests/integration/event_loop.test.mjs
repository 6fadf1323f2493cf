// --event-loop (shared/src/loop.c): the hub and the agent wait on libev's
// epoll loop by default (lws's libev plugin, our ev_loop as lws's foreign
// loop) and on lws's poll(2) with --event-loop=poll. Each process says which
// on /metrics (agentbox_event_loop_info) and in its log; the kernel says it
// too: on libev the process's epoll set holds its sockets, on poll it holds
// none. Either way a tunnel comes up, a relay crosses the hub byte-exact and
// the process exits clean (LeakSanitizer at exit).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import {
    startHub, httpGet, addCluster, startAgent, waitClusterOnline,
    metricValue, adminHeaders, assertSanitizerClean, run, hubBin, hubSecret,
} from './lib/harness.mjs';
import { cleanupsAfter, sharedDatabase } from './lib/scaffold.mjs';

const cleanups = cleanupsAfter();
const database = sharedDatabase(cleanups);

// Descriptors registered in the process's epoll sets: one "tfd:" line each in
// /proc/PID/fdinfo of an anon_inode:[eventpoll] descriptor.
function epollWatched(pid) {
    let n = 0;
    for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
        let target;
        try {
            target = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
        } catch {
            continue; /* closed meanwhile */
        }
        if (target !== 'anon_inode:[eventpoll]') continue;
        const info = fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8');
        n += (info.match(/^tfd:/gm) || []).length;
    }
    return n;
}

const info = (loop, backend) => `agentbox_event_loop_info{loop="${loop}",backend="${backend}"}`;

async function assertOn(proc, base, loop) {
    const backend = loop === 'libev' ? 'epoll' : 'poll';
    const other = loop === 'libev' ? info('poll', 'poll') : info('libev', 'epoll');
    assert.equal(await metricValue(base, info(loop, backend)), 1, `${proc.name} on ${loop}`);
    assert.equal(await metricValue(base, other), null, `${proc.name} shows no other loop`);
    assert.match(proc.logs(), new RegExp(`msg="event loop" loop=${loop} backend=${backend}`));
}

async function relayBytes(hub, from, to) {
    const headers = await adminHeaders(hub.base);
    const n = 2 << 20;
    const r = await httpGet(`${from.native}/v1/relay/${to}/native/v1/diag/bytes?n=${n}`, { headers, timeoutMs: 30000 });
    assert.equal(r.status, 200, String(r.body).slice(0, 300));
    const direct = await httpGet(`${from.native}/v1/diag/bytes?n=${n}`, { headers, timeoutMs: 30000 });
    assert.equal(direct.status, 200);
    assert.equal(r.body.length, n);
    assert.ok(r.body === direct.body, 'relayed bytes differ from the pattern');
}

for (const loop of ['libev', 'poll']) {
    test(`hub and agents on ${loop}: tunnels, a relay, a clean exit (the hub's default is libev, the agent's poll)`, async () => {
        const pg = await database();
        /* each default is taken without a flag: the hub's libev, the agent's poll */
        const hubFlag = loop === 'libev' ? [] : ['--event-loop', 'poll'];
        const flag = loop === 'libev' ? ['--event-loop', 'libev'] : [];
        const hub = await startHub(pg.url, { args: hubFlag });
        cleanups.push(() => hub.proc.stop());
        const agents = [];
        for (const id of [`a${loop}`, `b${loop}`]) {
            const token = await addCluster(pg.url, id);
            const a = await startAgent(id, { hubUrl: hub.tunnelUrl, token, args: [...flag, '--enable-diag'] });
            cleanups.push(() => a.proc.stop());
            agents.push(a);
        }
        for (const a of agents) await waitClusterOnline(hub.base, a.id, true, 15000);

        await assertOn(hub.proc, hub.base, loop);
        for (const a of agents) await assertOn(a.proc, a.e2b, loop);
        // the hub's listeners, its wake-up pipe and both tunnels are in its epoll
        // set on libev; on poll nothing is
        const watched = epollWatched(hub.proc.pid);
        if (loop === 'libev') assert.ok(watched >= 5, `hub epoll set holds ${watched} descriptors`);
        else assert.equal(watched, 0, 'the poll hub registers nothing with epoll');

        await relayBytes(hub, agents[0], agents[1].id);
        await relayBytes(hub, agents[1], agents[0].id);

        for (const p of [...agents.map((a) => a.proc), hub.proc]) {
            const r = await p.stop();
            assert.equal(r.code, 0, `${p.name} exits 0 on SIGTERM (${JSON.stringify(r)})`);
            assertSanitizerClean(p);
        }
    });
}

test('an --event-loop that is neither libev nor poll is refused, naming the option', async () => {
    const r = await run(hubBin(), ['serve', '--event-loop', 'epoll'], {
        env: { ...process.env, DATABASE_URL: 'postgresql://127.0.0.1:1/none', AGENTBOX_HUB_SECRET: hubSecret },
    });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, /event_loop 'epoll' must be libev or poll/);
});
