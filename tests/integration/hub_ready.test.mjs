// `agentbox-hub serve`: /healthz, /readyz following PostgreSQL, /metrics.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import { startPostgres, startHub, runMigrate, httpGet, httpJson, waitFor, freePort, hubBin } from './lib/harness.mjs';

const cleanups = [];
after(async () => {
    for (const fn of cleanups.reverse()) await fn();
});

async function setup() {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    const pg = await startPostgres();
    cleanups.push(() => pg.cleanup());
    const m = await runMigrate(pg.url);
    assert.equal(m.code, 0, m.stderr);
    const hub = await startHub(pg.url);
    cleanups.push(() => hub.proc.stop());
    return { pg, hub };
}

test('/readyz follows PostgreSQL down and up, fast; /healthz stays 200', async () => {
    const { pg, hub } = await setup();
    const logs = () => `\nhub log:\n${hub.proc.logs()}`;

    const r1 = await httpJson(`${hub.base}/readyz`);
    assert.equal(r1.status, 200, `readyz with PostgreSQL up: ${JSON.stringify(r1.json)}${logs()}`);
    assert.deepEqual(r1.json, { status: 'ready' });

    await pg.stop();
    // 503 within 2 s of PostgreSQL going away, and every answer under 1 s.
    const down = await waitFor(async () => {
        const r = await httpJson(`${hub.base}/readyz`, { timeoutMs: 1000 });
        assert.ok(r.ms < 1000, `readyz took ${r.ms} ms with PostgreSQL down`);
        return r.status === 503 ? r : null;
    }, { timeoutMs: 2000, intervalMs: 20, what: '/readyz to answer 503 after PostgreSQL stopped' });
    assert.equal(down.json.code, 503);
    assert.match(down.json.message, /^database unavailable: /);
    for (let i = 0; i < 10; i++) {
        const r = await httpJson(`${hub.base}/readyz`, { timeoutMs: 1000 });
        assert.equal(r.status, 503);
        assert.ok(r.ms < 1000, `readyz #${i} took ${r.ms} ms with PostgreSQL down`);
        const h = await httpJson(`${hub.base}/healthz`, { timeoutMs: 1000 });
        assert.equal(h.status, 200);
        assert.deepEqual(h.json, { status: 'ok' });
    }
    // Many at once: still fast, none hangs (the loop never waits on the pool).
    const burst = await Promise.all(
        Array.from({ length: 50 }, () => httpGet(`${hub.base}/readyz`, { timeoutMs: 1000 })),
    );
    for (const r of burst) assert.equal(r.status, 503);

    await pg.start();
    await waitFor(async () => (await httpGet(`${hub.base}/readyz`, { timeoutMs: 1000 })).status === 200, {
        timeoutMs: 10000,
        what: '/readyz to answer 200 after PostgreSQL restarted',
    });
    assert.equal((await httpGet(`${hub.base}/healthz`)).status, 200);
    assert.ok(hub.proc.running(), `hub exited${logs()}`);

    // SIGTERM stops the loop cleanly (exit 0; under ASan also no leaks).
    const ex = await hub.proc.stop('SIGTERM', 10000);
    assert.deepEqual(ex, { code: 0, signal: null }, `hub did not exit cleanly${logs()}`);
    assert.match(hub.proc.logs(), /hub stopping/);
});

test('/readyz answers 503 at once when PostgreSQL was never there; /healthz 200', async () => {
    const port = await freePort(); // nothing listens here
    const hub = await startHub(`postgres://nobody:secret@127.0.0.1:${port}/none`);
    cleanups.push(() => hub.proc.stop());
    for (let i = 0; i < 5; i++) {
        const r = await httpJson(`${hub.base}/readyz`, { timeoutMs: 1000 });
        assert.equal(r.status, 503);
        assert.ok(r.ms < 1000, `readyz took ${r.ms} ms`);
        assert.match(r.json.message, /database unavailable: .*(refused|failed)/i);
    }
    assert.equal((await httpGet(`${hub.base}/healthz`)).status, 200);
    assert.doesNotMatch(hub.proc.logs(), /secret/, 'the database password must not reach the logs');
});

test('a database that accepts but never answers: /readyz 503 by its deadline, clean exit', async () => {
    // A TCP server that takes connections and says nothing (a hung server).
    const held = [];
    const silent = net.createServer((sock) => held.push(sock));
    await new Promise((r) => silent.listen(0, '127.0.0.1', r));
    cleanups.push(() => {
        for (const s of held) s.destroy();
        return new Promise((r) => silent.close(r));
    });
    const url = `postgres://u:p@127.0.0.1:${silent.address().port}/db?sslmode=disable`;
    const hub = await startHub(url, { args: ['--ready-timeout', '500ms', '--db-connect-timeout', '2s'] });
    cleanups.push(() => hub.proc.stop());

    const r = await httpJson(`${hub.base}/readyz`, { timeoutMs: 3000 });
    assert.equal(r.status, 503);
    assert.match(r.json.message, /no answer within 500 ms/);
    assert.ok(r.ms < 1500, `readyz took ${r.ms} ms with a 500 ms deadline`);
    assert.equal((await httpGet(`${hub.base}/healthz`, { timeoutMs: 1000 })).status, 200);

    // A job stuck connecting does not keep the hub from stopping.
    const again = httpGet(`${hub.base}/readyz`, { timeoutMs: 3000 }).catch((e) => e);
    await waitFor(() => held.length >= 1, { timeoutMs: 3000, what: 'the hub to dial the silent server' });
    const ex = await hub.proc.stop('SIGTERM', 10000);
    assert.deepEqual(ex, { code: 0, signal: null }, `hub did not exit cleanly:\n${hub.proc.logs()}`);
    await again;
});

test('/metrics is Prometheus text with the database gauges', async () => {
    const { hub } = await setup();
    await httpGet(`${hub.base}/readyz`);
    const r = await httpGet(`${hub.metrics}/metrics`);
    assert.equal(r.status, 200);
    assert.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4/);
    const lines = r.body.split('\n').filter((l) => l.length > 0);
    assert.ok(lines.length > 0);
    for (const l of lines) {
        assert.match(
            l,
            /^(# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+|[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf))$/,
            `not a Prometheus text line: ${l}`,
        );
    }
    assert.match(r.body, /^# TYPE agentbox_db_up gauge$/m);
    assert.match(r.body, /^agentbox_db_up 1$/m);
    assert.match(r.body, /^agentbox_db_jobs_total\{result="ok"\} [1-9]/m);
});

test('serve --help lists flags, environment variables and config keys', async () => {
    const { run } = await import('./lib/harness.mjs');
    const r = await run(hubBin(), ['serve', '--help']);
    assert.equal(r.code, 0);
    for (const s of ['--listen', 'AGENTBOX_LISTEN', ':7700', 'DATABASE_URL', 'database_url', '--db-workers']) {
        assert.ok(r.stdout.includes(s), `serve --help lacks ${s}:\n${r.stdout}`);
    }
    const m = await run(hubBin(), ['migrate', '--help']);
    assert.equal(m.code, 0);
    for (const s of ['--migrations-dir', 'AGENTBOX_MIGRATIONS_DIR', './migrations', '--status', 'DATABASE_URL']) {
        assert.ok(m.stdout.includes(s), `migrate --help lacks ${s}:\n${m.stdout}`);
    }
});
