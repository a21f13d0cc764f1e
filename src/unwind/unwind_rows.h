// A file's unwind table (unwind_table.h) packed as the in-kernel unwinder reads it: 8 bytes an
// entry, the entries of every file of a profile in one BPF array map, each file's a sorted run
// found by binary search (the shape Parca Agent loads; its rows are 8 bytes as well).
//
// Layout of a PackedRow (little-endian, as the BPF program loads it):
//   bytes 0-3  u32  file offset where the rule starts (a file of 4 GiB or more is refused)
//   bytes 4-7  u32  the rule: bits 0-1 CfaRule, bits 2-3 RbpRule (unwind_table.h's values),
//                   bits 4-11 rbp_offset / 8 as a signed byte (kAtCfa: the caller's rbp at
//                   CFA + 8 * it), bits 12-31 cfa_offset in bytes (rsp or rbp + it)
// A rule whose offsets do not fit (a CFA offset below 0 or of 1 MiB or more — python3.11 has
// frames of 64 KiB; an rbp slot not 8-aligned or farther than 1 KiB from the CFA) is packed as
// kStop and counted: the walk ends there rather than guess. Packing keeps the table's
// invariant: no two neighbours alike.
//
// Pure. Thread-safety: values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/status.h"
#include "unwind/unwind_table.h"

namespace tpe::unwind {

struct PackedRow {
  uint32_t offset = 0;
  uint32_t rule = 0;
  bool operator==(const PackedRow&) const = default;
};
inline constexpr uint32_t kPackedMaxCfaOffset = (uint32_t{1} << 20) - 1;  // bytes
static_assert(sizeof(PackedRow) == 8, "the BPF program reads 8-byte rows");

struct PackedTable {
  std::vector<PackedRow> rows;  // sorted by offset, no two neighbours alike
  size_t narrowed = 0;          // entries whose rule did not fit, packed as kStop
};

// Packs `table`. Errors: InvalidArgument when an entry's offset is 4 GiB or more (the file is
// too large for the packed form: its frames are walked by frame pointer).
StatusOr<PackedTable> PackUnwindTable(const UnwindTable& table);

// The rule a packed row carries (what the BPF program decodes).
UnwindRule UnpackRule(const PackedRow& row);

// The rule for file offset `offset` in `rows` (a PackedTable's): the last row at or before it,
// found by binary search as the BPF program does; kNoTable before the first row.
UnwindRule PackedRuleAt(std::span<const PackedRow> rows, uint64_t offset);

}  // namespace tpe::unwind
