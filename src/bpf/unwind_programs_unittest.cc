// EmitRowSearch run by the Interpreter over the packed unwind rows of real files (this test and
// python3.11 where installed, laid end to end in shards as the daemon loads them): the rule it
// finds at every row's start, the byte before and after it, and a sweep of offsets, equals
// PackedRuleAt's (unwind_rows.h); a run past the map's rows fails cleanly.
#include "bpf/unwind_programs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "bpf/interpreter.h"
#include "unwind/unwind_rows.h"
#include "unwind/unwind_testing.h"

namespace tpe::bpf {
namespace {

constexpr int kRowsFd = 21;
constexpr uint64_t kFailed = 0xfa11;

std::vector<unwind::PackedRow> RowsOf(const std::string& path) {
  auto cfi = testing::ReadCfi(path);
  if (cfi == nullptr) return {};
  auto t = unwind::BuildUnwindTable(*cfi, kMaxRowsPerFile);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return {};
  auto p = unwind::PackUnwindTable(*t);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? p->rows : std::vector<unwind::PackedRow>{};
}

// Runs `prog` in `in` on a record of u64 words (word 0 stands for the common fields, which a
// tracepoint program may not read); R0 at exit, or ~0 with a failed expectation.
uint64_t RunOn(Interpreter* in, const std::vector<bpf_insn>& prog, std::initializer_list<uint64_t> words) {
  const std::vector<uint64_t> record(words);
  auto r = in->Run(prog, std::string_view(reinterpret_cast<const char*>(record.data()), record.size() * 8), FakeTask{});
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : ~0ull;
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
    return RunOn(&in_, prog_, {0, first, count, target});
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

// EmitMappingSearch over a process's mappings, against FindUnwindMapping: the pc at each
// mapping's first and last byte, just outside, between two, before the first and past the last.
class MappingSearchTest : public ::testing::Test {
 protected:
  static constexpr int kMappingsFd = 22;
  static constexpr uint64_t kUnknown = 0x404;

  void SetUp() override {
    Assembler a;
    Label unknown = a.NewLabel(), exit = a.NewLabel(), not_first = a.NewLabel(), not_count = a.NewLabel();
    // ctx: u64 tgid at 8, pc at 16, which output at 24 (0 file offset, 1 first_row, 2 row_count).
    a.Load(8, R6, R1, 8);
    a.Load(8, R8, R1, 16);
    a.Load(8, R7, R1, 24);
    a.Store(8, R10, -8, R7);
    a.Store(4, R10, -16, R6);
    a.LoadMapFd(R1, kMappingsFd);
    a.MovReg(R2, R10);
    a.Alu(BPF_ADD, R2, -16);
    a.Call(BPF_FUNC_map_lookup_elem);
    a.Jump(BPF_JEQ, R0, 0, unknown);
    a.MovReg(R9, R0);
    EmitMappingSearch(&a, unknown);
    a.Load(8, R1, R10, -8);
    a.MovReg(R0, R8);
    a.Jump(BPF_JNE, R1, 1, not_first);
    a.MovReg(R0, R6);
    a.Bind(not_first);
    a.Jump(BPF_JNE, R1, 2, not_count);
    a.MovReg(R0, R7);
    a.Bind(not_count);
    a.Goto(exit);
    a.Bind(unknown);
    a.Mov(R0, static_cast<int32_t>(kUnknown));
    a.Bind(exit);
    a.Exit();
    auto prog = a.Finish();
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    prog_ = *prog;
    FakeMap m;
    m.type = BPF_MAP_TYPE_HASH;
    m.key_size = 4;
    m.value_size = kUnwindMappingsBytes;
    m.max_entries = 16;
    in_.AddMap(kMappingsFd, m);
  }

  void SetProcess(uint32_t tgid, const std::string& value) {
    in_.map(kMappingsFd)->entries[std::string(reinterpret_cast<const char*>(&tgid), 4)] = value;
  }

  uint64_t Run(uint32_t tgid, uint64_t pc, uint64_t which) { return RunOn(&in_, prog_, {0, tgid, pc, which}); }

  // The program's answer for `pc` is FindUnwindMapping's.
  void Expect(uint32_t tgid, const std::string& value, uint64_t pc) {
    const UnwindMapping* m = FindUnwindMapping(value, pc);
    if (m == nullptr) {
      ASSERT_EQ(Run(tgid, pc, 0), kUnknown) << "pc 0x" << std::hex << pc;
      return;
    }
    ASSERT_EQ(Run(tgid, pc, 0), pc - m->bias) << "pc 0x" << std::hex << pc;
    ASSERT_EQ(Run(tgid, pc, 1), m->first_row) << "pc 0x" << std::hex << pc;
    ASSERT_EQ(Run(tgid, pc, 2), m->row_count) << "pc 0x" << std::hex << pc;
  }

  Interpreter in_;
  std::vector<bpf_insn> prog_;
};

TEST_F(MappingSearchTest, EveryEdgeOfEveryCount) {
  // 1, 2, 3, ..., 256 mappings of 0x3000 bytes with gaps of 0x1000, given in reverse order.
  for (uint32_t n : {1u, 2u, 3u, 7u, 8u, 9u, 40u, 255u, 256u}) {
    std::vector<UnwindMapping> ms;
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t start = 0x400000 + uint64_t{i} * 0x4000;
      ms.push_back({start, start + 0x3000, start - uint64_t{i} * 0x1000, i * 100, i % 3 == 0 ? 0 : 50 + i});
    }
    std::reverse(ms.begin(), ms.end());
    auto value = PackUnwindMappings(ms);
    ASSERT_TRUE(value.ok()) << value.status().ToString();
    SetProcess(n, *value);
    std::reverse(ms.begin(), ms.end());
    ASSERT_NO_FATAL_FAILURE(Expect(n, *value, 0));
    ASSERT_NO_FATAL_FAILURE(Expect(n, *value, 0x3fffff));
    for (const UnwindMapping& m : ms) {
      for (uint64_t pc : {m.start - 1, m.start, m.start + 0x123, m.end - 1, m.end, m.end + 0xfff}) {
        ASSERT_NO_FATAL_FAILURE(Expect(n, *value, pc));
      }
    }
    ASSERT_NO_FATAL_FAILURE(Expect(n, *value, (uint64_t{1} << 47) - 1));
  }
  EXPECT_EQ(Run(999, 0x400000, 0), kUnknown) << "a process with no mappings known";
}

TEST_F(MappingSearchTest, BadMappingsAreRefused) {
  std::vector<UnwindMapping> too_many(kMaxUnwindMappings + 1);
  for (size_t i = 0; i < too_many.size(); ++i) too_many[i] = {0x1000 * (i + 1), 0x1000 * (i + 1) + 0x800, 0, 0, 0};
  auto r = PackUnwindMappings(too_many);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("at most 256 per process"), std::string::npos) << r.status().message();
  const std::vector<UnwindMapping> overlap = {{0x1000, 0x3000, 0, 0, 0}, {0x2000, 0x4000, 0, 0, 0}};
  EXPECT_NE(PackUnwindMappings(overlap).status().message().find("overlap"), std::string::npos);
  const std::vector<UnwindMapping> empty = {{0x2000, 0x2000, 0, 0, 0}};
  EXPECT_FALSE(PackUnwindMappings(empty).ok());
  const std::vector<UnwindMapping> kernel = {{0xffffffff81000000, 0xffffffff82000000, 0, 0, 0}};
  EXPECT_FALSE(PackUnwindMappings(kernel).ok());
  auto none = PackUnwindMappings({});
  ASSERT_TRUE(none.ok());
  SetProcess(5, *none);
  EXPECT_EQ(Run(5, 0x400000, 0), kUnknown);
}

// EmitUnwindStep over a stack of known words: each rule's caller registers, and each way a step
// stops with the registers as they were.
class UnwindStepTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kStack = 0x7ffd0000;  // 32 words: word i holds 0x1000 + i
  static constexpr uint64_t kStopped = 0x5709;

