// The GPU engine (see backend.h). Data flow of one step, for n tokens (a
// prefill chunk of one sequence, or one token of each of n sequences):
//   embed -> per layer: RMSNorm, QKV product, qkv_step (bias, Q/K norm,
//   RoPE, K/V into the paged cache), attention, O product added to the
//   residual, RMSNorm, gate/up product, gated activation, down product added
//   to the residual -> final RMSNorm -> logits of the last position(s).
#include "gpu/backend.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <numeric>
#include <span>

#include <fmt/format.h>

#include "core/error.h"
#include "core/half.h"
#include "core/timer.h"
#include "cuda/kascade_cuda.h"
#include "gpu/device.h"
#include "gpu/gemm.h"
#include "gpu/graph_cache.h"
#include "gpu/kv_pool.h"
#include "gpu/matrix.h"
#include "gpu/ops.h"
#include "kascade/plan.h"
#include "ops/matmul.h"

namespace kascade::gpu {
namespace {

namespace kc = kascade::cuda;
using engine::BackendSequence;

// ---------------------------------------------------------------------------
// Weights.

// An optional fp32 vector: no allocation when empty.
DeviceMemory upload_optional(const std::vector<float>& values, const char* what) {
  return values.empty() ? DeviceMemory() : upload(values, what);
}

struct Layer {
  DeviceStack qkv, gate_up;
  DeviceMatrix o, down;
  DeviceMemory attn_norm, ffn_norm, q_bias, k_bias, v_bias, q_norm, k_norm;
};

// ---------------------------------------------------------------------------
// Buffers of a step, grown to the largest step and reused.

template <typename T>
struct Buffer {
  DeviceMemory memory;
  T* get(int64_t count, const char* what) {
    const size_t bytes = size_t(std::max<int64_t>(count, 1)) * sizeof(T);
    if (memory.bytes() < bytes) memory = DeviceMemory(bytes, what);
    return memory.as<T>();
  }
};

// The buffers of one kind of step, n rows. Decode's are allocated once, for
// the largest batch, so that captured decode graphs keep valid pointers;
// prefill's grow to the longest prompt.
struct StepBuffers {
  Buffer<float> x, qkv, gate_up, logits;
  Buffer<uint16_t> normed, queries, attended, attended_bf16, activated;
  Buffer<uint16_t> contiguous_keys, contiguous_values;  // prefill
  Buffer<int> meta;                                      // tokens, positions, lengths, page table...
  Buffer<int> indices, counts;                            // Kascade index sets
  Buffer<int64_t> tile_offsets;
  kc::Workspace attention;

  size_t bytes() const {
    size_t total = attention.high_water();
    for (const DeviceMemory* m : {&x.memory, &qkv.memory, &gate_up.memory, &logits.memory, &normed.memory,
                                  &queries.memory, &attended.memory, &attended_bf16.memory, &activated.memory,
                                  &contiguous_keys.memory, &contiguous_values.memory, &meta.memory, &indices.memory,
                                  &counts.memory, &tile_offsets.memory})
      total += m->bytes();
    return total;
  }
};

// ---------------------------------------------------------------------------

class CudaBackend;

// What a selecting decode step does with its layers' selections
// (AttentionOptions::select_every): select afresh; select and keep the sets
// for the steps that hold them; or hold, attending each layer's kept sets
// (kascade_cuda.h, held_decode).
enum class Selection { Select, SelectAndKeep, Hold };

class CudaSequence final : public BackendSequence {
 public:
  CudaSequence(CudaBackend& owner, uint64_t id, std::vector<int> pages, int64_t capacity, Plan plan,
               int64_t step_keys_from, const int* head_maps);
  ~CudaSequence() override;

  int64_t position() const override { return position_; }
  int64_t capacity() const override { return capacity_; }
  uint64_t kv_bytes() const override;
  std::string_view attention_name() const override { return method_name(plan_.method()); }
  model::TimeSplit time() const override { return time_; }

  CudaBackend& owner_;
  uint64_t id_;  // unique in the backend: names the sequence in held selections
  std::vector<int> pages_;
  int64_t capacity_;
  int64_t position_ = 0;
  Plan plan_;
  int64_t step_keys_from_;  // sparse_decode_step's: sparse_step_keys, or 0 where sparse_from was set
  const int* head_maps_ = nullptr;  // the plan's flat_pools() on the device (the backend's copy)
  model::TimeSplit time_;
};

class CudaBackend final : public engine::Backend {
 public:
  CudaBackend(const std::string& path, const BackendOptions& options);
  ~CudaBackend() override {
    graphs_.clear();
    if (decode_meta_host_) cudaFreeHost(decode_meta_host_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  const model::Config& config() const override { return config_; }
  const gguf::File& file() const override { return file_; }
  std::string device_name() const override { return device_.name; }
  uint64_t decode_weight_bytes() const override { return decode_weight_bytes_; }

  std::unique_ptr<BackendSequence> new_sequence(const engine::SequenceOptions& options) override;
  std::vector<float> prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                             const std::function<void(int64_t)>& progress, int64_t chunk_size) override;
  void observe_prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                       const engine::PrefillObserver& observer) override;
  void decode(std::span<BackendSequence* const> sequences, std::span<const int32_t> tokens, float* logits) override;
  bool dense_prefill(const BackendSequence& sequence) const override {
    return static_cast<const CudaSequence&>(sequence).plan_.dense_prefill();
  }
  void copy_prefix(BackendSequence& to, const BackendSequence& from) override;

