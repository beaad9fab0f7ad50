#!/usr/bin/env bash
# Run 63: ping-pong turns off in the selection / the LSE pass,
# one binary, four combinations by environment.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/r"
R=$OUT/r
chmod +x build-pb/*
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv -lms 50 >"$R/smi.csv" 2>&1 &
smi=$!
KASCADE_EXP_SELECT_TURNS=0 KASCADE_EXP_LSE_TURNS=0 PREBUILT=build-pb TEST_TIMEOUT=150 OUT=$R bench/cuda/run_device.sh test >"$R/test_run.txt" 2>&1
grep -E "^FAIL|ALL PASSED|FAILED|test: exit" "$R/test_run.txt" | head -5
combo() {
  case $1 in
    0) echo "" ;; 1) echo "KASCADE_EXP_SELECT_TURNS=0" ;; 2) echo "KASCADE_EXP_LSE_TURNS=0" ;;
    3) echo "KASCADE_EXP_SELECT_TURNS=0 KASCADE_EXP_LSE_TURNS=0" ;;
  esac
}
for r in 1 2; do
  for n in 65536 131072 32768; do
    for v in 0 1 2 3; do
      env $(combo $v) KASCADE_BENCH_N=$n timeout 120 build-pb/kascade_cuda_bench "$R/ab_${v}_${n}_$r.csv" prefill >"$R/ab_${v}_${n}_$r.log" 2>&1 || echo "bench $v $n failed"
    done
  done
done
kill $smi
python3 bench/cuda/ab_summary.py "$R"  # (ran inline here until the summary was shared)
cd "$OUT" && tar czf run63.tgz r && rm -rf r
