#!/usr/bin/env python3
"""Regenerates tests/data/logits_gemma3/: references for the gemma3 architecture
from independent implementations (Hugging Face transformers and jinja2), for
tests/model_gemma3_test.cc.

With the real model (Gemma 3 270M, Q4_K_M; scripts/fetch_model.sh gemma3-270m):
  PROMPT.json, PROMPT.f32  Two prompts of 720 tokens (BOS + real text found on any
      Debian machine), past the model's 512-key sliding window. transformers
      loads the same GGUF (dequantizing it) and runs its own Gemma 3 code in
      float64 with the eager attention and its sliding-window mask. Stored: the
      token ids, the greedy continuation of 16 tokens (through transformers'
      KV cache, so decode crosses the window too), and per position the logits
      of 56 fixed probe ids plus that position's top-8 ids.
  tokenizer.jsonl  A "meta" line, then one line per string: its text and the ids
      of transformers' tokenizer built from the GGUF's vocabulary (specials
      parsed, no BOS). The strings are gen_tokenizer_golden.py's, a sample of
      them, plus Gemma-specific ones (turn markup, whitespace runs, spaces at
      the start, which Gemma keeps: add_space_prefix is false).

Without it (always):
  chat_template.json  The Gemma 3 chat template (as published with the
      instruction-tuned models; the GGUF here has none) rendered by jinja2 as
      transformers' apply_chat_template does, for several conversations; the
      ones the template rejects are marked "error".
  tiny_gemma3.gguf, tiny_gemma3.json, tiny_gemma3.f32  A tiny random-weight
      gemma3 model (12 layers, so layers 5 and 11 are global; 4 query heads
      on 2 KV heads; a sliding window of 5 keys; linear RoPE scaling on the
      global layers; a local RoPE base from rope.freq_base_swa; a final logit
      soft cap) and the float64 logits of transformers' Gemma3ForCausalLM
      built from the same numbers at every position of 150 tokens.

Usage: python3 tools/gen_gemma_golden.py [--model PATH] [--tiny-only]
Needs: pip install torch transformers gguf accelerate jinja2 numpy
"""
import argparse
import json
import os
import pathlib
import random
import sys

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "logits_gemma3"
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SOURCES = [
    ("gpl3", "/usr/share/common-licenses/GPL-3"),
    ("python_code", os.path.join(os.path.dirname(json.__file__), "decoder.py")),
]
PROMPT_TOKENS = 720  # BOS included; the window is 512
CONTINUATION = 16
PROBES = 56
TOP = 8
TOKENIZER_SAMPLE = 260

