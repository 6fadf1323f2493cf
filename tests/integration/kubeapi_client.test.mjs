// The C Kubernetes client (agent/runtime/kube/client.c) against the in-test
// API server: build/test_agent_kube_client --live runs a reflector over the
// Pods of a namespace and prints each event; stdin lines issue single
// requests. Checks the paginated list, live events, watch EOF → re-watch
// without a relist, 410 → one relist with the missed deletion synthesised,
// 429 + Retry-After retried, a rotated token file re-read after a 401, and
// an API server restart mid-watch (resume from the last RV, no relist), and
// kube_submit answering on the loop thread.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { buildDir, tempDir, waitFor } from './lib/harness.mjs';
import { startKubeApi } from './lib/kubeapi.mjs';

const DRIVER = path.join(buildDir(), 'test_agent_kube_client');
const PODS = '/api/v1/namespaces/default/pods';

const cleanup = [];
after(async () => {
    for (const f of cleanup.reverse()) await f();
});

async function call(api, method, p, body, { ctype = 'application/json', token } = {}) {
    const headers = { 'Content-Type': ctype };
    if (token) headers.Authorization = `Bearer ${token}`;
    const res = await fetch(api.url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    return { code: res.status, body: await res.json().catch(() => null) };
}

const pod = (name) => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { containers: [{ name: 'sandbox', image: 'idle:1' }] } });

// Starts the driver; out() is everything it printed, lines() split.
function driver(kubeconfig, env = {}) {
    const child = spawn(DRIVER, ['--live', kubeconfig, 'default'], {
        env: { ...process.env, ASAN_OPTIONS: process.env.ASAN_OPTIONS ?? 'detect_leaks=1:halt_on_error=1', ...env },
        stdio: ['pipe', 'pipe', 'pipe'],
    });
    let out = '';
    let errText = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (errText += d));
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    cleanup.push(async () => {
        if (child.exitCode === null) child.kill('SIGKILL');
        await exited;
    });
    return {
        child,
        exited,
        out: () => out,
        err: () => errText,
        lines: () => out.split('\n').filter(Boolean),
        send: (line) => child.stdin.write(line + '\n'),
    };
}

const listRequests = (api) => api.requests.filter((r) => r.method === 'GET' && r.path === PODS && !r.query.watch);
const watchRequests = (api) => api.requests.filter((r) => r.method === 'GET' && r.path === PODS && r.query.watch);

test('reflector: paginated list, live events, EOF re-watch without relist, 410 relist with synthesised delete', async () => {
    assert.ok(fs.existsSync(DRIVER), `build the unit tests first (${DRIVER})`);
    const api = await startKubeApi({ bookmarkMs: 300 });
    cleanup.push(() => api.close());
    for (const n of ['p-0', 'p-1', 'p-2']) assert.equal((await call(api, 'POST', PODS, pod(n))).code, 201);
    const d = driver(api.kubeconfig(tempDir('agentbox-kc-')));

    await waitFor(() => d.lines().includes('SYNCED'), { what: `first sync (${d.out()}${d.err()})` });
    const initial = d.lines().slice(0, 3).map((l) => l.split(' ').slice(0, 2).join(' '));
    assert.deepEqual(initial, ['ADDED p-0', 'ADDED p-1', 'ADDED p-2']);
    assert.equal(listRequests(api).length, 2, 'page_limit 2: two pages for three pods');
    assert.ok(listRequests(api)[1].query.continue, 'the second page carries the continue token');
    await waitFor(() => watchRequests(api).length >= 1, { what: 'the watch' });
    const w0 = watchRequests(api)[0];
    // nothing was written after p-2, so the list's RV is p-2's
    assert.equal(w0.query.resourceVersion, api.peek('pods', 'default', 'p-2').metadata.resourceVersion, 'the watch starts at the list RV');
    assert.equal(w0.query.allowWatchBookmarks, 'true');

    // live changes
    await call(api, 'POST', PODS, pod('p-3'));
    const p3 = api.peek('pods', 'default', 'p-3');
    await call(api, 'PATCH', `${PODS}/p-3`, { metadata: { resourceVersion: p3.metadata.resourceVersion }, spec: { containers: [{ name: 'sandbox', image: 'task:7' }] } }, { ctype: 'application/strategic-merge-patch+json' });
    await call(api, 'DELETE', `${PODS}/p-0`);
    await waitFor(() => d.lines().some((l) => l.startsWith('DELETED p-0')), { what: `live events (${d.out()})` });
    const live = d.lines().filter((l) => /^(ADDED p-3|MODIFIED p-3|DELETED p-0)/.test(l));
    assert.deepEqual(live.map((l) => l.split(' ')[0] + ' ' + l.split(' ')[1]), ['ADDED p-3', 'MODIFIED p-3', 'DELETED p-0']);
    assert.match(live[1], / task:7$/, 'the modified object is delivered whole');

    // the server ends watches after timeoutSeconds (2 s here): the client
    // re-watches from its last RV without listing again
    await waitFor(() => watchRequests(api).length >= 3, { timeoutMs: 15000, what: 'watch re-established after EOF' });
    assert.equal(listRequests(api).length, 2, 'no relist after a normal watch end');
    const lastEventRv = api.peek('pods', 'default', 'p-3').metadata.resourceVersion;
    const resumes = watchRequests(api).slice(1).map((r) => r.query.resourceVersion);
    assert.ok(resumes.every((rv) => Number(rv) >= Number(lastEventRv)), `resumed from the stream's RV (event or bookmark): ${resumes}`);

    // 410: hold the next watch, delete a pod and compact meanwhile
    api.inject({ method: 'GET', path: /watch=1/, delayMs: 500, times: 1 });
    api.dropWatches();
    await call(api, 'DELETE', `${PODS}/p-1`);
    api.compact();
    await waitFor(() => d.lines().filter((l) => l === 'SYNCED').length >= 2, { timeoutMs: 15000, what: `relist after 410 (${d.out()})` });
    assert.ok(d.lines().includes('DELETED p-1 - -'), 'the deletion missed during the gap is synthesised from the relist');
    assert.equal(listRequests(api).length, 3, 'exactly one relist (one page: two pods left)');
    const afterRelist = d.lines().slice(d.lines().lastIndexOf('SYNCED') - 2);
    assert.ok(!afterRelist.some((l) => /^ADDED p-[23]/.test(l)), 'unchanged objects are not re-announced');

    // 429 with Retry-After is retried; the caller sees the 200
    api.inject({ method: 'GET', path: /\/pods\/p-2$/, status: 429, plain: 'Too many requests, please try again later.', retryAfter: 1, times: 1 });
    d.send(`get ${PODS}/p-2`);
    await waitFor(() => d.lines().some((l) => l.startsWith('RESP')), { what: 'RESP' });
    const [, rc, code, , ms] = d.lines().find((l) => l.startsWith('RESP')).split(' ');
    assert.equal(rc, '0');
    assert.equal(code, '200');
    assert.ok(Number(ms) >= 1000, `waited for Retry-After (${ms} ms)`);
    assert.deepEqual(api.requests.filter((r) => r.path === `${PODS}/p-2`).map((r) => r.code), [429, 200]);

    d.send('quit');
    const ex = await d.exited;
    assert.equal(ex.code, 0, d.err());
    const stats = d.lines().find((l) => l.startsWith('STATS'));
    assert.match(stats, /relists=1 /);
    assert.match(stats, /rc=0/);
    const bm = Number(stats.match(/bookmarks=(\d+)/)[1]);
    assert.ok(bm >= 1, 'bookmarks were received');
});

