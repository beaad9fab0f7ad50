#!/usr/bin/env python3
"""The A/B table of bench/cuda/run_device.sh ab: per shape and implementation,
every round's time of the base and the new kascade_cuda_bench, their medians and
new / base.

usage: ab_table.py DIR   (DIR holds ab_base_*.csv and ab_new_*.csv)
"""
import csv
import statistics
import sys
from collections import defaultdict
from pathlib import Path

KEY = ("section", "dtype", "H", "G", "d", "batch", "N", "impl")


def read(directory, side):
    times = defaultdict(list)
    files = sorted(Path(directory).glob(f"ab_{side}_*.csv"))
    for path in files:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                times[tuple(row[k] for k in KEY)].append(float(row["ms"]))
    return times, len(files)


def rounds(values):
    return " / ".join(f"{v:.4f}" for v in values)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    base, base_files = read(sys.argv[1], "base")
    new, new_files = read(sys.argv[1], "new")
    if not base_files or not new_files:
        sys.exit(f"ab_table: no ab_base_*.csv or ab_new_*.csv in {sys.argv[1]}")
    shapes = [k for k in base if k in new]
    if not shapes:
        sys.exit("ab_table: the base and new runs share no shape")
    print("| section | dtype | heads / KV | d | batch | keys | impl | base ms | new ms | new / base |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in shapes:
        section, dtype, h, g, d, batch, n, impl = k
        b, c = statistics.median(base[k]), statistics.median(new[k])
        print(f"| {section} | {dtype} | {h} / {g} | {d} | {batch} | {n} | {impl} | {rounds(base[k])} | "
              f"{rounds(new[k])} | {c / b:.3f} |")


if __name__ == "__main__":
    main()