  int64_t kv_tokens_total() const override { return pool_->usable_pages() * options_.page_size; }
  int64_t kv_tokens_free() const override { return pool_->free_pages() * options_.page_size; }
  int64_t kv_tokens_for(int64_t capacity) const override {
    return (capacity + options_.page_size - 1) / options_.page_size * options_.page_size;
  }
  void limit_kv_tokens(int64_t tokens) override { pool_->limit(tokens / options_.page_size); }
  int64_t prefill_alignment(const BackendSequence& sequence) const override;
  int64_t min_prefill_chunk() const override { return options_.prefill_chunk; }
  // Sequences of one plan and one step rule share a decode step.
  std::string decode_group(const BackendSequence& sequence) const override {
    const auto& seq = static_cast<const CudaSequence&>(sequence);
    return fmt::format("{} step_keys={}", seq.plan_.key(), seq.step_keys_from_);
  }
  int64_t max_decode_batch() const override { return options_.max_batch; }
  std::string memory_report() const override {
    return fmt::format("GPU memory: weights {}, KV pages {} ({} tokens), buffers {}", gib(weight_bytes_),
                       gib(uint64_t(pool_->n_pages()) * pool_->page_bytes()), pool_->n_pages() * options_.page_size,
                       gib(blas_->workspace_bytes() + prefill_.bytes() + decode_.bytes() +
                           held_.indices.memory.bytes() + held_.counts.memory.bytes() +
                           held_.selected_lens.memory.bytes()));
  }

  KvPool& pool() { return *pool_; }

 private:
  // Refuses, with a message, what the GPU does not run.
  void check_supported(const Plan& plan) const;
  // Layer l's attention for the step, as the sequence's plan says: queries
  // and output fp16 [n][H][d].
  // n_keys: what the step's sparse-or-dense decision reads (plan.sparse).
  // selection: what a selecting decode step's anchors do (Selection).
  void attend(StepBuffers& b, int layer, const CudaSequence& seq, Phase phase, int64_t n_keys,
              const kc::AttentionArgs& args, Selection selection = Selection::Select);
  // The geometry of an attention call over `batch` sequences; a step sets its tensors.
  kc::AttentionArgs attention_args(int batch) const;
  // The products and elementwise steps around attention for rows [0, n).
  void project_qkv(StepBuffers& b, const Layer& w, int layer, float* x, int64_t n, const QkvStep& qkv_template);
  // A prefill; with an observer, each layer is shown to it (host copies, synchronous).
  std::vector<float> run_prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                                 const std::function<void(int64_t)>& progress, const engine::PrefillObserver* observer);
  struct ObservedLayer {
    std::vector<uint16_t> staging;
    std::vector<float> queries, keys, residual, attention_out;
  };
  void download_layer_input(const uint16_t* queries, const uint16_t* keys, const float* x, int64_t n, int64_t end,
                            ObservedLayer& observed);
  void show_layer(int layer, const float* x, int64_t n, int64_t end, ObservedLayer& observed,
                  const engine::PrefillObserver& observer);
  void add_attention(StepBuffers& b, const Layer& w, const uint16_t* attended, float* x, int64_t n);
  void feed_forward(StepBuffers& b, const Layer& w, float* x, int64_t n);
  float* logits_of_last(StepBuffers& b, const float* x_rows, int64_t n);
  // out = m (a stack's runs, or one matrix) times RMSNorm(x) rows (norm
  // weight `norm`); the norm writes the product's int8 input itself where the
  // product takes one (decode's quantized matrices).
  void norm_then_matmul(StepBuffers& b, const float* x, const DeviceMemory& norm, std::span<const Matrix> m,
                        int64_t n, float* out);
  // Every kernel of a decode step whose metadata is on the device.
  // plan_keys: the keys the plan's layer actions are read at, the longest
  // sequence's in a selecting step (sparse_decode_step), 0 (dense) otherwise.
  void decode_kernels(const CudaSequence& seq, int64_t batch, int64_t stride, int bucket, int64_t plan_keys,
                      Selection selection);
  // Whether a selecting step of these sequences holds the kept selections
  // (select_every), and if not, room to keep its own.
  Selection held_or_fresh(std::span<BackendSequence* const> sequences, int select_every);
  // Layer l's kept sets.
  kc::DecodeIndexSets held_sets(int layer) const;
  // The fields of a QkvStep fixed by the model and the page size; a step sets the rest.
  QkvStep model_qkv_step() const;
  void sync(const char* what) { check(cudaStreamSynchronize(stream_), what); }

