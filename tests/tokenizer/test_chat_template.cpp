#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>

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

// ---------------------------------------------------------------- real templates vs transformers

namespace {

nlohmann::ordered_json load_families() {
  std::ifstream in(data_path("chat_templates_families.json"));
  if (!in) return nullptr;
  return nlohmann::ordered_json::parse(in);
}

// Where two renderings first differ, with some context, as JSON strings.
std::string first_difference(const std::string& got, const std::string& want) {
  size_t k = 0;
  while (k < got.size() && k < want.size() && got[k] == want[k]) ++k;
  const size_t from = k > 60 ? k - 60 : 0;
  return "first difference at byte " + std::to_string(k) + "\n got:  " +
         nlohmann::json(got.substr(from, 160)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n want: " + nlohmann::json(want.substr(from, 160)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

TEST(ChatTemplate, FamiliesMatchTransformers) {
  setenv("TZ", "UTC", 1);  // strftime_now formats local time; the fixture pinned the clock in UTC
  tzset();
  const nlohmann::ordered_json fx = load_families();
  ASSERT_FALSE(fx.is_null()) << "fixture missing: run TZ=UTC scripts/tokenizer/make_template_fixtures.py";
  std::map<std::string, ChatTemplate> parsed;
  for (const auto& [name, src] : fx.at("templates").items()) {
    auto t = ChatTemplate::parse(src.get<std::string>());
    ASSERT_TRUE(t) << name << ": " << t.error().to_string();
    parsed.emplace(name, std::move(t).value());
  }
  std::map<std::string, std::pair<size_t, size_t>> per;  // template -> (identical, total)
  size_t total = 0, identical = 0;
  for (const auto& c : fx.at("cases")) {
    const std::string name = c.at("template").get<std::string>();
    const std::string label = name + "/" + c.at("case").get<std::string>();
    ChatTemplate& t = parsed.at(name);
    const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(c.at("now").get<int64_t>()));
    t.set_clock([now] { return now; });
    auto out = t.render_json(c.at("context"));
    ++total;
    ++per[name].second;
    bool ok = false;
    if (c.contains("error")) {
      const std::string want = c.at("error").get<std::string>();
      if (out) ADD_FAILURE() << label << ": expected error '" << want << "', rendered " << nlohmann::json(*out).dump();
      else if (out.error().message.find(want) == std::string::npos)
        ADD_FAILURE() << label << ": error '" << out.error().message << "' lacks '" << want << "'";
      else ok = true;
    } else if (!out) {
      ADD_FAILURE() << label << ": " << out.error().to_string();
    } else if (*out != c.at("expected").get<std::string>()) {
      ADD_FAILURE() << label << ": " << first_difference(*out, c.at("expected").get<std::string>());
    } else {
      ok = true;
    }
    if (ok) {
      ++identical;
      ++per[name].first;
    }
  }
  for (const auto& [name, counts] : per) {
    std::printf("[ family ] %-20s %3zu / %3zu identical to transformers\n", name.c_str(), counts.first, counts.second);
  }
  std::printf("[ family ] total %zu / %zu cases identical across %zu templates\n", identical, total, per.size());
  EXPECT_GE(per.size(), 12u);
}

TEST(ChatTemplate, RenderJsonContext) {
  // tools/documents are none when absent, add_generation_prompt defaults to false, extra kwargs
  // reach the template, and reasoning is aliased as transformers does.
  auto t = ChatTemplate::parse(
      "{{ tools is none }}{{ documents is none }}{{ add_generation_prompt }}{{ enable_thinking }}|"
      "{% for m in messages %}{{ m.thinking }}/{{ m.reasoning_content }}/{{ m | tojson }};{% endfor %}");
  ASSERT_TRUE(t) << t.error().to_string();
  nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(
      R"({"messages": [{"role": "assistant", "content": "a", "reasoning": "r1"},
                       {"role": "assistant", "content": "b"}], "enable_thinking": false})");
  auto out = t->render_json(ctx);
  ASSERT_TRUE(out) << out.error().to_string();
  EXPECT_EQ(*out,
            "TrueTrueFalseFalse|r1/r1/{\"thinking\": \"r1\", \"role\": \"assistant\", \"content\": \"a\", \"reasoning\": "
            "\"r1\", \"reasoning_content\": \"r1\"};//{\"role\": \"assistant\", \"content\": \"b\"};");
  // The nlohmann::json overload (keys sorted by nlohmann) renders the same values.
  auto plain = t->render_json(nlohmann::json::parse(R"({"messages": [], "tools": [1], "add_generation_prompt": true})"));
  ASSERT_TRUE(plain) << plain.error().to_string();
  EXPECT_EQ(*plain, "FalseTrueTrue|");
  EXPECT_FALSE(t->render_json(nlohmann::json::array()));  // a context must be an object
}

TEST(ChatTemplate, StrftimeNowUsesTheClock) {
  setenv("TZ", "UTC", 1);
  tzset();
  auto t = ChatTemplate::parse("{{ strftime_now('%d %b %Y %H:%M') }}|{{ strftime_now is defined }}");
  ASSERT_TRUE(t);
  t->set_clock([] { return std::chrono::system_clock::time_point(std::chrono::seconds(1721995200)); });
  EXPECT_EQ(*t->render({}, false), "26 Jul 2024 12:00|True");
  t->set_clock(nullptr);  // back to the system clock: some date renders
  auto now = t->render({}, false);
  ASSERT_TRUE(now);
  EXPECT_GT(now->size(), 10u);
}

TEST(ChatTemplate, ErrorsAreClearAndBounded) {
  auto gemma = ChatTemplate::parse(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
      "{% endfor %}");
  ASSERT_TRUE(gemma);
  auto r = gemma->render({{"user", "a"}, {"user", "b"}}, true);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("Conversation roles must alternate user/assistant/user/assistant/..."),
            std::string::npos);
  // Unbounded recursion, loops and output growth end in errors.
  for (const char* src : {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                          "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{{ range(100001) | length }}",
                          "{% macro w(s) %}{{ s }}{{ s }}{% endmacro %}{% set ns = namespace(s='x' * 1000000) %}"
                          "{% for i in range(100) %}{% set ns.s = w(ns.s) %}{% endfor %}{{ ns.s | length }}"}) {
    ChatTemplate::Options small;
    small.max_loop_iterations = 20'000;
    auto t = ChatTemplate::parse(src, small);
    ASSERT_TRUE(t) << src << ": " << t.error().to_string();
    auto out = t->render({}, false);
    EXPECT_FALSE(out) << src;
  }
  // Malformed macros and sets are parse errors.
  for (const char* src : {"{% macro %}{% endmacro %}", "{% macro f(a b) %}{% endmacro %}", "{% macro f() %}",
                          "{% set a, = 1 %}", "{{ '\\u12' }}", "{{ 1e }}x"}) {
    EXPECT_FALSE(ChatTemplate::parse(src)) << src;
  }
}
