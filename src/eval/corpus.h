// The haystack corpus: natural prose from Debian packages (data/haystack,
// built by its build_haystack.py) that fills eval prompts around the needles
// and supplies long documents for perplexity. Loaded once, then read through
// deterministic views: a run of consecutive sentences from any start (the
// corpus wraps around), and a vocabulary of plain words for word tasks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kascade::eval {

struct Sentence {
  std::string_view text;
  bool ends_paragraph = false;
};

class Corpus {
 public:
  // Reads the haystack file ('#' comments, '@@@ document: <name>' headers,
  // one paragraph per line). Throws Error naming the file and line when it is
  // missing, empty or malformed.
  static Corpus load(const std::string& path);
  // From text in the same format (tests); `source` names it in errors.
  static Corpus parse(std::string text, std::string_view source);

  Corpus(Corpus&&) = default;
  Corpus& operator=(Corpus&&) = default;

  size_t sentence_count() const { return sentences_.size(); }
  size_t paragraph_count() const { return paragraph_starts_.size(); }
  // Sentence (start + i) mod sentence_count().
  const Sentence& sentence(uint64_t start, uint64_t i) const {
    return sentences_[(start + i) % sentences_.size()];
  }
  // Index of the first sentence of paragraph p.
  size_t paragraph_start(size_t p) const { return paragraph_starts_[p]; }
  // n consecutive sentences from `start`, paragraphs separated by a line break.
  std::string passage(uint64_t start, uint64_t n) const;

  // Distinct lowercase words of 5-9 letters, ascending: the word tasks' vocabulary.
  const std::vector<std::string>& vocabulary() const { return vocabulary_; }

 private:
  Corpus() = default;
  void index(std::string_view source);

  std::string text_;  // owned; sentences point into it
  std::vector<Sentence> sentences_;
  std::vector<size_t> paragraph_starts_;
  std::vector<std::string> vocabulary_;
};

}  // namespace kascade::eval
