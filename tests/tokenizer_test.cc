// Tokenizer tests. With the default model: identical ids to Hugging Face's
// tokenizers on the fixture strings of tools/gen_tokenizer_golden.py, under
// the model's own pre-tokenizer and three others on the same vocabulary, plus
// round trips and speed. Without any model: hand-built vocabularies in GGUFs
// written in memory (byte-level BPE merges, SentencePiece with byte fallback,
// special tokens, streaming decode, bad metadata), and a SentencePiece model
// trained by sentencepiece itself, compared with sentencepiece's ids.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model_cache.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kascade::tokenizer {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
constexpr bool kSanitized = false;
#endif

const std::string kDataDir = std::string(KASCADE_SOURCE_DIR) + "/tests/data/tokenizer/";

// Spells bytes in GPT-2's byte alphabet, as byte-level vocabularies store tokens.
std::string spell(std::string_view bytes) {
  std::string text;
  for (char byte : bytes) append_utf8(text, byte_to_code_point(static_cast<uint8_t>(byte)));
  return text;
}

// A byte-level vocabulary: the 256 byte tokens (id = byte value), then `extra`
// tokens (given as bytes) and the merges (pairs of byte strings), in rank order.
struct TinyByteLevel {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;

  TinyByteLevel() {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(spell(std::string(1, static_cast<char>(b))));
      types.push_back(1);
    }
  }
  TokenId add(std::string_view bytes, int32_t type = 1) {
    tokens.push_back(type == 1 ? spell(bytes) : std::string(bytes));
    types.push_back(type);
    return static_cast<TokenId>(tokens.size() - 1);
  }
  TokenId merge(std::string_view left, std::string_view right) {
    merges.push_back(spell(left) + " " + spell(right));
    const std::string joined = std::string(left) + std::string(right);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] == spell(joined)) return static_cast<TokenId>(i);
    }
    return add(joined);
  }
  gguf::Writer gguf(const std::string& pre = "gpt2") const {
    gguf::Writer builder;
    builder.add_string("tokenizer.ggml.model", "gpt2")
        .add_string("tokenizer.ggml.pre", pre)
        .add_strings("tokenizer.ggml.tokens", tokens)
        .add_int32s("tokenizer.ggml.token_type", types)
        .add_strings("tokenizer.ggml.merges", merges);
    return builder;
  }
};

std::vector<std::string> split(PreTokenizer kind, std::string_view text) {
  std::vector<std::string_view> views;
  pre_tokenize(kind, text, views);
  return {views.begin(), views.end()};
}

using Pieces = std::vector<std::string>;

// The text as a byte-level vocabulary can spell it: bytes without a token are dropped.
std::string spellable(const Tokenizer& tokenizer, std::string_view text) {
  std::string kept;
  for (char byte : text) {
    if (tokenizer.find_token(spell(std::string_view(&byte, 1)))) kept.push_back(byte);
  }
  return kept;
}

// ---------------------------------------------------------------------------
// Unicode helpers

