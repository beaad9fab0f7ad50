#include "model/model.h"

#include <sys/mman.h>
#include <unistd.h>

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "attention/sliding_window.h"
#include "core/error.h"
#include "core/timer.h"

namespace kascade::model {
namespace {

int positive_int(const gguf::File& file, const std::string& key, uint64_t limit) {
  const uint64_t value = file.get_uint(key);
  if (value == 0 || value > limit) fail("{}: {} = {} is out of range (1..{})", file.path(), key, value, limit);
  return int(value);
}

void check_supported_type(const gguf::File& file, const std::string& name, const gguf::TensorInfo& tensor) {
  if (!type_traits(tensor.type).can_dequantize)
    fail("{}: tensor {} has unsupported type {}", file.path(), name, type_traits(tensor.type).name);
}

std::vector<float> read_f32_vector(const gguf::File& file, const std::string& name, int64_t expected) {
  const gguf::TensorInfo& tensor = file.tensor(name);
  if (int64_t(tensor.n_elements) != expected)
    fail("{}: tensor {} has {} elements, expected {}", file.path(), name, tensor.n_elements, expected);
  check_supported_type(file, name, tensor);
  std::vector<float> values(static_cast<size_t>(expected));
  dequantize_row(tensor.type, tensor.data, values.data(), expected);
  return values;
}

std::vector<float> read_optional_f32_vector(const gguf::File& file, const std::string& name, int64_t expected) {
  return file.find_tensor(name) ? read_f32_vector(file, name, expected) : std::vector<float>{};
}

ops::Weight read_weight(const gguf::File& file, const std::string& name, int64_t cols, int64_t rows) {
  const gguf::TensorInfo& tensor = file.tensor(name);
  if (tensor.dims.size() != 2 || tensor.dims[0] != cols || tensor.dims[1] != rows)
    fail("{}: tensor {} has shape [{}], expected [{}, {}]", file.path(), name, fmt::join(tensor.dims, ", "), cols,
         rows);
  check_supported_type(file, name, tensor);
  return {name, tensor.type, tensor.data, rows, cols, row_bytes(tensor.type, cols)};
}

// RoPE inverse frequencies base^(-2i/rope_dim) * position_scale, each divided
// by its frequency factor when there are any (llama3 scaling).
std::vector<float> inverse_frequencies(int rope_dim, double base, double position_scale,
                                       const std::vector<float>& frequency_factors) {
  std::vector<float> inverse(size_t(rope_dim / 2));
  for (int i = 0; i < rope_dim / 2; ++i) {
    double value = std::pow(base, -2.0 * i / rope_dim) * position_scale;
    if (!frequency_factors.empty()) value /= frequency_factors[size_t(i)];
    inverse[size_t(i)] = float(value);
  }
  return inverse;
}

// The Gemma 3 specifics that the file does not state in keys of their own.
void read_gemma3_config(const gguf::File& file, Config& config) {
  const std::string& arch = config.architecture_name;
  config.feed_forward = FeedForward::GeluTanhGlu;
  config.embedding_scale = std::sqrt(float(config.d_model));
  // query_pre_attn_scalar is head_dim for every Gemma 3 but the 27B (62
  // layers), which uses d_model / n_heads (gemma_pytorch's configs; llama.cpp
  // applies the same rule, as no GGUF key carries it).
  const int query_pre_attn_scalar = config.n_layers == 62 ? config.d_model / config.n_heads : config.head_dim;
  config.query_scale = float(std::sqrt(double(config.head_dim) / query_pre_attn_scalar));
  if (file.has(arch + ".attention.sliding_window")) {
    config.sliding_window = positive_int(file, arch + ".attention.sliding_window", 1 << 24);
    // Gemma 3's fixed layout unless newer converters state it: every sixth
    // layer global, local layers rotating with base 10000 and no scaling.
    config.sliding_window_pattern = file.has(arch + ".attention.sliding_window_pattern")
                                        ? positive_int(file, arch + ".attention.sliding_window_pattern", 1024)
                                        : 6;
    if (config.n_layers < config.sliding_window_pattern)
      fail("{}: {} layers leave no global attention layer (every {}th is global)", file.path(), config.n_layers,
           config.sliding_window_pattern);
    const double local_base = file.get_float(arch + ".rope.freq_base_swa", 10000.0);
    if (!(local_base > 1.0)) fail("{}: local rope base {} must be > 1", file.path(), local_base);
    config.local_rope = config.rope;
    config.local_rope.inverse_frequencies = inverse_frequencies(config.rope.rope_dim, local_base, 1.0, {});
  }
}

// Grows `a` to hold n rows of every activation.
void reserve_rows(Activations& a, const Config& c, int64_t n) {
  if (a.tokens >= n) return;
  const int64_t D = c.d_model, q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  for (auto [buffer, width] : {std::pair{&a.x, D}, {&a.normed, D}, {&a.projected, D}, {&a.q, q_dim},
                               {&a.attended, q_dim}, {&a.k, kv_dim}, {&a.v, kv_dim}, {&a.gate, int64_t(c.ffn_dim)},
                               {&a.up, int64_t(c.ffn_dim)}})
    buffer->resize(size_t(n * width));
  a.tokens = n;
}

// Q, K and V of n rows of the normed input: the products (through `project`,
// which books their time), Qwen2's biases and Qwen3's Q/K norms; RoPE is the
// caller's, as positions differ between one sequence and a batch of them.
template <typename Project>
void project_qkv(const Config& c, const LayerWeights& w, const float* normed, int64_t n, Project&& project, float* q,
                 float* k, float* v) {
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  project(w.q, normed, q);
  project(w.k, normed, k);
  project(w.v, normed, v);
  if (!w.q_bias.empty()) {
    ops::add_bias(q, w.q_bias.data(), n, q_dim);
    ops::add_bias(k, w.k_bias.data(), n, kv_dim);
    ops::add_bias(v, w.v_bias.data(), n, kv_dim);
  }
  if (!w.q_norm.empty()) {
    ops::rms_norm(q, w.q_norm.data(), q, n * c.n_heads, c.head_dim, c.rms_epsilon);
    ops::rms_norm(k, w.k_norm.data(), k, n * c.n_kv_heads, c.head_dim, c.rms_epsilon);
  }
}

}  // namespace

Config read_config(const gguf::File& file) {
  Config config;
  config.architecture_name = file.get_string("general.architecture");
  const std::string& arch = config.architecture_name;
  if (arch == "llama") {
    config.architecture = Architecture::Llama;
  } else if (arch == "qwen2") {
    config.architecture = Architecture::Qwen2;
  } else if (arch == "qwen3") {
    config.architecture = Architecture::Qwen3;
  } else if (arch == "gemma3") {
    config.architecture = Architecture::Gemma3;
  } else {
    fail("{}: unsupported architecture '{}' (supported: llama, qwen2, qwen3, gemma3)", file.path(), arch);
  }
  config.name = file.get_string("general.name", arch);
  constexpr uint64_t kMaxDim = 1 << 16;
  config.n_layers = positive_int(file, arch + ".block_count", 1024);
  config.d_model = positive_int(file, arch + ".embedding_length", kMaxDim);
  config.ffn_dim = positive_int(file, arch + ".feed_forward_length", 1 << 18);
  config.n_heads = positive_int(file, arch + ".attention.head_count", 1024);
  config.n_kv_heads = file.has(arch + ".attention.head_count_kv")
                          ? positive_int(file, arch + ".attention.head_count_kv", 1024)
                          : config.n_heads;
  if (config.n_heads % config.n_kv_heads != 0)
    fail("{}: {} query heads are not a multiple of {} KV heads", file.path(), config.n_heads, config.n_kv_heads);
  config.head_dim = file.has(arch + ".attention.key_length")
                        ? positive_int(file, arch + ".attention.key_length", 1024)
                        : config.d_model / config.n_heads;
  if (file.has(arch + ".attention.value_length") &&
      file.get_uint(arch + ".attention.value_length") != uint64_t(config.head_dim))
    fail("{}: different key and value head sizes are not supported", file.path());
  if (config.head_dim % 2 != 0) fail("{}: head size {} is odd", file.path(), config.head_dim);
  config.context_length = positive_int(file, arch + ".context_length", 1 << 24);
  config.rms_epsilon = float(file.get_float(arch + ".attention.layer_norm_rms_epsilon", 1e-5));

  const gguf::TensorInfo& embedding = file.tensor("token_embd.weight");
  if (embedding.dims.size() != 2 || embedding.dims[0] != config.d_model)
    fail("{}: token_embd.weight does not have {} columns", file.path(), config.d_model);
  config.vocab_size = int(embedding.dims[1]);

  ops::Rope& rope = config.rope;
  rope.style = config.architecture == Architecture::Llama ? ops::RopeStyle::Interleaved : ops::RopeStyle::Neox;
  rope.rope_dim = int(file.get_uint(arch + ".rope.dimension_count", uint64_t(config.head_dim)));
  if (rope.rope_dim <= 0 || rope.rope_dim > config.head_dim || rope.rope_dim % 2 != 0)
    fail("{}: rope dimension {} does not fit head size {}", file.path(), rope.rope_dim, config.head_dim);
  const double base = file.get_float(arch + ".rope.freq_base", 10000.0);
  if (!(base > 1.0)) fail("{}: rope base {} must be > 1", file.path(), base);
  double position_scale = 1.0;
  const std::string scaling = file.get_string(arch + ".rope.scaling.type", "none");
  if (scaling == "linear") {
    const double factor = file.get_float(arch + ".rope.scaling.factor");
    if (!(factor > 0)) fail("{}: rope scaling factor {} must be > 0", file.path(), factor);
    position_scale = 1.0 / factor;
  } else if (scaling != "none") {
    fail("{}: unsupported rope scaling '{}' (supported: none, linear, llama3 frequency factors)", file.path(),
         scaling);
  }
  // Llama 3 style scaling ships as per-frequency divisors in rope_freqs.weight.
  const std::vector<float> frequency_factors = read_optional_f32_vector(file, "rope_freqs.weight", rope.rope_dim / 2);
  rope.inverse_frequencies = inverse_frequencies(rope.rope_dim, base, position_scale, frequency_factors);

  // Soft caps (gemma2-style keys): the final one is a cheap elementwise step;
  // one on attention scores would need every strategy to apply it.
  config.final_logit_softcap = float(file.get_float(arch + ".final_logit_softcapping", 0.0));
  if (!(config.final_logit_softcap >= 0) || std::isinf(config.final_logit_softcap))
    fail("{}: {}.final_logit_softcapping = {} must be finite and >= 0", file.path(), arch, config.final_logit_softcap);
  if (file.get_float(arch + ".attn_logit_softcapping", 0.0) != 0.0)
    fail("{}: attention logit soft-capping ({}.attn_logit_softcapping) is not supported", file.path(), arch);

  if (config.architecture == Architecture::Gemma3) read_gemma3_config(file, config);
  return config;
}

Weights read_weights(const gguf::File& file, const Config& c) {
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  Weights weights;
  weights.token_embedding = read_weight(file, "token_embd.weight", c.d_model, c.vocab_size);
  weights.output_norm = read_f32_vector(file, "output_norm.weight", c.d_model);
  weights.output = file.find_tensor("output.weight") ? read_weight(file, "output.weight", c.d_model, c.vocab_size)
                                                     : weights.token_embedding;
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights w;
    w.attn_norm = read_f32_vector(file, p + "attn_norm.weight", c.d_model);
    w.ffn_norm = read_f32_vector(file, p + "ffn_norm.weight", c.d_model);
    w.q = read_weight(file, p + "attn_q.weight", c.d_model, q_dim);
    w.k = read_weight(file, p + "attn_k.weight", c.d_model, kv_dim);
    w.v = read_weight(file, p + "attn_v.weight", c.d_model, kv_dim);
    w.o = read_weight(file, p + "attn_output.weight", q_dim, c.d_model);
    w.gate = read_weight(file, p + "ffn_gate.weight", c.d_model, c.ffn_dim);
    w.up = read_weight(file, p + "ffn_up.weight", c.d_model, c.ffn_dim);
    w.down = read_weight(file, p + "ffn_down.weight", c.ffn_dim, c.d_model);
    w.q_bias = read_optional_f32_vector(file, p + "attn_q.bias", q_dim);
    w.k_bias = read_optional_f32_vector(file, p + "attn_k.bias", kv_dim);
    w.v_bias = read_optional_f32_vector(file, p + "attn_v.bias", kv_dim);
    if (c.architecture == Architecture::Qwen3 || c.architecture == Architecture::Gemma3) {
      w.q_norm = read_f32_vector(file, p + "attn_q_norm.weight", c.head_dim);
      w.k_norm = read_f32_vector(file, p + "attn_k_norm.weight", c.head_dim);
    }
    // Gemma's GGUF norms already hold 1 + w (the converter adds the one), so
    // every norm here is a plain RMSNorm.
    if (c.architecture == Architecture::Gemma3) {
      w.post_attention_norm = read_f32_vector(file, p + "post_attention_norm.weight", c.d_model);
      w.post_ffn_norm = read_f32_vector(file, p + "post_ffw_norm.weight", c.d_model);
    }
    weights.layers.push_back(std::move(w));
  }
  return weights;
}

