// envd's POST /files: the same bytes as multipart/form-data (the SDK's
// default) and as application/octet-stream, interleaved rounds against one
// agentbox-envd on a unix socket of its own, in MB/s (issue 14 item 9:
// multipart within 1.5× of octet-stream). Also the time to a 100 Continue
// answer for an `Expect: 100-continue` upload (curl waits 1 s without it).
//
//   BENCH_UPLOAD_MB (default 50)   size of each upload
//   BENCH_UPLOAD_ROUNDS (default 5) rounds (one upload of each kind per round)
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import http from 'node:http';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { median } from './util.mjs';

const build = process.env.AGENTBOX_BUILD_DIR || path.resolve(import.meta.dirname, '../../build');
const MB = Number(process.env.BENCH_UPLOAD_MB || 50);
const ROUNDS = Number(process.env.BENCH_UPLOAD_ROUNDS || 5);
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'envd-upload-'));
const sock = path.join(dir, 'envd.sock');

const envd = spawn(path.join(build, 'agentbox-envd'), ['--listen', `unix:${sock}`, '--state-dir', dir],
    { stdio: ['ignore', 'ignore', 'pipe'] });
let envdLog = '';
envd.stderr.on('data', (c) => { envdLog += c; });

function request(opts, body) {
    return new Promise((resolve, reject) => {
        const req = http.request({ socketPath: sock, ...opts }, (res) => {
            const chunks = [];
            res.on('data', (c) => chunks.push(c));
            res.on('end', () => resolve({ status: res.statusCode, text: Buffer.concat(chunks).toString() }));
        });
        req.on('error', reject);
        req.end(body);
    });
}

async function waitReady() {
    const deadline = Date.now() + 10000;
    for (;;) {
        try {
            const r = await request({ method: 'GET', path: '/health' });
            if (r.status === 204 || r.status === 200) return;
        } catch { /* not listening yet */ }
        if (Date.now() > deadline) throw new Error('envd did not answer /health within 10 s');
        await new Promise((r) => setTimeout(r, 20));
    }
}

async function upload(kind, data, target) {
    const boundary = '----formdata-bench-0123456789';
    let body;
    let ct;
    if (kind === 'multipart') {
        body = Buffer.concat([
            Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${target}"\r\n`
                + 'Content-Type: application/octet-stream\r\n\r\n'),
            data,
            Buffer.from(`\r\n--${boundary}--\r\n`),
        ]);
        ct = `multipart/form-data; boundary=${boundary}`;
    } else {
        body = data;
        ct = 'application/octet-stream';
    }
    const t0 = performance.now();
    const r = await request({
        method: 'POST', path: `/files?path=${encodeURIComponent(target)}`,
        headers: { 'Content-Type': ct, 'Content-Length': body.length },
    }, body);
    const ms = performance.now() - t0;
    if (r.status !== 200) throw new Error(`${kind} upload: HTTP ${r.status} ${r.text}`);
    if (fs.statSync(target).size !== data.length) throw new Error(`${kind} upload: wrong size on disk`);
    return (data.length / 1e6) / (ms / 1000);
}

// Time from the request head to the 100 Continue (the body is sent after it).
function expectContinue(data, target) {
    return new Promise((resolve, reject) => {
        const t0 = performance.now();
        let tc = NaN;
        const req = http.request({
            socketPath: sock, method: 'POST', path: `/files?path=${encodeURIComponent(target)}`,
            headers: { 'Content-Type': 'application/octet-stream', 'Content-Length': data.length, Expect: '100-continue' },
        }, (res) => {
            res.resume();
            res.on('end', () => (res.statusCode === 200 ? resolve({ cont: tc - t0, total: performance.now() - t0 })
                : reject(new Error(`Expect upload: HTTP ${res.statusCode}`))));
        });
        req.on('continue', () => {
            tc = performance.now();
            req.end(data);
        });
        req.on('error', reject);
        req.flushHeaders();
    });
}

try {
    await waitReady();
    const init = await request({ method: 'POST', path: '/init', headers: { 'Content-Type': 'application/json' } }, '{}');
    if (init.status !== 204 && init.status !== 200) throw new Error(`/init: HTTP ${init.status} ${init.text}`);
    const data = randomBytes(MB * 1024 * 1024);
    const res = { multipart: [], octet: [] };
    await upload('octet', data, path.join(dir, 'warm.bin')); // page cache, file creation
    for (let i = 0; i < ROUNDS; i++) {
        const order = i % 2 ? ['multipart', 'octet'] : ['octet', 'multipart'];
        for (const k of order) res[k].push(await upload(k === 'octet' ? 'octet' : 'multipart', data, path.join(dir, `${k}.bin`)));
    }
    const cont = [];
    for (let i = 0; i < 5; i++) cont.push(await expectContinue(data.subarray(0, 1024 * 1024), path.join(dir, 'expect.bin')));
    const mp = median(res.multipart);
    const oc = median(res.octet);
    console.log(`cpus ${os.cpus().length}, load ${os.loadavg().map((x) => x.toFixed(2)).join(' ')}; ${MB} MiB per upload, ${ROUNDS} interleaved rounds`);
    console.log(`octet-stream  median ${oc.toFixed(0)} MB/s  (${res.octet.map((x) => x.toFixed(0)).join(', ')})`);
    console.log(`multipart     median ${mp.toFixed(0)} MB/s  (${res.multipart.map((x) => x.toFixed(0)).join(', ')})`);
    console.log(`octet-stream / multipart: ${(oc / mp).toFixed(2)}x (target <= 1.5x)`);
    console.log(`Expect: 100-continue, 1 MiB: 100 Continue after median ${median(cont.map((c) => c.cont)).toFixed(1)} ms, `
        + `upload done after ${median(cont.map((c) => c.total)).toFixed(1)} ms`);
} catch (e) {
    console.error(`envd_upload failed: ${e.message}\nenvd's log:\n${envdLog}`);
    process.exitCode = 1;
} finally {
    envd.kill('SIGTERM');
    await new Promise((r) => envd.once('exit', r));
    fs.rmSync(dir, { recursive: true, force: true });
}
