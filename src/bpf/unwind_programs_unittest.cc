// EmitRowSearch run by the Interpreter over the packed unwind rows of real files (this test and
// python3.11 where installed, laid end to end in shards as the daemon loads them): the rule it
// finds at every row's start, the byte before and after it, and a sweep of offsets, equals
// PackedRuleAt's (unwind_rows.h); a run past the map's rows fails cleanly.
#include "bpf/unwind_programs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "bpf/interpreter.h"
#include "unwind/cfi_table.h"
#include "unwind/unwind_rows.h"

namespace tpe::bpf {
namespace {

constexpr int kRowsFd = 21;
constexpr uint64_t kFailed = 0xfa11;

std::vector<unwind::PackedRow> RowsOf(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return {};
  auto cfi = unwind::CfiTable::Read(fd, path);
  ::close(fd);
  EXPECT_TRUE(cfi.ok()) << cfi.status().ToString();
  if (!cfi.ok()) return {};
  auto t = unwind::BuildUnwindTable(**cfi, kMaxRowsPerFile);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  auto p = unwind::PackUnwindTable(*t);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->rows : std::vector<unwind::PackedRow>{};
}

class RowSearchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Assembler a;
    Label fail = a.NewLabel();
    a.Load(8, R6, R1, 8);
    a.Load(8, R7, R1, 16);
    a.Load(8, R8, R1, 24);
    EmitRowSearch(&a, kRowsFd, -16, fail);
    a.MovReg(R0, R6);
    a.Exit();
    a.Bind(fail);
    a.Mov(R0, static_cast<int32_t>(kFailed));
    a.Exit();
    auto prog = a.Finish();
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    prog_ = *prog;
  }

  // Lays `files` end to end after `pad` rows of padding, as shards of the rows map; returns
  // each file's first row.
  std::vector<uint64_t> Load(const std::vector<std::vector<unwind::PackedRow>>& files, size_t pad) {
    std::vector<unwind::PackedRow> all(pad, unwind::PackedRow{0xffffffff, 0});
    std::vector<uint64_t> firsts;
    for (const auto& f : files) {
      firsts.push_back(all.size());
      all.insert(all.end(), f.begin(), f.end());
    }
    FakeMap rows;
    rows.type = BPF_MAP_TYPE_ARRAY;
    rows.key_size = 4;
    rows.value_size = kShardBytes;
    rows.max_entries = static_cast<uint32_t>((all.size() + kRowsPerShard - 1) / kRowsPerShard);
    for (uint32_t k = 0; k < rows.max_entries; ++k) {
      std::string value(kShardBytes, '\0');
      const size_t n = std::min<size_t>(kRowsPerShard, all.size() - size_t{k} * kRowsPerShard);
      std::memcpy(value.data(), all.data() + size_t{k} * kRowsPerShard, n * 8);
      rows.entries[std::string(reinterpret_cast<const char*>(&k), 4)] = value;
    }
    in_.AddMap(kRowsFd, rows);
    return firsts;
  }

  uint64_t Search(uint64_t first, uint64_t count, uint64_t target) {
    uint64_t record[4] = {0, first, count, target};
    auto r = in_.Run(prog_, std::string_view(reinterpret_cast<const char*>(record), sizeof(record)), FakeTask{});
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ~0ull;
  }

  // The search at each row's start and its neighbours (every `row_step`-th row), and at every
  // `sweep`-th offset up to past the last row, against PackedRuleAt.
  void Check(const std::vector<unwind::PackedRow>& rows, uint64_t first, size_t row_step, uint64_t sweep) {
    auto expect = [&](uint64_t target) {
      const uint64_t got = Search(first, rows.size(), target);
      ASSERT_NE(got, kFailed) << "at 0x" << std::hex << target;
      ASSERT_TRUE(unwind::UnpackRule(unwind::PackedRow{0, static_cast<uint32_t>(got)}) ==
                  unwind::PackedRuleAt(rows, target))
          << "at 0x" << std::hex << target << ": rule 0x" << got;
    };
    for (size_t i = 0; i < rows.size(); i += row_step) {
      for (uint64_t t : {uint64_t{rows[i].offset} - 1, uint64_t{rows[i].offset}, uint64_t{rows[i].offset} + 1}) {
        if (t < (uint64_t{1} << 32)) {
          ASSERT_NO_FATAL_FAILURE(expect(t));
        }
      }
    }
    for (uint64_t t = 0; t < uint64_t{rows.back().offset} + 4096; t += sweep) ASSERT_NO_FATAL_FAILURE(expect(t));
  }

  Interpreter in_;
  std::vector<bpf_insn> prog_;
};

TEST_F(RowSearchTest, FindsTheRuleOfRealFilesRowsAsTheTableDoes) {
  const std::vector<unwind::PackedRow> self = RowsOf("/proc/self/exe");
  ASSERT_GT(self.size(), 1000u);
  std::vector<std::vector<unwind::PackedRow>> files = {self};
  const bool python = ::access("/usr/bin/python3.11", R_OK) == 0;
  if (python) files.push_back(RowsOf("/usr/bin/python3.11"));
  // Five rows of padding: files start inside shards and cross them.
  const std::vector<uint64_t> firsts = Load(files, 5);
  std::printf("program: %zu instructions; rows: this test %zu%s\n", prog_.size(), self.size(),
              python ? (", python3.11 " + std::to_string(files[1].size())).c_str() : "");
  ASSERT_NO_FATAL_FAILURE(Check(self, firsts[0], 1, 61));
  if (python) {
    ASSERT_NO_FATAL_FAILURE(Check(files[1], firsts[1], 7, 997));
  }
}

TEST_F(RowSearchTest, SmallRunsAndTheirEdges) {
  const std::vector<unwind::PackedRow> one = {{0x100, 0x8000}};  // rsp + 8
  const std::vector<unwind::PackedRow> two = {{0x100, 0x8000}, {0x104, 0x10000}};
  const std::vector<uint64_t> firsts = Load({one, two}, kRowsPerShard - 1);  // `two` crosses a shard
  EXPECT_EQ(Search(firsts[0], 1, 0xff), static_cast<uint64_t>(unwind::CfaRule::kNoTable));
  EXPECT_EQ(Search(firsts[0], 1, 0x100), 0x8000u);
  EXPECT_EQ(Search(firsts[0], 1, 0xffffffff), 0x8000u);
  EXPECT_EQ(Search(firsts[1], 2, 0x103), 0x8000u);
  EXPECT_EQ(Search(firsts[1], 2, 0x104), 0x10000u);
  EXPECT_EQ(Search(firsts[1], 2, 0x105), 0x10000u);
}

TEST_F(RowSearchTest, ARunPastTheMapFailsCleanly) {
  const std::vector<uint64_t> firsts = Load({{{0x100, 0x8000}}}, 0);
  // A run claimed longer than the map holds: the first halving looks past the last shard.
  EXPECT_EQ(Search(firsts[0], kMaxRowsPerFile, 0x200), kFailed);
  EXPECT_EQ(Search(uint64_t{1} << 40, 1, 0x200), kFailed);
}

}  // namespace
}  // namespace tpe::bpf
