#include "elf/elf_file.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

// Symbolization's path: the file offset the kernel mapped the running function at (from the
// target's /proc/self/maps) leads back through the PT_LOAD segments to the function, at its first
// byte and inside it; past its end is not it.
TEST_P(TargetTest, SymbolAtNamesTheFunctionOfAMappedOffset) {
  auto maps = RunTarget(GetParam());
  ASSERT_TRUE(maps.count("function")) << GetParam();
  auto f = ElfFile::Open(GetParam());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  auto address = AddressForFileOffset(f->segments(), maps["function"].file_offset);
  ASSERT_TRUE(address.ok()) << address.status().ToString();
  const Symbol* s = f->SymbolAt(*address);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->name, "tpe_elf_target_function");
  ASSERT_GT(s->size, 4u);
  const Symbol* inside = f->SymbolAt(*address + s->size - 1);
  ASSERT_NE(inside, nullptr);
  EXPECT_EQ(inside->name, "tpe_elf_target_function");
  const Symbol* after = f->SymbolAt(*address + s->size);
  EXPECT_TRUE(after == nullptr || after->name != "tpe_elf_target_function");
  EXPECT_EQ(f->SymbolAt(0), nullptr);
  EXPECT_FALSE(AddressForFileOffset(f->segments(), uint64_t{1} << 40).ok());
}