TEST(Unicode, ByteAlphabetMatchesGpt2) {
  EXPECT_EQ(byte_to_code_point('A'), 'A');
  EXPECT_EQ(byte_to_code_point(' '), 0x120u);   // 'Ġ'
  EXPECT_EQ(byte_to_code_point('\n'), 0x10Au);  // 'Ċ'
  EXPECT_EQ(byte_to_code_point(0x00), 0x100u);
  EXPECT_EQ(byte_to_code_point(0x7F), 0x121u);
  EXPECT_EQ(byte_to_code_point(0xAD), 0x143u);
  EXPECT_EQ(byte_to_code_point(0xE9), 0xE9u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(code_point_to_byte(byte_to_code_point(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(code_point_to_byte(0x4E00), -1);
}

TEST(Unicode, ClassesFollowUnicode) {
  EXPECT_EQ(classify('a'), CodePointClass::kLetter);
  EXPECT_EQ(classify(0x4E2D), CodePointClass::kLetter);   // 中
  EXPECT_EQ(classify(0x0301), CodePointClass::kOther);    // combining acute: a mark
  EXPECT_EQ(classify(0x0663), CodePointClass::kNumber);   // Arabic-Indic three
  EXPECT_EQ(classify(0x00BD), CodePointClass::kNumber);   // ½
  EXPECT_EQ(classify(0x2167), CodePointClass::kNumber);   // Roman numeral eight
  EXPECT_EQ(classify(0x3000), CodePointClass::kWhitespace);
  EXPECT_EQ(classify(0x0085), CodePointClass::kWhitespace);
  EXPECT_EQ(classify(0x200B), CodePointClass::kOther);    // zero width space is not White_Space
  EXPECT_EQ(classify(0x1F600), CodePointClass::kOther);   // emoji
  EXPECT_EQ(classify(0x10FFFF), CodePointClass::kOther);
}

TEST(Unicode, DecodesOnlyWellFormedUtf8) {
  EXPECT_EQ(decode_utf8("\xC3\xA9", 0).code_point, 0xE9u);
  EXPECT_EQ(decode_utf8("\xF0\x9F\x98\x80", 0).code_point, 0x1F600u);
  for (std::string_view bad : {"\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xC3", "\x80",
                               "\xFF"}) {
    const DecodedChar ch = decode_utf8(bad, 0);
    EXPECT_EQ(ch.length, 1u) << gguf::printable(bad);
    EXPECT_EQ(ch.code_point, kInvalidByteBase + static_cast<uint8_t>(bad[0]));
  }
  EXPECT_TRUE(is_valid_utf8("héllo 😀"));
  EXPECT_FALSE(is_valid_utf8("h\xC3llo"));
}

// ---------------------------------------------------------------------------
// Pre-tokenizers, on cases worked out by hand from the regexes

TEST(PreTokenizer, Gpt2) {
  EXPECT_EQ(split(PreTokenizer::kGpt2, "Hello  world's 123 !!x"),
            (Pieces{"Hello", " ", " world", "'s", " 123", " !!", "x"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "a \n b"), (Pieces{"a", " \n", " b"}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(split(PreTokenizer::kGpt2, "IT'S"), (Pieces{"IT", "'", "S"}));  // case-sensitive contractions
  EXPECT_EQ(split(PreTokenizer::kGpt2, "\t\tx"), (Pieces{"\t", "\t", "x"}));  // only a space joins the word
  EXPECT_EQ(split(PreTokenizer::kGpt2, "  x"), (Pieces{" ", " x"}));
}

TEST(PreTokenizer, SmolLMIsolatesDigits) {
  EXPECT_EQ(split(PreTokenizer::kSmolLM, "word  12"), (Pieces{"word", "  ", "1", "2"}));
  EXPECT_EQ(split(PreTokenizer::kSmolLM, "a1b"), (Pieces{"a", "1", "b"}));
  EXPECT_EQ(split(PreTokenizer::kSmolLM, "x ½ y"), (Pieces{"x", " ", "½", " y"}));
}

TEST(PreTokenizer, Llama3) {
  EXPECT_EQ(split(PreTokenizer::kLlama3, "12345 IT'S"), (Pieces{"123", "45", " IT", "'S"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "\thello.\n\n  x"), (Pieces{"\thello", ".\n\n", " ", " x"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "a\n \n b"), (Pieces{"a", "\n \n", " b"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "'\u017ft"), (Pieces{"'\u017f", "t"}));  // long s folds to s
  EXPECT_EQ(split(PreTokenizer::kQwen2, "123"), (Pieces{"1", "2", "3"}));
}

TEST(PreTokenizer, InvalidBytesAreOtherCharacters) {
  EXPECT_EQ(split(PreTokenizer::kGpt2, "ab\xFF\xFE cd"), (Pieces{"ab", "\xFF\xFE", " cd"}));
  EXPECT_EQ(split(PreTokenizer::kLlama3, "\xC3x"), (Pieces{"\xC3x"}));
}

TEST(PreTokenizer, UnknownNameIsAnError) {
  EXPECT_THROW(pre_tokenizer_from_name("nonesuch"), Error);
  EXPECT_EQ(pre_tokenizer_from_name("llama-bpe"), PreTokenizer::kLlama3);
}

// ---------------------------------------------------------------------------
// Byte-level BPE on a hand-built vocabulary

TEST(ByteLevelBpe, AppliesMergesByRank) {
  TinyByteLevel vocab;
  const TokenId bc = vocab.merge("b", "c");    // rank 0
  const TokenId ab = vocab.merge("a", "b");    // rank 1: loses to "b c" in "abc"
  const TokenId aa = vocab.merge("a", "a");    // rank 2
  const TokenId he = vocab.merge("h", "e");
  const TokenId ll = vocab.merge("l", "l");
  const TokenId hell = vocab.merge("he", "ll");
  const TokenId hello = vocab.merge("hell", "o");
  const TokenId space_w = vocab.merge(" ", "w");
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  EXPECT_EQ(tokenizer.encode("abc"), (std::vector<TokenId>{'a', bc}));
  EXPECT_EQ(tokenizer.encode("ab"), (std::vector<TokenId>{ab}));
  EXPECT_EQ(tokenizer.encode("aaa"), (std::vector<TokenId>{aa, 'a'}));  // ties go to the leftmost pair
  EXPECT_EQ(tokenizer.encode("aaaa"), (std::vector<TokenId>{aa, aa}));
  EXPECT_EQ(tokenizer.encode("hello world"), (std::vector<TokenId>{hello, space_w, 'o', 'r', 'l', 'd'}));
  EXPECT_EQ(tokenizer.encode("hel"), (std::vector<TokenId>{he, 'l'}));
  EXPECT_EQ(tokenizer.encode("hell"), (std::vector<TokenId>{hell}));
  EXPECT_EQ(tokenizer.encode("ll"), (std::vector<TokenId>{ll}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("hello world")), "hello world");
}

TEST(ByteLevelBpe, LongPiecesMergeFully) {
  TinyByteLevel vocab;
  const TokenId aa = vocab.merge("a", "a");
  const TokenId aaaa = vocab.merge("aa", "aa");
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  const std::vector<TokenId> ids = tokenizer.encode(std::string(100001, 'a'));
  ASSERT_EQ(ids.size(), 25001u);
  EXPECT_EQ(ids.front(), aaaa);
  EXPECT_EQ(ids.back(), 'a');
  EXPECT_EQ(tokenizer.encode(std::string(6, 'a')), (std::vector<TokenId>{aaaa, aa}));
}

TEST(ByteLevelBpe, IgnoreMergesKeepsWholeTokens) {
  // "abc" is a token that the merges cannot reach; Llama 3's tokenizer uses it as is.
  TinyByteLevel vocab;
  const TokenId ab = vocab.merge("a", "b");
  const TokenId abc = vocab.add("abc");
  EXPECT_EQ(Tokenizer(vocab.gguf("gpt2").parse("<test gguf>")).encode("abc"), (std::vector<TokenId>{ab, 'c'}));
  EXPECT_EQ(Tokenizer(vocab.gguf("llama-bpe").parse("<test gguf>")).encode("abc"), (std::vector<TokenId>{abc}));
}

TEST(ByteLevelBpe, ArbitraryBytesRoundTrip) {
  TinyByteLevel vocab;
  vocab.merge("\xC3", "\xA9");
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  for (const std::string& text : {all_bytes, std::string("caf\xC3\xA9 \xFF\xFE\xC3 \xED\xA0\x80!")}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
  }
}

TEST(ByteLevelBpe, BytesWithoutATokenAreDropped) {
  TinyByteLevel vocab;
  vocab.tokens[0x1D] = "<unused>";
  vocab.types[0x1D] = 5;
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  EXPECT_EQ(tokenizer.encode("a\x1D" "b"), (std::vector<TokenId>{'a', 'b'}));
  EXPECT_EQ(tokenizer.encode("\x1D"), (std::vector<TokenId>{}));
  EXPECT_EQ(spellable(tokenizer, "a\x1D" "b"), "ab");
}

TEST(ByteLevelBpe, BosAndEosFollowMetadata) {
  TinyByteLevel vocab;
  const TokenId bos = vocab.add("<s>", 3), eos = vocab.add("</s>", 3);
  gguf::Writer builder = vocab.gguf();
  builder.add_uint32("tokenizer.ggml.bos_token_id", bos)
      .add_uint32("tokenizer.ggml.eos_token_id", eos)
      .add_bool("tokenizer.ggml.add_bos_token", true)
      .add_bool("tokenizer.ggml.add_eos_token", true);
  const Tokenizer tokenizer(builder.parse("<test gguf>"));
  EXPECT_EQ(tokenizer.encode("x"), (std::vector<TokenId>{bos, 'x', eos}));
  EXPECT_EQ(tokenizer.encode("x", false), (std::vector<TokenId>{'x'}));
  EXPECT_EQ(tokenizer.encode(""), (std::vector<TokenId>{bos, eos}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("x")), "<s>x</s>");
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("x"), true), "x");
  EXPECT_TRUE(tokenizer.is_end_of_generation(eos));
  EXPECT_FALSE(tokenizer.is_end_of_generation(bos));
}

// ---------------------------------------------------------------------------
// Special tokens

TEST(SpecialTokens, ControlTokensOnlyWhenParsing) {
  TinyByteLevel vocab;
  const TokenId short_special = vocab.add("<|a|>", 3);
  const TokenId long_special = vocab.add("<|a|>b", 3);  // longest match wins
  const TokenId user = vocab.add("<u>", 4);
  const TokenId end_of_turn = vocab.add("<|im_end|>", 3);
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  EXPECT_EQ(tokenizer.encode("x<|a|>y", false, true), (std::vector<TokenId>{'x', short_special, 'y'}));
  EXPECT_EQ(tokenizer.encode("<|a|>b<|a|>", false, true), (std::vector<TokenId>{long_special, short_special}));
  EXPECT_EQ(tokenizer.encode("<|a|", false, true), (std::vector<TokenId>{'<', '|', 'a', '|'}));
  // Not parsing: control tokens are text, user-defined tokens still match whole.
  EXPECT_EQ(tokenizer.encode("<|a|>", false, false), (std::vector<TokenId>{'<', '|', 'a', '|', '>'}));
  EXPECT_EQ(tokenizer.encode("a<u>b", false, false), (std::vector<TokenId>{'a', user, 'b'}));
  EXPECT_EQ(tokenizer.decode(std::vector<TokenId>{'a', user, short_special}), "a<u><|a|>");
  EXPECT_EQ(tokenizer.decode(std::vector<TokenId>{'a', user, short_special}, true), "a<u>");
  // <|im_end|> names the end of a turn when the file does not.
  EXPECT_EQ(tokenizer.eot_id(), end_of_turn);
  EXPECT_TRUE(tokenizer.is_end_of_generation(end_of_turn));
}

// ---------------------------------------------------------------------------
// Streaming decode

TEST(StreamDecoder, EmitsOnlyCompleteCharacters) {
  TinyByteLevel vocab;  // no merges: every byte is its own token
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  const std::string text = "é😀x";
  StreamDecoder stream(tokenizer);
  std::vector<std::string> outputs;
  for (TokenId id : tokenizer.encode(text)) outputs.push_back(stream.push(id));
  EXPECT_EQ(outputs, (std::vector<std::string>{"", "é", "", "", "", "😀", "x"}));
  EXPECT_EQ(stream.finish(), "");
}

TEST(StreamDecoder, ReplacesBytesThatCannotFormACharacter) {
  TinyByteLevel vocab;
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  StreamDecoder stream(tokenizer);
  EXPECT_EQ(stream.push(0xFF), "\uFFFD");
  EXPECT_EQ(stream.push(0xE2), "");
  EXPECT_EQ(stream.push(0x82), "");
  EXPECT_EQ(stream.push('a'), "\uFFFD\uFFFDa");  // the unfinished character is broken by 'a'
  EXPECT_EQ(stream.push(0xF0), "");
  EXPECT_EQ(stream.finish(), "\uFFFD");
  StreamDecoder overlong(tokenizer);
  EXPECT_EQ(overlong.push(0xE0), "");
  EXPECT_EQ(overlong.push(0x80), "\uFFFD\uFFFD");  // E0 80 can never be well-formed
}

// ---------------------------------------------------------------------------
// SentencePiece on a hand-built vocabulary

struct TinySentencePiece {
  std::vector<std::string> tokens{"<unk>", "<s>", "</s>"};
  std::vector<float> scores{0, 0, 0};
  std::vector<int32_t> types{2, 3, 3};
  TinySentencePiece() {
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(fmt::format("<0x{:02X}>", b));
      scores.push_back(0);
      types.push_back(6);
    }
  }
  TokenId add(const std::string& text, float score, int32_t type = 1) {
    tokens.push_back(text);
    scores.push_back(score);
    types.push_back(type);
    return static_cast<TokenId>(tokens.size() - 1);
  }
  TokenId byte(uint8_t b) const { return 3 + b; }
  gguf::Writer gguf() const {
    gguf::Writer builder;
    builder.add_string("tokenizer.ggml.model", "llama")
        .add_strings("tokenizer.ggml.tokens", tokens)
        .add_float32s("tokenizer.ggml.scores", scores)
        .add_int32s("tokenizer.ggml.token_type", types)
        .add_uint32("tokenizer.ggml.unknown_token_id", 0)
        .add_uint32("tokenizer.ggml.bos_token_id", 1)
        .add_uint32("tokenizer.ggml.eos_token_id", 2);
    return builder;
  }
};

TEST(SentencePiece, MergesByScoreWithByteFallback) {
  TinySentencePiece vocab;
  const TokenId space = vocab.add("\u2581", -1);
  vocab.add("a", -2);
  const TokenId b = vocab.add("b", -3), c = vocab.add("c", -4);
  const TokenId space_a = vocab.add("\u2581a", -5);
  vocab.add("ab", -6);
  const TokenId bc = vocab.add("bc", -1);     // better than "ab": "abc" -> a + bc
  const TokenId space_ab = vocab.add("\u2581ab", -7);
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  EXPECT_TRUE(tokenizer.add_bos());
  EXPECT_EQ(tokenizer.encode("ab"), (std::vector<TokenId>{1, space_ab}));
  EXPECT_EQ(tokenizer.encode("abc", false), (std::vector<TokenId>{space_a, bc}));
  EXPECT_EQ(tokenizer.encode("ab ab", false), (std::vector<TokenId>{space_ab, space_ab}));
  EXPECT_EQ(tokenizer.encode("b  c", false), (std::vector<TokenId>{space, b, space, space, c}));
  // é is not in the vocabulary: its two UTF-8 bytes become byte tokens.
  EXPECT_EQ(tokenizer.encode("aé", false), (std::vector<TokenId>{space_a, vocab.byte(0xC3), vocab.byte(0xA9)}));
  for (const char* text : {"ab", "abc", "ab ab", "b  c", "aé", " lead", "caf\xC3\xA9 \xFF", "😀 x"}) {
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text), true), text) << text;
  }
  EXPECT_EQ(tokenizer.token_to_piece(space_ab), " ab");
  EXPECT_EQ(tokenizer.token_to_piece(vocab.byte('A')), "A");
}

TEST(SentencePiece, SpacePrefixAfterControlTokens) {
  TinySentencePiece vocab;
  const TokenId space_a = vocab.add("\u2581a", -1);
  const TokenId a = vocab.add("a", -2);
  const TokenId space = vocab.add("\u2581", -3);
  const TokenId sep = vocab.add("<sep>", 0, 4);
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  // A control token starts a new text, which gets its space prefix; a user-defined
  // token is matched inside the text, as sentencepiece does.
  EXPECT_EQ(tokenizer.encode("a</s>a", false, true), (std::vector<TokenId>{space_a, 2, space_a}));
  EXPECT_EQ(tokenizer.encode("a<sep>a", false), (std::vector<TokenId>{space_a, sep, a}));
  EXPECT_EQ(tokenizer.encode("<sep>a", false), (std::vector<TokenId>{space, sep, a}));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("<sep>a")), "<s><sep>a");
}

// sentencepiece's own ids for a model it trained (tools/gen_tokenizer_golden.py).
TEST(SentencePiece, MatchesSentencepieceLibrary) {
  std::ifstream in(kDataDir + "spm_tiny.json");
  ASSERT_TRUE(in) << "missing fixture spm_tiny.json";
  const nlohmann::json fixture = nlohmann::json::parse(in);
  gguf::Writer builder;
  builder.add_string("tokenizer.ggml.model", "llama")
      .add_strings("tokenizer.ggml.tokens", fixture["tokens"].get<std::vector<std::string>>())
      .add_float32s("tokenizer.ggml.scores", fixture["scores"].get<std::vector<float>>())
      .add_int32s("tokenizer.ggml.token_type", fixture["types"].get<std::vector<int32_t>>())
      .add_uint32("tokenizer.ggml.unknown_token_id", fixture["unk"])
      .add_uint32("tokenizer.ggml.bos_token_id", fixture["bos"])
      .add_uint32("tokenizer.ggml.eos_token_id", fixture["eos"]);
  const Tokenizer tokenizer(builder.parse("<test gguf>"));
  size_t mismatches = 0, cases = 0;
  for (const nlohmann::json& item : fixture["cases"]) {
    const std::string text = item["text"];
    const std::vector<TokenId> expected = item["ids"];
    const std::vector<TokenId> ids = tokenizer.encode(text, false);
    ++cases;
    if (ids != expected) {
      ++mismatches;
      ADD_FAILURE() << "text '" << gguf::printable(text) << "': " << ::testing::PrintToString(ids) << " vs "
                    << ::testing::PrintToString(expected);
    }
    EXPECT_EQ(tokenizer.decode(ids), text) << gguf::printable(text);
  }
  EXPECT_GE(cases, 400u);
  EXPECT_EQ(mismatches, 0u);
}

// ---------------------------------------------------------------------------
// Bad metadata

TEST(TokenizerErrors, BadMetadataIsAnError) {
  TinyByteLevel vocab;
  const auto expect_error = [](const gguf::Writer& builder, const std::string& needle) {
    try {
      Tokenizer tokenizer(builder.parse("<test gguf>"));
      ADD_FAILURE() << "no error, expected one naming " << needle;
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << error.what();
    }
  };
  expect_error(gguf::Writer().add_string("tokenizer.ggml.model", "gpt2"), "tokenizer.ggml.tokens");
  expect_error(gguf::Writer().add_string("tokenizer.ggml.model", "bert"), "tokenizer.ggml.model");
  expect_error(vocab.gguf("nonesuch"), "tokenizer.ggml.pre");
  gguf::Writer bad_bos = vocab.gguf();
  bad_bos.add_uint32("tokenizer.ggml.bos_token_id", 100000);
  expect_error(bad_bos, "tokenizer.ggml.bos_token_id");
  TinyByteLevel bad_merge = vocab;
  bad_merge.merges.push_back(spell("a") + " " + spell("zz"));
  expect_error(bad_merge.gguf(), "tokenizer.ggml.merges[0]");
  TinyByteLevel no_space = vocab;
  no_space.merges.push_back("ab");
  expect_error(no_space.gguf(), "tokenizer.ggml.merges[0]");
  TinyByteLevel bad_types = vocab;
  bad_types.types.pop_back();
  expect_error(bad_types.gguf(), "tokenizer.ggml.token_type");
  TinySentencePiece spm;
  gguf::Writer no_scores;
  no_scores.add_string("tokenizer.ggml.model", "llama").add_strings("tokenizer.ggml.tokens", spm.tokens);
  expect_error(no_scores, "tokenizer.ggml.scores");
  TinySentencePiece bad_byte;
  bad_byte.add("<0xZZ>", 0, 6);
  expect_error(bad_byte.gguf(), "tokenizer.ggml.tokens[");
  const Tokenizer tokenizer(vocab.gguf().parse("<test gguf>"));
  EXPECT_THROW(tokenizer.decode(std::vector<TokenId>{-1}), Error);
  EXPECT_THROW(tokenizer.decode(std::vector<TokenId>{static_cast<TokenId>(tokenizer.vocab_size())}), Error);
}

// ---------------------------------------------------------------------------
// The default model against Hugging Face

class DefaultModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(default_model_path())) return;
    file_ = new gguf::File(gguf::File::open(default_model_path()));
    tokenizer_ = new Tokenizer(*file_);
    std::ifstream in(kDataDir + "smollm2_golden.jsonl");
    for (std::string line; std::getline(in, line);) {
      nlohmann::json record = nlohmann::json::parse(line);
      if (!record.contains("meta")) records_.push_back(std::move(record));
    }
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete file_;
    tokenizer_ = nullptr;
    file_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << "default model not found at " << default_model_path();
  }
  // The model's vocabulary with another pre-tokenizer.
  static Tokenizer with_pre_tokenizer(const std::string& pre) {
    gguf::Writer builder;
    builder.add_string("tokenizer.ggml.model", "gpt2")
        .add_string("tokenizer.ggml.pre", pre)
        .add_strings("tokenizer.ggml.tokens", file_->get_string_array("tokenizer.ggml.tokens"))
        .add_strings("tokenizer.ggml.merges", file_->get_string_array("tokenizer.ggml.merges"));
    std::vector<int32_t> types;
    for (int64_t type : file_->get_int_array("tokenizer.ggml.token_type")) types.push_back(static_cast<int32_t>(type));
    builder.add_int32s("tokenizer.ggml.token_type", types);
    return Tokenizer(builder.parse("<test gguf>"));
  }
  // Compares every fixture string; `field` names the expected ids (falling back to "smollm").
  static void expect_parity(const Tokenizer& tokenizer, const std::string& field, bool parse_special) {
    size_t compared = 0, mismatches = 0;
    for (const nlohmann::json& record : records_) {
      const std::string key = record.contains(field) ? field : "smollm";
      if (!parse_special && !record.contains(field)) continue;
      const std::string text = record["text"];
      const std::vector<TokenId> expected = record[key];
      const std::vector<TokenId> ids = tokenizer.encode(text, false, parse_special);
      ++compared;
      if (ids != expected && ++mismatches <= 5) {
        ADD_FAILURE() << field << ": text '" << gguf::printable(text) << "'\n ours " << ::testing::PrintToString(ids)
                      << "\n   hf " << ::testing::PrintToString(expected);
      }
    }
    std::printf("%s: %zu strings, %zu mismatches\n", field.c_str(), compared, mismatches);
    EXPECT_EQ(mismatches, 0u) << field;
  }

  static inline gguf::File* file_ = nullptr;
  static inline Tokenizer* tokenizer_ = nullptr;
  static inline std::vector<nlohmann::json> records_;
};

