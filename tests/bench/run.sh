#!/usr/bin/env bash
# Runs every benchmark of the project against a Release build and prints
# their figures. Not part of the test suite; machines are shared and noisy,
# so each benchmark measures its own baseline in the same run.
#
#   tests/bench/run.sh                 build (Release, own dir) and run all
#   tests/bench/run.sh tunnel          run only benchmarks whose name matches
#   AGENTBOX_BUILD_DIR=DIR run.sh      use an existing Release build in DIR
#
# Knobs are environment variables documented in tests/bench/README.md.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${AGENTBOX_BUILD_DIR:-$repo/build-bench}"
filter="${1:-}"

# Many tunnels need many descriptors (hub and client each hold one per
# agent). Raise the soft limit as far as allowed; the benchmark warns when it
# is still below what a stage needs.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "open files limit: $(ulimit -n)"

if [ -z "${AGENTBOX_BUILD_DIR:-}" ] || [ ! -x "$build/agentbox-hub" ]; then
    # Release, no sanitizers. -Wno-error=stringop-overread: GCC's -O3
    # inlining flags shared/src/metrics.c's bounded strndup (a false positive).
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DAGENTBOX_SANITIZE=OFF \
        -DCMAKE_C_FLAGS="-Wno-error=stringop-overread" >/dev/null
    # every tests/bench/bench_*.c is a target of its own
    bench_targets=()
    for src in "$here"/bench_*.c; do
        [ -e "$src" ] && bench_targets+=("$(basename "$src" .c)")
    done
    cmake --build "$build" -j"$(nproc)" --target agentbox-hub agentbox-agent agentbox-envd \
        "${bench_targets[@]}"
fi
export AGENTBOX_BUILD_DIR="$build"

# name | command (run from tests/, where node_modules lives). One line per
# benchmark of DESIGN §12; add yours here. (bench_tunnel_agents is not listed:
# tunnel_agents.mjs drives it.)
benchmarks=(
    "tunnel-bulk-rtt|node bench/tunnel.mjs"
    "tunnel-agents|node bench/tunnel_agents.mjs"
    "route-decision|$build/bench_route"
    "assertion|$build/bench_assertion"
    "e2b-create|node bench/e2b_create.mjs"
    "sandbox-floor|$build/bench_sandbox_floor"
    "dataplane-proxy|node bench/dataplane.mjs"
    "federation|node bench/federation.mjs"
    "isolation|node bench/isolation.mjs"
    "envd-upload|node bench/envd_upload.mjs"
    "code-interpreter|node bench/code_interpreter.mjs"
    "egress|node bench/egress.mjs"
    "egress-intercept|$build/bench_egress_intercept"
    "native-api|node bench/native_api.mjs"
    "kube-claim|node bench/kube_claim.mjs"
    "kube-claim-split|node bench/kube_claim_split.mjs"
    "dataplane-files|node bench/dataplane_files.mjs"
    "autoscale|node bench/autoscale.mjs"
)

# The issue-17 table (tests/bench/README.md, "Summary rows"): key | measure |
# target | the benchmark that emits it. Every key is printed in the summary,
# measured or not; rows with other keys follow.
expected=(
    "relay-bulk|bulk alpha -> hub -> beta vs direct loopback TCP|>= 0.5x|tunnel-bulk-rtt"
    "relay-websockify|relay vs websockify, one WebSocket hop, same bytes|peer|tunnel-bulk-rtt"
    "relay-stalled|a stalled stream: added to another stream's round trip, p50|<= 5 ms|tunnel-bulk-rtt"
    "hub-agents-rss|hub with 10,000 agent tunnels: RSS|<= 1024 MiB|tunnel-agents"
    "hub-agents-cpu|hub with 10,000 agent tunnels: CPU|<= 1 core|tunnel-agents"
    "hub-agents-lag|hub with 10,000 agent tunnels: loop lag p99|<= 20 ms|tunnel-agents"
    "hub-agents-storm|reconnect storm of 10,000 agents|<= 60 s|tunnel-agents"
    "create-burst32-p99|E2B create, 32 clients in a burst, p99|<= 25 ms|e2b-create"
    "create-burst32-curl-p99|E2B create, 32 in a burst from curl -Z (C client), p99|<= 25 ms|e2b-create"
    "create-burst32-warm-p99|E2B create, 32 in a burst on open connections (raw HTTP/1.1), p99|<= 25 ms|e2b-create"
    "create-1-p50|E2B create, 1 client, p50|<= 5 ms|e2b-create"
    "create-1-raw-p50|E2B create, 1 client on an open connection (raw HTTP/1.1), p50|<= 5 ms|e2b-create"
    "create-1-p99|E2B create, 1 client, p99|<= 25 ms|e2b-create"
    "create-sustained|sustained creates with refills, 32 clients|>= 500/s|e2b-create"
    "create-sustained-raw|sustained creates with refills, 32 raw HTTP/1.1 clients (client cost out)|>= 500/s|e2b-create"
    "forward-create-p50|forwarded beta:: create, added over local, p50|<= 1.5 ms|federation"
    "relay-run-p50|relayed commands.run('true'), added, p50|<= 1 ms|federation"
    "dataplane-nginx|data plane vs nginx reverse proxy, same upstream|>= 1.0x|dataplane-proxy"
)