Model Model::load(const std::string& path) {
  Model model(gguf::File::open(path));
  model.config_ = read_config(model.file_);
  model.weights_ = read_weights(model.file_, model.config_);
  model.move_weights_to_large_pages();
  return model;
}

// Decode streams every weight byte once per token: from 2 MiB pages the
// matrix-vector products run about 20% faster than from the file's 4 KiB
// mapped pages (fewer TLB misses). The copy goes in slices, each slice's
// mapped pages released right after, so resident memory never holds both.
void Model::move_weights_to_large_pages() {
  std::vector<ops::Weight*> weights{&weights_.token_embedding, &weights_.output};
  for (LayerWeights& w : weights_.layers)
    for (ops::Weight* m : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down}) weights.push_back(m);
  const uint8_t* first = weights.front()->data;
  const uint8_t* end = first;
  for (const ops::Weight* w : weights) {
    first = std::min(first, w->data);
    end = std::max(end, w->data + uint64_t(w->rows) * w->row_bytes);
  }
  LargePageBuffer pages(size_t(end - first));
  constexpr size_t kSlice = size_t(8) << 20;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  for (size_t offset = 0; offset < pages.size(); offset += kSlice) {
    const size_t n = std::min(kSlice, pages.size() - offset);
    std::memcpy(pages.data() + offset, first + offset, n);
    const uintptr_t from = (uintptr_t(first + offset) + page - 1) / page * page;
    const uintptr_t to = uintptr_t(first + offset + n) / page * page;
    if (to > from) madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
  }
  for (ops::Weight* w : weights) w->data = pages.data() + (w->data - first);
  weight_pages_ = std::move(pages);
}

