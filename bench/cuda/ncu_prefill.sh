#!/usr/bin/env bash
# ncu on the Hopper prefill kernels at 32K, fp16 (run 19): the anchor's LSE
# pass, the dense (attend) pass, the tile selection and the selected-keys
# pass (reuse; run 23), one launch each, with pipe utilisation, warp-stall
# reasons per issued instruction and L2 / DRAM traffic. Run on the GPU
# machine from the repository root:
#   bench/cuda/ncu_prefill.sh DIR [KERNEL...]   (DIR holds a built kascade_cuda_bench;
#                                                KERNEL: lse dense select reuse, default all)
# Reports go to $OUT/ncu_KERNEL.txt; a summary is printed.
set -u
bin=${1:?usage: ncu_prefill.sh DIR [KERNEL...]}
shift
names=${*:-lse dense select reuse}
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
metrics='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,regex:sm__inst_executed_pipe_.*\.avg\.pct_of_peak_sustained_active,regex:sm__pipe_.*_cycles_active\.avg\.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active'
# Demangled names print the head dim and the enums as casts: (int)128;
# PrefillKeys 0 = causal, 1 = selected; PrefillMode 1 = LSE only. The first
# selected-keys launch is an anchor's sparse pass.
declare -A kernels=(
  [lse]='__half, .int.128, .kascade::cuda::detail::PrefillKeys.0, .kascade::cuda::detail::PrefillMode.1'
  [dense]='__half, .int.128, .kascade::cuda::detail::PrefillKeys.0, .kascade::cuda::detail::PrefillMode.0'
  [select]='wgmma_tile_select_kernel<__half, .int.128>'
  [reuse]='__half, .int.128, .kascade::cuda::detail::PrefillKeys.1'
)
for name in $names; do
  KASCADE_BENCH_N=32768 timeout 150 "$ncu" --kernel-name-base demangled -k "regex:${kernels[$name]}" -c 1 \
    --section SpeedOfLight --section WarpStateStats --metrics "$metrics" \
    "$bin/kascade_cuda_bench" "$OUT/ncu_bench.csv" prefill >"$OUT/ncu_$name.txt" 2>&1
  echo "== $name: exit $?"
  grep -E "duration|stalled_(wait|barrier|mio|long|math|not_sel|dispatch|lg_|membar|short|sleep|drain)|pipe_(tensor|alu|fma)_cycles|pipe_xu\.|issue_active|lts__|dram__|DRAM Throughput" \
    "$OUT/ncu_$name.txt" | sed -E 's/  +/ /g'
done
rm -f "$OUT/ncu_bench.csv"
