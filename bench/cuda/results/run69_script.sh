#!/usr/bin/env bash
# Run 69: the LSE pass sums without a maximum per chunk (build-pb) against
# c15b623 (build-pa): correctness (with a peaked-score prefill case), prefill
# A/B at 32K/64K/128K fp16. The steps ran inline here; they are
# bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=150 exec bench/cuda/ab_prefill.sh run69
