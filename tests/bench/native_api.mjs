// Benchmark: native management API latency at 1,000 envs (issue 16): list
// (GET /v1/envs), get (GET /v1/envs/{name}) and put (PUT /v1/envs/{name},
// the desired-state write: validated, written to the overlay on a worker,
// the set in use updated in memory (a full reload only when the directory
// changed meanwhile) and the pools reconciled before the answer).
//
// The envs are seeded as YAML (one file, 1,000 documents, no member pools so
// no sandboxes start); a GET /ping round trip on the same listener is the
// in-script baseline; GET /v1/envs/{name}/events reads the events the PUTs
// recorded (each PUT also appends one to the events file beside the
// overlay). Prints p50/p99 (ms) and the load average before and after (the
// machine may be shared). Needs root (the local runtime):
//   sudo AGENTBOX_BUILD_DIR=build node tests/bench/native_api.mjs   [BENCH_ENVS=1000 BENCH_N=200]
import { performance } from 'node:perf_hooks';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, manifestsDir } from '../integration/lib/sandboxes.mjs';
import { quantile } from './util.mjs';

const ENVS = Number(process.env.BENCH_ENVS || 1000);
const N = Number(process.env.BENCH_N || 200);
const PUTS = Math.min(N, 100);

const name = (i) => `e${String(i).padStart(4, '0')}`;
const docs = [];
for (let i = 0; i < ENVS; i++) {
    docs.push(`apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name(i)}, namespace: default, labels: {bench: "1"}}
spec:
  templateRef: {name: envd}
  overrides: {defaultIdleTimeout: 5m}
`);
}
const dir = manifestsDir([]);
fs.writeFileSync(path.join(dir, 'envs.yaml'), docs.join('---\n'));

const stack = await startStack({ clusters: ['alpha'], manifests: dir });
const alpha = stack.agents.alpha;
const headers = { 'AGENTBOX-API-KEY': stack.key, 'Content-Type': 'application/json' };
const timed = async (method, p, body) => {
    const t = performance.now();
    const r = await fetch(alpha.native + p, { method, headers, body: body && JSON.stringify(body) });
    await r.arrayBuffer();
    const ms = performance.now() - t;
    if (r.status !== 200) throw new Error(`${method} ${p}: ${r.status}`);
    return ms;
};
const row = (what, xs) => console.log(`${what.padEnd(28)} p50 ${quantile(xs, 0.5).toFixed(2).padStart(8)} ms   p99 ${quantile(xs, 0.99).toFixed(2).padStart(8)} ms   (n=${xs.length})`);

try {
    const first = await (await fetch(`${alpha.native}/v1/envs/${name(ENVS - 1)}`, { headers })).json();
    if (!first.env) throw new Error(`the seeded envs did not load: ${JSON.stringify(first)}`);
    const loadBefore = os.loadavg();
    const ping = [];
    for (let i = 0; i < N; i++) ping.push(await timed('GET', '/ping'));
    const list = [];
    for (let i = 0; i < Math.min(N, 50); i++) list.push(await timed('GET', '/v1/envs'));
    const get = [];
    for (let i = 0; i < N; i++) get.push(await timed('GET', `/v1/envs/${name((i * 7919) % ENVS)}`));
    const put = [];
    for (let i = 0; i < PUTS; i++) {
        const n = name((i * 104729) % ENVS);
        const ed = (await (await fetch(`${alpha.native}/v1/envs/${n}`, { headers })).json()).editable;
        put.push(await timed('PUT', `/v1/envs/${n}`, { ...ed, overrides: { defaultIdleTimeout: `${6 + (i % 50)}m` } }));
    }
    const events = [];
    for (let i = 0; i < N; i++) events.push(await timed('GET', `/v1/envs/${name((i * 104729) % ENVS)}/events?limit=100`));
    const la = (l) => l.map((x) => x.toFixed(2)).join(' ');
    console.log(`native API at ${ENVS} envs (one agent, local runtime); load average ${la(loadBefore)} before, ${la(os.loadavg())} after`);
    row('GET /ping (baseline)', ping);
    row('list GET /v1/envs', list);
    row('get GET /v1/envs/{name}', get);
    row('put PUT /v1/envs/{name}', put);
    row('events GET .../events', events);
    console.log(`get/ping p50 ratio ${(quantile(get, 0.5) / quantile(ping, 0.5)).toFixed(1)}x; ` +
        'a put includes the overlay write (fsync), the set updated in memory and the pools reconciled');
} finally {
    await stack.stop();
    fs.rmSync(dir, { recursive: true, force: true });
}
