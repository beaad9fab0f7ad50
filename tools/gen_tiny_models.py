#!/usr/bin/env python3
"""Regenerates tests/data/tiny_models/: tiny random-weight GGUF models, one per
architecture variant the forward pass supports, and the logits that Hugging Face
transformers computes from each file, so tests/model_architectures_test.cc can
check qwen2, qwen3 and llama variants that no small public GGUF file covers.

Each model has seeded random weights, a byte-level BPE tokenizer trained here on
a license text (so transformers' GGUF loader accepts the file; the vocabulary is
the embedding's row count) and one fixed token sequence. Per model NAME:
  NAME.gguf         the model
  NAME.json         the hyperparameters the engine should read, the tokens
  NAME.logits.f32   float32 logits [n_tokens][vocab], row-major

The reference runs in float64 (transformers' own modeling code on the weights
its GGUF loader dequantizes), so it is exact up to rounding far below fp32's.
Where that loader ignores something the file states, the script passes it to
transformers explicitly and asserts that the loaded model matches the file:
  - qwen3 head size (qwen3.attention.key_length; transformers' default is 128),
  - llama rope scaling: rope_freqs.weight (llama3 style) and linear scaling.
Every loaded parameter is compared with the weights written, which also checks
that the llama Q/K rows were permuted the way llama.cpp stores them.

Usage: python3 tools/gen_tiny_models.py
Needs: pip install torch transformers gguf tokenizers accelerate numpy
"""
import dataclasses
import json
import math
import pathlib

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QType
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "tiny_models"
VOCAB = 384
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TRAINING_TEXT = "/usr/share/common-licenses/GPL-3"
PROMPT_TEXT = "/usr/share/common-licenses/Apache-2.0"
PROMPT_START = "\"License\" shall mean"
N_TOKENS = 64
CONTEXT = 256
MAX_FILE_BYTES = 300 * 1024


@dataclasses.dataclass
class Spec:
    name: str
    arch: str
    seed: int
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    tied: bool  # no output.weight: the logits reuse token_embd
    embedding_type: QType = QType.F16
    attention_type: QType = QType.F16  # Q, K, V, output projections
    ffn_type: QType = QType.F16
    rope_base: float = 10000.0
    qkv_bias: bool = False
    qk_norm: bool = False
    llama3_scaling: dict | None = None  # transformers' llama3 rope parameters
    linear_scaling: float | None = None


SPECS = [
    Spec("qwen2_bias", "qwen2", seed=11, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16,
         ffn_dim=128, tied=True, qkv_bias=True),
    # head size 32 while d_model / n_heads is 16: Q is wider than the residual stream.
    Spec("qwen3_qk_norm", "qwen3", seed=12, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=32,
         ffn_dim=128, tied=True, qk_norm=True, rope_base=1000.0),
    # Wavelengths of the 8 frequencies span 6..6e4 positions around the 16..64
    # band, so the factors are 1, smoothed, and `factor`.
    Spec("llama3_rope_freqs", "llama", seed=13, n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16,
         ffn_dim=128, tied=False,
         llama3_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64}),
    # 8 query heads share 2 KV heads (group 4); quantized like real files.
    Spec("llama_gqa4_quant", "llama", seed=14, n_layers=3, d_model=64, n_heads=8, n_kv_heads=2, head_dim=16,
         ffn_dim=128, tied=True, embedding_type=QType.Q8_0, attention_type=QType.Q8_0, ffn_type=QType.Q4_0,
         linear_scaling=2.0),
]