// The build id is the one binutils reads (readelf -n: "Build ID: <hex>").
TEST_P(TargetTest, BuildIdIsTheNotes) {
  auto f = ElfFile::Open(GetParam());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  FILE* p = popen(("readelf -n " + GetParam()).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string want;
  char line[512];
  while (std::fgets(line, sizeof(line), p) != nullptr) {
    std::string l = line;
    auto at = l.find("Build ID: ");
    if (at != std::string::npos) want = l.substr(at + 10, l.find_last_not_of("\n ") - at - 9);
  }
  pclose(p);
  ASSERT_FALSE(want.empty()) << "readelf -n found no build id in " << GetParam();
  EXPECT_EQ(f->build_id(), want);
}

// Aliases at one address (a function exported under two versions): the default version names it.
TEST(ElfFileTest, SymbolAtPrefersTheDefaultVersion) {
  auto f = ElfFile::Open(TPE_ELF_TARGET_VERSIONED);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (const Symbol& s : f->Symbols()) {
    const Symbol* at = f->SymbolAt(s.address);
    ASSERT_NE(at, nullptr) << s.QualifiedName();
    EXPECT_EQ(at->address, s.address) << s.QualifiedName();
    if (!s.default_version) {
      EXPECT_TRUE(at->default_version) << s.QualifiedName();
    }
  }
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

// Where this process has `addr` mapped: the file offset /proc/self/maps gives for it (the
// kernel's view, independent of ElfFile), and the mapped file's path in `path`. ~0 when unmapped.
uint64_t MappedFileOffset(const void* addr, std::string* path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto a = reinterpret_cast<uintptr_t>(addr);
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, off, dev, inode, file;
    in >> range >> perms >> off >> dev >> inode >> file;
    const uintptr_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (a < start || a >= end || file.empty() || file[0] != '/') continue;
    *path = file;
    return a - start + std::stoull(off, nullptr, 16);
  }
  return ~uint64_t{0};
}

// The file offset of `name`'s version `version` in the library `handle` maps, through dlvsym(3)
// and /proc/self/maps (~0 when the library has no such version).
uint64_t DlvsymOffset(void* handle, const char* name, const char* version, std::string* path = nullptr) {
  void* addr = dlvsym(handle, name, version);
  if (addr == nullptr) return ~uint64_t{0};
  std::string mapped;
  uint64_t off = MappedFileOffset(addr, &mapped);
  if (path != nullptr) *path = mapped;
  return off;
}

uint64_t OffsetOf(const ElfFile& f, const std::string& name) {
  auto off = f.SymbolFileOffset(name);
  EXPECT_TRUE(off.ok()) << name << ": " << off.status().ToString();
  return off.ok() ? *off : 0;
}

class VersionedTest : public ::testing::TestWithParam<std::string> {};

// GNU symbol versions: a plain name is the default version; NAME@VERSION is that version;
// NAME@@VERSION must be the default; aliases at one address are one function. The offsets are
// checked against where the dynamic linker put each version (dlvsym). Both with .symtab (names
// carry "@VERSION") and stripped (.dynsym and .gnu.version only, like Debian's libc.so.6).
TEST_P(VersionedTest, DefaultVersionAndExactVersions) {
  void* lib = dlopen(TPE_ELF_TARGET_VERSIONED, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  const uint64_t function_v1 = DlvsymOffset(lib, "tpe_versioned_function", "TPE_ELF_1");
  const uint64_t function_v2 = DlvsymOffset(lib, "tpe_versioned_function", "TPE_ELF_2");
  const uint64_t alias_v1 = DlvsymOffset(lib, "tpe_versioned_alias", "TPE_ELF_1");
  const uint64_t alias_v2 = DlvsymOffset(lib, "tpe_versioned_alias", "TPE_ELF_2");
  const uint64_t compat_v1 = DlvsymOffset(lib, "tpe_versioned_compat", "TPE_ELF_1");
  const uint64_t compat_v2 = DlvsymOffset(lib, "tpe_versioned_compat", "TPE_ELF_2");
  dlclose(lib);
  ASSERT_NE(function_v1, function_v2);
  ASSERT_EQ(alias_v1, alias_v2);
  ASSERT_NE(compat_v1, compat_v2);

  auto f = ElfFile::Open(GetParam());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_function"), function_v2);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_function@@TPE_ELF_2"), function_v2);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_function@TPE_ELF_2"), function_v2);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_function@TPE_ELF_1"), function_v1);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_alias"), alias_v2);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_alias@TPE_ELF_1"), alias_v1);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_compat@TPE_ELF_1"), compat_v1);
  EXPECT_EQ(OffsetOf(*f, "tpe_versioned_compat@TPE_ELF_2"), compat_v2);
  auto found = f->FindFunction("tpe_versioned_function");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->QualifiedName(), "tpe_versioned_function@@TPE_ELF_2");

  // No default among two addresses: still ambiguous, with the candidates and their versions.
  auto compat = f->SymbolFileOffset("tpe_versioned_compat");
  ASSERT_FALSE(compat.ok());
  EXPECT_EQ(compat.status().code(), StatusCode::kInvalidArgument);
  char want[512];
  std::snprintf(want, sizeof(want),
                "%s: 2 functions named tpe_versioned_compat at different addresses: tpe_versioned_compat@TPE_ELF_1 "
                "at 0x%llx, tpe_versioned_compat@TPE_ELF_2 at 0x%llx; name one with its version: NAME@VERSION, "
                "or NAME@@VERSION for the default",
                GetParam().c_str(),
                static_cast<unsigned long long>(f->FindFunction("tpe_versioned_compat@TPE_ELF_1")->address),
                static_cast<unsigned long long>(f->FindFunction("tpe_versioned_compat@TPE_ELF_2")->address));
  EXPECT_EQ(compat.status().message(), want);
  // @@ is the default version only.
  auto not_default = f->SymbolFileOffset("tpe_versioned_function@@TPE_ELF_1");
  ASSERT_FALSE(not_default.ok());
  EXPECT_EQ(not_default.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_default.status().message().find("TPE_ELF_1 is not the default version of tpe_versioned_function"),
            std::string::npos)
      << not_default.status().ToString();
  auto no_version = f->SymbolFileOffset("tpe_versioned_function@TPE_ELF_3");
  ASSERT_FALSE(no_version.ok());
  EXPECT_EQ(no_version.status().code(), StatusCode::kNotFound);
  EXPECT_NE(
      no_version.status().message().find("has no version TPE_ELF_3; it has: tpe_versioned_function@TPE_ELF_1 at "),
      std::string::npos)
      << no_version.status().ToString();
  for (const char* bad : {"tpe_versioned_function@", "@TPE_ELF_1", "tpe_versioned_function@@@TPE_ELF_2"}) {
    EXPECT_EQ(f->SymbolFileOffset(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }

  // Listed once per (name, address, version), with the versions; a glob may name one.
  std::vector<std::string> listed;
  for (const Symbol& s : f->Symbols("tpe_versioned_*")) {
    if (s.name == "tpe_versioned_function" || s.name == "tpe_versioned_alias" || s.name == "tpe_versioned_compat") {
      listed.push_back(s.QualifiedName());
    }
  }
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed,
            (std::vector<std::string>{"tpe_versioned_alias@@TPE_ELF_2", "tpe_versioned_alias@TPE_ELF_1",
                                      "tpe_versioned_compat@TPE_ELF_1", "tpe_versioned_compat@TPE_ELF_2",
                                      "tpe_versioned_function@@TPE_ELF_2", "tpe_versioned_function@TPE_ELF_1"}));
  auto one = f->Symbols("tpe_versioned_function@TPE_ELF_1");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].file_offset, function_v1);
  EXPECT_FALSE(one[0].default_version);
}