  void SetUp() override {
    Assembler a;
    Label stop = a.NewLabel(), exit = a.NewLabel();
    // ctx: rip, rsp, rbp at 8, 16, 24; the rule at 32; which register to return at 40.
    for (int i = 0; i < 3; ++i) {
      a.Load(8, R2, R1, static_cast<int16_t>(8 + 8 * i));
      a.Store(8, R10, static_cast<int16_t>(-40 + 8 * i), R2);
    }
    a.Load(8, R6, R1, 32);
    a.Load(8, R2, R1, 40);
    a.Store(8, R10, -56, R2);
    EmitUnwindStep(&a, -40, -48, stop);
    a.Load(8, R1, R10, -56);
    a.Load(8, R0, R10, -40);
    a.Jump(BPF_JEQ, R1, 0, exit);
    a.Load(8, R0, R10, -32);
    a.Jump(BPF_JEQ, R1, 1, exit);
    a.Load(8, R0, R10, -24);
    a.Goto(exit);
    a.Bind(stop);
    a.Mov(R0, static_cast<int32_t>(kStopped));
    a.Bind(exit);
    a.Exit();
    auto prog = a.Finish();
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    prog_ = *prog;
    std::string words(32 * 8, '\0');
    for (uint64_t i = 0; i < 32; ++i) {
      const uint64_t w = 0x1000 + i;
      std::memcpy(words.data() + i * 8, &w, 8);
    }
    in_.AddUserMemory(kStack, words);
    in_.AddUserMemory(0x7ffe0000, std::string(64, '\0'));  // a stack of zeros: return address 0
  }

