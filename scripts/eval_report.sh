#!/usr/bin/env bash
# Regenerates docs/eval/REPORT.md (tables, goal checks, plots, CSV/JSON) with
# the issue-4 configuration of `kascade eval` on the default model:
#   dense, kascade at p = 10 and p = 5, oracle-topk, streaming, quest, omnikv,
#   lessismore and the two Kascade ablations (all-heads-pooled, no-remap),
#   every task and long-document perplexity, at 1K, 2K, 4K and 8K tokens.
#
# Usage: scripts/eval_report.sh [SAMPLES]     (default 100 per task and length)
# Environment: BUILD_DIR (default build), THREADS (0 = all cores), SEED (0),
#   MODEL (default model path), OUT (default docs/eval), LENGTHS (1k,2k,4k,8k),
#   STRATEGIES (the list above).
# Cost: about 10 strategies x 9 tasks x SAMPLES x (1K + 2K + 4K + 8K prompts);
# see docs/eval/REPORT.md for measured per-sample times and the estimate.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SAMPLES="${1:-100}"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
OUT="${OUT:-$ROOT/docs/eval}"
SEED="${SEED:-0}"
THREADS="${THREADS:-0}"
LENGTHS="${LENGTHS:-1k,2k,4k,8k}"
STRATEGIES="${STRATEGIES:-dense,kascade,kascade-p5,oracle-topk,streaming,quest,omnikv,lessismore,kascade-all-heads-pooled,kascade-no-remap}"
MODEL_ARGS=()
if [[ -n "${MODEL:-}" ]]; then MODEL_ARGS=(--model "$MODEL"); fi

if [[ ! -x "$BUILD_DIR/kascade" ]]; then
  cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target kascade
fi

started=$(date +%s)
"$BUILD_DIR/kascade" eval "${MODEL_ARGS[@]}" --strategies "$STRATEGIES" --budget 10 --lengths "$LENGTHS" \
  --samples "$SAMPLES" --seed "$SEED" --threads "$THREADS" --out "$OUT" | tee "$OUT/eval_output.txt"
elapsed=$(( $(date +%s) - started ))

{
  echo "# Long-context evaluation of the attention strategies"
  echo
  echo "Regenerate with \`THREADS=$THREADS LENGTHS=$LENGTHS scripts/eval_report.sh $SAMPLES\` (this file, the plots, results.csv,"
  echo "summary.csv, results.json and eval_output.txt in docs/eval/). Run on $(nproc) cores of"
  echo "\`$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')\` in ${elapsed} s, $(date -u +%Y-%m-%d)."
  echo
  echo "Command: \`kascade eval --strategies $STRATEGIES --budget 10 --lengths $LENGTHS --samples $SAMPLES --seed $SEED\`"
  echo
  echo "Scores are RULER's: the share of expected values found in the greedy reply (case-insensitive"
  echo "string inclusion), in percent; a run that fails or passes the time limit scores 0 and stays in"
  echo "every average. Intervals are 95%: Wilson score intervals on mean scores (conservative for the"
  echo "fractional scores of multi-answer tasks), and normal intervals on the per-sample paired"
  echo "differences to dense (every strategy answers the same prompts). Perplexity is over the last 128"
  echo "tokens of each document (prefill of the rest through the strategy, then one decode step per"
  echo "token). Tasks and syntax: docs/eval/README.md."
  echo
  if [[ -f "$OUT/NOTES.md" ]]; then cat "$OUT/NOTES.md"; echo; fi
  echo "## Results"
  echo
  cat "$OUT/report.md"
} > "$OUT/REPORT.md"
echo "wrote $OUT/REPORT.md"
