#!/usr/bin/env python3
"""Load generator for OpenAI-compatible servers (kascade serve, llama-server).

For each concurrency level, `concurrency` clients each send `--rounds`
streaming /v1/completions requests one after another, every prompt a
different window of a long text cut to about --prompt-tokens tokens (so no
server can reuse a cached prefix). Per level it prints: requests, tokens
generated, wall time, output tok/s (all tokens / wall), aggregate decode tok/s
(tokens after each request's first / the span from the first first-token to
the last token), per-stream decode tok/s, steady decode tok/s (tokens streamed
while every stream of the level decodes, from the last first token to the first
stream's end, over that window: batched decode alone, no prefill in it), time
to first token (p50/p99) and inter-token latency (gaps between streamed
chunks, p50/p99).

    python3 bench/server/loadgen.py --url http://127.0.0.1:8080 --concurrency 1,4,16 \
        --prompt-tokens 2048 --max-tokens 64 [--kascade kascade --budget 10] [--json out.json]

Standard library only. With --kascade the request carries
{"kascade": {"attention": ..., "budget": ...}} (kascade serve's extension; with
--sparse-phases and --reuse also those fields: the paper's method is
"--sparse-phases both --reuse");
llama-server ignores the field. Requests carry "ignore_eos": true (both
servers accept it), so every stream decodes --max-tokens tokens and no
stream leaves a level's batch early; --no-ignore-eos stops at end tokens.
"""

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


class Target:
    def __init__(self, url, model, api_key, extra, ignore_eos):
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.model, self.extra, self.ignore_eos = model, extra, ignore_eos
        self.prompt_counts = []  # prompt tokens of each streamed request, from its usage
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def post(self, body, stream):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        payload = {"prompt": body["prompt"], "max_tokens": body["max_tokens"], "temperature": 0, "stream": stream,
                   **self.extra}
        if self.model:
            payload["model"] = self.model
        if stream:
            payload["stream_options"] = {"include_usage": True}
            payload["ignore_eos"] = self.ignore_eos
        connection.request("POST", "/v1/completions", json.dumps(payload), self.headers)
        return connection, connection.getresponse()

    def wait_ready(self, timeout):
        """Polls GET /health until it answers 200 (both servers answer 503 while loading)."""
        deadline = time.time() + timeout
        while True:
            try:
                connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
                connection.request("GET", "/health", headers=self.headers)
                status = connection.getresponse().status
                connection.close()
                if status == 200:
                    return
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"no server ready at {self.host}:{self.port}")
            time.sleep(0.2)

    def prompt_tokens(self, text):
        connection, response = self.post({"prompt": text, "max_tokens": 1}, stream=False)
        data = json.loads(response.read())
        connection.close()
        if response.status != 200:
            raise RuntimeError(f"probe failed: {response.status} {data}")
        return data["usage"]["prompt_tokens"]

    def stream(self, prompt, max_tokens):
        """(start, chunk times, tokens generated) of one streamed request."""
        start = time.perf_counter()
        connection, response = self.post({"prompt": prompt, "max_tokens": max_tokens}, stream=True)
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]}")
        times, tokens, prompt_tokens = [], None, None
        while True:
            line = response.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            event = json.loads(data)
            if event.get("usage"):
                tokens = event["usage"].get("completion_tokens", tokens)
                prompt_tokens = event["usage"].get("prompt_tokens", prompt_tokens)
            for choice in event.get("choices", []):
                if choice.get("text"):
                    times.append(time.perf_counter())
        connection.close()
        self.prompt_counts.append(prompt_tokens)
        return start, times, tokens if tokens is not None else len(times)


