// A tiny synthetic model (model/synthetic.h's "tiny": 2 layers, d_model 256)
// with a byte vocabulary and a ChatML template, on the CPU: what the server's
// HTTP tests and its fuzzer serve, in a second and without a download.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/backend.h"
#include "gguf/writer.h"
#include "model/synthetic.h"

namespace kascade::test_server {

inline std::unique_ptr<engine::Backend> tiny_chat_backend() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);  // byte
  }
  for (const char* control : {"</s>", "<|im_start|>", "<|im_end|>"}) {
    tokens.push_back(control);
    types.push_back(3);  // control
  }
  gguf::Writer source;
  source.add_string("tokenizer.ggml.model", "llama")
      .add_strings("tokenizer.ggml.tokens", tokens)
      .add_int32s("tokenizer.ggml.token_type", types)
      .add_float32s("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f))
      .add_uint32("tokenizer.ggml.eos_token_id", 256)
      .add_string("tokenizer.chat_template",
                  "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                  "<|im_start|>assistant\n");
  const std::string path =
      (std::filesystem::temp_directory_path() / fmt::format("kascade_tiny_server_{}.gguf", getpid())).string();
  model::write_synthetic_model(model::synthetic_preset("tiny"), TensorType::F32, 3, source.parse("<source>"), path);
  std::unique_ptr<engine::Backend> backend = engine::make_cpu_backend(path);
  std::filesystem::remove(path);  // mapped: the name is no longer needed
  return backend;
}

}  // namespace kascade::test_server
