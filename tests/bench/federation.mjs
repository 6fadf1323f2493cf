// Benchmark: what a hop through the hub costs (DESIGN §6, §12).
//
//   create     `beta::bench` posted to alpha (forwarded through the hub's
//              relay to beta) against the same create posted to beta itself,
//              interleaved in one run, both answered at claim (no-wait); the added
//              p50/p99 is the forward (target: p50 ≤ 1.5 ms); and how many
//              assertion signs and verifications (full or from the cache) the
//              hub and beta did meanwhile (their metrics listeners).
//   data plane commands.run('true') on one beta sandbox with the real SDK,
//              through alpha's data plane (relayed) against beta's own.
//
// Needs root (namespaces) and a build:
//   sudo AGENTBOX_BUILD_DIR=build node tests/bench/federation.mjs   [BENCH_N=30 BENCH_RUNS=100]
import { performance } from 'node:perf_hooks';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import fs from 'node:fs';
import http from 'node:http';
import { quantile, procCpu, row, atMost, loadNow } from './util.mjs';
import { metricValue } from '../integration/lib/harness.mjs';

const POOL = 40;
const N = Number(process.env.BENCH_N || 30);
const TRACE_N = Number(process.env.BENCH_TRACE_N || 12);
// every process logs the stages of requests that carry X-AgentBox-Trace
// (agentbox/trace.h); requests without the header cost one flag test
process.env.AGENTBOX_TRACE = '1';
const RUNS = Number(process.env.BENCH_RUNS || 100);
const fmt = (x) => x.toFixed(2);
// answered at claim time: arming (envd /init, tens of ms) is the same on both
// sides and would bury the forward's cost in its noise
const NO_WAIT = { 'agentbox.scitix.ai/no-wait': 'true' };

const stack = await startStack({
    clusters: ['alpha', 'beta'], manifests: manifestsDir([envManifest('bench', ['alpha', 'beta'], { replicas: POOL })]),
});
const { alpha, beta } = stack.agents;
// CLOCK_MONOTONIC in µs, the clock of the processes' trace lines (node's hrtime is it on Linux)
const monoUs = () => Number(process.hrtime.bigint() / 1000n);
const post = async (base, p, body, trace) => {
    const t = performance.now();
    const sent = monoUs();
    const headers = { 'X-API-Key': stack.key, 'Content-Type': 'application/json' };
    if (trace) headers['X-AgentBox-Trace'] = trace;
    const res = await fetch(base + p, { method: 'POST', headers, body: JSON.stringify(body) });
    const json = await res.json();
    const ms = performance.now() - t;
    const done = monoUs();
    if (res.status !== 201) throw new Error(`create ${JSON.stringify(body)}: ${res.status} ${JSON.stringify(json)}`);
    return { ms, id: json.sandboxID, sent, done };
};

// The trace lines of one process's log: id -> stage -> µs (the first of each).
function traceOf(logFile) {
    const out = new Map();
    const text = fs.readFileSync(logFile, 'utf8');
    for (const m of text.matchAll(/msg="?trace"? id=(\S+) stage=(\S+) mono_us=(\d+)/g)) {
        if (!out.has(m[1])) out.set(m[1], {});
        const st = out.get(m[1]);
        if (!(m[2] in st)) st[m[2]] = Number(m[3]);
    }
    return out;
}
// One process.Start of `true` through a data plane, read to the end of the
// stream (what commands.run does, by hand so it can carry the trace header).
function startTrue(base, sbx, trace, agents) {
    const body = Buffer.from(JSON.stringify({ process: { cmd: 'true', args: [] } }));
    const env = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), body]);
    env.writeUInt32BE(body.length, 1);
    const u = new URL(base);
    if (!agents.has(base)) agents.set(base, new http.Agent({ keepAlive: true, maxSockets: 1 }));
    const headers = {
        'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
        'X-Access-Token': sbx.envdAccessToken, 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49983',
        'Content-Length': env.length,
    };
    if (trace) headers['X-AgentBox-Trace'] = trace;
    return new Promise((resolve, reject) => {
        const t = performance.now();
        const sent = monoUs();
        const req = http.request({ host: u.hostname, port: u.port, agent: agents.get(base), method: 'POST', path: '/process.Process/Start', headers }, (res) => {
            let n = 0;
            res.on('data', (c) => (n += c.length));
            res.on('end', () => (res.statusCode === 200 && n > 0
                ? resolve({ ms: performance.now() - t, sent, done: monoUs() })
                : reject(new Error(`process.Start via ${base}: status ${res.statusCode}`))));
        });
        req.on('error', reject);
        req.end(env);
    });
}
const del = (base, id) => fetch(`${base}/sandboxes/${id}`, { method: 'DELETE', headers: { 'X-API-Key': stack.key } });

