// Chat template tests: native rendering against the real templates rendered
// by jinja2 the way transformers' apply_chat_template does
// (tests/data/tokenizer/chat_templates.json, from tools/gen_tokenizer_golden.py),
// family detection, SmolLM2's default system prompt, raw mode and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model_cache.h"
#include "gguf/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kascade::tokenizer {
namespace {

nlohmann::json load_fixture() {
  std::ifstream in(std::string(KASCADE_SOURCE_DIR) + "/tests/data/tokenizer/chat_templates.json");
  EXPECT_TRUE(in) << "missing fixture chat_templates.json";
  return in ? nlohmann::json::parse(in) : nlohmann::json();
}

std::vector<ChatMessage> messages_of(const nlohmann::json& list) {
  std::vector<ChatMessage> messages;
  for (const nlohmann::json& item : list) messages.push_back({item["role"], item["content"]});
  return messages;
}

TEST(ChatTemplate, MatchesJinjaRendering) {
  const nlohmann::json fixture = load_fixture();
  ASSERT_TRUE(fixture.contains("cases"));
  size_t compared = 0;
  for (const nlohmann::json& item : fixture["cases"]) {
    const std::string name = item["template"];
    const ChatTemplate chat = ChatTemplate::from_jinja(fixture["templates"][name].get<std::string>());
    const std::string rendered = chat.render(messages_of(item["messages"]), item["add_generation_prompt"]);
    EXPECT_EQ(rendered, item["expected"].get<std::string>())
        << name << " with " << item["messages"].dump() << ", add_generation_prompt "
        << item["add_generation_prompt"];
    ++compared;
  }
  EXPECT_EQ(compared, 5u * 8u * 2u);
}

TEST(ChatTemplate, DetectsFamiliesAndDefaultSystemPrompts) {
  const nlohmann::json fixture = load_fixture();
  ASSERT_TRUE(fixture.contains("templates"));
  const auto from = [&](const char* name) {
    return ChatTemplate::from_jinja(fixture["templates"][name].get<std::string>());
  };
  EXPECT_EQ(from("smollm2").format(), ChatFormat::kChatML);
  EXPECT_STREQ(from("smollm2").format_name(), "chatml");
  EXPECT_EQ(from("smollm2").default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(from("qwen2").default_system_prompt(), "You are a helpful assistant");
  EXPECT_EQ(from("qwen2.5").default_system_prompt(),
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_EQ(from("llama3").format(), ChatFormat::kLlama3);
  EXPECT_EQ(from("llama3.1").format(), ChatFormat::kLlama3);
  EXPECT_STREQ(from("llama3.1").format_name(), "llama3");
  const ChatTemplate plain = ChatTemplate::from_jinja("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}");
  EXPECT_EQ(plain.default_system_prompt(), "");
}

TEST(ChatTemplate, LlamaToday) {
  const nlohmann::json fixture = load_fixture();
  ASSERT_TRUE(fixture.contains("templates"));
  ChatTemplate chat = ChatTemplate::from_jinja(fixture["templates"]["llama3.1"].get<std::string>());
  chat.set_today("01 Jan 2026");
  const std::vector<ChatMessage> messages{{"user", "hi"}};
  EXPECT_NE(chat.render(messages, true).find("Today Date: 01 Jan 2026\n\n<|eot_id|>"), std::string::npos);
}

TEST(ChatTemplate, RawConcatenatesContents) {
  const std::vector<ChatMessage> messages{{"system", "Be brief. "}, {"user", "Why?\n"}};
  EXPECT_EQ(ChatTemplate::raw().render(messages, true), "Be brief. Why?\n");
  EXPECT_EQ(ChatTemplate::raw().format(), ChatFormat::kRaw);
  EXPECT_STREQ(ChatTemplate::raw().format_name(), "raw");
}

TEST(ChatTemplate, ErrorsSuggestRaw) {
  for (const char* source : {"", "{% for message in messages %}[INST] {{ message['content'] }} [/INST]{% endfor %}"}) {
    try {
      ChatTemplate::from_jinja(source);
      ADD_FAILURE() << "no error for template '" << source << "'";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("--raw"), std::string::npos) << error.what();
    }
  }
  const ChatTemplate chat = ChatTemplate::from_jinja("<|im_start|>");
  const std::vector<ChatMessage> messages{{"tool", "{}"}};
  EXPECT_THROW(chat.render(messages, false), Error);
}

// The default model's template, rendered and tokenized as the CLI does it.
TEST(ChatTemplate, DefaultModelPrompt) {
  const std::string path = default_model_path();
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "default model not found at " << path;
  const gguf::File file = gguf::File::open(path);
  const Tokenizer tokenizer(file);
  const ChatTemplate chat = ChatTemplate::from_jinja(tokenizer.chat_template());
  const std::vector<ChatMessage> messages{{"user", "Hi"}};
  const std::string prompt = chat.render(messages, true);
  EXPECT_EQ(prompt,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  const std::vector<TokenId> ids = tokenizer.encode(prompt, true, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids.front(), 1);  // <|im_start|>, no BOS: add_bos_token is false
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);  // two <|im_end|>
}

}  // namespace
}  // namespace kascade::tokenizer
