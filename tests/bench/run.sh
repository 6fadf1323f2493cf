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

status=0
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
    if ! bash -c "$cmd"; then
        echo "benchmark $name FAILED (see above)"
        status=1
    fi
done
exit $status