def train_tokenizer():
    """A byte-level BPE of VOCAB ids: specials, the 256 byte symbols, merges."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([pathlib.Path(TRAINING_TEXT).read_text(encoding="utf-8")], trainer)
    vocab = tokenizer.get_vocab()
    assert len(vocab) == VOCAB and sorted(vocab.values()) == list(range(VOCAB)), len(vocab)
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in merges]
    return tokenizer, tokens, merges


def llama3_inverse_frequencies(base_inverse, params):
    """transformers' llama3 rule (modeling_rope_utils), restated in numpy."""
    original = params["original_max_position_embeddings"]
    low_wavelength = original / params["low_freq_factor"]
    high_wavelength = original / params["high_freq_factor"]
    wavelength = 2 * math.pi / base_inverse
    scaled = np.where(wavelength > low_wavelength, base_inverse / params["factor"], base_inverse)
    smooth = (original / wavelength - params["low_freq_factor"]) / (
        params["high_freq_factor"] - params["low_freq_factor"])
    smoothed = (1 - smooth) * scaled / params["factor"] + smooth * scaled
    medium = (wavelength >= high_wavelength) & (wavelength <= low_wavelength)
    return np.where(medium, smoothed, scaled)


def llama_rope_permute(weight, n_heads):
    """llama.cpp's row order for Q/K: within each head, rows (i, i + d/2) of
    transformers' half-split RoPE become adjacent rows (2i, 2i + 1)."""
    rows, cols = weight.shape
    return weight.reshape(n_heads, 2, rows // n_heads // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def encode(array, qtype):
    """(payload for the file, the float32 values that payload decodes to)."""
    array = np.ascontiguousarray(array, dtype=np.float32)
    if qtype == QType.F32:
        return array, array
    if qtype == QType.F16:
        half = array.astype(np.float16)
        return half, half.astype(np.float32)
    packed = gguf.quants.quantize(array, qtype)
    return packed, gguf.quants.dequantize(packed, qtype).reshape(array.shape).astype(np.float32)


class ModelWriter:
    """Collects tensors in both conventions: the GGUF payload and the values
    transformers should end up with under its own parameter name."""

    def __init__(self, spec, rng):
        self.spec, self.rng = spec, rng
        self.tensors = []  # (gguf name, payload, qtype)
        self.expected = {}  # transformers name -> float32 values

    def matrix(self, gguf_name, hf_name, rows, cols, scale, qtype, permute_heads=None):
        weight = self.rng.normal(0.0, scale / math.sqrt(cols), (rows, cols))
        _, decoded = encode(weight, qtype)
        stored = llama_rope_permute(weight, permute_heads) if permute_heads else weight
        # Row permutations commute with the per-row block encodings.
        payload, _ = encode(stored, qtype)
        self.tensors.append((gguf_name, payload, qtype))
        self.expected[hf_name] = decoded

    def vector(self, gguf_name, hf_name, values):
        values = np.asarray(values, dtype=np.float32)
        self.tensors.append((gguf_name, values, QType.F32))
        if hf_name:
            self.expected[hf_name] = values

    def norm(self, gguf_name, hf_name, size):
        self.vector(gguf_name, hf_name, 1.0 + 0.2 * self.rng.normal(size=size))


def base_inverse_frequencies(spec):
    return spec.rope_base ** (-np.arange(0, spec.head_dim, 2, dtype=np.float64) / spec.head_dim)


def build_model(spec, tokens, merges):
    s = spec
    rng = np.random.default_rng(s.seed)
    m = ModelWriter(s, rng)
    q_dim, kv_dim = s.n_heads * s.head_dim, s.n_kv_heads * s.head_dim
    llama = s.arch == "llama"
    m.matrix("token_embd.weight", "model.embed_tokens.weight", VOCAB, s.d_model, 0.5 * math.sqrt(s.d_model),
             s.embedding_type)
    for layer in range(s.n_layers):
        g, h = f"blk.{layer}.", f"model.layers.{layer}."
        m.norm(g + "attn_norm.weight", h + "input_layernorm.weight", s.d_model)
        # Sharp attention (large Q/K) so that position handling shows in the logits.
        m.matrix(g + "attn_q.weight", h + "self_attn.q_proj.weight", q_dim, s.d_model, 2.0, s.attention_type,
                 permute_heads=s.n_heads if llama else None)
        m.matrix(g + "attn_k.weight", h + "self_attn.k_proj.weight", kv_dim, s.d_model, 2.0, s.attention_type,
                 permute_heads=s.n_kv_heads if llama else None)
        m.matrix(g + "attn_v.weight", h + "self_attn.v_proj.weight", kv_dim, s.d_model, 1.0, s.attention_type)
        if s.qkv_bias:
            for part, size in (("q", q_dim), ("k", kv_dim), ("v", kv_dim)):
                m.vector(g + f"attn_{part}.bias", h + f"self_attn.{part}_proj.bias", 0.5 * rng.normal(size=size))
        if s.qk_norm:
            m.norm(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", s.head_dim)
            m.norm(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", s.head_dim)
        m.matrix(g + "attn_output.weight", h + "self_attn.o_proj.weight", s.d_model, q_dim, 1.0, s.attention_type)
        m.norm(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", s.d_model)
        m.matrix(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", s.ffn_dim, s.d_model, 1.0, s.ffn_type)
        m.matrix(g + "ffn_up.weight", h + "mlp.up_proj.weight", s.ffn_dim, s.d_model, 1.0, s.ffn_type)
        m.matrix(g + "ffn_down.weight", h + "mlp.down_proj.weight", s.d_model, s.ffn_dim, 1.0, s.ffn_type)
    m.norm("output_norm.weight", "model.norm.weight", s.d_model)
    if s.tied:
        m.expected["lm_head.weight"] = m.expected["model.embed_tokens.weight"]
    else:
        m.matrix("output.weight", "lm_head.weight", VOCAB, s.d_model, 2.0, s.embedding_type)
    if s.llama3_scaling:
        base = base_inverse_frequencies(s)
        # llama.cpp's convention: the engine divides each base frequency by its factor.
        m.vector("rope_freqs.weight", None, base / llama3_inverse_frequencies(base, s.llama3_scaling))

    path = OUT / f"{s.name}.gguf"
    writer = gguf.GGUFWriter(str(path), s.arch)
    writer.add_name(s.name)
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(s.d_model)
    writer.add_block_count(s.n_layers)
    writer.add_feed_forward_length(s.ffn_dim)
    writer.add_head_count(s.n_heads)
    writer.add_head_count_kv(s.n_kv_heads)
    if s.head_dim != s.d_model // s.n_heads:  # otherwise the engine must derive it
        writer.add_key_length(s.head_dim)
        writer.add_value_length(s.head_dim)
    writer.add_rope_dimension_count(s.head_dim)
    writer.add_rope_freq_base(s.rope_base)
    if s.linear_scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(s.linear_scaling)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL if t in SPECIAL_TOKENS else gguf.TokenType.NORMAL
                            for t in tokens])
    writer.add_token_merges(merges)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    for name, payload, qtype in m.tensors:
        writer.add_tensor(name, payload, raw_dtype=None if qtype in (QType.F32, QType.F16) else qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = path.stat().st_size
    assert size < MAX_FILE_BYTES, (path, size)
    return path, m.expected


def transformers_overrides(spec):
    """What transformers' GGUF loader does not read from these files."""
    overrides = {}
    if spec.arch == "qwen3":
        overrides["head_dim"] = spec.head_dim
    if spec.llama3_scaling:
        overrides["rope_parameters"] = {"rope_type": "llama3", "rope_theta": spec.rope_base, **spec.llama3_scaling}
    if spec.linear_scaling:
        overrides["rope_parameters"] = {"rope_type": "linear", "rope_theta": spec.rope_base,
                                        "factor": spec.linear_scaling}
    return overrides


def load_reference_unchecked(path, overrides):
    """The file in transformers, unchecked (the ablations use it as is)."""
    model = AutoModelForCausalLM.from_pretrained(str(OUT), gguf_file=path.name, dtype=torch.float32, **overrides)
    return model.eval()


def load_reference(spec, path, expected, overrides):
    """The file in transformers, checked parameter by parameter against what was written."""
    model = load_reference_unchecked(path, overrides)
    state = model.state_dict()
    assert set(state) - {"model.rotary_emb.inv_freq", "model.rotary_emb.original_inv_freq"} == set(expected), \
        sorted(set(state) ^ set(expected))
    for name, values in expected.items():
        assert np.array_equal(state[name].numpy(), values), f"{spec.name}: {name} differs from the file"
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert head_dim == spec.head_dim and config.num_key_value_heads == spec.n_kv_heads, spec.name
    inverse = base_inverse_frequencies(spec)
    if spec.llama3_scaling:
        inverse = llama3_inverse_frequencies(inverse, spec.llama3_scaling)
    if spec.linear_scaling:
        inverse = inverse / spec.linear_scaling
    actual = model.model.rotary_emb.inv_freq.double().numpy()
    assert np.allclose(actual, inverse, rtol=1e-6), (spec.name, actual, inverse)
    return model, inverse


def logits_of(model, token_ids, dtype):
    with torch.no_grad():
        return model.to(dtype)(torch.tensor([token_ids])).logits[0].double().numpy()


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    tokenizer, tokens, merges = train_tokenizer()
    # Prose with its layout whitespace collapsed, so that the tokens vary.
    text = " ".join(pathlib.Path(PROMPT_TEXT).read_text(encoding="utf-8").split())
    prompt = text[text.index(PROMPT_START):]
    token_ids = [tokens.index("<|endoftext|>")] + tokenizer.encode(prompt).ids[:N_TOKENS - 1]
    assert len(token_ids) == N_TOKENS
    for spec in SPECS:
        path, expected = build_model(spec, tokens, merges)
        # The tokenizer section must be one transformers accepts, and the same tokenizer.
        hf_tokenizer = AutoTokenizer.from_pretrained(str(OUT), gguf_file=path.name)
        assert hf_tokenizer(prompt[:2000], add_special_tokens=False).input_ids[:N_TOKENS - 1] == token_ids[1:]
        overrides = transformers_overrides(spec)
        model, inverse_frequencies = load_reference(spec, path, expected, overrides)
        exact = logits_of(model, token_ids, torch.float64)
        fp32_noise = np.abs(logits_of(model, token_ids, torch.float32) - exact).max()
        exact.astype(np.float32).tofile(OUT / f"{spec.name}.logits.f32")
        meta = {
            "architecture": spec.arch, "n_layers": spec.n_layers, "d_model": spec.d_model,
            "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads, "head_dim": spec.head_dim,
            "ffn_dim": spec.ffn_dim, "vocab_size": VOCAB, "tokens": token_ids,
            "rope_inverse_frequencies": inverse_frequencies.tolist(),
            "transformers_overrides": overrides,
        }
        (OUT / f"{spec.name}.json").write_text(json.dumps(meta) + "\n")
        report = (f"{spec.name}: {path.stat().st_size} bytes, max |logit| {np.abs(exact).max():.3f}, "
                  f"transformers fp32 vs fp64 max |diff| {fp32_noise:.2e}")
        # How far the logits move when the variant's feature is dropped: the
        # test's tolerance must be far below these.
        if overrides.get("rope_parameters"):
            plain = {k: v for k, v in overrides.items() if k != "rope_parameters"}
            ignored = logits_of(load_reference_unchecked(path, plain), token_ids, torch.float64)
            report += f", without rope scaling max |diff| {np.abs(ignored - exact).max():.3f}"
        if spec.qkv_bias or spec.qk_norm:
            ablated = load_reference_unchecked(path, overrides)
            with torch.no_grad():
                for name, parameter in ablated.named_parameters():
                    if name.endswith("_proj.bias"):
                        parameter.zero_()
                    if name.endswith(("q_norm.weight", "k_norm.weight")):
                        parameter.fill_(1.0)
            changed = logits_of(ablated, token_ids, torch.float64)
            report += f", without biases / norm weights max |diff| {np.abs(changed - exact).max():.3f}"
        print(report)


if __name__ == "__main__":
    main()
