// The opt-in trace of one request across processes (shared/include/agentbox/trace.h,
// issue 17): with AGENTBOX_TRACE=1, a forwarded call carrying X-AgentBox-Trace
// logs its stages in alpha, the hub and beta, in order on the one monotonic
// clock; a malformed id and a process without the variable log nothing (a
// caller cannot fill a log by sending the header).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { waitFor } from './lib/harness.mjs';
import { startStack, manifestsDir } from './lib/sandboxes.mjs';

let stack;

before(async () => {
    process.env.AGENTBOX_TRACE = '1';
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests: manifestsDir([]) });
    delete process.env.AGENTBOX_TRACE;
    await stack.launch('gamma'); // started without the variable
});

after(async () => {
    if (stack) await stack.stop();
});

// id -> stage -> µs, from one process's log
function traces(proc) {
    const out = new Map();
    const text = fs.existsSync(proc.logFile) ? fs.readFileSync(proc.logFile, 'utf8') : '';
    for (const m of text.matchAll(/msg="?trace"? id=(\S+) stage=(\S+) mono_us=(\d+)/g)) {
        if (!out.has(m[1])) out.set(m[1], {});
        out.get(m[1])[m[2]] = Number(m[3]);
    }
    return out;
}

const get = (base, p, trace) => fetch(base + p, { headers: { 'X-API-Key': stack.key, 'X-AgentBox-Trace': trace } });

test('a forwarded call logs every stage in alpha, the hub and beta, in order', async () => {
    const { alpha, beta } = stack.agents;
    const res = await get(alpha.e2b, `/sandboxes/beta-${'a'.repeat(20)}`, 'fwd-1');
    await res.text();
    assert.equal(res.status, 404, 'beta answers for its own id, through the hub');
    const [a, h, b] = await waitFor(() => {
        const x = [traces(alpha.proc).get('fwd-1'), traces(stack.hub.proc).get('fwd-1'), traces(beta.proc).get('fwd-1')];
        return x[0] && x[0]['http.end'] && x[1] && x[2] && x[2]['http.end'] ? x : null;
    }, { timeoutMs: 10000, what: 'trace lines of fwd-1 in all three logs' });
    const order = [
        ['alpha http.dispatch', a['http.dispatch']], ['alpha forward.sent', a['forward.sent']],
        ['hub relay.open', h['relay.open']], ['hub relay.spliced', h['relay.spliced']],
        ['beta http.dispatch', b['http.dispatch']], ['beta http.respond', b['http.respond']],
        ['beta http.end', b['http.end']],
        // the answer passing the relay (the forward's answer path, issue 17)
        ['hub relay.response', h['relay.response']], ['hub relay.end', h['relay.end']],
        ['alpha forward.answered', a['forward.answered']], ['alpha http.respond', a['http.respond']],
        ['alpha http.end', a['http.end']],
    ];
    for (const [what, t] of order) assert.ok(Number.isFinite(t), `stage ${what} logged`);
    for (let i = 1; i < order.length; i++) {
        assert.ok(order[i][1] >= order[i - 1][1], `${order[i - 1][0]} (${order[i - 1][1]}) before ${order[i][0]} (${order[i][1]})`);
    }
});

test('a malformed id and a process without AGENTBOX_TRACE log nothing', async () => {
    const { alpha, gamma } = stack.agents;
    const bad = 'x'.repeat(65);
    (await get(alpha.e2b, `/sandboxes/beta-${'b'.repeat(20)}`, bad)).text();
    (await get(alpha.e2b, `/sandboxes/beta-${'b'.repeat(20)}`, 'has space')).text();
    const g = await get(gamma.e2b, '/sandboxes', 'gamma-1');
    assert.equal(g.status, 200, await g.text());
    // a later traced call through alpha shows alpha's log is written up to here
    await (await get(alpha.e2b, `/sandboxes/beta-${'c'.repeat(20)}`, 'fwd-2')).text();
    await waitFor(() => traces(alpha.proc).get('fwd-2')?.['http.respond'], { timeoutMs: 10000, what: 'fwd-2 traced' });
    for (const p of [alpha.proc, stack.hub.proc, stack.agents.beta.proc]) {
        assert.equal(traces(p).has(bad), false);
        assert.doesNotMatch(fs.readFileSync(p.logFile, 'utf8'), /has space/);
    }
    assert.equal(traces(gamma.proc).size, 0, 'gamma was started without AGENTBOX_TRACE');
    assert.doesNotMatch(fs.readFileSync(gamma.proc.logFile, 'utf8'), /msg="?trace/);
});
