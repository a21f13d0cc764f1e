#include "symbols/dwarf_info.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "elf/sections.h"

namespace tpe::symbols {
namespace {

constexpr size_t kMaxLines = 64;

std::string DieName(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  for (int name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name, DW_AT_name}) {
    if (dwarf_attr_integrate(die, name, &attr) != nullptr) {
      if (const char* s = dwarf_formstring(&attr)) return s;
    }
  }
  return "";
}

// The compile unit holding `address`: from .debug_aranges, else by each unit's ranges.
bool UnitOf(Dwarf* dwarf, uint64_t address, Dwarf_Die* cu) {
  if (dwarf_addrdie(dwarf, address, cu) != nullptr) return true;
  Dwarf_Off offset = 0, next = 0;
  size_t header_size = 0;
  for (int units = 0;
       units < 1 << 20 && dwarf_nextcu(dwarf, offset, &next, &header_size, nullptr, nullptr, nullptr) == 0;
       ++units, offset = next) {
    if (dwarf_offdie(dwarf, offset + header_size, cu) == nullptr) continue;
    if (dwarf_haspc(cu, address) == 1) return true;
  }
  return false;
}

}  // namespace

StatusOr<std::shared_ptr<DwarfInfo>> DwarfInfo::Open(int fd, const std::string& display, uint64_t max_bytes) {
  std::shared_ptr<DwarfInfo> info(new DwarfInfo());
  info->display_ = display;
  info->fd_ = ScopedFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (!info->fd_.valid()) return ErrnoStatus(errno, "dup " + display);
  elf_version(EV_CURRENT);
  info->elf_ = elf_begin(info->fd_.get(), ELF_C_READ, nullptr);
  if (info->elf_ == nullptr || elf_kind(info->elf_) != ELF_K_ELF) {
    return InvalidArgument(display + ": not an ELF file (" + elf_errmsg(-1) + ")");
  }
  struct stat st {};
  if (::fstat(info->fd_.get(), &st) != 0) return ErrnoStatus(errno, "fstat " + display);
  uint64_t bytes = 0;
  for (const elf::SectionHeader& sh :
       elf::ReadSectionHeaders(info->elf_, info->fd_.get(), static_cast<uint64_t>(st.st_size), max_bytes)) {
    if (sh.name.starts_with(".debug_") || sh.name.starts_with(".zdebug_")) {
      bytes += std::max(sh.size, elf::UncompressedSize(sh, info->fd_.get()));
    }
  }
  if (bytes > max_bytes) {
    return InvalidArgument(display + ": its DWARF holds " + std::to_string(bytes >> 20) + " MiB, over the bound of " +
                           std::to_string(max_bytes >> 20) + " MiB (named by its symbol table instead)");
  }
  info->section_bytes_ = bytes;
  info->dwarf_ = dwarf_begin_elf(info->elf_, DWARF_C_READ, nullptr);
  if (info->dwarf_ == nullptr) {
    return NotFound(display + ": no readable DWARF (" + dwarf_errmsg(-1) + ")");
  }
  return info;
}

DwarfInfo::~DwarfInfo() {
  if (dwarf_ != nullptr) dwarf_end(dwarf_);
  if (elf_ != nullptr) elf_end(elf_);
}

std::vector<DwarfInfo::Line> DwarfInfo::Lookup(uint64_t address) const {
  std::lock_guard<std::mutex> lock(mu_);
  // Renders ask again for the addresses they asked before: answered from memory (a scope walk
  // through the unit's DIEs costs tens of microseconds).
  if (auto it = memo_.find(address); it != memo_.end()) return it->second;
  std::vector<Line> out = LookupLocked(address);
  if (memo_.size() >= kMaxMemo) {
    memo_.clear();
    memo_bytes_ = 0;
  }
  size_t bytes = 64;
  for (const Line& l : out) bytes += sizeof(Line) + l.function.size() + l.file.size();
  memo_bytes_ += bytes;
  memo_.emplace(address, out);
  return out;
}

// A compile unit's functions and inlined subroutines by address (DWARF 5 §3.3, §3.3.8): every
// range of code each one covers, and its enclosing function scope.
struct DwarfInfo::UnitIndex {
  struct Scope {
    Dwarf_Off die = 0;    // the subprogram or inlined subroutine DIE
    int32_t parent = -1;  // the enclosing function scope's index, -1 for none
    uint32_t depth = 0;   // how many function scopes enclose it
  };
  struct Range {
    uint64_t low = 0, high = 0;  // [low, high)
    uint32_t scope = 0;
  };
  std::vector<Scope> scopes;
  std::vector<Range> ranges;  // sorted by low
};

