// `agentbox-hub migrate` against a real PostgreSQL.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { startPostgres, runMigrate, migrationsDir, tempDir, hubBin, psqlAt } from './lib/harness.mjs';

let pg;
let dbCount = 0;

before(async () => {
    assert.ok(fs.existsSync(hubBin()), `no hub binary at ${hubBin()}: build first or set AGENTBOX_BUILD_DIR`);
    pg = await startPostgres();
});
after(async () => {
    if (pg) await pg.cleanup();
});

// Each test gets its own database in the shared cluster.
async function freshDb() {
    dbCount += 1;
    return { url: await pg.createDatabase(`t${process.pid}_${dbCount}`) };
}

const tablesSql =
    "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'";

function migrationFiles(dir) {
    return fs.readdirSync(dir).filter((f) => /^\d{4}_[A-Za-z0-9_-]+\.sql$/.test(f)).sort();
}

function copyMigrations() {
    const dir = tempDir('agentbox-migrations-');
    for (const f of migrationFiles(migrationsDir())) {
        fs.copyFileSync(path.join(migrationsDir(), f), path.join(dir, f));
    }
    return dir;
}

test('migrate applies every file once; a second run is a no-op', async () => {
    const { url } = await freshDb();
    const files = migrationFiles(migrationsDir());
    assert.ok(files.includes('0001_init.sql'));

    const first = await runMigrate(url);
    assert.equal(first.code, 0, `first migrate failed:\n${first.stdout}\n${first.stderr}`);
    for (const f of files) assert.match(first.stdout, new RegExp(`applied ${f}`));
    const tables = await psqlAt(url, tablesSql);
    for (const t of ['clusters', 'cluster_sessions', 'federation_capacity', 'api_keys', 'vault_secrets',
        'sandboxes', 'events', 'approvals', 'audit_log', 'schema_migrations']) {
        assert.ok(tables.split(',').includes(t), `table ${t} missing after migrate: ${tables}`);
    }
    const rows = await psqlAt(url, 'SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version');
    assert.equal(rows.split('\n').length, files.length);
    assert.match(rows, /^1\|0001_init\.sql\|[0-9a-f]{64}\|/);

    const second = await runMigrate(url);
    assert.equal(second.code, 0, `second migrate failed:\n${second.stderr}`);
    assert.match(second.stdout, /nothing to apply/);
    assert.doesNotMatch(second.stdout, /applied 0/);
    assert.equal(await psqlAt(url, tablesSql), tables, 'table list changed on a no-op run');
    assert.equal(
        await psqlAt(url, 'SELECT version, name, checksum, applied_at FROM schema_migrations ORDER BY version'),
        rows,
        'schema_migrations changed on a no-op run',
    );
});

test('an edited applied migration is refused, naming the file, and nothing runs', async () => {
    const { url } = await freshDb();
    const dir = copyMigrations();
    const r1 = await runMigrate(url, [], { dir });
    assert.equal(r1.code, 0, r1.stderr);
    const before = await psqlAt(url, 'SELECT count(*) FROM schema_migrations');

    fs.appendFileSync(path.join(dir, '0001_init.sql'), '\n-- an innocent-looking edit\n');
    // A new migration beside it must not run either: refusal comes first.
    fs.writeFileSync(path.join(dir, '9000_after_edit.sql'), 'CREATE TABLE after_edit (x int);\n');
    const r2 = await runMigrate(url, [], { dir });
    assert.equal(r2.code, 1, `edited migration was not refused:\n${r2.stdout}\n${r2.stderr}`);
    assert.match(r2.stderr, /0001_init\.sql/);
    assert.match(r2.stderr, /changed after it was applied/);
    assert.equal(await psqlAt(url, 'SELECT count(*) FROM schema_migrations'), before);
    assert.equal(await psqlAt(url, "SELECT to_regclass('after_edit') IS NULL"), 't');

    const st = await runMigrate(url, ['--status'], { dir });
    assert.equal(st.code, 1);
    assert.match(st.stdout, /CHANGED\s+0001_init\.sql/);
});

test('concurrent migrate runs serialise: one applies, the others find nothing to do', async () => {
    const { url } = await freshDb();
    const dir = copyMigrations();
    // A slow migration keeps the first run inside the lock while the others arrive.
    fs.writeFileSync(
        path.join(dir, '9001_slow.sql'),
        'SELECT pg_sleep(0.5);\nCREATE TABLE slow_marker (id int PRIMARY KEY);\nINSERT INTO slow_marker VALUES (1);\n',
    );
    const files = migrationFiles(dir);
    const runs = await Promise.all([1, 2, 3, 4].map(() => runMigrate(url, [], { dir })));
    for (const r of runs) assert.equal(r.code, 0, `a concurrent run failed:\n${r.stdout}\n${r.stderr}`);
    const appliers = runs.filter((r) => /applied 9001_slow\.sql/.test(r.stdout));
    assert.equal(appliers.length, 1, `expected exactly one run to apply:\n${runs.map((r) => r.stdout).join('\n---\n')}`);
    assert.equal(runs.filter((r) => /nothing to apply/.test(r.stdout)).length, 3);
    assert.equal(await psqlAt(url, 'SELECT count(*) FROM schema_migrations'), String(files.length));
    assert.equal(await psqlAt(url, 'SELECT count(*) FROM slow_marker'), '1');
});

test('migrate --status lists pending, then applied with its time', async () => {
    const { url } = await freshDb();
    const files = migrationFiles(migrationsDir());
    const s1 = await runMigrate(url, ['--status']);
    assert.equal(s1.code, 0, s1.stderr);
    for (const f of files) assert.match(s1.stdout, new RegExp(`pending\\s+${f}`));
    assert.match(s1.stdout, new RegExp(`0 applied, ${files.length} pending`));
    // --status applies nothing, not even schema_migrations.
    assert.equal(await psqlAt(url, "SELECT to_regclass('schema_migrations') IS NULL"), 't');

    assert.equal((await runMigrate(url)).code, 0);
    const s2 = await runMigrate(url, ['--status']);
    assert.equal(s2.code, 0, s2.stderr);
    for (const f of files) {
        assert.match(s2.stdout, new RegExp(`applied\\s+${f}\\s+\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ`));
    }
    assert.match(s2.stdout, new RegExp(`${files.length} applied, 0 pending`));
});

test('a failing migration names the file and line and leaves nothing of itself', async () => {
    const { url } = await freshDb();
    const dir = copyMigrations();
    fs.writeFileSync(
        path.join(dir, '9002_broken.sql'),
        'CREATE TABLE half_done (x int);\n\nSELEC 1;\n',
    );
    const r = await runMigrate(url, [], { dir });
    assert.equal(r.code, 1, `broken migration did not fail:\n${r.stdout}`);
    assert.match(r.stderr, /9002_broken\.sql failed at line 3/);
    assert.match(r.stderr, /syntax error/);
    // Earlier files stay applied; the broken one left no table and no row.
    assert.match(r.stdout, /applied 0001_init\.sql/);
    assert.equal(await psqlAt(url, "SELECT to_regclass('half_done') IS NULL"), 't');
    assert.equal(await psqlAt(url, 'SELECT count(*) FROM schema_migrations WHERE version = 9002'), '0');
});

test('migrate without a reachable database fails with a message naming the settings', async () => {
    const r = await runMigrate('postgres://nobody:x@127.0.0.1:1/none', ['--db-connect-timeout', '2s']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /cannot connect to PostgreSQL/);
    assert.match(r.stderr, /DATABASE_URL/);
    assert.doesNotMatch(r.stderr, /nobody:x@/, 'the password-bearing URL must not be echoed');
});
