#include "elf/elf_file.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <tuple>

#include "common/edit_distance.h"
#include "common/scoped_fd.h"

namespace tpe::elf {
namespace {

struct ElfDeleter {
  void operator()(Elf* e) const { elf_end(e); }
};
using ElfPtr = std::unique_ptr<Elf, ElfDeleter>;

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status Corrupt(const std::string& path, const std::string& what) {
  const char* why = elf_errmsg(-1);
  return InvalidArgument(path + ": " + what + " (" + (why != nullptr ? why : "corrupt") + ")");
}

// Up to 3 distinct `candidates` closest to `target`, joined as "a, b, c".
std::string Closest(const std::string& target, std::vector<std::string> candidates) {
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  std::vector<std::pair<size_t, std::string>> scored;
  for (auto& c : candidates) scored.emplace_back(EditDistance(target, c), std::move(c));
  size_t n = std::min<size_t>(3, scored.size());
  std::partial_sort(scored.begin(), scored.begin() + n, scored.end());
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? ", " : "") + scored[i].second;
  return out;
}

// True when [offset, offset + size) lies inside a file of `file_size` bytes.
bool InFile(uint64_t offset, uint64_t size, uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

Status TruncatedError(const std::string& path, const std::string& what, uint64_t offset, uint64_t size,
                      uint64_t file_size) {
  return InvalidArgument(path + ": truncated: " + what + " (" + std::to_string(size) + " bytes at offset " +
                         std::to_string(offset) + ") runs past the file's " + std::to_string(file_size) + " bytes");
}

Status OverLimit(const std::string& path, const std::string& what, uint64_t value, uint64_t limit,
                 const std::string& unit) {
  return InvalidArgument(path + ": " + what + " has " + std::to_string(value) + " " + unit + ", more than the " +
                         std::to_string(limit) + " read from one file (ElfLimits)");
}

// Reads exactly `size` bytes at `offset` of `fd`; false on a short read or an error.
bool PreadAll(int fd, void* buf, size_t size, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return true;
}

// Checks the ELF header of the file open as `fd` before libelf reads it: elf_begin allocates
// an Elf_Scn for every section the header (or, under extended numbering, section 0) claims and
// initialises each, so a header claiming 2^24 sections costs gigabytes before anything else can
// be checked. Refuses what is not x86-64 ELF64 here too (libelf would size an ELF32's sections
// the same way), and tables that run past the file or past `limits`.
Status CheckElfHeader(int fd, uint64_t file_size, const ElfLimits& limits, const std::string& path) {
  unsigned char ident[EI_NIDENT];
  if (file_size < EI_NIDENT || !PreadAll(fd, ident, EI_NIDENT, 0) || std::memcmp(ident, ELFMAG, SELFMAG) != 0) {
    return InvalidArgument(path + ": not an ELF file");
  }
  if (file_size < sizeof(Elf64_Ehdr)) {
    return TruncatedError(path, "the ELF header", 0, sizeof(Elf64_Ehdr), file_size);
  }
  unsigned char raw[sizeof(Elf64_Ehdr)];
  if (!PreadAll(fd, raw, sizeof(raw), 0)) return TruncatedError(path, "the ELF header", 0, sizeof(raw), file_size);
  const bool big_endian = ident[EI_DATA] == ELFDATA2MSB;
  const uint16_t machine =
      big_endian ? static_cast<uint16_t>(raw[18] << 8 | raw[19]) : static_cast<uint16_t>(raw[18] | raw[19] << 8);
  if (ident[EI_CLASS] != ELFCLASS64 || ident[EI_DATA] != ELFDATA2LSB || machine != EM_X86_64) {
    return InvalidArgument(path + ": not an x86-64 ELF64 file (class " + std::to_string(ident[EI_CLASS]) +
                           ", e_machine " + std::to_string(machine) + ")");
  }
  Elf64_Ehdr ehdr;  // little-endian, as this host
  std::memcpy(&ehdr, raw, sizeof(ehdr));
  uint64_t shnum = ehdr.e_shnum, phnum = ehdr.e_phnum;
  if ((shnum == 0 && ehdr.e_shoff != 0) || phnum == PN_XNUM) {
    // Extended numbering: the counts are in section 0 (sh_size, sh_info).
    Elf64_Shdr zero;
    if (!InFile(ehdr.e_shoff, sizeof(zero), file_size) || !PreadAll(fd, &zero, sizeof(zero), ehdr.e_shoff)) {
      return TruncatedError(path, "section header 0 (extended numbering)", ehdr.e_shoff, sizeof(zero), file_size);
    }
    if (shnum == 0) shnum = zero.sh_size;
    if (phnum == PN_XNUM) phnum = zero.sh_info;
  }
  if (shnum > limits.max_sections)
    return OverLimit(path, "the section header table", shnum, limits.max_sections, "sections");
  if (phnum > limits.max_segments) {
    return OverLimit(path, "the program header table", phnum, limits.max_segments, "segments");
  }
  // libelf reads sizeof(Elf64_Shdr) / sizeof(Elf64_Phdr) per entry whatever e_*entsize says.
  const uint64_t sh_bytes = shnum * std::max<uint64_t>(ehdr.e_shentsize, sizeof(Elf64_Shdr));
  if (shnum != 0 && !InFile(ehdr.e_shoff, sh_bytes, file_size)) {
    return TruncatedError(path, "the section header table", ehdr.e_shoff, sh_bytes, file_size);
  }
  const uint64_t ph_bytes = phnum * std::max<uint64_t>(ehdr.e_phentsize, sizeof(Elf64_Phdr));
  if (phnum != 0 && !InFile(ehdr.e_phoff, ph_bytes, file_size)) {
    return TruncatedError(path, "the program header table", ehdr.e_phoff, ph_bytes, file_size);
  }
  return Status::Ok();
}

// Checks that the program and section header tables lie inside the file: libelf reads a truncated
// file without complaint and then reports fewer headers than the ELF header promises.
// Counts are the ELF header's, or under extended numbering (e_phnum PN_XNUM, e_shnum 0) what
// libelf read from section 0.
Status CheckHeaderTables(Elf* e, const GElf_Ehdr& ehdr, uint64_t file_size, const std::string& path) {
  size_t phnum = ehdr.e_phnum, shnum = ehdr.e_shnum;
  if (phnum == PN_XNUM && elf_getphdrnum(e, &phnum) != 0) return Corrupt(path, "bad extended program header count");
  if (shnum == 0 && ehdr.e_shoff != 0 && elf_getshdrnum(e, &shnum) != 0) {
    return Corrupt(path, "bad extended section header count");
  }
  uint64_t ph_bytes = uint64_t{phnum} * ehdr.e_phentsize;
  if (!InFile(ehdr.e_phoff, ph_bytes, file_size)) {
    return TruncatedError(path, "the program header table", ehdr.e_phoff, ph_bytes, file_size);
  }
  uint64_t sh_bytes = uint64_t{shnum} * ehdr.e_shentsize;
  if (!InFile(ehdr.e_shoff, sh_bytes, file_size)) {
    return TruncatedError(path, "the section header table", ehdr.e_shoff, sh_bytes, file_size);
  }
  return Status::Ok();
}

StatusOr<std::vector<LoadSegment>> ReadSegments(Elf* e, uint64_t file_size, const std::string& path) {
  size_t count = 0;
  if (elf_getphdrnum(e, &count) != 0) return Corrupt(path, "cannot read the program header count");
  std::vector<LoadSegment> segments;
  for (size_t i = 0; i < count; ++i) {
    GElf_Phdr ph;
    if (gelf_getphdr(e, static_cast<int>(i), &ph) == nullptr) {
      return Corrupt(path, "cannot read program header #" + std::to_string(i));
    }
    if (ph.p_type != PT_LOAD) continue;
    if (!InFile(ph.p_offset, ph.p_filesz, file_size)) {
      return TruncatedError(path, "PT_LOAD #" + std::to_string(i), ph.p_offset, ph.p_filesz, file_size);
    }
    segments.push_back(LoadSegment{.vaddr = ph.p_vaddr,
                                   .offset = ph.p_offset,
                                   .filesz = ph.p_filesz,
                                   .memsz = ph.p_memsz,
                                   .executable = (ph.p_flags & PF_X) != 0,
                                   .writable = (ph.p_flags & PF_W) != 0});
  }
  return segments;
}

// The first `limit` bytes of a string table section (SHT_STRTAB), read with
// elf_getdata_rawchunk: elf_strptr would read the whole section, whatever its size.
class StringTable {
 public:
  enum class Lookup { kOk, kTruncated, kBad };
  // Reads section `index` of `e`. Errors: InvalidArgument naming `path` and `user` (the section
  // that links to it) when it is no string table or runs past the file.
  static StatusOr<StringTable> Read(Elf* e, size_t index, uint64_t limit, uint64_t file_size, const std::string& path,
                                    const std::string& user) {
    Elf_Scn* scn = elf_getscn(e, index);
    GElf_Shdr sh;
    if (scn == nullptr || gelf_getshdr(scn, &sh) == nullptr) {
      return Corrupt(path, user + " links to section #" + std::to_string(index) + ", which is unreadable");
    }
    if (sh.sh_type != SHT_STRTAB) {
      return InvalidArgument(path + ": " + user + " links to section #" + std::to_string(index) +
                             ", which is not a string table (sh_type " + std::to_string(sh.sh_type) + ")");
    }
    if (!InFile(sh.sh_offset, sh.sh_size, file_size)) {
      return TruncatedError(path, "the string table of " + user, sh.sh_offset, sh.sh_size, file_size);
    }
    StringTable t;
    t.section_size_ = sh.sh_size;
    const uint64_t size = std::min(sh.sh_size, limit);
    if (size > 0) {
      Elf_Data* data = elf_getdata_rawchunk(e, static_cast<int64_t>(sh.sh_offset), size, ELF_T_BYTE);
      if (data == nullptr) return Corrupt(path, "cannot read the string table of " + user);
      t.bytes_ = std::string_view(static_cast<const char*>(data->d_buf), data->d_size);
    }
    return t;
  }

  // The NUL-terminated string at `offset`: kTruncated when it starts or ends past the bytes
  // read of a table larger than the limit, kBad when it is not inside the table.
  Lookup Get(uint64_t offset, std::string_view* out) const {
    const bool cut = bytes_.size() < section_size_;
    if (offset >= bytes_.size()) return cut && offset < section_size_ ? Lookup::kTruncated : Lookup::kBad;
    const size_t end = bytes_.find('\0', offset);
    if (end == std::string_view::npos) return cut ? Lookup::kTruncated : Lookup::kBad;
    *out = bytes_.substr(offset, end - offset);
    return Lookup::kOk;
  }

 private:
  std::string_view bytes_;  // owned by the Elf (elf_end frees it)
  uint64_t section_size_ = 0;
};

// String tables read so far, by section index (.dynstr serves .dynsym and .gnu.version_d; a
// linker may put section names in .strtab), each up to `limit` bytes.
class StringTables {
 public:
  StringTables(Elf* e, uint64_t file_size, uint64_t limit, const std::string& path)
      : e_(e), file_size_(file_size), limit_(limit), path_(path) {}
  StatusOr<const StringTable*> Get(size_t index, const std::string& user) {
    auto it = tables_.find(index);
    if (it == tables_.end()) {
      TPE_ASSIGN_OR_RETURN(StringTable t, StringTable::Read(e_, index, limit_, file_size_, path_, user));
      it = tables_.emplace(index, t).first;
    }
    return &it->second;
  }

 private:
  Elf* e_;
  uint64_t file_size_;
  uint64_t limit_;
  const std::string& path_;  // Read's argument
  std::map<size_t, StringTable> tables_;
};

// Checks that section `what` ("section .note.stapsdt") of `sh_size` bytes may be read whole.
Status CheckWholeSection(const std::string& path, const std::string& what, uint64_t sh_size, const ElfLimits& limits) {
  if (sh_size > limits.max_section_bytes) return OverLimit(path, what, sh_size, limits.max_section_bytes, "bytes");
  return Status::Ok();
}

// The names of the versions .gnu.version_d defines, by index (vd_ndx). The base version (the
// file's own name, VER_FLG_BASE) is left out: a symbol of it is unversioned.
StatusOr<std::map<uint16_t, std::string>> ReadVersionDefinitions(Elf_Scn* scn, const GElf_Shdr& sh,
                                                                 StringTables* strings, const ElfLimits& limits,
                                                                 const std::string& path) {
  TPE_RETURN_IF_ERROR(CheckWholeSection(path, "section .gnu.version_d", sh.sh_size, limits));
  std::map<uint16_t, std::string> names;
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return Corrupt(path, "cannot read .gnu.version_d");
  TPE_ASSIGN_OR_RETURN(const StringTable* strtab, strings->Get(sh.sh_link, ".gnu.version_d"));
  size_t offset = 0;
  // sh_info is the number of definitions; each is visited once, so a vd_next loop cannot spin.
  for (size_t i = 0; i < sh.sh_info; ++i) {
    GElf_Verdef vd;
    if (gelf_getverdef(data, static_cast<int>(offset), &vd) == nullptr) {
      return Corrupt(path, ".gnu.version_d entry #" + std::to_string(i) + " is unreadable");
    }
    GElf_Verdaux aux;
    if (gelf_getverdaux(data, static_cast<int>(offset + vd.vd_aux), &aux) == nullptr) {
      return Corrupt(path, ".gnu.version_d entry #" + std::to_string(i) + " has no name");
    }
    std::string_view name;
    if (strtab->Get(aux.vda_name, &name) != StringTable::Lookup::kOk) {
      return InvalidArgument(path + ": .gnu.version_d entry #" + std::to_string(i) + " has a bad name offset");
    }
    if ((vd.vd_flags & VER_FLG_BASE) == 0) names[vd.vd_ndx] = std::string(name);
    if (vd.vd_next == 0) break;
    offset += vd.vd_next;
  }
  return names;
}

// The GNU build id in a .note.gnu.build-id section's data, as lowercase hex; "" when there is no
// NT_GNU_BUILD_ID note of owner "GNU".
std::string BuildIdOf(Elf_Data* data) {
  GElf_Nhdr note;
  size_t offset = 0, name_offset = 0, desc_offset = 0, next = 0;
  while ((next = gelf_getnote(data, offset, &note, &name_offset, &desc_offset)) > 0) {
    const char* bytes = static_cast<const char*>(data->d_buf);
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(bytes + name_offset, "GNU", 4) == 0) {
      static constexpr char kHex[] = "0123456789abcdef";
      std::string hex;
      for (size_t i = 0; i < note.n_descsz; ++i) {
        const auto b = static_cast<unsigned char>(bytes[desc_offset + i]);
        hex += kHex[b >> 4];
        hex += kHex[b & 15];
      }
      return hex;
    }
    offset = next;
  }
  return "";
}

// The version data of .dynsym: its .gnu.version section and the names its entries index.
struct DynsymVersions {
  Elf_Scn* versym = nullptr;  // null: the file has no .gnu.version (no symbol is versioned)
  GElf_Shdr versym_sh{};
  std::map<uint16_t, std::string> names;
};

// What the symbol tables of one file may still use of ElfLimits.
struct SymbolBudget {
  uint64_t entries = 0;     // symbol table entries left to read
  uint64_t name_bytes = 0;  // bytes of names left to keep
  uint64_t truncated = 0;   // entries not read and functions dropped so far
};

// Appends the defined functions of symbol table `scn` (SHT_SYMTAB or SHT_DYNSYM) to `out`,
// within `budget`. `versions`: for .dynsym, where its symbol versions are; null for .symtab
// (whose names carry them).
Status ReadSymbols(Elf* e, const GElf_Shdr& sh, const std::string& section, const std::vector<LoadSegment>& segments,
                   const DynsymVersions* versions, StringTables* strings, const ElfLimits& limits,
                   const std::string& path, SymbolBudget* budget, std::vector<Symbol>* out, bool skip_unmapped) {
  if (sh.sh_entsize != sizeof(Elf64_Sym)) {
    return InvalidArgument(path + ": " + section + " has sh_entsize " + std::to_string(sh.sh_entsize) + ", not " +
                           std::to_string(sizeof(Elf64_Sym)));
  }
  const uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
  const uint64_t n = std::min(count, budget->entries);
  budget->truncated += count - n;
  budget->entries -= n;
  if (n == 0) return Status::Ok();
  // The first n entries only: elf_getdata would read the whole table.
  Elf_Data* data = elf_getdata_rawchunk(e, static_cast<int64_t>(sh.sh_offset), n * sizeof(Elf64_Sym), ELF_T_SYM);
  if (data == nullptr) return Corrupt(path, "cannot read " + section);
  Elf_Data* versym = nullptr;
  if (versions != nullptr && versions->versym != nullptr) {
    // Its first n entries (2 bytes each), no more than the section has.
    const uint64_t bytes = std::min<uint64_t>(versions->versym_sh.sh_size, n * sizeof(GElf_Versym));
    if (bytes > 0) {
      versym = elf_getdata_rawchunk(e, static_cast<int64_t>(versions->versym_sh.sh_offset), bytes, ELF_T_HALF);
      if (versym == nullptr) return Corrupt(path, "cannot read .gnu.version");
    }
  }
  TPE_ASSIGN_OR_RETURN(const StringTable* strtab, strings->Get(sh.sh_link, section));
  for (size_t i = 0; i < n; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) {
      return Corrupt(path, section + " symbol #" + std::to_string(i) + " is unreadable");
    }
    int type = GELF_ST_TYPE(sym.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
    std::string_view name_view;
    const StringTable::Lookup found = strtab->Get(sym.st_name, &name_view);
    if (found == StringTable::Lookup::kBad) {
      return InvalidArgument(path + ": " + section + " symbol #" + std::to_string(i) + " has a bad name offset");
    }
    if (found == StringTable::Lookup::kTruncated || name_view.size() > limits.max_name_length ||
        name_view.size() > budget->name_bytes) {
      ++budget->truncated;
      continue;
    }
    if (name_view.empty()) continue;
    const std::string name(name_view);
    auto offset = FileOffsetForAddress(segments, sym.st_value);
    if (!offset.ok() && skip_unmapped) continue;
    if (!offset.ok()) return offset.status().WithContext(path + ": " + section + " function " + name);
    budget->name_bytes -= name.size();
    Symbol s{.name = name,
             .version = "",
             .default_version = true,
             .address = sym.st_value,
             .size = sym.st_size,
             .file_offset = *offset,
             .is_ifunc = type == STT_GNU_IFUNC};
    if (versions != nullptr && versions->versym != nullptr) {
      GElf_Versym v;
      if (versym == nullptr || gelf_getversym(versym, static_cast<int>(i), &v) == nullptr) {
        return Corrupt(path, ".gnu.version has no entry for .dynsym symbol #" + std::to_string(i) + " " + name);
      }
      // Index 0 is local, 1 the base (global, unversioned); others name a .gnu.version_d entry
      // (an index of .gnu.version_r, a needed version, is never a defined symbol's).
      auto it = versions->names.find(static_cast<uint16_t>(v & 0x7fff));
      if (it != versions->names.end()) {
        s.version = it->second;
        s.default_version = (v & 0x8000) == 0;
      }
    } else if (const size_t at = name.find('@'); versions == nullptr && at != std::string::npos && at != 0) {
      // .symtab of a binutils >= 2.35 link: "NAME@VERSION" or "NAME@@VERSION".
      const bool is_default = at + 1 < name.size() && name[at + 1] == '@';
      s.name.assign(name, 0, at);
      s.version = name.substr(at + (is_default ? 2 : 1));
      s.default_version = is_default || s.version.empty();
    }
    out->push_back(std::move(s));
  }
  return Status::Ok();
}

// Heap bytes of `s` beyond the object (libstdc++ keeps up to 15 characters in place).
uint64_t HeapBytes(const std::string& s) { return s.capacity() > 15 ? s.capacity() + 1 : 0; }

}  // namespace

