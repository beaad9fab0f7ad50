#include "gpu/matrix.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "quant/dequant.h"

namespace kascade::gpu {
namespace {

constexpr int64_t kQ8_0Block = 32;
constexpr int64_t kQ4_KBlock = 256, kQ4_KBlockBytes = 144;
constexpr int64_t kQ5_KBlock = 256, kQ5_KBlockBytes = 176;
constexpr int64_t kQ6_KBlock = 256, kQ6_KBlockBytes = 210, kQ6_KBodyBytes = 208;

// The device layout a weight of `type` takes on its own.
MatrixFormat format_of(TensorType type) {
  switch (type) {
    case TensorType::Q8_0:
    case TensorType::Q4_0:
    case TensorType::Q5_0: return MatrixFormat::Q8_0;
    case TensorType::Q4_1:
    case TensorType::Q5_1: return MatrixFormat::Q8_0M;
    case TensorType::Q4_K: return MatrixFormat::Q4_K;
    case TensorType::Q5_K: return MatrixFormat::Q5_K;
    case TensorType::Q6_K: return MatrixFormat::Q6_K;
    default: return MatrixFormat::BF16;
  }
}

// The 32 integers of a block of Q4_0, Q5_0, Q4_1 or Q5_1 (value = d q, or
// d q + m for the latter two): the CPU's dequantization of the block with d
// set to 1 and m to 0, so the block layouts are written once (quant/).
void block_integers(TensorType type, const uint8_t* src, int8_t* out) {
  uint8_t block[24];
  const int64_t bytes = type_traits(type).block_bytes;
  std::memcpy(block, src, size_t(bytes));
  const uint16_t one = fp32_to_fp16(1.0f), zero = 0;
  std::memcpy(block, &one, 2);
  if (type == TensorType::Q4_1 || type == TensorType::Q5_1) std::memcpy(block + 2, &zero, 2);
  float values[kQ8_0Block];
  quant::dequantize_blocks(type, block, values, 1);
  for (int j = 0; j < kQ8_0Block; ++j) out[j] = int8_t(values[j]);
}

}  // namespace

int64_t stacked_rows(const WeightParts& parts) {
  const int64_t cols = parts.front()->cols;
  int64_t rows = 0;
  for (const ops::Weight* w : parts) {
    if (w->cols != cols) fail("cannot stack {} ({} columns) under {} columns", w->name, w->cols, cols);
    rows += w->rows;
  }
  return rows;
}

MatrixFormat device_format(const WeightParts& parts) {
  const MatrixFormat format = format_of(parts.front()->type);
  for (const ops::Weight* w : parts)
    if (format_of(w->type) != format) return MatrixFormat::BF16;
  return format;
}

uint64_t device_bytes(MatrixFormat format, int64_t rows, int64_t cols) {
  const uint64_t elements = uint64_t(rows) * uint64_t(cols);
  switch (format) {
    case MatrixFormat::BF16: return 2 * elements;
    case MatrixFormat::Q8_0: return elements + 2 * (elements / kQ8_0Block);
    case MatrixFormat::Q8_0M: return elements + 4 * (elements / kQ8_0Block);
    case MatrixFormat::Q4_K: return elements / kQ4_KBlock * kQ4_KBlockBytes;
    case MatrixFormat::Q5_K: return elements / kQ5_KBlock * kQ5_KBlockBytes;
    case MatrixFormat::Q6_K: return elements / kQ6_KBlock * kQ6_KBlockBytes;
  }
  return 0;
}

std::vector<uint8_t> pack_rows(MatrixFormat format, const WeightParts& parts) {
  const int64_t rows = stacked_rows(parts), cols = parts.front()->cols;
  std::vector<uint8_t> out(device_bytes(format, rows, cols));
  int64_t first = 0;
  for (const ops::Weight* w : parts) {
#pragma omp parallel
    {
      std::vector<float> values(format == MatrixFormat::BF16 ? size_t(cols) : 0);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < w->rows; ++r) {
        const uint8_t* src = w->row(r);
        const int64_t row = first + r;
        switch (format) {
          case MatrixFormat::BF16: {
            ops::dequantize_weight_row(*w, r, values.data());
            auto* dst = reinterpret_cast<uint16_t*>(out.data()) + row * cols;
            for (int64_t c = 0; c < cols; ++c) dst[c] = fp32_to_bf16(values[size_t(c)]);
            break;
          }
          case MatrixFormat::Q8_0:
          case MatrixFormat::Q8_0M: {  // int8s, fp16 d's, Q8_0M's fp16 m's after them
            auto* quants = reinterpret_cast<int8_t*>(out.data() + row * cols);
            const int64_t blocks = cols / kQ8_0Block, block_bytes = type_traits(w->type).block_bytes;
            uint8_t* scales = out.data() + rows * cols + 2 * row * blocks;
            uint8_t* offsets = out.data() + rows * cols + 2 * rows * blocks + 2 * row * blocks;
            for (int64_t b = 0; b < blocks; ++b) {
              const uint8_t* block = src + b * block_bytes;
              std::memcpy(scales + 2 * b, block, 2);  // every one of these types starts with its d
              if (format == MatrixFormat::Q8_0M) std::memcpy(offsets + 2 * b, block + 2, 2);
              if (w->type == TensorType::Q8_0)
                std::memcpy(quants + b * kQ8_0Block, block + 2, kQ8_0Block);
              else
                block_integers(w->type, block, quants + b * kQ8_0Block);
            }
            break;
          }
          case MatrixFormat::Q4_K:
          case MatrixFormat::Q5_K:  // the file's rows as they are
            std::memcpy(out.data() + row * int64_t(w->row_bytes), src, w->row_bytes);
            break;
          case MatrixFormat::Q6_K: {
            const int64_t blocks = cols / kQ6_KBlock;
            uint8_t* bodies = out.data() + row * blocks * kQ6_KBodyBytes;
            uint8_t* scales = out.data() + rows * blocks * kQ6_KBodyBytes + 2 * row * blocks;
            for (int64_t b = 0; b < blocks; ++b) {
              std::memcpy(bodies + b * kQ6_KBodyBytes, src + b * kQ6_KBlockBytes, kQ6_KBodyBytes);
              std::memcpy(scales + 2 * b, src + b * kQ6_KBlockBytes + kQ6_KBodyBytes, 2);
            }
            break;
          }
        }
      }
    }
    first += w->rows;
  }
  return out;
}