  gguf::File file_;
  model::Config config_;
  BackendOptions options_;
  DeviceInfo device_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Blas> blas_;
  uint64_t weight_bytes_ = 0;  // on the device
  uint64_t decode_weight_bytes_ = 0;  // of them, what a decode step reads
  DeviceMatrix embedding_;
  DeviceMemory output_norm_, inverse_frequencies_;
  DeviceMatrix output_;  // empty when tied to the embedding
  Matrix output_view_;
  std::vector<Layer> layers_;
  std::unique_ptr<KvPool> pool_;
  StepBuffers prefill_, decode_;
  kc::PrefillIndexLayout prefill_layout_;
  int64_t decode_max_keys_ = 0;  // index-set stride of a decode step: budget of the largest capacity made
  int64_t max_pages_ = 0;        // pages a sequence can hold at the model's context
  int* decode_meta_host_ = nullptr;  // pinned: what a decode step uploads before its kernels
  // Decode steps as CUDA graphs, one per (batch, page-table stride, length
  // bucket, attention plan).
  GraphCache graphs_;
  // Head maps on the device, one copy per distinct Kascade plan.
  std::map<std::string, DeviceMemory> head_maps_;
  uint64_t next_sequence_id_ = 0;
  // The selections that held steps attend: every layer's sets from the last
  // step that kept them ([layer][batch][n_kv_heads][max_keys], counts
  // [layer][batch]) and the sequences' lengths then, for the sequences of
  // that step in its order. A step holds them only for the same sequences,
  // each one position on, up to select_every - 1 steps; any other step of
  // a selecting plan selects afresh.
  struct HeldSelections {
    Buffer<int> indices, counts, selected_lens;
    int64_t batch = 0, max_keys = 0;  // what the buffers are laid out for
    std::vector<uint64_t> sequences;  // ids, in batch order
    std::vector<int64_t> positions;   // at their last step
    int age = 0;                      // steps since the selection
    bool valid = false;
  } held_;
};

CudaSequence::CudaSequence(CudaBackend& owner, uint64_t id, std::vector<int> pages, int64_t capacity, Plan plan,
                           int64_t step_keys_from, const int* head_maps)
    : owner_(owner),
      id_(id),
      pages_(std::move(pages)),
      capacity_(capacity),
      plan_(std::move(plan)),
      step_keys_from_(step_keys_from),
      head_maps_(head_maps) {}

CudaSequence::~CudaSequence() { owner_.pool().give_back(pages_); }

uint64_t CudaSequence::kv_bytes() const { return pages_.size() * owner_.pool().page_bytes(); }

CudaSequence& on_gpu(BackendSequence& s) { return static_cast<CudaSequence&>(s); }

CudaBackend::CudaBackend(const std::string& path, const BackendOptions& options)
    : file_(gguf::File::open(path)), config_(model::read_config(file_)), options_(options), device_(device_info()) {
  const model::Config& c = config_;
  if (c.sliding_window > 0)
    fail("{}: {} has sliding-window layers, which the GPU engine does not run (use --device cpu)", path,
         c.architecture_name);
  if (c.d_model % 8 != 0 || c.ffn_dim % 8 != 0)
    fail("{}: d_model {} and the FFN width {} must be multiples of 8 for the GPU engine", path, c.d_model, c.ffn_dim);
  if (c.head_dim != 64 && c.head_dim != 128 && c.head_dim != 256)
    fail("{}: head dim {} is not one the GPU kernels take (64, 128, 256)", path, c.head_dim);
  if (options.page_size < 64 || (options.page_size & (options.page_size - 1)) != 0)
    fail("KV page size {} is not a power of two >= 64 (the key sketch's blocks)", options.page_size);
  const model::Weights weights = model::read_weights(file_, c);

  // Everything must fit before anything is uploaded: the stacks as the
  // device keeps them, and for quantized ones the buffer cuBLAS reads their
  // bf16 slices from (capped: a bigger matrix goes through in slices) and the
  // width of the inputs gemv quantizes.
  const bool tied_output = weights.output.data == weights.token_embedding.data;
  uint64_t weight_bytes = 0, decode_weight_bytes = 0;
  size_t dequantize_bytes = 0;
  int64_t quantized_cols = 0;
  const auto account = [&](const WeightParts& parts, bool read_at_decode) {
    const uint64_t bytes = stack_device_bytes(parts);
    weight_bytes += bytes;
    if (read_at_decode) decode_weight_bytes += bytes;
    for (const WeightParts& run : format_runs(parts)) {  // the quantized runs' buffers
      if (device_format(run) == MatrixFormat::BF16) continue;
      const int64_t rows = stacked_rows(run), cols = run.front()->cols;
      constexpr size_t kDequantizeCap = size_t(128) << 20;
      dequantize_bytes = std::max(dequantize_bytes, std::min(kDequantizeCap, size_t(rows) * size_t(cols) * 2));
      quantized_cols = std::max(quantized_cols, cols);
    }
  };
  account({&weights.token_embedding}, tied_output);  // gathered, unless it is the output matrix too
  if (!tied_output) account({&weights.output}, true);
  for (const model::LayerWeights& w : weights.layers) {
    account({&w.q, &w.k, &w.v}, true);
    account({&w.o}, true);
    account({&w.gate, &w.up}, true);
    account({&w.down}, true);
  }
  constexpr uint64_t kReserve = uint64_t(2) << 30;  // step buffers, cuBLAS, the CUDA context
  if (weight_bytes + dequantize_bytes + kReserve > device_.free_bytes)
    fail("{}: the weights need {} on the GPU (plus {} for buffers); {} has {} free of {}", path, gib(weight_bytes),
         gib(dequantize_bytes + kReserve), device_.name, gib(device_.free_bytes), gib(device_.total_bytes));
  weight_bytes_ = weight_bytes;
  decode_weight_bytes_ = decode_weight_bytes;

  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  blas_ = std::make_unique<Blas>(dequantize_bytes, quantized_cols);
  embedding_ = upload_matrix({&weights.token_embedding}, "the token embedding");
  output_norm_ = upload(weights.output_norm, "the output norm");
  if (!tied_output) output_ = upload_matrix({&weights.output}, "the output matrix");
  output_view_ = tied_output ? embedding_.view : output_.view;
  inverse_frequencies_ = upload(c.rope.inverse_frequencies, "RoPE frequencies");
  for (const model::LayerWeights& w : weights.layers) {
    Layer layer;
    layer.qkv = upload_stack({&w.q, &w.k, &w.v}, "QKV weights");
    layer.o = upload_matrix({&w.o}, "output projections");
    layer.gate_up = upload_stack({&w.gate, &w.up}, "FFN gate/up weights");
    layer.down = upload_matrix({&w.down}, "FFN down weights");
    layer.attn_norm = upload(w.attn_norm, "norms");
    layer.ffn_norm = upload(w.ffn_norm, "norms");
    layer.q_bias = upload_optional(w.q_bias, "biases");
    layer.k_bias = upload_optional(w.k_bias, "biases");
    layer.v_bias = upload_optional(w.v_bias, "biases");
    layer.q_norm = upload_optional(w.q_norm, "Q/K norms");
    layer.k_norm = upload_optional(w.k_norm, "Q/K norms");
    layers_.push_back(std::move(layer));
  }

  // The decode step buffers for the largest batch, then the KV pool from what is left.
  const int64_t B = options.max_batch;
  const int64_t width = int64_t(c.n_heads + 2 * c.n_kv_heads) * c.head_dim, q_dim = int64_t(c.n_heads) * c.head_dim;
  max_pages_ = (c.context_length + options.page_size - 1) / options.page_size;
  decode_.x.get(B * c.d_model, "decode buffers");
  decode_.qkv.get(B * width, "decode buffers");
  decode_.gate_up.get(B * 2 * c.ffn_dim, "decode buffers");
  decode_.logits.get(B * c.vocab_size, "decode buffers");
  decode_.normed.get(B * c.d_model, "decode buffers");
  decode_.queries.get(B * q_dim, "decode buffers");
  decode_.attended.get(B * q_dim, "decode buffers");
  decode_.attended_bf16.get(B * q_dim, "decode buffers");
  decode_.activated.get(B * c.ffn_dim, "decode buffers");
  decode_.meta.get(B * (4 + max_pages_), "decode buffers");
  decode_.counts.get(B, "decode buffers");
  check(cudaMallocHost(reinterpret_cast<void**>(&decode_meta_host_), size_t(B * (4 + max_pages_)) * sizeof(int)),
        "cudaMallocHost");
  size_t free_bytes = 0, total = 0;
  check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo");
  const uint64_t page_bytes = KvPool::page_bytes(c.n_layers, c.n_kv_heads, c.head_dim, options.page_size);
  const int64_t n_pages = int64_t(double(free_bytes) * options.kv_memory_fraction) / int64_t(page_bytes);
  if (n_pages < 1)
    fail("no GPU memory is left for the KV cache: {} free after the weights ({}), a page needs {}", gib(free_bytes),
         gib(weight_bytes), gib(page_bytes));
  pool_ = std::make_unique<KvPool>(c.n_layers, c.n_kv_heads, c.head_dim, options.page_size, n_pages);
}

void CudaBackend::check_supported(const Plan& plan) const {
  const AttentionOptions& o = plan.options();
  if (o.method != Method::Dense && o.method != Method::Kascade)
    fail("attention '{}' runs on the CPU only (--device cpu); the GPU runs dense and kascade", method_name(o.method));
  if (o.method == Method::Dense) return;
  const char* unsupported = o.refine_factor > 1      ? "refined reuse (--refine)"
                            : o.all_heads_pooled    ? "--all-heads-pooled"
                            : o.pre_softmax_pooling ? "--pre-softmax-pooling"
                            : o.fixed_budget        ? "--fixed-budget"
                            : o.own_tile_in_budget  ? "--own-tile-in-budget"
                                                    : nullptr;
  if (unsupported) fail("Kascade with {} runs on the CPU only (--device cpu)", unsupported);
  if (o.tile < 1 || o.tile > 1024) fail("the GPU's Kascade tile must be in [1, 1024], got {}", o.tile);
}

std::unique_ptr<BackendSequence> CudaBackend::new_sequence(const engine::SequenceOptions& options) {
  Plan plan(engine::with_engine_defaults(options.attention, kGpuSparseFrom, kGpuScoring), config_.attention_shape());
  check_supported(plan);
  if (options.capacity < 1 || options.capacity > config_.context_length)
    fail("context of {} tokens is outside the model's 1..{}", options.capacity, config_.context_length);
  const int* head_maps = nullptr;
  if (plan.sparse(Phase::Decode) || plan.sparse(Phase::Prefill)) {
    auto maps = head_maps_.find(plan.key());
    if (maps == head_maps_.end()) maps = head_maps_.emplace(plan.key(), upload(plan.flat_pools(), "head maps")).first;
    head_maps = maps->second.as<int>();
    // Decode index sets for this capacity, allocated now rather than at a token.
    // A step's length bucket may reach the end of the sequence's last page.
    const int64_t page_capacity = (options.capacity + options_.page_size - 1) / options_.page_size * options_.page_size;
    const int64_t max_keys = plan.max_keys(page_capacity);
    if (max_keys > decode_max_keys_) {
      decode_max_keys_ = max_keys;
      decode_.indices.get(int64_t(options_.max_batch) * config_.n_kv_heads * decode_max_keys_, "Kascade index sets");
      graphs_.clear();  // captured steps hold the old buffer
    }
  }
  const int64_t n_pages = (options.capacity + options_.page_size - 1) / options_.page_size;
  const int64_t step_keys_from =
      options.attention.sparse_from
          ? 0
          : sparse_step_keys(config_.n_kv_heads, config_.head_dim, plan.select_every(), device_.memory_bandwidth);
  return std::make_unique<CudaSequence>(*this, next_sequence_id_++, pool_->take(n_pages), options.capacity,
                                        std::move(plan), step_keys_from, head_maps);
}

void CudaBackend::copy_prefix(BackendSequence& to, const BackendSequence& from) {
  CudaSequence& target = on_gpu(to);
  const auto& source = static_cast<const CudaSequence&>(from);
  if (target.position_ != 0) fail("copy_prefix needs an empty sequence");
  if (target.capacity_ < source.position_)
    fail("copy_prefix: {} positions do not fit a sequence of {}", source.position_, target.capacity_);
  const int64_t pages = (source.position_ + options_.page_size - 1) / options_.page_size;
  pool_->copy(target.pages_, source.pages_, pages, stream_);
  sync("KV page copy");
  target.position_ = source.position_;
}

void CudaBackend::project_qkv(StepBuffers& b, const Layer& w, int layer, float* x, int64_t n,
                              const QkvStep& qkv_template) {
  norm_then_matmul(b, x, w.attn_norm, w.qkv.runs, n, b.qkv.memory.as<float>());
  QkvStep qkv = qkv_template;
  qkv.qkv = b.qkv.memory.as<float>();
  qkv.n = int(n);
  qkv.q_bias = w.q_bias.as<float>();
  qkv.k_bias = w.k_bias.as<float>();
  qkv.v_bias = w.v_bias.as<float>();
  qkv.q_norm = w.q_norm.as<float>();
  qkv.k_norm = w.k_norm.as<float>();
  qkv.key_pages = pool_->keys(layer);
  qkv.value_pages = pool_->values(layer);
  qkv_step(qkv, stream_);
}

void CudaBackend::add_attention(StepBuffers& b, const Layer& w, const uint16_t* attended, float* x, int64_t n) {
  // The attention output (fp16) into the O product, added to x.
  blas_->matmul(w.o.view, attended, n, x, 1.0f, stream_, true, b.attended_bf16.memory.as<uint16_t>());
}

void CudaBackend::feed_forward(StepBuffers& b, const Layer& w, float* x, int64_t n) {
  const model::Config& c = config_;
  norm_then_matmul(b, x, w.ffn_norm, w.gate_up.runs, n, b.gate_up.memory.as<float>());
  const bool gelu = c.feed_forward == model::FeedForward::GeluTanhGlu;
  if (blas_->takes_quantized_input(w.down.view, n)) {  // the activation writes the product's input
    gated_activation_quantized(b.gate_up.memory.as<float>(), int(n), c.ffn_dim, gelu, blas_->quantized_input(),
                               stream_);
    return blas_->matmul_quantized(w.down.view, n, x, 1.0f, stream_);
  }
  gated_activation(b.gate_up.memory.as<float>(), int(n), c.ffn_dim, gelu, b.activated.memory.as<uint16_t>(), stream_);
  blas_->matmul(w.down.view, b.activated.memory.as<uint16_t>(), n, x, 1.0f, stream_);
}

void CudaBackend::norm_then_matmul(StepBuffers& b, const float* x, const DeviceMemory& norm,
                                   std::span<const Matrix> m, int64_t n, float* out) {
  const model::Config& c = config_;
  if (blas_->takes_quantized_input(m, n)) {
    rms_norm_quantized(x, norm.as<float>(), int(n), c.d_model, c.rms_epsilon, blas_->quantized_input(), stream_);
    return blas_->matmul_quantized(m, n, out, 0.0f, stream_);
  }
  rms_norm(x, norm.as<float>(), int(n), c.d_model, c.rms_epsilon, b.normed.memory.as<uint16_t>(), stream_);
  blas_->matmul(m, b.normed.memory.as<uint16_t>(), n, out, 0.0f, stream_);
}

float* CudaBackend::logits_of_last(StepBuffers& b, const float* x_rows, int64_t n) {
  const model::Config& c = config_;
  float* logits = b.logits.get(n * c.vocab_size, "logits");
  norm_then_matmul(b, x_rows, output_norm_, std::span(&output_view_, 1), n, logits);
  if (c.final_logit_softcap > 0) soft_cap(logits, n * c.vocab_size, c.final_logit_softcap, stream_);
  return logits;
}

void CudaBackend::attend(StepBuffers& b, int layer, const CudaSequence& seq, Phase phase, int64_t n_keys,
                         const kc::AttentionArgs& args, Selection selection) {
  const Plan& plan = seq.plan_;
  const LayerPlan& step = plan.layer(phase, layer, n_keys);
  const bool prefill = phase == Phase::Prefill;
  const kc::Budget budget{step.budget_percent, plan.options().min_k};
  const int* head_map = seq.head_maps_ + int64_t(layer) * config_.n_kv_heads;
  // The step's index sets (a prefill's layout exists only in a sparse prefill).
  const auto prefill_sets = [&] {
    return kc::PrefillIndexSets{b.indices.memory.as<int>(), b.tile_offsets.memory.as<int64_t>(),
                                prefill_layout_.per_head(), int(plan.options().tile), prefill_layout_.first_tile};
  };
  const kc::DecodeIndexSets decode_sets =
      selection == Selection::Select ? kc::DecodeIndexSets{b.indices.memory.as<int>(), b.counts.memory.as<int>(),
                                                           decode_max_keys_}
                                     : held_sets(layer);
  switch (step.action) {
    case LayerAction::Dense:
      if (prefill) return kc::dense_prefill(args, nullptr, b.attention, stream_);
      return kc::dense_decode(args, nullptr, b.attention, stream_);
    case LayerAction::DenseAnchor:
    case LayerAction::Anchor: {
      const bool dense_output = step.action == LayerAction::DenseAnchor;
      if (prefill) return kc::anchor_prefill(args, budget, dense_output, prefill_sets(), b.attention, stream_);
      if (selection == Selection::Hold) {
        // A dense anchor's sets are for reuse layers, which a holding plan has not.
        if (dense_output) return kc::dense_decode(args, nullptr, b.attention, stream_);
        return kc::held_decode(args, decode_sets, held_.selected_lens.memory.as<int>(),
                               plan.select_every() - 1, b.attention, stream_);
      }
      kc::AttentionArgs scored = args;
      if (step.sketch) scored.key_sketch = pool_->sketch(layer);
      return kc::anchor_decode(scored, budget, dense_output, decode_sets, b.attention, stream_);
    }
    case LayerAction::Reuse:
      if (prefill) return kc::reuse_prefill(args, prefill_sets(), head_map, b.attention, stream_);
      return kc::reuse_decode(args, decode_sets, head_map, b.attention, stream_);
    case LayerAction::RefinedReuse: break;  // refused by check_supported
  }
  fail("the GPU has no kernel for layer {}'s action", layer);
}

kc::AttentionArgs CudaBackend::attention_args(int batch) const {
  kc::AttentionArgs args;
  args.dtype = kc::DType::F16;
  args.batch = batch;
  args.n_heads = config_.n_heads;
  args.n_kv_heads = config_.n_kv_heads;
  args.head_dim = config_.head_dim;
  return args;
}

// Kascade's sparse prefill selects per tile, so its chunks start on tiles;
// chunks on multiples of the kernels' exact multiple as well give the
// one-pass results bit for bit (kascade_cuda.h), which is preferred where
// that multiple is no bigger than a product chunk.
int64_t CudaBackend::prefill_alignment(const BackendSequence& sequence) const {
  const int64_t required = static_cast<const CudaSequence&>(sequence).plan_.prefill_alignment();
  const int64_t exact = std::lcm(required, int64_t(kc::prefill_exact_multiple(config_.n_heads, config_.n_kv_heads,
                                                                               config_.head_dim)));
  return exact <= options_.prefill_chunk ? exact : required;
}

// Positions [start, start + n) of a sequence that holds [0, start): the
// products in chunks of prefill_chunk rows, then per layer attention of the
// new rows over a contiguous copy of the keys and values [0, start + n) (the
// earlier positions gathered from the pages, the new ones written by the
// QKV step).
std::vector<float> CudaBackend::prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                                        const std::function<void(int64_t)>& progress, int64_t) {
  return run_prefill(sequence, tokens, progress, nullptr);
}

