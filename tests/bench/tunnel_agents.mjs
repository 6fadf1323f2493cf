// Hub under many agents (DESIGN §12: "hub with 5,000 simulated agents
// reporting every 5 s: ≤ 1 GiB RSS, ≤ 1 core").
//
// Starts PostgreSQL and the hub, registers the simulated clusters by
// inserting rows into `clusters` directly (SHA-256 of each join token), and
// drives bench_tunnel_agents (C, one loop for all agents) through stages of
// N tunnels, ramped at BENCH_RATE connects/s. At each stage it samples the
// hub's VmRSS and utime+stime from /proc over BENCH_WINDOW_S seconds, next to
// an idle-hub baseline measured the same way in the same run.
//
// Environment: AGENTBOX_BUILD_DIR (Release build with bench_tunnel_agents),
// BENCH_STAGES (default "5000,10000"), BENCH_RATE (default 200),
// BENCH_WINDOW_S (default 30), BENCH_SETTLE_S (default 10),
// BENCH_STORM (default 1; 0 skips the storm), BENCH_STORM_LIMIT_S (default 180).
//
// Last, a reconnect storm: the hub is restarted on the same ports with all N
// agents connected; every agent retries at once (256 handshakes in flight,
// the client's cap) and the figure is the time until all N are back, with
// the hub's /healthz lag meanwhile (issue 17: <= 60 s at 10,000 without
// starving the loop).
import { spawn } from 'node:child_process';
import http from 'node:http';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import {
    startPostgres, runMigrate, startHub, httpGet, waitFor, tempDir, run, PG_BIN, buildDir,
    adminHeaders,
} from '../integration/lib/harness.mjs';
import { sampleProcess, procMem, withChildren, mib, fmt, printTable, machineNote, quantile } from './util.mjs';

const STAGES = (process.env.BENCH_STAGES || '5000,10000').split(',').map(Number).filter((n) => n > 0);
const RATE = Number(process.env.BENCH_RATE || 200);
const WINDOW_S = Number(process.env.BENCH_WINDOW_S || 30);
const SETTLE_S = Number(process.env.BENCH_SETTLE_S || 10);
const N = Math.max(...STAGES);
const GIB = 1024 ** 3;
const STORM = process.env.BENCH_STORM !== '0';

function openFilesLimit() {
    const m = fs.readFileSync('/proc/self/limits', 'utf8').match(/^Max open files\s+(\d+)/m);
    return m ? Number(m[1]) : NaN;
}

