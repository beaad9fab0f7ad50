// The eval task generators: deterministic in the seed, filled to the target
// length, needles spread over the context, and every sample's expected
// answers recomputed here from the generated text alone by an independent
// parser (which knows only the sentence formats, not the generator's draws).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/model_cache.h"
#include "eval/corpus.h"
#include "eval/tasks.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace kascade::eval {
namespace {

const Corpus& corpus() {
  static const Corpus c = Corpus::load(std::string(KASCADE_SOURCE_DIR) + "/data/haystack/haystack.txt");
  return c;
}

// A stand-in tokenizer: one token per 4 bytes, rounded up.
int64_t byte_tokens(const std::string& user, const std::string& prefix) {
  return int64_t(user.size() + prefix.size() + 3) / 4;
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// Everything between the instruction and the question.
std::string context_of(const Sample& s) {
  const size_t begin = s.user_message.find("\n\n") + 2;
  const size_t end = s.user_message.rfind("\n\n");
  return s.user_message.substr(begin, end - begin);
}

std::string question_of(const Sample& s) { return s.user_message.substr(s.user_message.rfind("\n\n") + 2); }

// Answers of a needle task, from the needles found in the text and the keys named in the question.
std::vector<std::string> needle_answers(const Sample& s) {
  std::multimap<std::string, std::string> values;  // key -> number
  const std::regex needle(R"(One of the special magic numbers for ([a-z]+-[a-z]+) is: (\d{7})\.)");
  const std::string context = context_of(s);
  for (std::sregex_iterator it(context.begin(), context.end(), needle), end; it != end; ++it)
    values.emplace((*it)[1], (*it)[2]);
  std::vector<std::string> answers;
  const std::string question = question_of(s);
  const std::regex key(R"([a-z]+-[a-z]+)");
  for (std::sregex_iterator it(question.begin(), question.end(), key), end; it != end; ++it) {
    const auto [lo, hi] = values.equal_range(it->str());
    for (auto v = lo; v != hi; ++v) answers.push_back(v->second);
  }
  return answers;
}

std::vector<std::string> passkey_answers(const Sample& s) {
  std::smatch m;
  const std::string context = context_of(s);
  if (!std::regex_search(context, m, std::regex(R"(The pass key is (\d+)\. Remember it\. (\d+) is the pass key\.)")) ||
      m[1] != m[2])
    return {};
  return {m[1]};
}

// Resolves every VAR statement, then names the variables holding the asked value.
std::vector<std::string> variable_answers(const Sample& s) {
  std::map<std::string, std::string> assigned;  // variable -> number or other variable
  const std::regex statement(R"(VAR ([A-Z]{5}) = (?:VAR ([A-Z]{5})|(\d+))\.)");
  const std::string context = context_of(s);
  for (std::sregex_iterator it(context.begin(), context.end(), statement), end; it != end; ++it)
    assigned[(*it)[1]] = (*it)[2].matched ? (*it)[2].str() : (*it)[3].str();
  std::smatch m;
  const std::string question = question_of(s);
  EXPECT_TRUE(std::regex_search(question, m, std::regex(R"(value (\d+))")));
  std::vector<std::string> answers;
  for (const auto& [name, rhs] : assigned) {
    std::string value = rhs;
    for (int hops = 0; hops < 100 && assigned.count(value); ++hops) value = assigned[value];
    if (value == m[1]) answers.push_back(name);
  }
  return answers;
}

std::map<std::string, int> count_words(const std::vector<std::string>& words) {
  std::map<std::string, int> counts;
  for (const std::string& w : words) ++counts[w];
  return counts;
}

// The n words with the highest counts; the n-th must beat the next one.
std::vector<std::string> top_words(const std::map<std::string, int>& counts, size_t n) {
  std::vector<std::pair<int, std::string>> ranked;
  for (const auto& [w, c] : counts) ranked.emplace_back(-c, w);
  std::sort(ranked.begin(), ranked.end());
  EXPECT_GT(ranked.size(), n);
  EXPECT_LT(ranked[n - 1].first, ranked[n].first) << "tie at rank " << n;
  std::vector<std::string> top;
  for (size_t i = 0; i < n; ++i) top.push_back(ranked[i].second);
  return top;
}

std::vector<std::string> common_word_answers(const Sample& s) {
  const std::string context = context_of(s);
  std::vector<std::string> words;
  const std::regex item(R"((\d+)\. ([a-z]+))");
  int expected_number = 1;
  for (std::sregex_iterator it(context.begin(), context.end(), item), end; it != end; ++it) {
    EXPECT_EQ(std::stoi((*it)[1]), expected_number++);
    words.push_back((*it)[2]);
  }
  return top_words(count_words(words), 10);
}

std::vector<std::string> frequent_word_answers(const Sample& s) {
  const std::string context = context_of(s);
  std::vector<std::string> words;
  const std::regex word(R"([a-z]{5})");
  for (std::sregex_iterator it(context.begin(), context.end(), word), end; it != end; ++it) words.push_back(it->str());
  EXPECT_EQ(words.size() * 6 - 1, context.size()) << "the coded text is not five-letter words and spaces";
  return top_words(count_words(words), 3);
}

std::vector<std::string> independent_answers(const Sample& s) {
  if (s.task.starts_with("niah")) return needle_answers(s);
  if (s.task == "passkey") return passkey_answers(s);
  if (s.task == "vt") return variable_answers(s);
  if (s.task == "cwe") return common_word_answers(s);
  return frequent_word_answers(s);
}

TEST(EvalCorpus, LoadsTheShippedHaystack) {
  EXPECT_GT(corpus().sentence_count(), 10000u);
  EXPECT_GT(corpus().paragraph_count(), 3000u);
  EXPECT_GT(corpus().vocabulary().size(), 5000u);
  EXPECT_TRUE(std::is_sorted(corpus().vocabulary().begin(), corpus().vocabulary().end()));
  // The calibration dev set's texts must stay out of the haystack.
  std::ifstream in(std::string(KASCADE_SOURCE_DIR) + "/data/haystack/haystack.txt");
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find("GNU GENERAL PUBLIC LICENSE"), std::string::npos);
  EXPECT_EQ(text.find("Apache License"), std::string::npos);
}

TEST(EvalCorpus, SplitsSentencesAndParagraphs) {
  const Corpus c = Corpus::parse("# comment\n@@@ document: a\nOne two. Three e.g. four! Five?\nSix.\n", "inline");
  ASSERT_EQ(c.sentence_count(), 4u);
  EXPECT_EQ(c.sentence(0, 0).text, "One two.");
  EXPECT_EQ(c.sentence(0, 1).text, "Three e.g. four!");
  EXPECT_TRUE(c.sentence(0, 2).ends_paragraph);
  EXPECT_EQ(c.passage(2, 3), "Five?\nSix.\nOne two.");  // wraps around
  EXPECT_EQ(c.vocabulary(), std::vector<std::string>{});
}

TEST(EvalCorpus, RejectsMalformedFiles) {
  EXPECT_THROW(Corpus::parse("text before any header\n", "bad"), Error);
  EXPECT_THROW(Corpus::parse("# only a comment\n", "bad"), Error);
  EXPECT_THROW(Corpus::load("/nonexistent/haystack.txt"), Error);
}

TEST(EvalTasks, AnswersMatchAnIndependentParseOfTheText) {
  for (const std::string_view task : task_names())
    for (const int64_t length : {512, 2048})
      for (int index = 0; index < 3; ++index) {
        SCOPED_TRACE(::testing::Message() << task << " length " << length << " sample " << index);
        const Sample s = make_sample(task, length, index, 7, corpus(), byte_tokens);
        EXPECT_EQ(sorted(independent_answers(s)), sorted(s.expected));
        const size_t want = task == "niah_multivalue" || task == "niah_multiquery" ? 4
                            : task == "vt"                                         ? 5
                            : task == "cwe"                                        ? 10
                            : task == "fwe"                                        ? 3
                                                                                   : 1;
        EXPECT_EQ(s.expected.size(), want);
      }
}

TEST(EvalTasks, FillToTheTargetLength) {
  for (const std::string_view task : task_names())
    for (const int64_t length : {300, 1024, 4096}) {
      SCOPED_TRACE(::testing::Message() << task << " length " << length);
      const Sample s = make_sample(task, length, 1, 3, corpus(), byte_tokens);
      EXPECT_EQ(s.prompt_tokens, byte_tokens(s.user_message, s.answer_prefix));
      EXPECT_LE(s.prompt_tokens + s.max_new_tokens, length);
      // Within one filler unit (a sentence, or a few list words) of the target.
      EXPECT_GE(s.prompt_tokens + s.max_new_tokens, length - std::max<int64_t>(150, length / 20));
    }
}

TEST(EvalTasks, DeterministicInTheSeed) {
  for (const std::string_view task : task_names()) {
    SCOPED_TRACE(task);
    const Sample a = make_sample(task, 1024, 2, 11, corpus(), byte_tokens);
    const Sample b = make_sample(task, 1024, 2, 11, corpus(), byte_tokens);
    EXPECT_EQ(a.user_message, b.user_message);
    EXPECT_EQ(a.expected, b.expected);
    const Sample other_seed = make_sample(task, 1024, 2, 12, corpus(), byte_tokens);
    EXPECT_NE(a.user_message, other_seed.user_message);
    EXPECT_NE(a.expected, other_seed.expected);
    const Sample other_index = make_sample(task, 1024, 3, 11, corpus(), byte_tokens);
    EXPECT_NE(a.user_message, other_index.user_message);
  }
}

TEST(EvalTasks, NeedlesSpreadOverTheContext) {
  std::set<int> fifths;
  for (int index = 0; index < 10; ++index) {
    const Sample s = make_sample("niah_single", 2048, index, 5, corpus(), byte_tokens);
    ASSERT_EQ(s.depths.size(), 1u);
    fifths.insert(std::min(4, int(s.depths[0] * 5)));
    // The needle sits where its depth says (to a sentence).
    const std::string context = context_of(s);
    const double where = double(context.find("special magic number")) / double(context.size());
    EXPECT_NEAR(where, s.depths[0], 0.03) << "sample " << index;
  }
  EXPECT_EQ(fifths.size(), 5u) << "10 samples should put needles in every fifth of the context";
  // Multi-needle tasks spread their needles too.
  const Sample multi = make_sample("niah_multikey", 2048, 0, 5, corpus(), byte_tokens);
  ASSERT_EQ(multi.depths.size(), 4u);
  EXPECT_GT(multi.depths.back() - multi.depths.front(), 0.5);
}

TEST(EvalTasks, VariableChainReadsInOrder) {
  const Sample s = make_sample("vt", 2048, 4, 9, corpus(), byte_tokens);
  const std::string context = context_of(s);
  size_t previous = 0;
  for (size_t k = 0; k < s.expected.size(); ++k) {
    const size_t at = context.find("VAR " + s.expected[k] + " =");
    ASSERT_NE(at, std::string::npos);
    if (k > 0) {
      EXPECT_GT(at, previous);
    }
    previous = at;
  }
}

TEST(EvalTasks, ScorerGivesOneForAPerfectAndZeroForAnEmptyAnswer) {
  for (const std::string_view task : task_names()) {
    SCOPED_TRACE(task);
    const Sample s = make_sample(task, 1024, 0, 1, corpus(), byte_tokens);
    std::string perfect;
    for (const std::string& value : s.expected) perfect += " " + value + ",";
    EXPECT_EQ(recall_score(s.expected, perfect), 1.0);
    EXPECT_EQ(recall_score(s.expected, ""), 0.0);
    // The answer prefix and the question give nothing away.
    EXPECT_EQ(recall_score(s.expected, s.answer_prefix), 0.0);
    EXPECT_EQ(recall_score(s.expected, question_of(s)), 0.0);
    if (s.expected.size() > 1) {
      EXPECT_DOUBLE_EQ(recall_score(s.expected, s.expected[0]), 1.0 / double(s.expected.size()));
    }
  }
}

TEST(EvalTasks, ScorerIgnoresCase) {
  const std::vector<std::string> expected = {"ABCDE", "fghij"};
  EXPECT_EQ(recall_score(expected, "abcde and FGHIJ"), 1.0);
  EXPECT_EQ(recall_score(expected, "abcd"), 0.0);
}

TEST(EvalTasks, BadInput) {
  EXPECT_THROW(make_sample("nope", 1024, 0, 0, corpus(), byte_tokens), Error);
  // Too short to hold even the question and answer.
  EXPECT_THROW(make_sample("niah_multiquery", 60, 0, 0, corpus(), byte_tokens), Error);
}

// With the real tokenizer: the counted length is the prompt's.
TEST(EvalTasks, FitsWithTheModelTokenizer) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  const gguf::File file = gguf::File::open(path);
  const tokenizer::Tokenizer tokenizer(file);
  const PromptCounter count = [&](const std::string& user, const std::string& prefix) {
    return int64_t(tokenizer.encode(user + prefix).size());
  };
  for (const std::string_view task : task_names()) {
    SCOPED_TRACE(task);
    const Sample s = make_sample(task, 1024, 0, 1, corpus(), count);
    EXPECT_LE(s.prompt_tokens + s.max_new_tokens, 1024);
    EXPECT_GE(s.prompt_tokens + s.max_new_tokens, 1024 - 64);
  }
}

}  // namespace
}  // namespace kascade::eval
