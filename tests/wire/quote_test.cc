// SPDX-License-Identifier: Apache-2.0
#include "wire/quote.h"

#include <string>

#include "gtest/gtest.h"

namespace sluice::wire {
namespace {

TEST(IsValidUtf8Test, AcceptsWellFormedTextOnly) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("caf\xe9"));          // Latin-1
  EXPECT_FALSE(IsValidUtf8("\xc3"));             // cut short
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));     // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));         // overlong
}

TEST(QuoteUntrustedTest, KeepsValidTextAndEscapesQuotesAndControls) {
  EXPECT_EQ(QuoteUntrusted("inventory"), "\"inventory\"");
  EXPECT_EQ(QuoteUntrusted("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(QuoteUntrusted("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(QuoteUntrusted(std::string("a\0b\x7f", 4)), "\"a\\x00b\\x7f\"");
  EXPECT_EQ(QuoteUntrusted("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
}

TEST(QuoteUntrustedTest, EscapesEveryByteThatIsNotWellFormedUtf8) {
  // A stray continuation byte, a lead byte at the end, an overlong '/',
  // a surrogate, a code point above U+10FFFF, and 0xff.
  EXPECT_EQ(QuoteUntrusted("a\x80"), "\"a\\x80\"");
  EXPECT_EQ(QuoteUntrusted("a\xe2\x82"), "\"a\\xe2\\x82\"");
  EXPECT_EQ(QuoteUntrusted("\xc0\xaf"), "\"\\xc0\\xaf\"");
  EXPECT_EQ(QuoteUntrusted("\xed\xa0\x80"), "\"\\xed\\xa0\\x80\"");
  EXPECT_EQ(QuoteUntrusted("\xf4\x90\x80\x80"),
            "\"\\xf4\\x90\\x80\\x80\"");
  EXPECT_EQ(QuoteUntrusted("\xff"), "\"\\xff\"");
}

TEST(QuoteUntrustedTest, CutsAtACharacterBoundaryNeverInsideOne) {
  // 39 ASCII bytes and a 3-byte euro sign across byte 40: the cut falls
  // before the euro sign, not inside it.
  const std::string text = std::string(39, 'x') + "\xe2\x82\xac" + "tail";
  const std::string quoted = QuoteUntrusted(text, 40);
  EXPECT_EQ(quoted, "\"" + std::string(39, 'x') + "...\"");
  EXPECT_TRUE(IsValidUtf8(quoted));
  // Room for the whole character: it is kept.
  EXPECT_EQ(QuoteUntrusted(text, 42),
            "\"" + std::string(39, 'x') + "\xe2\x82\xac...\"");
  // Exactly the whole text: no marker.
  EXPECT_EQ(QuoteUntrusted("abc", 3), "\"abc\"");
  EXPECT_EQ(QuoteUntrusted("abcd", 3), "\"abc...\"");
  EXPECT_EQ(QuoteUntrusted("", 0), "\"\"");
}

TEST(QuoteUntrustedTest, EveryByteStringComesOutValid) {
  // Every pair of bytes, then cut at every length: always valid UTF-8.
  for (int a = 0; a < 256; ++a) {
    for (int b = 0; b < 256; b += 7) {
      const std::string text = {static_cast<char>(a), static_cast<char>(b),
                                '\xe2', '\x82', '\xac'};
      for (size_t cut = 0; cut <= text.size(); ++cut) {
        ASSERT_TRUE(IsValidUtf8(QuoteUntrusted(text, cut))) << a << " " << b;
      }
    }
  }
}

TEST(ToValidUtf8Test, ReplacesEachInvalidByteAndKeepsTheRest) {
  EXPECT_EQ(ToValidUtf8("plain"), "plain");
  EXPECT_EQ(ToValidUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(ToValidUtf8("a\xe2\x82"), "a\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(ToValidUtf8("\xff" "b"), "\xef\xbf\xbd" "b");
  EXPECT_TRUE(IsValidUtf8(ToValidUtf8("\xed\xa0\x80\xc0\xaf\xf8")));
}

}  // namespace
}  // namespace sluice::wire