StatusOr<ElfFile> ElfFile::Open(const std::string& path, const ElfLimits& limits, FileRefusal* refusal) {
  UntrustedFileOptions options;
  options.max_bytes = limits.max_file_bytes;
  options.symlinks = UntrustedFileOptions::Symlinks::kFollow;
  TPE_ASSIGN_OR_RETURN(UntrustedFile file, OpenUntrusted(path, options, refusal));
  return ReadFd(file.fd.get(), file.st, path, limits, nullptr);
}

StatusOr<ElfFile> ElfFile::OpenFd(int fd, const std::string& path, const ElfLimits& limits) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > limits.max_file_bytes) {
    return OverLimit(path, "the file", static_cast<uint64_t>(st.st_size), limits.max_file_bytes, "bytes");
  }
  return ReadFd(fd, st, path, limits, nullptr);
}

StatusOr<ElfFile> ElfFile::OpenDebugFd(int fd, const std::string& path, const std::vector<LoadSegment>& segments,
                                       const ElfLimits& limits) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  if (static_cast<uint64_t>(st.st_size) > limits.max_file_bytes) {
    return OverLimit(path, "the file", static_cast<uint64_t>(st.st_size), limits.max_file_bytes, "bytes");
  }
  return ReadFd(fd, st, path, limits, nullptr, &segments);
}

