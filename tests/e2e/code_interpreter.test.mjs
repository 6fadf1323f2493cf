// The unmodified @e2b/code-interpreter SDK (2.8.0) against the quick start's
// code-interpreter-v1 env (scripts/quickstart-manifests/code-interpreter.yaml):
// its start command runs our server (images/code-interpreter/server.py) on
// :49999 when the idle sandbox is made, and the sandbox is claimable only once
// the readiness check passes. Through agent alpha and through the hub's front
// doors: runCode with state kept, streamed stdout/stderr, results (text and a
// matplotlib PNG), errors with tracebacks, contexts, env vars, timeouts.
// Also start commands of plain envs: run as `user`, waited for before the
// create returns, and create errors that name the check and quote the
// command's output. Needs root (namespaces) and Debian's python3-ipykernel,
// python3-jupyter-client and python3-matplotlib (scripts/deps.sh).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startStack, manifestsDir, waitPool } from '../integration/lib/sandboxes.mjs';
import { repoRoot } from '../integration/lib/harness.mjs';

const INSTALLED = '/usr/local/lib/agentbox/code-interpreter/server.py';
const POOL = 'code-interpreter-v1-1c1gi';

let stack;
let alpha;
let serverDir;
let CI;
let plainIdleAt; // when plain's first sandbox became idle (polled every 50 ms from the start)

// A plain env (template envd) whose member lists its own runtimes.
const plainEnv = (name, runtimes, startupTimeout = '30s', replicas = 1) => `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name}, namespace: default}
spec:
  templateRef: {name: envd}
  clusters:
  - clusterID: alpha
    members:
    - name: ${name}-1c0gi
      config:
        inlineResources: {requests: {cpu: "1", memory: 512Mi}}
      spec:
        replicas: ${replicas}
        defaultStartupTimeout: ${startupTimeout}
        runtimes:
${runtimes}`;

before(async () => {
    assert.equal(process.getuid(), 0, 'the local runtime needs root for its namespaces');
    // Sandboxes see the host's /opt and /usr read-only: the server goes where
    // they can read it, in place of the quick start's installed copy.
    serverDir = fs.mkdtempSync('/opt/agentbox-ci-test-');
    fs.chmodSync(serverDir, 0o755);
    const server = path.join(serverDir, 'server.py');
    fs.copyFileSync(path.join(repoRoot(), 'images/code-interpreter/server.py'), server);
    fs.chmodSync(server, 0o755);
    const ci = fs.readFileSync(path.join(repoRoot(), 'scripts/quickstart-manifests/code-interpreter.yaml'), 'utf8');
    assert.ok(ci.includes(INSTALLED), 'the quick start manifest runs the installed server');
    const manifests = manifestsDir([
        ci.replaceAll(INSTALLED, server),
        plainEnv('plain', `        - name: envd
        - name: web
          port: 8000
          readinessProbe: {tcpSocket: {port: 8000}}
          config:
            startCommand: date +%s%3N > /home/user/t-start; id -un > /home/user/start-user; echo "START=$START_MARK" > /home/user/start-env; sleep 2; exec python3 -m http.server 8000 --bind 127.0.0.1
`),
        plainEnv('broken', `        - name: app
          readinessProbe: {tcpSocket: {port: 8123}}
          config:
            startCommand: echo boom-output-line; echo second-line >&2; exit 3
`, '20s', 1),
        plainEnv('stuck', `        - name: app
          readinessProbe: {httpGet: {port: 8124, path: /ready}}
          config:
            startCommand: echo waiting-forever; exec sleep 1000
`, '3s', 1),
    ]);
    stack = await startStack({ clusters: ['alpha', 'beta'], manifests });
    alpha = stack.agents.alpha;
    const plainIdle = waitPool(alpha, 'plain-1c0gi', (s) => s.idle >= 1, 'plain warm', 60000).then(() => Date.now(), (e) => e);
    await waitPool(alpha, POOL, (s) => s.idle >= 1, 'alpha code interpreter warm', 180000);
    await waitPool(stack.agents.beta, POOL, (s) => s.idle >= 1, 'beta code interpreter warm', 180000);
    plainIdleAt = await plainIdle;
    if (plainIdleAt instanceof Error) throw plainIdleAt;
    CI = await import('@e2b/code-interpreter');
});

