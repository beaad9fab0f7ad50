"""cuDNN SDPA baseline for the CUDA kernel benchmark, and the final table.

Reads the CSV written by kascade_cuda_bench, times torch's cuDNN attention
backend on every shape in it with the same method (random inputs, a 256 MB
read before each repetition to evict the L2, or a write with
KASCADE_BENCH_FLUSH=write, CUDA events, median), writes cudnn.csv beside it
and prints one table.

GQA: SDPA is called with enable_gqa=True (K/V keep their G heads, as the
kernels read them). If the cuDNN backend rejects that, decode folds the g
query heads of a group into the query length (exact for decode, where every
key is visible) and prefill expands K/V to H heads; the table says which.

The 32-layer average follows the paper's schedule: layer 0 (anchor with dense
output), 4 more anchors, 27 reuse layers: (anchor0 + 4 anchor + 27 reuse) / 32.
Where the bench also timed the 32 layers chained (one launch sequence, odd
layers on a second KV cache), cuDNN is timed the same way: 32 calls back to
back, alternating two KV caches; both are reported per layer.

Usage: python3 torch_baseline.py OURS.csv OUT_DIR
"""
import csv
import os
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FLUSH = None
READ_FLUSH = os.environ.get("KASCADE_BENCH_FLUSH") != "write"


def evict_l2(r):
    """Writes the 256 MB buffer (dirty L2 lines left behind) or reads it (clean lines)."""
    if READ_FLUSH:
        FLUSH.view(torch.int32).max()
    else:
        FLUSH.fill_(r & 0xFF)


