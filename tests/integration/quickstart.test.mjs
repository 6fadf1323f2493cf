// The README's first command, as a newcomer runs it: quickstart.sh --detach
// brings PostgreSQL, the hub and agents alpha and beta up within its
// deadline and writes the env file; the unmodified SDK then creates through
// alpha and through the hub's front door; `stop` leaves no process behind.
// Its own run directory, build directory and free ports, so a developer's
// quick start is left alone.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { repoRoot, freePort, tempDir, run, psqlAt } from './lib/harness.mjs';

const runDir = tempDir('agentbox-qs-run-');
fs.chmodSync(runDir, 0o755); // PostgreSQL runs as its own user under it
const buildDir = path.join(repoRoot(), 'build-qs-test');
let env;

function quickstart(args, timeoutMs) {
    return run('bash', [path.join(repoRoot(), 'scripts', 'quickstart.sh'), ...args], { env, timeoutMs });
}

after(async () => {
    if (env) await quickstart(['stop'], 60000);
});

function parseEnvFile(file) {
    const out = {};
    for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
        const m = /^export ([A-Z0-9_]+)=(.*)$/.exec(line);
        if (m) out[m[1]] = m[2].replace(/^"(.*)"$/, '$1');
    }
    return out;
}

// Runs an SDK script from tests/ with env; its last stdout line, parsed.
async function sdkScript(script, env) {
    const file = path.join(repoRoot(), 'tests', `.qs-sdk-${process.pid}-${Date.now()}.mjs`);
    fs.writeFileSync(file, script);
    try {
        const out = await new Promise((resolve, reject) => {
            const c = spawn('node', [file], { env, cwd: path.join(repoRoot(), 'tests') });
            let so = '';
            let se = '';
            c.stdout.on('data', (d) => (so += d));
            c.stderr.on('data', (d) => (se += d));
            const timer = setTimeout(() => c.kill('SIGKILL'), 120000);
            c.on('exit', (code) => {
                clearTimeout(timer);
                if (code === 0) resolve(so);
                else reject(new Error(`SDK script exited ${code}:\n${se}\n${so}`));
            });
        });
        return JSON.parse(out.trim().split('\n').pop());
    } finally {
        fs.rmSync(file, { force: true });
    }
}

