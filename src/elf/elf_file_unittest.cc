#include "elf/elf_file.h"

#include <elf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace tpe::elf {
namespace {

// What testdata/elf_target prints for one key: the file offset /proc/self/maps gives for an
// address, the first bytes there (hex) and the mapped file.
struct Mapped {
  uint64_t file_offset = 0;
  std::string bytes_hex;
  std::string path;
};

std::map<std::string, Mapped> RunTarget(const std::string& path) {
  std::map<std::string, Mapped> out;
  FILE* p = popen(path.c_str(), "r");
  if (p == nullptr) return out;
  char line[8192];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::istringstream in(line);
    std::string key, off, bytes, mapped;
    in >> key >> off;
    std::string rest;
    while (in >> rest) (rest[0] == '/' ? mapped : bytes) = rest;
    out[key] = Mapped{std::stoull(off, nullptr, 16), bytes, mapped};
  }
  EXPECT_EQ(pclose(p), 0) << path;
  return out;
}

std::string ReadBytes(const std::string& path, uint64_t offset, size_t n) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::string s(n, '\0');
  f.read(s.data(), static_cast<std::streamsize>(n));
  return f ? s : "";
}

std::string Hex(const std::string& bytes) {
  std::string out;
  char b[3];
  for (unsigned char c : bytes) std::snprintf(b, sizeof(b), "%02x", c), out += b;
  return out;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A file under the test's temporary directory holding `bytes`.
std::string WriteTemp(const std::string& name, const std::string& bytes) {
  std::string path = std::filesystem::temp_directory_path() / ("elf_unittest_" + std::to_string(getpid()) + "_" + name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

const Symbol* Find(const std::vector<Symbol>& syms, const std::string& name) {
  for (const Symbol& s : syms) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The offsets of a probe site agree with the function holding it, and the file has the probe's
// `nop` (0x90, sys/sdt.h _SDT_NOP) at the probe's file offset.
void ExpectSiteInFunction(const ElfFile& f, const UsdtProbe& p, const std::string& function) {
  auto syms = f.Symbols(function);
  ASSERT_EQ(syms.size(), 1u) << function;
  const Symbol& s = syms[0];
  EXPECT_GE(p.address, s.address) << p.FullName();
  EXPECT_LT(p.address, s.address + s.size) << p.FullName();
  EXPECT_EQ(p.file_offset - s.file_offset, p.address - s.address) << p.FullName();
  EXPECT_EQ(ReadBytes(f.path(), p.file_offset, 1), "\x90") << p.FullName();
}

class TargetTest : public ::testing::TestWithParam<std::string> {};

// The function and semaphore offsets equal what the kernel mapped at those addresses in the
// running program, and the file bytes there are the function's code.
TEST_P(TargetTest, OffsetsMatchTheRunningProgram) {
  auto maps = RunTarget(GetParam());
  ASSERT_TRUE(maps.count("function") && maps.count("semaphore")) << GetParam();
  auto f = ElfFile::Open(GetParam());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->is_dynamic(), GetParam() == TPE_ELF_TARGET_PIE);

  auto off = f->SymbolFileOffset("tpe_elf_target_function");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(*off, maps["function"].file_offset);
  EXPECT_EQ(Hex(ReadBytes(GetParam(), *off, 16)), maps["function"].bytes_hex);
  auto plus4 = f->SymbolFileOffset("tpe_elf_target_function", 4);
  ASSERT_TRUE(plus4.ok()) << plus4.status().ToString();
  EXPECT_EQ(*plus4, *off + 4);

  auto guarded = f->FindUsdt("tpe_elf_test", "guarded");
  ASSERT_TRUE(guarded.ok()) << guarded.status().ToString();
  ASSERT_EQ(guarded->size(), 1u);
  EXPECT_EQ((*guarded)[0].semaphore_file_offset, maps["semaphore"].file_offset);
  EXPECT_NE((*guarded)[0].semaphore_address, (*guarded)[0].semaphore_file_offset);
  ExpectSiteInFunction(*f, (*guarded)[0], "tpe_elf_guarded_function");
  ASSERT_EQ((*guarded)[0].args.size(), 1u);
  EXPECT_EQ((*guarded)[0].args[0].size, 8);
  EXPECT_TRUE((*guarded)[0].args[0].is_signed);
}

// Argument sizes and signs follow the C types (int, long, const char*; unsigned char, short, 42);
// where each lives depends on the compiler, except the literal.
TEST_P(TargetTest, UsdtProbesAndArguments) {
  auto f = ElfFile::Open(GetParam());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->UsdtProbes().size(), 3u);
  auto three = f->FindUsdt("tpe_elf_test", "three_args");
  ASSERT_TRUE(three.ok()) << three.status().ToString();
  ASSERT_EQ(three->size(), 1u);
  const UsdtProbe& p = (*three)[0];
  EXPECT_EQ(p.semaphore_address, 0u);
  EXPECT_EQ(p.semaphore_file_offset, 0u);
  ExpectSiteInFunction(*f, p, "tpe_elf_target_function");
  ASSERT_TRUE(p.args_status.ok()) << p.args_status.ToString();
  ASSERT_EQ(p.args.size(), 3u) << p.args_spec;
  const std::pair<int, bool> want[] = {{4, true}, {8, true}, {8, false}};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.args[i].size, want[i].first) << p.args[i].spec;
    EXPECT_EQ(p.args[i].is_signed, want[i].second) << p.args[i].spec;
    EXPECT_NE(p.args[i].kind, UsdtArgKind::kConstant) << p.args[i].spec;
    EXPECT_FALSE(p.args[i].reg.empty()) << p.args[i].spec;
  }

  auto sizes = f->FindUsdt("tpe_elf_test", "sizes");
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  const UsdtProbe& s = (*sizes)[0];
  ExpectSiteInFunction(*f, s, "tpe_elf_target_function");
  ASSERT_EQ(s.args.size(), 3u) << s.args_spec;
  EXPECT_EQ(s.args[0].size, 1);
  EXPECT_FALSE(s.args[0].is_signed);
  EXPECT_EQ(s.args[1].size, 2);
  EXPECT_TRUE(s.args[1].is_signed);
  EXPECT_EQ(s.args[2].size, 4);
  EXPECT_TRUE(s.args[2].is_signed);
  EXPECT_EQ(s.args[2].kind, UsdtArgKind::kConstant);
  EXPECT_EQ(s.args[2].value, 42);
}

