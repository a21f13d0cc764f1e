// ElfFile on files a user crafts to make the daemon allocate: sizes beyond the file, sparse files
// of 1 GiB whose tables claim all of it, extended section numbering claiming millions of
// sections. Each is read within ElfLimits (the peak resident memory of the reading process is
// measured) or refused with an error naming the culprit.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "elf/elf_file.h"

namespace tpe::elf {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// A value of /proc/self/status in bytes ("VmHWM:  1234 kB").
uint64_t StatusBytes(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size() + 1, key + ":") == 0) return std::stoull(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// How far the resident set's peak rose above its current size while `fn` ran: the peak is reset
// first (writing 5 to /proc/self/clear_refs, Linux 4.0; proc(5)).
uint64_t PeakRssGrowth(const std::function<void()>& fn) {
  std::ofstream("/proc/self/clear_refs") << "5";
  const uint64_t before = StatusBytes("VmRSS");
  fn();
  const uint64_t peak = StatusBytes("VmHWM");
  const uint64_t growth = peak > before ? peak - before : 0;
  ::testing::Test::RecordProperty("peak_rss_growth_bytes", std::to_string(growth));
  return growth;
}

// A minimal x86-64 ET_DYN file: one PT_LOAD (file offset 0 = vaddr 0, 4 KiB, r-x), sections
// [1] .shstrtab, [2] .symtab (linked to [3]), [3] .strtab at the offsets and with the sizes the
// test claims; the file is sparse (zeros) wherever nothing is written.
struct Crafted {
  uint64_t file_size = 0x4000;
  uint64_t symtab_offset = 0x1000, symtab_size = 3 * sizeof(Elf64_Sym);
  uint64_t strtab_offset = 0x800, strtab_size = 0x100;
  uint64_t shoff = 0x3000;
  // Extended numbering: e_shnum 0 and this count in section 0's sh_size (0: e_shnum = 4).
  uint64_t claimed_sections = 0;
  // Function symbols written after the null symbol: (name offset in .strtab, name, address).
  struct Function {
    uint64_t name_offset;
    std::string name;
    uint64_t address;
  };
  std::vector<Function> functions = {{1, "crafted_fn", 0x100}, {12, "other_fn", 0x200}};
};

void PwriteAll(int fd, const void* data, size_t size, uint64_t offset) {
  ASSERT_EQ(::pwrite(fd, data, size, static_cast<off_t>(offset)), static_cast<ssize_t>(size));
}

std::string WriteCrafted(const std::string& name, const Crafted& c) {
  const std::string path = ::testing::TempDir() + "tpe_elf_limits_" + name;
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(c.file_size)), 0);
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_phoff = sizeof(Elf64_Ehdr);
  eh.e_shoff = c.shoff;
  eh.e_ehsize = sizeof(Elf64_Ehdr);
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = 1;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = c.claimed_sections != 0 ? 0 : 4;
  eh.e_shstrndx = 1;
  PwriteAll(fd, &eh, sizeof(eh), 0);
  Elf64_Phdr ph{};
  ph.p_type = PT_LOAD;
  ph.p_flags = PF_R | PF_X;
  ph.p_filesz = ph.p_memsz = 0x1000;
  ph.p_align = 0x1000;
  PwriteAll(fd, &ph, sizeof(ph), eh.e_phoff);

  static constexpr char kNames[] = "\0.shstrtab\0.symtab\0.strtab";  // offsets 1, 11, 19
  const uint64_t shstrtab_offset = 0x200;
  PwriteAll(fd, kNames, sizeof(kNames), shstrtab_offset);
  std::vector<Elf64_Shdr> sh(4);
  sh[0].sh_size = c.claimed_sections;
  auto section = [](uint32_t name, uint32_t type, uint64_t offset, uint64_t size) {
    Elf64_Shdr h{};
    h.sh_name = name;
    h.sh_type = type;
    h.sh_offset = offset;
    h.sh_size = size;
    return h;
  };
  sh[1] = section(1, SHT_STRTAB, shstrtab_offset, sizeof(kNames));
  sh[2] = section(11, SHT_SYMTAB, c.symtab_offset, c.symtab_size);
  sh[2].sh_link = 3;
  sh[2].sh_info = 1;
  sh[2].sh_entsize = sizeof(Elf64_Sym);
  sh[3] = section(19, SHT_STRTAB, c.strtab_offset, c.strtab_size);
  PwriteAll(fd, sh.data(), sh.size() * sizeof(Elf64_Shdr), c.shoff);
  for (size_t i = 0; i < c.functions.size(); ++i) {
    const Crafted::Function& f = c.functions[i];
    Elf64_Sym sym{};
    sym.st_name = static_cast<uint32_t>(f.name_offset);
    sym.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    sym.st_shndx = 1;
    sym.st_value = f.address;
    sym.st_size = 0x10;
    PwriteAll(fd, &sym, sizeof(sym), c.symtab_offset + (i + 1) * sizeof(Elf64_Sym));
    PwriteAll(fd, f.name.c_str(), f.name.size() + 1, c.strtab_offset + f.name_offset);
  }
  ::close(fd);
  return path;
}