StatusOr<ElfFile> ElfFile::OpenForTest(const std::string& path, const std::function<void()>& after_begin,
                                       const ElfLimits& limits) {
  UntrustedFileOptions options;
  options.max_bytes = limits.max_file_bytes;
  options.symlinks = UntrustedFileOptions::Symlinks::kFollow;
  TPE_ASSIGN_OR_RETURN(UntrustedFile file, OpenUntrusted(path, options));
  return ReadFd(file.fd.get(), file.st, path, limits, after_begin);
}

StatusOr<ElfFile> ElfFile::ReadFd(int fd, const struct stat& st, const std::string& path, const ElfLimits& limits,
                                  const std::function<void()>& after_begin, const std::vector<LoadSegment>* segments) {
  static const bool kLibelfReady = elf_version(EV_CURRENT) != EV_NONE;
  if (!kLibelfReady) return Internal("libelf: elf_version(EV_CURRENT) failed");
  TPE_RETURN_IF_ERROR(CheckElfHeader(fd, static_cast<uint64_t>(st.st_size), limits, path));
  // ELF_C_READ: libelf reads what it needs with pread(2) into its own buffers. ELF_C_READ_MMAP
  // would map the file, and a read of a page past the end of a file truncated meanwhile is
  // SIGBUS, which kills the daemon; a short pread is an error.
  ElfPtr e(elf_begin(fd, ELF_C_READ, nullptr));
  if (e == nullptr) return Corrupt(path, "not readable as ELF");
  if (after_begin) after_begin();
  StatusOr<ElfFile> file = Read(e.get(), path, static_cast<uint64_t>(st.st_size), limits, segments);
  // A file rewritten or cut while it was read may have given inconsistent pieces, or a read
  // error that blames the file's contents: say what happened instead.
  struct stat now;
  if (fstat(fd, &now) == 0 && (now.st_size != st.st_size || now.st_mtim.tv_sec != st.st_mtim.tv_sec ||
                               now.st_mtim.tv_nsec != st.st_mtim.tv_nsec)) {
    return Unavailable(path + ": the file changed while it was read (" + std::to_string(st.st_size) + " bytes, now " +
                       std::to_string(now.st_size) + "); read it again once it is complete" +
                       (file.ok() ? std::string() : " (the read failed: " + file.status().message() + ")"));
  }
  return file;
}

