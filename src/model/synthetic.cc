#include "model/synthetic.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/half.h"
#include "gguf/writer.h"

namespace kascade::model {
namespace {

constexpr SyntheticPreset kPresets[] = {
    // Llama 3.1 8B: 32 layers, 4096 wide, 32 query / 8 KV heads of 128, FFN 14336, 128K context.
    {"llama-3.1-8b", 32, 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0, true},
    // Llama 3.2 1B: 16 layers, 2048 wide, 32 / 8 heads of 64, FFN 8192.
    {"llama-3.2-1b", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 500000.0, true},
    // Qwen2.5 1.5B's shape (the main command's model) as a Llama: 28 layers, 1536 wide, 12 / 2
    // heads of 128, FFN 8960, 32K context; no QKV biases, one weight type throughout.
    {"qwen2.5-1.5b", 28, 1536, 12, 2, 128, 8960, 151936, 32768, 1000000.0, false},
    // A few-megabyte model of the same kind, for tests.
    {"tiny", 2, 256, 4, 2, 64, 512, 0, 4096, 500000.0, true},
};

// The types random_matrix writes.
constexpr TensorType kWeightTypes[] = {TensorType::BF16, TensorType::F16,  TensorType::F32,
                                       TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K};

std::string lower_case_name(TensorType type) {
  std::string name(type_traits(type).name);
  for (char& c : name) c = char(std::tolower(uint8_t(c)));
  return name;
}

// A uniform value in [-1, 1) from (seed, tensor, element): splitmix64.
float uniform(uint64_t seed, uint64_t tensor, uint64_t element) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor * 0xBF58476D1CE4E5B9ull + element;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (2.0f / float(1 << 24)) - 1.0f;
}

// Fills whole rows of a [rows][cols] matrix of `type` with uniform(-a, a)
// values (quantized types: blocks whose dequantized values span [-a, a]).
gguf::Writer::Fill random_matrix(TensorType type, int64_t cols, float a, uint64_t seed, uint64_t tensor) {
  return [=](uint64_t offset, std::span<uint8_t> out) {
    const uint64_t row_size = row_bytes(type, cols);
    const int64_t first_row = int64_t(offset / row_size), n_rows = int64_t(out.size() / row_size);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n_rows; ++r) {
      uint8_t* row = out.data() + uint64_t(r) * row_size;
      const uint64_t base = uint64_t(first_row + r) * uint64_t(cols);
      const auto value = [&](int64_t c) { return uniform(seed, tensor, base + uint64_t(c)); };
      switch (type) {
        case TensorType::F32:
          for (int64_t c = 0; c < cols; ++c) {
            const float v = a * value(c);
            std::memcpy(row + 4 * c, &v, 4);
          }
          break;
        case TensorType::F16:
        case TensorType::BF16:
          for (int64_t c = 0; c < cols; ++c) {
            const uint16_t v = type == TensorType::F16 ? fp32_to_fp16(a * value(c)) : fp32_to_bf16(a * value(c));
            std::memcpy(row + 2 * c, &v, 2);
          }
          break;
        case TensorType::Q8_0: {  // blocks of 32: fp16 scale, 32 int8
          const uint16_t d = fp32_to_fp16(a / 127.0f);
          for (int64_t b = 0; b < cols / 32; ++b) {
            uint8_t* block = row + 34 * b;
            std::memcpy(block, &d, 2);
            for (int i = 0; i < 32; ++i)
              block[2 + i] = uint8_t(int8_t(std::lround(127.0f * value(32 * b + i))));
          }
          break;
        }
        case TensorType::Q4_K: {
          // Blocks of 256: fp16 d, fp16 dmin, 12 bytes of 6-bit sub-block scales
          // and mins (all 32 here), 128 bytes of 4-bit quants; a value is
          // d * 32 * q - dmin * 32 for q in 0..15, so d = a / 240, dmin = a / 32.
          const uint16_t d = fp32_to_fp16(a / 240.0f), dmin = fp32_to_fp16(a / 32.0f);
          constexpr uint8_t kScales[12] = {160, 160, 160, 160, 160, 160, 160, 160, 0, 0, 0, 0};
          for (int64_t b = 0; b < cols / 256; ++b) {
            uint8_t* block = row + 144 * b;
            std::memcpy(block, &d, 2);
            std::memcpy(block + 2, &dmin, 2);
            std::memcpy(block + 4, kScales, 12);
            for (int i = 0; i < 128; ++i) {
              const auto nibble = [&](int j) { return uint8_t(std::min(15.0f, 8.0f * (value(256 * b + j) + 1.0f))); };
              block[16 + i] = uint8_t(nibble(2 * i) | (nibble(2 * i + 1) << 4));
            }
          }
          break;
        }
        case TensorType::Q6_K: {
          // Blocks of 256: 6-bit quants (low nibbles at 0, high bit pairs at
          // 128, laid out as the CPU's q6_k_scalar reads them), 16 int8 scales
          // (all 127 here), fp16 d; a value is d * 127 * (q - 32) for q in
          // 0..63, so d = a / (32 * 127).
          const uint16_t d = fp32_to_fp16(a / (32.0f * 127.0f));
          for (int64_t b = 0; b < cols / 256; ++b) {
            uint8_t* block = row + 210 * b;
            std::memset(block, 0, 192);
            std::memset(block + 192, 127, 16);
            std::memcpy(block + 208, &d, 2);
            for (int j = 0; j < 256; ++j) {
              const int q = int(std::min(63.0f, 32.0f * (value(256 * b + j) + 1.0f)));
              const int group = j / 16, half = group / 8, quarter = (group % 8) / 2, first = 16 * (group % 2) + j % 16;
              block[64 * half + 32 * (quarter % 2) + first] |= uint8_t((q & 15) << (4 * (quarter / 2)));
              block[128 + 32 * half + first] |= uint8_t((q >> 4) << (2 * quarter));
            }
          }
          break;
        }
        default: fail("synthetic weights cannot be written as {}", type_traits(type).name);
      }
    }
  };
}