Sequence Model::new_sequence(int64_t capacity, attention::KvType kv_type,
                             std::unique_ptr<attention::Strategy> strategy) const {
  if (capacity <= 0 || capacity > config_.context_length)
    fail("context of {} tokens is outside the model's 1..{}", capacity, config_.context_length);
  std::unique_ptr<attention::Strategy> local =
      config_.n_local_layers() > 0
          ? attention::make_sliding_window(config_.local_attention_shape(), config_.sliding_window)
          : nullptr;
  return Sequence{KvCache(config_.n_layers, config_.n_kv_heads, config_.head_dim, capacity, kv_type),
                  std::move(strategy), std::move(local), 0, {}, {}};
}

void Model::embed(std::span<const int32_t> tokens, float* x) const {
  const int64_t D = config_.d_model, n = int64_t(tokens.size());
  for (int64_t t = 0; t < n; ++t) ops::dequantize_weight_row(weights_.token_embedding, tokens[size_t(t)], x + t * D);
  if (config_.embedding_scale != 1.0f) ops::scale(x, config_.embedding_scale, n * D);
}

void Model::output_head(const float* x, int64_t n, float* normed, const Product& project, float* logits) const {
  const Config& c = config_;
  ops::rms_norm(x, weights_.output_norm.data(), normed, n, c.d_model, c.rms_epsilon);
  project(weights_.output, normed, logits);
  if (c.final_logit_softcap > 0) ops::soft_cap(logits, c.final_logit_softcap, n * c.vocab_size);
}

