// Function symbols and USDT probes of one x86-64 ELF64 file (executable, PIE or shared library),
// with the file offsets the kernel's uprobe_events wants: `PATH:0xFILE_OFFSET[(0xREF_CTR_OFFSET)]`
// (Documentation/trace/uprobetracer.rst).
//
// ElfFile::Open reads everything it needs (PT_LOAD segments, function symbols of .symtab and
// .dynsym, the .note.stapsdt probes) with libelf and closes the file before returning, so an
// ElfFile is a plain value: copyable, and every method is const, pure and safe from any thread.
//
// Sources: elf(5) and the ELF gABI (headers, symbols, notes), libelf(3)/gelf(3) (elfutils),
// sys/sdt.h and usdt.h here for the notes, libbpf src/usdt.c and src/elf.c as reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "elf/address.h"
#include "elf/usdt.h"

namespace tpe::elf {

// A defined function symbol (STT_FUNC or STT_GNU_IFUNC, st_shndx != SHN_UNDEF, st_value != 0).
struct Symbol {
  std::string name;          // as in the string table (no "@VERSION")
  uint64_t address = 0;      // st_value: link-time virtual address
  uint64_t size = 0;         // st_size in bytes (0 = unknown)
  uint64_t file_offset = 0;  // of `address`, through the PT_LOAD segments
  // STT_GNU_IFUNC: `address` is the resolver that picks an implementation at load time, so a
  // uprobe there fires once per process, not per call.
  bool is_ifunc = false;
  bool operator==(const Symbol&) const = default;
};

class ElfFile {
 public:
  // Reads `path`. Errors, all naming `path`: NotFound (no such file), PermissionDenied,
  // InvalidArgument (not ELF, not x86-64 ELF64, not ET_EXEC/ET_DYN, corrupt or truncated
  // headers, symbol tables or notes, with the culprit), Internal (other open(2) failures).
  static StatusOr<ElfFile> Open(const std::string& path);

  const std::string& path() const { return path_; }
  bool is_dynamic() const { return is_dynamic_; }  // ET_DYN (PIE or shared library)
  const std::vector<LoadSegment>& segments() const { return segments_; }

  // The file offset of `offset_in_symbol` bytes into function `name` (.symtab or .dynsym).
  // Errors: NotFound naming `path` and up to 3 closest function names (edit distance), or saying
  // the file is stripped when it has no function symbols (or no .symtab and only exported ones);
  // InvalidArgument when `offset_in_symbol` is not inside the function's st_size bytes, or when
  // several functions share `name` at different addresses (listing them).
  StatusOr<uint64_t> SymbolFileOffset(const std::string& name, uint64_t offset_in_symbol = 0) const;

  // Function symbols whose name matches the fnmatch(3) pattern `glob` (no flags), from .symtab
  // and .dynsym, deduplicated by (name, address), sorted by name then address.
  std::vector<Symbol> Symbols(const std::string& glob = "*") const;

  // Every USDT probe site in .note.stapsdt, in note order (empty when the section is absent).
  // A probe appears once per site: a probe macro inlined in N places is N entries.
  const std::vector<UsdtProbe>& UsdtProbes() const { return probes_; }

  // Every site of `provider:name` (at least one). The sites' args_status says whether their
  // argument specs parsed. Errors: NotFound naming `path`, saying there is no .note.stapsdt, or
  // suggesting up to 3 closest "provider:name".
  StatusOr<std::vector<UsdtProbe>> FindUsdt(const std::string& provider, const std::string& name) const;

 private:
  std::string path_;
  bool is_dynamic_ = false;
  bool has_symtab_ = false;  // a .symtab section exists (the file is not stripped)
  bool has_stapsdt_ = false;
  std::vector<LoadSegment> segments_;
  std::vector<Symbol> symbols_;  // sorted by name then address, deduplicated
  std::vector<UsdtProbe> probes_;
};

}  // namespace tpe::elf
