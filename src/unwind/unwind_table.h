// A file's unwind table in the form an in-kernel unwinder walks: sorted entries, each the rule
// from its file offset up to the next entry's, reduced to what a user stack walk through rip,
// rsp and rbp needs (the shape Parca Agent and the OpenTelemetry eBPF profiler derive from
// .eh_frame). Derived once per file from its CfiTable (.eh_frame, through .eh_frame_hdr's
// search table), shared by every process that maps the file.
//
// A rule says how to find the caller's frame from a frame whose pc is in the entry:
//   CFA (the caller's rsp) = rsp + cfa_offset, or rbp + cfa_offset;
//   the return address (the caller's rip) is at CFA - 8 (x86-64 psABI, "Stack Unwind
//   Algorithm": every compiler-emitted row outside signal frames has it there);
//   the caller's rbp is unchanged, at CFA + rbp_offset, or not known.
// Rows with any other form (a CFA expression, as in PLT stubs; a CFA in another register, as
// in stack-realigning prologues; a signal frame; the return address elsewhere) are kStop: an
// unwinder ends the stack there rather than guess. Code no FDE covers is kNoTable: an unwinder
// falls back to the frame pointer there (JIT code, hand-written assembly without CFI).
//
// Sources: System V x86-64 psABI "Stack Unwind Algorithm"; DWARF 5 section 6.4 (CFA, register
// rules); LSB "Exception Frames" (.eh_frame, .eh_frame_hdr).
//
// Pure apart from the CfiTable it reads. Thread-safety: BuildUnwindTable reads a CfiTable (one
// thread at a time, as CfiTable says); the result is a value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "unwind/cfi_table.h"

namespace tpe::unwind {

// How to find the CFA of a frame (the caller's stack pointer before the call).
enum class CfaRule : uint8_t {
  kRsp,      // rsp + cfa_offset
  kRbp,      // rbp + cfa_offset
  kStop,     // a form the table does not carry: the walk ends here
  kNoTable,  // no FDE covers the code: the frame pointer walk takes over
};
// Where the caller's rbp is.
enum class RbpRule : uint8_t {
  kSame,       // unchanged by this frame
  kAtCfa,      // saved at CFA + rbp_offset
  kUndefined,  // not known (an unwinder that needs it stops)
};

struct UnwindRule {
  CfaRule cfa = CfaRule::kNoTable;
  RbpRule rbp = RbpRule::kSame;
  int32_t cfa_offset = 0;  // bytes
  int32_t rbp_offset = 0;  // bytes from the CFA (kAtCfa)
  bool operator==(const UnwindRule&) const = default;
};

// `rule` holds for file offsets [offset, the next entry's offset); the last entry ends the
// file's covered code (it is kNoTable, or the last FDE's row up to the file's end).
struct UnwindEntry {
  uint64_t offset = 0;  // file offset of code (PT_LOAD's p_offset based, as a mapping's pgoff)
  UnwindRule rule;
  bool operator==(const UnwindEntry&) const = default;
};

struct UnwindTable {
  std::vector<UnwindEntry> entries;  // sorted by offset, no two neighbours with the same rule
  size_t rows = 0;                   // .eh_frame rows read (before merging equal neighbours)
  size_t stop_rows = 0;              // of them, kStop

  // The rule for file offset `offset` (binary search), or kNoTable before the first entry.
  UnwindRule RuleAt(uint64_t offset) const;
  size_t memory_bytes() const { return entries.capacity() * sizeof(UnwindEntry); }
};

// The reduction of one CfiTable row to a rule (kNone -> kNoTable; kFull -> kStop).
UnwindRule RuleOf(RowForm form, const CompactRow& row);

// Builds `cfi`'s table, reading at most `max_rows` rows. Errors: NotFound when the file has no
// usable .eh_frame_hdr (CfiTable::ForEachRow); Unavailable when it holds more than `max_rows`
// rows (a file too large for the bound: its frames are walked by frame pointer).
StatusOr<UnwindTable> BuildUnwindTable(const CfiTable& cfi, uint64_t max_rows);

}  // namespace tpe::unwind