void Model::run_layers(std::span<const int64_t> positions, Activations& a, const Product& project,
                       const Attend& attend, ForwardObserver* observer) const {
  const Config& c = config_;
  const int64_t n = int64_t(positions.size()), D = c.d_model, q_dim = int64_t(c.n_heads) * c.head_dim;
  float *x = a.x.data(), *normed = a.normed.data(), *projected = a.projected.data();
  float *q = a.q.data(), *k = a.k.data(), *v = a.v.data(), *attended = a.attended.data();
  float *gate = a.gate.data(), *up = a.up.data();
  // Local and global layers each count from 0 for their attention.
  int local_index = 0, global_index = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& w = weights_.layers[size_t(l)];
    const bool local = c.is_local_layer(l);
    const int strategy_layer = local ? local_index++ : global_index++;

    ops::rms_norm(x, w.attn_norm.data(), normed, n, D, c.rms_epsilon);
    project_qkv(c, w, normed, n, project, q, k, v);
    const ops::Rope& rope = local ? c.local_rope : c.rope;
    rope.apply(q, positions, c.n_heads, c.head_dim);
    rope.apply(k, positions, c.n_kv_heads, c.head_dim);
    if (c.query_scale != 1.0f) ops::scale(q, c.query_scale, n * q_dim);
    attend(l, local, strategy_layer);
    project(w.o, attended, projected);
    if (!w.post_attention_norm.empty())
      ops::rms_norm(projected, w.post_attention_norm.data(), projected, n, D, c.rms_epsilon);
    if (observer && !local) observer->on_attention_output(strategy_layer, x, projected, n, D);
    ops::add_in_place(x, projected, n * D);

    ops::rms_norm(x, w.ffn_norm.data(), normed, n, D, c.rms_epsilon);
    project(w.gate, normed, gate);
    project(w.up, normed, up);
    if (c.feed_forward == FeedForward::GeluTanhGlu)
      ops::gelu_tanh_multiply(gate, up, n * c.ffn_dim);
    else
      ops::silu_multiply(gate, up, n * c.ffn_dim);
    project(w.down, gate, projected);
    if (!w.post_ffn_norm.empty())
      ops::rms_norm(projected, w.post_ffn_norm.data(), projected, n, D, c.rms_epsilon);
    ops::add_in_place(x, projected, n * D);
  }
}

