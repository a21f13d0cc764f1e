#include "elf/sections.h"

#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstring>

namespace tpe::elf {

std::vector<SectionHeader> ReadSectionHeaders(Elf* elf, int fd, uint64_t file_size, uint64_t max_names_bytes) {
  std::vector<SectionHeader> out;
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(elf, &shstrndx) != 0) return out;
  Elf_Scn* strscn = elf_getscn(elf, shstrndx);
  GElf_Shdr strsh;
  if (strscn == nullptr || gelf_getshdr(strscn, &strsh) == nullptr || strsh.sh_type != SHT_STRTAB ||
      strsh.sh_offset > file_size || strsh.sh_size > file_size - strsh.sh_offset || strsh.sh_size > max_names_bytes) {
    return out;
  }
  std::string names(strsh.sh_size, '\0');
  if (names.empty() || ::pread(fd, names.data(), names.size(), static_cast<off_t>(strsh.sh_offset)) !=
                           static_cast<ssize_t>(names.size())) {
    return out;
  }
  for (Elf_Scn* scn = elf_nextscn(elf, nullptr); scn != nullptr; scn = elf_nextscn(elf, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr || sh.sh_name >= names.size()) continue;
    const size_t end = names.find('\0', sh.sh_name);
    if (end == std::string::npos) continue;
    out.push_back(SectionHeader{names.substr(sh.sh_name, end - sh.sh_name), sh.sh_type, sh.sh_flags, sh.sh_offset,
                                sh.sh_type == SHT_NOBITS ? 0 : sh.sh_size, sh.sh_addr, elf_ndxscn(scn)});
  }
  return out;
}

uint64_t UncompressedSize(const SectionHeader& section, int fd) {
  if (section.name.starts_with(".zdebug")) {  // GNU's older form: "ZLIB", then the size, big-endian
    unsigned char h[12];
    if (section.size < sizeof(h) ||
        ::pread(fd, h, sizeof(h), static_cast<off_t>(section.offset)) != static_cast<ssize_t>(sizeof(h)) ||
        std::memcmp(h, "ZLIB", 4) != 0) {
      return 0;
    }
    uint64_t size = 0;
    for (int i = 4; i < 12; ++i) size = size << 8 | h[i];
    return size;
  }
  if ((section.flags & SHF_COMPRESSED) == 0) return section.size;
  Elf64_Chdr chdr;
  if (section.size < sizeof(chdr) ||
      ::pread(fd, &chdr, sizeof(chdr), static_cast<off_t>(section.offset)) != static_cast<ssize_t>(sizeof(chdr))) {
    return 0;
  }
  return chdr.ch_size;
}

}  // namespace tpe::elf
