#include "process/process_maps.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

namespace tpe {
namespace {

// Lines as a 6.x kernel prints them (fs/proc/task_mmu.c), a path with spaces included.
constexpr char kMaps[] =
    "55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1835079                    /usr/bin/my tool\n"
    "55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1835079                    /usr/bin/my tool\n"
    "55d1c3b2c000-55d1c3b4d000 rw-p 00000000 00:00 0                          [heap]\n"
    "7f1e2a228000-7f1e2a3bd000 r-xp 00028000 103:02 2621462                   /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    "7ffd8a5f4000-7ffd8a5f6000 r-xp 00000000 00:00 0                          [vdso]\n"
    "7ffd8a600000-7ffd8a601000 rw-p 00000000 00:00 0 \n";

TEST(ProcessMapsTest, ParsesEveryField) {
  auto maps = ParseProcMaps(kMaps);
  ASSERT_TRUE(maps.ok()) << maps.status().ToString();
  ASSERT_EQ(maps->size(), 6u);
  const ProcMapping& text = (*maps)[1];
  EXPECT_EQ(text.start, 0x55d1c2a01000u);
  EXPECT_EQ(text.end, 0x55d1c2a02000u);
  EXPECT_EQ(text.offset, 0x1000u);
  EXPECT_TRUE(text.executable);
  EXPECT_EQ(text.path, "/usr/bin/my tool");
  EXPECT_EQ(text.Identity(), "254:1:1835079");
  EXPECT_EQ((*maps)[3].Identity(), "259:2:2621462");
  EXPECT_EQ((*maps)[3].FileOffset(0x7f1e2a228010), 0x28010u);
  EXPECT_EQ((*maps)[4].path, "[vdso]");
  EXPECT_EQ((*maps)[5].path, "");
  EXPECT_FALSE((*maps)[2].executable);
}

TEST(ProcessMapsTest, MappingAtFindsTheHolderOrNone) {
  auto maps = ParseProcMaps(kMaps);
  ASSERT_TRUE(maps.ok());
  const ProcMapping* m = MappingAt(*maps, 0x7f1e2a228000);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
  EXPECT_EQ(MappingAt(*maps, 0x7f1e2a3bd000), nullptr);  // end is exclusive, and a gap follows
  EXPECT_EQ(MappingAt(*maps, 0x1000), nullptr);
}

TEST(ProcessMapsTest, AMalformedLineIsNamed) {
  auto maps = ParseProcMaps("55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1835079 /x\ngarbage\n");
  ASSERT_FALSE(maps.ok());
  EXPECT_NE(maps.status().message().find("line 2"), std::string::npos) << maps.status().message();
}

// This process's own maps: the mapping of this function's code is executable and is this binary.
TEST(ProcessMapsTest, OwnCodeIsInAnExecutableMappingOfThisBinary) {
  std::ifstream f("/proc/self/maps");
  std::stringstream text;
  text << f.rdbuf();
  auto maps = ParseProcMaps(text.str());
  ASSERT_TRUE(maps.ok()) << maps.status().ToString();
  const ProcMapping* m = MappingAt(*maps, reinterpret_cast<uintptr_t>(&ParseProcMaps));
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->executable);
  EXPECT_NE(m->path.find("process_unittest"), std::string::npos) << m->path;
}

// A fake /proc: only whole decimal names are processes, sorted; a name past 32 bits is none.
TEST(ProcessMapsTest, ListProcessesReadsTheNumericEntries) {
  char tmpl[] = "/tmp/tpe_proc_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  for (const char* name : {"4242", "1", "self", "12a", "99999999999", "300", "sys"}) {
    ASSERT_EQ(::mkdir((root + "/" + name).c_str(), 0755), 0) << name;
  }
  auto pids = ListProcesses(root);
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_EQ(*pids, (std::vector<uint32_t>{1, 300, 4242}));
  for (const char* name : {"4242", "1", "self", "12a", "99999999999", "300", "sys"})
    ::rmdir((root + "/" + name).c_str());
  ::rmdir(root.c_str());
  auto missing = ListProcesses(root);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find(root), std::string::npos) << missing.status().message();
}

// The real /proc holds this process.
TEST(ProcessMapsTest, ListProcessesFindsThisProcess) {
  auto pids = ListProcesses("/proc");
  ASSERT_TRUE(pids.ok()) << pids.status().ToString();
  EXPECT_TRUE(std::binary_search(pids->begin(), pids->end(), static_cast<uint32_t>(::getpid())));
}

}  // namespace
}  // namespace tpe
