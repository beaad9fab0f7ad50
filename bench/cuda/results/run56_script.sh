#!/usr/bin/env bash
# Run 56: two-block LSE pass (build-pb) against run 55 (build-pa):
# correctness, pass timelines, prefill A/B at 32K/64K/128K fp16. The steps
# ran inline here; they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=150 TIMELINES="65536 131072" exec bench/cuda/ab_prefill.sh run56
