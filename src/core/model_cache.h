// Where downloaded models live: one rule for the CLI, the tests and the
// benchmarks. scripts/fetch_model.sh stores models in the same place.
#pragma once

#include <string>
#include <string_view>

namespace kascade {

// The model that `kascade` runs when no --model is given.
inline constexpr std::string_view kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// ${KASCADE_CACHE:-$HOME/.cache/kascade}/models/<file_name> (without HOME: ./.cache/kascade).
std::string cached_model_path(std::string_view file_name);

// cached_model_path(kDefaultModelFile).
std::string default_model_path();

}  // namespace kascade