TEST_F(DefaultModel, MetadataOfSmolLM2) {
  EXPECT_EQ(tokenizer_->model(), TokenizerModel::kByteLevelBpe);
  EXPECT_EQ(tokenizer_->vocab_size(), 49152u);
  EXPECT_EQ(tokenizer_->bos_id(), 1);
  EXPECT_EQ(tokenizer_->eos_id(), 2);
  EXPECT_FALSE(tokenizer_->add_bos());
  EXPECT_TRUE(tokenizer_->is_end_of_generation(2));  // <|im_end|>
  EXPECT_FALSE(tokenizer_->is_end_of_generation(1));
  EXPECT_EQ(tokenizer_->token_text(1), "<|im_start|>");
  EXPECT_NE(tokenizer_->chat_template().find("<|im_start|>"), std::string::npos);
}

TEST_F(DefaultModel, MatchesAuthorsTokenizer) {
  ASSERT_GE(records_.size(), 1000u) << "fixture smollm2_golden.jsonl";
  expect_parity(*tokenizer_, "smollm", true);
}

TEST_F(DefaultModel, MatchesWithSpecialTokensAsText) { expect_parity(*tokenizer_, "smollm_plain", false); }

TEST_F(DefaultModel, MatchesOtherPreTokenizers) {
  expect_parity(with_pre_tokenizer("gpt2"), "gpt2", true);
  expect_parity(with_pre_tokenizer("llama-bpe"), "llama3", true);
  expect_parity(with_pre_tokenizer("qwen2"), "qwen2", true);
}

