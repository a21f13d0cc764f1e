// Levenshtein distance between two strings, for "did you mean" suggestions in error messages
// (closest event, field, symbol or USDT probe names).
//
// Pure; thread-safe.
#pragma once

#include <cstddef>
#include <string_view>

namespace tpe {

// The number of single-byte insertions, deletions and substitutions that turn `a` into `b`.
// O(|a| x |b|) time, O(|b|) memory.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace tpe
