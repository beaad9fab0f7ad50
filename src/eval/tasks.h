// RULER-style synthetic long-context tasks, generated from a seed (no
// downloads). Each sample is a user message (instruction, a long context,
// a question), the start of the assistant's reply (the answer prefix), the
// values a correct reply contains, and a generation limit. The context is
// filled to a target length in tokens, measured by the caller's counter on
// the fully formatted prompt (chat template included), leaving room for the
// answer.
//
// Tasks:
//   niah_single      one "special magic number" needle in prose; recall it.
//   niah_multikey    four needles under different keys; recall one key's number.
//   niah_multivalue  four numbers under one key; recall all four.
//   niah_multiquery  four keys; recall the numbers of all four.
//   passkey          a five-digit pass key in repetitive filler (the classic
//                    passkey test's haystack); recall it.
//   vt               variable tracking: a chain VAR A = 12345, VAR B = VAR A, ...
//                    (four hops) spread through prose; name every variable
//                    that holds the value.
//   cwe              common words: a numbered word list where ten words recur
//                    far more often than the rest; name the ten.
//   fwe              frequent words: coded words drawn from a Zipf law
//                    (exponent 2); name the three most frequent.
// Needles (and variable-tracking statements) sit at depths spread over the
// context: sample i's first depth is frac(u + i * golden ratio) for a seeded
// u, so any number of samples covers the context evenly.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eval/corpus.h"

namespace kascade::eval {

// The accuracy tasks above, in that order.
std::span<const std::string_view> task_names();
bool is_task(std::string_view name);

struct Sample {
  std::string task;
  int64_t length = 0;  // target tokens: prompt + max_new_tokens <= length
  int index = 0;
  std::string user_message;
  std::string answer_prefix;            // the reply starts with this text
  std::vector<std::string> expected;    // values a correct reply contains
  int64_t max_new_tokens = 0;
  std::vector<double> depths;           // relative positions of the needles in the context
  int64_t prompt_tokens = 0;            // as counted by the caller's counter
};

// Tokens of the formatted prompt for (user message, answer prefix).
using PromptCounter = std::function<int64_t(const std::string& user_message, const std::string& answer_prefix)>;

// Sample `index` of `task` at `length` tokens, deterministic in (seed, task,
// length, index). Throws Error when the task is unknown or even an empty
// context does not fit the length.
Sample make_sample(std::string_view task, int64_t length, int index, uint64_t seed, const Corpus& corpus,
                   const PromptCounter& count_tokens);

// RULER's string-match score: the fraction of expected values that occur in
// the output, ignoring case. 1 for a reply containing them all, 0 for none.
double recall_score(std::span<const std::string> expected, std::string_view output);

}  // namespace kascade::eval
