// CfiTable::CompactRowAt: at every offset of real files' code (this test, libc, python3.11 where
// installed), the compact form says exactly what libdw's rules say when evaluated (the unwinder's
// fast path and its full path agree), the compact form is the common one, and the memo answers
// the same twice (offsets asked in ascending and in descending order: most are answered by the
// range memo of a row asked before).
#include "unwind/cfi_table.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "testing/test_util.h"
#include "unwind/dwarf_expr.h"

namespace tpe::unwind {
namespace {

struct Counts {
  size_t rows = 0, compact = 0;
};

// Registers with distinct values, and a stack whose every 8 bytes hold their own address.
// `descending`: the offsets asked from the last down (a row's range remembered from a later offset
// must hold for the earlier ones too).
void CheckEveryRow(const std::string& path, uint64_t step, bool descending, Counts* out) {
  Counts& counts = *out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0) << path;
  if (fd < 0) return;
  auto table = CfiTable::Read(fd, path);
  ::close(fd);
  EXPECT_TRUE(table.ok()) << table.status().ToString();
  if (!table.ok()) return;
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  Registers regs;
  for (int r = 0; r < kDwarfRegisters; ++r) regs.Set(r, 0x7f0000000000ull + 0x10000ull * static_cast<uint64_t>(r));
  const ReadMemory read = [](uint64_t address, uint64_t* value) {
    *value = address ^ 0x5555;
    return true;
  };
  const uint64_t count = (static_cast<uint64_t>(st.st_size) + step - 1) / step;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t offset = (descending ? count - 1 - i : i) * step;
    CompactRow row;
    const RowForm form = (*table)->CompactRowAt(offset, &row);
    bool signal = false;
    FramePtr frame = (*table)->RowAt(offset, &signal);
    ASSERT_EQ(form == RowForm::kNone, frame == nullptr) << path << " at " << offset;
    if (frame == nullptr) continue;
    ++counts.rows;
    CompactRow again;
    ASSERT_EQ((*table)->CompactRowAt(offset, &again), form);
    if (form != RowForm::kCompact) continue;
    ++counts.compact;
    ASSERT_FALSE(signal);
    Dwarf_Op* ops = nullptr;
    size_t nops = 0;
    ASSERT_EQ(dwarf_frame_cfa(frame.get(), &ops, &nops), 0);
    auto cfa = Evaluate(std::span<const Dwarf_Op>(ops, nops), regs, std::nullopt, read);
    ASSERT_TRUE(cfa.has_value()) << path << " at " << offset;
    const uint64_t compact_cfa = regs.value[row.cfa_register] + static_cast<uint64_t>(int64_t{row.cfa_offset});
    ASSERT_EQ(cfa->value, compact_cfa) << path << " at " << offset;
    for (size_t slot = 0; slot < CompactRow::kSlots; ++slot) {
      const int r = CompactRow::kRegisters[slot];
      Dwarf_Op mem[3];
      ops = nullptr;
      nops = 0;
      const uint64_t at = compact_cfa + static_cast<uint64_t>(int64_t{row.offset[slot]});
      const auto rule = row.rule[slot];
      SCOPED_TRACE(path + " at " + std::to_string(offset) + " register " + std::to_string(r));
      if (dwarf_frame_register(frame.get(), r, mem, &ops, &nops) != 0) {
        ASSERT_EQ(rule, CompactRow::Rule::kUndefined);
        continue;
      }
      if (nops == 0) {
        ASSERT_EQ(rule, ops == nullptr ? CompactRow::Rule::kSame : CompactRow::Rule::kUndefined);
        continue;
      }
      auto v = Evaluate(std::span<const Dwarf_Op>(ops, nops), regs, cfa->value, read);
      ASSERT_TRUE(v.has_value());
      if (v->is_value) {
        ASSERT_EQ(rule, CompactRow::Rule::kIsCfa);
        ASSERT_EQ(v->value, at);
      } else {
        ASSERT_EQ(rule, CompactRow::Rule::kAtCfa);
        ASSERT_EQ(v->value, at);
      }
    }
  }
}

TEST(CfiTableTest, CompactRowsSayWhatLibdwsRulesSay) {
  std::vector<std::pair<std::string, uint64_t>> files = {{"/proc/self/exe", 7}};
  if (const std::string libc = testing::MappedPath("/libc.so.6"); !libc.empty()) files.emplace_back(libc, 5);
  if (::access("/usr/bin/python3.11", R_OK) == 0) files.emplace_back("/usr/bin/python3.11", 17);
  for (const auto& [path, step] : files) {
    for (const bool descending : {false, true}) {
      Counts c;
      CheckEveryRow(path, step, descending, &c);
      ASSERT_FALSE(HasFatalFailure());
      std::printf("%s (%s): %zu rows, %zu compact\n", path.c_str(), descending ? "descending" : "ascending", c.rows,
                  c.compact);
      EXPECT_GT(c.rows, 1000u) << path;
      // The compact form is the common one (the rest: PLT expressions, signal frames).
      EXPECT_GT(c.compact * 100, c.rows * 95) << path;
    }
  }
}

}  // namespace
}  // namespace tpe::unwind
