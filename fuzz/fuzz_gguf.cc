// libFuzzer target for the GGUF reader. Any input must either parse or raise
// kascade::Error: no crash, hang, leak or undefined behaviour. On success the
// metadata is rendered and tensor rows are dequantized, so the sanitizers also
// check that every pointer and size the reader hands out stays inside the image.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "quant/types.h"

namespace {

// Bounds the work per input; the rows checked still cover every tensor's start.
constexpr int64_t kMaxValuesPerInput = 1 << 18;

void exercise(const kascade::gguf::File& file) {
  for (const auto& [key, value] : file.metadata()) kascade::gguf::to_string(value);
  std::vector<float> row;
  int64_t budget = kMaxValuesPerInput;
  for (const kascade::gguf::TensorInfo& info : file.tensors()) {
    if (!kascade::type_traits(info.type).can_dequantize) continue;
    const int64_t row_length = info.dims.empty() ? 1 : info.dims[0];
    const uint64_t stride = kascade::row_bytes(info.type, row_length);
    row.resize(size_t(row_length));
    for (int64_t r = 0; r < info.rows() && budget >= row_length; ++r, budget -= row_length) {
      kascade::dequantize_row(info.type, info.data + uint64_t(r) * stride, row.data(), row_length);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    exercise(kascade::gguf::File::parse(data, size, "fuzz-input"));
  } catch (const kascade::Error&) {
    // Refusing bad input is the expected outcome for most inputs.
  }
  return 0;
}