  struct Regs {
    uint64_t rip, rsp, rbp;
    bool operator==(const Regs&) const = default;
  };
  // The caller's registers, or nullopt when the step stopped.
  std::optional<Regs> Step(Regs r, uint32_t rule) {
    Regs out{};
    for (uint64_t which = 0; which < 3; ++which) {
      const uint64_t v = RunOn(&in_, prog_, {0, r.rip, r.rsp, r.rbp, rule, which});
      if (v == kStopped) return std::nullopt;
      (which == 0 ? out.rip : which == 1 ? out.rsp : out.rbp) = v;
    }
    return out;
  }
  static uint32_t Rule(unwind::CfaRule cfa, int32_t cfa_offset, unwind::RbpRule rbp = unwind::RbpRule::kSame,
                       int32_t rbp_offset = 0) {
    unwind::UnwindTable t;
    t.entries = {{0, {cfa, rbp, cfa_offset, rbp_offset}}};
    auto p = unwind::PackUnwindTable(t);
    EXPECT_TRUE(p.ok());
    return p.ok() ? p->rows[0].rule : 0;
  }
  static uint64_t Word(uint64_t address) { return 0x1000 + (address - kStack) / 8; }

  Interpreter in_;
  std::vector<bpf_insn> prog_;
};

TEST_F(UnwindStepTest, EachRuleGivesTheCallersRegisters) {
  using unwind::CfaRule;
  using unwind::RbpRule;
  const uint64_t rsp = kStack + 0x10, rbp = kStack + 0x40;
  // rsp + 16, rbp untouched: the return address at CFA - 8 = rsp + 8.
  EXPECT_EQ(Step({0x401000, rsp, rbp}, Rule(CfaRule::kRsp, 16)), (Regs{Word(rsp + 8), rsp + 16, rbp}));
  // rbp + 16, rbp saved at CFA - 16 (a frame after push rbp; mov rbp, rsp).
  EXPECT_EQ(Step({0x401000, rsp, rbp}, Rule(CfaRule::kRbp, 16, RbpRule::kAtCfa, -16)),
            (Regs{Word(rbp + 8), rbp + 16, Word(rbp)}));
  // No table: the frame pointer's rule, the same as above.
  EXPECT_EQ(Step({0x401000, rsp, rbp}, static_cast<uint32_t>(CfaRule::kNoTable)),
            (Regs{Word(rbp + 8), rbp + 16, Word(rbp)}));
  // rsp + 48 with rbp saved at CFA - 24 (pushed after another register).
  EXPECT_EQ(Step({0x401000, rsp, rbp}, Rule(CfaRule::kRsp, 48, RbpRule::kAtCfa, -24)),
            (Regs{Word(rsp + 40), rsp + 48, Word(rsp + 24)}));
  // The caller's rbp not known: 0.
  EXPECT_EQ(Step({0x401000, rsp, rbp}, Rule(CfaRule::kRsp, 8, RbpRule::kUndefined)), (Regs{Word(rsp), rsp + 8, 0}));
}

TEST_F(UnwindStepTest, StopsWithoutGuessing) {
  using unwind::CfaRule;
  const uint64_t rsp = kStack + 0x10;
  EXPECT_EQ(Step({0x401000, rsp, rsp}, static_cast<uint32_t>(CfaRule::kStop)), std::nullopt) << "a stop rule";
  EXPECT_EQ(Step({0x401000, rsp, kStack}, Rule(CfaRule::kRbp, 8)), std::nullopt) << "CFA not above rsp";
  EXPECT_EQ(Step({0x401000, 0x7ffd8000, 0}, Rule(CfaRule::kRsp, 16)), std::nullopt) << "the read faults";
  EXPECT_EQ(Step({0x401000, 0x7ffe0000, 0}, Rule(CfaRule::kRsp, 16)), std::nullopt) << "return address 0";
  // The caller's rbp saved past the stack's end (CFA + 1016: outside the 256 bytes).
  EXPECT_EQ(Step({0x401000, rsp, rsp}, Rule(CfaRule::kRsp, 16, unwind::RbpRule::kAtCfa, 1016)), std::nullopt)
      << "the caller's rbp cannot be read";
}

}  // namespace
}  // namespace tpe::bpf