StatusOr<ElfFile> ElfFile::Read(Elf* e, const std::string& path, uint64_t file_size, const ElfLimits& limits,
                                const std::vector<LoadSegment>* segments) {
  if (elf_kind(e) != ELF_K_ELF) return InvalidArgument(path + ": not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(e, &ehdr) == nullptr) return Corrupt(path, "unreadable ELF header");
  if (gelf_getclass(e) != ELFCLASS64 || ehdr.e_machine != EM_X86_64) {
    return InvalidArgument(path + ": not an x86-64 ELF64 file (class " + std::to_string(gelf_getclass(e)) +
                           ", e_machine " + std::to_string(ehdr.e_machine) + ")");
  }
  if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN) {
    return InvalidArgument(path + ": ELF type " + std::to_string(ehdr.e_type) +
                           " is not an executable or shared object (ET_EXEC, ET_DYN)");
  }

  TPE_RETURN_IF_ERROR(CheckHeaderTables(e, ehdr, file_size, path));

  ElfFile file;
  file.path_ = path;
  file.is_dynamic_ = ehdr.e_type == ET_DYN;
  TPE_ASSIGN_OR_RETURN(file.segments_, ReadSegments(e, file_size, path));
  // A separate debug file's PT_LOAD headers keep no bytes: its addresses are the binary's.
  if (segments != nullptr) file.segments_ = *segments;

  StringTables strings(e, file_size, limits.max_string_table_bytes, path);
  size_t shstrndx = 0;
  if (elf_getshdrstrndx(e, &shstrndx) != 0) return Corrupt(path, "no section name table");
  const StringTable* section_names = nullptr;
  if (elf_nextscn(e, nullptr) != nullptr) {
    TPE_ASSIGN_OR_RETURN(section_names, strings.Get(shstrndx, "the section header table (e_shstrndx)"));
  }
  uint64_t stapsdt_base = 0;
  std::string_view notes;
  struct Table {
    Elf_Scn* scn;
    GElf_Shdr sh;
    std::string name;
  };
  std::vector<Table> tables;  // read once the version sections are known, wherever they are
  DynsymVersions versions;
  for (Elf_Scn* scn = elf_nextscn(e, nullptr); scn != nullptr; scn = elf_nextscn(e, scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) return Corrupt(path, "unreadable section header");
    std::string_view section;
    const StringTable::Lookup named = section_names->Get(sh.sh_name, &section);
    if (named == StringTable::Lookup::kTruncated) {
      return InvalidArgument(path + ": the name of section #" + std::to_string(elf_ndxscn(scn)) + " is past the " +
                             std::to_string(limits.max_string_table_bytes) +
                             " bytes read of the section name table (ElfLimits)");
    }
    if (named != StringTable::Lookup::kOk) {
      return InvalidArgument(path + ": section #" + std::to_string(elf_ndxscn(scn)) + " has a bad name");
    }
    const std::string name(section);
    if (sh.sh_type != SHT_NOBITS && !InFile(sh.sh_offset, sh.sh_size, file_size)) {
      return TruncatedError(path, "section " + name, sh.sh_offset, sh.sh_size, file_size);
    }
    if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) {
      file.has_symtab_ |= sh.sh_type == SHT_SYMTAB;
      tables.push_back(Table{scn, sh, name});
    } else if (sh.sh_type == SHT_GNU_versym) {
      versions.versym = scn;
      versions.versym_sh = sh;
    } else if (sh.sh_type == SHT_GNU_verdef) {
      TPE_ASSIGN_OR_RETURN(versions.names, ReadVersionDefinitions(scn, sh, &strings, limits, path));
    } else if (section == ".stapsdt.base") {
      stapsdt_base = sh.sh_addr;
    } else if (section == ".note.gnu.build-id" && sh.sh_type == SHT_NOTE) {
      TPE_RETURN_IF_ERROR(CheckWholeSection(path, "section " + name, sh.sh_size, limits));
      Elf_Data* data = elf_getdata(scn, nullptr);
      if (data == nullptr) return Corrupt(path, "cannot read .note.gnu.build-id");
      file.build_id_ = BuildIdOf(data);
    } else if (section == ".gnu_debuglink" && sh.sh_type == SHT_PROGBITS) {
      // The debug file's name (NUL-terminated, padded to 4 bytes), then its CRC-32 (gdb's
      // "Debugging Information in Separate Files").
      TPE_RETURN_IF_ERROR(CheckWholeSection(path, "section " + name, sh.sh_size, limits));
      Elf_Data* data = elf_rawdata(scn, nullptr);
      if (data == nullptr) return Corrupt(path, "cannot read .gnu_debuglink");
      const std::string_view raw(static_cast<const char*>(data->d_buf), data->d_size);
      const size_t nul = raw.find('\0');
      const size_t crc_at = nul == std::string_view::npos ? raw.size() : (nul + 4) & ~size_t{3};
      if (nul != std::string_view::npos && nul > 0 && crc_at + 4 <= raw.size()) {
        file.debuglink_.name = std::string(raw.substr(0, nul));
        uint32_t crc = 0;
        std::memcpy(&crc, raw.data() + crc_at, 4);  // in the file's byte order: x86-64 is little-endian
        file.debuglink_.crc = crc;
      }
    } else if (section == ".gnu_debugdata" && sh.sh_type == SHT_PROGBITS) {
      file.debugdata_ = SectionExtent{sh.sh_offset, sh.sh_size};
    } else if (section == ".debug_info" && sh.sh_type != SHT_NOBITS && sh.sh_size > 0) {
      file.has_debug_info_ = true;
    } else if (section == ".note.stapsdt" && sh.sh_type == SHT_NOTE) {
      TPE_RETURN_IF_ERROR(CheckWholeSection(path, "section " + name, sh.sh_size, limits));
      Elf_Data* data = elf_rawdata(scn, nullptr);
      if (data == nullptr) return Corrupt(path, "cannot read .note.stapsdt");
      file.has_stapsdt_ = true;
      notes = std::string_view(static_cast<const char*>(data->d_buf), data->d_size);
    }
  }
  SymbolBudget budget{.entries = limits.max_symbols, .name_bytes = limits.max_name_bytes, .truncated = 0};
  for (const Table& t : tables) {
    const bool dynsym = t.sh.sh_type == SHT_DYNSYM;
    const DynsymVersions* v = dynsym ? &versions : nullptr;
    const DynsymVersions none;  // a .gnu.version that belongs to another table: no versions
    if (dynsym && versions.versym != nullptr && versions.versym_sh.sh_link != elf_ndxscn(t.scn)) v = &none;
    TPE_RETURN_IF_ERROR(ReadSymbols(e, t.sh, t.name, file.segments_, v, &strings, limits, path, &budget, &file.symbols_,
                                    segments != nullptr));
  }
  file.truncated_symbols_ = budget.truncated;

  // Sorted by name, address, version; one entry per (name, address, version), and an unversioned
  // entry only where no versioned one has that name and address.
  auto& syms = file.symbols_;
  std::sort(syms.begin(), syms.end(), [](const Symbol& a, const Symbol& b) {
    return std::tie(a.name, a.address, a.version) < std::tie(b.name, b.address, b.version);
  });
  size_t kept = 0;
  for (size_t i = 0, j = 0; i < syms.size(); i = j) {
    while (j < syms.size() && syms[j].name == syms[i].name && syms[j].address == syms[i].address) ++j;
    const bool has_versioned = !syms[j - 1].version.empty();  // "" sorts first
    const size_t group = kept;
    for (size_t k = i; k < j; ++k) {
      if (has_versioned && syms[k].version.empty()) continue;
      if (kept > group && syms[k].version == syms[kept - 1].version) continue;
      if (kept != k) syms[kept] = std::move(syms[k]);
      ++kept;
    }
  }
  syms.resize(kept);
  syms.shrink_to_fit();
  file.by_address_.resize(syms.size());
  for (uint32_t i = 0; i < syms.size(); ++i) file.by_address_[i] = i;
  std::stable_sort(file.by_address_.begin(), file.by_address_.end(), [&](uint32_t a, uint32_t b) {
    // At one address: the default version first, then by name (already the order of symbols_).
    return std::make_tuple(syms[a].address, !syms[a].default_version) <
           std::make_tuple(syms[b].address, !syms[b].default_version);
  });

  if (segments != nullptr) notes = {};  // a debug file's probes are the binary's
  auto parsed = ParseStapsdtNotes(notes);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  for (const StapsdtNote& note : *parsed) {
    auto probe = ResolveUsdtProbe(note, stapsdt_base, file.segments_);
    if (!probe.ok()) return probe.status().WithContext(path);
    probe->args_status = probe->args_status.WithContext(path);
    file.probes_.push_back(std::move(probe).value());
  }
  file.memory_bytes_ = file.ComputeMemoryBytes();
  return file;
}

