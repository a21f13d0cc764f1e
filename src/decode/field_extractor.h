// Field extractors compiled once per metric from the event's field-offset table, then run on
// every sample's raw payload without allocating.
//
// A label value travels in two steps: on the hot path AppendKey() copies the field's bytes into
// a compact binary key (8 bytes for integers, u16 length + bytes for strings, the raw bytes for
// fixed arrays); at scrape time Render() turns that key segment into the label text (decimal,
// 0x-hex, an IPv4/IPv6 address, or a __print_symbolic name). Rendering happens once per series
// per scrape, not per event. Variable-length non-text fields (`__data_loc cpumask_t`,
// `__data_loc u8[]`) key the bytes they point at (u16 length + bytes, at most
// kMaxStringLabelBytes) and render as hex (cpumasks as the kernel's bitmap).
//
// Source of the layouts: Documentation/trace/events.rst (format files), include/trace/
// trace_events.h (__data_loc: u32 = len << 16 | offset from record start; __rel_loc: offset
// from the end of the u32 field itself).
//
// Pure; an extractor is immutable after Compile and may be used from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/byte_reader.h"
#include "common/status.h"
#include "format/event_format.h"
#include "format/print_symbols.h"

namespace tpe {

enum class LabelDecode {
  kAuto,      // integers in decimal (pointers in hex), strings as text, arrays as hex bytes
  kHex,       // integers as 0x<hex>
  kInet,      // 4-byte (IPv4) or 16-byte (IPv6) address arrays, or a 4-byte integer (IPv4)
  kSymbolic,  // the name from the format's __print_symbolic / __print_flags table
  kSyscall,   // a system call number as its name on this architecture (libseccomp), e.g. "read"
};

// "auto" | "hex" | "inet" | "symbolic" | "syscall"; nullopt otherwise.
std::optional<LabelDecode> ParseLabelDecode(std::string_view s);

// Longest string kept in a key (bytes); longer __data_loc strings are cut.
inline constexpr size_t kMaxStringLabelBytes = 256;

class FieldExtractor {
 public:
  // Checks that `decode` fits the field (e.g. inet needs a 4/16-byte address, symbolic needs a
  // table with entries) and returns the extractor. `symbols` may be null (no table); it is
  // copied, so it need not outlive the extractor.
  // Errors: InvalidArgument saying which decodes would be valid for this field.
  static StatusOr<FieldExtractor> Compile(const FieldFormat& field, LabelDecode decode, const SymbolTable* symbols);

  // Appends this field's key segment for `raw` to `key`. False when the field lies outside
  // `raw` (a truncated or foreign record): the caller counts a decode error.
  bool AppendKey(Bytes raw, std::string* key) const;

  // Reads the field as an integer (sign-extended when the format says signed:1). False when out
  // of range or not a numeric field.
  bool ReadInteger(Bytes raw, int64_t* out) const;

  // Renders the segment of `key` at *pos as label text and advances *pos past it.
  std::string Render(std::string_view key, size_t* pos) const;

  const FieldFormat& field() const { return field_; }
  LabelDecode decode() const { return decode_; }

 private:
  FieldExtractor(FieldFormat f, LabelDecode d, std::shared_ptr<const SymbolTable> s)
      : field_(std::move(f)), decode_(d), symbols_(std::move(s)) {}
  // The bytes a __data_loc/__rel_loc field points at (its length from the loc word), or a char
  // array's; strings stop at their NUL. False when they lie outside `raw`.
  bool DynamicBytes(Bytes raw, Bytes* out) const;
  bool IsDynamic() const { return field_.kind == FieldKind::kDataLoc || field_.kind == FieldKind::kRelLoc; }

  FieldFormat field_;
  LabelDecode decode_;
  // A copy of the symbol table, shared by the extractor's copies: a collector kept across a
  // reload renders with it after the plan it was compiled from is gone.
  std::shared_ptr<const SymbolTable> symbols_;
};

// Renders a kernel cpumask (an array of unsigned longs, little-endian, as __data_loc cpumask_t
// fields carry it) as the kernel's %*pb bitmap does: hex, most significant first, no leading
// zeros ("3" for CPUs 0 and 1), prefixed 0x.
std::string FormatCpumask(Bytes mask);

// The name of system call `nr` on this architecture (libseccomp's table), or the number.
std::string SyscallName(int64_t nr);

// Decodes an IPv4 (4 bytes) or IPv6 (16 bytes) address in network byte order to text.
std::string FormatInetAddress(Bytes addr);

}  // namespace tpe
