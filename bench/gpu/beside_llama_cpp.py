#!/usr/bin/env python3
"""Prints engine_bench's dense decode beside llama.cpp's llama-bench on the same
GGUF files (bench/gpu/run_device.sh llama writes both into OUT):

    beside_llama_cpp.py OUT MODEL...

ours_<model>.log holds engine_bench's table, llama_<model>.csv llama-bench's
CSV (-o csv: n_depth, n_gen, avg_ts per test)."""
import csv
import os
import sys


def ours(path):
    """(context, batch) -> (decode tok/s, decode ms/step, floor ms) of the dense rows."""
    rows = {}
    for line in open(path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 9 or cells[0] != "dense" or not cells[1].isdigit():
            continue
        rows[(int(cells[1]), int(cells[2]))] = (float(cells[6]), float(cells[5]), float(cells[7]))
    return rows


def theirs(path):
    """depth -> generation tok/s (mean of llama-bench's repetitions)."""
    rows = {}
    for row in csv.DictReader(open(path)):
        if int(row.get("n_gen", 0) or 0) > 0:
            rows[int(row.get("n_depth", 0) or 0)] = float(row["avg_ts"])
    return rows


def main():
    out, models = sys.argv[1], sys.argv[2:]
    print("| model | context | ours decode tok/s (ms/step) | llama.cpp tok/s | ours / llama.cpp | floor / ours step |")
    print("|---|---|---|---|---|---|")
    for model in models:
        name = os.path.basename(model)
        try:
            our_rows = ours(os.path.join(out, f"ours_{name}.log"))
        except OSError:
            our_rows = {}
        try:
            their_rows = theirs(os.path.join(out, f"llama_{name}.csv"))
        except (OSError, KeyError, ValueError):
            their_rows = {}
        for (context, batch), (tok_s, step_ms, floor_ms) in sorted(our_rows.items()):
            their = their_rows.get(context)
            ratio = f"{tok_s / their:.2f}x" if their else "-"
            their_text = f"{their:.1f}" if their else "-"
            print(f"| {name} | {context} x {batch} | {tok_s:.1f} ({step_ms:.3f}) | {their_text} | {ratio} | "
                  f"{100 * floor_ms / step_ms:.0f} % |")


if __name__ == "__main__":
    main()
