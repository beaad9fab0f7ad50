#!/usr/bin/env bash
# Run 55: the stale-reference softmax (build-pb) against run 54 (build-pa):
# correctness, pass timelines, prefill A/B at 32K/64K/128K fp16. The steps
# ran inline here; they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=150 TIMELINES="65536 131072" exec bench/cuda/ab_prefill.sh run55
