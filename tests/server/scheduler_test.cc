// engine::Scheduler and Model::decode on the default model: batched decode
// gives each sequence the numbers it gets alone, the scheduler's output
// equals engine::generate's, and admission, queue bounds, KV accounting and
// cancellation behave as scheduler.h says.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <thread>

#include <gtest/gtest.h>
#include <omp.h>

#include "core/error.h"
#include "core/model_cache.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/scheduler.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "ops/threading.h"
#include "tokenizer/tokenizer.h"

namespace kascade {
namespace {

using engine::GenerationResult;
using engine::Request;
using engine::Scheduler;

class SchedulerOnModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model_path())) return;
    ops::configure_threads(2);
    backend_ = engine::make_cpu_backend(default_model_path()).release();
    tokenizer_ = new tokenizer::Tokenizer(backend_->file());
    profile_ = new KascadeProfile(
        model::resolve_profile("", default_model_path(), backend_->config(), backend_->file(), true));
  }
  static void TearDownTestSuite() {
    delete profile_;
    delete tokenizer_;
    delete backend_;
  }
  void SetUp() override {
    if (!backend_) GTEST_SKIP() << "default model not found at " << default_model_path();
    backend_->limit_kv_tokens(INT64_MAX);
  }

  static AttentionOptions strategy(const std::string& name) {
    AttentionOptions options;
    set_attention_option(options, "attention", name);
    if (name == "kascade") options.profile = *profile_;
    options.min_k = 16;  // sparse already at these short lengths
    return options;
  }
  static std::vector<int32_t> tokens(const std::string& text) { return tokenizer_->encode(text, true, false); }

  // engine::generate alone on a fresh sequence.
  static GenerationResult alone(const Request& r) {
    auto seq = backend_->new_sequence({r.capacity ? r.capacity : int64_t(r.prompt.size()) + r.options.max_new_tokens,
                                       r.attention, attention::KvType::F16});
    return engine::generate(*backend_, *tokenizer_, *seq, r.prompt, r.options);
  }

  static Request request(const std::string& text, const std::string& attention, int64_t max_new,
                         float temperature = 0.0f, uint64_t seed = 0) {
    Request r;
    r.prompt = tokens(text);
    r.options.max_new_tokens = max_new;
    r.options.sampling = sampling::SamplerOptions{.temperature = temperature, .seed = seed};
    r.attention = strategy(attention);
    return r;
  }

  static engine::Backend* backend_;
  static tokenizer::Tokenizer* tokenizer_;
  static KascadeProfile* profile_;
};
engine::Backend* SchedulerOnModel::backend_ = nullptr;
tokenizer::Tokenizer* SchedulerOnModel::tokenizer_ = nullptr;
KascadeProfile* SchedulerOnModel::profile_ = nullptr;

// One batched decode call gives every sequence bit for bit the logits of a
// decode of that sequence alone, at different positions and strategies, also
// above the matmul's sgemm threshold.
TEST_F(SchedulerOnModel, BatchedDecodeEqualsEachAlone) {
  const int64_t vocab = backend_->config().vocab_size;
  const std::vector<std::string> names = {"dense", "kascade"};
  const int n = 17;
  std::vector<std::unique_ptr<engine::BackendSequence>> batched, single;
  std::vector<engine::BackendSequence*> batch;
  std::vector<int32_t> next;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt = tokens(fmt::format("Sequence {} counts: {}", i, std::string(size_t(i * 7), 'a')));
    for (auto* list : {&batched, &single}) {
      list->push_back(backend_->new_sequence({int64_t(prompt.size()) + 4, strategy(names[size_t(i) % 2]),
                                              attention::KvType::F16}));
      backend_->prefill(*list->back(), prompt, {}, 512);
    }
    batch.push_back(batched.back().get());
    next.push_back(int32_t(100 + i));
  }
  for (int step = 0; step < 2; ++step) {
    std::vector<float> together(size_t(n * vocab));
    std::vector<float> one(static_cast<size_t>(vocab));
    backend_->decode(batch, next, together.data());
    for (int i = 0; i < n; ++i) {
      engine::BackendSequence* s[1] = {single[size_t(i)].get()};
      const int32_t t[1] = {next[size_t(i)]};
      backend_->decode(s, t, one.data());
      ASSERT_EQ(0, std::memcmp(one.data(), together.data() + i * vocab, size_t(vocab) * sizeof(float)))
          << "sequence " << i << " step " << step;
      EXPECT_EQ(batched[size_t(i)]->position(), single[size_t(i)]->position());
    }
  }
}

