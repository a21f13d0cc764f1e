// Source lines and inlined functions of code addresses, from the DWARF (.debug_info, .debug_line,
// .debug_abbrev, ...) of an ELF file: a binary built with -g, or its separate debug file. Read with
// elfutils' libdw, as eu-addr2line -i does: the compile unit that holds the address
// (dwarf_addrdie, .debug_aranges; every unit's ranges when those are missing), the innermost
// function or inlined subroutine at the address, and for each inlined subroutine its call site
// (DW_AT_call_file, DW_AT_call_line), which is the source line of the function it was inlined into.
// The functions of a unit are indexed by address the first time the unit is asked (one walk of its
// DIEs: what dwarf_getscopes does at every address), so each later address is a scan of the
// unit's ranges.
//
// The file is read with pread(2) (ELF_C_READ), never mapped, so a file cut short while it is read
// gives no name, not SIGBUS. libdw checks what it reads against the sections' sizes; a corrupt
// file gives no lines.
//
// Sources: DWARF 5 (dwarfstd.org) §3.3.8 (inlined subroutines), §6.2 (line number program);
// elfutils libdw.h; elfutils src/addr2line.c (print_addrsym, handle_address with -i).
//
// Thread-safety: Lookup from any thread (libdw's lazily built tables are guarded by a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"

struct Dwarf;  // libdw.h
struct Elf;    // libelf.h

namespace tpe::symbols {

class DwarfInfo {
 public:
  // The DWARF of the ELF file open as `fd` (duplicated and kept open). libdw reads every .debug_*
  // section into memory when it opens the file (decompressing SHF_COMPRESSED ones), so a file
  // whose DWARF sections hold more than `max_bytes` (decompressed) is refused before that: its
  // frames are named by its symbol table. `display` names it in messages. Errors: NotFound when
  // the file has no readable DWARF (no .debug_info, or corrupt headers), InvalidArgument when it
  // is no ELF file or its DWARF is over `max_bytes`.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{32} << 20;
  static StatusOr<std::shared_ptr<DwarfInfo>> Open(int fd, const std::string& display,
                                                   uint64_t max_bytes = kDefaultMaxBytes);
  ~DwarfInfo();
  DwarfInfo(const DwarfInfo&) = delete;
  DwarfInfo& operator=(const DwarfInfo&) = delete;

  // One function at an address: a function inlined there, or the function holding the code.
  struct Line {
    std::string function;  // DW_AT_linkage_name, else DW_AT_name (through DW_AT_abstract_origin); may be ""
    std::string file;      // source file path as the line program names it; "" when unknown
    int64_t line = 0;      // 1-based source line; 0 when unknown
  };
  // The functions at link-time virtual `address`, innermost first: the functions inlined there
  // (the innermost with the address's own line, each caller with the line of the call), then the
  // function they were inlined into (last). Empty when no compile unit covers the address. At
  // most 64 entries (deeper inlining is cut at the outer end). Answers are remembered per
  // address (at most 65,536 addresses; thread-safe).
  std::vector<Line> Lookup(uint64_t address) const;
  // Estimated bytes of the remembered answers and of the units' indexes.
  size_t memo_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return memo_bytes_ + unit_bytes_;
  }

  const std::string& display() const { return display_; }
  // A compile unit's function scopes by address (defined and built in dwarf_info.cc).
  struct UnitIndex;
  // Bytes of the DWARF sections libdw holds (decompressed), of the remembered answers and of the
  // units' indexes.
  size_t memory_bytes() const { return section_bytes_ + memo_bytes(); }

 private:
  DwarfInfo() = default;
  ScopedFd fd_;
  ::Elf* elf_ = nullptr;
  ::Dwarf* dwarf_ = nullptr;
  std::string display_;
  size_t section_bytes_ = 0;
  std::vector<Line> LookupLocked(uint64_t address) const;
  const UnitIndex& IndexOf(uint64_t unit_offset, void* unit_die) const;
  static constexpr size_t kMaxMemo = 65536;  // addresses remembered (then forgotten all at once)
  // Units' indexes kept: at most this many ranges in all (~24 bytes each), then forgotten at once.
  static constexpr size_t kMaxIndexedRanges = size_t{1} << 20;
  mutable std::mutex mu_;                                                   // libdw's per-unit caches are built lazily
  mutable std::unordered_map<uint64_t, std::vector<Line>> memo_;            // address -> Lookup's answer
  mutable size_t memo_bytes_ = 0;                                           // estimated bytes memo_ holds
  mutable std::unordered_map<uint64_t, std::unique_ptr<UnitIndex>> units_;  // unit DIE offset -> index
  mutable size_t unit_ranges_ = 0, unit_bytes_ = 0;                         // what units_ holds
};

}  // namespace tpe::symbols
