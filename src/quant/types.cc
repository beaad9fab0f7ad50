// Block layouts of every ggml tensor type id, so a file's tensor table can be
// sized and checked even for types we cannot dequantize, and the checked entry
// point dequantize_row, which refuses unsupported types by name.
#include "quant/types.h"

#include <array>
#include <limits>

#include "core/error.h"
#include "quant/dequant.h"

namespace kascade {
namespace {

struct TypeEntry {
  uint32_t id;
  TypeTraits traits;
};

// Ids and sizes follow ggml's type table. Ids 4, 5, 31-33 and 36-38 were
// removed from ggml and are unknown here, as are ids past the table.
constexpr TypeEntry kTypeEntries[] = {
    {0, {"F32", 1, 4, true}},
    {1, {"F16", 1, 2, true}},
    {2, {"Q4_0", 32, 18, true}},
    {3, {"Q4_1", 32, 20, true}},
    {6, {"Q5_0", 32, 22, true}},
    {7, {"Q5_1", 32, 24, true}},
    {8, {"Q8_0", 32, 34, true}},
    {9, {"Q8_1", 32, 36, false}},
    {10, {"Q2_K", 256, 84, false}},
    {11, {"Q3_K", 256, 110, false}},
    {12, {"Q4_K", 256, 144, true}},
    {13, {"Q5_K", 256, 176, true}},
    {14, {"Q6_K", 256, 210, true}},
    {15, {"Q8_K", 256, 292, false}},
    {16, {"IQ2_XXS", 256, 66, false}},
    {17, {"IQ2_XS", 256, 74, false}},
    {18, {"IQ3_XXS", 256, 98, false}},
    {19, {"IQ1_S", 256, 50, false}},
    {20, {"IQ4_NL", 32, 18, false}},
    {21, {"IQ3_S", 256, 110, false}},
    {22, {"IQ2_S", 256, 82, false}},
    {23, {"IQ4_XS", 256, 136, false}},
    {24, {"I8", 1, 1, false}},
    {25, {"I16", 1, 2, false}},
    {26, {"I32", 1, 4, false}},
    {27, {"I64", 1, 8, false}},
    {28, {"F64", 1, 8, false}},
    {29, {"IQ1_M", 256, 56, false}},
    {30, {"BF16", 1, 2, true}},
    {34, {"TQ1_0", 256, 54, false}},
    {35, {"TQ2_0", 256, 66, false}},
    {39, {"MXFP4", 32, 17, false}},
    {40, {"NVFP4", 64, 36, false}},
    {41, {"Q1_0", 128, 18, false}},
};

constexpr uint32_t kTypeIdLimit = 42;

// Direct lookup by id; null where the id has no entry.
constexpr std::array<const TypeTraits*, kTypeIdLimit> build_type_index() {
  std::array<const TypeTraits*, kTypeIdLimit> index{};
  for (const TypeEntry& entry : kTypeEntries) index[entry.id] = &entry.traits;
  return index;
}

constexpr std::array<const TypeTraits*, kTypeIdLimit> kTypeIndex = build_type_index();

}  // namespace

const TypeTraits* find_type_traits(uint32_t type_id) {
  return type_id < kTypeIdLimit ? kTypeIndex[type_id] : nullptr;
}

const TypeTraits& type_traits(TensorType type) {
  const TypeTraits* traits = find_type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr) fail("unknown tensor type id {}", static_cast<uint32_t>(type));
  return *traits;
}

uint64_t row_bytes(TensorType type, int64_t n) {
  const TypeTraits& traits = type_traits(type);
  if (n < 0 || n % traits.block_elements != 0) {
    fail("row of {} {} values is not a whole number of {}-value blocks", n, traits.name,
         traits.block_elements);
  }
  const uint64_t blocks = uint64_t(n / traits.block_elements);
  const uint64_t block_bytes = uint64_t(traits.block_bytes);
  if (blocks > std::numeric_limits<uint64_t>::max() / block_bytes) {
    fail("row of {} {} values is too large to address", n, traits.name);
  }
  return blocks * block_bytes;
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const TypeTraits& traits = type_traits(type);
  if (!traits.can_dequantize) fail("unsupported tensor type {}", traits.name);
  if (n < 0 || n % traits.block_elements != 0) {
    fail("row of {} {} values is not a whole number of {}-value blocks", n, traits.name,
         traits.block_elements);
  }
  quant::dequantize_blocks(type, static_cast<const uint8_t*>(src), dst,
                           n / traits.block_elements);
}

}  // namespace kascade