// Requests run together give what each gives alone through engine::generate
// (greedy and seeded sampling, dense and Kascade, a stop string).
TEST_F(SchedulerOnModel, ConcurrentRequestsEqualGenerateAlone) {
  std::vector<Request> requests = {
      request("The capital of France is", "dense", 12),
      request("Once upon a time", "kascade", 10, 0.8f, 7),
      request("1, 2, 3, 4,", "dense", 16),
      request("Water boils at", "kascade", 9),
      request("My favourite colour is", "dense", 11, 1.0f, 3),
  };
  requests[2].options.stop_strings = {" 9"};
  std::vector<GenerationResult> expected;
  for (const Request& r : requests) expected.push_back(alone(r));

  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 8, .max_queued = 8, .prefill_chunk = 512});
  std::vector<GenerationResult> got(requests.size());
  std::vector<std::string> streamed(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Request r = requests[i];
    r.on_text = [&, i](const std::string& piece) { streamed[i] += piece; };
    r.on_finish = [&, i](const GenerationResult& result) { got[i] = result; };
    ASSERT_EQ(scheduler.submit(std::move(r)).status, Scheduler::Submitted::Queued);
  }
  scheduler.run_until_idle();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i].tokens, expected[i].tokens) << i;
    EXPECT_EQ(got[i].text, expected[i].text) << i;
    EXPECT_EQ(streamed[i], expected[i].text) << i;
    EXPECT_EQ(got[i].stop_reason, expected[i].stop_reason) << i;
    EXPECT_EQ(got[i].prompt_tokens, int64_t(requests[i].prompt.size()));
  }
  EXPECT_EQ(got[2].stop_reason, "stop string");
  const engine::SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.finished, requests.size());
  EXPECT_EQ(stats.running, 0);
  EXPECT_EQ(stats.kv_tokens_used, 0);
  // Several sequences shared decode calls.
  EXPECT_LT(stats.decode_calls, stats.generated_tokens);
}

// A long prompt goes in chunks between the decode steps of a running
// request, and gives what a one-request prefill with the same chunks gives.
TEST_F(SchedulerOnModel, ChunkedPrefillInterleavesWithDecode) {
  std::string long_text;
  for (int i = 0; i < 32; ++i) long_text += fmt::format("Line {} of a long prompt. ", i);
  Request long_request = request(long_text, "kascade", 6);
  long_request.options.prefill_chunk = 64;
  ASSERT_GT(long_request.prompt.size(), 256u);
  Request short_request = request("Count with me: one, two,", "dense", 24);
  const GenerationResult expected_long = alone(long_request), expected_short = alone(short_request);

  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 2, .max_queued = 2, .prefill_chunk = 64});
  GenerationResult got_long, got_short;
  int64_t short_tokens = 0;
  std::vector<int64_t> short_tokens_at_chunk;
  short_request.on_text = [&](const std::string&) { ++short_tokens; };
  short_request.on_finish = [&](const GenerationResult& r) { got_short = r; };
  long_request.on_prefill = [&](int64_t, int64_t) { short_tokens_at_chunk.push_back(short_tokens); };
  long_request.on_finish = [&](const GenerationResult& r) { got_long = r; };
  scheduler.submit(short_request);
  scheduler.step();  // the short one is prefilled and decoding
  scheduler.submit(long_request);
  scheduler.run_until_idle();
  EXPECT_EQ(got_long.tokens, expected_long.tokens);
  EXPECT_EQ(got_short.tokens, expected_short.tokens);
  ASSERT_GE(short_tokens_at_chunk.size(), 4u);
  // The short request kept generating while the long prompt went in.
  EXPECT_GT(short_tokens_at_chunk.back(), short_tokens_at_chunk.front());
}

