#include "unwind/unwinder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "elf/elf_file.h"
#include "testing/self_stack.h"
#include "unwind/cfi_cache.h"

// A chain with live data in every frame, built without frame pointers (as Debian builds: this
// file is compiled with -fomit-frame-pointer, src/unwind/CMakeLists.txt, whatever the build's
// other flags; gcc's optimize attribute would be per function, but clang has none):
// tpe_unwind_a -> tpe_unwind_b -> tpe_unwind_c -> the capture (tpe_capture_stack).
using Captured = tpe::testing::CapturedStack;
extern "C" {
__attribute__((noinline)) int tpe_unwind_c(Captured* c, int x) {
  volatile int live[8] = {x, x + 1};
  tpe_capture_stack(c, 32768);
  asm volatile("" ::: "memory");
  return live[0] + live[1];
}
__attribute__((noinline)) int tpe_unwind_b(Captured* c, int x) {
  volatile int live[16] = {x};
  const int r = tpe_unwind_c(c, x + 1);
  asm volatile("" ::: "memory");
  return r + live[0];
}
__attribute__((noinline)) int tpe_unwind_a(Captured* c, int x) {
  volatile int live[4] = {x};
  const int r = tpe_unwind_b(c, x + 1);
  asm volatile("" ::: "memory");
  return r + live[0];
}
}

namespace tpe::unwind {
namespace {

// Names `frames` that lie in this test binary (others "?").
std::vector<std::string> Names(const std::vector<UserFrame>& frames, const MappedFiles& files) {
  auto self = elf::ElfFile::Open("/proc/self/exe");
  std::vector<std::string> out;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto f = files.Get(frames[i].file);
    std::string name = "?";
    if (f && self.ok() && f->inode != 0 && f->path.find("unwind_unittest") != std::string::npos) {
      auto address = elf::AddressForFileOffset(self->segments(), frames[i].offset - (i == 0 ? 0 : 1));
      if (address.ok()) {
        if (const elf::Symbol* s = self->SymbolAt(*address)) name = s->name;
      }
    } else if (f) {
      name = f->path.substr(f->path.rfind('/') + 1);
    }
    out.push_back(name);
  }
  return out;
}

// This very process, unwound from its .eh_frame as a sample of it would be: the chain without
// frame pointers, then this test's body, gtest, main and libc, to the outermost frame.
TEST(UnwinderTest, UnwindsThisProcessWithoutFramePointers) {
  Captured c;
  ASSERT_GT(tpe_unwind_a(&c, 1), 0);
  ASSERT_GT(c.stack.size(), 1024u);
  MappedFiles files;
  ProcessImages images(&files);
  CfiCache tables(&files);
  ProcessCodeLookup lookup(&images, &tables, static_cast<uint32_t>(getpid()), MonotonicNs());
  std::vector<UserFrame> frames;
  const UnwindEnd end = Unwind(c.Registers(), c.stack, 127, &lookup, &frames);
  const std::vector<std::string> names = Names(frames, files);
  std::ostringstream all;
  for (const auto& n : names) all << n << " ";
  ASSERT_GE(names.size(), 5u) << all.str();
  EXPECT_EQ(names[0], "tpe_capture_stack") << all.str();
  EXPECT_EQ(names[1], "tpe_unwind_c") << all.str();
  EXPECT_EQ(names[2], "tpe_unwind_b") << all.str();
  EXPECT_EQ(names[3], "tpe_unwind_a") << all.str();
  EXPECT_NE(all.str().find(" main "), std::string::npos) << all.str();
  EXPECT_EQ(end, UnwindEnd::kOutermost) << UnwindEndName(end) << ": " << all.str();
  EXPECT_GE(tables.stats().reads, 1u);

  // The same with a stack copy that ends inside the chain: what there is, then why it stopped.
  std::vector<UserFrame> cut;
  const std::span<const uint8_t> short_copy(c.stack.data(), 64);
  const UnwindEnd cut_end = Unwind(c.Registers(), short_copy, 127, &lookup, &cut);
  EXPECT_EQ(cut_end, UnwindEnd::kStackCopy);
  EXPECT_GE(cut.size(), 1u);
  EXPECT_LT(cut.size(), frames.size());

  // max_frames.
  std::vector<UserFrame> three;
  EXPECT_EQ(Unwind(c.Registers(), c.stack, 3, &lookup, &three), UnwindEnd::kMaxFrames);
  EXPECT_EQ(three.size(), 3u);
}

// No table (a lookup that finds none): frame pointers, and a pc in no mapping ends the walk.
class NoTables : public CodeLookup {
 public:
  CodeAt At(uint64_t address) override {
    CodeAt c;
    if (address >= 0x1000 && address < 0x2000) {
      c.file = 1;
      c.offset = address - 0x1000;
    }
    return c;
  }
};

TEST(UnwinderTest, FramePointersWhereThereIsNoTable) {
  // A stack at 0x7000: frame 1's rbp at 0x7010 -> {saved rbp 0x7030, ra 0x1500}; frame 2 at
  // 0x7030 -> {0, 0x1700}; then 0x1700's frame has rbp 0: no frame pointer to follow.
  std::vector<uint8_t> stack(0x80);
  auto put = [&](uint64_t at, uint64_t v) { std::memcpy(stack.data() + (at - 0x7000), &v, 8); };
  put(0x7010, 0x7030);
  put(0x7018, 0x1500);
  put(0x7030, 0);
  put(0x7038, 0x1700);
  Registers r;
  r.Set(kDwarfRip, 0x1100);
  r.Set(kDwarfRsp, 0x7000);
  r.Set(kDwarfRbp, 0x7010);
  NoTables lookup;
  std::vector<UserFrame> frames;
  EXPECT_EQ(Unwind(r, stack, 64, &lookup, &frames), UnwindEnd::kNoFramePointer);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].offset, 0x100u);
  EXPECT_EQ(frames[1].offset, 0x500u);
  EXPECT_EQ(frames[2].offset, 0x700u);
  // A return address in no mapping.
  put(0x7038, 0x9999);
  frames.clear();
  EXPECT_EQ(Unwind(r, stack, 64, &lookup, &frames), UnwindEnd::kNoMapping);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[2].file, kNoFile);
  // No registers: nothing.
  frames.clear();
  EXPECT_EQ(Unwind(Registers{}, stack, 64, &lookup, &frames), UnwindEnd::kNoRegisters);
  EXPECT_TRUE(frames.empty());
}

}  // namespace
}  // namespace tpe::unwind
