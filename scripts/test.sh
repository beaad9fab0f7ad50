#!/usr/bin/env bash
# The test command (what .ci/run calls): setup (packages, model, Release
# build), the test suite, the main command's answer on the demo model
# (fetched here), the HTTP server's tests through the openai client
# (a venv in build/server-venv), the CUDA build when nvcc is on PATH, the suite again
# under AddressSanitizer and UndefinedBehaviorSanitizer, then each fuzz target
# for a bounded time. Ends with a line 'N passed, N failed' (tests and fuzz
# targets; a failed build counts as one failure) and exits non-zero if
# anything failed.
#   KASCADE_SKIP_ASAN=1        skip the sanitizer build and its tests
#   KASCADE_SKIP_CUDA=1        skip the CUDA build even with nvcc on PATH
#   KASCADE_FUZZ_SECONDS=N     seconds per fuzz target (default 60; 0 skips fuzzing)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
readonly FUZZ_SECONDS="${KASCADE_FUZZ_SECONDS:-60}"
readonly DEMO_MODEL=qwen2.5-coder-1.5b  # scripts/demo.sh's; kDemoModelFile in src/core/model_cache.h
JOBS="$(nproc)"
readonly JOBS
[[ "$FUZZ_SECONDS" =~ ^[0-9]+$ ]] || { echo "test: KASCADE_FUZZ_SECONDS must be a whole number, got '$FUZZ_SECONDS'" >&2; exit 2; }

passed=0
failed=0
timings=()
log_dir="$(mktemp -d)"
trap 'rm -rf "$log_dir"' EXIT

banner() { printf '\n==== %s ====\n' "$*"; }

finish() {
  banner "summary"
  printf '%s\n' "${timings[@]}"
  echo "$passed passed, $failed failed"
  exit $((failed > 0))
}

# Runs a phase, records its time, and returns its status.
timed() {
  local name="$1" start=$SECONDS status
  shift
  banner "$name"
  "$@"
  status=$?
  timings+=("$(printf '%-28s %5ds  %s' "$name" $((SECONDS - start)) "$([[ $status == 0 ]] && echo ok || echo FAILED)")")
  return $status
}

# Runs ctest in a build dir and adds its counts to the totals.
# Extra arguments go to ctest (e.g. -LE model).
run_ctest() {
  local build_dir="$1" log="$log_dir/ctest-$1.log" status summary
  shift
  ctest --test-dir "$build_dir" --output-on-failure -j2 "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  summary="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1)"
  if [[ -z "$summary" ]]; then
    echo "test: ctest in $build_dir reported no test results" >&2
    failed=$((failed + 1))
    return 1
  fi
  local failed_here total
  failed_here="$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$summary")"
  total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")"
  passed=$((passed + total - failed_here))
  failed=$((failed + failed_here))
  return "$status"
}

build_and_test_sanitized() {
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKASCADE_SANITIZE=ON \
    -DKASCADE_BENCH=OFF >/dev/null || { failed=$((failed + 1)); return 1; }
  cmake --build build-asan -j"$JOBS" || { failed=$((failed + 1)); return 1; }
  ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}" \
    run_ctest build-asan -LE 'model|demo'
}

# The main command's answer (tests/demo_test.cc, label demo) on the demo
# model, fetched here as scripts/demo.sh fetches it: a few minutes on 2 cores.
demo_tests() {
  bash scripts/fetch_model.sh "$DEMO_MODEL" >/dev/null || {
    echo "test: could not fetch the demo model ($DEMO_MODEL)" >&2
    failed=$((failed + 1))
    return 1
  }
  run_ctest build -L demo
}

# Everything CUDA: the kernels, the GPU engine and the CLI built with them,
# their GPU tests and benchmarks, linked as the binaries carried to the GPU
# machine are (OpenBLAS static, fmt header-only, GoogleTest from .deps/).
# CI has no GPU: the tests run for their host-side checks and skip their
# device cases.
build_cuda() {
  bash scripts/prepare_device_deps.sh || { failed=$((failed + 1)); return 1; }
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DKASCADE_CUDA=ON -DKASCADE_DEVICE_ONLY=OFF \
    -DKASCADE_STATIC_LIBS=ON -DKASCADE_PREFER_DEPS=ON >/dev/null || { failed=$((failed + 1)); return 1; }
  cmake --build build-gpu -j"$JOBS" --target kascade engine_bench kascade_cuda_test kascade_cuda_bench \
    gpu_engine_test || { failed=$((failed + 1)); return 1; }
  build-gpu/src/cuda/kascade_cuda_test --gtest_brief=1 || { failed=$((failed + 1)); return 1; }
  build-gpu/src/gpu/gpu_engine_test --gtest_brief=1 || { failed=$((failed + 1)); return 1; }
}

