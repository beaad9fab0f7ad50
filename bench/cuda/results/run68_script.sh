#!/usr/bin/env bash
# Run 68: the radix select with 16 values in flight per thread (float4 loads)
# and out of line (build-pb) against HEAD b9608b9 (build-pa): correctness,
# prefill A/B at 32K/64K/128K fp16, decode A/B at batch 64, 64K.
# The steps ran inline here; they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=150 exec bench/cuda/ab_prefill.sh run68 decode
