// Start commands and readiness checks on the kube runtime (agent/runtime/kube/start.c;
// the same fields as the local runtime: runtimes[].config.startCommand and
// runtimes[].readinessProbe tcpSocket/httpGet). At claim, after the image
// swap and the claim's /init, the command runs through the Pod's envd and
// the checks run at the Pod's IP; the create answers only once they pass,
// and a failure is a create error naming the check and quoting the
// command's output. Against the in-test API server
// (tests/integration/lib/kubeapi.mjs) with a real envd per Pod and the real
// e2b SDK. The simulated container shares the host: the commands write their
// pid so the test ends what they started (the kubelet's SIGKILL of envd
// leaves its children).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { waitFor } from '../integration/lib/harness.mjs';
import { startStack } from '../integration/lib/sandboxes.mjs';
import {
    IDLE_IMAGE as IDLE, RUN_IMAGE as RUN, startKubeApiWith, kubeAgentArgs, podsOf, live, podReady as ready,
} from '../integration/lib/kubestack.mjs';

// below the ephemeral range (32768-60999), where the kubelet's envds listen on 127.0.0.1
const base = 20000 + Math.floor(Math.random() * 8000);
const PORT_OK = base, PORT_BAD = base + 1, PORT_LATE = base + 2, PORT_WARM = base + 3;
let api, stack, dir, E2B;
const pidFile = (name) => path.join(dir, `${name}.pid`);

function env(name, runtimes, startup = '20s', idle = IDLE) {
    return `apiVersion: agents.navix.sh/v1alpha1
kind: SandboxTemplate
metadata: {name: ${name}}
spec:
  idleImage: ${idle}
  runtimes:
  - {name: envd, port: 49983, protocol: TCP}
${runtimes}
  template:
    spec:
      containers:
      - name: sandbox
        image: ${RUN}
        resources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
---
apiVersion: agents.navix.sh/v1alpha1
kind: SandboxEnv
metadata: {name: ${name}, namespace: default}
spec:
  templateRef: {name: ${name}}
  mode: WarmPool
  clusters:
  - clusterID: alpha
    members:
    - name: ${name}-1c2gi
      config:
        scalingGroup: 1c2gi
        inlineResources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
      spec: {replicas: 1, defaultStartupTimeout: ${startup}}
---
`;
}

const MANIFESTS = () => [
    env('start-ok', `  - name: app
    port: ${PORT_OK}
    config: {startCommand: "echo $$ > ${pidFile('ok')}; echo app starting; sleep 0.7; exec python3 -m http.server ${PORT_OK} --bind 0.0.0.0"}
    readinessProbe: {httpGet: {port: ${PORT_OK}, path: /}}`),
    env('start-bad', `  - name: app
    port: ${PORT_BAD}
    config: {startCommand: "echo boom-output; echo to-stderr >&2; exit 3"}
    readinessProbe: {tcpSocket: {port: ${PORT_BAD}}}`),
    env('start-late', `  - name: app
    port: ${PORT_LATE}
    config: {startCommand: "echo $$ > ${pidFile('late')}; echo waiting for nothing; exec sleep 60"}
    readinessProbe: {tcpSocket: {port: ${PORT_LATE}}, periodSeconds: 1}`, '3s'),
    // claimed without a swap (idle image = running image): the command runs on the idle Pod
    env('start-warm', `  - name: app
    port: ${PORT_WARM}
    config: {startCommand: "echo $$ >> ${pidFile('warm')}; date +%s%3N > ${path.join('DIR', 'warm-started')}; sleep 3; exec python3 -m http.server ${PORT_WARM} --bind 0.0.0.0"}
    readinessProbe: {httpGet: {port: ${PORT_WARM}, path: /}}`, '20s', RUN),
    env('start-warmbad', `  - name: app
    port: ${PORT_WARM + 1}
    config: {startCommand: "echo warm-boom; exit 4"}
    readinessProbe: {tcpSocket: {port: ${PORT_WARM + 1}}}`, '20s', RUN),
].join('').split('DIR').join(dir);

