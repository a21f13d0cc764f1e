// Function symbols and USDT probes of one x86-64 ELF64 file (executable, PIE or shared library),
// with the file offsets the kernel's uprobe_events wants: `PATH:0xFILE_OFFSET[(0xREF_CTR_OFFSET)]`
// (Documentation/trace/uprobetracer.rst).
//
// ElfFile::Open reads everything it needs (PT_LOAD segments, function symbols of .symtab and
// .dynsym with their GNU symbol versions, the .note.stapsdt probes) with libelf and closes the
// file before returning, so an ElfFile is a plain value: copyable, and every method is const,
// pure and safe from any thread. The file is read with pread(2) (ELF_C_READ), never mapped: a
// binary truncated while it is read (a package upgrade, a container layer going away) gives an
// error, where a mapping would raise SIGBUS and kill the process.
//
// Symbol versions (GNU extension; the LSB's "Symbol Versioning", and `info ld` VERSION): a
// shared library may define one name several times, once per version, e.g. glibc's
// pthread_cond_wait@@GLIBC_2.3.2 (the default version, which new links bind) and
// pthread_cond_wait@GLIBC_2.2.5 (kept for binaries linked before 2.3.2). In .dynsym the version
// is the .gnu.version entry of the symbol (an index into .gnu.version_d; bit 0x8000, "hidden",
// marks a non-default version); in .symtab, since binutils 2.35, the name itself carries
// "@VERSION" or "@@VERSION".
//
// Untrusted files: the daemon, as root, reads binaries any user can run or map. Every size the
// file states is checked against the file's size and against ElfLimits before anything is
// allocated or read: the ELF header's section and segment counts (before libelf sees the file:
// libelf allocates per section when it opens it), each section's extent, and the bytes read of
// symbol tables, string tables, notes and version sections. A symbol table past the limits is
// read in part (the rest counted in truncated_symbols()); another section past them is an error
// naming it and the limit. memory_bytes() says what an ElfFile holds, for caches bounded in bytes.
//
// Sources: elf(5) and the ELF gABI (headers, symbols, notes, extended section numbering),
// libelf(3)/gelf(3) (elfutils), sys/sdt.h and usdt.h here for the notes, libbpf src/usdt.c and
// src/elf.c as reference.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/untrusted_file.h"
#include "elf/address.h"
#include "elf/usdt.h"

struct Elf;  // libelf.h

