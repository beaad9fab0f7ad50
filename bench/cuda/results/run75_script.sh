#!/usr/bin/env bash
# Run 75: where an anchor's time goes at 32K and 64K (fp16): per-kernel
# durations of the prefill bench under ncu (gpu__time_duration.sum; the
# machine has no nsys), commit e045ceb's binaries (build-pb). ncu serialises
# and replays kernels one at a time, so durations are of a kernel alone.
set -u
OUT=${OUT:-$PWD/out}; mkdir -p "$OUT/r"
chmod +x build-pb/*
for n in 32768 65536; do
  KASCADE_BENCH_N=$n timeout 200 ncu --csv --metrics gpu__time_duration.sum -k regex:wgmma --launch-count 48 \
    build-pb/kascade_cuda_bench "$OUT/r/b$n.csv" prefill >"$OUT/r/ncu$n.csv" 2>"$OUT/r/ncu$n.log"
  echo "ncu $n: exit $?"
done
python3 - "$OUT/r" <<'PY'
import csv, sys, re, statistics
for n in (32768, 65536):
    lines = open(f"{sys.argv[1]}/ncu{n}.csv").read().splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        print(n, "no ncu rows:", lines[:3]); continue
    times = {}
    for r in csv.DictReader(lines[start:]):
        name = re.sub(r"kascade::cuda::detail::|\(anonymous namespace\)::|hopper::|PrefillKeys::|PrefillMode::", "", r["Kernel Name"])
        value = float(r["Metric Value"].replace(",", ""))
        scale = {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(r["Metric Unit"], 1.0)
        times.setdefault(name[:100], []).append(value * scale)
    print(f"N={n}")
    for name, v in times.items():
        print(f"  {len(v):3d} x median {statistics.median(v):9.3f} ms  {name}")
PY
cd "$OUT" && tar czf run75.tgz r && rm -rf r
