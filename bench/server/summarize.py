#!/usr/bin/env python3
"""Medians of bench/server/compare.sh's repeats as markdown.

    python3 bench/server/summarize.py OUT/results-1.jsonl OUT/results-2.jsonl ...

One file per repeat (loadgen.py --json lines). The table holds the median of
each metric over the repeats; the ratios below it are taken within each
repeat (the runs of one repeat are minutes apart, so they saw about the same
load from the rest of the machine) and then their median is shown.
"""

import json
import statistics
import sys
from collections import defaultdict

METRICS = [
    ("steady_decode_tok_s", "steady decode tok/s", "{:.1f}"),
    ("decode_tok_s", "decode tok/s (first token to last)", "{:.1f}"),
    ("output_tok_s", "output tok/s (wall)", "{:.1f}"),
    ("ttft_p50_s", "TTFT p50 s", "{:.2f}"),
    ("ttft_p99_s", "TTFT p99 s", "{:.2f}"),
    ("itl_p50_ms", "ITL p50 ms", "{:.0f}"),
    ("itl_p99_ms", "ITL p99 ms", "{:.0f}"),
]


def median(values):
    values = [v for v in values if v == v]  # drop NaN
    return statistics.median(values) if values else float("nan")


def main():
    runs = []  # per repeat: {(label, concurrency): row}
    for path in sys.argv[1:]:
        rows = {}
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                rows[(r["label"], r["concurrency"])] = r
        runs.append(rows)
    keys = []
    for rows in runs:
        for key in rows:
            if key not in keys:
                keys.append(key)
    labels = list(dict.fromkeys(label for label, _ in keys))
    levels = sorted({c for _, c in keys})

    prompt = median([r["prompt_tokens"] for rows in runs for r in rows.values() if r.get("prompt_tokens")])
    max_tokens = median([r["max_tokens"] for rows in runs for r in rows.values()])
    print(f"Medians of {len(runs)} repeats; prompts of {prompt:.0f} tokens (median), {max_tokens:.0f} new tokens, "
          "greedy, streaming.\n")
    print("| server | concurrency | " + " | ".join(name for _, name, _ in METRICS) + " | errors |")
    print("|---|---" + "|---" * len(METRICS) + "|---|")
    for label in labels:
        for c in levels:
            rows = [run[(label, c)] for run in runs if (label, c) in run]
            if not rows:
                continue
            cells = [fmt.format(median([r[key] for r in rows])) for key, _, fmt in METRICS]
            errors = sum(r["errors"] for r in rows)
            print(f"| {label} | {c} | " + " | ".join(cells) + f" | {errors} |")

    def ratio(a, b, key):
        values = [run[a][key] / run[b][key] for run in runs if a in run and b in run and run[b][key] > 0]
        return median(values), len(values)

    print("\nRatios (within each repeat, then the median):\n")
    top, bottom = max(levels), min(levels)
    for label in labels:
        for key in ("steady_decode_tok_s", "decode_tok_s"):
            value, n = ratio((label, top), (label, bottom), key)
            print(f"- {label}: {key} at concurrency {top} / at {bottom}: {value:.2f}x ({n} repeats)")
    others = [label for label in labels if not label.startswith("kascade serve")]
    for other in others:
        for label in labels:
            if label == other:
                continue
            for c in levels:
                cells = []
                for key in ("steady_decode_tok_s", "decode_tok_s", "output_tok_s"):
                    value, n = ratio((label, c), (other, c), key)
                    cells.append(f"{key} {value:.2f}x")
                print(f"- {label} / {other}, concurrency {c}: " + ", ".join(cells))


if __name__ == "__main__":
    main()
