#!/usr/bin/env bash
# Run 71: the LSE pass as one block of two query tiles (four consumer
# warpgroups) on one key stream (build-pb) against 87b7f6e (build-pa):
# correctness, prefill A/B at 32K/64K/128K fp16.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/r"
R=$OUT/r
chmod +x build-pa/* build-pb/*
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv -lms 50 >"$R/smi.csv" 2>&1 &
smi=$!
PREBUILT=build-pb TEST_TIMEOUT=240 OUT=$R bench/cuda/run_device.sh test >"$R/test_run.txt" 2>&1
grep -E "^FAIL|ALL PASSED|FAILED|test: exit|rror" "$R/test_run.txt" | head -20
for r in 1 2; do
  for n in 65536 131072 32768; do
    for v in pa pb; do
      KASCADE_BENCH_N=$n timeout 120 build-$v/kascade_cuda_bench "$R/ab_${v}_${n}_$r.csv" prefill >"$R/ab_${v}_${n}_$r.log" 2>&1 || echo "bench $v $n failed"
    done
  done
done
kill $smi
python3 - "$R" <<'PY'
import csv, sys, glob
out = sys.argv[1]
rows = {}
for f in sorted(glob.glob(out + "/ab_*.csv")):
    v = f.split("/")[-1].split("_")[1]
    for r in csv.DictReader(open(f)):
        rows.setdefault((int(r["N"]), r["impl"]), {}).setdefault(v, []).append(float(r["ms"]))
print("N impl  old(pa)  new(pb)  change")
for k, d in sorted(rows.items()):
    a = sorted(d.get("pa", [0])); b = sorted(d.get("pb", [0]))
    ma, mb = a[0], b[0]
    print(*k, " ".join(f"{x:.3f}" for x in a), "|", " ".join(f"{x:.3f}" for x in b), f"min {(mb/ma-1)*100:+.2f}%" if ma else "")
PY
awk -F, 'NR>1 {split($2,a," "); c[a[1]]++} END {}' "$R/smi.csv"
python3 - "$R/smi.csv" <<'PY'
import sys
vals=[]
for line in open(sys.argv[1]).read().splitlines()[1:]:
    p=[x.strip() for x in line.split(",")]
    try: vals.append((int(p[1].split()[0]), float(p[2].split()[0])))
    except: pass
busy=[v for v in vals if v[1] > 300]
if busy:
    cl=sorted(v[0] for v in busy); pw=sorted(v[1] for v in busy)
    print(f"smi busy samples {len(busy)}: SM MHz min {cl[0]} median {cl[len(cl)//2]} max {cl[-1]}; power median {pw[len(pw)//2]} max {pw[-1]}")
PY
cd "$OUT" && tar czf run71.tgz r && rm -rf r
