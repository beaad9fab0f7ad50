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

namespace {

// e^x for eight floats, about 1 ulp: x = n ln2 + r with |r| <= ln2 / 2, e^r by
// its Taylor series to r^6 (remainder < 2e-7 relative), 2^n put in the exponent.
// Inputs are clamped to [-87, 88] so 2^n stays a normal float.
inline __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 split in two so that n * ln2 is subtracted without rounding error.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.4286068202862268e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

constexpr float kGeluTanhScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// 0.5 x (1 + tanh(u)) == x / (1 + e^(-2u)): one exponential, no tanh.
inline float gelu_tanh(float x) {
  const float u = kGeluTanhScale * (x + kGeluCubic * x * x * x);
  return x / (1.0f + std::exp(-2.0f * u));
}

}  // namespace

namespace {

// gate[i] = activation(gate[i]) * up[i]: eight at a time, then the tail.
template <typename Vector, typename Scalar>
void activation_times_up(float* gate, const float* up, int64_t count, Vector activation, Scalar scalar_activation) {
  const int64_t vector_end = count / 8 * 8;
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < vector_end; i += 8)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(activation(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  for (int64_t i = vector_end; i < count; ++i) gate[i] = scalar_activation(gate[i]) * up[i];
}

}  // namespace

void silu_multiply(float* gate, const float* up, int64_t count) {
  activation_times_up(
      gate, up, count,
      [](__m256 x) {
        const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
        return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      },
      [](float x) { return x / (1.0f + std::exp(-x)); });
}

void gelu_tanh_multiply(float* gate, const float* up, int64_t count) {
  activation_times_up(
      gate, up, count,
      [](__m256 x) {
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
        const __m256 u =
            _mm256_mul_ps(_mm256_set1_ps(kGeluTanhScale), _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
        const __m256 e = exp_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
        return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      },
      gelu_tanh);
}

void scale(float* x, float factor, int64_t count) {
  for (int64_t i = 0; i < count; ++i) x[i] *= factor;
}

void soft_cap(float* x, float cap, int64_t count) {
#pragma omp parallel for schedule(static) if (count > 65536)
  for (int64_t i = 0; i < count; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_bias(float* x, const float* bias, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += bias[i];
}

void Rope::apply(float* x, std::span<const int64_t> positions, int n_heads, int head_dim) const {
  const int pairs = rope_dim / 2;
  const int64_t n = int64_t(positions.size());
#pragma omp parallel for schedule(static) if (n > 4)
  for (int64_t t = 0; t < n; ++t) {
    // Angles in double: positions reach 10^5 and fp32 phase error would grow with them.
    std::vector<float> cosines(static_cast<size_t>(pairs)), sines(static_cast<size_t>(pairs));
    const double position = double(positions[size_t(t)]);
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
