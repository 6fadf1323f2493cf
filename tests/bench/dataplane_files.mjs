// 50 MB through each hop in one run (issue 14): uploads (multipart, the SDK's
// default, and octet-stream) and downloads of envd's /files, with curl, in
// MB/s: straight to envd's unix socket (the baseline), through the agent's
// data plane, through the hub's /data, and through the agent's data plane to
// another cluster's sandbox (relayed over both tunnels).
//
//   BENCH_FILES_MB (default 50)    size of each transfer
//   BENCH_FILES_ROUNDS (default 3) rounds per hop and kind (median shown)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { median } from './util.mjs';
import { startStack, manifestsDir, envManifest, claim, waitPool, readSandboxState } from '../integration/lib/sandboxes.mjs';

const MB = Number(process.env.BENCH_FILES_MB || 50);
const ROUNDS = Number(process.env.BENCH_FILES_ROUNDS || 3);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'dp-files-'));
const src = path.join(tmp, 'src.bin');
fs.writeFileSync(src, randomBytes(MB * 1024 * 1024));

// curl's seconds for one transfer; throws on a non-2xx answer.
function curl(args) {
    const out = execFileSync('curl', ['-sS', '-o', '/dev/null', '-w', '%{http_code} %{time_total}', ...args],
        { encoding: 'utf8', maxBuffer: 1 << 20 });
    const [code, t] = out.trim().split(' ');
    if (!/^2/.test(code)) throw new Error(`curl ${args.join(' ')}: HTTP ${code}`);
    return Number(t);
}

function envdSocketOf(stateDir, sb) {
    const root = path.join(stateDir, 'sandboxes');
    for (const d of fs.readdirSync(root)) {
        try {
            const st = readSandboxState(path.join(root, d));
            if (st.info?.id === sb.sandboxId || st.id === sb.sandboxId || JSON.stringify(st).includes(sb.sandboxId))
                return path.join(root, d, 'run', 'envd.sock');
        } catch { /* not a sandbox directory */ }
    }
    throw new Error(`no sandbox directory for ${sb.sandboxId}`);
}

let stack;
try {
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests: manifestsDir([envManifest('demo', ['alpha', 'beta'], { replicas: 1 })]) });
    const { alpha, beta } = stack.agents;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle >= 1, 'alpha warm', 60000);
    await waitPool(beta, 'demo-1c0gi', (s) => s.idle >= 1, 'beta warm', 60000);
    const a = await claim(alpha, stack.key, { poolName: 'demo', timeout: 600 });
    const b = await claim(beta, stack.key, { poolName: 'demo', timeout: 600 });
    const hdr = (sb) => ['-H', `E2b-Sandbox-Id: ${sb.sandboxId}`, '-H', 'E2b-Sandbox-Port: 49983', '-H', `X-Access-Token: ${sb.envdAccessToken}`];
    const hops = [
        ['envd socket (baseline)', (p) => ['--unix-socket', envdSocketOf(alpha.stateDir, a), `http://envd${p}`, '-H', `X-Access-Token: ${a.envdAccessToken}`]],
        ['agent data plane', (p) => [`${alpha.data}${p}`, ...hdr(a)]],
        ['hub /data', (p) => [`${stack.hub.base}/data${p}`, ...hdr(a)]],
        ['agent -> other cluster', (p) => [`${alpha.data}${p}`, ...hdr(b)]],
    ];
    const file = '/files?path=%2Fhome%2Fuser%2Fbench.bin';
    const rows = [];
    for (const [name, at] of hops) {
        const r = { octet: [], multipart: [], download: [] };
        for (let i = 0; i < ROUNDS; i++) {
            r.octet.push(MB * 1.048576 / curl([...at(file), '-X', 'POST', '-H', 'Content-Type: application/octet-stream', '--data-binary', `@${src}`]));
            r.multipart.push(MB * 1.048576 / curl([...at(file), '-F', `file=@${src};filename=bench.bin`]));
            r.download.push(MB * 1.048576 / curl(at(file)));
        }
        rows.push([name, median(r.multipart), median(r.octet), median(r.download)]);
    }
    console.log(`cpus ${os.cpus().length}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}; ${MB} MiB per transfer, median of ${ROUNDS}`);
    console.log('hop                        multipart MB/s  octet MB/s  download MB/s');
    for (const [n, mp, oc, dl] of rows)
        console.log(`${n.padEnd(26)} ${mp.toFixed(0).padStart(14)} ${oc.toFixed(0).padStart(11)} ${dl.toFixed(0).padStart(14)}`);
} catch (e) {
    console.error(`dataplane_files failed: ${e.stack || e.message}`);
    process.exitCode = 1;
} finally {
    if (stack) await stack.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
}
