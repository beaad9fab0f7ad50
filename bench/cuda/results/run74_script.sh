#!/usr/bin/env bash
# Run 74: a third full run of bench/cuda/run_device.sh (test, benchmark,
# cuDNN baseline, table) on commit e045ceb, built here with the same commands
# (PREBUILT=build-pb), for three-run medians with runs 72 and 73.
set -u
OUT=${OUT:-$PWD/out}
chmod +x build-pb/*
for run in 74; do
  mkdir -p "$OUT/run$run"
  PREBUILT=build-pb BENCH_TIMEOUT=300 BASELINE_TIMEOUT=240 TEST_TIMEOUT=240 OUT=$OUT/run$run \
    bench/cuda/run_device.sh all >"$OUT/run$run/all.log" 2>&1
  echo "run $run: exit $?"
done
cd "$OUT" && tar czf run74.tgz run74 && rm -rf run74
tar xzf run74.tgz -O run74/table.log 2>/dev/null | tail -60