namespace tpe::elf {

// A defined function symbol (STT_FUNC or STT_GNU_IFUNC, st_shndx != SHN_UNDEF, st_value != 0).
struct Symbol {
  std::string name;     // as in the string table, without any "@VERSION" / "@@VERSION"
  std::string version;  // the symbol version, e.g. "GLIBC_2.3.2"; "" when unversioned
  // Whether `version` is the name's default version (NAME@@VERSION, the one a link binds), not
  // an older one kept for compatibility (NAME@VERSION, hidden bit set). True when unversioned.
  bool default_version = true;
  uint64_t address = 0;      // st_value: link-time virtual address
  uint64_t size = 0;         // st_size in bytes (0 = unknown)
  uint64_t file_offset = 0;  // of `address`, through the PT_LOAD segments
  // STT_GNU_IFUNC: `address` is the resolver that picks an implementation at load time, so a
  // uprobe there fires once per process, not per call.
  bool is_ifunc = false;
  bool operator==(const Symbol&) const = default;
  // `name`, or with its version: "name@@version" (default) / "name@version".
  std::string QualifiedName() const;
};

// What reading one file may cost. The defaults read whole the files of this project's Debian
// build host (libLLVM-15's 36,700 exported functions, python3.11's notes) and a binary with a
// million symbols, and bound a crafted file to about 180 MiB held (2^20 functions of about 108
// bytes each, 64 MiB of names) and about 90 MiB read meanwhile (24 MiB of symbol table entries,
// 64 MiB of one string table).
struct ElfLimits {
  // A larger file is refused (FileRefusal::kTooLarge). libelf reads only the parts asked for,
  // so the size itself costs nothing; the bounds below do the work.
  uint64_t max_file_bytes = uint64_t{4} << 30;
  // Section and program header counts (e_shnum, e_phnum, or under extended numbering section
  // 0's sh_size / sh_info); a file with more is an error. Linked executables have tens.
  uint64_t max_sections = 65536;
  uint64_t max_segments = 65536;
  // Symbol table entries read, .symtab and .dynsym together (24 bytes each); the entries past
  // the bound are not read and are counted in truncated_symbols().
  uint64_t max_symbols = uint64_t{1} << 20;
  // Bytes read of one string table (symbol names, version names, section names); a symbol
  // whose name lies beyond them is not read (counted), a section's is an error.
  uint64_t max_string_table_bytes = uint64_t{64} << 20;
  // Bytes of function names kept, over the file; past the bound functions are dropped (counted).
  uint64_t max_name_bytes = uint64_t{64} << 20;
  // Bytes of one function name; a longer name is dropped (counted).
  uint64_t max_name_length = 65536;
  // Bytes of any other section read whole (.note.gnu.build-id, .note.stapsdt, .gnu.version_d);
  // a larger one is an error naming it.
  uint64_t max_section_bytes = uint64_t{4} << 20;
};

class ElfFile {
 public:
  // Reads `path`, following symlinks (a path an administrator names, e.g. a library's
  // versioned name), only when it is a regular file of at most limits.max_file_bytes (never a
  // FIFO or device: UntrustedFileOptions, common/untrusted_file.h). Errors, all naming `path`:
  // NotFound (no such file), PermissionDenied, InvalidArgument (not a regular file, too large —
  // `*refusal` says which, when not null —, not ELF, not x86-64 ELF64, not ET_EXEC/ET_DYN,
  // corrupt or truncated headers, symbol tables or notes, with the culprit; a section or header
  // count past `limits`; a file cut short while it is read), Unavailable (the file's size or
  // mtime changed while it was read: read it again once it is complete), Internal (other open(2)
  // failures). Never a signal.
  static StatusOr<ElfFile> Open(const std::string& path, const ElfLimits& limits = {}, FileRefusal* refusal = nullptr);
  // Reads the file open as `fd` (read with pread(2); the caller keeps the fd), e.g. one that
  // OpenUntrustedInRoot opened and whose inode the caller checked; `path` names it in messages
  // and path(). Errors: Open's (InvalidArgument when `fd` is not a regular file).
  static StatusOr<ElfFile> OpenFd(int fd, const std::string& path, const ElfLimits& limits = {});
  // A separate debug file of a binary (objcopy --only-keep-debug, a build-id directory's,
  // debuginfod's, MiniDebugInfo's), open as `fd`: read as OpenFd, but its addresses are mapped to
  // file offsets through `segments`, the binary's PT_LOAD segments (a debug file's own keep no
  // bytes), functions at addresses no segment holds are left out, and its USDT notes are not read.
  static StatusOr<ElfFile> OpenDebugFd(int fd, const std::string& path, const std::vector<LoadSegment>& segments,
                                       const ElfLimits& limits = {});
  // Open, calling `after_begin` once libelf has opened the file and read its ELF header, before
  // anything else is read (tests truncate or rewrite the file there).
  static StatusOr<ElfFile> OpenForTest(const std::string& path, const std::function<void()>& after_begin,
                                       const ElfLimits& limits = {});

  const std::string& path() const { return path_; }
  bool is_dynamic() const { return is_dynamic_; }  // ET_DYN (PIE or shared library)
  const std::vector<LoadSegment>& segments() const { return segments_; }

  // The function `name` names (.symtab or .dynsym), as libbpf resolves uprobe names:
  //  - "NAME@VERSION": the symbol NAME of exactly that version, default or not;
  //  - "NAME@@VERSION": the same, and VERSION must be NAME's default version;
  //  - "NAME": every symbol NAME of any version; symbols at one address are one function (e.g.
  //    aliases exported under two versions); when they are at several addresses, the default
  //    version's (and the unversioned ones') address, if that is one address.
  // Errors: NotFound naming `path` and up to 3 closest function names (edit distance), or saying
  // the file is stripped when it has no function symbols (or no .symtab and only exported ones),
  // or, for a version NAME does not have, listing NAME's versions; InvalidArgument for
  // "NAME@@VERSION" when VERSION is not the default, and when "NAME" is still ambiguous: the
  // candidates with their versions and addresses, and how to name one.
  StatusOr<Symbol> FindFunction(const std::string& name) const;

  // The file offset of `offset_in_symbol` bytes into function `name` (FindFunction).
  // Errors: FindFunction's; InvalidArgument when `offset_in_symbol` is not inside the function's
  // st_size bytes.
  StatusOr<uint64_t> SymbolFileOffset(const std::string& name, uint64_t offset_in_symbol = 0) const;

