#!/usr/bin/env bash
# Run 76: stage removal. build-pc is e045ceb with the selection's radix select
# cut to the first 256 keys of each tile (the rest of the budget filled with
# the next positions; not correct, timing only); build-pb is e045ceb. fp16
# prefill at 32K and 64K, two rounds alternating. anchor - reuse stands for
# the LSE pass + the selection (both builds' sparse and reuse passes read the
# same kind of index sets within a build).
set -u
OUT=${OUT:-$PWD/out}; R=$OUT/r; mkdir -p "$R"
chmod +x build-pb/* build-pc/*
for round in 1 2; do
  for n in 65536 32768; do
    for v in pb pc; do
      KASCADE_BENCH_N=$n timeout 120 build-$v/kascade_cuda_bench "$R/ab_${v}_${n}_$round.csv" prefill \
        >"$R/ab_${v}_${n}_$round.log" 2>&1 || echo "bench $v $n failed"
    done
  done
done
python3 - "$R" <<'PY'
import csv, glob, sys, statistics
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/ab_*.csv")):
    v = f.split("/")[-1].split("_")[1]
    for r in csv.DictReader(open(f)):
        rows.setdefault((int(r["N"]), v), {}).setdefault(r["impl"], []).append(float(r["ms"]))
for n in (32768, 65536):
    for v in ("pb", "pc"):
        d = rows.get((n, v), {})
        med = {k: statistics.median(x) for k, x in d.items()}
        if "anchor" in med and "reuse" in med:
            print(n, v, " ".join(f"{k} {x:.3f}" for k, x in sorted(med.items())), f"anchor-reuse {med['anchor']-med['reuse']:.3f}")
PY
cd "$OUT" && tar czf run76.tgz r && rm -rf r
