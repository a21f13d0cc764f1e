// One file's call frame information, read with elfutils' libdw: .eh_frame (with .eh_frame_hdr's
// search table), which every x86-64 binary carries whether stripped or not, and .debug_frame
// where the file has it (unstripped binaries built -fno-asynchronous-unwind-tables).
//
// Sources: the System V x86-64 psABI ("Stack Unwind Algorithm", ".eh_frame"), the LSB's
// .eh_frame_hdr, DWARF 5 section 6.4; libdw.h (dwarf_getcfi_elf, dwarf_cfi_addrframe).
//
// The file is read once, through a file descriptor the caller opened as untrusted
// (process/mapped_file_open.h): its program headers (PT_LOAD, for file offset -> link-time
// address) and the CFI sections, bounded by Limits; the descriptor is not kept (libelf is told
// ELF_C_FDDONE once the sections are read).
//
// Thread-safety: not thread-safe (libdw caches the FDEs and CIEs it decodes in the table); one
// thread at a time (the reader's).
#pragma once

#include <elfutils/libdw.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "elf/address.h"
#include "unwind/registers.h"

struct Elf;

namespace tpe::unwind {

// A row of the table: libdw's Dwarf_Frame, malloc'd (dwarf_cfi_addrframe).
struct FreeFrame {
  void operator()(Dwarf_Frame* f) const;
};
using FramePtr = std::unique_ptr<Dwarf_Frame, FreeFrame>;

// A row reduced to the rules compilers emit for code at a call, for the unwinder's fast path (no
// libdw call, no allocation): the CFA is a register plus an offset; the return address and each
// callee-saved register (rbx, rbp, r12-r15; psABI) keep the same value, are undefined, are saved
// at CFA + offset, or are CFA + offset (DWARF 5 section 6.4.1: same value, undefined, offset(N),
// val_offset(N)). Rows of signal frames or with an expression or register rule have no compact form.
struct CompactRow {
  enum class Rule : uint8_t { kSame, kUndefined, kAtCfa, kIsCfa };
  static constexpr int kSlots = 7;
  // The DWARF register of each slot: the return address, rbx, rbp, r12-r15.
  static constexpr std::array<uint8_t, kSlots> kRegisters = {kDwarfRip, kDwarfRbx, kDwarfRbp, 12, 13, 14, 15};
  uint8_t cfa_register = 0;
  std::array<Rule, kSlots> rule{};
  int32_t cfa_offset = 0;
  std::array<int32_t, kSlots> offset{};  // bytes from the CFA (kAtCfa, kIsCfa)
};

// How the row at an offset is read: none (no FDE covers it), compact, or full (RowAt).
enum class RowForm : uint8_t { kNone, kCompact, kFull };

class CfiTable {
 public:
  struct Limits {
    uint64_t max_section_bytes = uint64_t{128} << 20;  // .eh_frame or .debug_frame larger: refused
    uint32_t max_segments = 64;                        // PT_LOAD headers read
  };

  // Reads the file open as `fd` (`display` names it in errors). Errors: InvalidArgument for a
  // file that is not x86-64 ELF64 or whose CFI section is out of bounds; NotFound when it has no
  // CFI at all (then frames in it are unwound by frame pointer).
  static StatusOr<std::unique_ptr<CfiTable>> Read(int fd, const std::string& display, const Limits& limits);
  static StatusOr<std::unique_ptr<CfiTable>> Read(int fd, const std::string& display) {
    return Read(fd, display, Limits{});
  }
  ~CfiTable();
  CfiTable(const CfiTable&) = delete;
  CfiTable& operator=(const CfiTable&) = delete;

  // The row for the code at file offset `offset` (in a PT_LOAD segment), or null when no FDE
  // covers it (or it lies in no segment). `*signal`: the frame is a signal trampoline's (its
  // caller's return address is an exact pc).
  FramePtr RowAt(uint64_t offset, bool* signal) const;

  // The row at `offset` in compact form (kCompact, `*row` filled) when it has one; kFull when it
  // must be read with RowAt; kNone when RowAt would return null. Remembered per offset in a
  // direct-mapped table of kRowMemo entries (a loop's frames are the same few pcs).
  RowForm CompactRowAt(uint64_t offset, CompactRow* row) const;
  static constexpr size_t kRowMemo = 512;

  // Walks the rows of .eh_frame over the file's code in file offset order: `f(offset, form, row)`
  // for each row's first file offset, with `row` filled when `form` is kCompact; a gap between
  // two FDEs is one call with kNone. The FDEs are found through .eh_frame_hdr's search table (its
  // initial locations, sorted: LSB "Exception Frames", .eh_frame_hdr), each row's end through
  // dwarf_frame_info. Visits at most `max_rows` rows. Errors: NotFound when the file has no
  // .eh_frame_hdr or one in an encoding other than the one linkers write (udata4 count,
  // datarel sdata4 table); Unavailable past `max_rows` rows (the rows visited stand).
  Status ForEachRow(uint64_t max_rows, const std::function<void(uint64_t, RowForm, const CompactRow&)>& f) const;

  // Approximate bytes held (the sections read and libdw's decoded entries are not counted).
  size_t memory_bytes() const { return bytes_; }
  const std::string& display() const { return display_; }

 private:
  CfiTable() = default;
  std::string display_;
  Elf* elf_ = nullptr;
  Dwarf* dwarf_ = nullptr;            // for .debug_frame (null without it)
  Dwarf_CFI* eh_frame_ = nullptr;     // dwarf_getcfi_elf: ours to end
  Dwarf_CFI* debug_frame_ = nullptr;  // dwarf_getcfi: the Dwarf's
  std::vector<elf::LoadSegment> segments_;
  // .eh_frame_hdr's bytes (libelf's, as long as elf_ lives) and its link-time address.
  std::span<const uint8_t> eh_frame_hdr_;
  uint64_t eh_frame_hdr_address_ = 0;
  size_t bytes_ = 0;
  struct Memo {
    uint64_t offset_plus_1 = 0;  // 0: empty
    RowForm form = RowForm::kNone;
    CompactRow row;
  };
  mutable std::vector<Memo> memo_;  // kRowMemo entries once a row is asked for (counted in bytes_)
};

}  // namespace tpe::unwind