TEST_F(SchedulerOnModel, QueueIsBounded) {
  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 1, .max_queued = 1});
  int finished = 0;
  auto make = [&] {
    Request r = request("Hello", "dense", 2);
    r.on_finish = [&](const GenerationResult&) { ++finished; };
    return r;
  };
  EXPECT_EQ(scheduler.submit(make()).status, Scheduler::Submitted::Queued);
  EXPECT_EQ(scheduler.submit(make()).status, Scheduler::Submitted::Queued);
  EXPECT_EQ(scheduler.submit(make()).status, Scheduler::Submitted::QueueFull);
  EXPECT_EQ(scheduler.stats().rejected, 1u);
  scheduler.run_until_idle();
  EXPECT_EQ(finished, 2);
  EXPECT_EQ(scheduler.submit(make()).status, Scheduler::Submitted::Queued);
  scheduler.close();
  EXPECT_EQ(scheduler.submit(make()).status, Scheduler::Submitted::Stopping);
  scheduler.run_until_idle();
  EXPECT_EQ(finished, 3);
}

// Requests wait for KV memory: with room for one, two run one after the other.
TEST_F(SchedulerOnModel, AdmissionWaitsForKvMemory) {
  Request first = request("Tell me a story", "dense", 8), second = request("Tell me a joke", "dense", 8);
  first.capacity = second.capacity = 64;
  backend_->limit_kv_tokens(100);
  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 4, .max_queued = 4});
  std::vector<std::string> events;
  first.on_prefill = [&](int64_t, int64_t) { events.push_back("first prefill"); };
  first.on_finish = [&](const GenerationResult&) { events.push_back("first done"); };
  second.on_prefill = [&](int64_t, int64_t) { events.push_back("second prefill"); };
  second.on_finish = [&](const GenerationResult& r) { events.push_back("second done " + r.stop_reason); };
  scheduler.submit(first);
  scheduler.submit(second);
  scheduler.step();
  EXPECT_EQ(scheduler.stats().running, 1);
  EXPECT_EQ(scheduler.stats().queued, 1);
  EXPECT_EQ(scheduler.stats().kv_tokens_used, 64);
  scheduler.run_until_idle();
  EXPECT_EQ(events, (std::vector<std::string>{"first prefill", "first done", "second prefill",
                                              "second done token limit"}));
  EXPECT_EQ(backend_->kv_tokens_free(), 100);
  // A context over all of the KV memory is refused at once.
  Request huge = request("Hi", "dense", 8);
  huge.capacity = 200;
  EXPECT_THROW(scheduler.submit(huge), Error);
}

TEST_F(SchedulerOnModel, CancelFreesTheSequenceAtOnce) {
  const int64_t free_before = backend_->kv_tokens_free();
  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 2, .max_queued = 2});
  GenerationResult running_result, queued_result;
  int64_t streamed = 0;
  Request running = request("Write a long essay about rivers.", "dense", 200);
  running.on_text = [&](const std::string&) { ++streamed; };
  running.on_finish = [&](const GenerationResult& r) { running_result = r; };
  const uint64_t id = scheduler.submit(running).id;
  for (int i = 0; i < 4; ++i) scheduler.step();
  EXPECT_LT(backend_->kv_tokens_free(), free_before);
  scheduler.cancel(id);
  scheduler.step();
  EXPECT_EQ(running_result.stop_reason, "cancelled");
  EXPECT_GT(streamed, 0);
  EXPECT_EQ(backend_->kv_tokens_free(), free_before);
  EXPECT_EQ(scheduler.stats().cancelled, 1u);
  // A queued request can be cancelled too.
  Request queued = request("Hi", "dense", 4);
  queued.on_finish = [&](const GenerationResult& r) { queued_result = r; };
  scheduler.cancel(scheduler.submit(queued).id);
  scheduler.run_until_idle();
  EXPECT_EQ(queued_result.stop_reason, "cancelled");
}

