// runCode('1+1') round trip of the unmodified @e2b/code-interpreter SDK on
// the quick start's code-interpreter-v1 env (our server on Jupyter kernels),
// against commands.run('true') on the same sandbox through the same data
// plane, interleaved in the same run; through agent alpha and through the
// hub's front doors (DESIGN §12). Prints p50/p90/p99 and the ratio to the
// baseline; never fails on numbers.
//
//   AGENTBOX_BUILD_DIR=<a release build> node tests/bench/code_interpreter.mjs
// Needs root (namespaces), PostgreSQL 15 and Debian's python3-ipykernel,
// python3-jupyter-client (scripts/deps.sh). BENCH_CI_N round trips per path
// and kind (default 200).
import fs from 'node:fs';
import path from 'node:path';
import { quantile, fmt, printTable, machineNote } from './util.mjs';
import { repoRoot } from '../integration/lib/harness.mjs';
import { startStack, manifestsDir, waitPool } from '../integration/lib/sandboxes.mjs';

const N = Number(process.env.BENCH_CI_N || 200);
const INSTALLED = '/usr/local/lib/agentbox/code-interpreter/server.py';

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function main() {
    // sandboxes see the host's /opt read-only: the server goes there
    const serverDir = fs.mkdtempSync('/opt/agentbox-ci-bench-');
    fs.chmodSync(serverDir, 0o755);
    const server = path.join(serverDir, 'server.py');
    fs.copyFileSync(path.join(repoRoot(), 'images/code-interpreter/server.py'), server);
    fs.chmodSync(server, 0o755);
    const ci = fs.readFileSync(path.join(repoRoot(), 'scripts/quickstart-manifests/code-interpreter.yaml'), 'utf8');
    const stack = await startStack({ clusters: ['alpha', 'beta'], manifests: manifestsDir([ci.replaceAll(INSTALLED, server)]) });
    try {
        const alpha = stack.agents.alpha;
        await waitPool(alpha, 'code-interpreter-v1-1c1gi', (s) => s.idle >= 1, 'warm', 180000);
        const { Sandbox } = await import('@e2b/code-interpreter');
        const ways = {
            'agent alpha': { apiUrl: alpha.e2b, sandboxUrl: alpha.data, apiKey: stack.key },
            'the hub': { apiUrl: `${stack.hub.base}/e2b`, sandboxUrl: `${stack.hub.base}/data`, apiKey: stack.key },
        };
        const sbx = await Sandbox.create('code-interpreter-v1', { ...ways['agent alpha'], timeoutMs: 600000 });
        const rows = [];
        for (const [way, opts] of Object.entries(ways)) {
            const s = await Sandbox.connect(sbx.sandboxId, opts);
            for (let i = 0; i < 10; i++) { // warm the connections and the kernel
                await s.runCode('1+1');
                await s.commands.run('true');
            }
            const run = [];
            const cmd = [];
            for (let i = 0; i < N; i++) {
                let t0 = process.hrtime.bigint();
                const r = await s.runCode('1+1');
                run.push(ms(t0));
                if (r.text !== '2') throw new Error(`runCode('1+1') gave ${JSON.stringify(r.text)}`);
                t0 = process.hrtime.bigint();
                await s.commands.run('true');
                cmd.push(ms(t0));
            }
            const p = (v, q) => fmt(quantile(v, q));
            rows.push([`${way}: runCode('1+1')`, p(run, 0.5), p(run, 0.9), p(run, 0.99),
                (quantile(run, 0.5) / quantile(cmd, 0.5)).toFixed(2) + 'x']);
            rows.push([`${way}: commands.run('true')`, p(cmd, 0.5), p(cmd, 0.9), p(cmd, 0.99), '1.00x']);
        }
        await sbx.kill();
        console.log(machineNote());
        console.log(`${N} interleaved round trips per path and kind, one sandbox, ms`);
        printTable(['path', 'p50', 'p90', 'p99', 'p50 vs commands.run'], rows);
    } finally {
        await stack.stop();
        fs.rmSync(serverDir, { recursive: true, force: true });
    }
}

main().catch((e) => {
    console.error(e);
    process.exit(1);
});