test('a rotated token file is re-read after a 401, by requests and by the watch', async () => {
    const api = await startKubeApi({ token: 'first' });
    cleanup.push(() => api.close());
    const dir = tempDir('agentbox-kc-');
    const tokenFile = path.join(dir, 'token');
    fs.writeFileSync(tokenFile, 'first\n');
    const kc = path.join(dir, 'kubeconfig');
    fs.writeFileSync(kc, `apiVersion: v1
kind: Config
current-context: t
clusters: [{name: c, cluster: {server: '${api.url}'}}]
users: [{name: u, user: {tokenFile: token}}]
contexts: [{name: t, context: {cluster: c, user: u, namespace: default}}]
`);
    await call(api, 'POST', PODS, pod('a'), { token: 'first' });
    const d = driver(kc);
    await waitFor(() => d.lines().includes('SYNCED'), { what: `sync with the first token (${d.out()}${d.err()})` });

    // rotate: new file content (atomic rename, as the kubelet's symlink swap), server accepts only the new one
    fs.writeFileSync(`${tokenFile}.new`, 'second\n');
    fs.renameSync(`${tokenFile}.new`, tokenFile);
    api.setToken('second');
    d.send(`get ${PODS}/a`);
    await waitFor(() => d.lines().some((l) => l.startsWith('RESP')), { what: 'RESP' });
    assert.match(d.lines().find((l) => l.startsWith('RESP')), /^RESP 0 200 /);
    const tries = api.requests.filter((r) => r.path === `${PODS}/a`).map((r) => r.code);
    assert.deepEqual(tries, [401, 200], 'one 401, then the re-read token');

    // the watch reconnects with the new token too
    api.dropWatches();
    await call(api, 'POST', PODS, pod('b'), { token: 'second' });
    await waitFor(() => d.lines().some((l) => l.startsWith('ADDED b')), { timeoutMs: 15000, what: `event after rotation (${d.out()})` });
    d.send('quit');
    assert.equal((await d.exited).code, 0, d.err());
});

