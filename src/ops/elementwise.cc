#include "ops/elementwise.h"

#include <cmath>

#include "ops/simd.h"

namespace kascade::ops {

void rms_norm(const float* x, const float* weight, float* out, int64_t n, int64_t dim, float epsilon) {
#pragma omp parallel for schedule(static) if (n > 4)
  for (int64_t t = 0; t < n; ++t) {
    const float* row = x + t * dim;
    const float mean_square = dot_f32(row, row, dim) / float(dim);
    const float scale = 1.0f / std::sqrt(mean_square + epsilon);
    float* dst = out + t * dim;
    for (int64_t i = 0; i < dim; ++i) dst[i] = row[i] * scale * weight[i];
  }
}

void add_in_place(float* x, const float* y, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] += y[i];
}

void silu_multiply(float* gate, const float* up, int64_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add_bias(float* x, const float* bias, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += bias[i];
}

void Rope::apply(float* x, int64_t n, int64_t first_position, int n_heads, int head_dim) const {
  const int pairs = rope_dim / 2;
#pragma omp parallel for schedule(static) if (n > 4)
  for (int64_t t = 0; t < n; ++t) {
    // Angles in double: positions reach 10^5 and fp32 phase error would grow with them.
    std::vector<float> cosines(static_cast<size_t>(pairs)), sines(static_cast<size_t>(pairs));
    const double position = double(first_position + t);
    for (int i = 0; i < pairs; ++i) {
      const double angle = position * double(inverse_frequencies[size_t(i)]);
      cosines[size_t(i)] = float(std::cos(angle));
      sines[size_t(i)] = float(std::sin(angle));
    }
    for (int h = 0; h < n_heads; ++h) {
      float* head = x + (t * n_heads + h) * head_dim;
      for (int i = 0; i < pairs; ++i) {
        const int a = style == RopeStyle::Interleaved ? 2 * i : i;
        const int b = style == RopeStyle::Interleaved ? 2 * i + 1 : i + pairs;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * cosines[size_t(i)] - x1 * sines[size_t(i)];
        head[b] = x0 * sines[size_t(i)] + x1 * cosines[size_t(i)];
      }
    }
  }
}

}  // namespace kascade::ops
