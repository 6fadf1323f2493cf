#!/usr/bin/env bash
# Runs every test: installs what is missing, builds with ASan + UBSan, runs
# the cmocka unit tests, the integration and end-to-end tests (node:test,
# real PostgreSQL, real processes, the real e2b SDK), and each libFuzzer
# target for a bounded time. Prints one summary line; exits non-zero on any
# failure.
#
# Environment: AGENTBOX_BUILD_DIR (default build), FUZZ_SECONDS (default 20
# per target), TEST_FILTER (a regex: run only matching unit tests and test files).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${AGENTBOX_BUILD_DIR:-$ROOT/build}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
FILTER=${TEST_FILTER:-.}
LOGS=$ROOT/.run/test-logs
mkdir -p "$LOGS"
passed=0
failed=0
failures=()

bash scripts/deps.sh || { echo "test: installing dependencies failed"; exit 1; }

echo "test: building with ASan + UBSan into $BUILD"
if ! { cmake -S . -B "$BUILD" -DAGENTBOX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >"$LOGS/cmake.log" 2>&1 &&
       cmake --build "$BUILD" -j"$(nproc)" >"$LOGS/build.log" 2>&1; }; then
  tail -n 40 "$LOGS/build.log" "$LOGS/cmake.log" 2>/dev/null
  echo "0 passed, 1 failed"
  exit 1
fi

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:halt_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export AGENTBOX_BUILD_DIR=$BUILD
export AGENTBOX_SOURCE_DIR=$ROOT

# --- unit tests (cmocka, one process per file) ---
echo "test: unit tests"
ctest --test-dir "$BUILD" -R "$FILTER" --output-on-failure -j"$(nproc)" >"$LOGS/unit.log" 2>&1
summary=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$LOGS/unit.log" | tail -n 1)
if [ -n "$summary" ]; then
  total=$(sed -E 's/.*out of ([0-9]+).*/\1/' <<<"$summary")
  nfail=$(sed -E 's/.*passed, ([0-9]+) tests failed.*/\1/' <<<"$summary")
  passed=$((passed + total - nfail))
  failed=$((failed + nfail))
  [ "$nfail" -gt 0 ] && { failures+=("unit"); grep -E "^\s+[0-9]+ - .*\(" "$LOGS/unit.log"; }
  echo "test: unit: $summary"
else
  grep -q "No tests were found" "$LOGS/unit.log" || { failed=$((failed + 1)); failures+=("unit (no summary)"); tail -n 30 "$LOGS/unit.log"; }
fi

# --- integration and end-to-end tests (node:test) ---
# One node process per file, each under a deadline: a file that hangs counts
# as a failure naming it instead of stalling the whole run.
FILE_TIMEOUT=${TEST_FILE_TIMEOUT:-900}
mapfile -t files < <(find tests/integration tests/e2e -name '*.test.mjs' 2>/dev/null | sort | grep -E "$FILTER")
if [ "${#files[@]}" -gt 0 ]; then
  echo "test: integration and e2e (${#files[@]} files, ${FILE_TIMEOUT}s each at most)"
  : >"$LOGS/node.log"
  for f in "${files[@]}"; do
    log="$LOGS/node-$(basename "$f" .test.mjs).log"
    timeout -k 10 "$FILE_TIMEOUT" node --test --test-reporter=tap "$f" >"$log" 2>&1
    rc=$?
    cat "$log" >>"$LOGS/node.log"
    np=$(grep -E "^# pass [0-9]+" "$log" | tail -n 1 | awk '{print $3}')
    nf=$(grep -E "^# fail [0-9]+" "$log" | tail -n 1 | awk '{print $3}')
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      failed=$((failed + 1)); failures+=("$f (timed out after ${FILE_TIMEOUT}s)")
      passed=$((passed + ${np:-0}))
    elif [ -z "$np" ]; then
      failed=$((failed + 1)); failures+=("$f (no summary)"); tail -n 40 "$log"
    else
      passed=$((passed + np)); failed=$((failed + nf))
      if [ "$nf" -gt 0 ]; then
        failures+=("$f")
        grep -B2 -A30 -E "^\s*not ok" "$log" | head -n 120
      fi
    fi
    echo "test: $f: ${np:-0} passed, ${nf:-?} failed"
  done
fi

# --- fuzz targets, each for a bounded time ---
if command -v clang >/dev/null && [ "$FUZZ_SECONDS" -gt 0 ]; then
  FBUILD=$BUILD-fuzz
  echo "test: fuzz targets (${FUZZ_SECONDS}s each)"
  if CC=clang cmake -S . -B "$FBUILD" -DAGENTBOX_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >"$LOGS/fuzz-cmake.log" 2>&1 &&
     cmake --build "$FBUILD" -j"$(nproc)" >"$LOGS/fuzz-build.log" 2>&1; then
    for bin in "$FBUILD"/fuzz_*; do
      [ -x "$bin" ] || continue
      name=$(basename "$bin")
      grep -qE "$FILTER" <<<"$name" || continue
      corpus=$FBUILD/corpus/$name
      mkdir -p "$corpus"
      if (cd "$FBUILD" && ASAN_OPTIONS=detect_leaks=1 "$bin" -max_total_time="$FUZZ_SECONDS" \
            -timeout=10 -rss_limit_mb=2048 -print_final_stats=0 "$corpus" >"$LOGS/$name.log" 2>&1); then
        passed=$((passed + 1))
      else
        failed=$((failed + 1)); failures+=("$name"); tail -n 30 "$LOGS/$name.log"
      fi
    done
  else
    failed=$((failed + 1)); failures+=("fuzz build"); tail -n 30 "$LOGS/fuzz-build.log"
  fi
fi

[ "${#failures[@]}" -gt 0 ] && echo "test: failing: ${failures[*]} (logs in .run/test-logs/)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
