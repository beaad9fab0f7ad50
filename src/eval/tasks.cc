#include "eval/tasks.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "eval/random.h"

namespace kascade::eval {
namespace {

constexpr std::array<std::string_view, 8> kTaskNames = {
    "niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery", "passkey", "vt", "cwe", "fwe"};

constexpr double kGoldenRatioFraction = 0.6180339887498949;
constexpr int kNeedles = 4;  // multi-key, multi-value, multi-query
constexpr int kChainHops = 4;

// Text around the context; the user message is instruction, context, question.
struct TaskText {
  std::string instruction, question, answer_prefix;
  int64_t max_new_tokens = 0;
};

// The context for n filler units and what a correct answer contains.
struct Draft {
  std::string context;
  std::vector<std::string> expected;
  std::vector<double> depths;
};
using DraftFunction = std::function<Draft(int64_t n_units)>;

std::string user_message(const TaskText& text, const std::string& context) {
  return text.instruction + "\n\n" + context + "\n\n" + text.question;
}

// The largest unit count whose prompt plus the answer room fits `length`:
// an interpolation search (token counts grow about linearly with units)
// that falls back to bisection, keeping a bracket [fits, does not fit].
Sample fit_to_length(std::string_view task, int64_t length, int index, const TaskText& text,
                     const DraftFunction& draft, int64_t max_units, const PromptCounter& count_tokens) {
  const int64_t budget = length - text.max_new_tokens;
  auto tokens = [&](int64_t n) { return count_tokens(user_message(text, draft(n).context), text.answer_prefix); };
  const int64_t empty_tokens = tokens(0);
  if (empty_tokens > budget)
    fail("length {} is too short for task {}: its prompt without context already takes {} tokens "
         "and the answer {} more",
         length, task, empty_tokens, text.max_new_tokens);
  int64_t lo = 0, lo_tokens = empty_tokens;  // lo units fit
  int64_t hi = max_units + 1, hi_tokens = -1;  // hi units do not (-1: not measured)
  int64_t probe = std::min<int64_t>(8, max_units);
  int same_side = 0;
  bool last_fit = false;
  while (hi - lo > 1) {
    probe = std::clamp(probe, lo + 1, hi - 1);
    const int64_t t = tokens(probe);
    const bool fits = t <= budget;
    same_side = fits == last_fit ? same_side + 1 : 1;
    last_fit = fits;
    if (fits) {
      lo = probe, lo_tokens = t;
    } else {
      hi = probe, hi_tokens = t;
    }
    const double per_unit = hi_tokens >= 0 ? double(hi_tokens - lo_tokens) / double(hi - lo)
                                           : double(std::max<int64_t>(lo_tokens - empty_tokens, 1)) / double(lo);
    probe = lo + int64_t(double(budget - lo_tokens) / std::max(per_unit, 1e-3));
    // Interpolation creeping from one side: bisect the bracket instead.
    if (same_side >= 2 && hi_tokens >= 0) probe = lo + (hi - lo) / 2;
  }
  Draft best = draft(lo);
  Sample sample;
  sample.task = std::string(task);
  sample.length = length;
  sample.index = index;
  sample.user_message = user_message(text, best.context);
  sample.answer_prefix = text.answer_prefix;
  sample.expected = std::move(best.expected);
  sample.max_new_tokens = text.max_new_tokens;
  sample.depths = std::move(best.depths);
  sample.prompt_tokens = lo_tokens;
  return sample;
}

// Needle depths for sample `index`: the first at frac(u + index * phi), the
// others evenly spaced after it (wrapping), ascending.
std::vector<double> spread_depths(Rng& rng, int index, int count) {
  const double first = std::fmod(rng.unit() + index * kGoldenRatioFraction, 1.0);
  std::vector<double> depths;
  for (int k = 0; k < count; ++k) depths.push_back(std::fmod(first + double(k) / count, 1.0));
  std::sort(depths.begin(), depths.end());
  return depths;
}

// Prose from a seeded start with `needles` inserted as sentences at `depths`
// (ascending): needle k goes to the sentence boundary where the text before
// it first reaches depth_k of the prose's characters, so depth measures
// position in the text (and about in tokens), whatever the sentence lengths.
std::string prose_with_needles(const Corpus& corpus, uint64_t start, int64_t n,
                               const std::vector<std::string>& needles, const std::vector<double>& depths) {
  size_t total_chars = 0;
  for (int64_t i = 0; i < n; ++i) total_chars += corpus.sentence(start, uint64_t(i)).text.size() + 1;
  std::string out;
  size_t next_needle = 0, chars_before = 0;
  auto insert_needles_due = [&](bool at_end) {
    while (next_needle < needles.size() &&
           (at_end || double(chars_before) >= depths[next_needle] * double(total_chars))) {
      if (!out.empty() && out.back() != '\n') out += ' ';
      out += needles[next_needle++];
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    insert_needles_due(false);
    const Sentence& s = corpus.sentence(start, uint64_t(i));
    if (!out.empty() && out.back() != '\n') out += ' ';
    out += s.text;
    if (s.ends_paragraph) out += '\n';
    chars_before += s.text.size() + 1;
  }
  insert_needles_due(true);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string random_number(Rng& rng, int digits) {
  const int64_t low = int64_t(std::pow(10, digits - 1));
  return std::to_string(rng.between(low, low * 10 - 1));
}

// `count` distinct values made by `make`.
template <typename Make>
std::vector<std::string> distinct(int count, Make make) {
  std::vector<std::string> values;
  while (int(values.size()) < count) {
    std::string value = make();
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(std::move(value));
  }
  return values;
}

std::string random_word(Rng& rng, const Corpus& corpus) {
  const std::vector<std::string>& vocabulary = corpus.vocabulary();
  return vocabulary[rng.below(vocabulary.size())];
}

std::string random_letters(Rng& rng, int count, char first) {
  std::string out;
  for (int i = 0; i < count; ++i) out += char(first + rng.below(26));
  return out;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(separator) : "") + items[i];
  return out;
}

// "a, b, c and d".
std::string english_list(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

template <typename T>
void shuffle(std::vector<T>& items, Rng& rng) {
  for (size_t i = items.size(); i > 1; --i) std::swap(items[i - 1], items[rng.below(i)]);
}

std::string magic_needle(const std::string& key, const std::string& value) {
  return fmt::format("One of the special magic numbers for {} is: {}.", key, value);
}

const std::string kMagicInstruction =
    "Some special magic numbers are hidden in the text below. Read it carefully and remember them: "
    "you will be asked about the numbers afterwards.";

// The needle tasks: `n_keys` keys, `values_per_key` numbers each, the
// question about `asked` keys (the first ones drawn).
Sample needle_task(std::string_view task, int64_t length, int index, uint64_t seed, const Corpus& corpus,
                   const PromptCounter& count_tokens, int n_keys, int values_per_key, int asked) {
  Rng rng(mix_seed(seed, task, uint64_t(length), uint64_t(index)));
  const std::vector<std::string> keys =
      distinct(n_keys, [&] { return random_word(rng, corpus) + "-" + random_word(rng, corpus); });
  const std::vector<std::string> values = distinct(n_keys * values_per_key, [&] { return random_number(rng, 7); });
  const uint64_t start = rng.below(corpus.sentence_count());
  std::vector<std::string> needles;
  for (int k = 0; k < n_keys; ++k)
    for (int v = 0; v < values_per_key; ++v) needles.push_back(magic_needle(keys[k], values[k * values_per_key + v]));
  shuffle(needles, rng);  // which key sits deepest is random
  const std::vector<double> depths = spread_depths(rng, index, int(needles.size()));

  const std::vector<std::string> asked_keys(keys.begin(), keys.begin() + asked);
  std::vector<std::string> expected(values.begin(), values.begin() + asked * values_per_key);
  TaskText text;
  text.instruction = kMagicInstruction;
  if (values_per_key > 1) {
    text.question = fmt::format("What are all the special magic numbers for {} mentioned in the text above?", keys[0]);
    text.answer_prefix = fmt::format("The special magic numbers for {} mentioned in the text above are", keys[0]);
  } else if (asked > 1) {
    const std::string list = english_list(asked_keys);
    text.question = fmt::format("What are the special magic numbers for {} mentioned in the text above?", list);
    text.answer_prefix = fmt::format("The special magic numbers for {} mentioned in the text above are", list);
  } else {
    text.question = fmt::format("What is the special magic number for {} mentioned in the text above?", keys[0]);
    text.answer_prefix = fmt::format("The special magic number for {} mentioned in the text above is", keys[0]);
  }
  text.max_new_tokens = int64_t(expected.size()) * 12 + 8;  // a 7-digit number is up to 9 tokens with separators
  return fit_to_length(
      task, length, index, text,
      [&](int64_t n) { return Draft{prose_with_needles(corpus, start, n, needles, depths), expected, depths}; },
      4 * length, count_tokens);
}

Sample passkey_task(int64_t length, int index, uint64_t seed, const PromptCounter& count_tokens) {
  Rng rng(mix_seed(seed, "passkey", uint64_t(length), uint64_t(index)));
  const std::string key = random_number(rng, 5);
  const double depth = spread_depths(rng, index, 1)[0];
  const std::string needle = fmt::format("The pass key is {0}. Remember it. {0} is the pass key.", key);
  constexpr std::string_view kFiller =
      "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
  TaskText text;
  text.instruction = "Important information is hidden inside a lot of irrelevant text below. Find it and "
                     "remember it: you will be asked about it afterwards.";
  text.question = "What is the pass key?";
  text.answer_prefix = "The pass key is";
  text.max_new_tokens = 16;
  return fit_to_length(
      "passkey", length, index, text,
      [&](int64_t n) {
        std::vector<std::string> units(static_cast<size_t>(n), std::string(kFiller));
        units.insert(units.begin() + int64_t(depth * double(n)), needle);
        return Draft{join(units, " "), {key}, {depth}};
      },
      length, count_tokens);
}

Sample variable_tracking_task(int64_t length, int index, uint64_t seed, const Corpus& corpus,
                              const PromptCounter& count_tokens) {
  Rng rng(mix_seed(seed, "vt", uint64_t(length), uint64_t(index)));
  const std::vector<std::string> names = distinct(kChainHops + 1, [&] { return random_letters(rng, 5, 'A'); });
  const std::string value = random_number(rng, 5);
  std::vector<std::string> statements = {fmt::format("VAR {} = {}.", names[0], value)};
  for (int k = 1; k <= kChainHops; ++k) statements.push_back(fmt::format("VAR {} = VAR {}.", names[k], names[k - 1]));
  const uint64_t start = rng.below(corpus.sentence_count());
  // The chain reads in order: ascending depths, the first statement deepest in the past.
  const std::vector<double> depths = spread_depths(rng, index, int(statements.size()));
  TaskText text;
  text.instruction = "Memorize and track the chain of variable assignments hidden in the text below.";
  text.question = fmt::format("Find all variables that are assigned the value {} in the text above.", value);
  text.answer_prefix = fmt::format(
      "Following the chain of assignments in the text above, {} variables are assigned the value {}. They are:",
      names.size(), value);
  text.max_new_tokens = 32;
  return fit_to_length(
      "vt", length, index, text,
      [&](int64_t n) { return Draft{prose_with_needles(corpus, start, n, statements, depths), names, depths}; },
      4 * length, count_tokens);
}

// Words drawn from the vocabulary, none a substring of another nor of `avoid`
// (so that finding one word in a reply never counts as finding another).
class WordDraw {
 public:
  WordDraw(const Corpus& corpus, Rng& rng, std::string avoid) : corpus_(corpus), rng_(rng), avoid_(std::move(avoid)) {}
  std::string next() {
    const std::vector<std::string>& vocabulary = corpus_.vocabulary();
    if (taken_.size() * 2 >= vocabulary.size()) fail("the haystack corpus's vocabulary is too small for this length");
    for (;;) {
      const std::string& word = vocabulary[rng_.below(vocabulary.size())];
      if (avoid_.find(word) != std::string::npos) continue;
      const bool clash = std::any_of(taken_.begin(), taken_.end(), [&](const std::string& other) {
        return other.find(word) != std::string::npos || word.find(other) != std::string::npos;
      });
      if (clash) continue;
      taken_.push_back(word);
      return word;
    }
  }

 private:
  const Corpus& corpus_;
  Rng& rng_;
  std::string avoid_;
  std::vector<std::string> taken_;
};

std::string numbered_list(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); ++i) out += fmt::format("{}{}. {}", i ? " " : "", i + 1, words[i]);
  return out;
}

Sample common_words_task(int64_t length, int index, uint64_t seed, const Corpus& corpus,
                         const PromptCounter& count_tokens) {
  constexpr int kCommon = 10, kUncommonRepeats = 3;
  Rng rng(mix_seed(seed, "cwe", uint64_t(length), uint64_t(index)));
  TaskText text;
  text.instruction = "Below is a numbered list of words. Some words appear many more times than the others.";
  text.question = fmt::format("What are the {} most common words in the list above?", kCommon);
  text.answer_prefix = fmt::format("The {} most common words in the list above are:", kCommon);
  text.max_new_tokens = 64;
  // Common words recur 6 to 30 times, more in longer lists; the others 3 times.
  const int64_t common_repeats = std::clamp<int64_t>(length / 400, 6, 30);
  WordDraw draw(corpus, rng, text.instruction + text.question + text.answer_prefix);
  std::vector<std::string> common, uncommon;
  for (int i = 0; i < kCommon; ++i) common.push_back(draw.next());
  const uint64_t shuffle_seed = rng.next();
  const int64_t max_uncommon = int64_t(corpus.vocabulary().size() / 4);
  return fit_to_length(
      "cwe", length, index, text,
      [&](int64_t n) {
        while (int64_t(uncommon.size()) < n) uncommon.push_back(draw.next());
        std::vector<std::string> items;
        for (const std::string& w : common) items.insert(items.end(), size_t(common_repeats), w);
        for (int64_t i = 0; i < n; ++i) items.insert(items.end(), kUncommonRepeats, uncommon[size_t(i)]);
        Rng order(shuffle_seed);
        shuffle(items, order);
        return Draft{numbered_list(items), common, {}};
      },
      max_uncommon, count_tokens);
}

Sample frequent_words_task(int64_t length, int index, uint64_t seed, const PromptCounter& count_tokens) {
  constexpr int kVocabulary = 200, kAnswers = 3;
  Rng rng(mix_seed(seed, "fwe", uint64_t(length), uint64_t(index)));
  // Coded words of five letters: distinct, so none is a substring of another.
  const std::vector<std::string> words = distinct(kVocabulary, [&] { return random_letters(rng, 5, 'a'); });
  double harmonic = 0;
  for (int r = 1; r <= kVocabulary; ++r) harmonic += 1.0 / (double(r) * r);
  const uint64_t shuffle_seed = rng.next();
  TaskText text;
  text.instruction = "Read the coded text below and keep track of how often each coded word appears.";
  text.question = fmt::format("What are the {} most frequently appearing coded words in the text above?", kAnswers);
  text.answer_prefix = fmt::format("The {} most frequently appearing coded words in the text above are:", kAnswers);
  text.max_new_tokens = 24;
  const std::vector<std::string> expected(words.begin(), words.begin() + kAnswers);
  return fit_to_length(
      "fwe", length, index, text,
      [&](int64_t n) {
        // Word of rank r appears floor(n * r^-2 / H) times (Zipf, exponent 2).
        std::vector<std::string> items;
        for (int r = 1; r <= kVocabulary; ++r)
          items.insert(items.end(), size_t(double(n) / (double(r) * r) / harmonic), words[size_t(r - 1)]);
        Rng order(shuffle_seed);
        shuffle(items, order);
        return Draft{join(items, " "), expected, {}};
      },
      2 * length, count_tokens);
}

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = char(std::tolower(uint8_t(c)));
  return out;
}

}  // namespace