DeviceMatrix upload_matrix(const WeightParts& parts, const char* what) {
  DeviceMatrix m;
  const MatrixFormat format = device_format(parts);
  m.memory = upload(pack_rows(format, parts), what);
  m.view = {format, m.memory.as<uint8_t>(), stacked_rows(parts), parts.front()->cols};
  return m;
}

std::vector<WeightParts> format_runs(const WeightParts& parts) {
  stacked_rows(parts);  // the columns must agree
  std::vector<WeightParts> runs;
  for (const ops::Weight* w : parts) {
    if (runs.empty() || device_format({runs.back().front()}) != device_format({w})) runs.emplace_back();
    runs.back().push_back(w);
  }
  return runs;
}

uint64_t stack_device_bytes(const WeightParts& parts) {
  uint64_t bytes = 0;
  for (const WeightParts& run : format_runs(parts))
    bytes += device_bytes(device_format(run), stacked_rows(run), run.front()->cols);
  return bytes;
}

DeviceStack upload_stack(const WeightParts& parts, const char* what) {
  DeviceStack stack;
  for (const WeightParts& run : format_runs(parts)) {
    DeviceMatrix m = upload_matrix(run, what);
    stack.runs.push_back(m.view);
    stack.memory.push_back(std::move(m.memory));
  }
  return stack;
}

}  // namespace kascade::gpu
