#!/usr/bin/env python3
"""Per-kernel times from Nsight Compute: reads the CSV of
`ncu --metrics gpu__time_duration.sum --csv ...` and prints, for each kernel
and launch shape in order of first launch, the launches and their median time.
The kernels run serialized under ncu, so a chain's sum is above its time with
programmatic launches.

usage: kernel_times.py NCU.csv [TITLE]
"""
import csv
import statistics
import sys


def short_name(name):
    """decode_attention_kernel<__half, 128, 3, 0> from the demangled signature."""
    head = name.split("(")[0]
    template = head[head.index("<") :] if "<" in head else ""
    base = head.split("<")[0].split("::")[-1].split()[-1]
    return base + template


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__.strip().splitlines()[-1])
    with open(sys.argv[1], newline="") as f:
        rows = [r for r in csv.reader(f) if len(r) > 10]  # ncu's own lines come first
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"kernel_times: {sys.argv[1]} holds no ncu CSV table")
    header, rows = rows[0], rows[1:]
    name, grid, block, unit, value = (header.index(c) for c in
                                      ("Kernel Name", "Grid Size", "Block Size", "Metric Unit", "Metric Value"))
    to_us = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    times = {}
    for r in rows:
        if r[unit] not in to_us:
            sys.exit(f"kernel_times: unknown time unit {r[unit]!r} (was the metric gpu__time_duration.sum?)")
        times.setdefault((short_name(r[name]), r[grid], r[block]), []).append(
            float(r[value].replace(",", "")) * to_us[r[unit]])
    if len(sys.argv) == 3:
        print(sys.argv[2])
    print("| kernel | grid | block | launches | median us |")
    print("|---|---|---|---|---|")
    for (kernel, g, b), values in times.items():
        print(f"| {kernel} | {g} | {b} | {len(values)} | {statistics.median(values):.2f} |")


if __name__ == "__main__":
    main()
