#include "profile/learnt_maps.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

namespace tpe {
namespace {

constexpr uint32_t kRX = PROT_READ | PROT_EXEC;

TEST(LearntMapsTest, ExecForkMmapAndExit) {
  LearntMaps t;
  t.OnMmap(10, 0x1000, 0x1000, 0, 8, 1, 77, kRX, "/old/lib.so");  // before the exec: dropped by it
  EXPECT_FALSE(t.Get(10)->complete);
  t.OnExec(10);
  t.OnMmap(10, 0x400000, 0x2000, 0x1000, 8, 1, 100, kRX, "/usr/bin/app");
  t.OnMmap(10, 0x7f0000000000, 0x5000, 0x26000, 8, 1, 200, kRX, "/lib/libc.so.6");
  t.OnMmap(10, 0x7f1000000000, 0x1000, 0, 0, 0, 0, kRX, "//anon");
  auto p = t.Get(10);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->complete);
  ASSERT_EQ(p->mappings.size(), 3u);
  EXPECT_EQ(p->mappings[0].path, "/usr/bin/app");
  EXPECT_EQ(p->mappings[0].FileOffset(0x400010), 0x1010u);
  EXPECT_EQ(p->mappings[0].Identity(), "8:1:100");
  EXPECT_TRUE(p->mappings[0].executable);
  EXPECT_EQ(p->mappings[2].path, "") << "//anon is anonymous";
  // An mmap over part of an old range replaces it.
  t.OnMmap(10, 0x7f0000001000, 0x1000, 0, 8, 1, 300, kRX, "/lib/libz.so");
  EXPECT_EQ(t.Get(10)->mappings[1].path, "/lib/libz.so");
  EXPECT_EQ(t.Get(10)->mappings.size(), 3u);

  const uint64_t g = t.Get(10)->generation;
  EXPECT_GT(g, 0u);
  t.OnFork(10, 10);  // a thread: nothing new
  EXPECT_FALSE(t.Get(11));
  EXPECT_EQ(t.Get(10)->generation, g);
  t.OnFork(10, 11);  // a child process: the parent's mappings, complete
  ASSERT_TRUE(t.Get(11));
  EXPECT_TRUE(t.Get(11)->complete);
  EXPECT_EQ(t.Get(11)->mappings.size(), 3u);
  EXPECT_GT(t.Get(11)->generation, g) << "generations are never reused";
  t.OnFork(999, 12);  // unknown parent: unknown child
  EXPECT_FALSE(t.Get(12));

  t.OnExit(10, 13);  // a thread of 10
  EXPECT_FALSE(t.Get(10)->exited);
  t.OnExit(10, 10);
  EXPECT_TRUE(t.Get(10)->exited);
  EXPECT_EQ(t.Get(10)->mappings.size(), 3u) << "kept after the exit: stacks still name it";
  t.OnExec(10);  // the pid reused by an exec'd process
  EXPECT_FALSE(t.Get(10)->exited);
  EXPECT_GT(t.Get(10)->generation, t.Get(11)->generation);
  EXPECT_TRUE(t.Get(10)->mappings.empty());
}

TEST(LearntMapsTest, BoundedExitedFirst) {
  LearntMaps t(3);
  for (uint32_t pid = 1; pid <= 3; ++pid) t.OnExec(pid);
  t.OnExit(2, 2);
  t.OnExec(4);  // full: the exited 2 goes, not the older live 1
  EXPECT_TRUE(t.Get(1));
  EXPECT_FALSE(t.Get(2));
  EXPECT_TRUE(t.Get(4));
  t.OnExec(5);  // no exited one: the longest known, 1
  EXPECT_FALSE(t.Get(1));
  EXPECT_TRUE(t.Get(3));
  EXPECT_EQ(t.size(), 3u);
  EXPECT_EQ(t.evicted(), 2u);
  // Hostile records: an empty or wrapping range is ignored.
  t.OnMmap(3, 0x1000, 0, 0, 0, 0, 0, kRX, "/x");
  t.OnMmap(3, ~0ull - 5, 100, 0, 0, 0, 0, kRX, "/x");
  EXPECT_TRUE(t.Get(3)->mappings.empty());
}

}  // namespace
}  // namespace tpe
