#include "unwind/cfi_table.h"

#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace tpe::unwind {

void FreeFrame::operator()(Dwarf_Frame* f) const { std::free(f); }

StatusOr<std::unique_ptr<CfiTable>> CfiTable::Read(int fd, const std::string& display, const Limits& limits) {
  if (elf_version(EV_CURRENT) == EV_NONE) return Internal("libelf: elf_version failed");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return InvalidArgument(display + " is not a regular file");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  std::unique_ptr<CfiTable> t(new CfiTable());
  t->display_ = display;
  t->elf_ = elf_begin(fd, ELF_C_READ, nullptr);
  if (t->elf_ == nullptr || elf_kind(t->elf_) != ELF_K_ELF) {
    return InvalidArgument(display + " is not an ELF file");
  }
  GElf_Ehdr eh;
  if (gelf_getehdr(t->elf_, &eh) == nullptr || eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64) {
    return InvalidArgument(display + " is not an x86-64 ELF64 file");
  }
  size_t phnum = 0;
  if (elf_getphdrnum(t->elf_, &phnum) != 0) return InvalidArgument(display + ": unreadable program headers");
  for (size_t i = 0; i < phnum && t->segments_.size() < limits.max_segments; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(t->elf_, static_cast<int>(i), &ph) == nullptr || ph.p_type != PT_LOAD) continue;
    if (ph.p_offset > file_size || ph.p_filesz > file_size - ph.p_offset) continue;
    elf::LoadSegment s;
    s.vaddr = ph.p_vaddr;
    s.offset = ph.p_offset;
    s.filesz = ph.p_filesz;
    s.memsz = ph.p_memsz;
    s.executable = (ph.p_flags & PF_X) != 0;
    s.writable = (ph.p_flags & PF_W) != 0;
    t->segments_.push_back(s);
  }
  // The CFI sections' sizes, checked before libdw reads them.
  size_t shstrndx = 0;
  bool has_debug_frame = false;
  // Section names from .shstrtab read here, bounds-checked (libelf's elf_strptr and
  // elf_rawdata leak what they allocate for some malformed files: found by fuzz/cfi_fuzzer with
  // elfutils 0.188).
  std::string names;
  if (elf_getshdrstrndx(t->elf_, &shstrndx) == 0) {
    Elf_Scn* strscn = elf_getscn(t->elf_, shstrndx);
    GElf_Shdr strsh;
    if (strscn != nullptr && gelf_getshdr(strscn, &strsh) != nullptr && strsh.sh_type == SHT_STRTAB &&
        strsh.sh_offset <= file_size && strsh.sh_size <= file_size - strsh.sh_offset &&
        strsh.sh_size <= limits.max_section_bytes) {
      names.resize(strsh.sh_size);
      if (::pread(fd, names.data(), names.size(), static_cast<off_t>(strsh.sh_offset)) !=
          static_cast<ssize_t>(names.size())) {
        names.clear();
      }
    }
  }
  if (!names.empty()) {
    for (Elf_Scn* scn = elf_nextscn(t->elf_, nullptr); scn != nullptr; scn = elf_nextscn(t->elf_, scn)) {
      GElf_Shdr sh;
      if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_name >= names.size()) continue;
      if (names.find('\0', sh.sh_name) == std::string::npos) continue;
      const char* name = names.c_str() + sh.sh_name;
      const bool eh = std::strcmp(name, ".eh_frame") == 0 || std::strcmp(name, ".eh_frame_hdr") == 0;
      const bool debug = std::strcmp(name, ".debug_frame") == 0;
      if (!eh && !debug) continue;
      if (sh.sh_type != SHT_NOBITS && (sh.sh_size > limits.max_section_bytes || sh.sh_offset > file_size ||
                                       sh.sh_size > file_size - sh.sh_offset)) {
        return InvalidArgument(display + ": " + name + " of " + std::to_string(sh.sh_size) +
                               " bytes is past the file or the bound (" + std::to_string(limits.max_section_bytes) +
                               " bytes)");
      }
      t->bytes_ += sh.sh_size;
      has_debug_frame |= debug && sh.sh_type != SHT_NOBITS;
    }
  }
  t->eh_frame_ = dwarf_getcfi_elf(t->elf_);
  if (has_debug_frame) {
    t->dwarf_ = dwarf_begin_elf(t->elf_, DWARF_C_READ, nullptr);
    if (t->dwarf_ != nullptr) t->debug_frame_ = dwarf_getcfi(t->dwarf_);
  }
  if (t->eh_frame_ == nullptr && t->debug_frame_ == nullptr)
    return NotFound(display + " has no call frame information");
  // Everything libdw needs is read: the descriptor may be closed.
  elf_cntl(t->elf_, ELF_C_FDDONE);
  t->bytes_ += sizeof(CfiTable) + t->segments_.size() * sizeof(elf::LoadSegment) + 4096;
  return t;
}

CfiTable::~CfiTable() {
  if (eh_frame_ != nullptr) dwarf_cfi_end(eh_frame_);
  if (dwarf_ != nullptr) dwarf_end(dwarf_);
  if (elf_ != nullptr) elf_end(elf_);
}

FramePtr CfiTable::RowAt(uint64_t offset, bool* signal) const {
  *signal = false;
  auto address = elf::AddressForFileOffset(segments_, offset);
  if (!address.ok()) return nullptr;
  for (Dwarf_CFI* cfi : {eh_frame_, debug_frame_}) {
    if (cfi == nullptr) continue;
    Dwarf_Frame* frame = nullptr;
    if (dwarf_cfi_addrframe(cfi, *address, &frame) != 0 || frame == nullptr) continue;
    Dwarf_Addr start = 0, end = 0;
    dwarf_frame_info(frame, &start, &end, signal);
    return FramePtr(frame);
  }
  return nullptr;
}

}  // namespace tpe::unwind
