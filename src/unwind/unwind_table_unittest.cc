// BuildUnwindTable: the exact table of a small static binary (its .eh_frame as readelf prints
// it), the rule at every offset of real files' code (this test, libc, python3.11 where installed)
// equal to the reduction of the row libdw finds there, and its errors (no .eh_frame_hdr, the row
// bound).
#include "unwind/unwind_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "testing/test_util.h"
#include "unwind/unwind_testing.h"

namespace tpe::unwind {
namespace {

// The fuzzer's seeds: a three-function chain built -O2, static, stripped, with and without
// .eh_frame_hdr.
std::string Seed(const std::string& name) {
  return std::string(TPE_TEST_DATA) + "/../../fuzz/corpus/cfi_fuzzer/" + name;
}

using testing::ReadCfi;

UnwindEntry Rsp(uint64_t offset, int32_t cfa_offset) {
  return {offset, {CfaRule::kRsp, RbpRule::kSame, cfa_offset, 0}};
}
UnwindEntry Gap(uint64_t offset) { return {offset, {CfaRule::kNoTable, RbpRule::kSame, 0, 0}}; }

// `readelf --debug-dump=frames-interp` of the seed (one LOAD at 0x400000, file offset 0):
//   pc 0x400150..0x40016d  rsp+8
//   pc 0x400170..0x400192  rsp+8, from 0x400174 rsp+32, from 0x40018d rsp+8
//   pc 0x4001a0..0x4001b1  rsp+8, from 0x4001a4 rsp+16, from 0x4001ad rsp+8
//   pc 0x4001c0..0x4001d0  rsp+8, from 0x4001c4 rsp+16
// with the return address at c-8 throughout; the padding between the functions has no FDE.
TEST(UnwindTableTest, TheSeedsTableIsItsEhFrameRowByRow) {
  auto cfi = ReadCfi(Seed("static_chain_eh_frame_hdr"));
  ASSERT_NE(cfi, nullptr);
  auto t = BuildUnwindTable(*cfi, 1000);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const std::vector<UnwindEntry> want = {Rsp(0x150, 8), Gap(0x16d),     Rsp(0x170, 8),  Rsp(0x174, 32), Rsp(0x18d, 8),
                                         Gap(0x192),    Rsp(0x1a0, 8),  Rsp(0x1a4, 16), Rsp(0x1ad, 8),  Gap(0x1b1),
                                         Rsp(0x1c0, 8), Rsp(0x1c4, 16), Gap(0x1d0)};
  ASSERT_EQ(t->entries.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(t->entries[i].offset, want[i].offset) << "entry " << i;
    EXPECT_TRUE(t->entries[i].rule == want[i].rule) << "entry " << i << " at 0x" << std::hex << want[i].offset;
  }
  EXPECT_EQ(t->rows, 13u);
  EXPECT_EQ(t->stop_rows, 0u);
  // Lookups inside entries, before the first and past the last.
  EXPECT_EQ(t->RuleAt(0x180).cfa_offset, 32);
  EXPECT_EQ(t->RuleAt(0x18c).cfa_offset, 32);
  EXPECT_EQ(t->RuleAt(0x18d).cfa_offset, 8);
  EXPECT_EQ(t->RuleAt(0x14f).cfa, CfaRule::kNoTable);
  EXPECT_EQ(t->RuleAt(0x196).cfa, CfaRule::kNoTable);
  EXPECT_EQ(t->RuleAt(0x5000).cfa, CfaRule::kNoTable);
}

TEST(UnwindTableTest, WithoutEhFrameHdrItIsNotFoundAndTheRowBoundRefuses) {
  auto no_hdr = ReadCfi(Seed("static_chain_eh_frame"));
  ASSERT_NE(no_hdr, nullptr);
  auto t = BuildUnwindTable(*no_hdr, 1000);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find("static_chain_eh_frame has no .eh_frame_hdr"), std::string::npos)
      << t.status().message();

  auto cfi = ReadCfi(Seed("static_chain_eh_frame_hdr"));
  ASSERT_NE(cfi, nullptr);
  t = BuildUnwindTable(*cfi, 12);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(t.status().message().find("more than 12 unwind table rows"), std::string::npos) << t.status().message();
}

// At every `step`-th offset of the file, the table's rule is the reduction of the row libdw
// finds there (CfiTable::CompactRowAt, the perf engine's unwinder's own lookup).
void CheckEveryOffset(const std::string& path, uint64_t step) {
  auto cfi = ReadCfi(path);
  ASSERT_NE(cfi, nullptr);
  auto t = BuildUnwindTable(*cfi, 10'000'000);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (size_t i = 1; i < t->entries.size(); ++i) {
    ASSERT_LT(t->entries[i - 1].offset, t->entries[i].offset) << path << " entry " << i;
    ASSERT_FALSE(t->entries[i - 1].rule == t->entries[i].rule) << path << " entry " << i << " repeats its neighbour";
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  size_t covered = 0;
  for (uint64_t offset = 0; offset < static_cast<uint64_t>(st.st_size); offset += step) {
    CompactRow row;
    const RowForm form = cfi->CompactRowAt(offset, &row);
    const UnwindRule want = RuleOf(form, row);
    const UnwindRule got = t->RuleAt(offset);
    ASSERT_TRUE(got == want) << path << " at offset 0x" << std::hex << offset << ": cfa " << static_cast<int>(got.cfa)
                             << "+" << got.cfa_offset << ", want " << static_cast<int>(want.cfa) << "+"
                             << want.cfa_offset;
    covered += form != RowForm::kNone;
  }
  std::printf("%s: %zu rows, %zu stop, %zu entries (%zu bytes), %zu offsets checked in code\n", path.c_str(), t->rows,
              t->stop_rows, t->entries.size(), t->memory_bytes(), covered);
  EXPECT_GT(t->rows, 1000u) << path;
  EXPECT_GT(covered, 1000u) << path;
  // Stops are rare: PLT stubs' expressions, stack-realigning prologues, signal trampolines.
  EXPECT_LT(t->stop_rows * 100, t->rows * 3) << path;
}

TEST(UnwindTableTest, EveryOffsetHasTheRuleLibdwFindsThere) {
  CheckEveryOffset("/proc/self/exe", 7);
  if (const std::string libc = testing::MappedPath("/libc.so.6"); !libc.empty()) CheckEveryOffset(libc, 5);
  if (::access("/usr/bin/python3.11", R_OK) == 0) CheckEveryOffset("/usr/bin/python3.11", 17);
}

}  // namespace
}  // namespace tpe::unwind
