// Reading a whole input file (prompt, dev set, haystack corpus) with errors
// that name it: a missing, unreadable or directory path is a one-line Error.
#pragma once

#include <string>
#include <string_view>

namespace kascade {

// The file's bytes. `what` names the file in errors, e.g. "prompt file":
// "cannot read prompt file 'notes': Is a directory".
std::string read_file(const std::string& path, std::string_view what);

}  // namespace kascade
