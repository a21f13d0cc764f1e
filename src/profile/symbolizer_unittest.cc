#include "profile/symbolizer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "common/file_util.h"
#include "process/process_maps.h"
#include "profile/renderer.h"

extern "C" __attribute__((noinline)) int tpe_symbolizer_test_function(int x) {
  asm volatile("" ::: "memory");
  return x * 3 + 1;
}

namespace tpe {
namespace {

uint64_t AddressOf(int (*f)(int)) { return reinterpret_cast<uint64_t>(f); }

// This process's own code, normalized through the real /proc (as the reader does at sample
// time): the leaf frame at the function's first byte, and a return address one past a call in it.
TEST(SymbolizerTest, NamesThisProcessFunctionsAtFileOffsets) {
  MappedFiles files;
  ProcessImages images(&files);
  const uint64_t f = AddressOf(&tpe_symbolizer_test_function);
  std::vector<UserFrame> user;
  images.Normalize(static_cast<uint32_t>(getpid()), std::vector<uint64_t>{f, f + 1}, 1, &user);
  ASSERT_EQ(user.size(), 2u);
  ASSERT_NE(user[0].file, kNoFile);
  Symbolizer sym(&files, std::make_shared<const Kallsyms>());
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  AppendUser(&sym, user, &b, &frames);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
  EXPECT_EQ(frames[1].function, "tpe_symbolizer_test_function");  // named by offset - 1
  EXPECT_EQ(frames[0].address, user[0].offset) << "a file offset, not the address";
  EXPECT_LT(frames[0].address, f);
  ASSERT_NE(frames[0].mapping_id, 0u);
  const auto& m = b.profile().mapping(static_cast<int>(frames[0].mapping_id - 1));
  EXPECT_NE(b.profile().string_table(m.filename()).find("profile_unittest"), std::string::npos);
  EXPECT_EQ(b.profile().string_table(m.build_id()).size(), 40u);  // a SHA-1 build id, as Debian links
  EXPECT_EQ(m.memory_start(), 0u);
  EXPECT_EQ(m.file_offset(), 0u);
  EXPECT_TRUE(m.has_functions());
  EXPECT_EQ(sym.stats().frames, 2u);
  EXPECT_EQ(sym.stats().unsymbolized, 0u);
}

// A shared ElfFileCache: the second render finds the file the first one read.
TEST(SymbolizerTest, RendersShareTheFilesTheyRead) {
  MappedFiles files;
  ProcessImages images(&files);
  std::vector<UserFrame> user;
  images.Normalize(static_cast<uint32_t>(getpid()), std::vector<uint64_t>{AddressOf(&tpe_symbolizer_test_function)}, 1,
                   &user);
  ElfFileCache cache({.max_bytes = uint64_t{1} << 30, .max_files = 1});
  for (int render = 0; render < 2; ++render) {
    Symbolizer sym(&files, std::make_shared<const Kallsyms>(), {.elf = &cache});
    PprofBuilder b("samples", "count");
    std::vector<ProfileFrame> frames;
    AppendUser(&sym, user, &b, &frames);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
    EXPECT_EQ(cache.size(), 1u);
  }
  auto other = elf::ElfFile::Open("/proc/self/exe");
  ASSERT_TRUE(other.ok());
  cache.Put("999", std::make_shared<const elf::ElfFile>(std::move(other).value()));
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_NE(cache.Find("999"), nullptr);
}

// A copy of this test binary in /tmp (`path`), interned in `files` as a file known by its path
// only (as after its process is gone: a pid that does not exist), and the file offset of
// tpe_symbolizer_test_function in it.
struct SelfCopy {
  std::string path;
  FileId id = kNoFile;
  uint64_t function_offset = 0;
};
void CopySelf(MappedFiles* files, SelfCopy* out) {
  char tmpl[] = "/tmp/tpe_sym_XXXXXX";
  const int fd = ::mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  ::close(fd);
  out->path = tmpl;
  {
    auto self = ReadFileToString("/proc/self/exe");
    ASSERT_TRUE(self.ok());
    std::ofstream(out->path, std::ios::binary) << *self;
  }
  struct stat st {};
  ASSERT_EQ(::stat(out->path.c_str(), &st), 0);
  auto maps = ParseProcMaps(*ReadFileToString("/proc/self/maps"));
  ASSERT_TRUE(maps.ok());
  const ProcMapping* pm = MappingAt(*maps, AddressOf(&tpe_symbolizer_test_function));
  ASSERT_NE(pm, nullptr);
  MappedFile mf;
  mf.path = out->path;
  mf.inode = st.st_ino;
  mf.stat_known = true;
  mf.size = static_cast<uint64_t>(st.st_size);
  mf.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  mf.pid = 0x7ffffff0;  // no such process: by path only
  out->id = files->Intern(mf);
  out->function_offset = pm->FileOffset(AddressOf(&tpe_symbolizer_test_function));
}

// A file named by its path after its process is gone (a proc root that does not exist): named
// while it is the file that was sampled (inode, size, mtime), left as file and offset once it
// was overwritten in place (same inode, other content) — never named from the new content.
TEST(SymbolizerTest, AFileOverwrittenInPlaceIsNotNamed) {
  MappedFiles files;
  SelfCopy self;
  ASSERT_NO_FATAL_FAILURE(CopySelf(&files, &self));
  const std::string& copy = self.path;
  const FileId id = self.id;
  const std::vector<UserFrame> user = {{id, self.function_offset}};
  {
    Symbolizer sym(&files, nullptr, {}, "/nonexistent-proc");
    PprofBuilder b("samples", "count");
    std::vector<ProfileFrame> frames;
    AppendUser(&sym, user, &b, &frames);
    ASSERT_EQ(frames.size(), 1u);
    EXPECT_EQ(frames[0].function, "tpe_symbolizer_test_function");
    EXPECT_EQ(sym.stats().file_changed, 0u);
  }
  // Overwritten in place: same inode, another mtime (and content).
  {
    std::ofstream out(copy, std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(64);
    out << "changed";
  }
  timespec times[2] = {{0, UTIME_NOW}, {12345, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, copy.c_str(), times, 0), 0);
  Symbolizer sym(&files, nullptr, {}, "/nonexistent-proc");
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  AppendUser(&sym, user, &b, &frames);
  ::unlink(copy.c_str());
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].function, "");
  EXPECT_EQ(frames[0].address, user[0].offset);
  EXPECT_EQ(sym.stats().file_changed, 1u);
  EXPECT_EQ(sym.stats().unsymbolized, 1u);
  EXPECT_EQ(sym.stats().unknown_mapping, 0u);
}

TEST(SymbolizerTest, AFrameInNoMappingIsUnknownAndCounted) {
  MappedFiles files;
  Symbolizer sym(&files, nullptr);
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<UserFrame> user = {{kNoFile, 0}};
  AppendUser(&sym, user, &b, &frames);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].address, 0u) << "no address leaves the host";
  EXPECT_EQ(frames[0].function, "[unknown]");
  EXPECT_EQ(b.profile().string_table(b.profile().mapping(0).filename()), "[unknown]");
  EXPECT_EQ(sym.stats().unknown_mapping, 1u);
}