INSTANTIATE_TEST_SUITE_P(PieAndNonPie, TargetTest, ::testing::Values(TPE_ELF_TARGET_PIE, TPE_ELF_TARGET_NOPIE));

TEST(ElfFileTest, SharedLibrary) {
  auto maps = RunTarget(TPE_ELF_TARGET_PIE);
  ASSERT_TRUE(maps.count("lib_function"));
  EXPECT_EQ(std::filesystem::canonical(maps["lib_function"].path), std::filesystem::canonical(TPE_ELF_TARGET_LIB));
  auto f = ElfFile::Open(TPE_ELF_TARGET_LIB);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->is_dynamic());
  auto off = f->SymbolFileOffset("tpe_elf_lib_function");
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_EQ(*off, maps["lib_function"].file_offset);
  EXPECT_EQ(Hex(ReadBytes(TPE_ELF_TARGET_LIB, *off, 16)), maps["lib_function"].bytes_hex);
  auto probe = f->FindUsdt("tpe_elf_lib", "lib_probe");
  ASSERT_TRUE(probe.ok()) << probe.status().ToString();
  ExpectSiteInFunction(*f, (*probe)[0], "tpe_elf_lib_function");
  ASSERT_EQ((*probe)[0].args.size(), 1u);
  EXPECT_EQ((*probe)[0].args[0].size, 8);
}

TEST(ElfFileTest, SymbolsGlobSortedAndDeduplicated) {
  auto f = ElfFile::Open(TPE_ELF_TARGET_PIE);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto ours = f->Symbols("tpe_elf_*_function");
  ASSERT_EQ(ours.size(), 2u);
  EXPECT_EQ(ours[0].name, "tpe_elf_guarded_function");
  EXPECT_EQ(ours[1].name, "tpe_elf_target_function");
  EXPECT_GT(ours[1].size, 0u);
  EXPECT_FALSE(ours[1].is_ifunc);
  auto all = f->Symbols();
  EXPECT_NE(Find(all, "main"), nullptr);
  for (size_t i = 1; i < all.size(); ++i) {
    EXPECT_TRUE(all[i - 1].name < all[i].name ||
                (all[i - 1].name == all[i].name && all[i - 1].address < all[i].address))
        << all[i - 1].name << " " << all[i].name;
  }
  // The library's exported function is in both .symtab and .dynsym: listed once.
  auto lib = ElfFile::Open(TPE_ELF_TARGET_LIB);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_EQ(lib->Symbols("tpe_elf_lib_function").size(), 1u);
}

TEST(ElfFileTest, UnknownSymbolSuggestsTheClosest) {
  auto f = ElfFile::Open(TPE_ELF_TARGET_PIE);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto off = f->SymbolFileOffset("tpe_elf_target_functoin");
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), StatusCode::kNotFound);
  EXPECT_NE(off.status().message().find("closest: tpe_elf_target_function"), std::string::npos)
      << off.status().ToString();
  EXPECT_NE(off.status().message().find(TPE_ELF_TARGET_PIE), std::string::npos);

  auto past = f->SymbolFileOffset("tpe_elf_target_function", 1 << 20);
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), StatusCode::kInvalidArgument) << past.status().ToString();

  auto probe = f->FindUsdt("tpe_elf_test", "three_arg");
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), StatusCode::kNotFound);
  EXPECT_NE(probe.status().message().find("closest: tpe_elf_test:three_args"), std::string::npos)
      << probe.status().ToString();
}