uint64_t ElfFile::ComputeMemoryBytes() const {
  uint64_t bytes = sizeof(ElfFile) + HeapBytes(path_) + HeapBytes(build_id_) +
                   segments_.capacity() * sizeof(LoadSegment) + symbols_.capacity() * sizeof(Symbol) +
                   by_address_.capacity() * sizeof(uint32_t) + probes_.capacity() * sizeof(UsdtProbe);
  for (const Symbol& s : symbols_) bytes += HeapBytes(s.name) + HeapBytes(s.version);
  for (const UsdtProbe& p : probes_) {
    bytes += HeapBytes(p.provider) + HeapBytes(p.name) + HeapBytes(p.args_spec) + HeapBytes(p.args_status.message()) +
             p.args.capacity() * sizeof(UsdtArgument);
    for (const UsdtArgument& a : p.args) bytes += HeapBytes(a.reg) + HeapBytes(a.spec);
  }
  return bytes;
}

const Symbol* ElfFile::SymbolAt(uint64_t address) const {
  // The last symbol starting at or below `address`; among aliases, by_address_ puts the
  // preferred one first, so step back to the first of that address.
  auto it = std::upper_bound(by_address_.begin(), by_address_.end(), address,
                             [&](uint64_t a, uint32_t i) { return a < symbols_[i].address; });
  if (it == by_address_.begin()) return nullptr;
  const uint64_t start = symbols_[*(it - 1)].address;
  auto first = it - 1;
  while (first != by_address_.begin() && symbols_[*(first - 1)].address == start) --first;
  // Of the aliases, one with a size that covers `address` (sizes may differ: a zero-sized alias).
  for (auto k = first; k != it; ++k) {
    const Symbol& s = symbols_[*k];
    if (s.size != 0 && address - s.address < s.size) return &s;
  }
  const Symbol& s = symbols_[*first];
  if (s.size == 0) return &s;  // no size: up to the next symbol, which starts above `address`
  return nullptr;              // past the end of the function: padding or code with no symbol
}

