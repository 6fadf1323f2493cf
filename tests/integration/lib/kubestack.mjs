// What the kube runtime's tests set up around the in-test API server
// (kubeapi.mjs): the server with its simulated kubelet running a real
// agentbox-envd per Pod, a kubeconfig in a fresh directory, the real kubectl
// pointed at it, manifests applied with it, the agent's kube flags, and the
// reads of Pods and pools every such test makes. No real cluster.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { startKubeApi } from './kubeapi.mjs';
import { tempDir } from './harness.mjs';
import { envdBin } from './sandboxes.mjs';

export const KUBECTL = process.env.AGENTBOX_KUBECTL || '/usr/bin/kubectl';
// The seed's images (crds-and-charts.md §2.4): the kubelet runs envd for both.
export const IDLE_IMAGE = 'ghcr.io/scitix/agent-sandbox-idle:0.0.10';
export const RUN_IMAGE = 'ghcr.io/scitix/agent-sandbox-envd:0.9.0-2';

const POD_POOL = 'agentbox.navix.sh/sandbox-pool';

// kubectl with this kubeconfig and HOME (its cache) at home; resolves
// {code, stdout, stderr}, code -1 when it could not run or timed out.
export function kubectlAt(kc, home) {
    return (args, { input } = {}) => new Promise((resolve) => {
        const child = execFile(KUBECTL, ['--kubeconfig', kc, ...args], { timeout: 60000, env: { ...process.env, HOME: home } },
            (err, stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : -1) : 0, stdout, stderr }));
        if (input !== undefined) child.stdin.end(input);
    });
}

// The API server (kubelet options merged over a real envd, no pull delay)
// with a kubeconfig in a new temp directory. Resolves {api, dir, kc, kubectl,
// apply}; apply(yaml or path[, file name]) applies manifests with kubectl and
// fails the caller's test on a non-zero exit.
export async function startKubeApiWith({ prefix = 'agentbox-kube-', kubelet = {}, bookmarkMs = 500, kubectl = true } = {}) {
    if (kubectl) assert.ok(fs.existsSync(KUBECTL), `kubectl is needed (${KUBECTL}; scripts/deps.sh installs kubernetes-client)`);
    const api = await startKubeApi({ kubelet: { envd: envdBin(), pullDelayMs: 0, ...kubelet }, bookmarkMs });
    const dir = tempDir(prefix);
    const kc = api.kubeconfig(dir);
    const run = kubectlAt(kc, dir);
    const apply = async (what, name = 'manifests.yaml') => {
        let file = what;
        if (what.includes('\n')) {
            file = path.join(dir, name);
            fs.writeFileSync(file, what);
        }
        const r = await run(['apply', '-f', file]);
        assert.equal(r.code, 0, `kubectl apply -f ${file}: ${r.stderr}`);
        return r;
    };
    return { api, dir, kc, kubectl: run, apply };
}

// The agent's flags for the kube runtime in namespace default.
export const kubeAgentArgs = (kc, ...extra) => ['--runtime', 'kube', '--kubeconfig', kc, '--namespace', 'default', ...extra];

// The Pods of a pool as the API server has them (with those being deleted).
export async function podsOf(api, pool) {
    const r = await fetch(`${api.url}/api/v1/namespaces/default/pods?labelSelector=${encodeURIComponent(`${POD_POOL}=${pool}`)}`);
    return (await r.json()).items;
}
export const live = (ps) => ps.filter((p) => !p.metadata.deletionTimestamp);
export const podReady = (p) => (p.status?.conditions ?? []).some((c) => c.type === 'Ready' && c.status === 'True');
export const podPhase = (p) => p.metadata.labels?.['agentbox.navix.sh/sandbox-phase'];

// A SandboxPool of namespace default, or null when there is none.
export async function getPool(api, name) {
    const r = await fetch(`${api.url}/apis/agents.navix.sh/v1alpha1/namespaces/default/sandboxpools/${name}`);
    return r.status === 200 ? r.json() : null;
}

// A pass-through to the API server for one agent (watches stream through
// it), with a kubeconfig of its own in dir/name: it logs every request
// ({t, method, path, lease, watch}) so a test sees who wrote what, and with
// p.refuseLease = true answers 500 to every Lease request. Resolves
// {name, log, server, kc, refuseLease}; close p.server when done.
export async function startKubeProxy(api, dir, name) {
    const target = new URL(api.url);
    const p = { name, log: [], refuseLease: false };
    p.server = http.createServer((req, res) => {
        const u = new URL(req.url, 'http://x');
        const lease = u.pathname.includes('/leases');
        if (lease && p.refuseLease) {
            res.writeHead(500, { 'Content-Type': 'application/json' });
            return void res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'injected', reason: 'InternalError', code: 500 }));
        }
        const watch = u.searchParams.get('watch') === 'true' || u.searchParams.get('watch') === '1';
        p.log.push({ t: Date.now(), method: req.method, path: u.pathname, lease, watch });
        const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers }, (ur) => {
            res.writeHead(ur.statusCode, ur.headers);
            ur.pipe(res);
        });
        up.on('error', () => res.destroy());
        res.on('close', () => up.destroy());
        req.pipe(up);
    });
    await new Promise((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    const d = path.join(dir, name);
    fs.mkdirSync(d);
    p.kc = api.kubeconfig(d);
    fs.writeFileSync(p.kc, fs.readFileSync(p.kc, 'utf8').split(api.url).join(`http://127.0.0.1:${p.server.address().port}`));
    return p;
}
