// agentbox-envd against the real e2b SDK (2.51.0) in debug mode: the SDK
// talks to http://localhost:49983 as sandbox "debug_sandbox_id" with no
// access token (e2b-protocol.md §0 item 3, §3.4).
//
//   AGENTBOX_ENVD=/path/to/agentbox-envd node --test tests/e2e/envd.test.mjs
// (default binary: $AGENTBOX_BUILD_DIR/agentbox-envd, AGENTBOX_BUILD_DIR
// defaulting to <repo>/build).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

process.env.E2B_DEBUG = 'true';
const { Sandbox, CommandExitError, FileNotFoundError } = await import('e2b');

const repo = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const bin = process.env.AGENTBOX_ENVD ||
  join(process.env.AGENTBOX_BUILD_DIR || join(repo, 'build'), 'agentbox-envd');
const base = 'http://127.0.0.1:49983';
let envd;
let work;
let sbx;
let envdLog = '';

async function until(what, fn, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      if (Date.now() > deadline) throw e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const post = (path, body, headers = {}) => fetch(base + path, {
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

before(async () => {
  assert.ok(existsSync(bin), `build agentbox-envd first (looked at ${bin})`);
  work = mkdtempSync(join(tmpdir(), 'envd-e2e-'));
  envd = spawn(bin, ['--listen', '127.0.0.1:49983'], { stdio: ['ignore', 'ignore', 'pipe'] });
  envd.stderr.on('data', (d) => { envdLog += d; });
  await until('envd /health', async () => (await fetch(base + '/health')).status === 204);

  // Not armed yet: RPCs are refused with failed_precondition.
  const r = await post('/filesystem.Filesystem/Stat', { path: '/' });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).code, 'failed_precondition');

  const init = await post('/init', {
    envVars: { GLOBAL_X: 'from-init' },
    defaultWorkdir: work,
  });
  assert.equal(init.status, 204);
  assert.equal(init.headers.get('x-envd-version'), '0.6.13');
  sbx = await Sandbox.create();
});

after(async () => {
  if (work) rmSync(work, { recursive: true, force: true });
  if (envd) {
    const code = envd.exitCode ?? await new Promise((r) => { envd.once('exit', r); envd.kill('SIGTERM'); });
    // Under ASan a leak or memory error makes the exit code non-zero.
    assert.equal(code, 0, `envd exited with ${code}:\n${envdLog}`);
  }
});

test('commands.run: stdout, stderr, exit code 0', async () => {
  const r = await sbx.commands.run('echo hello; echo warn >&2');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, 'hello\n');
  assert.equal(r.stderr, 'warn\n');
});

test('commands.run: non-zero exit rejects with CommandExitError', async () => {
  await assert.rejects(sbx.commands.run('echo oops >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError);
    assert.equal(e.exitCode, 3);
    assert.equal(e.stderr, 'oops\n');
    assert.match(e.message, /exit status 3/);
    return true;
  });
});

test('commands.run: env vars from /init and the request, cwd, default workdir', async () => {
  const r = await sbx.commands.run('echo "$GLOBAL_X $A"; pwd', { envs: { A: 'b' }, cwd: '/tmp' });
  assert.equal(r.stdout, 'from-init b\n/tmp\n');
  const d = await sbx.commands.run('pwd');
  assert.equal(d.stdout, `${work}\n`);
  await assert.rejects(sbx.commands.run('true', { cwd: '/nonexistent-dir' }),
    /cwd '\/nonexistent-dir' does not exist/);
});

test('commands.run: user', async () => {
  const r = await sbx.commands.run('echo $USER $HOME; id -un', { user: 'root' });
  assert.equal(r.stdout, 'root /root\nroot\n');
  // A user with no account here runs as envd's own user but keeps its name.
  const u = await sbx.commands.run('echo $USER', { user: 'nosuchuser' });
  assert.equal(u.stdout, 'nosuchuser\n');
});

test('commands: background, list, connect, kill', async () => {
  const h = await sbx.commands.run('read line; echo "got $line"', { background: true, stdin: true });
  const list = await sbx.commands.list();
  assert.ok(list.some((p) => p.pid === h.pid), 'the process is listed');
  const out = [];
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => out.push(d) });
  await sbx.commands.sendStdin(h.pid, 'input\n');
  const r = await c.wait();
  assert.equal(r.exitCode, 0);
  assert.equal(out.join(''), 'got input\n');

  const s = await sbx.commands.run('sleep 30', { background: true });
  assert.equal(await sbx.commands.kill(s.pid), true);
  await assert.rejects(s.wait(), /signal: killed/);
  assert.equal(await sbx.commands.kill(999999), false);
});

test('commands: closeStdin ends cat', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true });
  await sbx.commands.sendStdin(h.pid, 'abc');
  await sbx.commands.closeStdin(h.pid);
  const r = await h.wait();
  assert.equal(r.stdout, 'abc');
});

test('pty: input, resize, kill', async () => {
  let data = '';
  const dec = new TextDecoder();
  const h = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { data += dec.decode(d); } });
  const enc = new TextEncoder();
  await sbx.pty.sendInput(h.pid, enc.encode('echo $((6*7))x\n'));
  await until('pty output', () => data.includes('42x'));
  await sbx.pty.resize(h.pid, { cols: 100, rows: 40 });
  await sbx.pty.sendInput(h.pid, enc.encode('stty size\n'));
  await until('resized', () => data.includes('40 100'));
  await sbx.pty.kill(h.pid);
  await assert.rejects(h.wait(), /signal: killed/);
});

