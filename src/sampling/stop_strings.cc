// Stop-string scanning and the streaming matcher built on it.
#include "sampling/stop_strings.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace kascade::sampling {

StopScan scan_for_stop_strings(std::string_view text, std::span<const std::string> stop_strings) {
  StopScan scan{-1, std::string_view::npos, text.size()};
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    const size_t position = text.find(stop_strings[i]);
    if (position < scan.match_position) {
      scan = {int(i), position, position};
    }
  }
  if (scan.match_index >= 0) return scan;

  // No match: hold back the longest tail of `text` that a stop string starts with.
  size_t held_back = 0;
  for (const std::string& stop : stop_strings) {
    const size_t longest = std::min(text.size(), stop.size() - 1);
    for (size_t length = longest; length > held_back; --length) {
      if (text.substr(text.size() - length) == std::string_view(stop).substr(0, length)) {
        held_back = length;
        break;
      }
    }
  }
  scan.safe_length = text.size() - held_back;
  return scan;
}

void check_stop_strings(std::span<const std::string> stop_strings) {
  for (size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) fail("stop string {} is empty", i);
    if (!tokenizer::is_valid_utf8(stop_strings[i]))
      fail("stop string {} is not valid UTF-8: the generated text always is, so it could never match", i);
  }
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings)
    : stop_strings_(std::move(stop_strings)) {
  check_stop_strings(stop_strings_);
}

std::string StopStringMatcher::push(std::string_view piece) {
  if (stopped()) return {};
  pending_.append(piece);
  const StopScan scan = scan_for_stop_strings(pending_, stop_strings_);
  std::string shown = pending_.substr(0, scan.safe_length);
  if (scan.match_index >= 0) {
    matched_index_ = scan.match_index;
    pending_.clear();
  } else {
    pending_.erase(0, scan.safe_length);
  }
  return shown;
}

std::string StopStringMatcher::finish() {
  if (stopped()) return {};
  return std::exchange(pending_, {});
}

}  // namespace kascade::sampling