after(async () => {
    if (process.env.CI_TEST_KEEP_LOG && alpha) fs.copyFileSync(alpha.proc.logFile, process.env.CI_TEST_KEEP_LOG);
    if (stack) await stack.stop();
    if (serverDir) fs.rmSync(serverDir, { recursive: true, force: true });
});

const ways = () => ({
    'agent alpha': { apiUrl: alpha.e2b, sandboxUrl: alpha.data, apiKey: stack.key },
    'the hub': { apiUrl: `${stack.hub.base}/e2b`, sandboxUrl: `${stack.hub.base}/data`, apiKey: stack.key },
});
const logs = () => `\nagent log:\n${alpha.proc.logs().split('\n').slice(-30).join('\n')}`;

for (const way of ['agent alpha', 'the hub']) {
    test(`through ${way}: runCode keeps state, streams stdout and stderr, returns results and errors`, async () => {
        const { Sandbox } = CI;
        // no template: the SDK's default, code-interpreter-v1
        const sbx = await Sandbox.create({ ...ways()[way], timeoutMs: 300000 });
        try {
            const a = await sbx.runCode('x = 41\nx + 1');
            assert.equal(a.error, undefined, JSON.stringify(a.error) + logs());
            assert.equal(a.text, '42');
            assert.equal(a.results.length, 1);
            assert.equal(a.results[0].isMainResult, true);
            const b = await sbx.runCode('x * 2');
            assert.equal(b.text, '82', 'state is kept between calls');
            assert.ok(b.executionCount > a.executionCount, `execution counts ${a.executionCount} then ${b.executionCount}`);

            // stdout and stderr arrive while the code runs
            const seen = [];
            const t0 = Date.now();
            const c = await sbx.runCode('import sys, time\nprint("one", flush=True)\ntime.sleep(1)\nprint("two", file=sys.stderr, flush=True)', {
                onStdout: (m) => seen.push(['out', m.line, Date.now() - t0]),
                onStderr: (m) => seen.push(['err', m.line, Date.now() - t0]),
            });
            assert.deepEqual(c.logs.stdout, ['one\n']);
            assert.deepEqual(c.logs.stderr, ['two\n']);
            assert.deepEqual(seen.map((s) => [s[0], s[1]]), [['out', 'one\n'], ['err', 'two\n']]);
            assert.ok(seen[1][2] - seen[0][2] >= 800, `streamed: ${seen[1][2] - seen[0][2]} ms apart`);

            // an error: name, value, traceback; the execution still ends
            let onError;
            const e = await sbx.runCode('def f():\n    return 1 / 0\nf()', { onError: (x) => { onError = x; } });
            assert.equal(e.error.name, 'ZeroDivisionError');
            assert.equal(e.error.value, 'division by zero');
            // the kernel's traceback, ANSI colours included (as E2B's)
            const plain = e.error.traceback.replace(/\x1b\[[0-9;]*m/g, '');
            assert.match(plain, /ZeroDivisionError/);
            assert.match(plain, /return 1 \/ 0/);
            assert.equal(onError.name, 'ZeroDivisionError');
            assert.equal((await sbx.runCode('x')).text, '41', 'an error does not lose the state');
        } finally {
            await sbx.kill();
        }
    });
}

test('a matplotlib plot comes back as a PNG result; display() of other types too', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], timeoutMs: 300000 });
    try {
        const r = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title("t")\nplt.show()');
        assert.equal(r.error, undefined, JSON.stringify(r.error));
        const png = r.results.find((x) => x.png);
        assert.ok(png, `a PNG result among ${JSON.stringify(r.results.map((x) => x.formats()))}`);
        const bytes = Buffer.from(png.png, 'base64');
        assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
        assert.ok(bytes.length > 1000, `a real image (${bytes.length} bytes)`);
        assert.equal(png.isMainResult, false, 'a display, not the cell value');

        const h = await sbx.runCode('from IPython.display import HTML, display\ndisplay(HTML("<b>hi</b>"))\n{"k": [1, 2]}');
        assert.ok(h.results.some((x) => x.html === '<b>hi</b>'), JSON.stringify(h.results));
        assert.equal(h.text, "{'k': [1, 2]}");
    } finally {
        await sbx.kill();
    }
});