test('files: write and read text, binary, 10 MB, octet-stream', async () => {
  const p = join(work, 'sub', 'a.txt');
  const info = await sbx.files.write(p, 'hello world');
  assert.equal(info.path, p);
  assert.equal(info.name, 'a.txt');
  assert.equal(await sbx.files.read(p), 'hello world');
  assert.equal(readFileSync(p, 'utf8'), 'hello world');

  const bin = new Uint8Array([0, 1, 2, 255, 13, 10, 45, 45]);
  await sbx.files.write(join(work, 'b.bin'), bin.buffer);
  assert.deepEqual(await sbx.files.read(join(work, 'b.bin'), { format: 'bytes' }), bin);

  const big = randomBytes(10 * 1024 * 1024);
  await sbx.files.write(join(work, 'big.bin'), big.buffer.slice(big.byteOffset, big.byteOffset + big.length));
  const back = await sbx.files.read(join(work, 'big.bin'), { format: 'bytes' });
  assert.equal(back.length, big.length);
  assert.ok(Buffer.from(back).equals(big), '10 MB round trip is byte-identical');

  await sbx.files.write('rel.txt', 'relative', { useOctetStream: true });
  assert.equal(readFileSync(join(process.env.HOME || '/root', 'rel.txt'), 'utf8'), 'relative');
  rmSync(join(process.env.HOME || '/root', 'rel.txt'));

  await sbx.files.write(join(work, 'z.txt'), 'zipped '.repeat(1000), { gzip: true });
  assert.equal(readFileSync(join(work, 'z.txt'), 'utf8'), 'zipped '.repeat(1000));

  const many = await sbx.files.write([
    { path: join(work, 'm', '1.txt'), data: 'one' },
    { path: join(work, 'm', '2.txt'), data: 'two' },
  ]);
  assert.equal(many.length, 2);
  assert.equal(await sbx.files.read(join(work, 'm', '2.txt')), 'two');

  await sbx.files.write(join(work, 'empty.txt'), '');
  assert.equal(await sbx.files.read(join(work, 'empty.txt')), '');
  await assert.rejects(sbx.files.read(join(work, 'missing.txt')), FileNotFoundError);
});

test('files: metadata is stored as user.e2b.* xattrs', async () => {
  const p = join(work, 'meta.txt');
  await sbx.files.write(p, 'm', { metadata: { Owner: 'me' } });
  const info = await sbx.files.getInfo(p);
  assert.deepEqual(info.metadata, { owner: 'me' });
});

test('files: list, makeDir, rename, remove, exists, getInfo', async () => {
  const d = join(work, 'fs');
  assert.equal(await sbx.files.makeDir(d), true);
  assert.equal(await sbx.files.makeDir(d), false);
  await sbx.files.write(join(d, 'x.txt'), '12345');
  await sbx.files.makeDir(join(d, 'inner'));
  const entries = await sbx.files.list(d);
  assert.deepEqual(entries.map((e) => [e.name, e.type]), [['inner', 'dir'], ['x.txt', 'file']]);
  const x = entries.find((e) => e.name === 'x.txt');
  assert.equal(x.size, 5);
  assert.equal(x.path, join(d, 'x.txt'));
  assert.ok(x.modifiedTime instanceof Date);

  const moved = await sbx.files.rename(join(d, 'x.txt'), join(d, 'inner', 'y.txt'));
  assert.equal(moved.path, join(d, 'inner', 'y.txt'));
  assert.equal(await sbx.files.exists(join(d, 'x.txt')), false);
  assert.equal(await sbx.files.exists(join(d, 'inner', 'y.txt')), true);
  const info = await sbx.files.getInfo(join(d, 'inner'));
  assert.equal(info.type, 'dir');
  await sbx.files.remove(d);
  assert.equal(await sbx.files.exists(d), false);
  await sbx.files.remove(d); // removing what is gone succeeds
});

test('files: watchDir reports creates and writes', async () => {
  const d = join(work, 'watched');
  await sbx.files.makeDir(d);
  const events = [];
  const h = await sbx.files.watchDir(d, (e) => events.push(e), { recursive: true });
  await sbx.files.write(join(d, 'new.txt'), 'x');
  await until('watch events', () => events.some((e) => e.name === 'new.txt' && e.type === 'create'));
  await h.stop();
});

test('access token and /files signatures', async () => {
  const token = 'tok_' + randomBytes(16).toString('hex');
  assert.equal((await post('/init', { accessToken: token })).status, 204);
  const denied = await post('/process.Process/List', {});
  assert.equal(denied.status, 401);
  const ok = await post('/process.Process/List', {}, { 'x-access-token': token });
  assert.equal(ok.status, 200);
  // Re-arming needs the current token.
  assert.equal((await post('/init', { accessToken: 'other' })).status, 401);

  const p = join(work, 'sub', 'a.txt');
  const sig = 'v1_' + createHash('sha256').update(`${p}:read::${token}`).digest('base64').replace(/=+$/, '');
  const good = await fetch(`${base}/files?path=${encodeURIComponent(p)}&signature=${encodeURIComponent(sig)}`);
  assert.equal(good.status, 200);
  assert.equal(await good.text(), 'hello world');
  const bad = await fetch(`${base}/files?path=${encodeURIComponent(p)}&signature=v1_nope`);
  assert.equal(bad.status, 401);
  assert.equal((await fetch(`${base}/health`)).status, 204);
});
