#!/usr/bin/env bash
# The one device script for the CUDA kernels: builds them with CMake
# (-DKASCADE_DEVICE_ONLY=ON: the CUDA library, the GPU test and the
# benchmark over the CPU references; sm_90a, C++20), runs the correctness test
# against the CPU reference, then the benchmark and the cuDNN baseline, and
# prints one table last. Logs and CSVs go to $OUT.
#
# Run from the repository root on the GPU machine, which needs cmake (3.25 or
# later), g++, nvcc with sm_90a and, for the baseline, torch with cuDNN. It
# has no libfmt and may lack nlohmann-json and GoogleTest: run
# scripts/prepare_device_deps.sh on a machine that has them and carry .deps/
# (git-ignored) along with the working tree; CMake falls back to it.
#   bench/cuda/run_device.sh [all|test|bench|decode|prefill|ab|kernels]
# decode / prefill: the test, then that half of the benchmark. ab and
# kernels run the test, then the benchmark's SECTION (default selecting) at
# each SHAPES batch:keys (default "1:32768 1:131072 16:32768"). ab: an A/B
# against BASE=DIR (a base build's kascade_cuda_bench), base and new
# alternated for AB_ROUNDS (default 2), one table of every round and the
# medians' ratio; NEW_ENV="VAR=value ..." runs the new side with those A/B
# switches (src/cuda/api.cc lists them), so BASE may be the same build.
# kernels: each kernel's median time under Nsight Compute (ncu), in launch
# order, a table per shape. With
# PREBUILT=DIR holding kascade_cuda_test and kascade_cuda_bench built
# elsewhere (e.g. build-gpu/src/cuda from scripts/test.sh, whose binaries
# link the CUDA runtime, fmt and GoogleTest statically), those are used when
# they start on this machine, which saves the build's device time.
# Exit status: 0 when the build, the test (no case skipped), the benchmark
# and the baseline all succeed; 1 otherwise (2: bad arguments or tools).
set -uo pipefail
what=${1:-all}
case $what in all | test | bench | decode | prefill | ab | kernels) ;; *)
  echo "usage: $0 [all|test|bench|decode|prefill|ab|kernels]" >&2
  exit 2
  ;;
esac
if [[ $what == ab && ! -x ${BASE:-}/kascade_cuda_bench ]]; then
  echo "ab: BASE=DIR must hold the base build's kascade_cuda_bench" >&2
  exit 2
fi
if [[ $what == kernels ]] && ! command -v ncu >/dev/null; then
  echo "kernels: ncu (Nsight Compute) not found" >&2
  exit 2
fi
shapes=${SHAPES:-1:32768 1:131072 16:32768}
section=${SECTION:-selecting}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-device
cd "$root" || exit 2
command -v nvcc >/dev/null || [[ ! -x /usr/local/cuda/bin/nvcc ]] || export PATH=/usr/local/cuda/bin:$PATH

if ! nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"; then
  echo "nvidia-smi failed: no GPU visible here" >&2
  exit 1
fi
status=0
fail() {
  echo "$*" >&2
  status=1
}

# The prebuilt bench prints its usage and exits 2 when it starts at all.
prebuilt_runs() {
  [[ -n ${PREBUILT:-} ]] || return 1
  "$PREBUILT/kascade_cuda_bench" >/dev/null 2>&1
  [[ $? == 2 ]] && ! ldd "$PREBUILT/kascade_cuda_test" | grep -q "not found"
}
if prebuilt_runs; then
  bin=$PREBUILT
  echo "build: using prebuilt binaries from $PREBUILT"
else
  [[ -z ${PREBUILT:-} ]] || echo "build: the binaries in $PREBUILT do not start here; building"
  for tool in cmake nvcc g++; do
    command -v "$tool" >/dev/null || { echo "build: $tool not found" >&2; exit 2; }
  done
  bin=$build/src/cuda
  mkdir -p "$build"
  generator=()
  [[ -f $build/CMakeCache.txt ]] || ! command -v ninja >/dev/null || generator=(-G Ninja)
  start=$(date +%s)
  # -Xptxas -v: registers and spills of every kernel, kept in compile.log.
  if ! cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DKASCADE_CUDA=ON \
      -DKASCADE_DEVICE_ONLY=ON -DCMAKE_CUDA_FLAGS="-Xptxas -v" >"$build/configure.log" 2>&1; then
    tail -n 30 "$build/configure.log"
    cp "$build/configure.log" "$OUT/configure.log"
    echo "build: cmake configure failed (log: $OUT/configure.log)" >&2
    exit 1
  fi
  cmake --build "$build" -j"$(nproc)" >"$build/build.log" 2>&1
  build_status=$?
  grep -E "error|warning|spill stores" "$build/build.log" | grep -v " 0 bytes spill stores" >"$OUT/compile.log"
  if [[ $build_status != 0 ]]; then
    grep -E "error|FAILED" "$build/build.log" | head -40
    cp "$build/build.log" "$OUT/build.log"
    echo "build: failed (log: $OUT/build.log)" >&2
    exit 1
  fi
  echo "build: $(($(date +%s) - start)) s"
