// Seeded fuzz-style tests: random bytes through encode/decode/StreamDecoder, random template
// sources through ChatTemplate::parse/render. Set GENIEX_FUZZ_SEED to reproduce a run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "tokenizer_test_util.hpp"

using namespace geniex;
using namespace geniex::tok;
using namespace geniex::tok::testing;

namespace {

uint64_t fuzz_seed() {
  if (const char* env = std::getenv("GENIEX_FUZZ_SEED"); env != nullptr && *env != '\0') {
    return std::strtoull(env, nullptr, 10);
  }
  return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

std::string random_bytes(std::mt19937_64& rng) {
  std::string s;
  const size_t len = rng() % 200;
  const char* pieces[] = {"<|im_start|>", "<|im_end|>", " ", "\n", "'s", "12", "\xF0\x9F\x9A\x80", "\xE4\xBD\xA0", "\t"};
  while (s.size() < len) {
    const uint64_t r = rng() % 10;
    if (r < 4) s += static_cast<char>(rng() & 0xFF);
    else if (r < 7) s += static_cast<char>('a' + rng() % 26);
    else s += pieces[rng() % (sizeof(pieces) / sizeof(pieces[0]))];
  }
  return s;
}

}  // namespace

TEST(TokenizerFuzz, RandomBytes) {
  const uint64_t seed = fuzz_seed();
  std::printf("[ fuzz   ] tokenizer seed %llu (GENIEX_FUZZ_SEED=%llu to reproduce)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto tiny = tiny_tokenizer();
  ASSERT_TRUE(tiny);
  std::string why;
  const Tokenizer* smol = smollm2(&why);
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string s = random_bytes(rng);
    for (const Tokenizer* t : std::initializer_list<const Tokenizer*>{tiny.get(), smol}) {
      if (t == nullptr) continue;
      const bool ps = (iter & 1) != 0;
      auto ids = t->encode(s, (iter & 2) != 0, ps);
      ASSERT_TRUE(ids) << "seed " << seed;
      for (int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < t->n_vocab());
      auto back = t->decode(*ids);
      ASSERT_TRUE(back);
      if (t == tiny.get()) {
        EXPECT_EQ(*back, s) << "seed " << seed << " iter " << iter;
      }
      StreamDecoder sd(*t, (iter & 4) != 0);
      for (int32_t id : *ids) ASSERT_TRUE(utf8::is_valid(sd.push(id))) << "seed " << seed;
      ASSERT_TRUE(utf8::is_valid(sd.flush()));
      // random ids (some out of range) through decode and the stream decoder
      std::vector<int32_t> rid;
      for (int k = 0; k < 8; ++k) rid.push_back(static_cast<int32_t>(rng() % (static_cast<uint64_t>(t->n_vocab()) + 10)));
      (void)t->decode(rid, true);
      StreamDecoder sd2(*t);
      for (int32_t id : rid) ASSERT_TRUE(utf8::is_valid(sd2.push(id)));
      ASSERT_TRUE(utf8::is_valid(sd2.flush()));
    }
  }
}

TEST(TokenizerFuzz, RandomTemplates) {
  const uint64_t run_seed = fuzz_seed();  // the value GENIEX_FUZZ_SEED takes to replay this run
  std::printf("[ fuzz   ] template seed %llu (GENIEX_FUZZ_SEED=%llu to reproduce)\n",
              static_cast<unsigned long long>(run_seed), static_cast<unsigned long long>(run_seed));
  std::mt19937_64 rng(run_seed ^ 0x5DEECE66Dull);  // a stream apart from the tokenizer test's
  const char* frags[] = {
      "{%", "%}", "{{", "}}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", " if ", " elif ", " else ", " endif ",
      " for ", " in ", " endfor ", " set ", " = ", "messages", "m", ".role", "['content']", "[0]", "[-1]",
      "[1:]", " + ", " ~ ", " == ", " != ", " and ", " or ", " not ", "'x'", "\"y\"", "1", "2.5", "(", ")",
      "[", "]", "{", "}", ",", ":", "|trim", "|length", "|upper", " is defined", " is none", "loop.first",
      "loop.index", "loop.last", "add_generation_prompt", "bos_token", "text ", "\n", "  ", "raise_exception('e')",
      "namespace(a=1)", "ns.a", "range(3)", "'<|im_start|>'", " % ", " // ", " * ", "-", "true", "none",
      "{% for m in messages %}", "{% endfor %}", "{% if m %}", "{% endif %}", "{{ m.content }}", "\\", "'",
  };
  const size_t n_frags = sizeof(frags) / sizeof(frags[0]);
  std::vector<ChatMessage> msgs = {{"system", "sys"}, {"user", "hi \xF0\x9F\x98\x80"}, {"assistant", "yo"}};
  int parsed = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string src;
    const size_t n = 1 + rng() % 24;
    for (size_t k = 0; k < n; ++k) src += frags[rng() % n_frags];
    if (rng() % 8 == 0 && !src.empty()) src[rng() % src.size()] = static_cast<char>(rng() & 0xFF);
    auto t = ChatTemplate::parse(src);
    if (!t) {
      EXPECT_FALSE(t.error().message.empty());
      continue;
    }
    ++parsed;
    auto out = t->render(msgs, (iter & 1) != 0, "<s>", "</s>");
    if (!out) {
      EXPECT_FALSE(out.error().message.empty());
    }
  }
  std::printf("[ fuzz   ] %d / 5000 random templates parsed\n", parsed);
}
