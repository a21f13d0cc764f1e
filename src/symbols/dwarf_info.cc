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

std::vector<DwarfInfo::Line> DwarfInfo::LookupLocked(uint64_t address) const {
  std::vector<Line> out;
  Dwarf_Die cu;
  if (!UnitOf(dwarf_, address, &cu)) return out;
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
  // The innermost function at the address (dwarf_getscopes continues an inlined instance with
  // its abstract origin's scopes, not its caller's: the callers come from dwarf_getscopes_die).
  Dwarf_Die* scopes = nullptr;
  const int nscopes = dwarf_getscopes(&cu, address, &scopes);
  Dwarf_Die innermost;
  bool found = false;
  for (int i = 0; i < nscopes; ++i) {
    const int tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
      innermost = scopes[i];
      found = true;
      break;
    }
  }
  free(scopes);
  if (!found) return out;
  out.push_back(Line{DieName(&innermost), file, line});
  if (dwarf_tag(&innermost) != DW_TAG_inlined_subroutine) return out;
  Dwarf_Die* chain = nullptr;
  const int nchain = dwarf_getscopes_die(&innermost, &chain);  // chain[0] is `innermost`
  int inlined = 0;  // the last inlined instance seen: its call site is its caller's line
  for (int i = 1; i < nchain && out.size() < kMaxLines; ++i) {
    const int tag = dwarf_tag(&chain[i]);
    if (tag != DW_TAG_subprogram && tag != DW_TAG_inlined_subroutine) continue;
    file.clear();
    line = 0;
    Dwarf_Attribute attr;
    Dwarf_Word v = 0;
    if (files != nullptr && dwarf_formudata(dwarf_attr(&chain[inlined], DW_AT_call_file, &attr), &v) == 0 &&
        v < nfiles) {
      if (const char* f = dwarf_filesrc(files, v, nullptr, nullptr)) file = f;
    }
    if (dwarf_formudata(dwarf_attr(&chain[inlined], DW_AT_call_line, &attr), &v) == 0) {
      line = static_cast<int64_t>(v);
    }
    out.push_back(Line{DieName(&chain[i]), file, line});
    if (tag == DW_TAG_subprogram) break;
    inlined = i;
  }
  free(chain);
  return out;
}

}  // namespace tpe::symbols
