// Chat templates: a renderer for the Jinja subset that Hugging Face chat templates use.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace geniex::tok {

struct ChatMessage {
  std::string role;
  std::string content;
};

// Minimal Jinja renderer for chat templates. Supports: text, {{ expr }}, {% if/elif/else/endif %},
// {% for x in xs %}...{% else %}...{% endfor %} (loop.first/last/index/index0/revindex/length,
// tuple unpacking `for k, v in d.items()`), {% set %}, comments, whitespace control {%- -%} {{- -}}
// and the Hugging Face defaults trim_blocks + lstrip_blocks; expressions with literals (strings,
// numbers, true/false/none, lists, dicts), variables, . and [] access, slices, + - * / // % ~,
// comparisons, in / not in, and/or/not, `x if c else y`, tests (is defined/none/string/...),
// filters (trim, length, upper, lower, default, first, last, join, tojson...), a few string
// methods and raise_exception(). Undefined values are falsy and render as "".
class ChatTemplate {
 public:
  struct Options {
    bool trim_blocks = true;    // as transformers' apply_chat_template
    bool lstrip_blocks = true;
  };
  static Result<ChatTemplate> parse(std::string source);
  static Result<ChatTemplate> parse(std::string source, Options options);

  Result<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                             const std::string& bos_token = "",
                             const std::string& eos_token = "") const;

  struct Node;

  ChatTemplate(const ChatTemplate&);
  ChatTemplate& operator=(const ChatTemplate&);
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

 private:
  ChatTemplate() = default;
  std::shared_ptr<const Node> root_;
  std::string source_;
};

}  // namespace geniex::tok
