// Helpers shared by the benchmarks: percentiles, /proc sampling of a
// process (RSS, CPU), and table printing. No timing decisions live here:
// every benchmark measures its baseline in the same run.
import fs from 'node:fs';
import { execFileSync } from 'node:child_process';

// Nearest-rank quantile of an array of numbers (sorted copy).
export function quantile(values, q) {
    if (values.length === 0) return NaN;
    const v = [...values].sort((a, b) => a - b);
    const k = Math.min(v.length - 1, Math.floor(q * v.length));
    return v[k];
}

export const median = (values) => quantile(values, 0.5);
export const mean = (values) => values.reduce((a, b) => a + b, 0) / values.length;

let clkTck;
// Clock ticks per second of /proc/<pid>/stat times.
export function clockTicks() {
    if (clkTck) return clkTck;
    try {
        clkTck = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
    } catch {
        clkTck = 100;
    }
    return clkTck;
}

// utime + stime of pid in seconds, and its parent pid.
export function procCpu(pid) {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // the command name is in parentheses and may contain spaces
    const rest = s.slice(s.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state): utime is field 14, stime 15, ppid 4
    return { cpu: (Number(rest[11]) + Number(rest[12])) / clockTicks(), ppid: Number(rest[1]) };
}

// VmRSS and VmHWM of pid in bytes.
export function procMem(pid) {
    const s = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (name) => {
        const m = s.match(new RegExp(`^${name}:\\s+(\\d+) kB`, 'm'));
        return m ? Number(m[1]) * 1024 : NaN;
    };
    return { rss: kb('VmRSS'), hwm: kb('VmHWM'), threads: Number((s.match(/^Threads:\s+(\d+)/m) || [])[1]) };
}

// pid and all its direct children (PostgreSQL's backends are children of
// the postmaster).
export function withChildren(pid) {
    const out = [pid];
    for (const e of fs.readdirSync('/proc')) {
        if (!/^\d+$/.test(e)) continue;
        try {
            if (procCpu(Number(e)).ppid === pid) out.push(Number(e));
        } catch {
            /* exited meanwhile */
        }
    }
    return out;
}

// CPU seconds used by a set of pids (missing ones count as 0).
export function cpuOf(pids) {
    let t = 0;
    for (const p of pids) {
        try {
            t += procCpu(p).cpu;
        } catch {
            /* gone */
        }
    }
    return t;
}

// Samples pid's CPU (cores = CPU seconds per wall second) and RSS over
// seconds, plus the CPU of `others` (named pid lists) over the same window.
// Resolves {cores, rssStart, rssEnd, rssMax, wall, others: {name: cores}}.
export async function sampleProcess(pid, seconds, others = {}) {
    const t0 = process.hrtime.bigint();
    const c0 = procCpu(pid).cpu;
    const o0 = Object.fromEntries(Object.entries(others).map(([k, pids]) => [k, cpuOf(pids)]));
    const rssStart = procMem(pid).rss;
    let rssMax = rssStart;
    const deadline = Date.now() + seconds * 1000;
    while (Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, Math.min(1000, Math.max(0, deadline - Date.now()))));
        rssMax = Math.max(rssMax, procMem(pid).rss);
    }
    const wall = Number(process.hrtime.bigint() - t0) / 1e9;
    const cores = (procCpu(pid).cpu - c0) / wall;
    const rssEnd = procMem(pid).rss;
    const oc = Object.fromEntries(Object.entries(others).map(([k, pids]) => [k, (cpuOf(pids) - o0[k]) / wall]));
    return { cores, rssStart, rssEnd, rssMax: Math.max(rssMax, rssEnd), wall, others: oc };
}

export const mib = (bytes) => bytes / (1024 * 1024);
export const fmt = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : String(x));

// Prints rows (arrays of cells) as an aligned plain-text table.
export function printTable(header, rows) {
    const all = [header, ...rows].map((r) => r.map(String));
    const w = header.map((_, i) => Math.max(...all.map((r) => (r[i] || '').length)));
    const line = (r) => r.map((c, i) => (i === 0 ? c.padEnd(w[i]) : c.padStart(w[i]))).join('  ');
    console.log(line(all[0]));
    console.log(w.map((n) => '-'.repeat(n)).join('  '));
    for (const r of all.slice(1)) console.log(line(r));
}

// Machine facts worth printing next to figures measured on a shared box.
export function machineNote() {
    let cpus = 0;
    try {
        cpus = fs.readFileSync('/proc/cpuinfo', 'utf8').split('\n').filter((l) => l.startsWith('processor')).length;
    } catch {
        /* not Linux */
    }
    const load = fs.existsSync('/proc/loadavg') ? fs.readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ') : '?';
    return `cpus=${cpus} loadavg=${load} node=${process.version}`;
}

// --- the summary table of run.sh (README: "Summary rows") -----------------------------------

// One line of the final summary: `ROW key | measure | figure | baseline | target | verdict`.
// key is the stable id run.sh matches the issue-17 table on; verdict is met,
// missed or '-' (no target). '|' inside a field is replaced (it separates them).
export function row(key, measure, figure, baseline, target, verdict) {
    const f = (x) => String(x === undefined || x === null || x === '' ? '-' : x).replace(/\|/g, '/');
    console.log(`ROW ${[key, measure, figure, baseline, target, verdict].map(f).join(' | ')}`);
}

// met/missed of a figure against an upper or lower bound (NaN: missed).
export const atMost = (x, limit) => (Number.isFinite(x) && x <= limit ? 'met' : 'missed');
export const atLeast = (x, limit) => (Number.isFinite(x) && x >= limit ? 'met' : 'missed');

// A Prometheus histogram's cumulative buckets from /metrics text:
// [[le, count], ...] ascending, +Inf last. labels: the series' other labels
// as written between the braces before `le` (e.g. 'op="x",'), '' for none.
export function histBuckets(text, name, labels = '') {
    const out = [];
    const re = new RegExp(`^${name}_bucket\\{${labels.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}le="([^"]+)"\\} (\\S+)$`, 'gm');
    for (const m of text.matchAll(re)) out.push([m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
    return out.sort((a, b) => a[0] - b[0]);
}

// The q-quantile of the observations between two readings of one histogram,
// as the upper bound of the bucket it falls in (q; Infinity past the last) and
// as a figure interpolated linearly inside that bucket (qi, as Prometheus's
// histogram_quantile does; the last finite bound past it), and the share of
// observations at or below `at` (a target's bucket bound).
export function histWindow(before, after, q, at) {
    const d = after.map(([le, c], i) => [le, c - (before[i] ? before[i][1] : 0)]);
    const total = d.length ? d[d.length - 1][1] : 0;
    if (total <= 0) return { n: 0, q: NaN, qi: NaN, shareAt: NaN };
    const rank = q * total;
    const i = d.findIndex(([, c]) => c >= rank);
    const under = d.find(([le]) => le >= at);
    let qi = NaN;
    if (i >= 0) {
        const [lo, below] = i > 0 ? d[i - 1] : [0, 0];
        const [hi, upto] = d[i];
        qi = hi === Infinity ? lo : upto > below ? lo + ((hi - lo) * (rank - below)) / (upto - below) : hi;
    }
    return { n: total, q: i >= 0 ? d[i][0] : Infinity, qi, shareAt: under ? under[1] / total : NaN };
}

// The 1-minute load average now (for rows: every figure beside its load).
export function loadNow() {
    try {
        return Number(fs.readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
    } catch {
        return NaN;
    }
}