// Registers n clusters sim-00000.. with fresh tokens; returns the agents file.
async function registerClusters(pg, dir, n) {
    const lines = [];
    const rows = [];
    for (let i = 0; i < n; i++) {
        const id = `sim-${String(i).padStart(5, '0')}`;
        const token = 'abxc_' + crypto.randomBytes(32).toString('hex');
        const hash = crypto.createHash('sha256').update(token).digest('hex');
        lines.push(`${id} ${token}`);
        rows.push(`('${id}','${hash}','bench')`);
    }
    const sqlFile = path.join(dir, 'clusters.sql');
    let sql = '';
    for (let i = 0; i < rows.length; i += 1000) {
        sql += `INSERT INTO clusters (id, token_hash, region) VALUES ${rows.slice(i, i + 1000).join(',')};\n`;
    }
    fs.writeFileSync(sqlFile, sql);
    const r = await run(path.join(PG_BIN, 'psql'), ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', pg.url, '-f', sqlFile]);
    if (r.code !== 0) throw new Error(`inserting clusters failed: ${r.stderr}`);
    const file = path.join(dir, 'agents.txt');
    fs.writeFileSync(file, lines.join('\n') + '\n');
    return file;
}

// The C client: JSON events from stdout, commands on stdin.
function startClient(hub, agentsFile, dir) {
    const bin = path.join(buildDir(), 'bench_tunnel_agents');
    if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: build the bench_tunnel_agents target`);
    const log = fs.openSync(path.join(dir, 'client.log'), 'a');
    const child = spawn(bin, ['--hub', hub.tunnelUrl, '--agents', agentsFile, '--rate', String(RATE)], {
        stdio: ['pipe', 'pipe', log],
    });
    const waiting = [];
    const events = [];
    readline.createInterface({ input: child.stdout }).on('line', (line) => {
        let ev;
        try {
            ev = JSON.parse(line);
        } catch {
            return;
        }
        events.push(ev);
        for (const w of waiting.splice(0)) w();
    });
    const exited = new Promise((resolve) => child.on('exit', (code, sig) => resolve({ code, sig })));
    const client = {
        child,
        logFile: path.join(dir, 'client.log'),
        send: (cmd) => child.stdin.write(cmd + '\n'),
        // the next event of a kind (events seen before the call count)
        next: (kind, timeoutMs) => waitFor(() => {
            const i = events.findIndex((e) => e.event === kind);
            return i >= 0 ? events.splice(i, 1)[0] : null;
        }, { timeoutMs, intervalMs: 100, what: `bench_tunnel_agents '${kind}'` }),
        quit: async () => {
            client.send('quit');
            const t = setTimeout(() => child.kill('SIGKILL'), 10000);
            await exited;
            clearTimeout(t);
        },
        exited,
    };
    return client;
}

// GET /healthz every 100 ms over one keep-alive connection until stop()
// resolves: the hub's loop lag as an HTTP client sees it (the tunnel and the
// HTTP API share one loop). Resolves the latencies in ms.
function probeHub(hub) {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const ms = [];
    let stopped = false;
    const once = () => new Promise((resolve) => {
        const t0 = process.hrtime.bigint();
        const req = http.get(`${hub.base}/healthz`, { agent }, (res) => {
            res.resume();
            res.on('end', () => {
                ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
                resolve();
            });
        });
        req.on('error', () => resolve());
        req.setTimeout(30000, () => req.destroy());
    });
    const done = (async () => {
        while (!stopped) {
            await once();
            await new Promise((r) => setTimeout(r, 100));
        }
        agent.destroy();
        return ms;
    })();
    return { stop: () => {
        stopped = true;
        return done;
    } };
}

async function hubOnline(hub) {
    const r = await httpGet(`${hub.metrics}/metrics`, { timeoutMs: 10000 });
    const line = r.body.split('\n').find((l) => l.startsWith('agentbox_tunnel_sessions_online'));
    return line ? Number(line.split(' ').pop()) : NaN;
}

async function main() {
    console.log(`# hub under simulated agents  build=${buildDir()}  ${machineNote()}`);
    const nofile = openFilesLimit();
    console.log(`open files limit ${nofile}; stages ${STAGES.join(', ')}; ramp ${RATE}/s; window ${WINDOW_S} s`);
    if (nofile < N + 256) {
        console.log(`WARNING: the open files limit ${nofile} is below ${N + 256}: raise it (ulimit -n) before running`);
    }
    const dir = tempDir('agentbox-bench-agents-');
    const pg = await startPostgres();
    const m = await runMigrate(pg.url);
    if (m.code !== 0) throw new Error(`migrate failed: ${m.stderr}`);
    let hub = await startHub(pg.url);
    let client;
    try {
        const t0 = Date.now();
        const agentsFile = await registerClusters(pg, dir, N);
        const last = `sim-${String(N - 1).padStart(5, '0')}`;
        const headers = await adminHeaders(hub.base); // the registry needs a key (issue 13)
        await waitFor(async () => (await httpGet(`${hub.base}/api/clusters/${last}`, { headers })).status === 200, {
            timeoutMs: 30000, what: `the hub to load ${N} clusters`,
        });
        console.log(`registered ${N} clusters in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

        const rows = [];
        const lat = [];
        const pgPids = () => withChildren(pg.proc.pid);
        const idle = await sampleProcess(hub.proc.pid, Math.min(10, WINDOW_S), { postgres: pgPids() });
        rows.push(['0 (idle baseline)', '-', '-', '-', fmt(mib(idle.rssEnd), 1), fmt(mib(idle.rssMax), 1),
            fmt(idle.cores, 3), fmt(idle.others.postgres, 3), '-', '-', '-', '-', 0]);

        client = startClient(hub, agentsFile, dir);
        let stalled = false;
        for (const n of STAGES) {
            client.send(`target ${n}`);
            let ready;
            try {
                ready = await client.next('ready', Math.ceil((n / RATE) * 4 + 120) * 1000);
            } catch (e) {
                // a hub that cannot take the stage is a figure too: say how far it got
                client.send('stats');
                const st = await client.next('stats', 10000);
                console.log(`${n} tunnels NOT established: ${st.established} up, ${st.connecting} connecting, ` +
                    `${st.retrying} retrying, ${st.drops} drops, ${st.refused} refused (${e.message})`);
                stalled = true;
                break;
            }
            console.log(`${n} tunnels established; ramp ${fmt(ready.ramp_ms / 1000, 1)} s ` +
                `(handshake p50 ${ready.handshake_p50_ms} ms, p99 ${ready.handshake_p99_ms} ms, refused ${ready.refused})`);
            await new Promise((r) => setTimeout(r, SETTLE_S * 1000));
            client.send('stats');
            const before = await client.next('stats', 10000); // starts a fresh RTT sample
            const probe = probeHub(hub);
            const s = await sampleProcess(hub.proc.pid, WINDOW_S, {
                postgres: pgPids(), client: [client.child.pid],
            });
            const hz = await probe.stop();
            client.send('stats');
            const st = await client.next('stats', 10000);
            const online = await hubOnline(hub);
            rows.push([String(n), fmt(ready.ramp_ms / 1000, 1), fmt(ready.handshake_p99_ms, 1), online,
                fmt(mib(s.rssEnd), 1), fmt(mib(s.rssMax), 1), fmt(s.cores, 3), fmt(s.others.postgres, 3),
                fmt(s.others.client, 3), fmt(st.ping_rtt_p50_ms, 2), fmt(st.ping_rtt_p99_ms, 2),
                st.reports - before.reports, st.drops]);
            lat.push([String(n), fmt(quantile(hz, 0.5), 2), fmt(quantile(hz, 0.99), 2), fmt(Math.max(...hz), 1),
                fmt(st.ping_rtt_p50_ms, 2), fmt(st.ping_rtt_p99_ms, 2), fmt(st.ping_rtt_max_ms, 1),
                fmt(st.lag_p99_ms, 2), fmt(st.lag_max_ms, 1)]);
            if (st.first_error) console.log(`client's first error: ${st.first_error}`);
            console.log(`${n} tunnels: hub /healthz p50 ${fmt(quantile(hz, 0.5), 2)} ms, p99 ${fmt(quantile(hz, 0.99), 2)} ms; ` +
                `ws ping p50 ${fmt(st.ping_rtt_p50_ms, 2)} ms, p99 ${fmt(st.ping_rtt_p99_ms, 2)} ms; drops ${st.drops}`);
            const verdict = s.rssMax <= GIB && s.cores <= 1 ? 'within' : 'OUTSIDE';
            console.log(`${n} tunnels: hub RSS ${fmt(mib(s.rssMax), 1)} MiB, CPU ${fmt(s.cores, 3)} cores over ` +
                `${fmt(s.wall, 1)} s: ${verdict} the targets (<= 1024 MiB, <= 1 core)`);
        }
        console.log('');
        printTable(['tunnels', 'ramp s', 'hs p99 ms', 'online', 'hub RSS MiB', 'RSS max MiB', 'hub cores',
            'pg cores', 'client cores', 'ping p50 ms', 'ping p99 ms', 'reports in window', 'drops'], rows);
        console.log('');
        printTable(['tunnels', 'hub /healthz p50 ms', 'p99 ms', 'max ms', 'ws ping p50 ms', 'p99 ms', 'max ms',
            'client lag p99 ms', 'max ms'], lat);
        const hwm = procMem(hub.proc.pid).hwm;
        console.log(`hub VmHWM (peak RSS over the run): ${fmt(mib(hwm), 1)} MiB`);
        console.log(`per-tunnel RSS above idle at ${N}: ${fmt((procMem(hub.proc.pid).rss - idle.rssEnd) / N / 1024, 1)} KiB`);
        if (STORM && !stalled) {
            // The restarted hub starts with every agent knocking: time until
            // all are back, and its loop lag (/healthz) while they do.
            const { port, tunnelPort } = hub;
            await hub.proc.stop();
            const t0 = Date.now();
            hub = await startHub(pg.url, { port, tunnelPort });
            const up = Date.now() - t0;
            const probe = probeHub(hub);
            // a storm that does not finish is a figure too (how many made it)
            const limitMs = Number(process.env.BENCH_STORM_LIMIT_S || 180) * 1000;
            let st = { established: 0 };
            while (Date.now() - t0 < limitMs) {
                client.send('stats');
                st = await client.next('stats', 10000);
                if (st.established >= N) break;
                await new Promise((r) => setTimeout(r, 500));
            }
            const allMs = st.established >= N ? Date.now() - t0 : NaN;
            const hz = await probe.stop();
            const online = await hubOnline(hub);
            console.log('');
            printTable(['storm of', 'hub up s', 'all back s', 'online', 'hub /healthz p50 ms', 'p99 ms', 'max ms',
                'probes'], [[String(N), fmt(up / 1000, 1), fmt(allMs / 1000, 1), online, fmt(quantile(hz, 0.5), 2),
                fmt(quantile(hz, 0.99), 2), fmt(hz.length ? Math.max(...hz) : NaN, 1), hz.length]]);
            console.log(st.established >= N
                ? `reconnect storm of ${N}: all back in ${fmt(allMs / 1000, 1)} s: ` +
                  `${allMs <= 60000 ? 'within' : 'OUTSIDE'} the target (<= 60 s)`
                : `reconnect storm of ${N}: only ${st.established} back after ${limitMs / 1000} s: OUTSIDE the target (<= 60 s)`);
        }
    } finally {
        if (client) await client.quit();
        if (!hub.proc.running()) console.log(`hub exited during the run:\n${hub.proc.logs().slice(-4000)}`);
        await hub.proc.stop();
        await pg.cleanup();
    }
}

main().then(() => process.exit(0), (e) => {
    console.error(`tunnel_agents benchmark failed: ${e.stack || e}`);
    process.exit(1);
});