void CudaBackend::observe_prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                                  const engine::PrefillObserver& observer) {
  const CudaSequence& seq = on_gpu(sequence);
  if (seq.position_ != 0) fail("observe_prefill needs an empty sequence ({} positions held)", seq.position_);
  if (seq.plan_.method() != Method::Dense)
    fail("observe_prefill runs dense attention, not {}", method_name(seq.plan_.method()));
  run_prefill(sequence, tokens, {}, &observer);
}

// Host copies of what a layer's attention read, in fp32: every query of the
// chunk, every key so far, and the residual before the attention is added.
void CudaBackend::download_layer_input(const uint16_t* queries, const uint16_t* keys, const float* x, int64_t n,
                                       int64_t end, ObservedLayer& observed) {
  const model::Config& c = config_;
  const auto widen = [&](const uint16_t* device, int64_t count, std::vector<float>& out) {
    observed.staging.resize(size_t(count));
    check(cudaMemcpyAsync(observed.staging.data(), device, size_t(count) * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                          stream_),
          "observed layer download");
    sync("observed layer download");
    out.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) out[size_t(i)] = fp16_to_fp32(observed.staging[size_t(i)]);
  };
  widen(queries, n * c.n_heads * c.head_dim, observed.queries);
  widen(keys, int64_t(c.n_kv_heads) * end * c.head_dim, observed.keys);
  observed.residual.resize(size_t(n * c.d_model));
  check(cudaMemcpyAsync(observed.residual.data(), x, observed.residual.size() * sizeof(float), cudaMemcpyDeviceToHost,
                        stream_),
        "observed residual download");
  sync("observed residual download");
}

