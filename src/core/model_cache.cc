#include "core/model_cache.h"

#include <cstdlib>

#include <fmt/format.h>

namespace kascade {

std::string cached_model_path(std::string_view file_name) {
  const char* cache = std::getenv("KASCADE_CACHE");
  const char* home = std::getenv("HOME");
  const std::string root = cache ? cache : std::string(home ? home : ".") + "/.cache/kascade";
  return fmt::format("{}/models/{}", root, file_name);
}

std::string default_model_path() { return cached_model_path(kDefaultModelFile); }

}  // namespace kascade
