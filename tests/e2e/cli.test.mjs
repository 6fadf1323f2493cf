// The real E2B CLI (@e2b/cli 2.19.0), driven as a user would against an
// agent: E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY as the quick start
// writes them. sandbox list, info, exec, logs, metrics (from the runtime's
// own usage: no Prometheus here), kill, and the interactive `connect`
// through a PTY in tmux. Needs root (namespaces) and tmux.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { startStack, manifestsDir, envManifest, waitPool } from '../integration/lib/sandboxes.mjs';
import { run, tempDir, waitFor, repoRoot } from '../integration/lib/harness.mjs';

const CLI = path.join(repoRoot(), 'tests', 'node_modules', '@e2b', 'cli', 'dist', 'index.js');

let stack;
let alpha;
let env;
let E2B;
// our own tmux server (its socket in a directory of this test), never anyone else's
const tmuxDir = tempDir('agentbox-tmux-');
const tmuxSock = `abx-cli-${process.pid}`;
const tmux = (...a) => spawnSync('tmux', ['-L', tmuxSock, ...a], { env: { ...process.env, TMUX_TMPDIR: tmuxDir }, encoding: 'utf8' });

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    assert.equal(spawnSync('tmux', ['-V']).status, 0, 'tmux is needed (scripts/deps.sh installs it)');
    const manifests = manifestsDir([envManifest('demo', ['alpha'], { replicas: 3 })]);
    stack = await startStack({ clusters: ['alpha'], manifests });
    alpha = stack.agents.alpha;
    await waitPool(alpha, 'demo-1c0gi', (s) => s.idle === 3, 'alpha warm', 60000);
    const home = tempDir('agentbox-cli-home-');
    env = {
        PATH: process.env.PATH, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config'), TERM: 'xterm',
        E2B_API_URL: alpha.e2b, E2B_SANDBOX_URL: alpha.data, E2B_API_KEY: stack.key,
        // the CLI's update check stays off in npm-run scripts: no registry traffic
        npm_config_user_agent: 'npm/10.0.0 node/v20',
    };
    process.env.E2B_API_URL = alpha.e2b;
    process.env.E2B_SANDBOX_URL = alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    tmux('kill-server');
    if (stack) await stack.stop();
});

const e2b = async (...args) => {
    const r = await run(process.execPath, [CLI, ...args], { env, timeoutMs: 60000, input: '' }); // stdin at EOF, as from /dev/null
    return { ...r, all: `${r.stdout}\n${r.stderr}` };
};

test('e2b sandbox list, info, exec, logs, metrics, kill', async () => {
    const { Sandbox } = E2B;
    const sbx = await Sandbox.create('demo', { metadata: { via: 'cli' } });
    const id = sbx.sandboxId;
    try {
        const ls = await e2b('sandbox', 'list', '--format', 'json');
        assert.equal(ls.code, 0, ls.all);
        const listed = JSON.parse(ls.stdout);
        assert.ok(listed.some((s) => s.sandboxId === id), ls.stdout);
        const filtered = await e2b('sandbox', 'list', '-m', 'via=cli', '--format', 'json');
        assert.equal(filtered.code, 0, filtered.all);
        assert.deepEqual(JSON.parse(filtered.stdout).map((s) => s.sandboxId), [id]);

        const info = await e2b('sandbox', 'info', id, '--format', 'json');
        assert.equal(info.code, 0, info.all);
        const i = JSON.parse(info.stdout);
        assert.equal(i.sandboxId, id);
        assert.equal(i.templateId, 'demo-1c0gi');

        const ex = await e2b('sandbox', 'exec', id, 'sh', '-c', 'echo out-$((6*7)); echo err >&2; exit 3');
        assert.match(ex.stdout, /out-42/, ex.all);
        assert.match(ex.stderr, /err/, ex.all);
        assert.equal(ex.code, 3, `exec passes the exit code on: ${ex.all}`);

        const logs = await e2b('sandbox', 'logs', id, '--format', 'json');
        assert.equal(logs.code, 0, logs.all);
        assert.doesNotMatch(logs.all, /SyntaxError|Unexpected token/, 'each log line is JSON');
        assert.ok(logs.stdout.trim().length > 0, 'envd logged something');

        const m = await e2b('sandbox', 'metrics', id, '--format', 'json');
        assert.equal(m.code, 0, m.all);
        assert.doesNotMatch(m.all, /501|not enabled|prometheus/i, m.all);
        assert.match(m.stdout, /memUsed|cpuUsedPct|CPU|Memory/i, m.all);

        const k = await e2b('sandbox', 'kill', id);
        assert.equal(k.code, 0, k.all);
        await waitFor(async () => !(await Sandbox.list().nextItems()).some((s) => s.sandboxId === id),
            { timeoutMs: 10000, what: 'the killed sandbox to leave the list' });
    } finally {
        await Sandbox.kill(id).catch(() => {});
    }
});

test('e2b sandbox connect: an interactive terminal through a PTY (tmux)', async () => {
    const { Sandbox } = E2B;
    const sbx = await Sandbox.create('demo');
    const session = `abx-cli-${process.pid}`;
    const cmd = ['env', '-i', ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
        process.execPath, CLI, 'sandbox', 'connect', sbx.sandboxId].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    try {
        const s = tmux('new-session', '-d', '-s', session, '-x', '120', '-y', '30', cmd);
        assert.equal(s.status, 0, s.stderr);
        const pane = () => tmux('capture-pane', '-p', '-t', session).stdout || '';
        // the sandbox's shell prompt, then a command typed into it
        await waitFor(() => /\$\s*$/m.test(pane()) || /user@/.test(pane()),
            { timeoutMs: 20000, what: `a shell prompt in the pane:\n${pane()}` });
        tmux('send-keys', '-t', session, 'echo pty-$((6*7)) $(whoami)', 'Enter');
        await waitFor(() => /pty-42 user/.test(pane()), { timeoutMs: 10000, what: `the command's output:\n${pane()}` });
        tmux('send-keys', '-t', session, 'exit', 'Enter');
        await waitFor(() => tmux('has-session', '-t', session).status !== 0,
            { timeoutMs: 10000, what: 'the CLI to end with the shell' });
    } finally {
        tmux('kill-session', '-t', session);
        await Sandbox.kill(sbx.sandboxId).catch(() => {});
    }
});