test('an API server restart mid-watch: the reflector backs off, resumes from its RV, does not relist', async () => {
    const api = await startKubeApi({});
    cleanup.push(() => api.close());
    await call(api, 'POST', PODS, pod('r-0'));
    const d = driver(api.kubeconfig(tempDir('agentbox-kc-')));
    await waitFor(() => d.lines().includes('SYNCED'), { what: `sync (${d.out()}${d.err()})` });
    await waitFor(() => watchRequests(api).length >= 1, { what: 'the watch' });
    const rv = api.resourceVersion;
    await api.restart({ downMs: 400 });
    await call(api, 'POST', PODS, pod('r-1'));
    await waitFor(() => d.lines().some((l) => l.startsWith('ADDED r-1')), { timeoutMs: 15000, what: `event after the restart (${d.out()})` });
    assert.equal(listRequests(api).length, 1, 'resumed by watch, not by a relist');
    assert.ok(watchRequests(api).slice(1).some((r) => r.query.resourceVersion === rv), 'the resumed watch starts at the last RV seen');
    assert.equal(d.lines().filter((l) => l.startsWith('ADDED r-0')).length, 1, 'r-0 not announced twice');

    // kube_submit: the request runs on a loop worker, the answer comes back on the loop thread
    d.send(`aget ${PODS}/r-1`);
    d.send(`aget ${PODS}/missing`);
    await waitFor(() => d.lines().filter((l) => l.startsWith('ARESP')).length >= 2, { what: `ARESP (${d.out()})` });
    const ar = d.lines().filter((l) => l.startsWith('ARESP')).map((l) => l.split(' ').slice(1, 4).join(' ')).sort();
    assert.deepEqual(ar, ['0 200 onloop=1', '0 404 onloop=1']);
    d.send('quit');
    assert.equal((await d.exited).code, 0, d.err());
    const stats = d.lines().find((l) => l.startsWith('STATS'));
    assert.match(stats, /relists=0 /);
    assert.match(stats, /errors=[1-9]/, 'the refused reconnects were failures, backed off');
});

test('the client-side QPS limit spaces requests once the burst is spent', async () => {
    const api = await startKubeApi({});
    cleanup.push(() => api.close());
    await call(api, 'POST', PODS, pod('q-0'));
    const d = driver(api.kubeconfig(tempDir('agentbox-kc-')), { KUBE_QPS: '5' }); // burst 5
    await waitFor(() => d.lines().includes('SYNCED'), { what: `sync (${d.out()}${d.err()})` });
    const t0 = Date.now();
    for (let i = 0; i < 12; i++) d.send(`get ${PODS}/q-0`);
    await waitFor(() => d.lines().filter((l) => l.startsWith('RESP 0 200')).length === 12, { what: `12 answers (${d.out()})` });
    const took = Date.now() - t0;
    // at most 5 tokens are stored: at least 7 of the 12 wait 200 ms each
    assert.ok(took >= 1300, `12 requests at 5 qps took ${took} ms`);
    const stamps = api.requests.filter((r) => r.path === `${PODS}/q-0`).length;
    assert.equal(stamps, 12, 'each request sent once');
    d.send('quit');
    assert.equal((await d.exited).code, 0, d.err());
});

test('writes through the C client: create, a stale patch is a Conflict, delete, NotFound; the response size limit', async () => {
    const api = await startKubeApi({});
    cleanup.push(() => api.close());
    for (let i = 0; i < 40; i++) await call(api, 'POST', PODS, { ...pod(`big-${i}`), metadata: { name: `big-${i}`, annotations: { pad: 'x'.repeat(1000) } } });
    const d = driver(api.kubeconfig(tempDir('agentbox-kc-')), { KUBE_MAX_BODY: '20000' });
    await waitFor(() => watchRequests(api).length >= 1, { what: `the watch (${d.out()}${d.err()})` });
    const answers = () => d.lines().filter((l) => l.startsWith('RESP'));
    const ask = async (line) => {
        const n = answers().length;
        d.send(line);
        await waitFor(() => answers().length > n, { what: `answer to ${line.slice(0, 40)}` });
        return answers()[n].split(' ').slice(1, 4).join(' ');
    };
    assert.equal(await ask(`req POST ${PODS} application/json ${JSON.stringify(pod('w-1'))}`), '0 201 -');
    const rv = api.peek('pods', 'default', 'w-1').metadata.resourceVersion;
    const patch = (r, img) => JSON.stringify({ metadata: { resourceVersion: r }, spec: { containers: [{ name: 'sandbox', image: img }] } });
    assert.equal(await ask(`req PATCH ${PODS}/w-1 application/strategic-merge-patch+json ${patch(rv, 'a:1')}`), '0 200 -');
    assert.equal(await ask(`req PATCH ${PODS}/w-1 application/strategic-merge-patch+json ${patch(rv, 'b:1')}`), '0 409 Conflict');
    assert.equal(api.peek('pods', 'default', 'w-1').spec.containers[0].image, 'a:1', 'the stale claim did not win');
    assert.equal(api.requests.filter((r) => r.method === 'PATCH').length, 2, 'a 409 is not retried with the old body');
    assert.equal(await ask(`req POST ${PODS} application/json ${JSON.stringify(pod('w-1'))}`), '0 409 AlreadyExists');
    assert.equal(await ask(`req DELETE ${PODS}/w-1 application/json {}`), '0 200 -');
    assert.equal(await ask(`get ${PODS}/w-1`), '0 404 NotFound');
    // a 40-item list of ~1 KiB annotations is over the 20000-byte limit
    assert.equal(await ask(`get ${PODS}`), '-3 0 -', 'AB_ELIMIT (-3) for an oversized answer');
    d.send('quit');
    assert.equal((await d.exited).code, 0, d.err());
});
