#include "elf/elf_file.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <memory>
#include <string_view>

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

// Checks that the program and section header tables lie inside the file: libelf reads a truncated
// file without complaint and then reports fewer headers than the ELF header promises.
// Counts are the ELF header's, or under extended numbering (e_phnum PN_XNUM, e_shnum 0) what
// libelf read from section 0.
Status CheckHeaderTables(Elf* e, const GElf_Ehdr& ehdr, uint64_t file_size, const std::string& path) {
  auto truncated = [&](const std::string& what, uint64_t offset, uint64_t size) {
    return InvalidArgument(path + ": truncated: the " + what + " (" + std::to_string(size) + " bytes at offset " +
                           std::to_string(offset) + ") runs past the file's " + std::to_string(file_size) + " bytes");
  };
  size_t phnum = ehdr.e_phnum, shnum = ehdr.e_shnum;
  if (phnum == PN_XNUM && elf_getphdrnum(e, &phnum) != 0) return Corrupt(path, "bad extended program header count");
  if (shnum == 0 && ehdr.e_shoff != 0 && elf_getshdrnum(e, &shnum) != 0) {
    return Corrupt(path, "bad extended section header count");
  }
  uint64_t ph_bytes = uint64_t{phnum} * ehdr.e_phentsize;
  if (!InFile(ehdr.e_phoff, ph_bytes, file_size)) return truncated("program header table", ehdr.e_phoff, ph_bytes);
  uint64_t sh_bytes = uint64_t{shnum} * ehdr.e_shentsize;
  if (!InFile(ehdr.e_shoff, sh_bytes, file_size)) return truncated("section header table", ehdr.e_shoff, sh_bytes);
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
      return InvalidArgument(path + ": truncated: PT_LOAD #" + std::to_string(i) + " (" + std::to_string(ph.p_filesz) +
                             " bytes at offset " + std::to_string(ph.p_offset) + ") runs past the file's " +
                             std::to_string(file_size) + " bytes");
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

// Appends the defined functions of symbol table `scn` (SHT_SYMTAB or SHT_DYNSYM) to `out`.
Status ReadSymbols(Elf* e, Elf_Scn* scn, const GElf_Shdr& sh, const std::string& section,
                   const std::vector<LoadSegment>& segments, const std::string& path, std::vector<Symbol>* out) {
  Elf_Data* data = elf_getdata(scn, nullptr);
  if (data == nullptr) return Corrupt(path, "cannot read " + section);
  if (sh.sh_entsize == 0) return InvalidArgument(path + ": " + section + " has sh_entsize 0");
  size_t count = sh.sh_size / sh.sh_entsize;
  for (size_t i = 0; i < count; ++i) {
    GElf_Sym sym;
    if (gelf_getsym(data, static_cast<int>(i), &sym) == nullptr) {
      return Corrupt(path, section + " symbol #" + std::to_string(i) + " is unreadable");
    }
    int type = GELF_ST_TYPE(sym.st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_shndx == SHN_UNDEF || sym.st_value == 0) continue;
    const char* name = elf_strptr(e, sh.sh_link, sym.st_name);
    if (name == nullptr) return Corrupt(path, section + " symbol #" + std::to_string(i) + " has a bad name offset");
    if (*name == '\0') continue;
    auto offset = FileOffsetForAddress(segments, sym.st_value);
    if (!offset.ok()) return offset.status().WithContext(path + ": " + section + " function " + name);
    out->push_back(Symbol{.name = name,
                          .address = sym.st_value,
                          .size = sym.st_size,
                          .file_offset = *offset,
                          .is_ifunc = type == STT_GNU_IFUNC});
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ElfFile> ElfFile::Open(const std::string& path) {
  static const bool kLibelfReady = elf_version(EV_CURRENT) != EV_NONE;
  if (!kLibelfReady) return Internal("libelf: elf_version(EV_CURRENT) failed");

  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "ELF file " + path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, "fstat " + path);
  if (!S_ISREG(st.st_mode)) return InvalidArgument(path + ": not a regular file");
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  ElfPtr e(elf_begin(fd.get(), ELF_C_READ_MMAP, nullptr));
  if (e == nullptr) return Corrupt(path, "not readable as ELF");
  if (elf_kind(e.get()) != ELF_K_ELF) return InvalidArgument(path + ": not an ELF file");
  GElf_Ehdr ehdr;
  if (gelf_getehdr(e.get(), &ehdr) == nullptr) return Corrupt(path, "unreadable ELF header");
  if (gelf_getclass(e.get()) != ELFCLASS64 || ehdr.e_machine != EM_X86_64) {
    return InvalidArgument(path + ": not an x86-64 ELF64 file (class " + std::to_string(gelf_getclass(e.get())) +
                           ", e_machine " + std::to_string(ehdr.e_machine) + ")");
  }
  if (ehdr.e_type != ET_EXEC && ehdr.e_type != ET_DYN) {
    return InvalidArgument(path + ": ELF type " + std::to_string(ehdr.e_type) +
                           " is not an executable or shared object (ET_EXEC, ET_DYN)");
  }

  TPE_RETURN_IF_ERROR(CheckHeaderTables(e.get(), ehdr, file_size, path));

  ElfFile file;
  file.path_ = path;
  file.is_dynamic_ = ehdr.e_type == ET_DYN;
  TPE_ASSIGN_OR_RETURN(file.segments_, ReadSegments(e.get(), file_size, path));

  size_t shstrndx = 0;
  if (elf_getshdrstrndx(e.get(), &shstrndx) != 0) return Corrupt(path, "no section name table");
  uint64_t stapsdt_base = 0;
  std::string_view notes;
  for (Elf_Scn* scn = elf_nextscn(e.get(), nullptr); scn != nullptr; scn = elf_nextscn(e.get(), scn)) {
    GElf_Shdr sh;
    if (gelf_getshdr(scn, &sh) == nullptr) return Corrupt(path, "unreadable section header");
    const char* name = elf_strptr(e.get(), shstrndx, sh.sh_name);
    if (name == nullptr) return Corrupt(path, "section #" + std::to_string(elf_ndxscn(scn)) + " has a bad name");
    std::string_view section = name;
    if (sh.sh_type != SHT_NOBITS && !InFile(sh.sh_offset, sh.sh_size, file_size)) {
      return InvalidArgument(path + ": truncated: section " + name + " (" + std::to_string(sh.sh_size) +
                             " bytes at offset " + std::to_string(sh.sh_offset) + ") runs past the file's " +
                             std::to_string(file_size) + " bytes");
    }
    if (sh.sh_type == SHT_SYMTAB || sh.sh_type == SHT_DYNSYM) {
      file.has_symtab_ |= sh.sh_type == SHT_SYMTAB;
      TPE_RETURN_IF_ERROR(ReadSymbols(e.get(), scn, sh, name, file.segments_, path, &file.symbols_));
    } else if (section == ".stapsdt.base") {
      stapsdt_base = sh.sh_addr;
    } else if (section == ".note.stapsdt" && sh.sh_type == SHT_NOTE) {
      Elf_Data* data = elf_rawdata(scn, nullptr);
      if (data == nullptr) return Corrupt(path, "cannot read .note.stapsdt");
      file.has_stapsdt_ = true;
      notes = std::string_view(static_cast<const char*>(data->d_buf), data->d_size);
    }
  }

  auto& syms = file.symbols_;
  std::sort(syms.begin(), syms.end(), [](const Symbol& a, const Symbol& b) {
    return a.name != b.name ? a.name < b.name : a.address < b.address;
  });
  syms.erase(std::unique(syms.begin(), syms.end(),
                         [](const Symbol& a, const Symbol& b) { return a.name == b.name && a.address == b.address; }),
             syms.end());

  auto parsed = ParseStapsdtNotes(notes);
  if (!parsed.ok()) return parsed.status().WithContext(path);
  for (const StapsdtNote& note : *parsed) {
    auto probe = ResolveUsdtProbe(note, stapsdt_base, file.segments_);
    if (!probe.ok()) return probe.status().WithContext(path);
    probe->args_status = probe->args_status.WithContext(path);
    file.probes_.push_back(std::move(probe).value());
  }
  return file;
}

StatusOr<uint64_t> ElfFile::SymbolFileOffset(const std::string& name, uint64_t offset_in_symbol) const {
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
  if (last - first > 1) {
    std::string where;
    for (auto it = first; it != last; ++it) where += (it == first ? "" : ", ") + Hex(it->address);
    return InvalidArgument(path_ + ": " + std::to_string(last - first) + " functions named " + name + " at " + where);
  }
  if (first->size != 0 && offset_in_symbol >= first->size) {
    return InvalidArgument(path_ + ": offset " + Hex(offset_in_symbol) + " is past the end of " + name + " (" +
                           std::to_string(first->size) + " bytes)");
  }
  return first->file_offset + offset_in_symbol;
}

std::vector<Symbol> ElfFile::Symbols(const std::string& glob) const {
  std::vector<Symbol> out;
  for (const Symbol& s : symbols_) {
    if (fnmatch(glob.c_str(), s.name.c_str(), 0) == 0) out.push_back(s);
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