  // Function symbols whose name or qualified name (Symbol::QualifiedName) matches the fnmatch(3)
  // pattern `glob` (no flags), from .symtab and .dynsym, sorted by name, address, version.
  // A symbol in both tables is listed once (an unversioned copy beside a versioned one at the
  // same address, e.g. from a pre-2.35 linker's .symtab, is dropped).
  std::vector<Symbol> Symbols(const std::string& glob = "*") const;

  // The function whose bytes [address, address + size) hold link-time virtual `address`, for
  // naming a sampled instruction; a symbol of size 0 holds addresses up to the next symbol's.
  // Of aliases at one address, the default version's (then the first by name). nullptr when no
  // function holds it (stripped file, PLT stubs, padding). O(log n).
  const Symbol* SymbolAt(uint64_t address) const;

  // The GNU build id (.note.gnu.build-id, NT_GNU_BUILD_ID) as lowercase hex, e.g. 40 characters
  // for a SHA-1 id; "" when the file has none. Debuginfod and pprof servers find debug info by it.
  const std::string& build_id() const { return build_id_; }

  // Whether the file has a .symtab (is not stripped of its local symbols).
  bool has_symtab() const { return has_symtab_; }
  // Whether the file holds DWARF (a .debug_info section with contents; a file stripped by
  // `objcopy --only-keep-debug` of its code keeps it, the stripped binary does not).
  bool has_debug_info() const { return has_debug_info_; }
  // .gnu_debuglink: the separate debug file's base name and the CRC-32 of its contents (gdb's
  // "Debugging Information in Separate Files"); name "" when the section is absent or malformed.
  struct DebugLink {
    std::string name;
    uint32_t crc = 0;
  };
  const DebugLink& debuglink() const { return debuglink_; }
  // .gnu_debugdata (MiniDebugInfo: an xz-compressed ELF holding a .symtab): where its bytes lie in
  // the file; size 0 when absent.
  struct SectionExtent {
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  const SectionExtent& debugdata() const { return debugdata_; }

  // Every USDT probe site in .note.stapsdt, in note order (empty when the section is absent).
  // A probe appears once per site: a probe macro inlined in N places is N entries.
  const std::vector<UsdtProbe>& UsdtProbes() const { return probes_; }

  // Every site of `provider:name` (at least one). The sites' args_status says whether their
  // argument specs parsed. Errors: NotFound naming `path`, saying there is no .note.stapsdt, or
  // suggesting up to 3 closest "provider:name".
  StatusOr<std::vector<UsdtProbe>> FindUsdt(const std::string& provider, const std::string& name) const;

  // Approximate bytes this object holds (symbols with their names, probes, segments), for
  // caches bounded in bytes (ElfFileCache). Fixed once the file is read.
  uint64_t memory_bytes() const { return memory_bytes_; }
  // Symbol table entries not read, and functions not kept, because of ElfLimits (0 when every
  // function of the file is known).
  uint64_t truncated_symbols() const { return truncated_symbols_; }

 private:
  // Everything but opening: the checks and sections of the file libelf reads as `e`, which has
  // `file_size` bytes.
  // `segments`: for a debug file (OpenDebugFd), the binary's; null otherwise.
  static StatusOr<ElfFile> Read(::Elf* e, const std::string& path, uint64_t file_size, const ElfLimits& limits,
                                const std::vector<LoadSegment>* segments = nullptr);
  static StatusOr<ElfFile> ReadFd(int fd, const struct stat& st, const std::string& path, const ElfLimits& limits,
                                  const std::function<void()>& after_begin,
                                  const std::vector<LoadSegment>* segments = nullptr);
  uint64_t ComputeMemoryBytes() const;

  std::string path_;
  bool is_dynamic_ = false;
  bool has_symtab_ = false;  // a .symtab section exists (the file is not stripped)
  bool has_stapsdt_ = false;
  bool has_debug_info_ = false;
  DebugLink debuglink_;
  SectionExtent debugdata_;
  std::vector<LoadSegment> segments_;
  std::vector<Symbol> symbols_;       // sorted by name, address, version; deduplicated
  std::vector<uint32_t> by_address_;  // indices into symbols_, by address, the preferred alias first
  std::string build_id_;
  std::vector<UsdtProbe> probes_;
  uint64_t memory_bytes_ = 0;
  uint64_t truncated_symbols_ = 0;
};

}  // namespace tpe::elf