gguf::Writer::Fill constant_f32(float value) {
  return [=](uint64_t, std::span<uint8_t> out) {
    for (size_t i = 0; i + 4 <= out.size(); i += 4) std::memcpy(&out[i], &value, 4);
  };
}

// Llama 3.1's RoPE frequency divisors (factor 8, low/high frequency factors
// 1 and 4, original context 8192), as GGUF stores them in rope_freqs.weight.
std::vector<float> llama3_rope_divisors(int rope_dim, double base) {
  constexpr double kFactor = 8, kLowFreqFactor = 1, kHighFreqFactor = 4, kOriginalContext = 8192;
  std::vector<float> divisors;
  for (int i = 0; i < rope_dim / 2; ++i) {
    const double wavelength = 2 * std::numbers::pi / std::pow(base, -2.0 * i / rope_dim);
    if (wavelength < kOriginalContext / kHighFreqFactor) {
      divisors.push_back(1.0f);
    } else if (wavelength > kOriginalContext / kLowFreqFactor) {
      divisors.push_back(float(kFactor));
    } else {
      const double smooth = (kOriginalContext / wavelength - kLowFreqFactor) / (kHighFreqFactor - kLowFreqFactor);
      divisors.push_back(float(1.0 / ((1 - smooth) / kFactor + smooth)));
    }
  }
  return divisors;
}

// Copies every tokenizer.* key, padding the per-token arrays to vocab_size
// with reserved control tokens (vocab_size 0: the source's own size).
int copy_tokenizer(const gguf::File& source, int vocab_size, gguf::Writer& writer) {
  const std::vector<std::string> tokens = source.get_string_array("tokenizer.ggml.tokens");
  const int n = vocab_size ? vocab_size : int(tokens.size());
  if (int(tokens.size()) > n)
    fail("{}: its vocabulary of {} tokens is larger than the preset's {}", source.path(), tokens.size(), n);
  for (const auto& [key, value] : source.metadata()) {
    if (!key.starts_with("tokenizer.")) continue;
    if (value.type != gguf::ValueType::ARRAY || std::get<gguf::Array>(value.data).items.size() != tokens.size() ||
        key == "tokenizer.ggml.merges") {
      writer.add(key, value);
      continue;
    }
    gguf::Array padded = std::get<gguf::Array>(value.data);
    for (int i = int(tokens.size()); i < n; ++i) {
      const int reserved = i - int(tokens.size());
      switch (padded.element_type) {
        case gguf::ValueType::STRING:
          padded.items.push_back({gguf::ValueType::STRING, fmt::format("<|reserved_special_token_{}|>", reserved)});
          break;
        case gguf::ValueType::INT32:  // token types: 3 = control
          padded.items.push_back({gguf::ValueType::INT32, int64_t(3)});
          break;
        case gguf::ValueType::FLOAT32:  // scores
          padded.items.push_back({gguf::ValueType::FLOAT32, 0.0});
          break;
        default: fail("{}: cannot pad tokenizer array {}", source.path(), key);
      }
    }
    writer.add(key, {gguf::ValueType::ARRAY, std::move(padded)});
  }
  return n;
}

}  // namespace

std::span<const SyntheticPreset> synthetic_presets() { return kPresets; }

const SyntheticPreset& synthetic_preset(std::string_view name) {
  for (const SyntheticPreset& preset : kPresets)
    if (preset.name == name) return preset;
  std::vector<std::string_view> names;
  for (const SyntheticPreset& preset : kPresets) names.push_back(preset.name);
  fail("unknown preset '{}' (presets: {})", name, fmt::join(names, ", "));
}

TensorType SyntheticWeights::type_of(std::string_view name, int layer, int n_layers) const {
  if (!q4_k_m_mix) return type;
  if (name == "output") return TensorType::Q6_K;
  if (name != "attn_v" && name != "ffn_down") return TensorType::Q4_K;
  const int eighth = n_layers / 8;
  const bool more_bits = layer < eighth || layer >= 7 * n_layers / 8 || (layer - eighth) % 3 == 2;
  return more_bits ? TensorType::Q6_K : TensorType::Q4_K;
}

