// Dense attention restricted to a sliding window of recent keys: the local
// layers of Gemma 3 style models. The query at position p attends keys
// [max(0, p - window + 1), p], its own key included, exactly (no selection),
// as Hugging Face's sliding-window causal mask (kv > q - window) and
// llama.cpp's standard SWA do.
//
// It reads only the window's rows from the layer's cache, so its cost per
// query is bounded by the window, not by the context: prefill tiles of queries
// pack the union of their windows once, decode reads the window directly.
#pragma once

#include <cstdint>
#include <memory>

#include "attention/attention.h"

namespace kascade::attention {

// window >= 1 keys. Throws Error on a bad shape or window.
std::unique_ptr<Strategy> make_sliding_window(const Shape& shape, int64_t window);

}  // namespace kascade::attention
