// Continuous batching: many generation requests share one backend.
//
// Requests wait in a bounded queue and are admitted, in order, while fewer
// than max_running run and the backend's KV memory holds the next one's
// context (prompt + max new tokens). Each scheduling step
//   1. drops cancelled requests (destroying a sequence frees its KV at once),
//   2. admits what fits,
//   3. prefills chunks of prefill_chunk tokens (at least the backend's
//      min_prefill_chunk) of the waiting prompts, up to one chunk per step,
//      so that a long prompt does not stall the others' decoding,
//   4. advances every running sequence by one token in batched decode calls
//      (sequences that the backend may batch together, Backend::decode_group,
//      share a call),
// and samples each sequence's next token with the same stop rules as
// engine::generate (TokenStream). A sequence's prompt is prefilled in the
// chunks engine::generate would use and its decode steps compute the same
// numbers batched or alone, so a request's tokens do not depend on what else
// runs: `kascade generate` is this scheduler with one request.
//
// Thread safety: submit, cancel, stop and stats may be called from any
// thread. The backend is used only by the thread that runs the steps
// (run_until_idle on the caller's, or the scheduler's own after start), and
// the request callbacks are called on that thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kascade/options.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "tokenizer/tokenizer.h"

namespace kascade::engine {

struct Request {
  std::vector<int32_t> prompt;
  GenerateOptions options;                // max new tokens, stop strings, sampling
  AttentionOptions attention;   // a Kascade profile already resolved
  attention::KvType kv_type = attention::KvType::F16;
  int64_t capacity = 0;                   // positions to reserve; 0: prompt + max(max new tokens, 1)
  // Called on the scheduler's thread: streamed text (complete UTF-8),
  // prompt tokens prefilled after each chunk, and once at the end, also when
  // the request was cancelled (stop_reason "cancelled") or failed ("error").
  std::function<void(const std::string&)> on_text;
  std::function<void(int64_t done, int64_t total)> on_prefill;
  std::function<void(const GenerationResult&)> on_finish;
  std::function<void(std::span<const float>)> on_logits;  // optional: each step's logits (TokenStream)
};

struct SchedulerOptions {
  int64_t max_running = 8;      // sequences running at once (prefilling or decoding)
  int64_t max_queued = 64;      // requests waiting beyond them; submit refuses more
  int64_t prefill_chunk = 512;  // tokens per prefill chunk, and per step
};

// A snapshot for /metrics and tests.
struct SchedulerStats {
  int64_t queued = 0;
  int64_t running = 0;
  int64_t prefilling = 0;        // of running: still in their prompt
  int64_t kv_tokens_total = 0;   // the backend's KV memory
  int64_t kv_tokens_used = 0;    // taken by running sequences
  uint64_t submitted = 0;
  uint64_t rejected = 0;         // refused: queue full or stopping
  uint64_t finished = 0;         // ended by a stop rule
  uint64_t cancelled = 0;
  uint64_t failed = 0;
  uint64_t prompt_tokens = 0;    // prefilled
  uint64_t generated_tokens = 0;
  uint64_t decode_steps = 0;     // scheduling steps that decoded
  uint64_t decode_calls = 0;     // backend decode calls (one per group per step)
  double prefill_seconds = 0;    // time in backend prefill calls
  double decode_seconds = 0;     // time in backend decode calls
};

class Scheduler {
 public:
  Scheduler(Backend& backend, const tokenizer::Tokenizer& tokenizer, SchedulerOptions options = {});
  ~Scheduler();  // stop(true)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  enum class Submitted { Queued, QueueFull, Stopping };
  struct Ticket {
    Submitted status = Submitted::Stopping;
    uint64_t id = 0;  // for cancel(); 0 unless queued
  };
  // Checks the request (throws Error with a message for the user: empty
  // prompt, a context over the model's or over all the KV memory, bad
  // sampling options, an empty stop string) and queues it, unless the queue
  // is full or the scheduler is stopping.
  Ticket submit(Request request);
  // Ends a queued or running request: its sequence is destroyed at the next
  // step and on_finish reports "cancelled". Unknown or finished ids are ignored.
  void cancel(uint64_t id);

  // One scheduling step on the calling thread; false when there was nothing to do.
  bool step();
  // Steps until no request is queued or running.
  void run_until_idle();

  // Runs the steps on a thread of the scheduler's own, which sleeps when idle.
  void start();
  // Refuses new requests; the queued and running ones go on.
  void close();
  // Refuses new requests; cancels the queued and running ones if `cancel`,
  // else lets them finish; then joins the thread (if started).
  void stop(bool cancel);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Active;
  struct Queued {
    uint64_t id;
    Request request;
  };

  void finish(Active& active, const char* reason, std::string error = {});
  void fail_request(Request& request, uint64_t id, const std::string& error);
  void admit();
  bool prefill_step();
  bool decode_step();
  void publish();  // refreshes the stats' gauges
  void worker();

  Backend& backend_;
  const tokenizer::Tokenizer& tokenizer_;
  SchedulerOptions options_;

  mutable std::mutex mutex_;  // guards queue_, cancelled_, stats_, stopping_, next_id_
  std::condition_variable wake_;
  std::deque<Queued> queue_;
  std::set<uint64_t> cancelled_;
  SchedulerStats stats_;
  bool stopping_ = false;
  bool cancel_all_ = false;
  uint64_t next_id_ = 1;

  std::vector<std::unique_ptr<Active>> running_;  // the stepping thread's
  std::vector<float> logits_;                     // a decode call's [n][vocab]
  std::thread thread_;
};

}  // namespace kascade::engine
