#!/usr/bin/env python3
"""Regenerates the dequantization and GGUF fixtures from an independent implementation.

The `gguf` Python package (llama.cpp's gguf-py) quantizes, dequantizes and writes GGUF
files with its own numpy code; its outputs are the reference our C++ reader and
dequantizer are tested against. Needs `pip install gguf numpy`; the tests only read
the committed outputs.

Writes (all small, deterministic for a given gguf/numpy version):
  tests/data/dequant/<type>_<source>.bin  raw blocks + expected float32 values, where
      source is "quantized" (real-valued data quantized by gguf-py) or "random" (random
      block bytes with finite random fp16 scales, reaching every bit pattern)
  tests/data/dequant/type_sizes.txt       gguf-py's table: id name block_elements block_bytes
  tests/data/gguf/gguf_py_writer.gguf     a v3 file written by gguf.GGUFWriter
  fuzz/corpus_gguf/*.gguf                 seed inputs for fuzz/fuzz_gguf.cc

Fixture layout (little-endian): b"KDQ1", u32 type id, u32 value count, u32 byte count,
the raw bytes, then value-count float32 expected values.

With --model PATH it instead prints the reference values the real-model test in
tests/gguf_test.cc checks (first values of a few rows of the default model).
"""

import argparse
import struct
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

ROOT = Path(__file__).resolve().parent.parent
DEQUANT_DIR = ROOT / "tests" / "data" / "dequant"
GGUF_DIR = ROOT / "tests" / "data" / "gguf"
CORPUS_DIR = ROOT / "fuzz" / "corpus_gguf"

