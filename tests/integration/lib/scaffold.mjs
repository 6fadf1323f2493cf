// The preamble test files repeat: a list of cleanups run after the file's
// last test, one migrated PostgreSQL shared by the file's tests, a command
// that must succeed, a request with a JSON answer.
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { startPostgres, runMigrate, run } from './harness.mjs';

// An array of async functions run after the file's last test, the last
// pushed first (what was started later stops first); one that throws does
// not stop the rest.
export function cleanupsAfter() {
    const cleanups = [];
    after(async () => {
        for (const fn of cleanups.reverse()) {
            try {
                await fn();
            } catch {
                /* keep cleaning */
            }
        }
    });
    return cleanups;
}

// A function resolving the file's one PostgreSQL with the migrations
// applied, started on its first call; stopped by cleanups.
export function sharedDatabase(cleanups) {
    let shared;
    return async () => {
        if (shared) return shared;
        const pg = await startPostgres();
        cleanups.push(() => pg.cleanup());
        const m = await runMigrate(pg.url);
        assert.equal(m.code, 0, m.stderr);
        shared = pg;
        return pg;
    };
}

// Runs cmd and resolves its stdout; a non-zero exit fails the test with the
// command line and its stderr.
export async function sh(cmd, args) {
    const r = await run(cmd, args);
    assert.equal(r.code, 0, `${cmd} ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
}

// One request with a JSON body (when body is not undefined); resolves
// {status, json (undefined when the answer is not JSON), text, headers}.
export async function requestJson(url, { method = 'GET', headers = {}, body } = {}) {
    const res = await fetch(url, {
        method,
        headers: { ...headers, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
        body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    let json;
    try {
        json = JSON.parse(text);
    } catch {
        json = undefined;
    }
    return { status: res.status, json, text, headers: res.headers };
}