INSTANTIATE_TEST_SUITE_P(SymtabAndStripped, VersionedTest,
                         ::testing::Values(TPE_ELF_TARGET_VERSIONED, TPE_ELF_TARGET_VERSIONED_STRIPPED));

// The host's libc.so.6 (Debian 12: glibc 2.36, stripped): pthread_cond_wait has GLIBC_2.3.2
// (default) and GLIBC_2.2.5 at two addresses; timer_create GLIBC_2.34 (default) and GLIBC_2.3.3 at
// one address and GLIBC_2.2.5 at another. Every function name .dynsym exports resolves.
TEST(ElfFileTest, SystemLibcVersionedFunctions) {
  std::string libc;
  const uint64_t wait_new = DlvsymOffset(RTLD_DEFAULT, "pthread_cond_wait", "GLIBC_2.3.2", &libc);
  const uint64_t wait_old = DlvsymOffset(RTLD_DEFAULT, "pthread_cond_wait", "GLIBC_2.2.5");
  if (wait_new == ~uint64_t{0} || wait_old == ~uint64_t{0}) {
    GTEST_SKIP() << "this libc has no pthread_cond_wait@GLIBC_2.3.2 and @GLIBC_2.2.5";
  }
  auto f = ElfFile::Open(libc);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(OffsetOf(*f, "pthread_cond_wait"), wait_new);
  EXPECT_EQ(OffsetOf(*f, "pthread_cond_wait@@GLIBC_2.3.2"), wait_new);
  EXPECT_EQ(OffsetOf(*f, "pthread_cond_wait@GLIBC_2.2.5"), wait_old);
  const uint64_t timer_new = DlvsymOffset(RTLD_DEFAULT, "timer_create", "GLIBC_2.34");
  if (timer_new != ~uint64_t{0}) {
    EXPECT_EQ(DlvsymOffset(RTLD_DEFAULT, "timer_create", "GLIBC_2.3.3"), timer_new);
    EXPECT_EQ(OffsetOf(*f, "timer_create"), timer_new);
    EXPECT_EQ(OffsetOf(*f, "timer_create@GLIBC_2.3.3"), timer_new);
    EXPECT_EQ(OffsetOf(*f, "timer_create@GLIBC_2.2.5"), DlvsymOffset(RTLD_DEFAULT, "timer_create", "GLIBC_2.2.5"));
  }
  std::set<std::string> names;
  size_t versioned = 0;
  for (const Symbol& s : f->Symbols()) {
    names.insert(s.name);
    versioned += !s.version.empty();
  }
  EXPECT_GT(versioned, 1000u);
  std::vector<std::string> refused;
  for (const std::string& name : names) {
    auto off = f->SymbolFileOffset(name);
    if (!off.ok()) refused.push_back(off.status().message());
  }
  EXPECT_TRUE(refused.empty()) << refused.size() << " refused, e.g. " << refused.front();
}

// A file truncated after libelf opened it (a package upgrade rewriting a binary the daemon reads)
// is an error naming the file, never SIGBUS: ElfFile reads with pread, not through a mapping.
TEST(ElfFileTest, TruncatedWhileReadIsAnErrorNotASignal) {
  const std::string elf = ReadAll(TPE_ELF_TARGET_VERSIONED);
  const std::string pie = ReadAll(TPE_ELF_TARGET_PIE);
  ASSERT_GT(pie.size(), 8192u);
  for (const std::string* bytes : {&elf, &pie}) {
    for (size_t keep : {size_t{0}, size_t{64}, size_t{4096}, bytes->size() / 2, bytes->size() - 64}) {
      const std::string path = WriteTemp("cut_" + std::to_string(keep), *bytes);
      auto f = ElfFile::OpenForTest(path, [&] { ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(keep)), 0); });
      ASSERT_FALSE(f.ok()) << path << " cut to " << keep;
      EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
      EXPECT_NE(f.status().message().find(path + ": the file changed while it was read"), std::string::npos)
          << f.status().ToString();
      std::filesystem::remove(path);
    }
  }
  // Rewritten in place with the same size (mtime changes): an error too.
  const std::string path = WriteTemp("rewritten", pie);
  auto f = ElfFile::OpenForTest(path, [&] {
    std::ofstream(path, std::ios::binary | std::ios::in) << std::string(pie.size(), '\0');
    struct timespec later[2] = {{0, UTIME_OMIT}, {1, 0}};  // a distinct mtime even within one tick
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), later, 0), 0);
  });
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kUnavailable) << f.status().ToString();
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace tpe::elf
