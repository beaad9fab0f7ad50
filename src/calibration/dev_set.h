// Development sets for Kascade calibration: long documents the dense model
// reads so calibration can measure its attention. The file format (also that
// of the built-in set, data/devset/devset.txt): UTF-8 text; '#' comment lines,
// then documents, each opened by a line "@@@ document: <source name>" and
// running up to the next such line or the end of the file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kascade::calibration {

struct DevDocument {
  std::string source;  // what the header names (where the text came from)
  std::string text;
};

// Throws Error naming the file and line on a missing file, text before the
// first header, an empty document or a file without documents.
std::vector<DevDocument> load_dev_set(const std::string& path);
std::vector<DevDocument> parse_dev_set(std::string_view content, const std::string& name);

}  // namespace kascade::calibration