std::optional<SyntheticWeights> synthetic_weights(std::string_view name) {
  if (name == "q4_k_m") return SyntheticWeights(TensorType::Q4_K, true);
  for (const TensorType type : kWeightTypes)
    if (lower_case_name(type) == name) return SyntheticWeights(type);
  return std::nullopt;
}

std::string synthetic_weight_names() {
  std::vector<std::string> names;
  for (const TensorType type : kWeightTypes) names.push_back(lower_case_name(type));
  names.push_back("q4_k_m");
  return fmt::format("{}", fmt::join(names, ", "));
}

void write_synthetic_model(const SyntheticPreset& p, SyntheticWeights weights, uint64_t seed,
                           const gguf::File& tokenizer_source, const std::string& path,
                           const std::function<void(uint64_t, uint64_t)>& progress) {
  if (std::ranges::find(kWeightTypes, weights.type) == std::end(kWeightTypes))
    fail("synthetic weights cannot be written as {} (types: {})", type_traits(weights.type).name,
         synthetic_weight_names());
  // Q4_K and Q6_K (the mix's two types) share the 256-value block.
  const int64_t block = type_traits(weights.type).block_elements;
  if (p.d_model % block != 0 || p.ffn_dim % block != 0)
    fail("preset {} has rows of {} and {} values, not multiples of {}'s block of {}", p.name, p.d_model, p.ffn_dim,
         type_traits(weights.type).name, block);
  const std::string type_name = weights.q4_k_m_mix ? "Q4_K_M" : std::string(type_traits(weights.type).name);

  gguf::Writer writer;
  const std::string arch = "llama";
  writer.add_string("general.architecture", arch)
      .add_string("general.name", fmt::format("synthetic {} ({}, seed {})", p.name, type_name, seed))
      .add_uint32(arch + ".block_count", uint32_t(p.n_layers))
      .add_uint32(arch + ".context_length", uint32_t(p.context_length))
      .add_uint32(arch + ".embedding_length", uint32_t(p.d_model))
      .add_uint32(arch + ".feed_forward_length", uint32_t(p.ffn_dim))
      .add_uint32(arch + ".attention.head_count", uint32_t(p.n_heads))
      .add_uint32(arch + ".attention.head_count_kv", uint32_t(p.n_kv_heads))
      .add_uint32(arch + ".attention.key_length", uint32_t(p.head_dim))
      .add_uint32(arch + ".attention.value_length", uint32_t(p.head_dim))
      .add_uint32(arch + ".rope.dimension_count", uint32_t(p.head_dim))
      .add_float32(arch + ".rope.freq_base", float(p.rope_base))
      .add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  const int vocab = copy_tokenizer(tokenizer_source, p.vocab_size, writer);
  writer.add_uint32(arch + ".vocab_size", uint32_t(vocab));

  uint64_t tensor_id = 0;
  // `layer` -1: outside the blocks.
  const auto matrix = [&](std::string_view name, int layer, int64_t cols, int64_t rows) {
    const TensorType type = weights.type_of(name, layer, p.n_layers);
    const std::string tensor = layer < 0 ? fmt::format("{}.weight", name) : fmt::format("blk.{}.{}.weight", layer, name);
    writer.add_tensor(tensor, {cols, rows}, type,
                      random_matrix(type, cols, std::sqrt(3.0f / float(cols)), seed, tensor_id++));
  };
  const auto norm = [&](const std::string& name, int64_t n) {
    writer.add_tensor(name, {n}, TensorType::F32, constant_f32(1.0f));
  };
  const int64_t D = p.d_model, q_dim = int64_t(p.n_heads) * p.head_dim, kv_dim = int64_t(p.n_kv_heads) * p.head_dim;
  matrix("token_embd", -1, D, vocab);
  if (p.llama3_rope_scaling) {
    const std::vector<float> divisors = llama3_rope_divisors(p.head_dim, p.rope_base);
    writer.add_tensor("rope_freqs.weight", {int64_t(divisors.size())}, TensorType::F32,
                      std::span(reinterpret_cast<const uint8_t*>(divisors.data()), divisors.size() * 4));
  }
  for (int l = 0; l < p.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    norm(b + "attn_norm.weight", D);
    matrix("attn_q", l, D, q_dim);
    matrix("attn_k", l, D, kv_dim);
    matrix("attn_v", l, D, kv_dim);
    matrix("attn_output", l, q_dim, D);
    norm(b + "ffn_norm.weight", D);
    matrix("ffn_gate", l, D, p.ffn_dim);
    matrix("ffn_up", l, D, p.ffn_dim);
    matrix("ffn_down", l, p.ffn_dim, D);
  }
  norm("output_norm.weight", D);
  matrix("output", -1, D, vocab);
  writer.write(path, progress);
}

}  // namespace kascade::model
