#include "common/html_escape.h"

#include <gtest/gtest.h>

#include <string>

namespace tpe {
namespace {

TEST(HtmlEscapeTest, MarkupCharactersAreEntitiesInBothDialects) {
  const std::string s = "a<b>&\"c\"'d'";
  EXPECT_EQ(HtmlEscaped(s), "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
  EXPECT_EQ(HtmlEscaped(s, MarkupDialect::kHtml), HtmlEscaped(s));
  EXPECT_EQ(HtmlEscaped(s, MarkupDialect::kXml), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
  // An entity in the input is escaped again: the page shows it as typed.
  EXPECT_EQ(HtmlEscaped("&amp;"), "&amp;amp;");
}

TEST(HtmlEscapeTest, OtherTextIsKept) {
  const std::string s = "kworker/0:1H caf\xC3\xA9 \xF0\x9F\x98\x80 \xEF\xBF\xBD ~%";
  EXPECT_EQ(HtmlEscaped(s), s);
  EXPECT_EQ(HtmlEscaped(s, MarkupDialect::kXml), s);
  EXPECT_EQ(HtmlEscaped(""), "");
}

TEST(HtmlEscapeTest, XmlReplacesWhatIsNoXmlCharacter) {
  // Every byte below 0x20 (tab and newline too) is '?'; U+FFFE and U+FFFF are U+FFFD.
  const std::string s = std::string("a\x01\t\n\r", 5) + std::string(1, '\0') + "\xEF\xBF\xBE\xEF\xBF\xBF|";
  EXPECT_EQ(HtmlEscaped(s, MarkupDialect::kXml), "a?????\xEF\xBF\xBD\xEF\xBF\xBD|");
  // HTML keeps them as they are.
  EXPECT_EQ(HtmlEscaped(s), s);
  // A cut sequence at the end is no U+FFFE: kept.
  EXPECT_EQ(HtmlEscaped("x\xEF\xBF", MarkupDialect::kXml), "x\xEF\xBF");
  EXPECT_EQ(HtmlEscaped("\xEF\xBF\xBEz", MarkupDialect::kXml), "\xEF\xBF\xBDz");
}

}  // namespace
}  // namespace tpe
