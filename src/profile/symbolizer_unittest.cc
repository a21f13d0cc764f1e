#include "profile/symbolizer.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/file_util.h"

extern "C" __attribute__((noinline)) int tpe_symbolizer_test_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}

namespace tpe {
namespace {

uint64_t AddressOf(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }

// This process's own code, through the real /proc: the leaf frame at the function's first byte,
// and a return address one past a call inside it.
TEST(SymbolizerTest, NamesThisProcessFunctions) {
  Symbolizer sym("/proc", Kallsyms());
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const uint64_t f = AddressOf(&tpe_symbolizer_test_function);
  const std::vector<uint64_t> ips = {f, f + 1};
  sym.AppendUser(static_cast<uint32_t>(getpid()), ips, &b, &frames);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
  EXPECT_EQ(frames[0].address, f);
  EXPECT_EQ(frames[1].function, "tpe_symbolizer_test_function");  // named by ip - 1
  ASSERT_NE(frames[0].mapping_id, 0u);
  const auto& m = b.profile().mapping(static_cast<int>(frames[0].mapping_id - 1));
  EXPECT_NE(b.profile().string_table(m.filename()).find("profile_unittest"), std::string::npos);
  EXPECT_EQ(b.profile().string_table(m.build_id()).size(), 40u);  // a SHA-1 build id, as Debian links
  EXPECT_EQ(sym.stats().frames, 2u);
  EXPECT_EQ(sym.stats().unsymbolized, 0u);
}

// A shared ElfCache: the second render finds the file the first one read (the same object), and
// a full cache lets the least recently used file go.
TEST(SymbolizerTest, RendersShareTheFilesTheyRead) {
  ElfCache cache(/*max_files=*/1);
  const uint64_t f = AddressOf(&tpe_symbolizer_test_function);
  const std::vector<uint64_t> ips = {f};
  for (int render = 0; render < 2; ++render) {
    Symbolizer sym("/proc", std::make_shared<const Kallsyms>(), &cache);
    PprofBuilder b("samples", "count");
    std::vector<ProfileFrame> frames;
    sym.AppendUser(static_cast<uint32_t>(getpid()), ips, &b, &frames);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
    EXPECT_EQ(cache.size(), 1u);
  }
  auto other = elf::ElfFile::Open("/proc/self/exe");
  ASSERT_TRUE(other.ok());
  cache.Put("0:0:1", std::make_shared<const elf::ElfFile>(std::move(other).value()));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.Find("0:0:1"), nullptr);
}

// A process that is gone: no /proc for it (a proc root that does not exist), its mappings as
// LearntMaps recorded them; the file is found by its path in our root when its inode matches,
// and left unnamed (address and mapping kept) when it does not.
TEST(SymbolizerTest, AGoneProcessIsNamedThroughItsLearntMappings) {
  auto text = ReadFileToString("/proc/self/maps");
  ASSERT_TRUE(text.ok());
  auto maps = ParseProcMaps(*text);
  ASSERT_TRUE(maps.ok());
  const uint64_t f = AddressOf(&tpe_symbolizer_test_function);
  const ProcMapping* m = MappingAt(*maps, f);
  ASSERT_NE(m, nullptr);
  const std::vector<uint64_t> ips = {f};
  {
    Symbolizer sym("/nonexistent-proc", Kallsyms());
    sym.SetMappings(4242, {*m});
    PprofBuilder b("samples", "count");
    std::vector<ProfileFrame> frames;
    sym.AppendUser(4242, ips, &b, &frames);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
  }
  ProcMapping other = *m;
  other.inode += 1;  // the path now holds another file
  Symbolizer sym("/nonexistent-proc", Kallsyms());
  sym.SetMappings(4242, {other});
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  sym.AppendUser(4242, ips, &b, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].function, "");
  EXPECT_EQ(frames[0].address, f);
  EXPECT_EQ(sym.stats().unsymbolized, 1u);
  EXPECT_EQ(sym.stats().unknown_mapping, 0u);
}

TEST(SymbolizerTest, AnAddressInNoMappingIsUnknownAndCounted) {
  Symbolizer sym("/proc", Kallsyms());
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<uint64_t> ips = {0x10};
  sym.AppendUser(static_cast<uint32_t>(getpid()), ips, &b, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].address, 0x10u);
  EXPECT_EQ(b.profile().string_table(b.profile().mapping(0).filename()), "[unknown]");
  EXPECT_EQ(sym.stats().unknown_mapping, 1u);
}

// JIT code: an anonymous executable mapping named by /tmp/perf-PID.map.
TEST(SymbolizerTest, JitFramesFromThePerfMap) {
  void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(code, MAP_FAILED);
  const uint64_t at = reinterpret_cast<uint64_t>(code);
  const std::string map_path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  {
    std::ofstream out(map_path);
    char line[128];
    std::snprintf(line, sizeof(line), "%lx 100 LazyCompile:~jitted /srv/app.js:3\n", static_cast<unsigned long>(at));
    out << line;
  }
  Symbolizer sym("/proc", Kallsyms());
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<uint64_t> ips = {at + 0x10, at + 0x200};
  sym.AppendUser(static_cast<uint32_t>(getpid()), ips, &b, &frames);
  std::remove(map_path.c_str());
  munmap(code, 4096);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "LazyCompile:~jitted /srv/app.js:3");
  EXPECT_EQ(frames[1].function, "");  // past the entry's 0x100 bytes: address kept, counted
  EXPECT_EQ(sym.stats().unsymbolized, 1u);
}

TEST(SymbolizerTest, KernelFramesFromKallsymsWithModules) {
  auto k = Kallsyms::Parse(
      "ffffffff81000000 T _stext\nffffffff810a1c40 T __x64_sys_getppid\nffffffff810a1c80 T next\n"
      "ffffffffc0a01000 t xfs_file_read_iter\t[xfs]\nffffffffc0a02000 t xfs_end\t[xfs]\n");
  ASSERT_TRUE(k.ok());
  Symbolizer sym("/proc", std::move(k).value());
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<uint64_t> ips = {0xffffffff810a1c4b, 0xffffffffc0a01011, 0xffffffff810a1c80};
  sym.AppendKernel(ips, &b, &frames);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].function, "__x64_sys_getppid");
  EXPECT_EQ(frames[1].function, "xfs_file_read_iter [xfs]");
  EXPECT_EQ(frames[2].function, "__x64_sys_getppid");  // a return address at next's first byte
  EXPECT_EQ(b.profile().string_table(b.profile().mapping(0).filename()), "[kernel.kallsyms]");
}

// PERF_RECORD_MMAP2 after the process was first seen: the new mapping replaces what it overlaps.
TEST(SymbolizerTest, AddedMappingsReplaceOverlaps) {
  Symbolizer sym("/nonexistent", Kallsyms());
  ProcMapping anon, file;
  anon.start = 0x1000, anon.end = 0x3000, anon.executable = true;
  file.start = 0x2000, file.end = 0x4000, file.inode = 5, file.path = "/bin/x";
  sym.AddMapping(7, anon);
  sym.AddMapping(7, file);
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<uint64_t> ips = {0x1800};
  sym.AppendUser(7, ips, &b, &frames);
  EXPECT_EQ(sym.stats().unknown_mapping, 1u);  // the first mapping was replaced whole
  EXPECT_TRUE(sym.Knows(7));
  sym.ForgetProcess(7);
  EXPECT_FALSE(sym.Knows(7));
}

}  // namespace
}  // namespace tpe
