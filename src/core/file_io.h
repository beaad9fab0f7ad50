// Whole-file input and output with errors that name the file: a missing,
// unreadable or directory path is a one-line Error. Outputs are replaced
// atomically, so a failed write (disk full, killed process) never leaves a
// truncated file where a good one was.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace kascade {

// The file's bytes. `what` names the file in errors, e.g. "prompt file":
// "cannot read prompt file 'notes': Is a directory".
std::string read_file(const std::string& path, std::string_view what);

// Writes `bytes` to a temporary file beside `path`, then renames it over
// `path`. On any failure the temporary is removed, `path` is untouched and an
// Error says "cannot write <what> '<path>': <reason>".
void write_file(const std::string& path, std::string_view bytes, std::string_view what);

// Checks, before any work, that an output file can be created or replaced:
// not a directory, its directory exists and is writable, and it is not (or
// does not resolve, through links, to) one of `inputs`. Errors name `flag`.
void check_output_file(const std::string& path, std::string_view flag, std::initializer_list<std::string> inputs = {});

}  // namespace kascade