namespace {

// Walks the unit's DIEs once (depth first, at most `max_ranges` ranges, nesting cut at 256) and
// indexes each subprogram and inlined subroutine that covers code.
void BuildIndex(Dwarf_Die* unit, size_t max_ranges, DwarfInfo::UnitIndex* index) {
  struct Pending {
    Dwarf_Die die;
    int32_t scope;  // the function scope enclosing `die`
    uint32_t depth;
    uint32_t nesting;  // DIE levels below the unit
  };
  constexpr uint32_t kMaxNesting = 256;
  std::vector<Pending> stack;
  Dwarf_Die first;
  if (dwarf_child(unit, &first) == 0) stack.push_back(Pending{first, -1, 0, 1});
  while (!stack.empty() && index->ranges.size() < max_ranges) {
    Pending p = stack.back();
    stack.pop_back();
    Dwarf_Die next;
    if (dwarf_siblingof(&p.die, &next) == 0) stack.push_back(Pending{next, p.scope, p.depth, p.nesting});
    const int tag = dwarf_tag(&p.die);
    int32_t inner = p.scope;
    uint32_t depth = p.depth;
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      const auto self = static_cast<uint32_t>(index->scopes.size());
      Dwarf_Addr base = 0, low = 0, high = 0;
      bool covers = false;
      for (ptrdiff_t off = 0;
           index->ranges.size() < max_ranges && (off = dwarf_ranges(&p.die, off, &base, &low, &high)) > 0;) {
        // Empty, or at 0: code the linker discarded (its tombstone), which would cover real code.
        if (high <= low || low == 0) continue;
        index->ranges.push_back(DwarfInfo::UnitIndex::Range{low, high, self});
        covers = true;
      }
      // A declaration or an abstract instance covers no code, nor does anything inside it.
      if (!covers) continue;
      index->scopes.push_back(DwarfInfo::UnitIndex::Scope{dwarf_dieoffset(&p.die), p.scope, p.depth});
      inner = static_cast<int32_t>(self);
      depth = p.depth + 1;
    }
    Dwarf_Die child;
    if (p.nesting < kMaxNesting && dwarf_haschildren(&p.die) > 0 && dwarf_child(&p.die, &child) == 0) {
      stack.push_back(Pending{child, inner, depth, p.nesting + 1});
    }
  }
  std::sort(index->ranges.begin(), index->ranges.end(), [](const auto& a, const auto& b) { return a.low < b.low; });
}

}  // namespace

const DwarfInfo::UnitIndex& DwarfInfo::IndexOf(uint64_t unit_offset, void* unit_die) const {
  if (auto it = units_.find(unit_offset); it != units_.end()) return *it->second;
  if (unit_ranges_ >= kMaxIndexedRanges) {
    units_.clear();
    unit_ranges_ = unit_bytes_ = 0;
  }
  auto index = std::make_unique<UnitIndex>();
  BuildIndex(static_cast<Dwarf_Die*>(unit_die), kMaxIndexedRanges, index.get());
  unit_ranges_ += index->ranges.size();
  unit_bytes_ += 64 + index->ranges.size() * sizeof(UnitIndex::Range) + index->scopes.size() * sizeof(UnitIndex::Scope);
  return *units_.emplace(unit_offset, std::move(index)).first->second;
}

std::vector<DwarfInfo::Line> DwarfInfo::LookupLocked(uint64_t address) const {
  std::vector<Line> out;
  Dwarf_Die cu;
  if (!UnitOf(dwarf_, address, &cu)) return out;
  const UnitIndex& index = IndexOf(dwarf_dieoffset(&cu), &cu);
  // The innermost function scope holding the address: the deepest of the ranges that hold it.
  int64_t innermost = -1;
  for (const UnitIndex::Range& r : index.ranges) {
    if (r.low > address) break;
    if (address >= r.high) continue;
    if (innermost < 0 || index.scopes[r.scope].depth > index.scopes[innermost].depth) innermost = r.scope;
  }
  if (innermost < 0) return out;
  // The address's own line: the innermost function's.
  std::string file;
  int64_t line = 0;
  if (Dwarf_Line* l = dwarf_getsrc_die(&cu, address)) {
    if (const char* f = dwarf_linesrc(l, nullptr, nullptr)) file = f;
    int n = 0;
    if (dwarf_lineno(l, &n) == 0) line = n;
  }
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  if (dwarf_getsrcfiles(&cu, &files, &nfiles) != 0) files = nullptr;
  Dwarf_Die die;
  if (dwarf_offdie(dwarf_, index.scopes[innermost].die, &die) == nullptr) return out;
  out.push_back(Line{DieName(&die), file, line});
  // Each inlined instance's caller, with the instance's call site as its line, up to the function
  // they were inlined into.
  for (int64_t s = innermost; dwarf_tag(&die) == DW_TAG_inlined_subroutine && out.size() < kMaxLines;) {
    file.clear();
    line = 0;
    Dwarf_Attribute attr;
    Dwarf_Word v = 0;
    if (files != nullptr && dwarf_formudata(dwarf_attr(&die, DW_AT_call_file, &attr), &v) == 0 && v < nfiles) {
      if (const char* f = dwarf_filesrc(files, v, nullptr, nullptr)) file = f;
    }
    if (dwarf_formudata(dwarf_attr(&die, DW_AT_call_line, &attr), &v) == 0) line = static_cast<int64_t>(v);
    s = index.scopes[s].parent;
    if (s < 0 || dwarf_offdie(dwarf_, index.scopes[s].die, &die) == nullptr) break;
    out.push_back(Line{DieName(&die), file, line});
  }
  return out;
}

}  // namespace tpe::symbols
