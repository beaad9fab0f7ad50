// The CPU attention strategies behind one constructor: dense, Kascade (its
// plan, kascade/plan.h, decides what each layer does) and the comparison
// strategies. Their semantics and options are in kascade/options.h.
#pragma once

#include <memory>

#include "attention/attention.h"
#include "kascade/options.h"

namespace kascade::attention {

// Validates the options against the shape (Error naming the option) and
// builds the strategy.
std::unique_ptr<Strategy> make_strategy(const AttentionOptions& options, const Shape& shape);

}  // namespace kascade::attention