const listPods = async (pool) => live(await podsOf(api, pool));
const waitIdle = (pool) => waitFor(async () => (await listPods(pool)).some((p) => p.metadata.labels?.['agentbox.navix.sh/sandbox-phase'] === 'idle' && ready(p)),
    { timeoutMs: 30000, what: `an idle Ready Pod in ${pool}` });
const logs = () => `\nagent log:\n${stack.agents.alpha.proc.logs().split('\n').slice(-20).join('\n')}`;

// Ends the processes the start commands of `name` wrote down (one a line).
function killFrom(name) {
    let text = '';
    try {
        text = fs.readFileSync(pidFile(name), 'utf8');
    } catch {
        return; /* none started */
    }
    for (const l of text.split('\n')) {
        const pid = Number(l.trim());
        try {
            if (pid > 1) process.kill(pid, 'SIGKILL');
        } catch {
            /* gone */
        }
    }
}

before(async () => {
    assert.equal(process.getuid(), 0, 'the stack needs root');
    let kc, apply;
    ({ api, dir, kc, apply } = await startKubeApiWith({ prefix: 'agentbox-kube-start-' }));
    await apply(MANIFESTS(), 'start.yaml');
    stack = await startStack({ clusters: ['alpha'], agentArgs: kubeAgentArgs(kc, '--no-leader-election') });
    process.env.E2B_API_URL = stack.agents.alpha.e2b;
    process.env.E2B_SANDBOX_URL = stack.agents.alpha.data;
    process.env.E2B_API_KEY = stack.key;
    E2B = await import('e2b');
});

after(async () => {
    if (stack) await stack.stop(); // first: no new start commands after this
    for (const n of ['ok', 'late', 'warm']) killFrom(n);
    if (api) await api.close();
});

test('a start command and an httpGet check: the create answers once the server answers', async () => {
    const { Sandbox } = E2B;
    await waitIdle('start-ok-1c2gi');
    const t0 = Date.now();
    const sbx = await Sandbox.create('start-ok', { timeoutMs: 60000 });
    const took = Date.now() - t0;
    try {
        // no waiting here: the server the command started answers at once
        const r = await fetch(`${stack.agents.alpha.data}/`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT_OK) } });
        assert.equal(r.status, 200, `the app port right after the create${logs()}`);
        assert.match(await r.text(), /Directory listing/);
        assert.ok(took >= 700, `the create waited for the check (${took} ms; the command sleeps 700 ms first)`);
        // the command ran as the claim's user in the swapped container, after the claim's /init
        const pid = Number(fs.readFileSync(pidFile('ok'), 'utf8').trim());
        assert.ok(pid > 1 && fs.existsSync(`/proc/${pid}`), 'the start command is still running');
    } finally {
        await Sandbox.kill(sbx.sandboxId);
        killFrom('ok');
    }
});

test('a start command that fails: the create error names the check and quotes the output; the Pod goes back', async () => {
    const { Sandbox } = E2B;
    await waitIdle('start-bad-1c2gi');
    const err = await Sandbox.create('start-bad', { timeoutMs: 60000 }).then(() => null, (e) => e);
    assert.ok(err, 'the create failed');
    const m = String(err.message);
    assert.match(m, /the start command exited before the readiness check tcpSocket 127\.[0-9.]+:\d+ of runtime 'app' passed/, m);
    assert.match(m, /the start command of runtime 'app' exited with code 3/, m);
    assert.match(m, /boom-output/, m);
    assert.match(m, /to-stderr/, m);
    // the Pod is released (back to idle, no sandbox on it)
    await waitIdle('start-bad-1c2gi');
    assert.ok((await listPods('start-bad-1c2gi')).every((p) => !p.metadata.labels?.['agentbox.navix.sh/sandbox-id']));
});

