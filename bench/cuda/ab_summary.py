#!/usr/bin/env python3
"""Summary of an A/B device run's directory (bench/cuda/ab_prefill.sh and the
runs' scripts): batch-64 decode before/after (dec_pa.csv, dec_pb.csv), the
prefill times per variant (ab_VARIANT_N_ROUND.csv; the first variant in sort
order is the baseline, each other one shows its min-of-rounds change against
it) and the SM clock and power while busy (smi.csv)."""
import csv
import glob
import os
import sys

out = sys.argv[1]

if os.path.exists(out + "/dec_pa.csv") and os.path.exists(out + "/dec_pb.csv"):
    old = {r["impl"]: float(r["ms"]) for r in csv.DictReader(open(out + "/dec_pa.csv"))}
    for r in csv.DictReader(open(out + "/dec_pb.csv")):
        a = old.get(r["impl"])
        if a:
            print("decode B=64 64K", r["impl"], f"{a:.4f} -> {float(r['ms']):.4f} ms {(float(r['ms']) / a - 1) * 100:+.2f}%")

rows = {}
for f in sorted(glob.glob(out + "/ab_*.csv")):
    variant = os.path.basename(f).split("_")[1]
    for r in csv.DictReader(open(f)):
        rows.setdefault((int(r["N"]), r["impl"]), {}).setdefault(variant, []).append(float(r["ms"]))
variants = sorted({v for times in rows.values() for v in times})
if variants:
    base = variants[0]
    print(f"N impl  ms per round for {' | '.join(variants)}  (min-of-rounds change against {base})")
    for key, times in sorted(rows.items()):
        reference = min(times.get(base, [0]))
        cells = []
        for v in variants:
            values = sorted(times.get(v, []))
            cell = " ".join(f"{x:.3f}" for x in values)
            if v != base and values and reference:
                cell += f" ({(values[0] / reference - 1) * 100:+.2f}%)"
            cells.append(cell)
        print(*key, " | ".join(cells))

if os.path.exists(out + "/smi.csv"):
    samples = []
    for line in open(out + "/smi.csv").read().splitlines()[1:]:
        fields = [x.strip() for x in line.split(",")]
        try:
            samples.append((int(fields[1].split()[0]), float(fields[2].split()[0])))
        except (IndexError, ValueError):
            pass
    busy = [s for s in samples if s[1] > 300]
    if busy:
        clocks = sorted(s[0] for s in busy)
        power = sorted(s[1] for s in busy)
        print(f"smi busy samples {len(busy)}: SM MHz min {clocks[0]} median {clocks[len(clocks) // 2]} max {clocks[-1]}; "
              f"power median {power[len(power) // 2]} max {power[-1]}")