def make_prompts(target, text, n, prompt_tokens):
    """n prompts of about prompt_tokens tokens: windows of `text` at different offsets."""
    # Characters per token from a few short probes spread over the text.
    chars = tokens = 0
    for start in range(0, len(text), max(1, len(text) // 4)):
        probe = text[start:start + 1024]
        if len(probe) == 1024:
            chars, tokens = chars + len(probe), tokens + target.prompt_tokens(probe)
    length = int(prompt_tokens * chars / tokens)
    prompts = []
    for i in range(n):
        offset = (i * 7919 * 13) % max(1, len(text) - length)
        prompts.append(f"Document {i}.\n" + text[offset:offset + length])
    return prompts


def run_level(target, prompts, concurrency, rounds, max_tokens):
    results, errors = [], []
    lock = threading.Lock()
    queue = list(prompts[:concurrency * rounds])

    def client():
        while True:
            with lock:
                if not queue:
                    return
                prompt = queue.pop()
            try:
                result = target.stream(prompt, max_tokens)
                with lock:
                    results.append(result)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start

    ttft = [times[0] - s for s, times, _ in results if times]
    gaps = [b - a for _, times, _ in results for a, b in zip(times, times[1:])]
    tokens = sum(n for _, _, n in results)
    decoded = sum(max(0, n - 1) for _, _, n in results)
    firsts = [times[0] for _, times, _ in results if times]
    lasts = [times[-1] for _, times, _ in results if times]
    span = (max(lasts) - min(firsts)) if firsts else float("nan")
    per_stream = [(n - 1) / (times[-1] - times[0]) for _, times, n in results if len(times) > 1 and times[-1] > times[0]]
    # Steady decode: from the moment every stream has its first token (all
    # prompts prefilled) to the moment the first stream still running then
    # ends, every such stream decodes and nothing else runs; the tokens streamed in that window over
    # its length are the batched decode rate at this concurrency.
    # (A stream that ended, by its end token, before the last prompt was
    # prefilled is not in that batch; steady_streams counts those that are.)
    steady, steady_streams = float("nan"), 0
    if len(firsts) == len(results) and results:
        begin = max(firsts)
        running = [times for _, times, _ in results if times[-1] > begin]
        if running:
            end = min(times[-1] for times in running)
            inside = sum(1 for times in running for t in times if begin < t <= end)
            steady, steady_streams = inside / (end - begin), len(running)
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "errors": len(errors),
        "error_samples": errors[:3],
        "tokens": tokens,
        "wall_s": wall,
        "output_tok_s": tokens / wall,
        "decode_tok_s": decoded / span if span > 0 else float("nan"),
        "per_stream_decode_tok_s": statistics.mean(per_stream) if per_stream else float("nan"),
        "steady_decode_tok_s": steady,
        "steady_streams": steady_streams,
        "ttft_p50_s": percentile(ttft, 50),
        "ttft_p99_s": percentile(ttft, 99),
        "itl_p50_ms": 1e3 * percentile(gaps, 50),
        "itl_p99_ms": 1e3 * percentile(gaps, 99),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--model", default="", help="model field (default: none, the server's)")
    parser.add_argument("--api-key", default="")
    parser.add_argument("--concurrency", default="1,4,16")
    parser.add_argument("--rounds", type=int, default=1, help="requests per client per level")
    parser.add_argument("--prompt-tokens", type=int, default=2048)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--text", default=str(ROOT / "data" / "haystack" / "haystack.txt"))
    parser.add_argument("--kascade", default="", help="attention for kascade serve's per-request field")
    parser.add_argument("--budget", type=float, default=10)
    parser.add_argument("--sparse-phases", choices=["both", "decode", "prefill"], default="",
                        help="kascade.sparse_phases of each request (default: the server's)")
    parser.add_argument("--reuse", action=argparse.BooleanOptionalAction, default=None,
                        help="kascade.reuse of each request (default: the server's)")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured requests first")
    parser.add_argument("--label", default="")
    parser.add_argument("--wait", type=float, default=300, help="seconds to wait for GET /health to answer 200")
    parser.add_argument("--json", default="", help="append the results to this file")
    parser.add_argument("--ignore-eos", action=argparse.BooleanOptionalAction, default=True,
                        help="decode --max-tokens tokens past end tokens (default: yes)")
    args = parser.parse_args()

    extra = {}
    if args.kascade:
        extra = {"kascade": {"attention": args.kascade, "budget": args.budget}}
        if args.sparse_phases:
            extra["kascade"]["sparse_phases"] = args.sparse_phases
        if args.reuse is not None:
            extra["kascade"]["reuse"] = args.reuse
    target = Target(args.url, args.model, args.api_key, extra, args.ignore_eos)
    target.wait_ready(args.wait)
    text = Path(args.text).read_text(errors="replace")
    levels = [int(c) for c in args.concurrency.split(",")]
    needed = args.warmup + sum(c * args.rounds for c in levels)
    prompts = make_prompts(target, text, needed, args.prompt_tokens)
    label = args.label or (args.kascade or "server default")
    for i in range(args.warmup):
        target.stream(prompts.pop(), 4)
    counts = [c for c in target.prompt_counts if c]
    measured = f"{min(counts)}-{max(counts)}" if counts else "?"
    print(f"# {label}: prompts of {measured} tokens (warm-up), {args.max_tokens} new tokens, greedy", flush=True)
    print("| attention | concurrency | requests | errors | tokens | wall s | output tok/s | decode tok/s | "
          "per-stream tok/s | steady decode tok/s | TTFT p50 s | TTFT p99 s | ITL p50 ms | ITL p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for c in levels:
        batch, prompts = prompts[:c * args.rounds], prompts[c * args.rounds:]
        r = run_level(target, batch, c, args.rounds, args.max_tokens)
        counts = [c for c in target.prompt_counts[-c * args.rounds:] if c]
        r.update({"label": label, "max_tokens": args.max_tokens,
                  "prompt_tokens": statistics.median(counts) if counts else None})
        rows.append(r)
        print(f"| {label} | {c} | {r['requests']} | {r['errors']} | {r['tokens']} | {r['wall_s']:.1f} | "
              f"{r['output_tok_s']:.1f} | {r['decode_tok_s']:.1f} | {r['per_stream_decode_tok_s']:.1f} | "
              f"{r['steady_decode_tok_s']:.1f} | "
              f"{r['ttft_p50_s']:.2f} | {r['ttft_p99_s']:.2f} | {r['itl_p50_ms']:.0f} | {r['itl_p99_ms']:.0f} |",
              flush=True)
        if r["errors"]:
            print(f"  errors: {r['error_samples']}", file=sys.stderr)
    if args.json:
        with open(args.json, "a") as out:
            for r in rows:
                out.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
