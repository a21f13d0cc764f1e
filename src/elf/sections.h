// The section headers of an ELF file open with libelf, each with its name. The names are read
// from .shstrtab with pread(2) and bounds-checked here rather than through elf_strptr, which
// leaks what it allocates for some malformed files (found by fuzz/cfi_fuzzer, elfutils 0.188).
//
// Source: elf(5) (Elf64_Shdr, e_shstrndx, Elf64_Chdr for SHF_COMPRESSED sections).
// Pure given the file; thread-safety: as the Elf handle's (one thread at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct Elf;  // libelf.h

namespace tpe::elf {

struct SectionHeader {
  std::string name;
  uint32_t type = 0;    // SHT_*
  uint64_t flags = 0;   // SHF_*
  uint64_t offset = 0;  // bytes into the file
  uint64_t size = 0;    // bytes in the file (SHT_NOBITS: none are)
  uint64_t addr = 0;    // sh_addr: link-time address of an allocated section (0 otherwise)
  size_t index = 0;     // section index (elf_getscn)
};

// Every section of `elf` (read from the descriptor `fd` of `file_size` bytes) whose name lies
// within .shstrtab; empty when .shstrtab is missing, past the file or over `max_names_bytes`.
std::vector<SectionHeader> ReadSectionHeaders(Elf* elf, int fd, uint64_t file_size, uint64_t max_names_bytes);

// The bytes a section holds once decompressed: its Elf64_Chdr's ch_size for an SHF_COMPRESSED
// section, the size after "ZLIB" for a .zdebug_* one (read with pread(2); 0 when unreadable),
// else its size (0 for SHT_NOBITS).
uint64_t UncompressedSize(const SectionHeader& section, int fd);

}  // namespace tpe::elf