// The layer's attention output (x after the O product, less the residual) and the view of it.
void CudaBackend::show_layer(int layer, const float* x, int64_t n, int64_t end, ObservedLayer& observed,
                             const engine::PrefillObserver& observer) {
  observed.attention_out.resize(observed.residual.size());
  check(cudaMemcpyAsync(observed.attention_out.data(), x, observed.attention_out.size() * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "observed attention download");
  sync("observed attention download");
  for (size_t i = 0; i < observed.attention_out.size(); ++i) observed.attention_out[i] -= observed.residual[i];
  engine::PrefillLayerView view;
  view.layer = layer;
  view.first_position = end - n;
  view.n_tokens = n;
  view.queries = observed.queries.data();
  view.keys = observed.keys.data();
  view.key_capacity = end;
  view.residual = observed.residual.data();
  view.attention_out = observed.attention_out.data();
  observer(view);
}

std::vector<float> CudaBackend::run_prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                                            const std::function<void(int64_t)>& progress,
                                            const engine::PrefillObserver* observer) {
  CudaSequence& seq = on_gpu(sequence);
  const model::Config& c = config_;
  const int64_t n = int64_t(tokens.size()), start = seq.position_, end = start + n;
  if (n == 0) fail("cannot prefill an empty prompt");
  if (end > seq.capacity_)
    fail("{} tokens after {} exceed the context of {} positions", n, start, seq.capacity_);
  const Plan& plan = seq.plan_;
  if (start % plan.prefill_alignment() != 0)
    fail("Kascade's prefill continues a sequence on a tile boundary: {} positions held, tile {}", start,
         plan.prefill_alignment());
  for (const int32_t token : tokens)
    if (token < 0 || token >= c.vocab_size) fail("token id {} is outside the vocabulary of {}", token, c.vocab_size);
  Stopwatch clock;
  const int64_t q_dim = int64_t(c.n_heads) * c.head_dim, width = q_dim + 2 * int64_t(c.n_kv_heads) * c.head_dim;
  const int64_t chunk = std::min<int64_t>(n, options_.prefill_chunk);

  // Per-token metadata: tokens, positions, the sequence length, the page table.
  std::vector<int> meta;
  meta.insert(meta.end(), tokens.begin(), tokens.end());
  for (int64_t t = start; t < end; ++t) meta.push_back(int(t));
  meta.push_back(int(end));
  meta.insert(meta.end(), seq.pages_.begin(), seq.pages_.end());
  int* device_meta = prefill_.meta.get(int64_t(meta.size()), "step metadata");
  check(cudaMemcpyAsync(device_meta, meta.data(), meta.size() * sizeof(int), cudaMemcpyHostToDevice, stream_),
        "metadata upload");
  const int* device_tokens = device_meta;
  const int* positions = device_meta + n;
  const int* seq_len = device_meta + 2 * n;
  const int* page_table = device_meta + 2 * n + 1;

  float* x = prefill_.x.get(n * c.d_model, "prefill activations");
  prefill_.normed.get(chunk * c.d_model, "prefill activations");
  uint16_t* queries = prefill_.queries.get(n * q_dim, "prefill activations");
  uint16_t* attended = prefill_.attended.get(n * q_dim, "prefill activations");
  prefill_.qkv.get(chunk * width, "prefill activations");
  prefill_.attended_bf16.get(chunk * q_dim, "prefill activations");
  prefill_.gate_up.get(chunk * 2 * c.ffn_dim, "prefill activations");
  prefill_.activated.get(chunk * c.ffn_dim, "prefill activations");
  const int64_t kv_elements = int64_t(c.n_kv_heads) * end * c.head_dim;
  uint16_t* contiguous_keys = prefill_.contiguous_keys.get(kv_elements, "prefill keys");
  uint16_t* contiguous_values = prefill_.contiguous_values.get(kv_elements, "prefill values");
  if (plan.sparse(Phase::Prefill)) {
    prefill_layout_ = kc::prefill_index_layout(int(end), int(plan.options().tile),
                                               {plan.options().budget_percent, plan.options().min_k}, int(start));
    int64_t* offsets = prefill_.tile_offsets.get(int64_t(prefill_layout_.offsets.size()), "Kascade tile offsets");
    check(cudaMemcpyAsync(offsets, prefill_layout_.offsets.data(), prefill_layout_.offsets.size() * sizeof(int64_t),
                          cudaMemcpyHostToDevice, stream_),
          "tile offsets upload");
    prefill_.indices.get(int64_t(c.n_kv_heads) * prefill_layout_.per_head(), "Kascade index sets");
  }

  QkvStep qkv_template = model_qkv_step();
  qkv_template.page_table = page_table;
  qkv_template.page_table_stride = int64_t(seq.pages_.size());
  qkv_template.contiguous_keys = contiguous_keys;
  qkv_template.contiguous_values = contiguous_values;
  qkv_template.contiguous_capacity = end;

  kc::AttentionArgs args = attention_args(1);
  args.queries = queries;
  args.keys = contiguous_keys;
  args.values = contiguous_values;
  args.capacity = end;
  args.seq_lens = seq_len;
  args.max_seq_len = int(end);
  args.query_start = int(start);
  args.output = attended;

  gather_rows(embedding_.view, device_tokens, int(n), c.embedding_scale, x, stream_);
  ObservedLayer observed;
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& w = layers_[size_t(l)];
    if (start > 0)
      gather_kv_pages({pool_->keys(l), pool_->values(l), page_table, qkv_template.page_shift, c.n_kv_heads,
                       c.head_dim},
                      start, contiguous_keys, contiguous_values, end, stream_);
    for (int64_t c0 = 0; c0 < n; c0 += chunk) {
      const int64_t rows = std::min(chunk, n - c0);
      QkvStep qkv = qkv_template;
      qkv.positions = positions + c0;
      qkv.queries = queries + c0 * q_dim;
      project_qkv(prefill_, w, l, x + c0 * c.d_model, rows, qkv);
    }
    attend(prefill_, l, seq, Phase::Prefill, end, args);
    if (observer) download_layer_input(queries, contiguous_keys, x, n, end, observed);
    for (int64_t c0 = 0; c0 < n; c0 += chunk)
      add_attention(prefill_, w, attended + c0 * q_dim, x + c0 * c.d_model, std::min(chunk, n - c0));
    if (observer) show_layer(l, x, n, end, observed, *observer);
    for (int64_t c0 = 0; c0 < n; c0 += chunk) feed_forward(prefill_, w, x + c0 * c.d_model, std::min(chunk, n - c0));
    if (progress) {
      sync("prefill layer");
      progress(n * (l + 1) / c.n_layers);
    }
  }
  // The key sketch of the blocks this chunk completed, every layer (kept for
  // every plan, so that a prefix copied to another sequence carries it).
  kc::AttentionArgs paged = attention_args(1);
  paged.seq_lens = seq_len;
  paged.page_table = page_table;
  paged.page_size = options_.page_size;
  paged.page_table_stride = int64_t(seq.pages_.size());
  paged.capacity = paged.page_table_stride * options_.page_size;
  kc::sketch_keys(paged, int(n), pool_->device_layer_keys(), pool_->device_layer_sketches(), c.n_layers, stream_);
  const float* logits = logits_of_last(prefill_, x + (n - 1) * c.d_model, 1);
  std::vector<float> host(size_t(c.vocab_size));
  check(cudaMemcpyAsync(host.data(), logits, host.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "logits download");
  sync("prefill");
  seq.position_ = end;
  seq.time_.total_seconds += clock.seconds();
  return host;
}

