// The CPU engine behind engine::Backend: model::Model's forward pass, one
// sequence at a time (a batched decode step runs its sequences in turn).
#include "core/error.h"
#include "engine/backend.h"

namespace kascade::engine {
namespace {

class CpuSequence final : public BackendSequence {
 public:
  explicit CpuSequence(model::Sequence seq) : seq(std::move(seq)) {}
  int64_t position() const override { return seq.n_past; }
  int64_t capacity() const override { return seq.cache.capacity(); }
  uint64_t kv_bytes() const override { return seq.cache.bytes(); }
  std::string_view attention_name() const override { return seq.attention->name(); }
  model::TimeSplit time() const override { return seq.time; }

  model::Sequence seq;
};

CpuSequence& cpu(BackendSequence& sequence) { return static_cast<CpuSequence&>(sequence); }
const CpuSequence& cpu(const BackendSequence& sequence) { return static_cast<const CpuSequence&>(sequence); }

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(model::Model model) : model_(std::move(model)) {}

  const model::Config& config() const override { return model_.config(); }
  const gguf::File& file() const override { return model_.file(); }
  std::string device_name() const override { return "CPU"; }

  std::unique_ptr<BackendSequence> new_sequence(const SequenceOptions& options) override {
    return std::make_unique<CpuSequence>(model_.new_sequence(
        options.capacity, options.kv_type,
        attention::make_strategy(options.attention, model_.config().attention_shape())));
  }

  std::vector<float> prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                             const std::function<void(int64_t)>& progress, int64_t chunk_size) override {
    return model_.prefill(cpu(sequence).seq, tokens, progress, chunk_size);
  }

  void decode(std::span<BackendSequence* const> sequences, std::span<const int32_t> tokens, float* logits) override {
    if (sequences.size() != tokens.size()) fail("decode: {} sequences but {} tokens", sequences.size(), tokens.size());
    const int64_t vocab = model_.config().vocab_size;
    for (size_t i = 0; i < sequences.size(); ++i)
      model_.forward(cpu(*sequences[i]).seq, tokens.subspan(i, 1), 1, logits + int64_t(i) * vocab);
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

 private:
  model::Model model_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const std::string& path) {
  return std::make_unique<CpuBackend>(model::Model::load(path));
}

}  // namespace kascade::engine
