// Fuzzes ParseFormat (src/format/event_format.h) and what the pipeline builds from its result: a
// FieldExtractor for every field and decode (symbolic ones with a small fixed table), run over
// the input bytes as if they were a raw record. The print fmt's symbol tables go through
// libtraceevent and are fuzzed separately by print_fmt_fuzzer (libtraceevent 1.7.1 crashes on
// some malformed print fmts; see fuzz/regressions/print_fmt_fuzzer/).
// Seeds: the captured format files (fuzz/corpus/format_fuzzer/).
#include <cstdint>
#include <string>

#include "decode/field_extractor.h"
#include "format/event_format.h"
#include "format/print_symbols.h"
#include "fuzz/fuzz_util.h"

using namespace tpe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  StatusOr<EventFormat> f = ParseFormat(text, "fuzz");
  if (!f.ok()) {
    TPE_FUZZ_CHECK(f.status().message().starts_with("fuzz"), "error does not name the source: %s",
                   f.status().message().c_str());
    return 0;
  }
  TPE_FUZZ_CHECK(!f->fields.empty(), "a format without fields parsed");
  (void)f->DescribeFields();
  for (const FieldFormat& field : f->fields) {
    TPE_FUZZ_CHECK(!field.name.empty(), "a field without a name");
    const FieldFormat* found = f->FindField(field.name);
    TPE_FUZZ_CHECK(found != nullptr && found->name == field.name, "FindField(%s)", field.name.c_str());
    if (field.kind == FieldKind::kDataLoc || field.kind == FieldKind::kRelLoc) {
      TPE_FUZZ_CHECK(field.size == 4, "%s: __data_loc/__rel_loc of size %u", field.name.c_str(), field.size);
    }
  }

  SymbolTable symbolic, flags;
  symbolic.entries = {{0, "ZERO"}, {1, "ONE"}, {2, "TWO"}};
  flags.is_flags = true;
  flags.entries = {{0, "NONE"}, {1, "A"}, {2, "B"}, {0x80, "H"}};

  const Bytes raw(data, size);
  for (size_t i = 0; i < f->fields.size(); ++i) {
    const FieldFormat& field = f->fields[i];
    const SymbolTable* symbols = i % 2 ? &flags : &symbolic;
    for (LabelDecode d :
         {LabelDecode::kAuto, LabelDecode::kHex, LabelDecode::kInet, LabelDecode::kSymbolic, LabelDecode::kSyscall}) {
      auto ex = FieldExtractor::Compile(field, d, symbols);
      if (!ex.ok()) continue;
      int64_t v = 0;
      (void)ex->ReadInteger(raw, &v);
      std::string key;
      if (!ex->AppendKey(raw, &key)) continue;
      size_t pos = 0;
      (void)ex->Render(key, &pos);
      TPE_FUZZ_CHECK(pos == key.size(), "%s: Render consumed %zu of %zu key bytes", field.name.c_str(), pos,
                     key.size());
    }
  }
  return 0;
}
