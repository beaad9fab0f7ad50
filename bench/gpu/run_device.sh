#!/usr/bin/env bash
# The GPU engine on an H200: its tests against the CPU engine, the kernels'
# GPU test, then the end-to-end benchmark (engine_bench) on a synthetic
# Llama 3.1 8B written on the spot, dense against Kascade. Logs go to $OUT;
# the benchmark's table is printed last.
#
#   bench/gpu/run_device.sh [test|bench|all]      (default all)
#
# PREBUILT=DIR   use kascade, engine_bench, gpu_engine_test and
#                kascade_cuda_test from DIR (built elsewhere with
#                -DKASCADE_CUDA=ON -DKASCADE_STATIC_LIBS=ON); else configure
#                and build build-device-engine/ here (needs OpenBLAS and
#                libpng, which the GPU machine lacks: prefer PREBUILT there).
# KASCADE_CACHE  where the default model is (the parity test on a real model
#                needs it; see ../shared/GPU.md for staging it in parts).
# SYNTH_TYPE     bf16 (default), q8_0 or q4_k; CONTEXTS, BATCHES: engine_bench's lists.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
case $what in test | bench | all) ;; *) echo "usage: $0 [test|bench|all]" >&2; exit 2 ;; esac
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [[ -n ${PREBUILT:-} ]]; then
  bin=$PREBUILT
else
  bin=$root/build-device-engine
  cmake -S . -B "$bin" -DCMAKE_BUILD_TYPE=Release -DKASCADE_CUDA=ON >"$OUT/configure.log" 2>&1 &&
    cmake --build "$bin" -j"$(nproc)" --target kascade engine_bench gpu_engine_test kascade_cuda_test \
      >"$OUT/build.log" 2>&1 || { echo "build failed (see $OUT/build.log)"; exit 1; }
  bin=$bin  # the test binaries sit in src/gpu and src/cuda of the build
  ln -sf "$bin/src/gpu/gpu_engine_test" "$bin/src/cuda/kascade_cuda_test" "$bin/" 2>/dev/null
fi

if [[ $what != bench ]]; then
  start=$(date +%s)
  "$bin/kascade_cuda_test" >"$OUT/kernel_test.log" 2>&1 || status=1
  tail -n 3 "$OUT/kernel_test.log"
  "$bin/gpu_engine_test" 2>&1 | tee "$OUT/engine_test.log" | grep -E "relative error|FAILED|PASSED|OK \]|Failure" 
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  echo "tests: $(( $(date +%s) - start )) s, status $status"
fi

if [[ $what != test ]]; then
  model=/tmp/kascade-synth-llama-3.1-8b-${SYNTH_TYPE:-bf16}.gguf
  if [[ ! -f $model ]]; then
    "$bin/kascade" synth --preset llama-3.1-8b --type "${SYNTH_TYPE:-bf16}" -o "$model" -q || { echo "synth failed"; exit 1; }
  fi
  "$bin/engine_bench" --model "$model" --device cuda --contexts "${CONTEXTS:-1024,32768}" \
    --batches "${BATCHES:-1,16}" --strategies dense,kascade,kascade-reuse-sparse-prefill --repeats 1 --decode-steps 12 2>&1 | tee "$OUT/engine_bench.log"
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
fi
exit $status