try {
    await waitPool(alpha, 'bench-1c0gi', (s) => s.idle === POOL, `alpha ${POOL} idle`, 180000);
    await waitPool(beta, 'bench-1c0gi', (s) => s.idle === POOL, `beta ${POOL} idle`, 180000);

    // warm-up (connections, key cache on both agents)
    for (const t of ['alpha::bench', 'beta::bench']) {
        const w = await post(alpha.e2b, '/sandboxes', { templateID: t });
        await del(alpha.e2b, w.id);
    }
    // Ed25519 work during the loop (absent on builds before the caches: n/a)
    const SERIES = [
        ['hub sign', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="sign"}'],
        ['hub verify', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="verify"}'],
        ['hub verify (cached)', stack.hub.metrics, 'agentbox_hub_assertion_ops_total{op="verify_cached"}'],
        ['beta verify', beta.metrics, 'agentbox_agent_assertion_verifies_total{cache="miss"}'],
        ['beta verify (cached)', beta.metrics, 'agentbox_agent_assertion_verifies_total{cache="hit"}'],
    ];
    const ops = async () => Promise.all(SERIES.map(([, base, series]) => metricValue(base, series).catch(() => null)));
    const ops0 = await ops();
    // CPU seconds of hub, alpha and beta over the loop: less at the mercy of a
    // loaded machine than wall-clock latency (10 ms ticks: read it over N)
    const cpus = () => [stack.hub.proc.pid, alpha.proc.pid, beta.proc.pid].map((pid) => procCpu(pid).cpu);
    const cpu0 = cpus();
    const local = [];
    const fwd = [];
    const ids = [];
    for (let i = 0; i < N; i++) {
        const a = await post(beta.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT });
        const b = await post(alpha.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT });
        if (!b.id.startsWith('beta-')) throw new Error(`forwarded create landed on ${b.id}`);
        local.push(a.ms);
        fwd.push(b.ms);
        ids.push(a.id, b.id);
    }
    const cpu1 = cpus();
    const ops1 = await ops();
    // every kill must take (a no-wait create may still wait for a sandbox: killed all the same)
    const dels = await Promise.all(ids.map(async (id) => { const r = await del(alpha.e2b, id); return [r.status, await r.text()]; }));
    const bad = dels.find(([st]) => st !== 204);
    if (bad) throw new Error(`a kill through alpha answered ${bad[0]}: ${bad[1]}`);
    const lp50 = quantile(local, 0.5), lp99 = quantile(local, 0.99);
    const fp50 = quantile(fwd, 0.5), fp99 = quantile(fwd, 0.99);
    console.log(`create (n=${N} each, no-wait)   p50 ms   p99 ms`);
    console.log(`  local  beta::bench on beta    ${fmt(lp50).padStart(6)}   ${fmt(lp99).padStart(6)}`);
    console.log(`  fwd    beta::bench via alpha  ${fmt(fp50).padStart(6)}   ${fmt(fp99).padStart(6)}`);
    console.log(`  added by the forward          ${fmt(fp50 - lp50).padStart(6)}   ${fmt(fp99 - lp99).padStart(6)}   (target p50 <= 1.5)`);
    row('forward-create-p50', 'forwarded beta:: create, added over local, p50', `${fmt(fp50 - lp50)} ms (load ${loadNow().toFixed(1)})`,
        `local p50 ${fmt(lp50)} ms`, '<= 1.5 ms', atMost(fp50 - lp50, 1.5));
    const cpuMs = cpu1.map((c, i) => ((c - cpu0[i]) * 1000) / N);
    console.log(`CPU ms per (local + forwarded) create pair: hub ${fmt(cpuMs[0])}, alpha ${fmt(cpuMs[1])}, beta ${fmt(cpuMs[2])}`);
    // the claim events of both kinds of create are verified on the hub too (off the request's path)
    console.log(`assertion work during the ${N} forwarded + ${N} local creates   total   per forward`);
    SERIES.forEach(([what], i) => {
        const d = ops0[i] === null || ops1[i] === null ? null : (ops1[i] || 0) - (ops0[i] || 0);
        console.log(`  ${what.padEnd(24)} ${d === null ? '   n/a' : String(d).padStart(6)}   ${d === null ? '  n/a' : (d / N).toFixed(2).padStart(6)}`);
    });

    // --- where a forward's time goes: TRACE_N traced pairs, stages from every process's log
    // a claim that waits for a spawn would bury the forward in beta's refill
    await waitPool(beta, 'bench-1c0gi', (st) => st.idle >= Math.min(POOL, 2 * TRACE_N), `beta refilled`, 60000)
        .catch((e) => console.log(`forward trace: ${e.message}; tracing anyway (a claim may wait for a spawn)`));
    const traced = [];
    // each traced create waits until beta started the last claim's refill
    // (starting 0): a claim's aftermath on beta's loop (the refill spawn) would
    // otherwise land inside the next create's stages
    const settle = () => waitPool(beta, 'bench-1c0gi', (st) => st.starting === 0, 'beta settled', 60000)
        .catch(() => {});
    for (let i = 0; i < TRACE_N; i++) {
        await settle();
        const a = await post(beta.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT }, `bl${i}`);
        await settle();
        const b = await post(alpha.e2b, '/sandboxes', { templateID: 'beta::bench', metadata: NO_WAIT }, `bf${i}`);
        traced.push({ i, a, b });
        ids.push(a.id, b.id);
    }
    await Promise.all(ids.splice(0).map((id) => del(alpha.e2b, id)));
    const tA = traceOf(alpha.proc.logFile), tH = traceOf(stack.hub.proc.logFile), tB = traceOf(beta.proc.logFile);
    const FWD = [
        ['client -> alpha: HTTP in, until the handler runs', (x) => x.A['http.dispatch'] - x.b.sent],
        ['alpha: key check, create handler, forward out', (x) => x.A['forward.sent'] - x.A['http.dispatch']],
        ['tunnel alpha -> hub (to the relay handler)', (x) => x.H['relay.open'] - x.A['forward.sent']],
        ['hub: assertion verified and re-signed for beta', (x) => x.H['relay.spliced'] - x.H['relay.open']],
        ['tunnel hub -> beta (to beta\'s handler)', (x) => x.B['http.dispatch'] - x.H['relay.spliced']],
        ['beta: assertion check + claim (local work)', (x) => x.B['http.respond'] - x.B['http.dispatch']],
        ['tunnel beta -> hub (the answer, to the relay)', (x) => x.H['relay.response'] - x.B['http.respond']],
        ['tunnel hub -> alpha (the answer, to the forward)', (x) => x.A['forward.answered'] - x.H['relay.response']],
        ['alpha: answer the client', (x) => x.A['http.respond'] - x.A['forward.answered']],
        ['alpha -> client: HTTP out', (x) => x.b.done - x.A['http.respond']],
    ];
    const LOCAL = [
        ['client -> beta: HTTP in, until the handler runs', (x) => x.L['http.dispatch'] - x.a.sent],
        ['beta: key check + claim (local work)', (x) => x.L['http.respond'] - x.L['http.dispatch']],
        ['beta -> client: HTTP out', (x) => x.a.done - x.L['http.respond']],
    ];
    const rowsOk = traced.map((t) => ({ ...t, A: tA.get(`bf${t.i}`), H: tH.get(`bf${t.i}`), B: tB.get(`bf${t.i}`), L: tB.get(`bl${t.i}`) }))
        .filter((x) => x.A && x.H && x.B && x.L);
    if (rowsOk.length === 0) {
        console.log(`forward trace: no trace lines found (a build without agentbox/trace.h?)`);
    } else {
        const med = (f) => quantile(rowsOk.map(f).filter(Number.isFinite), 0.5) / 1000;
        console.log(`\nwhere a forwarded create's time goes (n=${rowsOk.length} traced pairs, medians in ms, load ${loadNow().toFixed(1)})`);
        let fsum = 0;
        for (const [what, f] of FWD) {
            const v = med(f);
            fsum += v;
            console.log(`  fwd    ${what.padEnd(52)} ${fmt(v).padStart(7)}`);
        }
        let lsum = 0;
        for (const [what, f] of LOCAL) {
            const v = med(f);
            lsum += v;
            console.log(`  local  ${what.padEnd(52)} ${fmt(v).padStart(7)}`);
        }
        console.log(`  sum of medians: fwd ${fmt(fsum)}, local ${fmt(lsum)}, added ${fmt(fsum - lsum)} ` +
            `(traced totals p50: fwd ${fmt(quantile(rowsOk.map((x) => x.b.ms), 0.5))}, local ${fmt(quantile(rowsOk.map((x) => x.a.ms), 0.5))})`);
    }

    const { Sandbox } = await import('e2b');
    const sbx = await Sandbox.create('beta::bench', { apiUrl: beta.e2b, sandboxUrl: beta.data, apiKey: stack.key });
    const viaBeta = await Sandbox.connect(sbx.sandboxId, { apiUrl: beta.e2b, sandboxUrl: beta.data, apiKey: stack.key });
    const viaAlpha = await Sandbox.connect(sbx.sandboxId, { apiUrl: alpha.e2b, sandboxUrl: alpha.data, apiKey: stack.key });
    const own = [];
    const relayed = [];
    for (let i = 0; i < 5; i++) {
        await viaBeta.commands.run('true');
        await viaAlpha.commands.run('true');
    }
    for (let i = 0; i < RUNS; i++) {
        let t = performance.now();
        await viaBeta.commands.run('true');
        own.push(performance.now() - t);
        t = performance.now();
        await viaAlpha.commands.run('true');
        relayed.push(performance.now() - t);
    }
    // --- where a relayed Connect call's time goes: the same process.Start of
    // `true` by hand (the SDK sends no extra headers), traced, own against relayed
    const traceRun = (base, trace) => startTrue(base, sbx, trace, agents);
    const agents = new Map();
    for (let i = 0; i < 5; i++) {
        await traceRun(beta.data);
        await traceRun(alpha.data);
    }
    const runs = [];
    for (let i = 0; i < TRACE_N; i++) {
        const own = await traceRun(beta.data, `rl${i}`);
        const rel = await traceRun(alpha.data, `rr${i}`);
        runs.push({ i, own, rel });
    }
    for (const a of agents.values()) a.destroy();
    await sbx.kill();
    {
        const tA = traceOf(alpha.proc.logFile), tH = traceOf(stack.hub.proc.logFile), tB = traceOf(beta.proc.logFile);
        const REL = [
            ['client -> alpha: HTTP in, until the handler runs', (x) => x.A['http.dispatch'] - x.rel.sent],
            ['alpha: data plane + tunnel alpha -> hub', (x) => x.H['relay.open'] - x.A['http.dispatch']],
            ['hub: relay checks, stream opened to beta', (x) => x.H['relay.spliced'] - x.H['relay.open']],
            ['tunnel hub -> beta (to beta\'s data plane)', (x) => x.B['http.dispatch'] - x.H['relay.spliced']],
            ['beta -> envd -> beta: the answer\'s head', (x) => x.B['http.respond'] - x.B['http.dispatch']],
            ['tunnel beta -> hub (the head)', (x) => x.H['relay.response'] - x.B['http.respond']],
            ['tunnel hub -> alpha (the head, to the client)', (x) => x.A['http.respond'] - x.H['relay.response']],
            ['beta: head -> envd\'s stream ended', (x) => x.B['http.end'] - x.B['http.respond']],
            ['tunnel beta -> hub (the end)', (x) => x.H['relay.end'] - x.B['http.end']],
            ['tunnel hub -> alpha (the end)', (x) => x.A['http.end'] - x.H['relay.end']],
            ['alpha -> client: the end read', (x) => x.rel.done - x.A['http.end']],
        ];
        const OWN = [
            ['client -> beta: HTTP in, until the handler runs', (x) => x.L['http.dispatch'] - x.own.sent],
            ['beta -> envd -> beta: the answer\'s head', (x) => x.L['http.respond'] - x.L['http.dispatch']],
            ['beta: head -> envd\'s stream ended', (x) => x.L['http.end'] - x.L['http.respond']],
            ['beta -> client: the end read', (x) => x.own.done - x.L['http.end']],
        ];
        const rows = runs.map((r) => ({ ...r, A: tA.get(`rr${r.i}`), H: tH.get(`rr${r.i}`), B: tB.get(`rr${r.i}`), L: tB.get(`rl${r.i}`) }))
            .filter((x) => x.A && x.H && x.B && x.L);
        if (rows.length === 0) {
            console.log('relayed run trace: no trace lines found');
        } else {
            const med = (f) => quantile(rows.map(f).filter(Number.isFinite), 0.5) / 1000;
            console.log(`\nwhere a relayed process.Start('true') goes (n=${rows.length} traced pairs, medians in ms, load ${loadNow().toFixed(1)})`);
            for (const [what, f] of REL) console.log(`  relay  ${what.padEnd(52)} ${fmt(med(f)).padStart(7)}`);
            for (const [what, f] of OWN) console.log(`  own    ${what.padEnd(52)} ${fmt(med(f)).padStart(7)}`);
            console.log(`  traced totals p50: relayed ${fmt(quantile(rows.map((x) => x.rel.ms), 0.5))}, own ${fmt(quantile(rows.map((x) => x.own.ms), 0.5))}`);
        }
    }
    console.log(`commands.run('true') (n=${RUNS})  p50 ms   p99 ms`);
    console.log(`  beta's own data plane         ${fmt(quantile(own, 0.5)).padStart(6)}   ${fmt(quantile(own, 0.99)).padStart(6)}`);
    console.log(`  alpha's (relayed via hub)     ${fmt(quantile(relayed, 0.5)).padStart(6)}   ${fmt(quantile(relayed, 0.99)).padStart(6)}`);
    console.log(`  added by the relay            ${fmt(quantile(relayed, 0.5) - quantile(own, 0.5)).padStart(6)}   ${fmt(quantile(relayed, 0.99) - quantile(own, 0.99)).padStart(6)}`);
    const added = quantile(relayed, 0.5) - quantile(own, 0.5);
    row('relay-run-p50', "relayed commands.run('true'), added, p50", `${fmt(added)} ms (load ${loadNow().toFixed(1)})`,
        `own p50 ${fmt(quantile(own, 0.5))} ms`, '<= 1 ms', atMost(added, 1));
} finally {
    await stack.stop();
}