QkvStep CudaBackend::model_qkv_step() const {
  const model::Config& c = config_;
  QkvStep step;
  step.n_heads = c.n_heads;
  step.n_kv_heads = c.n_kv_heads;
  step.head_dim = c.head_dim;
  step.norm_epsilon = c.rms_epsilon;
  step.inverse_frequencies = inverse_frequencies_.as<float>();
  step.rope_dim = c.rope.rope_dim;
  step.interleaved_rope = c.rope.style == ops::RopeStyle::Interleaved;
  step.query_scale = c.query_scale;
  step.page_shift = std::countr_zero(unsigned(options_.page_size));
  return step;
}

// Reads the metadata decode() uploaded to decode_.meta: tokens [B], positions
// [B], lengths [B], the sequence of each row [B], the page table [B][stride].
void CudaBackend::decode_kernels(const CudaSequence& seq, int64_t B, int64_t stride, int bucket, int64_t plan_keys,
                                 Selection selection) {
  const model::Config& c = config_;
  const int* meta = decode_.meta.memory.as<int>();
  float* x = decode_.x.memory.as<float>();
  QkvStep qkv_template = model_qkv_step();
  qkv_template.positions = meta + B;
  qkv_template.sequence_of = meta + 3 * B;
  qkv_template.page_table = meta + 4 * B;
  qkv_template.page_table_stride = stride;
  qkv_template.queries = decode_.queries.memory.as<uint16_t>();

  // max_seq_len is the length bucket: the kernels size grids and splits from
  // it and read each sequence's own length from seq_lens, so one captured
  // step serves every length in the bucket.
  kc::AttentionArgs args = attention_args(int(B));
  args.queries = decode_.queries.memory.as<uint16_t>();
  args.capacity = stride * options_.page_size;
  args.seq_lens = meta + 2 * B;
  args.max_seq_len = bucket;
  args.output = decode_.attended.memory.as<uint16_t>();
  args.page_table = meta + 4 * B;
  args.page_size = options_.page_size;
  args.page_table_stride = stride;

  gather_rows(embedding_.view, meta, int(B), c.embedding_scale, x, stream_);
  if (selection == Selection::SelectAndKeep)
    check(cudaMemcpyAsync(held_.selected_lens.memory.data(), args.seq_lens, size_t(B) * sizeof(int),
                          cudaMemcpyDeviceToDevice, stream_),
          "held lengths copy");
  for (int l = 0; l < c.n_layers; ++l) {
    const Layer& w = layers_[size_t(l)];
    project_qkv(decode_, w, l, x, B, qkv_template);
    args.keys = pool_->keys(l);
    args.values = pool_->values(l);
    attend(decode_, l, seq, Phase::Decode, plan_keys, args, selection);
    add_attention(decode_, w, decode_.attended.memory.as<uint16_t>(), x, B);
    feed_forward(decode_, w, x, B);
  }
  // The sketch of each block the step's key completed, for the steps after it.
  kc::sketch_keys(args, 1, pool_->device_layer_keys(), pool_->device_layer_sketches(), c.n_layers, stream_);
  logits_of_last(decode_, x, B);
}

