#include "common/cgroup_resolver.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
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
        [this] { return now_; });
  }
  std::string root_;
  std::map<std::string, uint64_t> ids_;
  uint64_t now_ = 5'000'000'000;
  int calls_ = 0;
};

TEST_F(CgroupResolverTest, WalksOnceForKnownIdsAndRendersUnknownAsNumbers) {
  CgroupResolver r = Make();
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");
  EXPECT_EQ(r.PathOf(1), "/");
  EXPECT_EQ(r.PathOf(2), "/system.slice");
  EXPECT_EQ(r.PathOf(4), "/user.slice");
  EXPECT_EQ(r.walks(), 1u);
  EXPECT_EQ(calls_, 4);
  EXPECT_EQ(r.PathOf(99), "99");  // unknown, and the last walk is less than a second old
  EXPECT_EQ(r.walks(), 1u);
}

TEST_F(CgroupResolverTest, UnknownIdRefreshesAtMostOncePerSecondAndRemovedKeepTheirPath) {
  CgroupResolver r = Make();
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");
  Mk("/tpe_new", 5);
  now_ += 500'000'000;
  EXPECT_EQ(r.PathOf(5), "5");  // rate-limited
  EXPECT_EQ(r.walks(), 1u);
  now_ += 500'000'000;
  EXPECT_EQ(r.PathOf(5), "/tpe_new");
  EXPECT_EQ(r.walks(), 2u);
  fs::remove(root_ + "/system.slice/ssh.service");
  now_ += 2'000'000'000;
  EXPECT_EQ(r.PathOf(77), "77");  // a walk that no longer sees ssh.service...
  EXPECT_EQ(r.walks(), 3u);
  EXPECT_EQ(r.PathOf(3), "/system.slice/ssh.service");  // ...keeps its path for its series
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