test('quickstart --detach, the SDK through alpha and the hub, then stop leaves nothing', { timeout: 900000 }, async () => {
    const ports = {};
    for (const k of ['HUB_PORT', 'HUB_TUNNEL_PORT', 'ALPHA_E2B_PORT', 'ALPHA_DATA_PORT', 'ALPHA_NATIVE_PORT',
        'BETA_E2B_PORT', 'BETA_DATA_PORT', 'BETA_NATIVE_PORT', 'HUB_METRICS_PORT', 'ALPHA_METRICS_PORT',
        'BETA_METRICS_PORT', 'HUB_DATA_PORT', 'HUB_HTTPS_PORT']) ports[k] = String(await freePort());
    env = { ...process.env, ...ports, AGENTBOX_QS_RUN: runDir, AGENTBOX_QS_BUILD: buildDir };
    const t0 = Date.now();
    const up = await quickstart(['--detach'], 840000);
    assert.equal(up.code, 0, `quickstart failed:\n${up.stdout.slice(-3000)}\n${up.stderr.slice(-3000)}`);
    console.log(`quickstart --detach (build included) took ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const vars = parseEnvFile(path.join(runDir, 'quickstart.env'));
    for (const k of ['AGENTBOX_HUB_URL', 'ALPHA_E2B_API_URL', 'ALPHA_DATA_URL', 'BETA_E2B_API_URL', 'BETA_DATA_URL',
        'HUB_E2B_API_URL', 'HUB_DATA_URL', 'E2B_API_URL', 'E2B_SANDBOX_URL', 'AGENTBOX_API_KEY', 'E2B_API_KEY']) {
        assert.ok(vars[k], `${k} missing from quickstart.env`);
    }

    // least privilege: the hub's connections use a role that is not a superuser and owns nothing
    const adminUrl = fs.readFileSync(path.join(runDir, 'pg', 'url'), 'utf8').trim();
    const roles = await psqlAt(adminUrl, `SELECT DISTINCT a.usename || ':' || r.rolsuper || ':' ||
        (SELECT count(*) FROM pg_class c WHERE c.relowner = r.oid)
        FROM pg_stat_activity a JOIN pg_roles r ON r.rolname = a.usename
        WHERE a.application_name = 'agentbox-hub'`);
    assert.equal(roles, 'agentbox_serve:false:0', 'the hub connects as agentbox_serve only');
    // the listeners are on loopback, and the registry needs a key
    const anon = await fetch(`${vars.AGENTBOX_HUB_URL}/api/clusters`);
    assert.equal(anon.status, 401);

    // the SDK, unchanged, in a child process with the env file's settings
    const script = `
        import { Sandbox } from 'e2b';
        import { Sandbox as CodeInterpreter } from '@e2b/code-interpreter';
        const viaHub = { apiUrl: process.env.HUB_E2B_API_URL, sandboxUrl: process.env.HUB_DATA_URL };
        const a = await Sandbox.create('demo');
        await a.files.write('/home/user/x.txt', 'hello');
        const got = await a.files.read('/home/user/x.txt');
        const h = await Sandbox.create('demo', viaHub);
        const r = await h.commands.run('echo from-$((20+22))');
        // the only way out is the agent's egress gateway: the default route goes
        // to its end of the veth, and slirp's host alias leads nowhere
        const route = (await a.commands.run('ip -4 route show default')).stdout.trim();
        const hub = new URL(process.env.AGENTBOX_HUB_URL).port;
        const probe = await a.commands.run(\`node -e "const s = require('net').connect(\${hub}, '10.0.2.2'); s.on('connect', () => console.log('REACHED')); s.on('error', (e) => console.log(e.code)); s.setTimeout(3000, () => { console.log('TIMEOUT'); s.destroy(); })"\`);
        // the quick start's code-interpreter-v1 (the SDK's default template)
        const ci = await CodeInterpreter.create();
        await ci.runCode('x = 6 * 7');
        const cx = await ci.runCode('x');
        console.log(JSON.stringify({ a: a.sandboxId, got, h: h.sandboxId, out: r.stdout.trim(), route, probe: probe.stdout.trim(), ci: cx.text }));
        await a.kill(); await h.kill(); await ci.kill();
    `;
    const res = await sdkScript(script, { ...process.env, ...vars });
    assert.match(res.a, /^alpha-[a-z0-9]{20}$/);
    assert.equal(res.got, 'hello');
    assert.match(res.h, /^(alpha|beta)-[a-z0-9]{20}$/);
    assert.equal(res.out, 'from-42');
    assert.equal(res.ci, '42', 'runCode keeps state on the quick start\'s code-interpreter-v1');
    assert.match(res.route, /^default via 10\.20[01]\.\d+\.\d+ dev eth0/, res.route);
    assert.notEqual(res.probe, 'REACHED', 'the hub is not reachable from a sandbox');

    // the URLs the SDK builds from a domain alone (README "URLs the SDK builds"):
    // API, envd, getHost and a signed download URL through the front and the hub
    const urls = parseEnvFile(path.join(runDir, 'quickstart-urls.env'));
    assert.equal(urls.E2B_DOMAIN, `agentbox.localhost:${ports.HUB_HTTPS_PORT}`);
    const uenv = { ...process.env, ...urls };
    delete uenv.E2B_API_URL;
    delete uenv.E2B_SANDBOX_URL;
    const u = await sdkScript(`
        import { Sandbox } from 'e2b';
        const s = await Sandbox.create('demo');
        await s.files.write('/home/user/u.txt', 'via-domain');
        const d = await fetch(await s.downloadUrl('/home/user/u.txt'));
        console.log(JSON.stringify({ id: s.sandboxId, host: s.getHost(3000), status: d.status, text: await d.text() }));
        await s.kill();
    `, uenv);
    assert.equal(u.host, `3000-${u.id}.agentbox.localhost:${ports.HUB_HTTPS_PORT}`);
    assert.equal(u.status, 200);
    assert.equal(u.text, 'via-domain', 'a signed URL round-trips through the hub by host');
    const netnsNames = fs.readdirSync(runDir).map((c) => path.join(runDir, c, 'state', 'egress-netns'))
        .filter((f) => fs.existsSync(f)).map((f) => fs.readFileSync(f, 'utf8').trim());
    assert.equal(netnsNames.length, 2, 'one egress namespace per agent');

    // stop: every process it started is gone, sandboxes included
    const pids = fs.readdirSync(path.join(runDir, 'pids')).map((f) => Number(fs.readFileSync(path.join(runDir, 'pids', f), 'utf8')));
    // sandbox processes run /.agentbox/agentbox-envd: found by their cgroup (…/agentbox/<sid>)
    const sids = [];
    for (const c of fs.readdirSync(runDir)) {
        const sd = path.join(runDir, c, 'state', 'sandboxes');
        if (fs.existsSync(sd)) sids.push(...fs.readdirSync(sd));
    }
    assert.ok(sids.length > 0, 'the quick start has warm sandboxes before stop');
    const down = await quickstart(['stop'], 120000);
    assert.equal(down.code, 0, down.stderr);
    env = undefined;
    for (const pid of pids) assert.ok(!fs.existsSync(`/proc/${pid}`), `process ${pid} outlived stop`);
    const leftovers = [];
    for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e)) continue;
        try {
            const cmd = fs.readFileSync(`/proc/${e}/cmdline`, 'utf8');
            const cg = fs.readFileSync(`/proc/${e}/cgroup`, 'utf8');
            if (cmd.includes(buildDir) || cmd.includes(runDir) || sids.some((sid) => cg.includes(`/agentbox/${sid}\n`))) {
                leftovers.push(`${e}: ${cmd.replace(/\0/g, ' ')}`);
            }
        } catch {
            /* gone */
        }
    }
    assert.deepEqual(leftovers, [], 'processes of the quick start remain after stop');
    for (const n of netnsNames) assert.ok(!fs.existsSync(`/run/netns/${n}`), `egress namespace ${n} outlived stop`);
    // nor a mount: the agents' sandbox tmpfs and the sandboxes' writable spaces
    const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n').map((l) => l.split(' ')[4])
        .filter((mp) => mp && mp.startsWith(runDir + '/'));
    assert.deepEqual(mounts, [], 'mounts of the quick start remain after stop');
    void run;
});
