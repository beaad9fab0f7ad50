#!/usr/bin/env bash
# A/B of two prebuilt trees on the H200 (runs 64 onward): build-pa (before)
# and build-pb (after), each holding kascade_cuda_test and kascade_cuda_bench
# built with run_device.sh's commands. Tests build-pb, then times fp16 prefill
# at 64K / 128K / 32K twice, alternating the builds (and, with `decode`, batch
# 64 decode at 64K once each), samples the SM clock and power, prints the
# min-of-rounds change per pass (bench/cuda/ab_summary.py) and leaves
# everything in $OUT/NAME.tgz.
#   [TIMELINES="N ..."] bench/cuda/ab_prefill.sh NAME [decode]
set -u
name=${1:?usage: ab_prefill.sh NAME [decode]}
OUT=${OUT:-$PWD/out}
R=$OUT/r
mkdir -p "$R"
chmod +x build-pa/* build-pb/*
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 50 >"$R/smi.csv" 2>&1 &
smi=$!
PREBUILT=build-pb TEST_TIMEOUT=${TEST_TIMEOUT:-240} OUT=$R bench/cuda/run_device.sh test >"$R/test_run.txt" 2>&1
grep -E "^FAIL|ALL PASSED|FAILED|test: exit|rror" "$R/test_run.txt" | head -20
# TIMELINES="N ...": each build's pass timeline at those lengths too (the
# timeline binary of results/run54_timeline.patch; runs 55 and 56).
for v in pa pb; do
  for n in ${TIMELINES:-}; do
    timeout 60 build-$v/timeline $n >"$R/timeline_${v}_$n.txt" 2>&1
    echo "== $v $n"; grep -E "^==|^dense|^lse|^select|^selected|mean gaps|^timeline" "$R/timeline_${v}_$n.txt"
  done
done
for round in 1 2; do
  for n in 65536 131072 32768; do
    for v in pa pb; do
      KASCADE_BENCH_N=$n timeout 120 build-$v/kascade_cuda_bench "$R/ab_${v}_${n}_$round.csv" prefill \
        >"$R/ab_${v}_${n}_$round.log" 2>&1 || echo "bench $v $n failed"
    done
  done
done
if [[ ${2:-} == decode ]]; then
  for v in pa pb; do
    KASCADE_BENCH_N=65536 KASCADE_BENCH_B=64 timeout 120 build-$v/kascade_cuda_bench "$R/dec_${v}.csv" decode \
      >"$R/dec_${v}.log" 2>&1 || echo "decode bench $v failed"
  done
fi
kill $smi
python3 bench/cuda/ab_summary.py "$R"
cd "$OUT" && tar czf "$name.tgz" r && rm -rf r
