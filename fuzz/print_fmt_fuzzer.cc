// Fuzzes ParsePrintSymbols (src/format/print_symbols.h): libtraceevent's tep_parse_format on the
// whole format text, our walk over its print-fmt argument tree, and SymbolTable::Render.
//
// Not in fuzz/run.sh's default list: libtraceevent 1.7.1 (Debian 12) itself crashes and leaks on
// some malformed print fmts within seconds (fuzz/regressions/print_fmt_fuzzer/), so this target
// mostly finds bugs in that library. Run it with FUZZ_TARGETS=print_fmt_fuzzer fuzz/run.sh.
// Seeds: the format_fuzzer corpus.
#include <cstdint>
#include <string>

#include "format/print_symbols.h"
#include "fuzz/fuzz_util.h"

using namespace tpe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // Enum names resolve for some names only, so both paths run.
  EnumResolver resolve = [](std::string_view name) -> std::optional<int64_t> {
    if (name.size() % 2) return std::nullopt;
    return static_cast<int64_t>(name.size());
  };
  auto tables = ParsePrintSymbols(text, "fuzz", resolve, "fuzz");
  if (!tables.ok()) return 0;
  for (const auto& [field, table] : *tables) {
    TPE_FUZZ_CHECK(!field.empty(), "a table for an unnamed field");
    for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{0x80}, ~uint64_t{0}}) (void)table.Render(v);
    for (const auto& [v, name] : table.entries) (void)table.Render(v);
  }
  return 0;
}
