#!/usr/bin/env bash
# The GPU engine on an H200: its tests against the CPU engine, the kernels'
# GPU test, then the end-to-end benchmark (engine_bench) on a synthetic
# Llama 3.1 8B written on the spot, dense against Kascade. Logs go to $OUT;
# the benchmark's table is printed last.
#
#   bench/gpu/run_device.sh [test|bench|all|serve|llama]      (default all: test and bench)
#
# llama: our dense decode beside llama.cpp's llama-bench (CUDA, flash
# attention on, all layers on the GPU) on the same files, one table
# (bench/gpu/beside_llama_cpp.py): LLAMA_SRC names the trimmed source of
# bench/gpu/fetch_llama_cpp.sh, built here in the background (setsid, all but
# five cores) while engine_bench runs; SYNTH_TYPES (default "q4_k bf16") and
# REAL_MODELS (GGUF paths, e.g. the staged 1.5B) at CONTEXTS, batch 1;
# BANDWIDTH (bytes/s, engine_bench's floor; default the H200's 4.3e12).
#
# serve: `kascade serve --device cuda` on the synthetic 8B (bf16) under
# bench/server/loadgen.py (docs/server.md's GPU table): SERVE_PROMPT_TOKENS
# (32768) prompts, SERVE_MAX_TOKENS (128) new tokens, at SERVE_CONCURRENCY
# (1,16,64) clients; dense, then the paper's Kascade per request. Needs
# PREBUILT binaries linked with cpp-httplib (README, "Building by hand").
#
# PREBUILT=DIR   use kascade, engine_bench, gpu_engine_test,
#                kascade_cuda_test and (optional) matrix_bench from DIR
#                (built elsewhere with -DKASCADE_CUDA=ON
#                -DKASCADE_STATIC_LIBS=ON); else configure
#                and build build-device-engine/ here (needs OpenBLAS and
#                libpng, which the GPU machine lacks: prefer PREBUILT there).
# KASCADE_CACHE  where the default model is (the parity test on a real model
#                needs it; see ../shared/GPU.md for staging it in parts).
# SYNTH_TYPES    synthetic models benchmarked, in turn: bf16 (default), q8_0,
#                q4_k, or several ("q4_k bf16"); CONTEXTS, BATCHES, STRATEGIES:
#                engine_bench's lists.
# SYNTH_TOKENIZER  a GGUF whose tokenizer the synthetic models take (default:
#                the default model's; the GPU machine has neither unless staged).
# MATRIX_ROWS    input rows of matrix_bench's products (default 1,8), after engine_bench.
# HF_CONTEXTS    also time Hugging Face transformers (bench/gpu/hf_baseline.py)
#                at these contexts and HF_BATCHES (default 1,16).
set -uo pipefail
what=${1:-all}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 2
case $what in test | bench | all | serve | llama) ;; *) echo "usage: $0 [test|bench|all|serve|llama]" >&2; exit 2 ;; esac
status=0

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
if [[ -n ${PREBUILT:-} ]]; then
  bin=$PREBUILT
else
  bin=$root/build-device-engine
  cmake -S . -B "$bin" -DCMAKE_BUILD_TYPE=Release -DKASCADE_CUDA=ON >"$OUT/configure.log" 2>&1 &&
    cmake --build "$bin" -j"$(nproc)" --target kascade engine_bench gpu_engine_test kascade_cuda_test matrix_bench \
      >"$OUT/build.log" 2>&1 || { echo "build failed (see $OUT/build.log)"; exit 1; }
  bin=$bin  # the test binaries sit in src/gpu and src/cuda of the build
  ln -sf "$bin/src/gpu/gpu_engine_test" "$bin/src/gpu/matrix_bench" "$bin/src/cuda/kascade_cuda_test" "$bin/" 2>/dev/null
fi

# The synthetic Llama 3.1 8B of a weight type, written once per machine; prints its path.
synth_model() {
  local model=/tmp/kascade-synth-llama-3.1-8b-$1.gguf
  if [[ ! -f $model ]]; then
    "$bin/kascade" synth --preset llama-3.1-8b --type "$1" -o "$model" -q \
      ${SYNTH_TOKENIZER:+--tokenizer "$SYNTH_TOKENIZER"} >&2 || { echo "synth failed" >&2; return 1; }
  fi
  echo "$model"
}