void Model::forward(Sequence& seq, std::span<const int32_t> tokens, int64_t n_logits, float* logits,
                    ForwardObserver* observer) const {
  const Config& c = config_;
  const int64_t n = int64_t(tokens.size());
  const int64_t first_position = seq.n_past;
  if (n == 0) fail("forward pass over zero tokens");
  if (n_logits < 0 || n_logits > n) fail("{} logits requested from {} tokens", n_logits, n);
  if (first_position + n > seq.cache.capacity())
    fail("{} tokens exceed the context of {} positions", first_position + n, seq.cache.capacity());
  for (const int32_t token : tokens)
    if (token < 0 || token >= c.vocab_size) fail("token id {} is outside the vocabulary of {}", token, c.vocab_size);

  Stopwatch total_clock;
  double matmul_seconds = 0, attention_seconds = 0;
  // A weight product of all n rows at once, its time booked.
  int64_t rows = n;
  const Product project = [&](const ops::Weight& w, const float* in, float* out) {
    Stopwatch clock;
    ops::matmul(w, in, rows, out);
    matmul_seconds += clock.seconds();
  };
  Activations& a = seq.activations;
  reserve_rows(a, c, n);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) positions[size_t(t)] = first_position + t;

  embed(tokens, a.x.data());
  run_layers(
      positions, a, project,
      [&](int l, bool local, int strategy_layer) {
        seq.cache.write(l, first_position, n, a.k.data(), a.v.data());
        attention::Step step;
        step.layer = strategy_layer;
        step.phase = (n == 1 && first_position > 0) ? attention::Phase::Decode : attention::Phase::Prefill;
        step.queries = a.q.data();
        step.n_queries = n;
        step.first_position = first_position;
        step.cache = seq.cache.layer(l);
        step.output = a.attended.data();
        Stopwatch clock;
        (local ? seq.local_attention : seq.attention)->forward(step);
        attention_seconds += clock.seconds();
      },
      observer);
  seq.n_past += n;

  if (n_logits > 0) {
    rows = n_logits;
    output_head(a.x.data() + (n - n_logits) * c.d_model, n_logits, a.normed.data(), project, logits);
  }
  seq.time.matmul_seconds += matmul_seconds;
  seq.time.attention_seconds += attention_seconds;
  seq.time.total_seconds += total_clock.seconds();
}