// JIT code: an anonymous executable mapping named by /tmp/perf-PID.map.
// Names kept across renders (NameCache): a later render names what an earlier one did without
// reading the file again — here the file is gone by then — including an address no symbol
// holds (still counted as unsymbolized each time); without the cache the file is needed.
TEST(SymbolizerTest, NamesKeptAcrossRendersNeedNotTheFileAgain) {
  MappedFiles files;
  SelfCopy self;
  ASSERT_NO_FATAL_FAILURE(CopySelf(&files, &self));
  const std::string& copy = self.path;
  const FileId id = self.id;
  // The function's first byte, and offset 0 (the ELF header: no symbol holds it).
  const std::vector<UserFrame> user = {{id, self.function_offset}, {id, 0}};
  NameCache names;
  struct Got {
    std::vector<ProfileFrame> frames;
    Symbolizer::Stats stats;
    std::string build_id;
  };
  auto render = [&](NameCache* cache) {
    Symbolizer sym(&files, nullptr, {.names = cache}, "/nonexistent-proc");
    PprofBuilder b("samples", "count");
    Got got;
    AppendUser(&sym, std::span<const UserFrame>(user).first(1), &b, &got.frames);
    // The second as a leaf of its own (named at its offset, not offset - 1).
    AppendUser(&sym, std::span<const UserFrame>(user).subspan(1), &b, &got.frames);
    got.stats = sym.stats();
    if (!got.frames.empty() && got.frames[0].mapping_id != 0) {
      const auto& m = b.profile().mapping(static_cast<int>(got.frames[0].mapping_id - 1));
      got.build_id = b.profile().string_table(m.build_id());
    }
    return got;
  };
  const Got first = render(&names);
  ASSERT_EQ(first.frames.size(), 2u);
  EXPECT_EQ(first.frames[0].function, "tpe_symbolizer_test_function");
  EXPECT_EQ(first.frames[1].function, "");
  EXPECT_EQ(first.stats.unsymbolized, 1u);
  EXPECT_EQ(first.build_id.size(), 40u);
  EXPECT_EQ(names.stats().entries, 2u) << "the name and the address no symbol holds";
  ::unlink(copy.c_str());
  const Got second = render(&names);
  ASSERT_EQ(second.frames.size(), 2u);
  EXPECT_EQ(second.frames[0].function, "tpe_symbolizer_test_function");
  EXPECT_EQ(second.frames[0].address, user[0].offset);
  EXPECT_EQ(second.frames[1].function, "");
  EXPECT_EQ(second.stats.unsymbolized, 1u);
  EXPECT_EQ(second.stats.file_changed, 0u) << "not read";
  EXPECT_EQ(second.build_id, first.build_id) << "the mapping as the file had it";
  EXPECT_GE(names.stats().hits, 2u);
  const Got uncached = render(nullptr);
  ASSERT_EQ(uncached.frames.size(), 2u);
  EXPECT_EQ(uncached.frames[0].function, "") << "the file is gone";
  EXPECT_EQ(uncached.stats.file_changed, 1u);
}

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
  MappedFiles files;
  ProcessImages images(&files);
  std::vector<UserFrame> user;
  images.Normalize(static_cast<uint32_t>(getpid()), std::vector<uint64_t>{at + 0x10, at + 0x201}, 1, &user);
  PerfMapCache perf_maps("/proc");
  NameCache names;
  Symbolizer sym(&files, nullptr, {.perf_maps = &perf_maps, .names = &names});
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  AppendUser(&sym, user, &b, &frames);
  std::remove(map_path.c_str());
  munmap(code, 4096);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].function, "LazyCompile:~jitted /srv/app.js:3");
  EXPECT_EQ(frames[1].function, "");  // past the entry's 0x100 bytes: offset kept, counted
  EXPECT_EQ(sym.stats().unsymbolized, 1u);
  const auto& m = b.profile().mapping(static_cast<int>(frames[0].mapping_id - 1));
  EXPECT_EQ(b.profile().string_table(m.filename()), "[jit pid " + std::to_string(getpid()) + "]");
  EXPECT_EQ(names.stats().entries, 0u) << "JIT code is not kept: its runtime reuses addresses";
}