if [[ $what == serve ]]; then
  model=$(synth_model bf16) || exit 1
  prompt_tokens=${SERVE_PROMPT_TOKENS:-32768}
  concurrency=${SERVE_CONCURRENCY:-1,16,64}
  parallel=$(tr ',' '\n' <<<"$concurrency" | sort -n | tail -1)
  # Context with room for loadgen's estimate of a prompt's length and the completion.
  "$bin/kascade" serve --device cuda -m "$model" --port 18080 --parallel "$parallel" --max-queue "$parallel" -q \
    --ctx-size $((prompt_tokens * 17 / 16 + ${SERVE_MAX_TOKENS:-128})) >"$OUT/serve.log" 2>&1 &
  server=$!
  for attention in dense paper; do
    request=(--kascade dense)
    [[ $attention == paper ]] && request=(--kascade kascade --budget 10 --sparse-phases both --reuse)
    python3 bench/server/loadgen.py --url http://127.0.0.1:18080 --concurrency "$concurrency" \
      --prompt-tokens "$prompt_tokens" --max-tokens "${SERVE_MAX_TOKENS:-128}" "${request[@]}" \
      --label "gpu-$attention" --json "$OUT/loadgen.json" --wait 300 2>&1 | tee "$OUT/loadgen_$attention.log"
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
  kill -TERM "$server"
  wait "$server" || status=1
  exit $status
fi

if [[ $what == llama ]]; then
  [[ -f ${LLAMA_SRC:-} ]] || { echo "llama: LLAMA_SRC must name the tarball of bench/gpu/fetch_llama_cpp.sh" >&2; exit 2; }
  llama=/tmp/llama-cpp
  contexts=${CONTEXTS:-1024,32768}
  if [[ ! -x $llama/build/bin/llama-bench ]]; then
    rm -rf "$llama" && mkdir -p "$llama" && tar xzf "$LLAMA_SRC" -C "$llama" --strip-components=1
    jobs=$(( $(nproc) > 6 ? $(nproc) - 5 : 1 ))
    setsid bash -c "cmake -S '$llama' -B '$llama/build' -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF && \
      cmake --build '$llama/build' -j $jobs --target llama-bench" >"$OUT/llama_build.log" 2>&1 &
    builder=$!
  fi
  models=()
  for type in ${SYNTH_TYPES:-q4_k bf16}; do
    model=$(synth_model "$type") || exit 1
    models+=("$model")
  done
  for model in ${REAL_MODELS:-}; do models+=("$model"); done
  for model in "${models[@]}"; do
    "$bin/engine_bench" --model "$model" --device cuda --contexts "$contexts" --batches 1 --strategies dense \
      --repeats 1 --decode-steps 64 ${BANDWIDTH:+--bandwidth "$BANDWIDTH"} >"$OUT/ours_$(basename "$model").log" 2>&1 || status=1
  done
  if [[ -n ${builder:-} ]] && ! wait "$builder"; then
    tail -n 20 "$OUT/llama_build.log"
    echo "llama.cpp build failed ($OUT/llama_build.log)"
    exit 1
  fi
  for model in "${models[@]}"; do
    "$llama/build/bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 0 -n 64 -d "$contexts" -r 3 -o csv \
      >"$OUT/llama_$(basename "$model").csv" 2>"$OUT/llama_$(basename "$model").err" || status=1
  done
  python3 bench/gpu/beside_llama_cpp.py "$OUT" "${models[@]}" | tee "$OUT/beside_llama_cpp.md"
  exit $status
fi

if [[ $what != bench ]]; then
  start=$(date +%s)
  "$bin/kascade_cuda_test" >"$OUT/kernel_test.log" 2>&1 || status=1
  tail -n 3 "$OUT/kernel_test.log"
  "$bin/gpu_engine_test" --gtest_filter="${GPU_TEST_FILTER:-*}" 2>&1 | tee "$OUT/engine_test.log" | grep -E "relative error|FAILED|PASSED|OK \]|Failure" 
  [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  echo "tests: $(( $(date +%s) - start )) s, status $status"
fi

if [[ $what != test ]]; then
  for type in ${SYNTH_TYPES:-bf16}; do
    model=$(synth_model "$type") || exit 1
    "$bin/engine_bench" --model "$model" --device cuda --contexts "${CONTEXTS:-1024,32768}" \
      --batches "${BATCHES:-1,16}" --strategies "${STRATEGIES:-dense,kascade,kascade-reuse-sparse-prefill}" \
      --repeats 1 --decode-steps 12 2>&1 | tee "$OUT/engine_bench_$type.log"
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
  done
  if [[ -x $bin/matrix_bench ]]; then  # the decode products alone
    "$bin/matrix_bench" --rows "${MATRIX_ROWS:-1,8}" >"$OUT/matrix_bench.log" 2>&1 || status=1
    tail -n +2 "$OUT/matrix_bench.log"
  fi
  if [[ -n ${HF_CONTEXTS:-} ]]; then  # transformers on the same shape, same run
    python3 bench/gpu/hf_baseline.py --contexts "$HF_CONTEXTS" --batches "${HF_BATCHES:-1,16}" \
      --out "$OUT/hf_baseline.md" >"$OUT/hf_baseline.log" 2>&1 || status=1
    tail -n 8 "$OUT/hf_baseline.log"
  fi
fi
exit $status
