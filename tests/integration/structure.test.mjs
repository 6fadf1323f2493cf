// The code's shape, drawn from its own `#include "..."` lines (issue 10):
// shared/ has no arrow up, hub/ and agent/ have no arrow between them, hub/
// has none into dashboard-api/ (but for the wiring in serve.c and main.c), no
// include cycle of more than three modules inside agent/ or hub/, and nothing
// above agent/runtime/ branches on a runtime's kind or reads its files. Then
// clang-format on every C file. No build, no processes: only the tree.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const CODE_DIRS = ['shared', 'hub', 'agent', 'dashboard-api'];
const FORMAT_DIRS = [...CODE_DIRS, 'tests/unit', 'tests/fuzz', 'tests/bench'];
const MAX_CYCLE = 3; // modules (x.c + x.h) in one strongly connected component

// Every .c/.h under dirs (repo-relative, '/'-separated, sorted).
function cFiles(dirs) {
    const out = [];
    const walk = (rel) => {
        for (const e of fs.readdirSync(path.join(ROOT, rel), { withFileTypes: true })) {
            const r = `${rel}/${e.name}`;
            if (e.isDirectory()) {
                if (e.name !== 'node_modules' && !e.name.startsWith('.')) walk(r);
            } else if (/\.[ch]$/.test(e.name)) {
                out.push(r);
            }
        }
    };
    for (const d of dirs) if (fs.existsSync(path.join(ROOT, d))) walk(d);
    return out.sort();
}

