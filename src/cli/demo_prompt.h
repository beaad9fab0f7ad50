// The built-in demo prompt of `kascade generate --demo`: a long original
// document followed by a question whose answer sits in its middle, so one
// command exercises long-context prefill and shows whether the answer survives.
#pragma once

#include <string>

namespace kascade::cli {

// The document and the question, ready to send as the user message.
std::string demo_prompt();

}  // namespace kascade::cli