void Model::decode(std::span<Sequence* const> seqs, std::span<const int32_t> tokens, float* logits,
                   Activations& scratch) const {
  const Config& c = config_;
  const int64_t n = int64_t(seqs.size());
  if (n == 0) return;
  if (int64_t(tokens.size()) != n) fail("decode: {} sequences but {} tokens", n, tokens.size());
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& seq = *seqs[size_t(i)];
    if (seq.n_past + 1 > seq.cache.capacity())
      fail("{} tokens exceed the context of {} positions", seq.n_past + 1, seq.cache.capacity());
    for (int64_t j = 0; j < i; ++j)
      if (seqs[size_t(j)] == seqs[size_t(i)]) fail("decode: a sequence appears twice in one step");
    const int32_t token = tokens[size_t(i)];
    if (token < 0 || token >= c.vocab_size) fail("token id {} is outside the vocabulary of {}", token, c.vocab_size);
  }

  Stopwatch total_clock;
  double matmul_seconds = 0;
  std::vector<double> attention_seconds(size_t(n), 0.0);
  // Products on all rows at once, each row's result independent of the others.
  const Product project = [&](const ops::Weight& w, const float* in, float* out) {
    Stopwatch clock;
    ops::matmul_per_token(w, in, n, out);
    matmul_seconds += clock.seconds();
  };
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, kv_dim = int64_t(c.n_kv_heads) * c.head_dim;
  Activations& a = scratch;
  reserve_rows(a, c, n);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[size_t(i)] = seqs[size_t(i)]->n_past;

  // K/V and attention of sequence i at one layer.
  const auto attend_one = [&](int64_t i, int l, bool local, int strategy_layer) {
    Sequence& seq = *seqs[size_t(i)];
    seq.cache.write(l, seq.n_past, 1, a.k.data() + i * kv_dim, a.v.data() + i * kv_dim);
    attention::Step step;
    step.layer = strategy_layer;
    step.phase = seq.n_past > 0 ? attention::Phase::Decode : attention::Phase::Prefill;
    step.queries = a.q.data() + i * q_dim;
    step.n_queries = 1;
    step.first_position = seq.n_past;
    step.cache = seq.cache.layer(l);
    step.output = a.attended.data() + i * q_dim;
    Stopwatch clock;
    (local ? seq.local_attention : seq.attention)->forward(step);
    attention_seconds[size_t(i)] += clock.seconds();
  };
  // With at least two sequences per thread, the sequences go to threads
  // (each strategy's own parallel loops then run on one thread: the results
  // do not depend on the thread count); fewer, each uses every thread.
  const bool across_sequences = n >= 2 * int64_t(std::max(1, omp_get_max_threads()));

  embed(tokens, a.x.data());
  run_layers(
      positions, a, project,
      [&](int l, bool local, int strategy_layer) {
        if (across_sequences) {
#pragma omp parallel for schedule(dynamic, 1)
          for (int64_t i = 0; i < n; ++i) attend_one(i, l, local, strategy_layer);
        } else {
          for (int64_t i = 0; i < n; ++i) attend_one(i, l, local, strategy_layer);
        }
      },
      nullptr);
  for (Sequence* seq : seqs) ++seq->n_past;
  output_head(a.x.data(), n, a.normed.data(), project, logits);

  // Each sequence books its share of the products and its own attention.
  const double total = total_clock.seconds();
  for (int64_t i = 0; i < n; ++i) {
    TimeSplit& time = seqs[size_t(i)]->time;
    time.matmul_seconds += matmul_seconds / double(n);
    time.attention_seconds += attention_seconds[size_t(i)];
    time.total_seconds += total / double(n);
  }
}

std::vector<float> Model::prefill(Sequence& seq, std::span<const int32_t> tokens,
                                  const std::function<void(int64_t)>& progress, int64_t chunk_size) const {
  if (tokens.empty()) fail("cannot prefill an empty prompt");
  const int64_t alignment = seq.attention->prefill_alignment();
  chunk_size = std::max(alignment, chunk_size / alignment * alignment);
  std::vector<float> logits(size_t(config_.vocab_size));
  const int64_t n = int64_t(tokens.size());
  for (int64_t done = 0; done < n;) {
    const int64_t count = std::min(chunk_size, n - done);
    const bool last_chunk = done + count == n;
    forward(seq, tokens.subspan(size_t(done), size_t(count)), last_chunk ? 1 : 0, logits.data());
    done += count;
    if (progress) progress(done);
  }
  return logits;
}

}  // namespace kascade::model
