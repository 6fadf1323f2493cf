// Benchmarks of the local runtime and the data plane, each against a baseline
// measured in the same run (DESIGN §12):
//   1. claims from a warm pool through the native API at 1 and 32 concurrent
//      claimers (p50/p99), against an authenticated GET on the same API;
//      sustained claims/s with refills (claim + delete in a loop);
//   2. a Connect process.Start of `true` round trip through the data plane
//      against the same request straight to envd's unix socket;
//   3. a 100 MB GET /files through the data plane against Debian's nginx
//      reverse-proxying the same envd socket (and the socket directly).
//
//   AGENTBOX_BUILD_DIR=<a release build> node tests/bench/dataplane.mjs
// Needs root (namespaces), PostgreSQL 15, curl, and nginx (installed with
// apt-get when missing). Prints figures and ratios; never fails on numbers.
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { quantile, fmt, printTable, machineNote, row, atLeast, loadNow } from './util.mjs';
import { freePort, tempDir, waitFor } from '../integration/lib/harness.mjs';
import {
    startStack, manifestsDir, envManifest, native, claim, waitPool, readSandboxState,
} from '../integration/lib/sandboxes.mjs';

const WARM = 40;

function ensureNginx() {
    try {
        execFileSync('nginx', ['-v'], { stdio: 'ignore' });
        return;
    } catch {
        /* missing */
    }
    console.log('bench: installing nginx (Debian) for the proxy baseline');
    execFileSync('apt-get', ['update', '-qq'], { stdio: 'inherit' });
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'nginx'], {
        stdio: 'inherit', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
}

const ms = (t0) => Number(process.hrtime.bigint() - t0) / 1e6;

async function timed(fn) {
    const t0 = process.hrtime.bigint();
    await fn();
    return ms(t0);
}

// --- 1. claims -------------------------------------------------------------------------

async function claimLatencies(agent, key, concurrency, rounds) {
    const lat = [];
    for (let r = 0; r < rounds; r++) {
        await waitPool(agent, 'bench-1c0gi', (s) => s.idle >= Math.min(WARM, concurrency) && s.starting === 0,
            'a warm pool', 120000);
        const ids = [];
        await Promise.all(Array.from({ length: concurrency }, async () => {
            lat.push(await timed(async () => {
                const sb = await claim(agent, key, { poolName: 'bench', timeout: 120 });
                ids.push(sb.sandboxId);
            }));
        }));
        await Promise.all(ids.map((id) => native(agent, key, 'DELETE', `/v1/sandboxes/${id}`)));
    }
    return lat;
}

