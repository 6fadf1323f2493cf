// Sandbox metrics end to end with a real Prometheus (Debian's `prometheus`,
// /usr/bin/prometheus): Prometheus scrapes the agent's /metrics every second
// (the cAdvisor-named series the agent exports for its local sandboxes), the
// agent runs with --prometheus-url pointing at it, and GET
// /sandboxes/{id}/metrics, GET /sandboxes/metrics and the SDK's getMetrics
// answer with the E2B SandboxMetric shape and plausible numbers for a
// sandbox that burns CPU. Also a live sandbox's logs through the SDK's
// own route. Needs root (namespaces).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { freePort, spawnProc, tempDir, removeTempDir, waitFor, httpGet } from './lib/harness.mjs';
import { startStack, manifestsDir, envManifest, waitPool } from './lib/sandboxes.mjs';

const PROMETHEUS = process.env.AGENTBOX_PROMETHEUS || '/usr/bin/prometheus';

let stack;
let alpha;
let prom;
let promDir;
let E2B;

// Prometheus scraping only the agent's /metrics, every second, storage in a temp dir.
async function startPrometheus(target, port) {
    promDir = tempDir('agentbox-prom-');
    const cfg = path.join(promDir, 'prometheus.yml');
    fs.writeFileSync(cfg, [
        'global: {scrape_interval: 1s, evaluation_interval: 1s}',
        'scrape_configs:',
        '- job_name: agentbox-agent',
        '  scrape_interval: 1s',
        '  scrape_timeout: 1s',
        '  metrics_path: /metrics',
        `  static_configs: [{targets: ['${target}']}]`,
        '',
    ].join('\n'));
    const proc = spawnProc('prometheus', PROMETHEUS, [
        `--config.file=${cfg}`, `--storage.tsdb.path=${path.join(promDir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn',
    ]);
    const base = `http://127.0.0.1:${port}`;
    await waitFor(async () => {
        if (!proc.running()) throw new Error(`prometheus exited:\n${proc.logs()}`);
        return (await httpGet(`${base}/-/ready`, { timeoutMs: 1000 })).status === 200;
    }, { timeoutMs: 30000, what: 'prometheus ready' });
    return { proc, base, port };
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.ok(fs.existsSync(PROMETHEUS), `install Debian's prometheus package (scripts/deps.sh): ${PROMETHEUS}`);
    // Prometheus needs the agent's port, the agent needs Prometheus's URL: reserve
    // Prometheus's port first and start the agent against it.
    const promPort = await freePort();
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 2 })]);
    stack = await startStack({
        clusters: ['alpha'], manifests,
        agentArgs: ['--prometheus-url', `http://127.0.0.1:${promPort}`],
    });
    alpha = stack.agents.alpha;
    prom = await startPrometheus(new URL(alpha.metrics).host, promPort);
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 2, 'alpha warm', 30000);
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (prom) await prom.proc.stop();
    if (stack) await stack.stop();
    if (promDir) removeTempDir(promDir);
});

const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

async function e2b(p) {
    const r = await fetch(alpha.e2b + p, { headers: { 'X-API-Key': stack.key } });
    const text = await r.text();
    let json;
    try { json = JSON.parse(text); } catch { json = undefined; }
    return { status: r.status, json, text };
}

function assertShape(m, what) {
    for (const k of ['timestamp', 'timestampUnix', 'cpuCount', 'cpuUsedPct', 'memUsed', 'memTotal', 'memCache', 'diskUsed', 'diskTotal']) {
        assert.ok(k in m, `${what}: SandboxMetric has ${k}: ${JSON.stringify(m)}`);
    }
    assert.ok(!Number.isNaN(Date.parse(m.timestamp)), `${what}: timestamp is RFC 3339`);
    assert.ok(Math.abs(Date.parse(m.timestamp) / 1000 - m.timestampUnix) < 1, `${what}: timestamps agree`);
    assert.equal(m.cpuCount, 1, `${what}: cpuCount of pool demo-1c0gi`);
    assert.ok(m.cpuUsedPct >= 0, `${what}: cpuUsedPct ${m.cpuUsedPct}`);
    for (const k of ['memUsed', 'memTotal', 'memCache', 'diskUsed', 'diskTotal']) {
        assert.ok(Number.isInteger(m[k]) && m[k] >= 0, `${what}: ${k} ${m[k]}`);
    }
}