# Byte offsets of the fp16 scale fields inside one block, per block type.
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
# Types gguf-py can quantize (the K-quants it only dequantizes).
QUANTIZABLE = [T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
# Block counts off the SIMD widths on purpose (the kernels work in 8- and 32-value steps).
BLOCKS_32 = 9
BLOCKS_K = 3
FLOAT_VALUES = 100


def write_fixture(name: str, qtype: T, raw: np.ndarray, expected: np.ndarray) -> None:
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    expected = np.ascontiguousarray(expected, dtype=np.float32).reshape(-1)
    header = b"KDQ1" + struct.pack("<III", int(qtype), expected.size, raw.size)
    (DEQUANT_DIR / name).write_bytes(header + raw.tobytes() + expected.astype("<f4").tobytes())


def block_values(rng: np.random.Generator, n_blocks: int, block: int) -> np.ndarray:
    """Real-valued test data: blocks of different scales, plus degenerate blocks."""
    data = rng.standard_normal((n_blocks, block)).astype(np.float32)
    data *= np.float32(2.0) ** rng.integers(-8, 6, size=(n_blocks, 1)).astype(np.float32)
    data[0] = 0.0                      # all zero: scale 0
    data[1] = np.float32(0.75)         # constant block
    data[2, 5] = np.float32(300.0)     # one outlier dominates the scale
    data[3] = -np.abs(data[3])         # all negative
    return data.reshape(-1)


def random_fp16_scales(rng: np.random.Generator, count: int) -> np.ndarray:
    """Finite fp16 values from subnormal to large, both signs, some zeros."""
    magnitude = np.float32(2.0) ** rng.uniform(-26, 8, size=count).astype(np.float32)
    sign = np.where(rng.random(count) < 0.5, -1.0, 1.0).astype(np.float32)
    values = (magnitude * sign).astype(np.float16)
    values[rng.random(count) < 0.05] = 0
    return values


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    _, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for field in SCALE_FIELDS[qtype]:
        scales = random_fp16_scales(rng, n_blocks)
        blocks[:, field:field + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks


def generate_dequant_fixtures(rng: np.random.Generator) -> None:
    DEQUANT_DIR.mkdir(parents=True, exist_ok=True)

    # Float types: numpy's conversions are the reference; every bit pattern is fair game.
    f32 = rng.standard_normal(FLOAT_VALUES).astype(np.float32) * np.float32(1e3)
    f32[:4] = [0.0, -0.0, np.inf, -np.inf]
    write_fixture("f32_random.bin", T.F32, f32.view(np.uint8), f32)
    f16_bits = rng.integers(0, 1 << 16, size=FLOAT_VALUES, dtype=np.uint16)
    f16 = f16_bits.view(np.float16)
    write_fixture("f16_random.bin", T.F16, f16_bits.view(np.uint8), f16.astype(np.float32))
    f16_values = block_values(rng, 4, 25).astype(np.float16)
    write_fixture("f16_quantized.bin", T.F16, f16_values.view(np.uint8),
                  f16_values.astype(np.float32))
    bf16_bits = rng.integers(0, 1 << 16, size=FLOAT_VALUES, dtype=np.uint16)
    write_fixture("bf16_random.bin", T.BF16, bf16_bits.view(np.uint8),
                  quants.dequantize(bf16_bits.view(np.uint8), T.BF16))

    for qtype in QUANTIZABLE:
        block, _ = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = BLOCKS_32 if block == 32 else 4
        values = block_values(rng, n_blocks, max(block, 25))
        raw = quants.quantize(values.reshape(1, -1), qtype)
        write_fixture(f"{qtype.name.lower()}_quantized.bin", qtype, raw,
                      quants.dequantize(raw, qtype))

    for qtype in SCALE_FIELDS:
        block, _ = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = BLOCKS_32 if block == 32 else BLOCKS_K
        raw = random_blocks(rng, qtype, n_blocks)
        write_fixture(f"{qtype.name.lower()}_random.bin", qtype, raw,
                      quants.dequantize(raw.reshape(-1), qtype))

    with open(DEQUANT_DIR / "type_sizes.txt", "w") as out:
        out.write("# gguf-py GGML_QUANT_SIZES: id name block_elements block_bytes\n")
        for qtype, (block, size) in sorted(gguf.GGML_QUANT_SIZES.items(), key=lambda kv: int(kv[0])):
            out.write(f"{int(qtype)} {qtype.name} {block} {size}\n")


def write_python_gguf(rng: np.random.Generator) -> None:
    """A v3 file from gguf-py's writer; tests/gguf_test.cc checks every value named here."""
    GGUF_DIR.mkdir(parents=True, exist_ok=True)
    path = GGUF_DIR / "gguf_py_writer.gguf"
    writer = gguf.GGUFWriter(str(path), arch="testarch")
    writer.add_custom_alignment(64)
    writer.add_uint8("test.u8", 200)
    writer.add_int8("test.i8", -100)
    writer.add_uint16("test.u16", 60000)
    writer.add_int16("test.i16", -30000)
    writer.add_uint32("test.u32", 4000000000)
    writer.add_int32("test.i32", -2000000000)
    writer.add_float32("test.f32", 0.1)
    writer.add_uint64("test.u64", 2**63 + 5)
    writer.add_int64("test.i64", -(2**62))
    writer.add_float64("test.f64", 2.718281828459045)
    writer.add_bool("test.bool", True)
    writer.add_string("test.string", "héllo wörld ✓")
    writer.add_array("test.int_array", [1, -2, 3])
    writer.add_array("test.string_array", ["a", "bc", "ü"])
    writer.add_array("test.float_array", [0.5, -1.25])

    f32 = np.arange(6, dtype=np.float32).reshape(2, 3)  # ggml dims [3, 2]
    writer.add_tensor("f32", f32)
    f16 = np.array([1.0, -2.5, 65504.0, 6.1e-5], dtype=np.float16)
    writer.add_tensor("f16", f16)
    values = block_values(rng, 4, 32).reshape(2, 64)
    q8 = quants.quantize(values, T.Q8_0)
    writer.add_tensor("q8_0", q8, raw_dtype=T.Q8_0)
    writer.add_tensor("q8_0.expected", quants.dequantize(q8, T.Q8_0))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_corpus(rng: np.random.Generator) -> None:
    """Small valid seeds that reach every parser path; the fuzzer mutates from these."""
    CORPUS_DIR.mkdir(parents=True, exist_ok=True)
    python_file = (GGUF_DIR / "gguf_py_writer.gguf").read_bytes()
    (CORPUS_DIR / "writer_v3.gguf").write_bytes(python_file)
    # v2 and v3 share one layout; only the version field differs.
    (CORPUS_DIR / "writer_v2.gguf").write_bytes(python_file[:4] + struct.pack("<I", 2) + python_file[8:])

    path = CORPUS_DIR / "kquants.gguf"
    writer = gguf.GGUFWriter(str(path), arch="seed")
    writer.add_array("seed.nested", [[1, 2], [3]])
    writer.add_array("seed.bools", [True, False])
    for qtype in [T.Q4_K, T.Q5_K, T.Q6_K, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.BF16]:
        block, _ = gguf.GGML_QUANT_SIZES[qtype]
        if qtype in SCALE_FIELDS:
            raw = random_blocks(rng, qtype, 1)
        else:
            raw = rng.integers(0, 256, size=(1, 2 * block), dtype=np.uint8)
        writer.add_tensor(qtype.name.lower(), raw, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()

    path = CORPUS_DIR / "metadata_only.gguf"
    writer = gguf.GGUFWriter(str(path), arch="seed")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "a", "\u0120b", "\xff"])
    writer.add_float64("seed.f64", -0.0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def print_model_goldens(model: str) -> None:
    reader = gguf.GGUFReader(model)
    tensors = {t.name: t for t in reader.tensors}
    for name, row in [("token_embd.weight", 0), ("token_embd.weight", 49151),
                      ("blk.0.attn_q.weight", 1), ("output_norm.weight", 0)]:
        tensor = tensors[name]
        values = quants.dequantize(tensor.data, tensor.tensor_type).reshape(-1, int(tensor.shape[0]))
        print(name, row, tensor.tensor_type.name, [float(v) for v in values[row, :6]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="print reference values of this model file instead")
    args = parser.parse_args()
    if args.model:
        print_model_goldens(args.model)
        return
    rng = np.random.default_rng(20250601)
    generate_dequant_fixtures(rng)
    write_python_gguf(rng)
    write_corpus(rng)


if __name__ == "__main__":
    main()