// The builder makes a file ElfFile reads: the tests below fail for the sizes they claim, not
// for a malformed header.
TEST(ElfLimitsTest, TheCraftedFileIsValid) {
  const std::string path = WriteCrafted("valid", Crafted{});
  auto f = ElfFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_NE(f->SymbolAt(0x105), nullptr);
  EXPECT_EQ(f->SymbolAt(0x105)->name, "crafted_fn");
  EXPECT_EQ(f->SymbolAt(0x200)->name, "other_fn");
  EXPECT_EQ(f->truncated_symbols(), 0u);
  EXPECT_GT(f->memory_bytes(), 2 * sizeof(Symbol));
  ::unlink(path.c_str());
}

// A .symtab whose sh_size runs past the end of the file: an error naming the section, nothing
// allocated for it.
TEST(ElfLimitsTest, ASectionPastTheFileIsAnError) {
  Crafted c;
  c.symtab_size = uint64_t{1} << 40;
  const std::string path = WriteCrafted("past_end", c);
  auto f = ElfFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(), path +
                                      ": truncated: section .symtab (1099511627776 bytes at offset 4096) runs "
                                      "past the file's 16384 bytes");
  ::unlink(path.c_str());
}

// A sparse file of 1 GiB whose .symtab claims nearly all of it (44.7 million entries of zeros):
// the first 2^20 entries are read (24 MiB), the rest counted as truncated; reading the whole
// table took 1 GiB.
TEST(ElfLimitsTest, ASparseGigabyteSymtabIsReadOnlyUpToTheLimit) {
  Crafted c;
  c.file_size = kGiB;
  c.symtab_offset = 0x1000;
  c.symtab_size = (kGiB - 0x2000) / sizeof(Elf64_Sym) * sizeof(Elf64_Sym);
  c.shoff = kGiB - 0x1000;
  const std::string path = WriteCrafted("sparse_symtab", c);
  StatusOr<ElfFile> f = InvalidArgument("not run");
  const uint64_t growth = PeakRssGrowth([&] { f = ElfFile::Open(path); });
  ::unlink(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_LT(growth, 64 * kMiB) << "peak resident memory rose by " << growth / kMiB << " MiB";
  ASSERT_NE(f->SymbolAt(0x105), nullptr);
  EXPECT_EQ(f->SymbolAt(0x105)->name, "crafted_fn");
  EXPECT_EQ(f->truncated_symbols(), c.symtab_size / sizeof(Elf64_Sym) - ElfLimits().max_symbols);
  EXPECT_LT(f->memory_bytes(), kMiB);
}

// A sparse file of 1 GiB whose .strtab claims nearly all of it, with one name 512 MiB in: the
// first 64 MiB of the table are read; the far name is counted as truncated, the near one kept.
// elf_strptr read the whole table (1 GiB).
TEST(ElfLimitsTest, ASparseGigabyteStrtabIsReadOnlyUpToTheLimit) {
  Crafted c;
  c.file_size = kGiB;
  c.strtab_offset = 0x10000;
  c.strtab_size = kGiB - 0x20000;
  c.shoff = kGiB - 0x1000;
  c.functions = {{1, "near_fn", 0x100}, {512 * kMiB, "far_fn", 0x200}};
  const std::string path = WriteCrafted("sparse_strtab", c);
  StatusOr<ElfFile> f = InvalidArgument("not run");
  const uint64_t growth = PeakRssGrowth([&] { f = ElfFile::Open(path); });
  ::unlink(path.c_str());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_LT(growth, ElfLimits().max_string_table_bytes + 32 * kMiB)
      << "peak resident memory rose by " << growth / kMiB << " MiB";
  ASSERT_NE(f->SymbolAt(0x105), nullptr);
  EXPECT_EQ(f->SymbolAt(0x105)->name, "near_fn");
  EXPECT_EQ(f->SymbolAt(0x205), nullptr);
  EXPECT_EQ(f->truncated_symbols(), 1u);
}

// Extended section numbering (e_shnum 0, the count in section 0) claiming 2^22 sections, whose
// 256 MiB header table lies inside a sparse file: refused from the ELF header, before libelf
// allocates a section descriptor for each (it did, then read the 256 MiB table).
TEST(ElfLimitsTest, MillionsOfSectionsAreRefusedBeforeLibelfAllocates) {
  Crafted c;
  c.claimed_sections = uint64_t{1} << 22;
  c.shoff = 0x4000;
  c.file_size = c.shoff + c.claimed_sections * sizeof(Elf64_Shdr);
  const std::string path = WriteCrafted("many_sections", c);
  StatusOr<ElfFile> f = InvalidArgument("not run");
  const uint64_t growth = PeakRssGrowth([&] { f = ElfFile::Open(path); });
  ::unlink(path.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_LT(growth, 16 * kMiB) << "peak resident memory rose by " << growth / kMiB << " MiB";
  EXPECT_EQ(f.status().message(), path +
                                      ": the section header table has 4194304 sections, more than the 65536 read "
                                      "from one file (ElfLimits)");
}

// Extended numbering whose count makes the table run past the file: an error before libelf.
TEST(ElfLimitsTest, AnExtendedSectionCountPastTheFileIsAnError) {
  Crafted c;
  c.claimed_sections = 1000;
  const std::string path = WriteCrafted("sections_past_end", c);
  auto f = ElfFile::Open(path);
  ::unlink(path.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), path +
                                      ": truncated: the section header table (64000 bytes at offset 12288) runs "
                                      "past the file's 16384 bytes");
}

// Limits smaller than the file: exact counts of what was left out.
TEST(ElfLimitsTest, SymbolLimitsCountWhatTheyLeaveOut) {
  Crafted c;
  c.symtab_size = 11 * sizeof(Elf64_Sym);  // the null symbol, 2 functions, 8 empty entries
  c.functions = {{1, "crafted_fn", 0x100}, {12, "other_fn_with_a_long_name", 0x200}};
  const std::string path = WriteCrafted("limits", c);
  ElfLimits limits;
  limits.max_symbols = 2;  // the null symbol and crafted_fn
  auto f = ElfFile::Open(path, limits);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->truncated_symbols(), 9u);
  EXPECT_EQ(f->Symbols().size(), 1u);

  limits = ElfLimits();
  limits.max_name_length = 20;  // other_fn_with_a_long_name has 25 bytes
  f = ElfFile::Open(path, limits);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->truncated_symbols(), 1u);
  ASSERT_EQ(f->Symbols().size(), 1u);
  EXPECT_EQ(f->Symbols()[0].name, "crafted_fn");

  limits = ElfLimits();
  limits.max_name_bytes = 12;  // crafted_fn (10) fits, then nothing more
  f = ElfFile::Open(path, limits);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->truncated_symbols(), 1u);
  EXPECT_EQ(f->Symbols().size(), 1u);

  limits = ElfLimits();
  limits.max_string_table_bytes = 16;  // .strtab (256 bytes) is cut before other_fn_with_a_long_name ends
  f = ElfFile::Open(path, limits);
  ASSERT_FALSE(f.ok());  // and so is the section name table, in ".symtab" (11 to 18)
  EXPECT_EQ(f.status().message(), path +
                                      ": the name of section #2 is past the 16 bytes read of the section name "
                                      "table (ElfLimits)");
  limits.max_string_table_bytes = 27;  // all of the section name table; .strtab still cut
  f = ElfFile::Open(path, limits);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->truncated_symbols(), 1u);
  EXPECT_EQ(f->Symbols().size(), 1u);
  ::unlink(path.c_str());
}

