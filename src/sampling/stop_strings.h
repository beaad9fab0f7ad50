// Stop strings for streamed generation: finds the first stop string in the
// decoded text and holds back any tail that could still grow into one, so
// the user never sees a stop string or part of one.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kascade::sampling {

// The pure scan: where the earliest stop string starts in `text` and how many
// leading bytes are safe to show.
struct StopScan {
  int match_index;        // which stop string matched, -1 if none
  size_t match_position;  // where it starts; only meaningful when match_index >= 0
  size_t safe_length;     // bytes that can be shown (everything before a match, or
                          // everything but the longest tail that prefixes a stop string)
};
StopScan scan_for_stop_strings(std::string_view text, std::span<const std::string> stop_strings);

// Throws kascade::Error naming the first stop string that is empty or not
// valid UTF-8 (generated text always is, so such a string could never match).
void check_stop_strings(std::span<const std::string> stop_strings);

class StopStringMatcher {
 public:
  // Stop strings are checked with check_stop_strings.
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  // Adds newly decoded text and returns the part that is now safe to show.
  // When a stop string appears, returns the text before it; after that,
  // stopped() is true and further text is ignored.
  std::string push(std::string_view piece);

  // At the end of generation: returns the text still held back.
  std::string finish();

  bool stopped() const { return matched_index_ >= 0; }
  // The stop string that ended generation; only valid when stopped().
  const std::string& matched_string() const { return stop_strings_[size_t(matched_index_)]; }

 private:
  std::vector<std::string> stop_strings_;
  std::string pending_;  // not yet shown; a stop string can only start in here
  int matched_index_ = -1;
};

}  // namespace kascade::sampling
