#!/usr/bin/env python3
"""Regenerates tests/data/logits/: reference logits of the default model from an
independent implementation (Hugging Face transformers, which dequantizes the
same GGUF file to fp32 and runs its own Llama code).

For each prompt (>= 512 tokens of real text found on any Debian machine) it
stores the token ids, the greedy continuation of 32 tokens, and per position
the logits of a fixed set of probe ids plus that position's top-8 ids.

Usage: python3 tools/gen_logits_golden.py [--model PATH]
Needs: pip install torch transformers gguf accelerate
"""
import argparse
import json
import os
import pathlib

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "logits"
SOURCES = [
    ("gpl3", "/usr/share/common-licenses/GPL-3", 0),
    ("apache2", "/usr/share/common-licenses/Apache-2.0", 0),
    ("python_code", os.path.join(os.path.dirname(json.__file__), "decoder.py"), 0),
]
PROMPT_TOKENS = 600
CONTINUATION = 32
PROBES = 56
TOP = 8


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.expanduser(
        "~/.cache/kascade/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = parser.parse_args()
    directory, name = os.path.split(args.model)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    model.eval()
    rng = np.random.default_rng(1234)
    probes = sorted(rng.choice(model.config.vocab_size, PROBES, replace=False).tolist())
    OUT.mkdir(parents=True, exist_ok=True)
    index = []
    for label, path, skip in SOURCES:
        text = pathlib.Path(path).read_text(encoding="utf-8")
        ids = tokenizer(text, add_special_tokens=False).input_ids[skip:skip + PROMPT_TOKENS]
        assert len(ids) == PROMPT_TOKENS, (label, len(ids))
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            logits = out.logits[0].double().numpy()
            past = out.past_key_values
            greedy = []
            next_id = int(np.argmax(logits[-1]))
            for _ in range(CONTINUATION):
                greedy.append(next_id)
                step = model(torch.tensor([[next_id]]), past_key_values=past, use_cache=True)
                past = step.past_key_values
                next_id = int(torch.argmax(step.logits[0, -1]))
        top = np.argsort(-logits, axis=1, kind="stable")[:, :TOP]
        checked = np.concatenate([np.tile(np.array(probes), (len(ids), 1)), top], axis=1)
        values = np.take_along_axis(logits, checked, axis=1).astype(np.float32)
        values.tofile(OUT / f"{label}.f32")
        meta = {"tokens": ids, "greedy": greedy, "probes": probes,
                "top_ids": top.tolist(), "columns": PROBES + TOP}
        (OUT / f"{label}.json").write_text(json.dumps(meta))
        index.append(label)
        print(f"{label}: {len(ids)} tokens, greedy {greedy[:8]}...")
    (OUT / "index.json").write_text(json.dumps({"prompts": index, "model_sha256":
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"}))


if __name__ == "__main__":
    main()