TEST(ElfFileTest, StrippedCopy) {
  auto f = ElfFile::Open(TPE_ELF_TARGET_STRIPPED);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto off = f->SymbolFileOffset("tpe_elf_target_function");
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.status().code(), StatusCode::kNotFound);
  EXPECT_NE(off.status().message().find("stripped"), std::string::npos) << off.status().ToString();
  EXPECT_NE(off.status().message().find(TPE_ELF_TARGET_STRIPPED), std::string::npos);
  // The notes are not allocated and survive strip: same probes at the same offsets.
  auto full = ElfFile::Open(TPE_ELF_TARGET_PIE);
  ASSERT_TRUE(full.ok());
  ASSERT_EQ(f->UsdtProbes().size(), full->UsdtProbes().size());
  for (size_t i = 0; i < f->UsdtProbes().size(); ++i) {
    EXPECT_EQ(f->UsdtProbes()[i].file_offset, full->UsdtProbes()[i].file_offset);
    EXPECT_EQ(f->UsdtProbes()[i].semaphore_file_offset, full->UsdtProbes()[i].semaphore_file_offset);
  }
}

TEST(ElfFileTest, NoStapsdtNote) {
  auto f = ElfFile::Open("/proc/self/exe");  // this test binary: large, no sys/sdt.h probes
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(f->UsdtProbes().empty());
  auto probe = f->FindUsdt("python", "audit");
  ASSERT_FALSE(probe.ok());
  EXPECT_NE(probe.status().message().find("no .note.stapsdt"), std::string::npos) << probe.status().ToString();
  EXPECT_TRUE(f->SymbolFileOffset("main").ok());
}

TEST(ElfFileTest, MissingFileNamesThePath) {
  auto f = ElfFile::Open("/nonexistent/elf_unittest/binary");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/elf_unittest/binary"), std::string::npos);
}

TEST(ElfFileTest, RejectsGarbageAndTruncatedFiles) {
  std::string elf = ReadAll(TPE_ELF_TARGET_PIE);
  ASSERT_GT(elf.size(), 8192u);
  std::vector<std::pair<std::string, std::string>> files = {
      {"empty", ""},
      {"text", "#!/bin/sh\necho not an ELF file\n"},
      {"magic_only", std::string("\x7f"
                                 "ELF",
                                 4)},
  };
  for (size_t n : {16ul, 64ul, 100ul, 1000ul, 4096ul, elf.size() / 2, elf.size() - 64}) {
    files.emplace_back("truncated_" + std::to_string(n), elf.substr(0, n));
  }
  std::string arm = elf;
  arm[offsetof(Elf64_Ehdr, e_machine)] = static_cast<char>(EM_AARCH64);
  files.emplace_back("aarch64", arm);
  std::string rel = elf;
  rel[offsetof(Elf64_Ehdr, e_type)] = ET_REL;
  files.emplace_back("relocatable", rel);
  for (const auto& [name, bytes] : files) {
    std::string path = WriteTemp(name, bytes);
    auto f = ElfFile::Open(path);
    EXPECT_FALSE(f.ok()) << name;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument) << name << ": " << f.status().ToString();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
    std::filesystem::remove(path);
  }
}

// A .note.stapsdt whose first note claims more bytes than the section holds.
TEST(ElfFileTest, RejectsCorruptNote) {
  std::string elf = ReadAll(TPE_ELF_TARGET_PIE);
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof(eh));
  Elf64_Shdr strtab;
  std::memcpy(&strtab, elf.data() + eh.e_shoff + eh.e_shstrndx * sizeof(Elf64_Shdr), sizeof(strtab));
  uint64_t note_offset = 0;
  for (int i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh;
    std::memcpy(&sh, elf.data() + eh.e_shoff + i * sizeof(Elf64_Shdr), sizeof(sh));
    if (std::strcmp(elf.data() + strtab.sh_offset + sh.sh_name, ".note.stapsdt") == 0) note_offset = sh.sh_offset;
  }
  ASSERT_NE(note_offset, 0u);
  uint32_t huge = 0x10000;
  std::memcpy(elf.data() + note_offset + 4, &huge, sizeof(huge));  // n_descsz
  std::string path = WriteTemp("corrupt_note", elf);
  auto f = ElfFile::Open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().ToString();
  EXPECT_NE(f.status().message().find("truncated"), std::string::npos) << f.status().ToString();
  std::filesystem::remove(path);
}

// Debian's python3.11 carries USDT probes (python:audit with 2 arguments: event name, args tuple).
TEST(ElfFileTest, SystemPythonAuditProbe) {
  const std::string python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python)) GTEST_SKIP() << python << " is not installed";
  auto f = ElfFile::Open(python);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto audit = f->FindUsdt("python", "audit");
  if (!audit.ok()) GTEST_SKIP() << "no python:audit USDT probe: " << audit.status().ToString();
  for (const UsdtProbe& p : *audit) {
    ASSERT_TRUE(p.args_status.ok()) << p.args_status.ToString();
    EXPECT_EQ(p.args.size(), 2u) << p.args_spec;
    EXPECT_NE(p.semaphore_file_offset, 0u);
    EXPECT_EQ(ReadBytes(python, p.file_offset, 1), "\x90");
  }
}

}  // namespace
}  // namespace tpe::elf