TEST_F(SchedulerOnModel, BadRequestsAreRefusedWithAMessage) {
  Scheduler scheduler(*backend_, *tokenizer_);
  Request empty = request("x", "dense", 4);
  empty.prompt.clear();
  EXPECT_THROW(scheduler.submit(empty), Error);
  Request too_long = request("Hi", "dense", backend_->config().context_length);
  EXPECT_THROW(scheduler.submit(too_long), Error);
  Request bad_sampling = request("Hi", "dense", 4, -1.0f);
  EXPECT_THROW(scheduler.submit(bad_sampling), Error);
  Request empty_stop = request("Hi", "dense", 4);
  empty_stop.options.stop_strings = {""};
  EXPECT_THROW(scheduler.submit(empty_stop), Error);
  Request bad_token = request("Hi", "dense", 4);
  bad_token.prompt.push_back(-5);
  EXPECT_THROW(scheduler.submit(bad_token), Error);
  // Options the backend rejects fail that request alone, with the message.
  Request bad_budget = request("Hi", "kascade", 4);
  bad_budget.attention.budget_percent = 0;
  GenerationResult failed, fine;
  bad_budget.on_finish = [&](const GenerationResult& r) { failed = r; };
  Request good = request("Hi", "dense", 3);
  good.on_finish = [&](const GenerationResult& r) { fine = r; };
  scheduler.submit(bad_budget);
  scheduler.submit(good);
  scheduler.run_until_idle();
  EXPECT_EQ(failed.stop_reason, "error");
  EXPECT_FALSE(failed.error.empty());
  EXPECT_EQ(fine.stop_reason, "token limit");
  EXPECT_EQ(fine.tokens.size(), 3u);
}

// On its own thread, with requests from several threads; stop(false) lets
// them finish, and the KV memory is all back afterwards.
TEST_F(SchedulerOnModel, OwnThreadServesConcurrentSubmitters) {
  const int64_t free_before = backend_->kv_tokens_free();
  Scheduler scheduler(*backend_, *tokenizer_, {.max_running = 4, .max_queued = 16});
  scheduler.start();
  std::atomic<int> done{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 6; ++c)
    clients.emplace_back([&, c] {
      Request r = request(fmt::format("Client {} says", c), c % 2 ? "kascade" : "dense", 5);
      r.on_finish = [&](const GenerationResult& result) {
        if (result.stop_reason == "token limit") ++done;
      };
      scheduler.submit(std::move(r));
    });
  for (std::thread& t : clients) t.join();
  scheduler.stop(false);
  EXPECT_EQ(done.load(), 6);
  EXPECT_EQ(backend_->kv_tokens_free(), free_before);
}

// The scheduler's own thread uses the thread count configured on the thread
// that started it (OpenMP's count is per thread; a new one starts from all
// cores, which ignored `kascade serve --threads`).
TEST_F(SchedulerOnModel, OwnThreadKeepsTheConfiguredThreadCount) {
  ops::configure_threads(1);
  Scheduler scheduler(*backend_, *tokenizer_);
  scheduler.start();
  std::atomic<int> seen{-1};
  Request r = request("Threads", "dense", 1);
  r.on_finish = [&](const GenerationResult&) { seen = omp_get_max_threads(); };
  scheduler.submit(std::move(r));
  scheduler.stop(false);
  ops::configure_threads(2);
  EXPECT_EQ(seen.load(), 1);
}

}  // namespace
}  // namespace kascade
