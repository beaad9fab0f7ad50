#!/usr/bin/env bash
# A/B of two prebuilt trees on the H200 (runs 64 onward): build-pa (before)
# and build-pb (after), each holding kascade_cuda_test and kascade_cuda_bench
# built with run_device.sh's commands. Tests build-pb, then times fp16 prefill
# at 64K / 128K / 32K twice, alternating the builds (and, with `decode`, batch
# 64 decode at 64K once each), samples the SM clock and power, prints the
# min-of-rounds change per pass and leaves everything in $OUT/NAME.tgz.
#   bench/cuda/ab_prefill.sh NAME [decode]
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
python3 - "$R" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
if os.path.exists(out + "/dec_pa.csv") and os.path.exists(out + "/dec_pb.csv"):
    old = {r["impl"]: float(r["ms"]) for r in csv.DictReader(open(out + "/dec_pa.csv"))}
    for r in csv.DictReader(open(out + "/dec_pb.csv")):
        a = old.get(r["impl"])
        if a: print("decode B=64 64K", r["impl"], f"{a:.4f} -> {float(r['ms']):.4f} ms {(float(r['ms'])/a-1)*100:+.2f}%")
rows = {}
for f in sorted(glob.glob(out + "/ab_*.csv")):
    v = f.split("/")[-1].split("_")[1]
    for r in csv.DictReader(open(f)):
        rows.setdefault((int(r["N"]), r["impl"]), {}).setdefault(v, []).append(float(r["ms"]))
print("N impl  old(pa)  new(pb)  change")
for k, d in sorted(rows.items()):
    a = sorted(d.get("pa", [0])); b = sorted(d.get("pb", [0]))
    print(*k, " ".join(f"{x:.3f}" for x in a), "|", " ".join(f"{x:.3f}" for x in b),
          f"min {(b[0]/a[0]-1)*100:+.2f}%" if a[0] else "")
vals = []
for line in open(out + "/smi.csv").read().splitlines()[1:]:
    p = [x.strip() for x in line.split(",")]
    try: vals.append((int(p[1].split()[0]), float(p[2].split()[0])))
    except (IndexError, ValueError): pass
busy = [v for v in vals if v[1] > 300]
if busy:
    cl = sorted(v[0] for v in busy); pw = sorted(v[1] for v in busy)
    print(f"smi busy samples {len(busy)}: SM MHz min {cl[0]} median {cl[len(cl)//2]} max {cl[-1]}; "
          f"power median {pw[len(pw)//2]} max {pw[-1]}")
PY
cd "$OUT" && tar czf "$name.tgz" r && rm -rf r
