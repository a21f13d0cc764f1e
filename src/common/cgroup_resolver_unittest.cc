#include "common/cgroup_resolver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace tpe {
namespace {

namespace fs = std::filesystem;

TEST(CgroupMountTest, FindsTheCgroup2MountBesideV1AndUnescapes) {
  // This host: cgroup v1 hierarchies and cgroup2 at /sys/fs/cgroup/unified (hybrid).
  const char* hybrid =
      "25 0 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
      "30 25 0:26 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755\n"
      "31 30 0:27 / /sys/fs/cgroup/cpu rw,nosuid shared:10 - cgroup cgroup rw,cpu\n"
      "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
  EXPECT_EQ(FindCgroup2Mount(hybrid), "/sys/fs/cgroup/unified");
  // Pure v2, with optional fields.
  EXPECT_EQ(FindCgroup2Mount("35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev shared:9 master:2 - cgroup2 cgroup2 "
                             "rw,nsdelegate,memory_recursiveprot"),
            "/sys/fs/cgroup");
  EXPECT_EQ(FindCgroup2Mount("1 0 0:1 / /my\\040cg rw - cgroup2 none rw\n"), "/my cg");
  EXPECT_EQ(FindCgroup2Mount("31 30 0:27 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"), "");
  EXPECT_EQ(FindCgroup2Mount(""), "");
  EXPECT_EQ(FindCgroup2Mount("garbage\n- cgroup2\n1 2 3 4\n"), "");
}

// A directory tree standing in for a cgroup2 mount; ids come from an injected map, since a
// tmpfs file handle is not a cgroup id.
class CgroupResolverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = (fs::temp_directory_path() / ("tpe_cgres_" + std::to_string(getpid()))).string();
    fs::remove_all(root_);
    Mk("", 1);
    Mk("/system.slice", 2);
    Mk("/system.slice/ssh.service", 3);
    Mk("/user.slice", 4);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Mk(const std::string& rel, uint64_t id) {
    fs::create_directories(root_ + rel);
    ids_[root_ + rel] = id;
  }
  CgroupResolver Make() {
    return CgroupResolver(
        root_,
        [this](const std::string& p) -> std::optional<uint64_t> {
          ++calls_;
          auto it = ids_.find(p);
          if (it == ids_.end()) return std::nullopt;
          return it->second;
        },
        [this](const std::string& root, uint64_t id) -> std::optional<std::string> {
          EXPECT_EQ(root, root_);
          ++handle_calls_;
          if (!by_handle_) return std::nullopt;
          for (const auto& [path, i] : ids_) {
            if (i == id && fs::exists(path)) return path == root_ ? "/" : path.substr(root_.size());
          }
          return std::nullopt;
        });
  }
  std::string root_;
  std::map<std::string, uint64_t> ids_;
  bool by_handle_ = false;  // whether the injected open_by_handle_at lookup works
  int calls_ = 0;
  int handle_calls_ = 0;
};

TEST_F(CgroupResolverTest, WalksOnceForKnownIdsAndRemovedIdsAreUnknown) {
  CgroupResolver r = Make();
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");
  EXPECT_EQ(r.PathOf(1), "/");
  EXPECT_EQ(r.PathOf(2), "/system.slice");
  EXPECT_EQ(r.PathOf(4), "/user.slice");
  EXPECT_EQ(r.walks(), 1u);
  EXPECT_EQ(calls_, 4);
  EXPECT_EQ(r.PathOf(99), "unknown");  // a fresh walk does not find it: removed before seen
  EXPECT_EQ(r.walks(), 2u);
  EXPECT_EQ(r.PathOf(99), "unknown");  // decided once
  EXPECT_EQ(r.walks(), 2u);
}

// A cgroup created within a second of the last walk rendered first as its id
// ("5"), then as its path; one created and removed between scrapes stayed a bare number. Now an
// unknown id is resolved when first seen, and one that cannot be is "unknown" for good.
TEST_F(CgroupResolverTest, ANewCgroupRendersItsPathAtOnceAndNeverChanges) {
  CgroupResolver r = Make();
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");
  Mk("/tpe_new", 5);
  EXPECT_EQ(r.PathOf(5), "/tpe_new");  // a walk right away, no once-a-second limit
  EXPECT_EQ(r.walks(), 2u);
  Mk("/tpe_gone", 6);
  fs::remove(root_ + "/tpe_gone");  // created and removed between scrapes
  EXPECT_EQ(r.PathOf(6), "unknown");
  Mk("/tpe_gone", 6);  // (ids are never reused; this only checks the verdict is kept)
  EXPECT_EQ(r.PathOf(6), "unknown");
  fs::remove(root_ + "/system.slice/ssh.service");
  EXPECT_EQ(r.PathOf(77), "unknown");                   // a walk that no longer sees ssh.service...
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");  // ...keeps its path for its series
  EXPECT_EQ(r.PathOf(5), "/tpe_new");
}

TEST_F(CgroupResolverTest, OpenByHandleResolvesWithoutAWalk) {
  by_handle_ = true;
  CgroupResolver r = Make();
  Mk("/tpe_direct", 8);
  EXPECT_EQ(r.PathOf(8), "/tpe_direct");
  EXPECT_EQ(r.PathOf(1), "/");
  EXPECT_EQ(r.walks(), 0u);
  EXPECT_EQ(handle_calls_, 2);
  EXPECT_EQ(r.PathOf(8), "/tpe_direct");  // cached
  EXPECT_EQ(handle_calls_, 2);
}

// The real lookup on this host's cgroup2 mount (root may open any handle): this process's own
// cgroup, from /proc/self/cgroup's "0::" line, resolves to the same path by id.
TEST(KernfsCgroupPathTest, ResolvesThisProcesssCgroupById) {
  const std::string mount = DiscoverCgroup2Mount();
  if (mount.empty()) GTEST_SKIP() << "no cgroup2 mount";
  std::ifstream in("/proc/self/cgroup");
  std::string line, self;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) self = line.substr(3);
  }
  if (self.empty()) GTEST_SKIP() << "no cgroup v2 line in /proc/self/cgroup";
  auto id = KernfsCgroupId(mount + (self == "/" ? "" : self));
  ASSERT_TRUE(id.has_value());
  auto path = KernfsCgroupPath(mount, *id);
  if (!path && geteuid() != 0) GTEST_SKIP() << "open_by_handle_at needs CAP_DAC_READ_SEARCH";
  ASSERT_TRUE(path.has_value());
  EXPECT_EQ(*path, self);
  EXPECT_FALSE(KernfsCgroupPath(mount, 0xffffffffffffULL).has_value());
}

TEST(CgroupResolverNoMountTest, EveryIdIsANumber) {
  int calls = 0;
  CgroupResolver r("", [&](const std::string&) -> std::optional<uint64_t> {
    ++calls;
    return 1;
  });
  EXPECT_EQ(r.PathOf(1), "1");
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace tpe
