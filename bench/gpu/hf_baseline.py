"""Hugging Face transformers beside engine_bench: the Llama 3.1 8B shape with
random bf16 weights, SDPA attention, timed like engine_bench (one prefill of
a random prompt per context, then decode steps of a batch at that context,
median step after the first). Prints one markdown table.

Usage: python3 hf_baseline.py [--contexts 1024,32768] [--batches 1,16]
                              [--decode-steps 12] [--out FILE.md]
A (context, batch) that does not fit (transformers' cache is not paged) is
reported as such.
"""
import argparse
import statistics
import time

import torch
import transformers


def llama_8b_config():
    return transformers.LlamaConfig(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=131072,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})


def timed(run):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = run()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", default="1024,32768")
    parser.add_argument("--batches", default="1,16")
    parser.add_argument("--decode-steps", type=int, default=12)
    parser.add_argument("--out")
    args = parser.parse_args()

    torch.manual_seed(0)
    config = llama_8b_config()
    config._attn_implementation = "sdpa"
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    rows = [f"transformers {transformers.__version__}, torch {torch.__version__}, "
            f"{torch.cuda.get_device_name()}, Llama 3.1 8B shape, random bf16 weights, SDPA",
            "",
            "| context | batch | prefill s | prefill tok/s | decode ms/step | decode tok/s |",
            "|---|---|---|---|---|---|"]
    print("\n".join(rows), flush=True)
    with torch.no_grad():  # cuBLAS and SDPA start-up, outside the timings
        model(torch.randint(0, 30000, (1, 256), device="cuda"), logits_to_keep=1)
    for context in [int(c) for c in args.contexts.split(",")]:
        for batch in [int(b) for b in args.batches.split(",")]:
            try:
                prompt = torch.randint(0, 30000, (batch, context), device="cuda")
                with torch.no_grad():
                    prefill_s, out = timed(lambda: model(prompt, use_cache=True, logits_to_keep=1))
                    cache = out.past_key_values
                    token = out.logits[:, -1].argmax(-1, keepdim=True)
                    steps = []
                    for _ in range(args.decode_steps):
                        step_s, out = timed(lambda: model(token, past_key_values=cache, use_cache=True))
                        cache = out.past_key_values
                        token = out.logits[:, -1].argmax(-1, keepdim=True)
                        steps.append(step_s)
                step = statistics.median(steps[1:])
                row = (f"| {context} | {batch} | {prefill_s:.3f} | {batch * context / prefill_s:,.0f} | "
                       f"{1e3 * step:.2f} | {batch / step:,.1f} |")
            except torch.cuda.OutOfMemoryError:
                row = f"| {context} | {batch} | does not fit | | | |"
            cache = out = None
            torch.cuda.empty_cache()
            print(row, flush=True)
            rows.append(row)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
