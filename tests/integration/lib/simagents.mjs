// Simulated agents for the hub: clusters registered straight into
// PostgreSQL and bench_tunnel_agents (tests/bench, C, one loop for all of
// them) holding their tunnels. Shared by tests/bench/tunnel_agents.mjs and
// the tunnel input-budget test.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { waitFor, run, PG_BIN, buildDir } from './harness.mjs';

// Registers n clusters sim-00000.. with fresh tokens; returns the agents file.
export async function registerClusters(pg, dir, n) {
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
export function startClient(hub, agentsFile, dir, rate) {
    const bin = path.join(buildDir(), 'bench_tunnel_agents');
    if (!fs.existsSync(bin)) throw new Error(`${bin} is missing: build the bench_tunnel_agents target`);
    const log = fs.openSync(path.join(dir, 'client.log'), 'a');
    const child = spawn(bin, ['--hub', hub.tunnelUrl, '--agents', agentsFile, '--rate', String(rate)], {
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
