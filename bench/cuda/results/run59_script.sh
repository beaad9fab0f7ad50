#!/usr/bin/env bash
# Run 59: head-major orders fixed + early key loads in the selection (build-pb)
# against run 58 combo 3 (build-pa with both order switches):
# correctness, pass timelines, prefill A/B at 32K/64K/128K fp16.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/r"
R=$OUT/r
chmod +x build-pa/* build-pb/*
ab_env() { [[ $1 == pa ]] && echo "KASCADE_CAUSAL_ORDER=head_major KASCADE_SELECT_ORDER=head_major"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 50 >"$R/smi.csv" 2>&1 &
smi=$!
PREBUILT=build-pb TEST_TIMEOUT=150 OUT=$R bench/cuda/run_device.sh test >"$R/test_run.txt" 2>&1
grep -E "^FAIL|PASSED|FAILED|test: exit|worst|identical" "$R/test_run.txt" | head -20
for v in pa pb; do
  for n in 65536; do
    env $(ab_env $v) timeout 60 build-$v/timeline $n >"$R/timeline_${v}_$n.txt" 2>&1
    echo "== $v $n"; grep -E "^==|^dense|^lse|^select|^selected|mean gaps|^timeline" "$R/timeline_${v}_$n.txt"
  done
done
for r in 1 2; do
  for n in 65536 131072 32768; do
    for v in pa pb; do
      env $(ab_env $v) KASCADE_BENCH_N=$n timeout 120 build-$v/kascade_cuda_bench "$R/ab_${v}_${n}_$r.csv" prefill >"$R/ab_${v}_${n}_$r.log" 2>&1 || echo "bench $v $n failed"
    done
  done
done
kill $smi
python3 bench/cuda/ab_summary.py "$R"  # (ran inline here until the summary was shared)
cd "$OUT" && tar czf run59.tgz r && rm -rf r
