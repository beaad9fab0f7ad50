#include "engine/scheduler.h"

#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "core/timer.h"

namespace kascade::engine {

struct Scheduler::Active {
  uint64_t id = 0;
  Request request;
  std::unique_ptr<BackendSequence> seq;
  std::unique_ptr<TokenStream> stream;
  int64_t prefilled = 0;              // prompt tokens the sequence holds
  std::optional<int32_t> next;        // the token to decode at the next step
  Stopwatch clock;                    // since admission
  double prefill_seconds = 0;         // admission to the end of the prompt
  Stopwatch decode_clock;             // from the end of the prompt
  bool done = false;

  bool prefilling() const { return !done && prefilled < int64_t(request.prompt.size()); }
};

Scheduler::Scheduler(Backend& backend, const tokenizer::Tokenizer& tokenizer, SchedulerOptions options)
    : backend_(backend), tokenizer_(tokenizer), options_(options) {
  if (options_.max_running < 1) fail("the scheduler needs max_running >= 1, got {}", options_.max_running);
  if (options_.max_queued < 0) fail("the scheduler needs max_queued >= 0, got {}", options_.max_queued);
  if (options_.prefill_chunk < 1) fail("the scheduler needs prefill_chunk >= 1, got {}", options_.prefill_chunk);
  publish();
}

Scheduler::~Scheduler() { stop(true); }

Scheduler::Ticket Scheduler::submit(Request request) {
  const model::Config& c = backend_.config();
  const int64_t n_prompt = int64_t(request.prompt.size());
  if (request.capacity == 0) request.capacity = n_prompt + std::max<int64_t>(request.options.max_new_tokens, 1);
  check_request(request.capacity, request.prompt, request.options);
  if (request.capacity > c.context_length)
    fail("a context of {} tokens exceeds the model's context of {} tokens", request.capacity, c.context_length);
  if (backend_.kv_tokens_for(request.capacity) > backend_.kv_tokens_total())
    fail("a context of {} tokens exceeds the KV memory of {} tokens", request.capacity, backend_.kv_tokens_total());
  for (const int32_t token : request.prompt)
    if (token < 0 || token >= c.vocab_size) fail("token id {} is outside the vocabulary of {}", token, c.vocab_size);
  sampling::validate(request.options.sampling);
  sampling::StopStringMatcher check_stops(request.options.stop_strings);

  std::lock_guard lock(mutex_);
  if (stopping_) {
    ++stats_.rejected;
    return {Submitted::Stopping, 0};
  }
  if (int64_t(queue_.size()) + stats_.running >= options_.max_running + options_.max_queued) {
    ++stats_.rejected;
    return {Submitted::QueueFull, 0};
  }
  const uint64_t id = next_id_++;
  queue_.push_back({id, std::move(request)});
  ++stats_.submitted;
  stats_.queued = int64_t(queue_.size());
  wake_.notify_all();
  return {Submitted::Queued, id};
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard lock(mutex_);
  cancelled_.insert(id);
  wake_.notify_all();
}

void Scheduler::fail_request(Request& request, uint64_t id, const std::string& error) {
  GenerationResult result;
  result.prompt_tokens = int64_t(request.prompt.size());
  result.stop_reason = "error";
  result.error = error;
  {
    std::lock_guard lock(mutex_);
    ++stats_.failed;
  }
  if (request.on_finish) request.on_finish(result);
}

// Ends a running request (reason null: its TokenStream ended it) and reports it.
void Scheduler::finish(Active& active, const char* reason, std::string error) {
  if (active.done) return;
  active.done = true;
  GenerationResult result;
  if (active.stream) result = std::move(active.stream->result());
  result.prompt_tokens = int64_t(active.request.prompt.size());
  if (reason) result.stop_reason = reason;
  result.error = std::move(error);
  if (active.prefilled == int64_t(active.request.prompt.size())) {
    result.prefill_seconds = active.prefill_seconds;
    result.decode_seconds = active.decode_clock.seconds();
  } else {
    result.prefill_seconds = active.clock.seconds();
  }
  if (active.seq) {
    result.attention_name = std::string(active.seq->attention_name());
    result.kv_bytes = active.seq->kv_bytes();
  }
  {
    std::lock_guard lock(mutex_);
    if (result.stop_reason == "cancelled") ++stats_.cancelled;
    else if (result.stop_reason == "error") ++stats_.failed;
    else ++stats_.finished;
  }
  active.seq.reset();  // the KV memory goes back now
  if (active.request.on_finish) active.request.on_finish(result);
}

void Scheduler::admit() {
  while (int64_t(running_.size()) < options_.max_running) {
    Queued next;
    bool never_fits = false;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) return;
      const int64_t need = backend_.kv_tokens_for(queue_.front().request.capacity);
      if (need > backend_.kv_tokens_free()) {
        if (!running_.empty()) return;  // it waits for running sequences to end
        never_fits = true;              // nothing of ours to wait for: KV held elsewhere
      }
      next = std::move(queue_.front());
      queue_.pop_front();
      stats_.queued = int64_t(queue_.size());
      if (!never_fits) ++stats_.running;
    }
    if (never_fits) {
      fail_request(next.request, next.id,
                   fmt::format("a context of {} tokens does not fit the {} free KV tokens", next.request.capacity,
                               backend_.kv_tokens_free()));
      continue;
    }
    auto active = std::make_unique<Active>();
    active->id = next.id;
    active->request = std::move(next.request);
    Request& r = active->request;
    try {
      active->seq = backend_.new_sequence({r.capacity, r.attention, r.kv_type});
      active->stream = std::make_unique<TokenStream>(tokenizer_, r.prompt, r.options, r.on_text, r.on_logits);
    } catch (const std::exception& e) {
      running_.push_back(std::move(active));
      finish(*running_.back(), "error", e.what());
      continue;
    }
    running_.push_back(std::move(active));
  }
}

