// Reading calibration development sets (see dev_set.h).
#include "calibration/dev_set.h"

#include "core/error.h"
#include "core/file_io.h"

namespace kascade::calibration {

namespace {

constexpr std::string_view kHeader = "@@@ document: ";

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\n") == std::string_view::npos; }

}  // namespace

std::vector<DevDocument> parse_dev_set(std::string_view content, const std::string& name) {
  std::vector<DevDocument> documents;
  size_t header_line = 0;
  auto finish_document = [&] {
    if (!documents.empty() && is_blank(documents.back().text))
      fail("dev set '{}' line {}: document '{}' is empty", name, header_line, documents.back().source);
  };
  size_t line_number = 0;
  for (size_t pos = 0; pos < content.size();) {
    const size_t end = content.find('\n', pos);
    const size_t next = end == std::string_view::npos ? content.size() : end + 1;
    const std::string_view line = content.substr(pos, next - pos);  // with its '\n'
    ++line_number;
    pos = next;
    if (line.starts_with(kHeader)) {
      finish_document();
      std::string_view source = line.substr(kHeader.size());
      while (!source.empty() && (source.back() == '\n' || source.back() == '\r')) source.remove_suffix(1);
      if (is_blank(source)) fail("dev set '{}' line {}: document header without a source name", name, line_number);
      documents.push_back({std::string(source), {}});
      header_line = line_number;
    } else if (!documents.empty()) {
      documents.back().text.append(line);
    } else if (!line.starts_with("#") && !is_blank(line)) {
      fail("dev set '{}' line {}: text before the first '{}<source>' line", name, line_number, kHeader);
    }
  }
  finish_document();
  if (documents.empty()) fail("dev set '{}' holds no documents (each starts with a '{}<source>' line)", name, kHeader);
  return documents;
}

std::vector<DevDocument> load_dev_set(const std::string& path) {
  return parse_dev_set(read_file(path, "dev set"), path);
}

}  // namespace kascade::calibration
