#!/usr/bin/env bash
# Runs 72 and 73: two full runs of bench/cuda/run_device.sh (test, benchmark,
# cuDNN baseline, table) on commit e045ceb, built here with the same commands
# (PREBUILT=build-pb), back to back in one device call.
set -u
OUT=${OUT:-$PWD/out}
chmod +x build-pb/*
for run in 72 73; do
  mkdir -p "$OUT/run$run"
  PREBUILT=build-pb BENCH_TIMEOUT=300 BASELINE_TIMEOUT=240 TEST_TIMEOUT=240 OUT=$OUT/run$run \
    bench/cuda/run_device.sh all >"$OUT/run$run/all.log" 2>&1
  echo "run $run: exit $?"
done
cd "$OUT" && tar czf runs72_73.tgz run72 run73 && rm -rf run72 run73
tar xzf runs72_73.tgz -O run73/table.log 2>/dev/null | tail -60