test('a check that never passes: the startup timeout names it, the last try and the running command', async () => {
    const { Sandbox } = E2B;
    await waitIdle('start-late-1c2gi');
    const t0 = Date.now();
    const err = await Sandbox.create('start-late', { timeoutMs: 60000 }).then(() => null, (e) => e);
    const took = Date.now() - t0;
    killFrom('late');
    assert.ok(err, 'the create failed');
    const m = String(err.message);
    assert.match(m, /was not ready within 3000 ms: the readiness check tcpSocket 127\.[0-9.]+:\d+ of runtime 'app' has not passed \(last try: connect: Connection refused\)/, m);
    assert.match(m, /the start command of runtime 'app' is running; its output ends:\nwaiting for nothing/, m);
    assert.ok(took >= 2900 && took < 15000, `failed after ${took} ms`);
    await waitIdle('start-late-1c2gi');
});

test('a pool claimed without a swap: the command runs on the idle Pod, so the warm Pod is ready before the create', async () => {
    const { Sandbox } = E2B;
    const pool = 'start-warm-1c2gi';
    const warm = await waitFor(async () => (await listPods(pool)).find((p) => p.metadata.annotations?.['agentbox.scitix.ai/idle-envd-token-sealed']),
        { timeoutMs: 30000, what: `the idle Pod of ${pool} started (its token annotation)${logs()}` });
    assert.match(warm.metadata.annotations['agentbox.scitix.ai/idle-envd-token-sealed'], /^v1\./, 'the idle token is sealed');
    const startedAt = Number(fs.readFileSync(path.join(dir, 'warm-started'), 'utf8').trim());
    const t0 = Date.now();
    assert.ok(startedAt < t0, 'the command ran before any create');
    const sbx = await Sandbox.create('start-warm', { timeoutMs: 60000 });
    const took = Date.now() - t0;
    try {
        const [claimed] = (await listPods(pool)).filter((p) => p.metadata.labels?.['agentbox.navix.sh/sandbox-id'] === sbx.sandboxId);
        assert.equal(claimed.metadata.uid, warm.metadata.uid, 'the warm Pod was claimed');
        assert.ok(took < 3000, `the create did not run the command again (${took} ms; it sleeps 3 s)`);
        const r = await fetch(`${stack.agents.alpha.data}/`, { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'E2b-Sandbox-Port': String(PORT_WARM) } });
        assert.equal(r.status, 200);
        // envd took the claim's token (the /init presented the idle one): the SDK works
        assert.equal((await sbx.commands.run('echo claimed')).stdout, 'claimed\n');
    } finally {
        await Sandbox.kill(sbx.sandboxId);
    }
});

test('a pool claimed without a swap whose idle Pods fail their command: a StartFailed Event, the waiting create fails naming the check, the Pod is replaced', async () => {
    const { Sandbox } = E2B;
    const pool = 'start-warmbad-1c2gi';
    const first = await waitFor(async () => (await listPods(pool))[0], { what: `a Pod of ${pool}` });
    const err = await Sandbox.create('start-warmbad', { timeoutMs: 60000 }).then(() => null, (e) => e);
    assert.ok(err, 'the create failed');
    const m = String(err.message);
    assert.match(m, /idle Pod start-warmbad-1c2gi-[a-z0-9-]+: the start command exited before the readiness check tcpSocket 127\.[0-9.]+:\d+ of runtime 'app' passed/, m);
    assert.match(m, /exited with code 4; its output ends:\nwarm-boom/, m);
    const ev = await waitFor(async () => {
        const r = await fetch(`${api.url}/api/v1/namespaces/default/events`);
        return (await r.json()).items.find((e) => e.reason === 'StartFailed' && e.involvedObject?.name === pool) ?? null;
    }, { what: 'a StartFailed Event on the pool' });
    assert.equal(ev.type, 'Warning');
    assert.match(ev.message, /warm-boom/);
    await waitFor(async () => !(await listPods(pool)).some((p) => p.metadata.uid === first.metadata.uid), { what: 'the failed Pod replaced' });
    // never claimable: no Pod of it carries the idle token
    assert.ok((await listPods(pool)).every((p) => !p.metadata.annotations?.['agentbox.scitix.ai/idle-envd-token-sealed']));
});