// runCode goes to :49999, not envd: with the sandbox's access token it is the
// owner's traffic and keeps the sandbox from idling out (the E2B timeout is
// an idle timeout); silence still reclaims it.
test('runCode traffic keeps a sandbox alive past its idle timeout; silence reclaims it', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], timeoutMs: 4000 });
    try {
        const until = Date.now() + 10000;
        while (Date.now() < until) {
            assert.equal((await sbx.runCode('1 + 1')).text, '2');
            await new Promise((r) => setTimeout(r, 1000)); // the caller's pace, not a wait for state
        }
        assert.equal(await sbx.isRunning(), true, 'alive 10 s into a 4 s idle timeout');
        const deadline = Date.now() + 20000;
        while (await sbx.isRunning()) {
            assert.ok(Date.now() < deadline, 'reclaimed once silent');
            await new Promise((r) => setTimeout(r, 250));
        }
    } finally {
        await sbx.kill().catch(() => {});
    }
});

test('contexts: create, list, separate state, restart, remove', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], timeoutMs: 300000 });
    try {
        await sbx.files.makeDir('/home/user/work');
        const ctx = await sbx.createCodeContext({ cwd: '/home/user/work' });
        assert.match(ctx.id, /^[0-9a-f-]{36}$/);
        assert.equal(ctx.language, 'python');
        assert.equal(ctx.cwd, '/home/user/work');
        assert.ok((await sbx.listCodeContexts()).some((c) => c.id === ctx.id));

        await sbx.runCode('y = "default"');
        await sbx.runCode('y = "mine"', { context: ctx });
        assert.equal((await sbx.runCode('y', { context: ctx })).text, "'mine'");
        assert.equal((await sbx.runCode('y')).text, "'default'", 'contexts do not share state');
        assert.equal((await sbx.runCode('import os; os.getcwd()', { context: ctx })).text, "'/home/user/work'");

        await sbx.restartCodeContext(ctx);
        const gone = await sbx.runCode('y', { context: ctx });
        assert.equal(gone.error?.name, 'NameError', 'a restart drops the state');

        await sbx.removeCodeContext(ctx);
        assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
        await assert.rejects(sbx.runCode('1', { context: ctx }), /not found/i);
        await assert.rejects(sbx.runCode('1', { language: 'r' }), /400/);
    } finally {
        await sbx.kill();
    }
});

test('env vars: those of the create hold in every context, those of runCode for one execution; the kernel runs as user', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], envs: { CREATE_VAR: 'from-create' }, timeoutMs: 300000 });
    try {
        // the server started before the claim; the create's env vars still reach its kernels
        assert.equal((await sbx.runCode('import os; os.environ.get("CREATE_VAR")')).text, "'from-create'", logs());
        const ctx = await sbx.createCodeContext();
        assert.equal((await sbx.runCode('import os; os.environ.get("CREATE_VAR")', { context: ctx })).text, "'from-create'");

        const r = await sbx.runCode('import os; os.environ.get("CI_VAR"), os.environ.get("CREATE_VAR")', {
            envs: { CI_VAR: 'set-for-this-call', CREATE_VAR: 'overridden' },
        });
        assert.equal(r.text, "('set-for-this-call', 'overridden')");
        const after = await sbx.runCode('import os; repr(os.environ.get("CI_VAR")), os.environ.get("CREATE_VAR")');
        assert.equal(after.text, "('None', 'from-create')", 'restored after the execution');
        assert.equal((await sbx.runCode('import getpass; getpass.getuser()')).text, "'user'");
    } finally {
        await sbx.kill();
    }
});

test('the server runs code only for callers with the sandbox\'s access token (the data plane does not check it)', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], timeoutMs: 300000 });
    try {
        const attempt = (token) => fetch(`${alpha.data}/execute`, {
            method: 'POST',
            headers: {
                'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999',
                ...(token === undefined ? {} : { 'X-Access-Token': token }),
            },
            body: JSON.stringify({ code: 'open("/home/user/pwned", "w").write("x")' }),
        });
        for (const token of [undefined, '', 'not-the-token', `${sbx.envdAccessToken}x`]) {
            const r = await attempt(token);
            assert.equal(r.status, 401, `token ${JSON.stringify(token)}: ${r.status} ${await r.text()}`);
        }
        // a wrong token is refused on the context routes too
        const ctx = await fetch(`${alpha.data}/contexts`, {
            headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': '49999', 'X-Access-Token': 'nope' },
        });
        assert.equal(ctx.status, 401);
        assert.equal(await sbx.files.exists('/home/user/pwned'), false, 'no code ran');
        const ok = await attempt(sbx.envdAccessToken);
        assert.equal(ok.status, 200);
        await ok.text();
        assert.equal(await sbx.files.exists('/home/user/pwned'), true, 'the token holder runs code');
    } finally {
        await sbx.kill();
    }
});

