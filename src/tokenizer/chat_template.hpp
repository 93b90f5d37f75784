// Chat templates: a renderer for the Jinja subset that Hugging Face chat templates use.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace geniex::tok {

struct ChatMessage {
  std::string role;
  std::string content;
};

// Jinja renderer for chat templates, aiming at byte-identical output with transformers'
// apply_chat_template (jinja2 ImmutableSandboxedEnvironment, trim_blocks + lstrip_blocks,
// loopcontrols, transformers' tojson / raise_exception / strftime_now / namespace / dict).
// Supports: text, {{ expr }}, {% if/elif/else %}, {% for %} (loop.*, unpacking, `if` filter, else,
// break/continue), {% set %} (names, namespace attributes, tuple targets, {% set x %}..{% endset %}),
// {% macro %} (defaults, keyword arguments, recursion), {% generation %}, comments, whitespace
// control; expressions with Python literals, attribute/item access, slices with steps, arithmetic,
// ~, comparisons, in / not in, is / is not tests, and/or/not, inline if (with or without else),
// the filters and tests chat templates use (tojson, items, map, selectattr, dictsort, unique, ...),
// Python string/dict methods (strip, split, startswith, replace, get, items, ...). Values print as
// Python does ({{ dict }} is its repr, True/None). Undefined values are lenient: falsy, render as "",
// and their attributes are undefined too (jinja2 raises there). Not supported: {% call %}, {% filter %},
// {% include %}/{% extends %}, dict keys that are not strings.
// Rendering is bounded (output size, loop iterations, nesting depth): limits give errors.
class ChatTemplate {
 public:
  struct Options {
    bool trim_blocks = true;    // as transformers' apply_chat_template
    bool lstrip_blocks = true;
    int64_t max_loop_iterations = 2'000'000;  // per render, all loops together; more is an error
  };
  static Result<ChatTemplate> parse(std::string source);
  static Result<ChatTemplate> parse(std::string source, Options options);

  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::string& bos_token = "",
                             const std::string& eos_token = "") const;

  // General form: `context` holds what transformers' render_jinja_template passes to the template:
  // messages (objects with any fields: content strings or part lists, tool_calls, reasoning_content,
  // ...), tools, documents, add_generation_prompt, bos_token, eos_token and any extra keyword
  // arguments (enable_thinking, date_string, ...). As transformers does, tools and documents are
  // none when absent, add_generation_prompt defaults to false, and a message's reasoning (the first
  // non-null of reasoning_content, thinking, reasoning) is also exposed as both `thinking` and
  // `reasoning_content`. With ordered_json, object key order is kept (tojson prints keys in the
  // order given, as Python dicts do); nlohmann::json has its keys sorted already.
  Result<std::string> render_json(const nlohmann::ordered_json& context) const;
  Result<std::string> render_json(const nlohmann::json& context) const;

  // The clock strftime_now() reads (formatted in local time, like Python's datetime.now()).
  // Defaults to the system clock; set a fixed one for reproducible output.
  using Clock = std::function<std::chrono::system_clock::time_point()>;
  void set_clock(Clock clock) { clock_ = std::move(clock); }

  struct Node;

  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  ChatTemplate() = default;
  struct Globals;
  Result<std::string> render_globals(Globals& globals) const;
  std::shared_ptr<const Node> root_;
  std::string source_;
  Clock clock_;
  Options options_;
};

}  // namespace geniex::tok
