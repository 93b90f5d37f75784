// Tests of StopMatcher: stop strings across chunk boundaries, held prefixes, several stops, UTF-8.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sampling/sampler.hpp"

using geniex::sampling::StopMatcher;

namespace {

// Feeds the chunks, returns everything emitted (including the final flush).
std::string run(StopMatcher& m, const std::vector<std::string>& chunks) {
  std::string out;
  for (const auto& c : chunks) out += m.push(c);
  out += m.flush();
  return out;
}

}  // namespace

TEST(StopMatcher, StopAcrossChunkBoundary) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(m.push("Hel"), "Hel");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("lo\nUser:"), "lo");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("more text"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopSplitOverManyChunks) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(m.push("Hello"), "Hello");
  EXPECT_EQ(m.push("\n"), "");
  EXPECT_EQ(m.push("Us"), "");
  EXPECT_EQ(m.push("er"), "");
  EXPECT_EQ(m.push(": and the rest"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, PartialPrefixHeldThenReleased) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(m.push("a\nUs"), "a");
  EXPECT_EQ(m.push("ually"), "\nUsually");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push("\n"), "");
  EXPECT_EQ(m.flush(), "\n");  // end of stream releases the held prefix
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, PrefixThatRestartsInsideHeldText) {
  // "aab" with stop "ab": the held "a" must not hide the match that starts one byte later.
  StopMatcher m({"ab"});
  EXPECT_EQ(m.push("xa"), "x");
  EXPECT_EQ(m.push("a"), "a");
  EXPECT_EQ(m.push("b"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, MultipleStopsEarliestWins) {
  StopMatcher m1({"</s>", "###"});
  EXPECT_EQ(run(m1, {"one ### two </s>"}), "one ");
  EXPECT_TRUE(m1.stopped());

  StopMatcher m2({"</s>", "###"});
  EXPECT_EQ(run(m2, {"one </", "s> ###"}), "one ");
  EXPECT_TRUE(m2.stopped());

  // Holding is by the longest possible prefix among all stops.
  StopMatcher m3({"<|im_end|>", "<|endoftext|>"});
  EXPECT_EQ(m3.push("hi <|"), "hi ");
  EXPECT_EQ(m3.push("end"), "");
  EXPECT_EQ(m3.push("oftext|>!"), "");
  EXPECT_TRUE(m3.stopped());
}

TEST(StopMatcher, NoStopsPassesThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("anything"), "anything");
  StopMatcher e({""});  // empty stop strings are ignored
  EXPECT_EQ(e.push("abc"), "abc");
  EXPECT_FALSE(e.stopped());
}

TEST(StopMatcher, StopAtVeryStart) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("STOP"), "");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, Utf8NeverSplitsACharacter) {
  // "é" = C3 A9, "€" = E2 82 AC, "😀" = F0 9F 98 80, fed one byte at a time.
  const std::string text = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80!";
  StopMatcher m({"\nUser:"});
  std::string out;
  for (char c : text) {
    std::string piece = m.push(std::string(1, c));
    // Every emitted piece must be whole characters.
    for (size_t i = 0; i < piece.size();) {
      const auto b = static_cast<unsigned char>(piece[i]);
      const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
      ASSERT_LE(i + len, piece.size()) << "piece ends inside a character";
      i += len;
    }
    out += piece;
  }
  out += m.flush();
  EXPECT_EQ(out, text);
}

TEST(StopMatcher, Utf8StopString) {
  StopMatcher m({"\xE2\x80\x94stop"});  // "—stop"
  EXPECT_EQ(m.push("mot \xE2\x80"), "mot ");
  EXPECT_EQ(m.push("\x94st"), "");
  EXPECT_EQ(m.push("op after"), "");
  EXPECT_TRUE(m.stopped());

  StopMatcher n({"\xE2\x80\x94stop"});
  EXPECT_EQ(n.push("mot \xE2\x80"), "mot ");
  EXPECT_EQ(n.push("\x94s!"), "\xE2\x80\x94s!");
  EXPECT_FALSE(n.stopped());
}

TEST(StopMatcher, InvalidUtf8IsNotHeldForever) {
  StopMatcher m({"zz"});
  EXPECT_EQ(m.push("a\x80\x80\x80\x80"), "a\x80\x80\x80\x80");  // stray continuation bytes
  EXPECT_EQ(m.push("\xC3"), "");                                 // incomplete lead: held
  EXPECT_EQ(m.flush(), "\xC3");                                  // released at the end
}