# The HTTP server through the real `openai` client (tests/server/test_server.py):
# a venv with pinned openai and pytest in build/server-venv, made once and
# reused; pytest's counts join the totals (a venv that cannot be made counts
# as one failure).
readonly SERVER_VENV=build/server-venv
readonly SERVER_PYTHON_PACKAGES=(openai==3.57.0 pytest==9.2.0)
server_tests() {
  local python="$SERVER_VENV/bin/python" log="$log_dir/server-tests.log" status summary n
  if ! "$python" -c 'import openai, pytest' 2>/dev/null; then
    python3 -m venv "$SERVER_VENV" && "$python" -m pip install -q "${SERVER_PYTHON_PACKAGES[@]}" || {
      echo "test: could not make $SERVER_VENV (pip install ${SERVER_PYTHON_PACKAGES[*]})" >&2
      failed=$((failed + 1))
      return 1
    }
  fi
  timeout 900 "$python" -m pytest -q -p no:cacheprovider tests/server/test_server.py 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  summary="$(grep -E '[0-9]+ (passed|failed|skipped|errors?)' "$log" | tail -n 1)"
  if [[ -z "$summary" ]]; then
    echo "test: the server tests reported no results" >&2
    failed=$((failed + 1))
    return 1
  fi
  local passed_here=0 failed_here=0
  for n in $(grep -oE '[0-9]+ passed' <<<"$summary" | cut -d' ' -f1); do passed_here=$((passed_here + n)); done
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$summary" | cut -d' ' -f1); do failed_here=$((failed_here + n)); done
  passed=$((passed + passed_here))
  failed=$((failed + failed_here))
  if ((status != 0 && status != 5 && failed_here == 0)); then failed=$((failed + 1)); fi  # 5: all skipped
  ((failed_here == 0))
}

fuzz_targets=()
build_fuzzers() {
  local source
  for source in fuzz/fuzz_*.cc; do
    [[ -f "$source" ]] && fuzz_targets+=("$(basename "$source" .cc)")
  done
  if ((${#fuzz_targets[@]} == 0)); then
    echo "test: no fuzz targets in fuzz/"
    return 0
  fi
  cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKASCADE_FUZZ=ON -DKASCADE_SANITIZE=ON \
    -DKASCADE_TESTS=OFF -DKASCADE_BENCH=OFF >/dev/null || { failed=$((failed + 1)); return 1; }
  cmake --build build-fuzz -j"$JOBS" --target "${fuzz_targets[@]}" || { failed=$((failed + 1)); return 1; }
}

# Fuzzes one target; new inputs go to build-fuzz/corpus/, never into git,
# and fuzz/corpus_<name>/ (name without the fuzz_ prefix) seeds it.
run_fuzzer() {
  local target="$1" name="${1#fuzz_}"
  local work_corpus="build-fuzz/corpus/$name" artifacts="build-fuzz/artifacts/$name"
  local corpora=("$work_corpus")
  [[ -d "fuzz/corpus_$name" ]] && corpora+=("fuzz/corpus_$name")
  mkdir -p "$work_corpus" "$artifacts"
  # The outer timeout only guards against a fuzzer that ignores its own limit.
  if timeout $((FUZZ_SECONDS + 120)) "build-fuzz/$target" -max_total_time="$FUZZ_SECONDS" \
      -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
      "${corpora[@]}" 2>&1 | tail -n 60; [[ ${PIPESTATUS[0]} == 0 ]]; then
    passed=$((passed + 1))
  else
    echo "test: $target failed; reproducer(s) in $artifacts/"
    failed=$((failed + 1))
    return 1
  fi
}

if ! timed "setup and Release build" bash scripts/setup.sh; then
  failed=$((failed + 1))
  finish
fi
timed "tests (build/)" run_ctest build -LE demo
timed "demo tests (build/)" demo_tests
timed "server tests (openai client)" server_tests

if [[ "${KASCADE_SKIP_CUDA:-0}" == 1 ]]; then
  echo "test: KASCADE_SKIP_CUDA=1: skipping the CUDA build"
elif ! command -v nvcc >/dev/null; then
  echo "test: no nvcc on PATH: skipping the CUDA build"
else
  timed "CUDA build (build-gpu/)" build_cuda
fi

if [[ "${KASCADE_SKIP_ASAN:-0}" == 1 ]]; then
  echo "test: KASCADE_SKIP_ASAN=1: skipping the sanitizer build"
else
  timed "sanitizer build and tests" build_and_test_sanitized
fi

if ((FUZZ_SECONDS == 0)); then
  echo "test: KASCADE_FUZZ_SECONDS=0: skipping fuzzing"
elif timed "fuzz build" build_fuzzers; then
  for target in "${fuzz_targets[@]}"; do
    timed "fuzz $target (${FUZZ_SECONDS}s)" run_fuzzer "$target"
  done
fi
finish
