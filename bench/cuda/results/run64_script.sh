#!/usr/bin/env bash
# Run 64: two tiles per key stream in the selection (build-pb) against run 60's
# code (build-pa): correctness, prefill A/B at 32K/64K/128K fp16. The steps
# ran inline here; they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=150 exec bench/cuda/ab_prefill.sh run64