TEST_F(DefaultModel, DecodeRoundTrips) {
  for (const nlohmann::json& record : records_) {
    const std::string text = record["text"];
    const std::string expected = spellable(*tokenizer_, text);
    const std::vector<TokenId> ids = tokenizer_->encode(text, true, true);
    EXPECT_EQ(tokenizer_->decode(ids), expected) << gguf::printable(text);
    StreamDecoder stream(*tokenizer_);
    std::string streamed;
    for (TokenId id : ids) streamed += stream.push(id);
    streamed += stream.finish();
    if (is_valid_utf8(expected)) {
      EXPECT_EQ(streamed, expected) << gguf::printable(text);
    }
  }
}

TEST_F(DefaultModel, Tokenizes32KTokensQuickly) {
  std::string document;
  for (size_t i = 0; document.size() < 160000; ++i) {
    document += records_[i % records_.size()]["text"].get<std::string>();
    document += "\n";
  }
  const auto start = std::chrono::steady_clock::now();
  const std::vector<TokenId> ids = tokenizer_->encode(document);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu bytes into %zu tokens in %.1f ms: %.0f tokens/s\n", document.size(), ids.size(),
              seconds * 1e3, ids.size() / seconds);
  EXPECT_GE(ids.size(), 32768u);
  EXPECT_LT(seconds, kSanitized ? 10.0 : 1.0);
  EXPECT_EQ(tokenizer_->decode(ids), spellable(*tokenizer_, document));
}

}  // namespace
}  // namespace kascade::tokenizer
