// Pre-tokenizers of byte-level BPE vocabularies: they cut text into pieces
// that BPE then merges within, exactly as the Hugging Face tokenizers' regex
// splits do. Each regex is matched by hand (no regex engine) so that the
// Unicode classes are right and a 100K-character document splits in
// milliseconds. Invalid UTF-8 bytes count as "other" characters (neither
// letter, number nor space), so arbitrary bytes split without loss.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kascade::tokenizer {

enum class PreTokenizer {
  // GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // SmolLM / StarCoder: every \p{N} character on its own, then GPT-2 on the rest.
  kSmolLM,
  // Llama 3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
  //          | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // Qwen2: the Llama 3 regex with \p{N} instead of \p{N}{1,3}.
  kQwen2,
};

// Maps tokenizer.ggml.pre to a pre-tokenizer; throws Error on a name it does not know.
PreTokenizer pre_tokenizer_from_name(const std::string& name);

// Appends the pieces of `text`, in order, as views into it; they cover it exactly.
void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace kascade::tokenizer