std::string Symbol::QualifiedName() const {
  if (version.empty()) return name;
  return name + (default_version ? "@@" : "@") + version;
}

StatusOr<Symbol> ElfFile::FindFunction(const std::string& wanted) const {
  // "NAME", "NAME@VERSION" or "NAME@@VERSION".
  const size_t at = wanted.find('@');
  const std::string name = wanted.substr(0, at);
  const bool versioned = at != std::string::npos;
  const bool want_default = versioned && wanted.compare(at, 2, "@@") == 0;
  const std::string version = versioned ? wanted.substr(at + (want_default ? 2 : 1)) : "";
  if (versioned && (name.empty() || version.empty() || version.find('@') != std::string::npos)) {
    return InvalidArgument(path_ + ": \"" + wanted + "\" is not a function name: use NAME, NAME@VERSION or " +
                           "NAME@@VERSION (e.g. pthread_cond_wait@@GLIBC_2.3.2)");
  }
  auto first = std::lower_bound(symbols_.begin(), symbols_.end(), name,
                                [](const Symbol& s, const std::string& n) { return s.name < n; });
  auto last = first;
  while (last != symbols_.end() && last->name == name) ++last;
  if (first == last) {
    if (symbols_.empty()) {
      return NotFound(path_ + " has no function symbols: it is stripped (" +
                      (has_symtab_ ? std::string(".symtab and .dynsym define no functions")
                                   : std::string("no .symtab, and .dynsym defines no functions")) +
                      "); no function " + name);
    }
    std::vector<std::string> names;
    for (const Symbol& s : symbols_) names.push_back(s.name);
    std::string msg = "no function " + name + " in " + path_;
    if (!has_symtab_) {
      msg += " (no .symtab: stripped; only the " + std::to_string(symbols_.size()) + " functions of .dynsym are known)";
    }
    return NotFound(msg + "; closest: " + Closest(name, std::move(names)));
  }
  // Every candidate as "NAME@@V at 0x..", for messages.
  auto list = [](const std::vector<Symbol>& candidates) {
    std::string out;
    for (const Symbol& s : candidates) out += (out.empty() ? "" : ", ") + s.QualifiedName() + " at " + Hex(s.address);
    return out;
  };
  const std::vector<Symbol> all(first, last);
  std::vector<Symbol> candidates;
  if (versioned) {
    for (const Symbol& s : all) {
      if (s.version == version) candidates.push_back(s);
    }
    if (candidates.empty()) {
      return NotFound(path_ + ": function " + name + " has no version " + version + "; it has: " + list(all));
    }
    if (want_default && !candidates.front().default_version) {
      return InvalidArgument(path_ + ": " + version + " is not the default version of " + name + " (\"" + wanted +
                             "\" names the default); it is " + name + "@" + version + " (" + list(all) + ")");
    }
  } else {
    candidates = all;
  }
  auto one_address = [](const std::vector<Symbol>& v) {
    return std::all_of(v.begin(), v.end(), [&](const Symbol& s) { return s.address == v.front().address; });
  };
  if (!versioned && !one_address(candidates)) {
    std::vector<Symbol> defaults;
    for (const Symbol& s : candidates) {
      if (s.default_version) defaults.push_back(s);
    }
    if (!defaults.empty() && one_address(defaults)) candidates = std::move(defaults);
  }
  if (!one_address(candidates)) {
    std::set<uint64_t> addresses;
    for (const Symbol& s : candidates) addresses.insert(s.address);
    bool any_version = false;
    for (const Symbol& s : candidates) any_version |= !s.version.empty();
    return InvalidArgument(path_ + ": " + std::to_string(addresses.size()) + " functions named " + wanted +
                           " at different addresses: " + list(candidates) +
                           (any_version ? "; name one with its version: NAME@VERSION, or NAME@@VERSION for the "
                                          "default"
                                        : " (local functions of different sources; a probe cannot tell them apart "
                                          "by name)"));
  }
  // One function: prefer the entry of the default version (all share address and code).
  for (const Symbol& s : candidates) {
    if (s.default_version) return s;
  }
  return candidates.front();
}

