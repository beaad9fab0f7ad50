#!/usr/bin/env bash
# Run 71: the LSE pass as one block of two query tiles (four consumer
# warpgroups) on one key stream (build-pb) against 87b7f6e (build-pa):
# correctness, prefill A/B at 32K/64K/128K fp16. The steps ran inline here;
# they are bench/cuda/ab_prefill.sh.
TEST_TIMEOUT=240 exec bench/cuda/ab_prefill.sh run71
