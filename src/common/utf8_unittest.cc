#include "common/utf8.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

TEST(Utf8Test, ValidTextIsKept) {
  for (std::string_view s :
       std::initializer_list<std::string_view>{"", "bash", "kworker/0:1H", "caf\xC3\xA9", "\xE2\x82\xAC",
                                               "\xF0\x9F\x98\x80", "\xEF\xBF\xBD", std::string_view("a\0b", 3)}) {
    EXPECT_TRUE(IsValidUtf8(s)) << s;
    EXPECT_EQ(SanitizeUtf8(s), s);
  }
}

TEST(Utf8Test, EveryIllFormedByteBecomesTheReplacementCharacter) {
  const std::string r = "\xEF\xBF\xBD";
  // The comm a hostile task set with prctl(PR_SET_NAME, "\xff\xfe").
  EXPECT_FALSE(IsValidUtf8("\xff\xfe"));
  EXPECT_EQ(SanitizeUtf8("\xff\xfe"), r + r);
  EXPECT_EQ(SanitizeUtf8("ab\x80"
                         "cd"),
            "ab" + r + "cd");                                  // stray continuation byte
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), r + r);                  // overlong '/'
  EXPECT_EQ(SanitizeUtf8("\xE0\x80\xAF"), r + r + r);          // overlong
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), r + r + r);          // surrogate U+D800
  EXPECT_EQ(SanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(SanitizeUtf8("x\xE2\x82"), "x" + r + r);           // cut at the end
  EXPECT_EQ(SanitizeUtf8("\xC3\xA9\xFF\xC3\xA9"), "\xC3\xA9" + r + "\xC3\xA9");
  // Every byte value alone: ASCII kept, everything else replaced; the result is always valid.
  for (int b = 0; b < 256; ++b) {
    const std::string in(1, static_cast<char>(b));
    const std::string out = SanitizeUtf8(in);
    EXPECT_TRUE(IsValidUtf8(out)) << b;
    EXPECT_EQ(out, b < 0x80 ? in : r) << b;
  }
}

TEST(Utf8Test, AbbreviateKeepsShortTextAndCutsLongTextAtACharacter) {
  EXPECT_EQ(Abbreviate("pid == 1", 160), "pid == 1");
  EXPECT_EQ(Abbreviate(std::string(10000, 'x'), 4), "xxxx... (10000 bytes)");
  // "\xC3\xA9" is one character: a cut inside it moves before it.
  EXPECT_EQ(Abbreviate("ab\xC3\xA9"
                       "cd",
                       3),
            "ab... (6 bytes)");
  EXPECT_EQ(Abbreviate("ab\xC3\xA9"
                       "cd",
                       4),
            "ab\xC3\xA9"
            "... (6 bytes)");
}

}  // namespace
}  // namespace tpe