test('timeoutMs ends a runCode with TimeoutError and frees the context for the next call', async () => {
    const { Sandbox, TimeoutError } = CI;
    const sbx = await Sandbox.create({ ...ways()['agent alpha'], timeoutMs: 300000 });
    try {
        const t0 = Date.now();
        await assert.rejects(sbx.runCode('import time\ntime.sleep(60)', { timeoutMs: 1500 }), (e) => e instanceof TimeoutError);
        assert.ok(Date.now() - t0 < 10000, 'the timeout held');
        // the server interrupted the kernel: the context answers again
        const r = await sbx.runCode('"after"', { timeoutMs: 20000 });
        assert.equal(r.text, "'after'");
    } finally {
        await sbx.kill();
    }
});

test('a plain env: the start command runs as user and is ready when the create returns', async () => {
    const { Sandbox } = CI;
    const sbx = await Sandbox.create('plain', { ...ways()['agent alpha'], envs: { START_MARK: 'claim' }, timeoutMs: 120000 });
    try {
        // the sandbox became idle (claimable) only once its server listened,
        // 2 s after its start command began
        const tStart = Number((await sbx.files.read('/home/user/t-start')).trim());
        assert.ok(plainIdleAt - tStart >= 1900, `idle ${plainIdleAt - tStart} ms after the start command began`);
        // ready already: no retry loop
        const r = await sbx.commands.run('python3 -c "import urllib.request as u; print(u.urlopen(\'http://127.0.0.1:8000/\').status)"');
        assert.equal(r.stdout.trim(), '200', r.stderr + logs());
        assert.equal((await sbx.files.read('/home/user/start-user')).trim(), 'user');
        // it ran when the idle sandbox was made: the claim's env vars came later
        assert.equal((await sbx.files.read('/home/user/start-env')).trim(), 'START=');
        assert.equal((await sbx.commands.run('echo $START_MARK')).stdout.trim(), 'claim');
        const ps = await sbx.commands.run('ps -o user=,args= -C python3');
        assert.match(ps.stdout, /^user\s+python3 -m http.server 8000/m, ps.stdout);
    } finally {
        await sbx.kill();
    }
});

test('a start command that fails: the create error names the check and quotes its output', async () => {
    const { Sandbox } = CI;
    await assert.rejects(Sandbox.create('broken', { ...ways()['agent alpha'], timeoutMs: 60000 }), (e) => {
        assert.match(e.message, /start command exited before the readiness check tcpSocket 127\.0\.0\.1:8123 of runtime 'app' passed/, e.message);
        assert.match(e.message, /exited with code 3/, e.message);
        // stdout and stderr are two pipes: either order
        assert.match(e.message, /its output ends:\n(boom-output-line\nsecond-line|second-line\nboom-output-line)/, e.message);
        return true;
    });
});

test('a readiness check that never passes: the create fails at the startup timeout naming it', async () => {
    const { Sandbox } = CI;
    const t0 = Date.now();
    await assert.rejects(Sandbox.create('stuck', { ...ways()['agent alpha'], timeoutMs: 60000 }), (e) => {
        // the pool's sandboxes keep failing at their 3 s deadline: the create
        // gets the next failure (or its own timeout), naming the check
        assert.match(e.message, /the readiness check httpGet http:\/\/127\.0\.0\.1:8124\/ready of runtime 'app' (did not pass within 3000 ms|has not passed yet) \(last try: [^)]+\)/, e.message);
        assert.match(e.message, /the start command of runtime 'app' is running; its output ends:\nwaiting-forever/, e.message);
        return true;
    });
    const took = Date.now() - t0;
    assert.ok(took < 10000, `failed within the 3 s startup timeout plus a retry (${took} ms)`);
});
