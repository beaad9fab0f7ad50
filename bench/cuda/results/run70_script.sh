#!/usr/bin/env bash
# Run 70: the attending passes exponentiate without a maximum per chunk, the
# warpgroup voting on a move (build-pb) against 76f1cfd (build-pa):
# correctness (with a peaked-score prefill case), prefill A/B at 32K/64K/128K
# fp16. (The first attempt, with a per-warp vote and a 150 s test limit, hung
# in the test.) The steps ran inline here; they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=240 exec bench/cuda/ab_prefill.sh run70
