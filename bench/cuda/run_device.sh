#!/usr/bin/env bash
# The one device script for the CUDA kernels: builds them (nvcc, sm_90a),
# runs the correctness test against the CPU reference, then the benchmark and
# the cuDNN baseline, and prints one table last. Logs and CSVs go to $OUT.
#
# Run from the repository root on the GPU machine, with fmt's headers copied
# to .deps/include (the machine has no libfmt):
#   bench/cuda/run_device.sh [all|test|bench|decode|prefill]
# decode / prefill: the test, then that half of the benchmark. With
# PREBUILT=DIR holding kascade_cuda_test and kascade_cuda_bench built
# elsewhere (same commands), those are used when they start on this machine,
# which saves the build's device time.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build-device
mkdir -p "$build"
cd "$root"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/device.txt"
nvcc_flags=(-std=c++20 -O3 -gencode arch=compute_90a,code=sm_90a -lineinfo -Isrc)
cxx_flags=(-std=c++20 -O2 -mavx2 -mfma -mf16c -fopenmp -DFMT_HEADER_ONLY -I.deps/include -Isrc -I/usr/local/cuda/include)

# The prebuilt bench prints its usage and exits 2 when it starts at all.
prebuilt_runs() {
  [[ -n ${PREBUILT:-} ]] || return 1
  "$PREBUILT/kascade_cuda_bench" >/dev/null 2>&1
  [[ $? == 2 ]] && ! ldd "$PREBUILT/kascade_cuda_test" | grep -q "not found"
}
build_here=1
if prebuilt_runs; then
  cp "$PREBUILT/kascade_cuda_test" "$PREBUILT/kascade_cuda_bench" "$build/"
  echo "build: using prebuilt binaries from $PREBUILT"
  build_here=0
fi

# Compile everything in parallel; fail if any unit fails.
if [[ $build_here == 1 ]]; then
pids=()
compile() { "$@" >>"$build/compile.log" 2>&1 & pids+=($!); }
: >"$build/compile.log"
start=$(date +%s)
compile nvcc "${nvcc_flags[@]}" -Xptxas -v -c src/cuda/decode.cu -o "$build/decode.o"
compile nvcc "${nvcc_flags[@]}" -Xptxas -v -c src/cuda/prefill.cu -o "$build/prefill.o"
compile nvcc "${nvcc_flags[@]}" -c bench/cuda/kascade_cuda_bench.cu -o "$build/bench.o"
compile g++ "${cxx_flags[@]}" -c src/cuda/api.cc -o "$build/api.o"
compile g++ "${cxx_flags[@]}" -c tests/cuda/kascade_cuda_test.cc -o "$build/test.o"
for unit in kascade_ops exact kernels scoring; do
  compile g++ "${cxx_flags[@]}" -c "src/attention/$unit.cc" -o "$build/cpu_$unit.o"
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
grep -E "error|warning|spill stores" "$build/compile.log" | grep -v " 0 bytes spill stores" >"$OUT/compile.log"
if [[ $status != 0 ]]; then
  grep -E "error" "$build/compile.log" | head -40
  echo "build failed"
  exit 1
fi
libs=("$build/api.o" "$build/decode.o" "$build/prefill.o")
nvcc -o "$build/kascade_cuda_test" "$build/test.o" "$build"/cpu_*.o "${libs[@]}" -Xcompiler -fopenmp || exit 1
nvcc -o "$build/kascade_cuda_bench" "$build/bench.o" "${libs[@]}" || exit 1
echo "build: $(( $(date +%s) - start )) s"
fi

if [[ $what != bench ]]; then
  start=$(date +%s)
  OMP_NUM_THREADS=$(nproc) timeout "${TEST_TIMEOUT:-180}" "$build/kascade_cuda_test" 2>&1 | tee "$OUT/test.log"
  echo "test: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s"
fi

section=all
case $what in decode | prefill) section=$what ;; esac
if [[ $what != test ]]; then
  start=$(date +%s)
  timeout "${BENCH_TIMEOUT:-200}" "$build/kascade_cuda_bench" "$OUT/ours.csv" "$section" 2>&1 | tee "$OUT/bench.log"
  echo "bench: exit ${PIPESTATUS[0]}, $(( $(date +%s) - start )) s"
  start=$(date +%s)
  # Progress goes to cudnn.log; the table (stdout) comes last.
  PYTHONUNBUFFERED=1 timeout "${BASELINE_TIMEOUT:-180}" python3 bench/cuda/torch_baseline.py "$OUT/ours.csv" "$OUT" \
    2>"$OUT/cudnn.log" >"$OUT/table.log"
  echo "baseline: exit $?, $(( $(date +%s) - start )) s"
fi
[[ -f $OUT/test.log ]] && grep -E "^FAIL|PASSED|FAILED" "$OUT/test.log"
[[ -f $OUT/table.log ]] && cat "$OUT/table.log"