void CudaBackend::decode(std::span<BackendSequence* const> sequences, std::span<const int32_t> tokens, float* logits) {
  const model::Config& c = config_;
  const int64_t B = int64_t(sequences.size());
  if (B == 0) return;
  if (int64_t(tokens.size()) != B) fail("decode: {} sequences but {} tokens", B, tokens.size());
  if (B > options_.max_batch) fail("decode batch of {} exceeds the engine's maximum of {}", B, options_.max_batch);
  Stopwatch clock;
  const CudaSequence& first = on_gpu(*sequences[0]);
  int64_t stride = 0, max_len = 0, step_keys = 0;
  for (BackendSequence* s : sequences) {
    const CudaSequence& seq = on_gpu(*s);
    if (seq.position_ < 1) fail("decode needs a prefilled sequence");
    if (seq.position_ >= seq.capacity_) fail("sequence is full ({} positions)", seq.capacity_);
    if (decode_group(seq) != decode_group(first))
      fail("sequences batched in one decode step must share their attention settings");
    stride = std::max<int64_t>(stride, int64_t(seq.pages_.size()));
    max_len = std::max(max_len, seq.position_ + 1);
    step_keys += seq.position_ + 1;
  }
  for (const int32_t token : tokens)
    if (token < 0 || token >= c.vocab_size) fail("token id {} is outside the vocabulary of {}", token, c.vocab_size);

  int* meta = decode_meta_host_;
  const int64_t meta_count = 4 * B + B * stride;
  std::fill(meta, meta + meta_count, 0);
  for (int64_t b = 0; b < B; ++b) {
    const CudaSequence& seq = on_gpu(*sequences[size_t(b)]);
    meta[b] = tokens[size_t(b)];
    meta[B + b] = int(seq.position_);
    meta[2 * B + b] = int(seq.position_ + 1);
    meta[3 * B + b] = int(b);
    std::copy(seq.pages_.begin(), seq.pages_.end(), meta + 4 * B + b * stride);
  }
  check(cudaMemcpyAsync(decode_.meta.memory.data(), meta, size_t(meta_count) * sizeof(int), cudaMemcpyHostToDevice,
                        stream_),
        "metadata upload");

  constexpr int64_t kBucket = 2048;
  const int bucket = int(std::min(stride * options_.page_size, (max_len + kBucket - 1) / kBucket * kBucket));
  // A step's layers are sparse or dense by its longest sequence and its keys
  // together (sparse_decode_step), which the key therefore names.
  const bool sparse = sparse_decode_step(first.plan_, max_len, step_keys, first.step_keys_from_);
  const int select_every = first.plan_.select_every();
  const Selection selection = sparse && select_every > 1 ? held_or_fresh(sequences, select_every) : Selection::Select;
  if (selection == Selection::Select) held_.valid = false;
  graphs_.run(
      fmt::format("{} {} {} {} {} {}", B, stride, bucket, sparse, int(selection), first.plan_.key()), stream_,
      [&] { decode_kernels(first, B, stride, bucket, sparse ? max_len : 0, selection); },
      [&] { return decode_.attention.high_water(); });
  check(cudaMemcpyAsync(logits, decode_.logits.memory.data(), size_t(B) * c.vocab_size * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "logits download");
  sync("decode");
  const double seconds = clock.seconds();
  for (BackendSequence* s : sequences) {
    CudaSequence& seq = on_gpu(*s);
    ++seq.position_;
    seq.time_.total_seconds += seconds;
  }
}

Selection CudaBackend::held_or_fresh(std::span<BackendSequence* const> sequences, int select_every) {
  const size_t B = sequences.size();
  bool hold = held_.valid && held_.age + 1 < select_every && held_.sequences.size() == B;
  for (size_t b = 0; hold && b < B; ++b) {
    const CudaSequence& seq = on_gpu(*sequences[b]);
    hold = seq.id_ == held_.sequences[b] && seq.position_ == held_.positions[b] + 1;
  }
  held_.sequences.resize(B);
  held_.positions.resize(B);
  for (size_t b = 0; b < B; ++b) {
    held_.sequences[b] = on_gpu(*sequences[b]).id_;
    held_.positions[b] = on_gpu(*sequences[b]).position_;
  }
  if (hold) {
    ++held_.age;
    return Selection::Hold;
  }
  // Room for this step's sets; moving the buffers drops the graphs that hold them.
  if (held_.batch < int64_t(B) || held_.max_keys < decode_max_keys_) {
    held_.batch = std::max(held_.batch, int64_t(B));
    held_.max_keys = decode_max_keys_;
    const int64_t layers = config_.n_layers;
    held_.indices.get(layers * held_.batch * config_.n_kv_heads * held_.max_keys, "held Kascade selections");
    held_.counts.get(layers * held_.batch, "held Kascade selections");
    held_.selected_lens.get(held_.batch, "held Kascade selections");
    graphs_.clear();
  }
  held_.age = 0;
  held_.valid = true;
  return Selection::SelectAndKeep;
}

kc::DecodeIndexSets CudaBackend::held_sets(int layer) const {
  const int64_t per_layer = held_.batch * config_.n_kv_heads * held_.max_keys;
  return {held_.indices.memory.as<int>() + layer * per_layer, held_.counts.memory.as<int>() + layer * held_.batch,
          held_.max_keys};
}

}  // namespace

int64_t sparse_step_keys(int64_t n_kv_heads, int64_t head_dim, int select_every, double memory_bandwidth) {
  const int64_t width = n_kv_heads * head_dim;
  const double ratio = memory_bandwidth / kGpuSparseRuleBandwidth;
  const double scale = ratio > 1.1 ? ratio : 1.0;
  const int64_t elements = select_every > 1 ? kGpuHeldStepKeyElements : kGpuSparseStepKeyElements;
  return int64_t(std::ceil(double(elements) * scale / double(width)));
}

bool sparse_decode_step(const Plan& plan, int64_t longest, int64_t step_keys, int64_t step_keys_from) {
  return plan.sparse(Phase::Decode, longest) && step_keys >= step_keys_from;
}

std::unique_ptr<engine::Backend> make_cuda_backend(const std::string& path, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(path, options);
}

}  // namespace kascade::gpu
