#!/usr/bin/env bash
# The CPU server comparison of docs/server.md: `kascade serve` (dense and
# Kascade per request, one server) beside llama.cpp's llama-server, the same
# model, context, thread count and load generator (bench/server/loadgen.py),
# repeated; then the medians as a markdown table (bench/server/summarize.py).
#
#   bench/server/compare.sh [--llama-server PATH] [--repeats 3] [--threads 2]
#                           [--prompt-tokens 2048] [--max-tokens 128]
#                           [--concurrency 1,4,16] [--servers kascade,llama] [--out DIR]
#
# llama-server: built from the llama-cpp-python sdist's vendor/llama.cpp
# (docs/server.md says how); left out when --llama-server is not given.
# The servers run one at a time, in a different order each repeat, so that
# load from elsewhere on the machine falls on all of them alike.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

llama=""
repeats=3
threads=2
prompt_tokens=2048
max_tokens=128
concurrency=1,4,16
budget=10
out=""
servers=kascade,llama
model="${KASCADE_MODEL:-$HOME/.cache/kascade/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-server) llama="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prompt-tokens) prompt_tokens="$2"; shift 2 ;;
    --max-tokens) max_tokens="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --budget) budget="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
out="${out:-$(mktemp -d /tmp/kascade-server-bench.XXXXXX)}"
mkdir -p "$out"

parallel=$(tr ',' '\n' <<<"$concurrency" | sort -n | tail -1)
ctx=$((prompt_tokens + max_tokens + 128))  # one request: a prompt a little over prompt_tokens, the completion
port=18431
pid=""
stop_server() {  # SIGTERM, then SIGKILL after 30 s (a llama-server once outlived its SIGTERM)
  if [[ -n "$pid" ]]; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    pid=""
  fi
}
port_free() {  # a server left on the port would answer the next run's requests (with its prompt cache)
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "compare.sh: port $port is in use" >&2
    exit 1
  fi
}
trap stop_server EXIT

loadgen() {  # label, extra loadgen arguments...
  local label="$1"; shift
  python3 bench/server/loadgen.py --url "http://127.0.0.1:$port" --concurrency "$concurrency" \
    --prompt-tokens "$prompt_tokens" --max-tokens "$max_tokens" --label "$label" --json "$out/results-$r.jsonl" "$@" \
    | tee -a "$out/tables.md"
}

run_kascade() {
  port_free
  build/kascade serve -m "$model" --port "$port" --threads "$threads" --parallel "$parallel" \
    --ctx-size "$ctx" -q 2>>"$out/kascade-serve.log" &
  pid=$!
  loadgen "kascade serve, dense" --kascade dense
  loadgen "kascade serve, kascade ${budget}%" --kascade kascade --budget "$budget"
  stop_server
}

run_llama() {
  port_free
  # -c is shared by the -np slots: each gets ctx tokens. Continuous batching
  # is llama-server's default (-cb); prompts are processed in batches of -b.
  "$llama" -m "$model" --host 127.0.0.1 --port "$port" -t "$threads" -tb "$threads" -np "$parallel" \
    -c $((ctx * parallel)) -cb --no-webui >>"$out/llama-server.log" 2>&1 &
  pid=$!
  loadgen "llama-server"
}

echo "kascade serve vs llama-server: $repeats repeats, $threads threads, prompts of ~$prompt_tokens tokens," \
  "$max_tokens new tokens, concurrency $concurrency; results in $out" >&2
for ((r = 1; r <= repeats; ++r)); do
  echo "# repeat $r" | tee -a "$out/tables.md"
  order=(kascade llama)
  ((r % 2)) || order=(llama kascade)
  for s in "${order[@]}"; do
    [[ ",$servers," == *",$s,"* ]] || continue
    if [[ $s == kascade ]]; then run_kascade; elif [[ -n "$llama" ]]; then run_llama; fi
  done
done
python3 bench/server/summarize.py "$out"/results-*.jsonl | tee "$out/summary.md"
