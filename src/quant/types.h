// Tensor element types of the GGUF/ggml format and their block layouts.
// Quantized types store rows as blocks of `block_elements` values in
// `block_bytes` bytes; a row's length must be a multiple of the block size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kascade {

// Values are the ggml type ids stored in GGUF tensor infos.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

struct TypeTraits {
  std::string_view name;
  int64_t block_elements;  // values per block (1 for float types)
  int64_t block_bytes;     // bytes per block
  bool can_dequantize;     // supported by dequantize_row
};

// Traits of a type id read from a file; nullptr when the id is unknown.
const TypeTraits* find_type_traits(uint32_t type_id);
const TypeTraits& type_traits(TensorType type);

// Bytes of a row of `n` values; throws Error when n is not a multiple of the
// block size or the size overflows.
uint64_t row_bytes(TensorType type, int64_t n);

// Converts `n` values (a whole number of blocks) of `type` at `src` to fp32.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);

}  // namespace kascade
