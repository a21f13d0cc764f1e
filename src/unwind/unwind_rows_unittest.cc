// PackUnwindTable: the packed rows of real files' tables (this test, libc, python3.11 where
// installed) carry every entry's rule exactly, their binary search finds the table's rule at
// every offset, and rules that do not fit are stops, counted and merged with their neighbours.
#include "unwind/unwind_rows.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "testing/test_util.h"
#include "unwind/unwind_testing.h"

namespace tpe::unwind {
namespace {

UnwindEntry Entry(uint64_t offset, CfaRule cfa, int32_t cfa_offset, RbpRule rbp = RbpRule::kSame,
                  int32_t rbp_offset = 0) {
  return {offset, {cfa, rbp, cfa_offset, rbp_offset}};
}

TEST(UnwindRowsTest, RowsAreEightLittleEndianBytesAsTheProgramReadsThem) {
  UnwindTable t;
  t.entries = {Entry(0x1130, CfaRule::kRbp, 16, RbpRule::kAtCfa, -16)};
  auto p = PackUnwindTable(t);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->rows.size(), 1u);
  uint8_t bytes[8];
  std::memcpy(bytes, &p->rows[0], 8);
  // offset 0x1130; the rule kRbp (1) | kAtCfa (1) << 2 | -2 slots (0xfe) << 4 | 16 << 12.
  const uint8_t want[8] = {0x30, 0x11, 0, 0, 0xe5, 0x0f, 0x01, 0};
  EXPECT_EQ(std::memcmp(bytes, want, 8), 0);
  EXPECT_TRUE(UnpackRule(p->rows[0]) == t.entries[0].rule);
}

TEST(UnwindRowsTest, RulesThatDoNotFitAreCountedStopsMergedWithTheirNeighbours) {
  UnwindTable t;
  t.entries = {Entry(0x100, CfaRule::kRsp, 8),
               Entry(0x104, CfaRule::kRsp, 1 << 20),                     // a CFA offset of 1 MiB
               Entry(0x108, CfaRule::kStop, 0),                          // a stop already: merged
               Entry(0x10c, CfaRule::kRsp, 16, RbpRule::kAtCfa, -12),    // rbp slot not 8-aligned
               Entry(0x110, CfaRule::kRbp, 16, RbpRule::kAtCfa, -2048),  // rbp slot too far
               Entry(0x114, CfaRule::kRsp, -8),                          // CFA below rsp
               Entry(0x118, CfaRule::kRbp, 16, RbpRule::kAtCfa, -1024),  // the farthest that fits
               Entry(0x11c, CfaRule::kNoTable, 0)};
  auto p = PackUnwindTable(t);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->narrowed, 4u);
  ASSERT_EQ(p->rows.size(), 4u);
  EXPECT_EQ(p->rows[0].offset, 0x100u);
  EXPECT_EQ(p->rows[1].offset, 0x104u);
  EXPECT_EQ(UnpackRule(p->rows[1]).cfa, CfaRule::kStop);
  EXPECT_EQ(p->rows[2].offset, 0x118u);
  EXPECT_TRUE(UnpackRule(p->rows[2]) == t.entries[6].rule);
  EXPECT_EQ(UnpackRule(p->rows[3]).cfa, CfaRule::kNoTable);
  EXPECT_EQ(PackedRuleAt(p->rows, 0x113).cfa, CfaRule::kStop);
  EXPECT_EQ(PackedRuleAt(p->rows, 0xff).cfa, CfaRule::kNoTable);
  EXPECT_EQ(PackedRuleAt(p->rows, 0x102).cfa_offset, 8);
  // The largest CFA offset that fits (python3.11 has a 65,600-byte one).
  t.entries = {Entry(0x100, CfaRule::kRsp, static_cast<int32_t>(kPackedMaxCfaOffset), RbpRule::kAtCfa, 1016)};
  p = PackUnwindTable(t);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->narrowed, 0u);
  EXPECT_TRUE(UnpackRule(p->rows[0]) == t.entries[0].rule);
}

TEST(UnwindRowsTest, OffsetsPastFourGibAreRefused) {
  UnwindTable t;
  t.entries = {Entry(0x1000, CfaRule::kRsp, 8), Entry(uint64_t{1} << 32, CfaRule::kNoTable, 0)};
  auto p = PackUnwindTable(t);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("past 4 GiB"), std::string::npos) << p.status().message();
}

// Every entry of a real file's table packs exactly (no narrowing on what compilers emit), and
// the packed search gives the table's rule at every `step`-th offset of the file.
void CheckFile(const std::string& path, uint64_t step) {
  auto cfi = testing::ReadCfi(path);
  ASSERT_NE(cfi, nullptr);
  auto t = BuildUnwindTable(*cfi, 10'000'000);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto p = PackUnwindTable(*t);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->narrowed, 0u) << path;
  ASSERT_EQ(p->rows.size(), t->entries.size()) << path;
  for (size_t i = 0; i < t->entries.size(); ++i) {
    ASSERT_EQ(p->rows[i].offset, t->entries[i].offset) << path << " entry " << i;
    const UnwindRule got = UnpackRule(p->rows[i]), want = t->entries[i].rule;
    ASSERT_TRUE(got == want) << path << " entry " << i << ": cfa " << int(got.cfa) << "+" << got.cfa_offset << " rbp "
                             << int(got.rbp) << "@" << got.rbp_offset << ", want cfa " << int(want.cfa) << "+"
                             << want.cfa_offset << " rbp " << int(want.rbp) << "@" << want.rbp_offset;
  }
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  for (uint64_t offset = 0; offset < static_cast<uint64_t>(st.st_size); offset += step) {
    ASSERT_TRUE(PackedRuleAt(p->rows, offset) == t->RuleAt(offset)) << path << " at 0x" << std::hex << offset;
  }
  std::printf("%s: %zu entries, %zu bytes packed (%zu unpacked)\n", path.c_str(), p->rows.size(),
              p->rows.size() * sizeof(PackedRow), t->memory_bytes());
}

TEST(UnwindRowsTest, RealFilesPackExactly) {
  CheckFile("/proc/self/exe", 3);
  if (const std::string libc = testing::MappedPath("/libc.so.6"); !libc.empty()) CheckFile(libc, 5);
  if (::access("/usr/bin/python3.11", R_OK) == 0) CheckFile("/usr/bin/python3.11", 7);
}

}  // namespace
}  // namespace tpe::unwind