# The Gemma 3 instruction-tuned chat template (tokenizer_config.json of the
# -it models; the GGUF here, of the base model, carries none).
GEMMA3_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}
"""

GEMMA_STRINGS = [
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<start_of_turn>", "<end_of_turn>",
    "<bos>text", "a<eos>b", "<start_of_turn>model\nSure!<end_of_turn>", "<start_of_turn", "<end_of_turn>>",
    " leading space", "  two leading spaces", "\tleading tab", "\nleading newline", "trailing space ",
    "x" + " " * 31 + "y", " " * 31, "\t" * 9, "\n" * 31, "a\u2581b", "\u2581", "\u2581\u2581x",
    "def f(x):\n    return x  # four spaces\n", "<0x41>", "[multimodal]", "<unused0>", "<mask>",
]


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


# ----------------------------------------------------------------------------
# The real model: logits and tokenizer.


def real_model_fixtures(model_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    directory, name = os.path.split(model_path)
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    tokenizer_fixture(tokenizer)

    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32,
                                                 attn_implementation="eager")
    model = model.double().eval()
    config = model.config
    print(f"transformers config: sliding_window {config.sliding_window}, layer types "
          f"{''.join('L' if t == 'sliding_attention' else 'G' for t in config.layer_types)}, "
          f"query_pre_attn_scalar {config.query_pre_attn_scalar}, rope {config.rope_parameters}, "
          f"final_logit_softcapping {config.final_logit_softcapping}")
    assert PROMPT_TOKENS > config.sliding_window + 100
    rng = np.random.default_rng(1234)
    probes = sorted(rng.choice(config.vocab_size, PROBES, replace=False).tolist())
    index = []
    for label, path in SOURCES:
        text = pathlib.Path(path).read_text(encoding="utf-8")
        ids = [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False).input_ids[:PROMPT_TOKENS - 1]
        assert len(ids) == PROMPT_TOKENS, (label, len(ids))
        with torch.no_grad():
            out = model(torch.tensor([ids]), use_cache=True)
            logits = out.logits[0].numpy()
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
        write_json(OUT / f"{label}.json", {"tokens": ids, "greedy": greedy, "probes": probes,
                                           "top_ids": top.tolist(), "columns": PROBES + TOP})
        index.append(label)
        print(f"{label}: {len(ids)} tokens, greedy {tokenizer.decode(greedy)!r}")
    write_json(OUT / "index.json", {"prompts": index, "model_sha256": MODEL_SHA256,
                                    "sliding_window": config.sliding_window})


def tokenizer_fixture(tokenizer):
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_tokenizer_golden
    strings = gen_tokenizer_golden.make_strings(random.Random(gen_tokenizer_golden.SEED))
    sample = random.Random(7).sample(strings, TOKENIZER_SAMPLE)
    strings = GEMMA_STRINGS + [s for s in sample if s not in GEMMA_STRINGS]
    with open(OUT / "tokenizer.jsonl", "w", encoding="utf-8") as f:
        f.write(json.dumps({"meta": {"strings": len(strings), "reference": "transformers AutoTokenizer, gguf_file",
                                     "add_special_tokens": False}}) + "\n")
        for s in strings:
            ids = tokenizer(s, add_special_tokens=False).input_ids
            f.write(json.dumps({"text": s, "ids": ids}, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"tokenizer: {len(strings)} strings")


# ----------------------------------------------------------------------------
# Chat template.


def chat_template_fixture():
    from jinja2.exceptions import TemplateError
    from transformers.utils.chat_template_utils import _compile_jinja_template
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_tokenizer_golden
    compiled = _compile_jinja_template(GEMMA3_TEMPLATE)
    conversations = gen_tokenizer_golden.CONVERSATIONS + [
        [{"role": "assistant", "content": "model first"}],
        [{"role": "system", "content": "sys"}, {"role": "assistant", "content": "model first"}],
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
        [{"role": "system", "content": "only a system prompt"}],
    ]
    cases = []
    for messages in conversations:
        for add_generation_prompt in (False, True):
            case = {"messages": messages, "add_generation_prompt": add_generation_prompt}
            try:
                # BOS is left to the tokenizer (add_bos_token), so the template renders it empty.
                case["expected"] = compiled.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                   bos_token="")
            except TemplateError as error:
                case["error"] = str(error)
            cases.append(case)
    write_json(OUT / "chat_template.json", {"template": GEMMA3_TEMPLATE, "cases": cases})
    print(f"chat template: {len(cases)} cases, {sum('error' in c for c in cases)} rejected")


# ----------------------------------------------------------------------------
# Tiny random gemma3 model.

TINY = dict(vocab=96, d_model=32, n_layers=12, n_heads=4, n_kv_heads=2, head_dim=16, ffn=32, window=5,
            rope_base=1e6, rope_base_swa=20000.0, rope_linear_factor=2.0, softcap=20.0, eps=1e-6, tokens=150,
            context=4096)


def tiny_model_fixture():
    import gguf
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig
    t = TINY
    rng = np.random.default_rng(20250611)
    D, H, G, hd, F, V = t["d_model"], t["n_heads"], t["n_kv_heads"], t["head_dim"], t["ffn"], t["vocab"]

    def matrix(rows, cols, scale):
        # fp16 in the file; the reference uses the same rounded values.
        return (rng.standard_normal((rows, cols)) * scale).astype(np.float16)

    def norm_of(size):
        # The file holds 1 + w (as llama.cpp's converter writes Gemma norms).
        return (1.0 + 0.3 * rng.standard_normal(size)).astype(np.float32)

    tensors = {"token_embd.weight": matrix(V, D, 1.0), "output_norm.weight": norm_of(D)}
    for l in range(t["n_layers"]):
        p = f"blk.{l}."
        tensors[p + "attn_norm.weight"] = norm_of(D)
        tensors[p + "attn_q.weight"] = matrix(H * hd, D, D ** -0.5)
        tensors[p + "attn_k.weight"] = matrix(G * hd, D, D ** -0.5)
        tensors[p + "attn_v.weight"] = matrix(G * hd, D, D ** -0.5)
        tensors[p + "attn_q_norm.weight"] = norm_of(hd)
        tensors[p + "attn_k_norm.weight"] = norm_of(hd)
        tensors[p + "attn_output.weight"] = matrix(D, H * hd, (H * hd) ** -0.5)
        tensors[p + "post_attention_norm.weight"] = norm_of(D)
        tensors[p + "ffn_norm.weight"] = norm_of(D)
        tensors[p + "ffn_gate.weight"] = matrix(F, D, D ** -0.5)
        tensors[p + "ffn_up.weight"] = matrix(F, D, D ** -0.5)
        tensors[p + "ffn_down.weight"] = matrix(D, F, F ** -0.5)
        tensors[p + "post_ffw_norm.weight"] = norm_of(D)

    path = OUT / "tiny_gemma3.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_name("tiny random gemma3")
    writer.add_context_length(t["context"])
    writer.add_embedding_length(D)
    writer.add_block_count(t["n_layers"])
    writer.add_feed_forward_length(F)
    writer.add_head_count(H)
    writer.add_head_count_kv(G)
    writer.add_key_length(hd)
    writer.add_value_length(hd)
    writer.add_layer_norm_rms_eps(t["eps"])
    writer.add_rope_freq_base(t["rope_base"])
    writer.add_rope_freq_base_swa(t["rope_base_swa"])
    writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
    writer.add_rope_scaling_factor(t["rope_linear_factor"])
    writer.add_sliding_window(t["window"])
    writer.add_final_logit_softcapping(t["softcap"])
    for name, value in tensors.items():
        writer.add_tensor(name, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    config = Gemma3TextConfig(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=t["n_layers"], num_attention_heads=H,
        num_key_value_heads=G, head_dim=hd, max_position_embeddings=t["context"], rms_norm_eps=t["eps"],
        sliding_window=t["window"], query_pre_attn_scalar=hd, final_logit_softcapping=t["softcap"],
        rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": t["rope_linear_factor"], "rope_theta": t["rope_base"]},
            "sliding_attention": {"rope_type": "default", "rope_theta": t["rope_base_swa"]}},
        tie_word_embeddings=True, attn_implementation="eager")
    model = Gemma3ForCausalLM(config).double().eval()

    def hf_norm(name):
        return torch.tensor(tensors[name].astype(np.float64) - 1.0)

    state = {"model.embed_tokens.weight": torch.tensor(tensors["token_embd.weight"].astype(np.float64)),
             "model.norm.weight": hf_norm("output_norm.weight")}
    renames = {"attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
               "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
               "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
               "ffn_down.weight": "mlp.down_proj.weight"}
    norms = {"attn_norm.weight": "input_layernorm.weight", "post_attention_norm.weight":
             "post_attention_layernorm.weight", "ffn_norm.weight": "pre_feedforward_layernorm.weight",
             "post_ffw_norm.weight": "post_feedforward_layernorm.weight", "attn_q_norm.weight":
             "self_attn.q_norm.weight", "attn_k_norm.weight": "self_attn.k_norm.weight"}
    for l in range(t["n_layers"]):
        for ours, theirs in renames.items():
            state[f"model.layers.{l}.{theirs}"] = torch.tensor(tensors[f"blk.{l}.{ours}"].astype(np.float64))
        for ours, theirs in norms.items():
            state[f"model.layers.{l}.{theirs}"] = hf_norm(f"blk.{l}.{ours}")
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    assert torch.equal(model.lm_head.weight, state["model.embed_tokens.weight"])

    tokens = rng.integers(0, V, t["tokens"]).tolist()
    with torch.no_grad():
        logits = model(torch.tensor([tokens])).logits[0].numpy()
    logits.astype(np.float32).tofile(OUT / "tiny_gemma3.f32")
    layer_types = "".join("L" if x == "sliding_attention" else "G" for x in config.layer_types)
    write_json(OUT / "tiny_gemma3.json", {**t, "layer_types": layer_types, "token_ids": tokens})

    # How much each feature moves the logits: a test that ignored one would fail.
    def max_change(**overrides):
        changed = Gemma3TextConfig(**{**config.to_dict(), **overrides})
        other = Gemma3ForCausalLM(changed).double().eval()
        other.load_state_dict(state, strict=False)
        other.tie_weights()
        with torch.no_grad():
            return float(np.abs(other(torch.tensor([tokens])).logits[0].numpy() - logits).max())
    scale = float(np.abs(logits).max())
    print(f"tiny gemma3: layers {layer_types}, max |logit| {scale:.3f}; max change without the window "
          f"{max_change(sliding_window=4096):.3f}, without the soft cap {max_change(final_logit_softcapping=None):.3f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default=os.path.expanduser("~/.cache/kascade/models/gemma-3-270m-q4_k_m.gguf"))
    parser.add_argument("--tiny-only", action="store_true", help="skip the real model's fixtures")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    chat_template_fixture()
    tiny_model_fixture()
    if not args.tiny_only:
        real_model_fixtures(args.model)


if __name__ == "__main__":
    main()