bool Scheduler::prefill_step() {
  int64_t budget = options_.prefill_chunk;
  bool worked = false;
  for (const std::unique_ptr<Active>& a : running_) {
    if (!a->prefilling()) continue;
    if (budget <= 0) break;
    const std::span<const int32_t> prompt = a->request.prompt;
    const int64_t n = int64_t(prompt.size());
    const int64_t before = a->prefilled;
    try {
      Stopwatch clock;
      std::vector<float> logits;
      // The chunks engine::generate's prefill would run (Model::prefill's rounding).
      const int64_t alignment = backend_.prefill_alignment(*a->seq);
      const int64_t wanted = std::max(a->request.options.prefill_chunk, backend_.min_prefill_chunk());
      const int64_t chunk = std::max(alignment, wanted / alignment * alignment);
      const int64_t count = std::min(chunk, n - a->prefilled);
      logits = backend_.prefill(*a->seq, prompt.subspan(size_t(a->prefilled), size_t(count)), {}, chunk);
      a->prefilled += count;
      budget -= count;
      const double seconds = clock.seconds();
      {
        std::lock_guard lock(mutex_);
        stats_.prefill_seconds += seconds;
        stats_.prompt_tokens += uint64_t(a->prefilled - before);
      }
      if (a->request.on_prefill) a->request.on_prefill(a->prefilled, n);
      if (a->prefilled == n) {
        a->prefill_seconds = a->clock.seconds();
        a->decode_clock.restart();
        const size_t generated = a->stream->result().tokens.size();
        a->next = a->stream->next(logits, *a->seq);
        if (a->stream->result().tokens.size() > generated) {
          std::lock_guard lock(mutex_);
          ++stats_.generated_tokens;
        }
        if (!a->next) finish(*a, nullptr);
      }
    } catch (const std::exception& e) {
      finish(*a, "error", e.what());
    }
    worked = true;
  }
  return worked;
}

