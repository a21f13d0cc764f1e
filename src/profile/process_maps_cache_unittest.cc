#include "profile/process_maps_cache.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace tpe {
namespace {

constexpr char kTwoMaps[] =
    "55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1835079 /usr/bin/tool\n"
    "55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1835079 /usr/bin/tool\n";
constexpr char kThreeMaps[] =
    "55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1835079 /usr/bin/tool\n"
    "55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1835079 /usr/bin/tool\n"
    "7f1e2a228000-7f1e2a3bd000 r-xp 00028000 103:02 2621462 /usr/lib/libc.so.6\n";

// A fake /proc with one process, 42, whose comm holds ") " (fields count from the last ')').
class ProcessMapsCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tpe_pmc_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::mkdir((root_ + "/42").c_str(), 0755), 0);
    WriteStat(1000);
    WriteMaps(kTwoMaps);
    std::ofstream(root_ + "/prog_a") << "a";
    std::ofstream(root_ + "/prog_b") << "b";
    ASSERT_EQ(::symlink((root_ + "/prog_a").c_str(), (root_ + "/42/exe").c_str()), 0);
  }
  void TearDown() override {
    ::unlink((root_ + "/42/exe").c_str());
    ::unlink((root_ + "/prog_a").c_str());
    ::unlink((root_ + "/prog_b").c_str());
    ::unlink((root_ + "/42/stat").c_str());
    ::unlink((root_ + "/42/maps").c_str());
    ::rmdir((root_ + "/42").c_str());
    ::rmdir(root_.c_str());
  }
  void WriteStat(uint64_t start_ticks) {
    std::ofstream(root_ + "/42/stat") << "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 " << start_ticks
                                      << " 1000000 200 18446744073709551615\n";
  }
  void WriteMaps(const char* text) { std::ofstream(root_ + "/42/maps") << text; }
  std::string root_;
};

TEST_F(ProcessMapsCacheTest, KeepsTheExecutableMappingsOfTheSameProcessAndGeneration) {
  ProcessMapsCache cache(root_);
  auto maps = cache.Get(42, 7, 1'000);
  ASSERT_TRUE(maps);
  ASSERT_EQ(maps->size(), 1u) << "only r-x";
  EXPECT_EQ((*maps)[0].start, 0x55d1c2a01000u);
  EXPECT_EQ(cache.reads(), 1u);

  WriteMaps(kThreeMaps);  // mapped more, but no record said so yet: the kept copy
  EXPECT_EQ(cache.Get(42, 7, 2'000)->size(), 1u);
  EXPECT_EQ(cache.reads(), 1u);
  EXPECT_EQ(cache.Get(42, 8, 3'000)->size(), 2u) << "a new generation reads again";
  EXPECT_EQ(cache.reads(), 2u);

  WriteMaps(kTwoMaps);
  WriteStat(2000);  // the pid reused by another process
  EXPECT_EQ(cache.Get(42, 8, 4'000)->size(), 1u);
  EXPECT_EQ(cache.reads(), 3u);
}

// An exec keeps the start time; whether or not its records arrived, another program is read
// anew.
TEST_F(ProcessMapsCacheTest, AnExecOfAnotherProgramIsReadAgain) {
  ProcessMapsCache cache(root_);
  ASSERT_TRUE(cache.Get(42, 7, 0));
  WriteMaps(kThreeMaps);
  ASSERT_EQ(::unlink((root_ + "/42/exe").c_str()), 0);
  ASSERT_EQ(::symlink((root_ + "/prog_b").c_str(), (root_ + "/42/exe").c_str()), 0);
  EXPECT_EQ(cache.Get(42, 7, 1'000)->size(), 2u);
  EXPECT_EQ(cache.reads(), 2u);
}

TEST_F(ProcessMapsCacheTest, ReadsAgainPastTheMaximumAge) {
  ProcessMapsCache cache(root_, /*max_age_ns=*/1'000);
  ASSERT_TRUE(cache.Get(42, 0, 0));
  ASSERT_TRUE(cache.Get(42, 0, 999));
  EXPECT_EQ(cache.reads(), 1u);
  WriteMaps(kThreeMaps);
  EXPECT_EQ(cache.Get(42, 0, 1'000)->size(), 2u);
  EXPECT_EQ(cache.reads(), 2u);
}

TEST_F(ProcessMapsCacheTest, AnExitedProcessIsNoneAndRetainForgetsIt) {
  ProcessMapsCache cache(root_);
  ASSERT_TRUE(cache.Get(42, 0, 0));
  EXPECT_FALSE(cache.Get(43, 0, 0)) << "no such process";
  EXPECT_EQ(cache.size(), 1u);
  cache.Retain({1, 41, 43});
  EXPECT_EQ(cache.size(), 0u);
  ::unlink((root_ + "/42/stat").c_str());
  EXPECT_FALSE(cache.Get(42, 0, 0)) << "the process exited";
}

// This process through the real /proc: its own code is in a kept executable mapping.
TEST(ProcessMapsCacheRealTest, ThisProcess) {
  ProcessMapsCache cache("/proc");
  auto maps = cache.Get(static_cast<uint32_t>(::getpid()), 0, 0);
  ASSERT_TRUE(maps);
  const ProcMapping* m = MappingAt(*maps, reinterpret_cast<uintptr_t>(&ListProcesses));
  ASSERT_NE(m, nullptr);
  EXPECT_NE(m->path.find("profile_unittest"), std::string::npos) << m->path;
}

}  // namespace
}  // namespace tpe