async function sustained(agent, key, workers, seconds) {
    const end = Date.now() + seconds * 1000;
    let n = 0;
    await Promise.all(Array.from({ length: workers }, async () => {
        while (Date.now() < end) {
            const sb = await claim(agent, key, { poolName: 'bench', timeout: 120 });
            n++;
            await native(agent, key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
        }
    }));
    return n / seconds;
}

// --- 2. Connect round trips ----------------------------------------------------------------

function envelope(obj) {
    const body = Buffer.from(JSON.stringify(obj));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    return Buffer.concat([head, body]);
}

// One process.Start of `true`, read to the end of the stream.
function startTrue(opts, token, id) {
    const body = envelope({ process: { cmd: 'true', args: [] } });
    return new Promise((resolve, reject) => {
        const req = http.request({
            ...opts, method: 'POST', path: '/process.Process/Start',
            headers: {
                'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1',
                'X-Access-Token': token, 'E2b-Sandbox-Id': id, 'E2b-Sandbox-Port': '49983',
                'Content-Length': body.length,
            },
        }, (res) => {
            let n = 0;
            res.on('data', (c) => (n += c.length));
            res.on('end', () => (res.statusCode === 200 && n > 0 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
        });
        req.on('error', reject);
        req.end(body);
    });
}

async function roundTrips(opts, sb, n) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const o = { ...opts, agent };
    for (let i = 0; i < 20; i++) await startTrue(o, sb.envdAccessToken, sb.sandboxId); // warm up
    const lat = [];
    for (let i = 0; i < n; i++) lat.push(await timed(() => startTrue(o, sb.envdAccessToken, sb.sandboxId)));
    agent.destroy();
    return lat;
}

// --- 3. bulk download -------------------------------------------------------------------------

// MB/s of one curl download (best of runs).
function curlSpeed(args, runs = 5) {
    let best = 0;
    for (let i = 0; i < runs; i++) {
        const out = execFileSync('curl', ['-s', '-o', '/dev/null', '-w', '%{speed_download} %{size_download}', ...args]).toString();
        const [speed, size] = out.split(' ').map(Number);
        if (size < 100 * 1e6) throw new Error(`short download: ${size} bytes (${args.join(' ')})`);
        best = Math.max(best, speed / 1e6);
    }
    return best;
}

// nginx as the peer: reverse proxy to envd's socket (the data plane's job)
// and, under /static/, the same number of bytes from a file in staticDir
// (what an HTTP server on this machine does with no upstream at all).
async function startNginx(sock, staticDir) {
    const dir = tempDir('agentbox-nginx-');
    const port = await freePort();
    const conf = path.join(dir, 'nginx.conf');
    // the worker runs as root: envd's socket is root's, mode 0660
    fs.writeFileSync(conf, `user root;
worker_processes 1;
daemon off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  upstream envd { server unix:${sock}; keepalive 16; }
  sendfile on;
  server {
    listen 127.0.0.1:${port};
    location /static/ { alias ${staticDir}/; }
    location / {
      proxy_pass http://envd;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`);
    const proc = spawn('nginx', ['-c', conf, '-p', dir], { stdio: 'ignore' });
    await waitFor(async () => {
        try {
            const r = await fetch(`http://127.0.0.1:${port}/health`);
            return r.status === 204;
        } catch {
            return false;
        }
    }, { timeoutMs: 10000, what: `nginx (see ${dir}/error.log)` });
    const exited = new Promise((res) => proc.once('exit', res));
    return {
        port,
        stop: async () => {
            proc.kill('SIGQUIT'); // graceful: the workers finish, then the master exits
            await exited;
        },
    };
}

function sandboxSocket(stateDir, id) {
    const root = path.join(stateDir, 'sandboxes');
    for (const d of fs.readdirSync(root)) {
        try {
            const st = readSandboxState(path.join(root, d));
            if (st.info && st.info.id === id) return path.join(root, d, 'run', 'envd.sock');
        } catch {
            /* being created */
        }
    }
    throw new Error(`no directory for sandbox ${id}`);
}

// ---------------------------------------------------------------------------------------------

async function main() {
    ensureNginx();
    console.log(`bench: data plane and local runtime (${machineNote ? machineNote() : ''})`);
    const manifests = manifestsDir([envManifest('bench', ['alpha'], { replicas: WARM, startupTimeout: '120s' })]);
    const stack = await startStack({ clusters: ['alpha'], manifests });
    const { alpha } = stack.agents;
    const key = stack.key;
    try {
        // 1. claims
        const base = [];
        for (let i = 0; i < 200; i++) base.push(await timed(() => native(alpha, key, 'GET', '/v1/sandboxes?limit=1')));
        const c1 = await claimLatencies(alpha, key, 1, 40);
        const c32 = await claimLatencies(alpha, key, 32, 3);
        await waitPool(alpha, 'bench-1c0gi', (s) => s.idle >= 8 && s.starting === 0, 'refilled', 120000);
        const rate = await sustained(alpha, key, 8, 10);
        printTable(['claims (native API, warm pool)', 'p50 ms', 'p99 ms', 'n'], [
            ['baseline: GET /v1/sandboxes (same auth)', fmt(quantile(base, 0.5)), fmt(quantile(base, 0.99)), base.length],
            ['claim, 1 claimer', fmt(quantile(c1, 0.5)), fmt(quantile(c1, 0.99)), c1.length],
            ['claim, 32 concurrent claimers', fmt(quantile(c32, 0.5)), fmt(quantile(c32, 0.99)), c32.length],
        ]);
        console.log(`sustained claim+delete with refills, 8 workers, 10 s: ${fmt(rate, 1)} claims/s`);
        console.log(`ratio claim(1) p50 / baseline p50: ${fmt(quantile(c1, 0.5) / quantile(base, 0.5))}`);

        // 2. round trips
        await waitPool(alpha, 'bench-1c0gi', (s) => s.idle >= 1, 'a warm sandbox', 120000);
        const sb = await claim(alpha, key, { poolName: 'bench', timeout: 600 });
        const sock = sandboxSocket(alpha.stateDir, sb.sandboxId);
        const u = new URL(alpha.data);
        // envd keeps at most 1024 processes tracked: stay well below in one sandbox
        const viaDp = await roundTrips({ host: u.hostname, port: Number(u.port) }, sb, 300);
        const direct = await roundTrips({ socketPath: sock }, sb, 300);
        printTable(["process.Start('true') round trip", 'p50 ms', 'p99 ms', 'n'], [
            ["straight to envd's unix socket", fmt(quantile(direct, 0.5), 3), fmt(quantile(direct, 0.99), 3), direct.length],
            ['through the data plane (:8091)', fmt(quantile(viaDp, 0.5), 3), fmt(quantile(viaDp, 0.99), 3), viaDp.length],
        ]);
        console.log(`added by the data plane (p50): ${fmt(quantile(viaDp, 0.5) - quantile(direct, 0.5), 3)} ms; `
            + `ratio ${fmt(quantile(viaDp, 0.5) / quantile(direct, 0.5))}`);

        // 3. bulk download, from a fresh sandbox
        await native(alpha, key, 'DELETE', `/v1/sandboxes/${sb.sandboxId}`);
        const sb2 = await claim(alpha, key, { poolName: 'bench', timeout: 600 });
        const sock2 = sandboxSocket(alpha.stateDir, sb2.sandboxId);
        const Sandbox = (await import('e2b')).Sandbox;
        const s = new Sandbox({ sandboxId: sb2.sandboxId, envdAccessToken: sb2.envdAccessToken, envdVersion: '0.6.13', sandboxUrl: alpha.data, apiKey: 'x' });
        await s.commands.run('head -c 104857600 /dev/urandom > /home/user/big.bin');
        const q = '/files?path=%2Fhome%2Fuser%2Fbig.bin';
        const tok = ['-H', `X-Access-Token: ${sb2.envdAccessToken}`];
        const staticDir = tempDir('agentbox-nginx-static-');
        fs.writeFileSync(path.join(staticDir, 'big.bin'), Buffer.alloc(104857600, 7));
        const nginx = await startNginx(sock2, staticDir);
        try {
            // interleaved rounds, so a burst of load elsewhere hits every path alike
            const best = { raw: 0, ng: 0, dp: 0, st: 0 };
            for (let r = 0; r < 3; r++) {
                best.raw = Math.max(best.raw, curlSpeed([...tok, '--unix-socket', sock2, `http://envd${q}`], 2));
                best.ng = Math.max(best.ng, curlSpeed([...tok, `http://127.0.0.1:${nginx.port}${q}`], 2));
                best.dp = Math.max(best.dp, curlSpeed([...tok, '-H', `E2b-Sandbox-Id: ${sb2.sandboxId}`, '-H',
                    'E2b-Sandbox-Port: 49983', `${alpha.data}${q}`], 2));
                best.st = Math.max(best.st, curlSpeed([`http://127.0.0.1:${nginx.port}/static/big.bin`], 2));
            }
            const load = loadNow();
            printTable([`100 MB GET /files (curl, best of 6, interleaved; load ${fmt(load, 1)})`, 'MB/s'], [
                ["envd's unix socket directly", fmt(best.raw, 0)],
                ['nginx reverse proxy (1 worker, proxy_buffering off)', fmt(best.ng, 0)],
                ['agentbox data plane', fmt(best.dp, 0)],
                ['nginx serving the same 100 MB from a file (sendfile, no upstream)', fmt(best.st, 0)],
            ]);
            console.log(`ratio data plane / nginx reverse proxy: ${fmt(best.dp / best.ng)}; ` +
                `data plane / nginx static: ${fmt(best.dp / best.st)}`);
            row('dataplane-nginx', 'data plane vs nginx reverse proxy, same envd upstream, 100 MB GET',
                `${fmt(best.dp, 0)} MB/s = ${fmt(best.dp / best.ng)}x (load ${fmt(load, 1)})`,
                `nginx ${fmt(best.ng, 0)} MB/s; envd direct ${fmt(best.raw, 0)}; nginx static ${fmt(best.st, 0)}`,
                '>= 1.0x', atLeast(best.dp / best.ng, 1));
        } finally {
            await nginx.stop();
        }
    } finally {
        await stack.stop();
    }
}

main().then(() => process.exit(0), (e) => {
    console.error(e);
    process.exit(1);
});
