// Field extractors compiled once per metric from the event's field-offset table, then run on
// every sample's raw payload without allocating.
//
// A label value travels in two steps: on the hot path AppendKey() copies the field's bytes into
// a compact binary key (8 bytes for integers, u16 length + bytes for strings, the raw bytes for
// fixed arrays); at scrape time Render() turns that key segment into the label text (decimal,
// 0x-hex, an IPv4/IPv6 address, a __print_symbolic name, an errno, disk or kernel symbol name).
// Rendering happens once per series
// per scrape, not per event. Variable-length non-text fields (`__data_loc cpumask_t`,
// `__data_loc u8[]`) key the bytes they point at (u16 length + bytes, at most
// kMaxStringLabelBytes) and render as hex (cpumasks as the kernel's bitmap).
//
// Source of the layouts: Documentation/trace/events.rst (format files), include/trace/
// trace_events.h (__data_loc: u32 = len << 16 | offset from record start; __rel_loc: offset
// from the end of the u32 field itself).
//
// Pure except for "ksym" and "blkdev", whose names come from the running system: Compile loads
// them through decode/kernel_names.h (from the paths in DecodeSources, the real files by
// default) and Render looks them up in memory (ksym) or in a cache re-read at most every few
// seconds (blkdev) — at scrape time, never on the per-event path. An extractor is immutable
// after Compile and may be used from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_reader.h"
#include "common/status.h"
#include "decode/kernel_names.h"
#include "decode/label_decode.h"
#include "format/event_format.h"
#include "format/print_symbols.h"

namespace tpe {

// The decode named `s` in kLabelDecodeNames (decode/label_decode.h); nullopt otherwise.
std::optional<LabelDecode> ParseLabelDecode(std::string_view s);
// All decode names, in table order, comma-separated ("auto, hex, ...") for error messages.
std::string LabelDecodeNames();

// Longest string kept in a key (bytes); longer __data_loc strings are cut.
inline constexpr size_t kMaxStringLabelBytes = 256;

class FieldExtractor {
 public:
  // Checks that `decode` fits the field (e.g. inet needs a 4/16-byte address, symbolic needs a
  // table with entries) and returns the extractor. `symbols` may be null (no table); it is
  // copied, so it need not outlive the extractor.
  // "ksym" loads the kallsyms of `sources` (once per process) and "blkdev" shares the
  // /sys/dev/block resolver of `sources`.
  // Errors: InvalidArgument saying which decodes would be valid for this field (CheckFits);
  // for "ksym", KernelSymbols::Load's (unreadable file, addresses hidden by kptr_restrict).
  static StatusOr<FieldExtractor> Compile(const FieldFormat& field, LabelDecode decode, const SymbolTable* symbols,
                                          const DecodeSources& sources = DecodeSources());

  // The shape check of Compile, without loading anything: OK when `decode` can render `field`.
  static Status CheckFits(const FieldFormat& field, LabelDecode decode, const SymbolTable* symbols);

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
  // Renders an integer key segment.
  std::string RenderInteger(int64_t v) const;
  // The bytes a __data_loc/__rel_loc field points at (its length from the loc word), or a char
  // array's; strings stop at their NUL. False when they lie outside `raw`.
  bool DynamicBytes(Bytes raw, Bytes* out) const;
  bool IsDynamic() const { return field_.kind == FieldKind::kDataLoc || field_.kind == FieldKind::kRelLoc; }

  FieldFormat field_;
  LabelDecode decode_;
  // A copy of the symbol table, shared by the extractor's copies: a collector kept across a
  // reload renders with it after the plan it was compiled from is gone.
  std::shared_ptr<const SymbolTable> symbols_;
  // The process-wide kallsyms table (kKsym only; shared by every extractor, immutable).
  std::shared_ptr<const KernelSymbols> ksyms_;
  // The process-wide /sys/dev/block resolver (kBlkdev only; internally locked).
  std::shared_ptr<BlockDevNames> blkdevs_;
};

// The decodes that fit `field` and make sense for it, for --list-events: "auto" always, then
// each decode CheckFits accepts, narrowed where accepting is not yet suggesting: "inet" for
// address arrays and *addr* integers, "syscall" for id/nr-like integers, "blkdev" for dev_t or
// `dev` integers, "errno" for signed integers (but not common_*, *pid*, *cpu*, *prio*, *state*), "ksym" for pointers
// and 8-byte integers named like code addresses (call_site, ip, func...). Never lists a decode Compile would refuse for
// its shape.
std::vector<std::string> FittingDecodes(const FieldFormat& field, const SymbolTable* symbols);

// The errno name of -v (glibc's strerrorname_np) when v is a known negative errno; else "".
std::string ErrnoName(int64_t v);

// Renders a kernel cpumask (an array of unsigned longs, little-endian, as __data_loc cpumask_t
// fields carry it) as the kernel's %*pb bitmap does: hex, most significant first, no leading
// zeros ("3" for CPUs 0 and 1), prefixed 0x.
std::string FormatCpumask(Bytes mask);

// The name of system call `nr` on this architecture (libseccomp's table), or the number.
std::string SyscallName(int64_t nr);

// Decodes an IPv4 (4 bytes) or IPv6 (16 bytes) address in network byte order to text.
std::string FormatInetAddress(Bytes addr);

}  // namespace tpe
