#!/usr/bin/env bash
# Run 54 (one device call): correctness of the review commits + the pass-2
# patch, the prefill passes' clocks and timelines, clocks/power sampled
# during it, and an A/B of the pass-2 patch at batch 64.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT"
chmod +x build-pa/* build-pb/*
phase() { echo "$(date +%H:%M:%S.%N | cut -c1-12) $*" | tee -a "$OUT/phases.txt"; }
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu --format=csv -lms 50 >"$OUT/smi.csv" 2>&1 &
smi=$!
nvidia-smi --query-gpu=timestamp,clocks_throttle_reasons.active --format=csv -lms 100 >"$OUT/smi_reasons.csv" 2>&1 &
smi2=$!
phase test
PREBUILT=build-pb TEST_TIMEOUT=150 bench/cuda/run_device.sh test >"$OUT/test_run.txt" 2>&1
grep -E "^FAIL|PASSED|FAILED|test: exit" "$OUT/test_run.txt"
for n in 65536 32768 131072; do
  phase "timeline $n"
  timeout 60 build-pb/timeline $n >"$OUT/timeline_$n.txt" 2>&1; echo "timeline $n exit $?"
done
phase "timeline 65536 repeat x3"
for i in 1 2 3; do timeout 60 build-pb/timeline 65536 | grep "^==\|^dense\|^lse\|^select" >>"$OUT/timeline_65536_repeat.txt"; done
for r in 1 2; do
  for v in pa pb; do
    phase "ab $v $r"
    KASCADE_BENCH_B=64 timeout 120 build-$v/kascade_cuda_bench "$OUT/ab_${v}_$r.csv" decode >"$OUT/ab_${v}_$r.log" 2>&1
    echo "ab $v $r exit $?"
  done
done
phase end
kill $smi $smi2
cat "$OUT/timeline_65536.txt"
python3 - "$OUT" <<'PY'
import csv, sys, glob
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(out + "/ab_*.csv")):
    v = f.split("/")[-1].split("_")[1]
    for r in csv.DictReader(open(f)):
        if r["impl"] in ("anchor", "chain32", "anchor0"):
            rows.setdefault((r["dtype"], r["N"], r["impl"]), {}).setdefault(v, []).append(float(r["ms"]))
print("dtype N impl  old(pa)  new(pb)  change")
for k, d in sorted(rows.items()):
    a = sorted(d.get("pa", [0])); b = sorted(d.get("pb", [0]))
    ma, mb = a[len(a)//2], b[len(b)//2]
    print(*k, " ".join(f"{x:.4f}" for x in a), "|", " ".join(f"{x:.4f}" for x in b), f"{(mb/ma-1)*100:+.2f}%" if ma else "")
PY