status=0
rows_file="$(mktemp)"
out_file="$(mktemp)"
trap 'rm -f "$rows_file" "$out_file"' EXIT
cd "$repo/tests"
for entry in "${benchmarks[@]}"; do
    name="${entry%%|*}"
    cmd="${entry#*|}"
    if [ -n "$filter" ] && [[ "$name" != *"$filter"* ]]; then
        continue
    fi
    script="${cmd#node }"
    if [[ "$cmd" == node\ * ]] && [ ! -e "$repo/tests/$script" ]; then
        echo "skipping $name: tests/$script does not exist"
        continue
    fi
    if [[ "$cmd" == /* ]] && [ ! -x "${cmd%% *}" ]; then
        echo "skipping $name: ${cmd%% *} is not built"
        continue
    fi
    echo
    echo "=================== $name ==================="
    load="$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?')"
    if ! bash -c "$cmd" 2>&1 | tee "$out_file"; then
        echo "benchmark $name FAILED (see above)"
        status=1
    fi
    # ROW key | measure | figure | baseline | target | verdict
    sed -n 's/^ROW //p' "$out_file" | while IFS= read -r line; do
        printf '%s|%s|%s\n' "$name" "$load" "$(printf '%s' "$line" | sed 's/ *| */|/g')"
    done >>"$rows_file"
done

# The summary: every issue-17 row (measured or not), then every other row.
echo
echo "=================== summary ==================="
echo "(load: the 1-minute load average when the benchmark started; on 2 shared cores)"
{
    printf 'measure|figure|baseline|target|verdict|bench|load\n'
    printf -- '-|-|-|-|-|-|-\n'
    for e in "${expected[@]}"; do
        IFS='|' read -r key measure target bench <<<"$e"
        found="$(awk -F'|' -v k="$key" '$3 == k' "$rows_file")"
        if [ -n "$found" ]; then
            printf '%s\n' "$found" | awk -F'|' '{ print $4 "|" $5 "|" $6 "|" $7 "|" $8 "|" $1 "|" $2 }'
        elif [ -n "$filter" ] && [[ "$bench" != *"$filter"* ]]; then
            printf '%s|not run (filter)|-|%s|-|%s|-\n' "$measure" "$target" "$bench"
        else
            printf '%s|NOT MEASURED (no ROW %s)|-|%s|missed|%s|-\n' "$measure" "$key" "$target" "$bench"
        fi
    done
    awk -F'|' -v keys="$(printf '%s\n' "${expected[@]}" | cut -d'|' -f1 | tr '\n' ' ')" '
        BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) known[k[i]] = 1 }
        !($3 in known) { print $4 "|" $5 "|" $6 "|" $7 "|" $8 "|" $1 "|" $2 }' "$rows_file"
} | awk -F'|' '
    { for (i = 1; i <= NF; i++) { cell[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } nf[NR] = NF }
    END {
        for (r = 1; r <= NR; r++) {
            line = ""
            for (i = 1; i <= nf[r]; i++) {
                c = cell[r, i]
                if (r == 2) { c = ""; for (j = 0; j < w[i]; j++) c = c "-" }
                line = line (i > 1 ? "  " : "") sprintf("%-" w[i] "s", c)
            }
            sub(/ +$/, "", line)
            print line
        }
    }'
exit $status
