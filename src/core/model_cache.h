// Where downloaded models live: one rule for the CLI, the tests and the
// benchmarks. scripts/fetch_model.sh stores models in the same place.
#pragma once

#include <string>
#include <string_view>

namespace kascade {

// The model that `kascade` runs when no --model is given.
inline constexpr std::string_view kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// The model of the main command (scripts/demo.sh) and of its test: the
// smallest measured that answers the demo question (README, "Models"), and
// its name for scripts/fetch_model.sh.
inline constexpr std::string_view kDemoModelFile = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
inline constexpr std::string_view kDemoModelFetchName = "qwen2.5-coder-1.5b";

// ${KASCADE_CACHE:-$HOME/.cache/kascade}/models/<file_name> (without HOME: ./.cache/kascade).
std::string cached_model_path(std::string_view file_name);

// cached_model_path(kDefaultModelFile).
std::string default_model_path();

}  // namespace kascade