test('metrics through Prometheus: the E2B shape with plausible numbers, also through the SDK', async () => {
    const { Sandbox } = E2B;
    const sbx = await Sandbox.create('demo', { timeoutMs: 300000 });
    const id = sbx.sandboxId;
    try {
        // ~40 s of one busy core, in the background
        await sbx.commands.run('timeout 40 sh -c "while :; do :; done"', { background: true });

        // Prometheus has scraped the sandbox's series from the agent
        await waitFor(async () => {
            const q = encodeURIComponent(`container_memory_working_set_bytes{pod="${id}"}`);
            const r = await fetch(`${prom.base}/api/v1/query?query=${q}`);
            const j = await r.json();
            return j.status === 'success' && j.data.result.length === 1;
        }, { timeoutMs: 40000, intervalMs: 500, what: 'prometheus has the sandbox series' });

        // instant, for a list of ids: wait until CPU burnt shows up in the rate
        const now = await waitFor(async () => {
            const r = await e2b(`/sandboxes/metrics?sandbox_ids=${id}`);
            assert.equal(r.status, 200, r.text + logs());
            const m = r.json.sandboxes[id];
            return m && m.memUsed > 0 && m.cpuUsedPct > 0 ? m : null;
        }, { timeoutMs: 60000, intervalMs: 1000, what: 'cpuUsedPct and memUsed above 0' });
        assertShape(now, 'GET /sandboxes/metrics');
        assert.ok(now.cpuUsedPct <= 400, `a one-core busy loop is not ${now.cpuUsedPct}%`);
        assert.ok(now.memUsed < 4 * 1024 ** 3, `memUsed ${now.memUsed} is plausible`);
        assert.ok(now.diskUsed >= 0);

        // the range of one sandbox (default window: the last 15 minutes)
        const r = await e2b(`/sandboxes/${id}/metrics`);
        assert.equal(r.status, 200, r.text);
        assert.ok(Array.isArray(r.json) && r.json.length >= 60, `about 61 points, got ${r.json.length}`);
        for (const m of r.json) assertShape(m, 'GET /sandboxes/{id}/metrics');
        const live = r.json.filter((m) => m.memUsed > 0);
        assert.ok(live.length >= 1, 'points after the create carry memory');
        const t = r.json.map((m) => m.timestampUnix);
        assert.ok(t.every((x, i) => i === 0 || x - t[i - 1] === 15), 'a step of 15 s');

        // an explicit window
        const end = Math.floor(Date.now() / 1000);
        const w = await e2b(`/sandboxes/${id}/metrics?start=${end - 120}&end=${end}`);
        assert.equal(w.status, 200, w.text);
        assert.equal(w.json.length, 9, '120 s at the 15 s minimum step');
        assert.ok(w.json.some((m) => m.memUsed > 0));

        // the SDK
        const sdk = await sbx.getMetrics();
        assert.ok(Array.isArray(sdk) && sdk.length >= 60);
        const last = sdk.filter((m) => m.memUsed > 0).pop();
        assert.ok(last, 'the SDK sees memory');
        assert.equal(last.cpuCount, 1);
        assert.ok(last.timestamp instanceof Date);
        assert.ok(last.cpuUsedPct >= 0);
        const bounded = await Sandbox.getMetrics(id, { start: new Date((end - 120) * 1000), end: new Date(end * 1000) });
        assert.equal(bounded.length, 9);

        // a live sandbox's logs: envd's own output
        const lg = await e2b(`/sandboxes/${id}/logs`);
        assert.equal(lg.status, 200, lg.text);
        assert.ok(lg.json.logs.some((x) => x.line.includes('envd')), lg.text.slice(0, 500));
    } finally {
        await sbx.kill();
    }
    // another principal's sandbox, or a gone one, has no metrics
    const gone = await e2b(`/sandboxes/${id}/metrics`);
    assert.equal(gone.status, 404, gone.text);
    const list = await e2b(`/sandboxes/metrics?sandbox_ids=${id}`);
    assert.equal(list.status, 200);
    assert.deepEqual(list.json.sandboxes, {}, 'ids that no longer resolve are skipped');
});