// A perf map made a FIFO by a hostile user: the render does not wait on it (the server's threads
// would block in open), the JIT frame stays unnamed, and the refusal is counted.
TEST(SymbolizerTest, AFifoPerfMapIsRefusedNotWaitedOn) {
  void* code = mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(code, MAP_FAILED);
  const uint64_t at = reinterpret_cast<uint64_t>(code);
  const std::string map_path = "/tmp/perf-" + std::to_string(getpid()) + ".map";
  std::remove(map_path.c_str());
  ASSERT_EQ(::mkfifo(map_path.c_str(), 0644), 0);
  MappedFiles files;
  ProcessImages images(&files);
  std::vector<UserFrame> user;
  images.Normalize(static_cast<uint32_t>(getpid()), std::vector<uint64_t>{at + 0x10}, 1, &user);
  PerfMapCache perf_maps("/proc");
  NameCache names;
  Symbolizer sym(&files, nullptr, {.perf_maps = &perf_maps, .names = &names});
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  AppendUser(&sym, user, &b, &frames);
  std::remove(map_path.c_str());
  munmap(code, 4096);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].function, "");
  EXPECT_EQ(perf_maps.refusals().Get(FileRefusal::kFifo), 1u);
}

// Kernel frames are named and served as offsets from the kernel's _text (or their module's
// base): no absolute kernel address leaves the host. Unnamed ones are "[unknown]" at 0.
TEST(SymbolizerTest, KernelFramesRelativeToTheirImage) {
  auto k = Kallsyms::Parse(
      "ffffffff81000000 T _stext\nffffffff81000000 T _text\nffffffff810a1c40 T __x64_sys_getppid\n"
      "ffffffff810a1c80 T next\n"
      "ffffffffc0a01000 t xfs_file_read_iter\t[xfs]\nffffffffc0a02000 t xfs_end\t[xfs]\n");
  ASSERT_TRUE(k.ok());
  Symbolizer sym(nullptr, std::make_shared<const Kallsyms>(std::move(k).value()));
  PprofBuilder b("samples", "count");
  std::vector<ProfileFrame> frames;
  const std::vector<uint64_t> ips = {0xffffffff810a1c4b, 0xffffffffc0a01011, 0xffffffff810a1c80, 0xffffffff00000001};
  AppendKernel(&sym, ips, &b, &frames);
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].function, "__x64_sys_getppid");
  EXPECT_EQ(frames[0].address, 0xa1c4bu);
  EXPECT_EQ(frames[1].function, "xfs_file_read_iter [xfs]");
  EXPECT_EQ(frames[1].address, 0x11u);
  EXPECT_EQ(frames[2].function, "__x64_sys_getppid");  // a return address at next's first byte
  EXPECT_EQ(frames[3].function, "[unknown]");
  EXPECT_EQ(frames[3].address, 0u);
  EXPECT_EQ(sym.stats().kernel_unsymbolized, 1u);
  EXPECT_EQ(b.profile().string_table(b.profile().mapping(0).filename()), "[kernel.kallsyms]");
  EXPECT_EQ(b.profile().string_table(b.profile().mapping(1).filename()), "[xfs.ko]");
}

}  // namespace
}  // namespace tpe
