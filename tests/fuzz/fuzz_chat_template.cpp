// libFuzzer target for the chat-template renderer: parse arbitrary bytes as a template, then
// render it against a fixed conversation (tools, tool calls, content parts, reasoning) through
// both APIs. Parse and render errors are fine; crashes, hangs and unbounded growth are not.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tokenizer/chat_template.hpp"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi 'there' \"you\""}, {"type": "image"}]},
      {"role": "assistant", "content": "", "reasoning_content": "think\nmore",
       "tool_calls": [{"id": "abcDEF123", "type": "function",
                       "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "x": 0.5}}}]},
      {"role": "tool", "tool_call_id": "abcDEF123", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": "Sunny, 21 °C."}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false,
    "n": 3, "f": 1.5, "nothing": null
  })");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace geniex::tok;
  std::string src(reinterpret_cast<const char*>(data), size);
  auto t = ChatTemplate::parse(src);
  if (!t) {
    volatile size_t n = t.error().to_string().size();  // messages quote the input: must be usable
    (void)n;
    return 0;
  }
  t->set_clock([] { return std::chrono::system_clock::time_point(std::chrono::seconds(1752926400)); });
  size_t acc = 0;
  if (auto out = t->render_json(context())) acc += out->size();
  else acc += out.error().message.size();
  if (auto out = t->render({{"user", "hello"}, {"assistant", "hi"}}, false, "<s>", "</s>")) acc += out->size();
  else acc += out.error().message.size();
  volatile size_t sink = acc;
  (void)sink;
  return 0;
}