std::span<const std::string_view> task_names() { return kTaskNames; }

bool is_task(std::string_view name) {
  return std::find(kTaskNames.begin(), kTaskNames.end(), name) != kTaskNames.end();
}

Sample make_sample(std::string_view task, int64_t length, int index, uint64_t seed, const Corpus& corpus,
                   const PromptCounter& count_tokens) {
  if (task == "niah_single") return needle_task(task, length, index, seed, corpus, count_tokens, 1, 1, 1);
  if (task == "niah_multikey") return needle_task(task, length, index, seed, corpus, count_tokens, kNeedles, 1, 1);
  if (task == "niah_multivalue") return needle_task(task, length, index, seed, corpus, count_tokens, 1, kNeedles, 1);
  if (task == "niah_multiquery")
    return needle_task(task, length, index, seed, corpus, count_tokens, kNeedles, 1, kNeedles);
  if (task == "passkey") return passkey_task(length, index, seed, count_tokens);
  if (task == "vt") return variable_tracking_task(length, index, seed, corpus, count_tokens);
  if (task == "cwe") return common_words_task(length, index, seed, corpus, count_tokens);
  if (task == "fwe") return frequent_words_task(length, index, seed, count_tokens);
  fail("unknown task '{}' (tasks: {}, ppl)", task, fmt::join(kTaskNames, ", "));
}

double recall_score(std::span<const std::string> expected, std::string_view output) {
  if (expected.empty()) return 0.0;
  const std::string haystack = lowercase(output);
  int found = 0;
  for (const std::string& value : expected) found += haystack.find(lowercase(value)) != std::string::npos;
  return double(found) / double(expected.size());
}

}  // namespace kascade::eval