fi

if [[ $what != bench ]]; then
  start=$(date +%s)
  OMP_NUM_THREADS=$(nproc) timeout "${TEST_TIMEOUT:-180}" "$bin/kascade_cuda_test" 2>&1 | tee "$OUT/test.log"
  test_status=${PIPESTATUS[0]}
  echo "test: exit $test_status, $(($(date +%s) - start)) s"
  [[ $test_status == 0 ]] || fail "test: failed (exit $test_status; 124: timed out after ${TEST_TIMEOUT:-180} s)"
  # The cases skip without a CUDA device: here that is a failure.
  grep -q "^\[  SKIPPED \]" "$OUT/test.log" && fail "test: cases skipped: the test saw no CUDA device"
fi

if [[ $what == ab ]]; then
  start=$(date +%s)
  for round in $(seq "${AB_ROUNDS:-2}"); do
    for shape in $shapes; do
      for side in base new; do
        side_bin=$bin side_env=(${NEW_ENV:-})
        [[ $side == base ]] && side_bin=$BASE side_env=()
        env "${side_env[@]}" KASCADE_BENCH_B=${shape%%:*} KASCADE_BENCH_N=${shape##*:} timeout "${BENCH_TIMEOUT:-200}" \
          "$side_bin/kascade_cuda_bench" "$OUT/ab_${side}_${round}_${shape/:/x}.csv" "$section" \
          >>"$OUT/bench.log" 2>&1 || fail "ab: the $side benchmark failed at batch:keys $shape (round $round)"
      done
    done
  done
  echo "ab: $(($(date +%s) - start)) s"
  { [[ -z ${NEW_ENV:-} ]] || echo "new side run with: $NEW_ENV"
    python3 bench/cuda/ab_table.py "$OUT"; } >"$OUT/table.log" || fail "ab: no table"
fi

if [[ $what == kernels ]]; then
  : >"$OUT/table.log"
  for shape in $shapes; do
    KASCADE_BENCH_B=${shape%%:*} KASCADE_BENCH_N=${shape##*:} timeout "${BENCH_TIMEOUT:-200}" ncu --clock-control none \
      --cache-control none --kernel-name-base function -k regex:'decode|select|merge|sketch' \
      --metrics gpu__time_duration.sum --csv "$bin/kascade_cuda_bench" "$OUT/kernels_bench.csv" "$section" \
      >"$OUT/ncu_${shape/:/x}.csv" 2>>"$OUT/bench.log" || fail "kernels: ncu failed at batch:keys $shape"
    python3 bench/cuda/kernel_times.py "$OUT/ncu_${shape/:/x}.csv" "batch:keys $shape" >>"$OUT/table.log" ||
      fail "kernels: no table at batch:keys $shape"
  done
fi

case $what in decode | prefill) section=$what ;; all | bench) section=all ;; esac
if [[ $what != test && $what != ab && $what != kernels ]]; then
  start=$(date +%s)
  timeout "${BENCH_TIMEOUT:-200}" "$bin/kascade_cuda_bench" "$OUT/ours.csv" "$section" 2>&1 | tee "$OUT/bench.log"
  bench_status=${PIPESTATUS[0]}
  echo "bench: exit $bench_status, $(($(date +%s) - start)) s"
  [[ $bench_status == 0 ]] || fail "bench: failed (exit $bench_status; 124: timed out after ${BENCH_TIMEOUT:-200} s)"
  start=$(date +%s)
  # Progress goes to cudnn.log; the table (stdout) comes last.
  PYTHONUNBUFFERED=1 timeout "${BASELINE_TIMEOUT:-180}" python3 bench/cuda/torch_baseline.py "$OUT/ours.csv" "$OUT" \
    2>"$OUT/cudnn.log" >"$OUT/table.log"
  baseline_status=$?
  echo "baseline: exit $baseline_status, $(($(date +%s) - start)) s"
  [[ $baseline_status == 0 ]] || fail "baseline: failed (exit $baseline_status; see $OUT/cudnn.log)"
fi
# The test's failed checks and verdict lines, then the table.
[[ -f $OUT/test.log ]] && grep -E "^(FAIL|ALL PASSED|PASSED)|^\[  (PASSED|FAILED|SKIPPED) +\]" "$OUT/test.log"
[[ -f $OUT/table.log ]] && cat "$OUT/table.log"
exit $status
