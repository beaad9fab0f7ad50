#!/usr/bin/env bash
# Run 67: the radix select given the key range the selection tracked (build-pb,
# run67_prepared_topk_range.patch) against HEAD b9608b9 (build-pa): correctness,
# prefill A/B at 32K/64K/128K fp16. Also: ex2.approx f32 against f16x2
# exponentials per clock (bench/cuda/ex2_rate.cu, built into build-exp) and
# their SASS. The A/B steps ran inline here; they are bench/cuda/ab_prefill.sh.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/r"
chmod +x build-exp/ex2_rate
build-exp/ex2_rate | tee "$OUT/r/ex2_rate.txt"
cuobjdump -sass build-exp/ex2_rate.cubin | grep -E "MUFU|Function" >"$OUT/r/ex2_sass.txt"
TEST_TIMEOUT=150 exec bench/cuda/ab_prefill.sh run67
