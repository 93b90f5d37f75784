#include <gtest/gtest.h>

#include <fstream>

#include "tokenizer_test_util.hpp"

using namespace geniex;
using namespace geniex::tok;
using namespace geniex::tok::testing;

namespace {

nlohmann::json load_cases() {
  std::ifstream in(data_path("chat_templates.json"));
  if (!in) return nullptr;
  return nlohmann::json::parse(in);
}

std::vector<ChatMessage> to_messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  for (const auto& m : j) out.push_back({m.at("role").get<std::string>(), m.at("content").get<std::string>()});
  return out;
}

}  // namespace

TEST(ChatTemplate, SmolLM2MatchesHuggingFace) {
  const nlohmann::json cases = load_cases();
  ASSERT_FALSE(cases.is_null()) << "fixture missing: run scripts/tokenizer/make_tokenizer_fixture.py";
  std::string source = cases.at("smollm2_template").get<std::string>();
  std::string why;
  if (const Tokenizer* t = smollm2(&why)) {
    EXPECT_EQ(t->chat_template(), source);  // the GGUF's template is the one the fixture used
  }
  auto tmpl = ChatTemplate::parse(source);
  ASSERT_TRUE(tmpl) << tmpl.error().to_string();
  size_t n = 0;
  for (const auto& c : cases.at("smollm2")) {
    auto out = tmpl->render(to_messages(c.at("messages")), c.at("add_generation_prompt").get<bool>());
    ASSERT_TRUE(out) << out.error().to_string();
    EXPECT_EQ(*out, c.at("expected").get<std::string>()) << c.at("messages").dump();
    ++n;
  }
  EXPECT_GE(n, 6u);
}

TEST(ChatTemplate, SubsetMatchesJinja) {
  const nlohmann::json cases = load_cases();
  ASSERT_FALSE(cases.is_null());
  size_t n = 0, ok = 0;
  for (const auto& c : cases.at("templates")) {
    const std::string src = c.at("source").get<std::string>();
    auto tmpl = ChatTemplate::parse(src);
    ASSERT_TRUE(tmpl) << tmpl.error().to_string() << "\n" << src;
    auto out = tmpl->render(to_messages(c.at("messages")), c.at("add_generation_prompt").get<bool>(),
                            c.at("bos_token").get<std::string>(), c.at("eos_token").get<std::string>());
    ASSERT_TRUE(out) << out.error().to_string() << "\n" << src;
    ++n;
    if (*out == c.at("expected").get<std::string>()) ++ok;
    else ADD_FAILURE() << "template " << nlohmann::json(src).dump() << "\nmessages " << c.at("messages").dump()
                       << "\n got:  " << nlohmann::json(*out).dump()
                       << "\n want: " << c.at("expected").dump();
  }
  std::printf("[ jinja  ] %zu / %zu template renderings match jinja2\n", ok, n);
}

TEST(ChatTemplate, Basics) {
  auto t = ChatTemplate::parse(
      "{% set greeting = 'hi' %}{{ greeting ~ ' ' ~ (messages | length) }}"
      "{% for m in messages if m.role == 'user' %}[{{ loop.index }}:{{ m.content | trim }}]{% endfor %}"
      "{{ nothing }}{{ nothing.deeper['x'] }}{% if nothing %}no{% else %}|undef-falsy{% endif %}");
  ASSERT_TRUE(t) << t.error().to_string();
  auto out = t->render({{"user", "  a "}, {"assistant", "b"}, {"user", "c"}}, false);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(*out, "hi 3[1:a][2:c]|undef-falsy");
  auto raise = ChatTemplate::parse("{{ raise_exception('only user and assistant roles') }}");
  ASSERT_TRUE(raise);
  auto r = raise->render({}, false);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("only user and assistant roles"), std::string::npos);
}

TEST(ChatTemplate, MalformedTemplatesAreErrors) {
  const char* bad[] = {
      "{% if x %}never closed",
      "{% for m in messages %}",
      "{% endfor %}",
      "{{ unclosed",
      "{{ 'unterminated }}",
      "{% if %}{% endif %}",
      "{{ a + }}",
      "{{ (a }}",
      "{{ [1, 2 }}",
      "{% frobnicate %}",
      "{% for in messages %}{% endfor %}",
      "{% set = 3 %}",
      "{{ a | }}",
      "{{ a is }}",
      "{% if a %}{% else %}{% else %}{% endif %}",
      "{{ 1 $ 2 }}",
      "{% %}",
      "{# unclosed comment",
      "{{ a.}}",
      "{% elif x %}",
  };
  for (const char* src : bad) {
    auto t = ChatTemplate::parse(src);
    EXPECT_FALSE(t) << "should fail: " << src;
    if (!t) {
      EXPECT_NE(t.error().message.find("chat template"), std::string::npos);
    }
  }
  // Runtime errors are errors too.
  for (const char* src : {"{{ 1 / 0 }}", "{{ 'a' - 1 }}", "{{ nope() }}", "{{ messages | nofilter }}",
                          "{% for x in 3 %}{% endfor %}", "{{ 'a' < 1 }}"}) {
    auto t = ChatTemplate::parse(src);
    ASSERT_TRUE(t) << src << ": " << t.error().to_string();
    EXPECT_FALSE(t->render({}, false)) << src;
  }
  // Deep nesting is refused, not a stack overflow.
  std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(ChatTemplate::parse(deep));
  std::string deep_if;
  for (int i = 0; i < 3000; ++i) deep_if += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(deep_if));
  // Output growth is bounded.
  for (const char* src : {"{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}",
                          "{{ ('x' * 40000000) ~ ('x' * 40000000) }}", "{{ 'x' * 100000000 }}"}) {
    auto grow = ChatTemplate::parse(src);
    ASSERT_TRUE(grow) << src;
    EXPECT_FALSE(grow->render({}, false)) << src;
  }
  // set inside a loop is scoped to the iteration (as in Jinja); namespace() carries values out
  auto scoped = ChatTemplate::parse(
      "{% set s = 'a' %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set s = s ~ 'b' %}"
      "{% set ns.n = ns.n + i %}{% endfor %}{{ s }}{{ ns.n }}");
  ASSERT_TRUE(scoped);
  EXPECT_EQ(*scoped->render({}, false), "a3");
}
