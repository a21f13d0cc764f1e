#include "profile/perf_map.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tpe