def median_ms(run, reps):
    global FLUSH
    if FLUSH is None:
        FLUSH = torch.zeros(256 << 20, dtype=torch.uint8, device="cuda")
    run()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for r in range(reps):
        evict_l2(r)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def cudnn_decode(dtype, H, G, d, B, N, reps, chained=False):
    """Per-call ms and the GQA mode; with chained, also ms per layer of 32 calls back to back."""
    q = torch.randn(B, H, 1, d, dtype=dtype, device="cuda")
    caches = [(torch.randn(B, G, N, d, dtype=dtype, device="cuda"), torch.randn(B, G, N, d, dtype=dtype, device="cuda"))
              for _ in range(2 if chained else 1)]
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            F.scaled_dot_product_attention(q, *caches[0], enable_gqa=True)
            mode = "gqa"
            call = lambda k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        except RuntimeError:
            folded = q.view(B, G, H // G, d)  # the group's heads as query rows of its KV head
            mode = "fold"
            call = lambda k, v: F.scaled_dot_product_attention(folded, k, v)
        ms = median_ms(lambda: call(*caches[0]), reps)
        chain_ms = None
        if chained:
            def chain():
                for layer in range(32):
                    call(*caches[layer % 2])
            chain_ms = median_ms(chain, reps) / 32
    del q, caches
    torch.cuda.empty_cache()
    return ms, mode, chain_ms


def cudnn_prefill(dtype, H, G, d, B, N, reps):
    q = torch.randn(B, H, N, d, dtype=dtype, device="cuda")
    k = torch.randn(B, G, N, d, dtype=dtype, device="cuda")
    v = torch.randn(B, G, N, d, dtype=dtype, device="cuda")
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        try:
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            mode = "gqa"
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        except RuntimeError:
            k = k.repeat_interleave(H // G, dim=1)
            v = v.repeat_interleave(H // G, dim=1)
            mode = "expand"
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
        ms = median_ms(run, reps)
    del q, k, v
    torch.cuda.empty_cache()
    return ms, mode, None


def main():
    ours_path, out_dir = sys.argv[1], sys.argv[2]
    with open(ours_path) as f:
        ours = list(csv.DictReader(f))
    shapes = {}
    for row in ours:
        key = (row["section"], row["dtype"], int(row["H"]), int(row["G"]), int(row["d"]), int(row["batch"]), int(row["N"]))
        shapes.setdefault(key, {})[row["impl"]] = row
    baseline = {}
    with open(f"{out_dir}/cudnn.csv", "w") as f:
        f.write("section,dtype,H,G,d,batch,N,ms,mode\n")
        for key in shapes:
            section, dtype_name, H, G, d, B, N = key
            dtype = torch.float16 if dtype_name == "f16" else torch.bfloat16
            reps = 20 if section == "decode" else (3 if N >= 65536 else 5)
            try:
                if section == "decode":
                    ms, mode, chain_ms = cudnn_decode(dtype, H, G, d, B, N, reps, "chain32" in shapes[key])
                else:
                    ms, mode, chain_ms = cudnn_prefill(dtype, H, G, d, B, N, reps)
            except Exception as error:  # report, keep going
                print(f"cudnn {key}: {error}", file=sys.stderr, flush=True)
                ms, mode, chain_ms = float("nan"), "failed", None
            baseline[key] = (ms, mode, chain_ms)
            f.write(f"{section},{dtype_name},{H},{G},{d},{B},{N},{ms:.6f},{mode}\n")
            if chain_ms is not None:
                f.write(f"{section},{dtype_name},{H},{G},{d},{B},{N},{chain_ms:.6f},{mode} chain32\n")
            print(f"cudnn {section} {dtype_name} H={H} G={G} d={d} B={B} N={N}: {ms:.3f} ms ({mode})"
                  + (f", chained {chain_ms:.3f} ms per layer" if chain_ms is not None else ""),
                  file=sys.stderr, flush=True)

    header = (f"{'shape':<34} {'cuDNN':>8} {'dense':>8} {'anch0':>8} {'anchor':>8} {'reuse':>8} {'avg32':>8} "
              f"{'speedup':>7} {'dense/cuDNN':>11} {'rate dense|reuse':>17} {'extra MB':>9} {'chained: cuDNN':>14} {'ours':>6} {'speedup':>7}")
    print("Times in ms (medians, cold L2" + (", read flush" if READ_FLUSH else ", write flush")
          + "). rate: TB/s (decode), TFLOP/s (prefill, useful FLOPs). chained: ms per layer of the 32 layers back to back.")
    print(header)
    for key, impls in shapes.items():
        section, dtype_name, H, G, d, B, N = key
        ms = {name: float(impls[name]["ms"]) for name in ("dense", "anchor0", "anchor", "reuse") if name in impls}
        if len(ms) < 4:
            continue
        average = (ms["anchor0"] + 4 * ms["anchor"] + 27 * ms["reuse"]) / 32
        cudnn, mode, cudnn_chain = baseline[key]
        if section == "decode":
            rate = (float(impls["dense"]["bytes"]) / ms["dense"] / 1e9, float(impls["reuse"]["bytes"]) / ms["reuse"] / 1e9)
        else:
            rate = (float(impls["dense"]["flops"]) / ms["dense"] / 1e9, float(impls["reuse"]["flops"]) / ms["reuse"] / 1e9)
        extra = max(float(impls[name]["extra_mb"]) for name in ("anchor0", "anchor", "reuse"))
        shape = f"{section[:3]} {dtype_name} {H}/{G}/{d} B{B} N{N // 1024}K"
        if mode != "gqa":
            shape += f" [{mode}]"
        print(f"{shape:<34} {cudnn:8.3f} {ms['dense']:8.3f} {ms['anchor0']:8.3f} {ms['anchor']:8.3f} {ms['reuse']:8.3f} "
              f"{average:8.3f} {cudnn / average:6.2f}x {ms['dense'] / cudnn:10.2f}x {rate[0]:8.2f}|{rate[1]:<8.2f} {extra:9.0f}"
              + (f" {cudnn_chain:14.3f} {float(impls['chain32']['ms']):6.3f} {cudnn_chain / float(impls['chain32']['ms']):6.2f}x"
                 if cudnn_chain is not None and "chain32" in impls else ""))


if __name__ == "__main__":
    main()
