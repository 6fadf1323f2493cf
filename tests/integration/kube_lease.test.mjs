// Leader election (agent/runtime/kube/lease.c) against the in-test API server:
// contenders are build/test_agent_kube_lease --live processes (each prints
// LEADING / FOLLOWING on a transition, RELEASED after a clean stop). One
// leads, the other follows; the leader killed with SIGKILL → the follower
// takes over within the lease duration of the last renewal; a clean stop
// releases the Lease so the next contender leads at once; a 409 on a renewal
// and an API server that stops answering past the renew deadline both end
// the leadership.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { buildDir, tempDir, waitFor } from './lib/harness.mjs';
import { startKubeApi } from './lib/kubeapi.mjs';

const DRIVER = path.join(buildDir(), 'test_agent_kube_lease');
const NS = 'agentbox-system';
const LEASE = 'agentbox-agent';
const LEASE_MS = 3000;
const RENEW_MS = 2000;
const RETRY_MS = 300;

const cleanup = [];
after(async () => {
    for (const f of cleanup.reverse()) await f();
});

function contender(kubeconfig, identity) {
    const child = spawn(DRIVER, ['--live', kubeconfig, NS, LEASE, identity, String(LEASE_MS), String(RENEW_MS), String(RETRY_MS)], {
        env: { ...process.env, ASAN_OPTIONS: process.env.ASAN_OPTIONS ?? 'detect_leaks=1:halt_on_error=1' },
        stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let errText = '';
    const events = []; // {what, at}
    child.stdout.on('data', (d) => {
        out += d;
        for (const l of String(d).split('\n').filter(Boolean)) events.push({ what: l, at: Date.now() });
    });
    child.stderr.on('data', (d) => (errText += d));
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    cleanup.push(async () => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        await exited;
    });
    return {
        identity, child, exited, events,
        lines: () => out.split('\n').filter(Boolean),
        err: () => errText,
        leading: () => events.filter((e) => e.what === 'LEADING' || e.what === 'FOLLOWING').at(-1)?.what === 'LEADING',
        quit: () => child.stdin.end('quit\n'),
    };
}

async function setup() {
    const dir = tempDir('agentbox-lease-');
    const api = await startKubeApi();
    cleanup.push(() => api.close());
    return { api, kc: api.kubeconfig(dir, { namespace: NS }) };
}

const lease = (api) => api.peek('leases', NS, LEASE);

test('two contenders: one leads; SIGKILL of the leader → the other takes over within the lease duration', async () => {
    const { api, kc } = await setup();
    const a = contender(kc, 'agent-a_1');
    const b = contender(kc, 'agent-b_2');
    const first = await waitFor(() => (a.leading() ? a : b.leading() ? b : null), { timeoutMs: 5000, what: `a leader\n${a.err()}${b.err()}` });
    const second = first === a ? b : a;
    const l1 = lease(api);
    assert.equal(l1.spec.holderIdentity, first.identity);
    assert.equal(l1.spec.leaseDurationSeconds, LEASE_MS / 1000);
    assert.equal(l1.spec.leaseTransitions, 0);
    assert.ok(l1.spec.acquireTime && l1.spec.renewTime);

    // the leader renews (renewTime moves, acquireTime stays); the follower never leads meanwhile
    const renew0 = l1.spec.renewTime;
    await waitFor(() => lease(api).spec.renewTime !== renew0, { timeoutMs: 2000, what: 'a renewal' });
    await waitFor(() => api.requests.filter((r) => r.method === 'PUT' && r.path.endsWith(`/leases/${LEASE}`)).length >= 4, { timeoutMs: 4000, what: 'several renewals' });
    assert.equal(lease(api).spec.acquireTime, l1.spec.acquireTime);
    assert.equal(lease(api).spec.holderIdentity, first.identity);
    assert.ok(!second.events.some((e) => e.what === 'LEADING'), 'the follower led while the leader renewed');

    // kill the leader without a release: the follower waits out the lease, then takes it
    const lastRenewal = Date.now();
    first.child.kill('SIGKILL');
    await first.exited;
    const took = await waitFor(() => second.events.find((e) => e.what === 'LEADING'), {
        timeoutMs: LEASE_MS + 3000, intervalMs: 20, what: `the follower to take over\n${second.err()}`,
    });
    const after = took.at - lastRenewal;
    // within the lease duration (plus the retry period and its jitter), not before the lease ran out
    assert.ok(after <= LEASE_MS + RETRY_MS * 1.2 + 700, `took over ${after} ms after the last renewal`);
    assert.ok(after >= LEASE_MS - RETRY_MS * 1.2 - 200, `took over after only ${after} ms: a live lease was stolen`);
    const l2 = lease(api);
    assert.equal(l2.spec.holderIdentity, second.identity);
    assert.equal(l2.spec.leaseTransitions, 1);
    assert.notEqual(l2.spec.acquireTime, l1.spec.acquireTime);
});

test('a clean stop releases the Lease: the next contender leads at once; a 409 and a silent API server end leadership', async () => {
    const { api, kc } = await setup();
    const a = contender(kc, 'agent-a_1');
    await waitFor(() => a.leading(), { timeoutMs: 5000, what: `a to lead\n${a.err()}` });
    const b = contender(kc, 'agent-b_2');
    await waitFor(() => api.requests.filter((r) => r.method === 'GET' && r.path.endsWith(`/leases/${LEASE}`)).length >= 6, { timeoutMs: 3000, what: 'b polling' });
    assert.ok(!b.leading());

    a.quit();
    await waitFor(() => a.lines().includes('RELEASED'), { timeoutMs: 5000, what: `a to release\n${a.err()}` });
    const released = Date.now();
    const r = await a.exited;
    assert.equal(r.code, 0, a.err());
    assert.deepEqual(a.lines(), ['LEADING', 'FOLLOWING', 'RELEASED']);
    const took = await waitFor(() => b.events.find((e) => e.what === 'LEADING'), { timeoutMs: LEASE_MS, intervalMs: 20, what: 'b after the release' });
    assert.ok(took.at - released < LEASE_MS / 2, `b led ${took.at - released} ms after the release: the lease was waited out, not released`);
    assert.equal(lease(api).spec.holderIdentity, 'agent-b_2');
    assert.equal(lease(api).spec.leaseDurationSeconds, LEASE_MS / 1000);

    // someone else wrote first: the renewal's PUT answers 409 → not leader (then it wins the next round)
    api.inject({ method: 'PUT', path: new RegExp(`/leases/${LEASE}$`), status: 409, reason: 'Conflict', times: 1 });
    await waitFor(() => b.events.filter((e) => e.what === 'FOLLOWING').length >= 1, { timeoutMs: 3000, what: 'b to stop leading on a 409' });
    await waitFor(() => b.leading(), { timeoutMs: 3000, what: 'b to lead again' });

    // the API server stops answering: past the renew deadline b stops leading, and leads again when it is back
    const leadsBefore = b.events.filter((e) => e.what === 'LEADING').length;
    const silent = Date.now();
    api.inject({ path: new RegExp(`/leases/${LEASE}$`), status: 503, reason: 'ServiceUnavailable', times: -1 });
    const lost = await waitFor(() => b.events.filter((e) => e.what === 'FOLLOWING' && e.at >= silent)[0], { timeoutMs: RENEW_MS + 2000, intervalMs: 20, what: 'b to give up leading' });
    assert.ok(lost.at - silent >= RENEW_MS - RETRY_MS * 1.2 - 200, `gave up after ${lost.at - silent} ms, before the renew deadline`);
    assert.ok(lost.at - silent <= RENEW_MS + RETRY_MS * 1.2 + 500, `gave up only after ${lost.at - silent} ms`);
    api.clearInjections();
    await waitFor(() => b.events.filter((e) => e.what === 'LEADING').length > leadsBefore, { timeoutMs: 3000, what: 'b to lead again' });
    b.quit();
    assert.equal((await b.exited).code, 0, b.err());
});
