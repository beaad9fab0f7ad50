#!/usr/bin/env bash
# Run 77: the selection's thread 0 issues each key chunk as soon as its stage
# is free, waiting only for the chunk needed now (build-pb), against e045ceb
# (build-pa): correctness, prefill A/B at 32K/64K/128K fp16.
exec bench/cuda/ab_prefill.sh run77
