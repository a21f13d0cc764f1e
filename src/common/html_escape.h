// Text for HTML pages and XML documents: the landing page at "/" (HTML) and the flame graph
// (SVG, an XML 1.0 document) escape names and paths with this one function.
//
// Both dialects escape the five markup characters, & < > " ', so the result is safe as element
// text and as an attribute value quoted with either " or '. They differ in what HTML and XML
// accept:
//   kHtml: & < > " ' become &amp; &lt; &gt; &quot; &#39; (&apos; is no HTML 4 entity); every
//          other byte is kept.
//   kXml:  & < > " ' become &amp; &lt; &gt; &quot; &apos;; what is no XML 1.0 character
//          (XML 1.0 §2.2 "Char") is replaced: every byte below 0x20 (tab, LF and CR too) by '?',
//          U+FFFE and U+FFFF (EF BF BE, EF BF BF) by U+FFFD (EF BF BD).
// Bytes from 0x80 up are copied as they are: callers pass well-formed UTF-8 (SanitizeUtf8,
// common/utf8.h) where the document must be UTF-8.
//
// Source: HTML 4.01 §5.3.2 (character entity references), XML 1.0 (Fifth Edition) §2.2 and §4.6
// (the predefined entities).
//
// Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace tpe {

enum class MarkupDialect {
  kHtml,  // an HTML page
  kXml,   // an XML 1.0 document (SVG)
};

// `s` escaped for `dialect` as described above; never fails.
std::string HtmlEscaped(std::string_view s, MarkupDialect dialect = MarkupDialect::kHtml);

}  // namespace tpe
