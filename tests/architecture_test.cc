// The folders of src/ as layers (docs/architecture.md): every #include of
// another folder must point to a lower layer, so the folders form no loop.
// The test reads the sources themselves.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>

namespace {

// Lower numbers lie lower; a folder may include only folders below it.
const std::map<std::string, int> kLayers = {
    {"core", 0},
    {"quant", 1},      {"plot", 1},
    {"gguf", 2},       {"ops", 2},
    {"tokenizer", 3},  {"kascade", 3},
    {"attention", 4},  {"cuda", 4},     {"sampling", 4},
    {"model", 5},
    {"engine", 6},
    {"gpu", 7},
    {"backends", 8},
    {"calibration", 9}, {"eval", 9},    {"server", 9},
    {"cli", 10},
};

TEST(Architecture, IncludesPointDown) {
  const std::filesystem::path src = std::filesystem::path(KASCADE_SOURCE_DIR) / "src";
  const std::regex include(R"(^\s*#\s*include\s*"([a-z_]+)/)");
  int checked = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string folder = std::filesystem::relative(entry.path(), src).begin()->string();
    const auto layer = kLayers.find(folder);
    ASSERT_NE(layer, kLayers.end()) << "src/" << folder << " has no layer: add it here and in docs/architecture.md";
    std::ifstream file(entry.path());
    std::string line;
    std::smatch match;
    while (std::getline(file, line)) {
      if (!std::regex_search(line, match, include) || match[1] == folder) continue;
      const auto target = kLayers.find(match[1]);
      ASSERT_NE(target, kLayers.end()) << entry.path() << " includes unknown folder " << match[1];
      EXPECT_LT(target->second, layer->second) << entry.path() << ": " << line << " points up or sideways";
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);  // the walk saw the sources
}

}  // namespace