// Comments blanked (string literals kept, newlines kept so line numbers hold).
function stripComments(src) {
    return src.replace(/\/\*[\s\S]*?\*\/|\/\/[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'/g, (m) =>
        m.startsWith('/') ? m.replace(/[^\n]/g, ' ') : m);
}

// `#include "x"` resolved as the compiler would with our include paths: beside
// the file, then the repo root (folder-qualified: "hub/auth.h"), then
// shared/include ("agentbox/x.h"). Unresolved names are kept as written.
function includesOf(file, src) {
    const out = [];
    const lines = stripComments(src).split('\n');
    lines.forEach((line, i) => {
        const m = /^\s*#\s*include\s*"([^"]+)"/.exec(line);
        if (!m) return;
        const name = m[1];
        const cands = [path.posix.join(path.posix.dirname(file), name), name, `shared/include/${name}`];
        const to = cands.find((c) => fs.existsSync(path.join(ROOT, c))) ?? name;
        out.push({ name, to: path.posix.normalize(to), line: i + 1 });
    });
    return out;
}

function loadTree() {
    const files = cFiles(CODE_DIRS);
    const src = new Map(files.map((f) => [f, fs.readFileSync(path.join(ROOT, f), 'utf8')]));
    const inc = new Map(files.map((f) => [f, includesOf(f, src.get(f))]));
    return { files, src, inc };
}

const top = (f) => f.split('/')[0];
const under = (f, dir) => f === dir || f.startsWith(`${dir}/`);
const node = (f) => f.replace(/\.[ch]$/, ''); // x.c and x.h are one module

// Tarjan's strongly connected components over nodes/edges (Map node → Set).
function sccs(nodes, edges) {
    let index = 0;
    const idx = new Map(), low = new Map(), onStack = new Set(), stack = [], out = [];
    const visit = (v) => {
        idx.set(v, index); low.set(v, index); index++;
        stack.push(v); onStack.add(v);
        for (const w of edges.get(v) ?? []) {
            if (!idx.has(w)) { visit(w); low.set(v, Math.min(low.get(v), low.get(w))); }
            else if (onStack.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
        }
        if (low.get(v) === idx.get(v)) {
            const c = [];
            let w;
            do { w = stack.pop(); onStack.delete(w); c.push(w); } while (w !== v);
            out.push(c.sort());
        }
    };
    for (const v of [...nodes].sort()) if (!idx.has(v)) visit(v);
    return out;
}

// The include graph of one folder (edges that stay inside it), as modules.
function moduleGraph(tree, dir) {
    const nodes = new Set(), edges = new Map();
    for (const f of tree.files) {
        if (!under(f, dir)) continue;
        const a = node(f);
        nodes.add(a);
        if (!edges.has(a)) edges.set(a, new Set());
        for (const { to } of tree.inc.get(f)) {
            if (!under(to, dir) || node(to) === a) continue; // own header: not a cycle
            edges.get(a).add(node(to));
            nodes.add(node(to));
        }
    }
    return { nodes, edges };
}

// Include arrows the layering forbids: [from folder, to folder, files allowed to].
const FORBIDDEN = [
    ['shared', 'hub', []], ['shared', 'agent', []], ['shared', 'dashboard-api', []],
    ['hub', 'agent', []], ['agent', 'hub', []],
    ['hub', 'dashboard-api', ['hub/serve.c', 'hub/main.c']], // the wiring place
];

// Layers above the runtime seam. agent/envd/ is not one: it is the program a
// runtime runs inside the sandbox, and it owns envd.sock and envd.log.
const aboveRuntime = (f) =>
    (under(f, 'agent') && !under(f, 'agent/runtime') && !under(f, 'agent/envd')) ||
    under(f, 'hub') || under(f, 'dashboard-api');
const RUNTIME_FILES = ['state.json', 'state.rec', 'envd.log', 'envd.sock'];

export function structureProblems(tree = loadTree()) {
    const problems = [];
    for (const f of tree.files) {
        for (const { name, to, line } of tree.inc.get(f)) {
            for (const [from, into, allowed] of FORBIDDEN) {
                if (top(f) === from && top(to) === into && !allowed.includes(f))
                    problems.push(`${f}:${line}: ${from}/ includes ${into}/: #include "${name}"`);
            }
        }
        if (!aboveRuntime(f)) continue;
        const code = stripComments(tree.src.get(f));
        const lineOf = (at) => code.slice(0, at).split('\n').length;
        for (const m of code.matchAll(/\bstrcmp\s*\(([^;]*)/g)) {
            if (/\bkind\b/.test(m[1]) && m[1].includes('"local"'))
                problems.push(`${f}:${lineOf(m.index)}: branches on the runtime's kind: ${m[0].trim().slice(0, 80)}`);
        }
        for (const name of RUNTIME_FILES) {
            let at = code.indexOf(name);
            for (; at >= 0; at = code.indexOf(name, at + 1))
                problems.push(`${f}:${lineOf(at)}: reads a runtime's file: ${name}`);
        }
    }
    const cycles = [];
    for (const dir of ['agent', 'hub']) {
        const { nodes, edges } = moduleGraph(tree, dir);
        for (const c of sccs(nodes, edges)) {
            if (c.length < 2) continue;
            cycles.push({ dir, modules: c });
            if (c.length > MAX_CYCLE)
                problems.push(`${dir}/: include cycle of ${c.length} modules (more than ${MAX_CYCLE}): ${c.join(' ')}`);
        }
    }
    return { problems, cycles };
}

test('the checker itself: SCCs, own header, forbidden arrows', () => {
    const tree = {
        files: ['agent/a.c', 'agent/a.h', 'agent/b.c', 'agent/b.h', 'agent/c.h', 'agent/d.h',
            'agent/e.h', 'agent/f.c', 'shared/src/x.c', 'hub/serve.c', 'hub/y.c'],
        src: new Map(), inc: new Map(),
    };
    const inc = {
        'agent/a.c': ['agent/a.h', 'agent/b.h'], 'agent/b.c': ['agent/b.h', 'agent/c.h'],
        'agent/c.h': ['agent/d.h'], 'agent/d.h': ['agent/e.h'], 'agent/e.h': ['agent/a.h'],
        'agent/f.c': ['agent/f.h'], 'shared/src/x.c': ['hub/auth.h'],
        'hub/serve.c': ['dashboard-api/api.h'], 'hub/y.c': ['dashboard-api/api.h', 'agent/a.h'],
    };
    for (const f of tree.files) {
        tree.inc.set(f, (inc[f] ?? []).map((to, i) => ({ name: to, to, line: i + 1 })));
        tree.src.set(f, f === 'agent/f.c' ? 'if (strcmp(rt->kind, "local") == 0) open("x/state.json");' : '');
    }
    const { problems, cycles } = structureProblems(tree);
    assert.deepEqual(cycles, [{ dir: 'agent', modules: ['agent/a', 'agent/b', 'agent/c', 'agent/d', 'agent/e'] }]);
    assert.deepEqual(problems.sort(), [
        'agent/: include cycle of 5 modules (more than 3): agent/a agent/b agent/c agent/d agent/e',
        'agent/f.c:1: branches on the runtime\'s kind: strcmp(rt->kind, "local") == 0) open("x/state.json")',
        'agent/f.c:1: reads a runtime\'s file: state.json',
        'hub/y.c:1: hub/ includes dashboard-api/: #include "dashboard-api/api.h"',
        'hub/y.c:2: hub/ includes agent/: #include "agent/a.h"',
        'shared/src/x.c:1: shared/ includes hub/: #include "hub/auth.h"',
    ].sort());
});

test('structure: layering, cycles, the runtime seam', () => {
    const tree = loadTree();
    assert.ok(tree.files.length > 50, `found only ${tree.files.length} C files under ${ROOT}`);
    const { problems, cycles } = structureProblems(tree);
    for (const { dir, modules } of cycles)
        console.log(`SCC in ${dir}/ (${modules.length} modules): ${modules.join(' ')}`);
    if (cycles.length === 0) console.log('SCCs: none of more than one module');
    assert.deepEqual(problems, [], `${problems.length} structure problems:\n${problems.join('\n')}`);
});

test('clang-format: every C file is formatted', () => {
    const bin = process.env.CLANG_FORMAT ?? 'clang-format';
    const v = spawnSync(bin, ['--version'], { encoding: 'utf8' });
    assert.ok(!v.error && v.status === 0,
        `${bin} not found: install it (apt-get install clang-format; scripts/deps.sh lists it)`);
    const files = cFiles(FORMAT_DIRS);
    assert.ok(files.length > 50, `found only ${files.length} C files`);
    const bad = new Set();
    for (let i = 0; i < files.length; i += 100) {
        const r = spawnSync(bin, ['--dry-run', '-Werror', ...files.slice(i, i + 100)],
            { cwd: ROOT, encoding: 'utf8', maxBuffer: 64 << 20 });
        assert.ok(!r.error, `${bin}: ${r.error}`);
        for (const m of r.stderr.matchAll(/^(.+?):\d+:\d+: (?:error|warning)/gm)) bad.add(path.relative(ROOT, path.resolve(ROOT, m[1])));
        if (r.status !== 0 && bad.size === 0)
            assert.fail(`${bin} failed without naming a file:\n${r.stderr}`);
    }
    assert.deepEqual([...bad].sort(), [], `clang-format -i these ${bad.size} files:\n${[...bad].sort().join('\n')}`);
});
