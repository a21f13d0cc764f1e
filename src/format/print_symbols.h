// Symbol tables from a format file's `print fmt`: the value→name lists that the kernel prints
// with __print_symbolic() and __print_flags(), e.g. tcp:tcp_retransmit_skb's
//   __print_symbolic(REC->state, { TCP_ESTABLISHED, "TCP_ESTABLISHED" }, ...)
// The print format is parsed by libtraceevent (tep_parse_format), not by our own code.
//
// Some kernels leave enum names instead of numbers in the table (TCP_ESTABLISHED above); an
// EnumResolver turns those into values (tracefs/kernel_enums.h reads them from kernel BTF).
// Entries whose value cannot be resolved are listed in `unresolved`.
//
// Thread-safety: the result is a value; ParsePrintSymbols may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

struct SymbolTable {
  bool is_flags = false;  // __print_flags: a bit set rendered as names joined by `delim`
  std::string delim = "|";
  std::vector<std::pair<uint64_t, std::string>> entries;  // value → name, in print fmt order
  std::vector<std::string> unresolved;                    // names with no numeric value
  // The table's argument `REC->f & mask` (all ones for REC->f): the value is masked first.
  uint64_t mask = ~uint64_t{0};
  // `(REC->f & zero_mask) ? __print_flags(...) : "R"` (sched_switch's prev_state): when the
  // masked value is 0 the kernel prints `zero_name`, not the table.
  std::optional<std::string> zero_name;
  uint64_t zero_mask = ~uint64_t{0};
  // A following `REC->f & mask ? "+" : ""` printed right after the table (`%s%s`): the kernel's
  // output for the field is the table's text plus `if_set` or `if_clear`.
  struct Suffix {
    uint64_t mask = 0;
    std::string if_set, if_clear;
  };
  std::vector<Suffix> suffixes;

  // What the kernel prints for `value` (trace output, print fmt):
  // __print_symbolic: the name of `value & mask`, or its decimal value when none matches.
  // __print_flags: names of the set bits of `value & mask` joined by delim; leftover bits as
  // 0x<hex>; `zero_name` instead when `value & zero_mask` is 0. Then the suffixes.
  std::string Render(uint64_t value) const;
};

// Maps an enum constant name (e.g. "TCP_ESTABLISHED") to its value, or nullopt.
using EnumResolver = std::function<std::optional<int64_t>(std::string_view name)>;

// field name → its table, for every __print_symbolic/__print_flags whose argument is the field
// itself (REC->f), a cast of it, or `REC->f & mask` (mask a constant expression), with the
// ternary fallback and suffix forms described at SymbolTable.
// Errors: InvalidArgument naming `source` when libtraceevent cannot parse the format.
StatusOr<std::map<std::string, SymbolTable>> ParsePrintSymbols(const std::string& format_text,
                                                               const std::string& system, const EnumResolver& resolve,
                                                               const std::string& source);

}  // namespace tpe
