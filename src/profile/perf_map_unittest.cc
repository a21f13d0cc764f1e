#include "profile/perf_map.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace tpe {
namespace {

// As CPython 3.12 -X perf and Node --perf-basic-prof write them; a partial last line.
constexpr char kMap[] =
    "7f3a1c000000 b py::_run_code:/usr/lib/python3.12/runpy.py\n"
    "0x7f3a1c000100 40 LazyCompile:~handler /srv/app.js:10\n"
    "7f3a1c000200 20 old\n"
    "7f3a1c000200 30 regenerated\n"
    "7f3a1c0003";

TEST(PerfMapTest, NamesJitCodeByItsRange) {
  PerfMap m = PerfMap::Parse(kMap);
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m.malformed(), 1u);
  const PerfMap::Entry* e = m.Lookup(0x7f3a1c00000a);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, "py::_run_code:/usr/lib/python3.12/runpy.py");
  EXPECT_EQ(m.Lookup(0x7f3a1c00000b), nullptr);  // size 0xb: end exclusive
  e = m.Lookup(0x7f3a1c000120);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, "LazyCompile:~handler /srv/app.js:10");
  e = m.Lookup(0x7f3a1c000225);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->name, "regenerated");  // the later line wins
  EXPECT_EQ(m.Lookup(0x1000), nullptr);
}

// More lines than the bound: the newest (last) ones are kept, the others counted.
TEST(PerfMapTest, KeepsTheLastLinesPastTheBound) {
  std::string text;
  for (int i = 0; i < 10; ++i) {
    char line[64];
    std::snprintf(line, sizeof(line), "%x 10 f%d\n", 0x1000 + 16 * i, i);  // starts 0x1000, 0x1010, ...
    text += line;
  }
  PerfMap m = PerfMap::Parse(text, /*max_entries=*/4);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m.truncated(), 6u);
  EXPECT_EQ(m.Lookup(0x1000), nullptr);
  ASSERT_NE(m.Lookup(0x1090), nullptr);
  EXPECT_EQ(m.Lookup(0x1090)->name, "f9");
  ASSERT_NE(m.Lookup(0x1060), nullptr);
  EXPECT_EQ(m.Lookup(0x1060)->name, "f6");
  EXPECT_EQ(m.Lookup(0x1050), nullptr);
  EXPECT_EQ(PerfMap::Parse(text).truncated(), 0u);
}

// memory_bytes counts the entries and the names too long for std::string's own buffer.
TEST(PerfMapTest, MemoryBytesCountsLongNames) {
  PerfMap small = PerfMap::Parse("1000 10 a\n");
  PerfMap large = PerfMap::Parse("1000 10 " + std::string(1000, 'n') + "\n");
  EXPECT_GE(small.memory_bytes(), sizeof(PerfMap::Entry));
  EXPECT_GE(large.memory_bytes(), small.memory_bytes() + 1000);
}

}  // namespace
}  // namespace tpe
