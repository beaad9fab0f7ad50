// The CPU engine behind engine::Backend: model::Model's forward pass. A
// batched decode step runs the weight products of all its sequences together
// (Model::decode); prefill continues a sequence from any position, so a
// scheduler can prefill long prompts in chunks between decode steps.
//
// KV memory: each sequence allocates its cache at its capacity (pages are
// touched as positions fill). The backend counts the tokens live sequences
// reserved against a budget: what half of the memory available at load time
// holds, unless limit_kv_tokens lowers it.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>

#include "attention/strategies.h"
#include "core/error.h"
#include "engine/backend.h"

namespace kascade::engine {
namespace {

// MemAvailable of /proc/meminfo in bytes (0 when unreadable).
uint64_t available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kilobytes = 0;
  std::string unit;
  while (meminfo >> key >> kilobytes >> unit)
    if (key == "MemAvailable:") return kilobytes * 1024;
  return 0;
}

// Reserved KV tokens, shared by the backend and its sequences (which may
// outlive nothing but are destroyed on other threads than the one counting).
struct KvAccount {
  std::atomic<int64_t> used{0};
  std::atomic<int64_t> limit{0};
  int64_t total = 0;
};

class CpuSequence final : public BackendSequence {
 public:
  CpuSequence(model::Sequence seq, std::shared_ptr<KvAccount> account, int64_t reserved)
      : seq(std::move(seq)), account_(std::move(account)), reserved_(reserved) {}
  ~CpuSequence() override { account_->used -= reserved_; }
  int64_t position() const override { return seq.n_past; }
  int64_t capacity() const override { return seq.cache.capacity(); }
  uint64_t kv_bytes() const override { return seq.cache.bytes(); }
  std::string_view attention_name() const override { return seq.attention->name(); }
  model::TimeSplit time() const override { return seq.time; }

  model::Sequence seq;

 private:
  std::shared_ptr<KvAccount> account_;
  int64_t reserved_;
};

CpuSequence& cpu(BackendSequence& sequence) { return static_cast<CpuSequence&>(sequence); }
const CpuSequence& cpu(const BackendSequence& sequence) { return static_cast<const CpuSequence&>(sequence); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(model::Model model) : model_(std::move(model)), account_(std::make_shared<KvAccount>()) {
    const model::Config& c = model_.config();
    const uint64_t token_bytes = uint64_t(c.n_layers) * c.n_kv_heads * c.head_dim * 2 * 2;  // fp16 K + V
    const int64_t memory_tokens = int64_t(available_memory() / 2 / token_bytes);
    // At least one full context, whatever /proc/meminfo said.
    account_->total = std::max<int64_t>(memory_tokens, c.context_length);
    account_->limit = account_->total;
  }

  const model::Config& config() const override { return model_.config(); }
  const gguf::File& file() const override { return model_.file(); }
  std::string device_name() const override { return "CPU"; }
  uint64_t decode_weight_bytes() const override {
    const gguf::File& file = model_.file();
    uint64_t bytes = 0;
    for (const gguf::TensorInfo& t : file.tensors())
      if (t.dims.size() == 2 && t.name != "token_embd.weight") bytes += t.n_bytes;
    if (!file.find_tensor("output.weight")) bytes += file.tensor("token_embd.weight").n_bytes;  // tied
    return bytes;
  }

  std::unique_ptr<BackendSequence> new_sequence(const SequenceOptions& options) override {
    const int64_t capacity = options.capacity;
    std::unique_ptr<attention::Strategy> strategy = attention::make_strategy(
        with_engine_defaults(options.attention, kCpuSparseFrom, kCpuScoring), model_.config().attention_shape());
    model::Sequence seq = model_.new_sequence(capacity, options.kv_type, std::move(strategy));
    const int64_t used = account_->used.fetch_add(capacity) + capacity;
    if (used > account_->limit) {
      account_->used -= capacity;
      fail("the KV budget has {} free tokens, a sequence needs {}: end other sequences or ask for less context",
           account_->limit - (used - capacity), capacity);
    }
    return std::make_unique<CpuSequence>(std::move(seq), account_, capacity);
  }

  std::vector<float> prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                             const std::function<void(int64_t)>& progress, int64_t chunk_size) override {
    return model_.prefill(cpu(sequence).seq, tokens, progress, chunk_size);
  }

  void decode(std::span<BackendSequence* const> sequences, std::span<const int32_t> tokens, float* logits) override {
    if (sequences.size() != tokens.size()) fail("decode: {} sequences but {} tokens", sequences.size(), tokens.size());
    batch_.clear();
    for (BackendSequence* s : sequences) batch_.push_back(&cpu(*s).seq);
    model_.decode(batch_, tokens, logits, activations_);
  }

  bool dense_prefill(const BackendSequence& sequence) const override {
    return cpu(sequence).seq.attention->dense_prefill();
  }

  void copy_prefix(BackendSequence& to, const BackendSequence& from) override {
    model::Sequence& target = cpu(to).seq;
    const model::Sequence& source = cpu(from).seq;
    if (target.n_past != 0) fail("copy_prefix needs an empty sequence");
    target.cache.copy_prefix(source.cache, source.n_past);
    target.n_past = source.n_past;
  }

  int64_t kv_tokens_total() const override { return account_->limit; }
  int64_t kv_tokens_free() const override { return std::max<int64_t>(0, account_->limit - account_->used); }
  void limit_kv_tokens(int64_t tokens) override {
    account_->limit = std::clamp<int64_t>(tokens, 0, account_->total);
  }
  int64_t prefill_alignment(const BackendSequence& sequence) const override {
    return cpu(sequence).seq.attention->prefill_alignment();
  }

 private:
  model::Model model_;
  std::shared_ptr<KvAccount> account_;
  std::vector<model::Sequence*> batch_;
  model::Activations activations_;  // a decode step's rows, reused
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const std::string& path) {
  return std::make_unique<CpuBackend>(model::Model::load(path));
}

}  // namespace kascade::engine