StatusOr<uint64_t> ElfFile::SymbolFileOffset(const std::string& name, uint64_t offset_in_symbol) const {
  TPE_ASSIGN_OR_RETURN(Symbol s, FindFunction(name));
  if (s.size != 0 && offset_in_symbol >= s.size) {
    return InvalidArgument(path_ + ": offset " + Hex(offset_in_symbol) + " is past the end of " + name + " (" +
                           std::to_string(s.size) + " bytes)");
  }
  return s.file_offset + offset_in_symbol;
}

std::vector<Symbol> ElfFile::Symbols(const std::string& glob) const {
  std::vector<Symbol> out;
  for (const Symbol& s : symbols_) {
    if (fnmatch(glob.c_str(), s.name.c_str(), 0) == 0 ||
        (!s.version.empty() && fnmatch(glob.c_str(), s.QualifiedName().c_str(), 0) == 0)) {
      out.push_back(s);
    }
  }
  return out;
}

StatusOr<std::vector<UsdtProbe>> ElfFile::FindUsdt(const std::string& provider, const std::string& name) const {
  std::vector<UsdtProbe> out;
  for (const UsdtProbe& p : probes_) {
    if (p.provider == provider && p.name == name) out.push_back(p);
  }
  if (!out.empty()) return out;
  std::string wanted = provider + ":" + name;
  if (!has_stapsdt_) return NotFound("no USDT probe " + wanted + " in " + path_ + ": it has no .note.stapsdt");
  std::vector<std::string> names;
  for (const UsdtProbe& p : probes_) names.push_back(p.FullName());
  if (names.empty()) return NotFound("no USDT probe " + wanted + " in " + path_ + ": its .note.stapsdt is empty");
  return NotFound("no USDT probe " + wanted + " in " + path_ + "; closest: " + Closest(wanted, std::move(names)));
}

}  // namespace tpe::elf