// A note larger than max_section_bytes is an error naming it (the test binary's build id note
// has 36 bytes).
TEST(ElfLimitsTest, AnOversizedNoteIsAnError) {
  ElfLimits limits;
  limits.max_section_bytes = 16;
  auto f = ElfFile::Open(TPE_ELF_TARGET_PIE, limits);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message(), std::string(TPE_ELF_TARGET_PIE) +
                                      ": section .note.gnu.build-id has 36 bytes, more than the 16 read from one file "
                                      "(ElfLimits)");
}

// Opened as untrusted: a FIFO is refused without blocking, a file over max_file_bytes unread.
TEST(ElfLimitsTest, OpenRefusesNonRegularAndTooLargeFiles) {
  const std::string fifo = ::testing::TempDir() + "tpe_elf_limits_fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  FileRefusal why = FileRefusal::kNone;
  auto f = ElfFile::Open(fifo, ElfLimits(), &why);
  ::unlink(fifo.c_str());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kFifo) << f.status().ToString();

  const std::string path = WriteCrafted("too_large", Crafted{});
  ElfLimits limits;
  limits.max_file_bytes = 4096;
  f = ElfFile::Open(path, limits, &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kTooLarge) << f.status().ToString();
  ::unlink(path.c_str());
}

}  // namespace
}  // namespace tpe::elf
