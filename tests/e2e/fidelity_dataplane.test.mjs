// Issue 14: exact bytes under load through the data planes, not only
// straight from envd (fidelity_envd.test.mjs). A command printing ~7.7 MB
// runs three times in parallel with the real e2b SDK (2.51.0) while a raw
// HTTP client reads a fourth Connect stream of it slowly, through: the
// agent's data plane to its own sandbox, the hub's /data to it, and the
// agent's data plane to another cluster's sandbox (relayed through the hub).
// Every stdout must be exact (length and SHA-256): a stream the proxy cut or
// shortened fails. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { slowStart as slowStartWith } from '../integration/lib/connect.mjs';
import { startStack, manifestsDir, envManifest, claim, waitPool } from '../integration/lib/sandboxes.mjs';

process.env.E2B_API_KEY ??= 'unused-by-the-data-plane';
const { Sandbox } = await import('e2b');

const N = 1100000; // `seq 1 N`: 7,693,897 bytes
const RUNS = 2;
const expected = (() => {
    const parts = [];
    for (let i = 1; i <= N; i++) parts.push(String(i));
    const s = `${parts.join('\n')}\n`;
    return { len: Buffer.byteLength(s), sha: createHash('sha256').update(s).digest('hex') };
})();

let stack;
let alpha;
let onAlpha;
let onBeta;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    const manifests = manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 1 })]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle >= 1, 'alpha warm', 60000);
    await waitPool(stack.agents.beta, 'demo-1c0gi', (s) => s.idle >= 1, 'beta warm', 60000);
    onAlpha = await claim(alpha, stack.key, { poolName: 'demo', timeout: 600 });
    onBeta = await claim(stack.agents.beta, stack.key, { poolName: 'demo', timeout: 600 });
});

after(async () => {
    if (stack) await stack.stop();
});

const sdk = (sb, base) => new Sandbox({
    sandboxId: sb.sandboxId, envdAccessToken: sb.envdAccessToken, envdVersion: '0.6.13', sandboxUrl: base,
});




// process.Process/Start through a data plane (base), read slowly (lib/connect.mjs).
function slowStart(base, sb, cmd, args) {
    const u = new URL(base);
    return slowStartWith({
        host: u.hostname, port: u.port, path: `${u.pathname.replace(/\/$/, '')}/process.Process/Start`,
        headers: { 'E2b-Sandbox-Id': sb.sandboxId, 'E2b-Sandbox-Port': '49983', 'X-Access-Token': sb.envdAccessToken },
    }, cmd, args);
}

const paths = () => [
    ['the agent\'s data plane', alpha.data, onAlpha],
    ['the hub\'s /data', `${stack.hub.base}/data`, onAlpha],
    ['the agent\'s data plane to another cluster', alpha.data, onBeta],
];

for (const i of [0, 1, 2]) {
    test(`exact stdout under load with a slow reader: path ${i}`, { timeout: 600000 }, async () => {
        const [name, base, sb] = paths()[i];
        const s = sdk(sb, base);
        const failures = [];
        for (let run = 0; run < RUNS; run++) {
            const [a, b, c, slow] = await Promise.all([
                s.commands.run(`seq 1 ${N}`, { timeoutMs: 300000 }),
                s.commands.run(`seq 1 ${N}`, { timeoutMs: 300000 }),
                s.commands.run(`seq 1 ${N}`, { timeoutMs: 300000 }),
                slowStart(base, sb, 'seq', ['1', String(N)]),
            ]);
            for (const [who, r] of [['sdk 1', a], ['sdk 2', b], ['sdk 3', c]]) {
                const len = Buffer.byteLength(r.stdout);
                const sha = createHash('sha256').update(r.stdout).digest('hex');
                if (r.exitCode !== 0 || len !== expected.len || sha !== expected.sha)
                    failures.push(`${name} run ${run} ${who}: exit ${r.exitCode}, ${len} of ${expected.len} bytes`);
            }
            if (slow.exit !== 0 || slow.len !== expected.len || slow.sha !== expected.sha)
                failures.push(`${name} run ${run} slow reader: exit ${slow.exit}, ${slow.len} of ${expected.len} bytes`);
        }
        assert.deepEqual(failures, [], failures.join('\n'));
    });
}
