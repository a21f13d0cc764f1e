// UTF-8 validation for text that reaches the exposition format: Prometheus rejects a whole
// scrape ("invalid UTF-8 label value") when one label value is not valid UTF-8, and any task can
// set its comm (prctl(PR_SET_NAME)) or a string field to arbitrary bytes.
//
// Source: RFC 3629 §4 (the UTF-8 byte sequences). Replacement is one U+FFFD per byte that does
// not begin a well-formed sequence (one of the practices the Unicode Standard §3.9 allows).
//
// Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace tpe {

// True when `s` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool IsValidUtf8(std::string_view s);

// `s` with every byte that does not begin a well-formed sequence replaced by U+FFFD (EF BF BD)
// (a cut sequence "\xE2\x82" becomes two); valid input is returned
// unchanged. NUL bytes are valid UTF-8 and are kept (the exposition format escapes nothing but
// \, " and newline; callers that must not carry NUL check for it themselves).
std::string SanitizeUtf8(std::string_view s);

// `s` for an error message: unchanged when it has at most `max_bytes` bytes; otherwise its first
// `max_bytes` bytes (cut at a UTF-8 character boundary) followed by "... (N bytes)", so a
// megabyte of config text never floods the log.
std::string Abbreviate(std::string_view s, size_t max_bytes = 160);

}  // namespace tpe