bool Scheduler::decode_step() {
  // Ready sequences by decode group, in admission order within each.
  std::vector<std::pair<std::string, std::vector<Active*>>> groups;
  for (const std::unique_ptr<Active>& a : running_) {
    if (a->done || !a->next) continue;
    const std::string key = backend_.decode_group(*a->seq);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (group == groups.end()) group = groups.insert(groups.end(), {key, {}});
    group->second.push_back(a.get());
  }
  if (groups.empty()) return false;
  const int64_t vocab = backend_.config().vocab_size;
  const int64_t max_batch = std::max<int64_t>(1, backend_.max_decode_batch());
  uint64_t calls = 0, generated = 0;
  double seconds = 0;
  for (const auto& [key, members] : groups) {
    for (size_t first = 0; first < members.size(); first += size_t(max_batch)) {
      const std::span<Active* const> batch =
          std::span(members).subspan(first, std::min(members.size() - first, size_t(max_batch)));
      std::vector<BackendSequence*> seqs;
      std::vector<int32_t> tokens;
      for (Active* a : batch) {
        seqs.push_back(a->seq.get());
        tokens.push_back(*a->next);
      }
      logits_.resize(batch.size() * size_t(vocab));
      try {
        Stopwatch clock;
        backend_.decode(seqs, tokens, logits_.data());
        seconds += clock.seconds();
        ++calls;
      } catch (const std::exception& e) {
        for (Active* a : batch) finish(*a, "error", e.what());
        continue;
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        Active& a = *batch[i];
        try {
          const size_t before = a.stream->result().tokens.size();
          a.next = a.stream->next(std::span(logits_).subspan(i * size_t(vocab), size_t(vocab)), *a.seq);
          generated += a.stream->result().tokens.size() - before;
          if (!a.next) finish(a, nullptr);
        } catch (const std::exception& e) {
          finish(a, "error", e.what());
        }
      }
    }
  }
  std::lock_guard lock(mutex_);
  ++stats_.decode_steps;
  stats_.decode_calls += calls;
  stats_.decode_seconds += seconds;
  stats_.generated_tokens += generated;
  return true;
}

void Scheduler::publish() {
  int64_t prefilling = 0;
  for (const std::unique_ptr<Active>& a : running_) prefilling += a->prefilling();
  const int64_t total = backend_.kv_tokens_total(), free = backend_.kv_tokens_free();
  std::lock_guard lock(mutex_);
  stats_.queued = int64_t(queue_.size());
  stats_.running = int64_t(running_.size());
  stats_.prefilling = prefilling;
  stats_.kv_tokens_total = total;
  stats_.kv_tokens_used = total - free;
}

bool Scheduler::step() {
  // Cancellations first: their KV goes back before anything is admitted.
  std::set<uint64_t> cancelled;
  std::vector<Queued> dropped;
  bool cancel_all = false;
  {
    std::lock_guard lock(mutex_);
    cancelled.swap(cancelled_);
    cancel_all = cancel_all_;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if (cancel_all || cancelled.contains(it->id)) {
        dropped.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    stats_.queued = int64_t(queue_.size());
  }
  bool worked = !dropped.empty();
  for (Queued& q : dropped) {
    GenerationResult result;
    result.prompt_tokens = int64_t(q.request.prompt.size());
    result.stop_reason = "cancelled";
    {
      std::lock_guard lock(mutex_);
      ++stats_.cancelled;
    }
    if (q.request.on_finish) q.request.on_finish(result);
  }
  for (const std::unique_ptr<Active>& a : running_)
    if (cancel_all || cancelled.contains(a->id)) {
      finish(*a, "cancelled");
      worked = true;
    }
  std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a->done; });

  admit();
  worked |= prefill_step();
  worked |= decode_step();
  std::erase_if(running_, [](const std::unique_ptr<Active>& a) { return a->done; });
  publish();
  return worked || !running_.empty();
}

void Scheduler::run_until_idle() {
  while (true) {
    const bool worked = step();
    std::lock_guard lock(mutex_);
    if (!worked && running_.empty() && queue_.empty()) return;
  }
}

void Scheduler::worker() {
  bool busy = false;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (running_.empty() && queue_.empty() && cancelled_.empty()) {
        if (stopping_) return;
        if (busy) {
          // Idle: give freed memory back to the system before sleeping.
          lock.unlock();
          malloc_trim(0);
          busy = false;
          continue;
        }
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty() || !cancelled_.empty(); });
        continue;
      }
    }
    step();
    busy = true;
  }
}

void Scheduler::start() {
  if (thread_.joinable()) fail("the scheduler is already running");
  // OpenMP's thread count is per thread: a new thread starts from the
  // default (all cores), not from what configure_threads set on this one.
  const int threads = omp_get_max_threads();
  thread_ = std::thread([this, threads] {
    omp_set_num_threads(threads);
    worker();
  });
}

void Scheduler::close() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  wake_.notify_all();
}

void Scheduler::stop(bool cancel) {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (cancel) cancel_all_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) {
    thread_.join();
  } else if (cancel) {
    step();  // reports the cancelled requests
  }
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace kascade::engine
