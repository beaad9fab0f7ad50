#include "eval/corpus.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "core/file_io.h"

namespace kascade::eval {
namespace {

bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }
bool is_lower(char c) { return c >= 'a' && c <= 'z'; }

// Splits a paragraph after '.', '!' or '?' (optionally closed by a quote or
// bracket) followed by a space and a capital letter: good enough for prose,
// and it never cuts inside "e.g. the" or "3.14".
void split_sentences(std::string_view paragraph, std::vector<Sentence>& out) {
  size_t begin = 0;
  for (size_t i = 0; i + 2 < paragraph.size(); ++i) {
    if (paragraph[i] != '.' && paragraph[i] != '!' && paragraph[i] != '?') continue;
    size_t j = i + 1;
    while (j < paragraph.size() && (paragraph[j] == '"' || paragraph[j] == '\'' || paragraph[j] == ')')) ++j;
    if (j + 1 < paragraph.size() && paragraph[j] == ' ' && is_upper(paragraph[j + 1])) {
      out.push_back({paragraph.substr(begin, j - begin), false});
      begin = j + 1;
      i = j;
    }
  }
  out.push_back({paragraph.substr(begin), true});
}

}  // namespace

Corpus Corpus::load(const std::string& path) {
  if (!std::filesystem::exists(path))
    fail("haystack corpus '{}' does not exist (build it with data/haystack/build_haystack.py)", path);
  return parse(read_file(path, "the haystack corpus"), path);
}

Corpus Corpus::parse(std::string text, std::string_view source) {
  Corpus corpus;
  corpus.text_ = std::move(text);
  corpus.index(source);
  return corpus;
}

void Corpus::index(std::string_view source) {
  const std::string_view all = text_;
  bool in_document = false;
  size_t line_number = 0;
  std::set<std::string> words;
  for (size_t pos = 0; pos < all.size();) {
    size_t end = all.find('\n', pos);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view line = all.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.empty() || line.starts_with('#')) continue;
    if (line.starts_with("@@@ document: ")) {
      in_document = true;
      continue;
    }
    if (!in_document) fail("{}:{}: text before the first '@@@ document:' header", source, line_number);
    paragraph_starts_.push_back(sentences_.size());
    split_sentences(line, sentences_);
    for (size_t i = 0; i < line.size();) {
      size_t j = i;
      while (j < line.size() && is_lower(line[j])) ++j;
      const bool whole = (i == 0 || !std::isalpha(uint8_t(line[i - 1]))) &&
                         (j == line.size() || !std::isalpha(uint8_t(line[j])));
      if (whole && j - i >= 5 && j - i <= 9) words.emplace(line.substr(i, j - i));
      i = j == i ? i + 1 : j;
    }
  }
  if (sentences_.empty()) fail("{}: the haystack corpus has no text", source);
  vocabulary_.assign(words.begin(), words.end());
}

std::string Corpus::passage(uint64_t start, uint64_t n) const {
  std::string out;
  for (uint64_t i = 0; i < n; ++i) {
    const Sentence& s = sentence(start, i);
    out += s.text;
    if (i + 1 < n) out += s.ends_paragraph ? '\n' : ' ';
  }
  return out;
}

}  // namespace kascade::eval
