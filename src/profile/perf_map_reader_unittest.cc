#include "profile/perf_map_reader.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace tpe {
namespace {

// Runs `fn` in a child that SIGALRM ends after `seconds`: a guard so that a Get that blocks (a
// FIFO opened without O_NONBLOCK) fails the test instead of hanging it. Returns the exit status,
// or 128 + the signal.
int RunInChild(const std::function<int()>& fn, unsigned seconds = 20) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(seconds);
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

constexpr char kMap[] = "7f0000001000 20 LazyCompile:~handler /srv/app.js:10\n7f0000002000 10 Builtin:Call\n";

// A fake /proc: process 42 (pid 7 in its own pid namespace, euid 1000) whose root is
// ROOT/42/root, a directory standing for its mount namespace. InHostPidNamespace() makes it an
// ordinary process (pid 42 everywhere: /tmp/perf-42.map).
class PerfMapCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tpe_pmr_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::mkdir((root_ + "/42").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/42/root").c_str(), 0755), 0);
    ASSERT_EQ(::mkdir((root_ + "/42/root/tmp").c_str(), 01777), 0);
    WriteStatus(42, 1000);
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }

  void InHostPidNamespace() {
    nstgid_ = "42";
    ns_pid_ = "42";
    WriteStatus(42, 1000);
  }
  void WriteStatus(int pid, uid_t euid) { WriteStatus(pid, pid == 42 ? nstgid_ : "", euid); }
  void WriteStatus(int pid, const std::string& nstgid, uid_t euid) {
    std::ofstream(root_ + "/" + std::to_string(pid) + "/status")
        << "Name:\tnode\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t" << pid << "\nNgid:\t0\nPid:\t" << pid
        << "\nPPid:\t1\nUid:\t" << euid + 1 << "\t" << euid << "\t" << euid << "\t" << euid
        << "\nGid:\t100\t100\t100\t100\n"
        << (nstgid.empty() ? "" : "NStgid:\t" + nstgid + "\nNSpid:\t" + nstgid + "\n") << "VmPeak:\t  1000 kB\n";
  }
  // Writes the map file of process 42 (as its runtime would see it: /tmp/perf-7.map), owned by `uid`.
  std::string WriteMap(const std::string& text, uid_t uid = 1000, const std::string& name = "") {
    const std::string path = name.empty() ? MapPath() : root_ + "/42/root/tmp/" + name;
    std::ofstream(path) << text;
    if (::geteuid() == 0) {
      EXPECT_EQ(::chown(path.c_str(), uid, uid), 0);
    }
    return path;
  }
  std::string MapPath() const { return root_ + "/42/root/tmp/perf-" + ns_pid_ + ".map"; }
  std::string root_;
  std::string nstgid_ = "42\t7";  // the NStgid line: host pid, pid in its namespace
  std::string ns_pid_ = "7";
};

#define REQUIRE_ROOT() \
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: the test gives files to other uids (chown)"

TEST(ParseProcessIdentityTest, TheInnermostPidAndTheEffectiveUid) {
  auto id = ParseProcessIdentity("Tgid:\t4242\nUid:\t1000\t0\t0\t0\nNStgid:\t4242\t17\t5\n", "s");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->ns_tgid, 5u);
  EXPECT_EQ(id->euid, 0u);
  // A kernel before 4.1 has no NStgid/NSpid: the Tgid.
  id = ParseProcessIdentity("Tgid:\t4242\nUid:\t1000\t1000\t1000\t1000\n", "s");
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->ns_tgid, 4242u);
  EXPECT_EQ(id->euid, 1000u);
  id = ParseProcessIdentity("Tgid:\t4242\n", "/proc/4242/status");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("/proc/4242/status: no Uid line"), std::string::npos);
}

// The map of a process in a container: named by its pid there (7), in its own /tmp; read once
// while it is unchanged, again when the runtime appends (the old version dropped).
TEST_F(PerfMapCacheTest, ReadsTheMapNamedByTheNamespacePidOnceUntilItChanges) {
  REQUIRE_ROOT();
  WriteMap(kMap);
  WriteMap("7f0000009000 10 host_pid_name\n", 1000, "perf-42.map");  // the host pid: not this process's name
  PerfMapCache cache(root_);
  Status why;
  auto map = cache.Get(42, &why);
  ASSERT_NE(map, nullptr) << why.ToString();
  EXPECT_EQ(map->size(), 2u);
  ASSERT_NE(map->Lookup(0x7f0000001005), nullptr);
  EXPECT_EQ(map->Lookup(0x7f0000001005)->name, "LazyCompile:~handler /srv/app.js:10");
  EXPECT_EQ(map->Lookup(0x7f0000009000), nullptr);

  EXPECT_EQ(cache.Get(42).get(), map.get()) << "the same file: the cached map";
  EXPECT_EQ(cache.stats().reads, 1u);
  EXPECT_EQ(cache.stats().hits, 1u);

  std::ofstream(MapPath(), std::ios::app) << "7f0000003000 10 Appended\n";
  auto again = cache.Get(42);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->size(), 3u);
  EXPECT_EQ(cache.stats().reads, 2u);
  EXPECT_EQ(cache.stats().replaced, 1u);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.memory_bytes(), again->memory_bytes());
  EXPECT_EQ(cache.refusals().Total(), 0u);
}

// A FIFO where the map should be: open(2) would wait for a writer forever (HTTP workers stuck,
// SIGTERM ignored). Refused at once, in a child an alarm ends if it ever blocks.
TEST_F(PerfMapCacheTest, AFifoIsRefusedWithoutBlocking) {
  InHostPidNamespace();
  ASSERT_EQ(::mkfifo(MapPath().c_str(), 0666), 0);
  const int rc = RunInChild([&] {
    PerfMapCache cache(root_);
    Status why;
    if (cache.Get(42, &why) != nullptr) return 1;
    if (cache.refusals().Get(FileRefusal::kFifo) != 1 || cache.refusals().Total() != 1) return 2;
    return why.message().find("is a FIFO") != std::string::npos ? 0 : 3;
  });
  EXPECT_EQ(rc, 0) << "142 = SIGALRM: Get blocked on the FIFO";
}

// A symlink to /dev/zero (an endless read), or a /tmp that is a symlink elsewhere.
TEST_F(PerfMapCacheTest, SymlinksAreRefusedInAnyComponent) {
  InHostPidNamespace();
  ASSERT_EQ(::symlink("/dev/zero", MapPath().c_str()), 0);
  PerfMapCache cache(root_);
  Status why;
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kSymlink), 1u) << why.ToString();

  ASSERT_EQ(::unlink(MapPath().c_str()), 0);
  ASSERT_EQ(::rmdir((root_ + "/42/root/tmp").c_str()), 0);
  ASSERT_EQ(::mkdir((root_ + "/elsewhere").c_str(), 0755), 0);
  std::ofstream(root_ + "/elsewhere/perf-42.map") << kMap;
  ASSERT_EQ(::symlink((root_ + "/elsewhere").c_str(), (root_ + "/42/root/tmp").c_str()), 0);
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kSymlink), 2u) << why.ToString();
  EXPECT_EQ(cache.stats().reads, 0u);
}

// A sparse file of 1 GiB: refused by its size, nothing read (it took the daemon to 8.4 GB in 5
// renders when it was read whole).
TEST_F(PerfMapCacheTest, ASparseGigabyteMapIsRefusedUnread) {
  REQUIRE_ROOT();
  InHostPidNamespace();
  WriteMap("");
  ASSERT_EQ(::truncate(MapPath().c_str(), off_t{1} << 30), 0);
  PerfMapCache cache(root_);
  Status why;
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kTooLarge), 1u) << why.ToString();
  EXPECT_NE(why.message().find("1073741824 bytes, more than the 67108864"), std::string::npos) << why.ToString();
  EXPECT_EQ(cache.stats().reads, 0u);
}

// perf's rule: the map must belong to the process's user or to root. Another user's file planted
// for a root process (or for this user's) names nothing.
TEST_F(PerfMapCacheTest, AMapOfAnotherOwnerIsRefused) {
  REQUIRE_ROOT();
  InHostPidNamespace();
  WriteMap(kMap, /*uid=*/2000);
  PerfMapCache cache(root_);
  Status why;
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kOwner), 1u);
  EXPECT_NE(why.message().find("is owned by uid 2000; only a file owned by uid 1000, 0 is read"), std::string::npos)
      << why.ToString();

  WriteStatus(42, 0);  // a root process; the map still the user's
  ::chown(MapPath().c_str(), 1000, 1000);
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kOwner), 2u);
  EXPECT_NE(why.message().find("owned by uid 1000; only a file owned by uid 0 is read"), std::string::npos)
      << why.ToString();

  ::chown(MapPath().c_str(), 0, 0);  // root's own map: read
  EXPECT_NE(cache.Get(42, &why), nullptr) << why.ToString();
  WriteStatus(42, 1000);  // a user's process, a map root wrote: read
  EXPECT_NE(cache.Get(42, &why), nullptr) << why.ToString();
  EXPECT_EQ(cache.refusals().Total(), 2u);
}

TEST_F(PerfMapCacheTest, ADirectoryIsNotRegular) {
  ASSERT_EQ(::mkdir(MapPath().c_str(), 0755), 0);
  PerfMapCache cache(root_);
  EXPECT_EQ(cache.Get(42), nullptr);
  EXPECT_EQ(cache.refusals().Get(FileRefusal::kNotRegular), 1u);
}

// No map file, or no such process: the common case, neither counted nor an error to log.
TEST_F(PerfMapCacheTest, NoFileOrNoProcessIsNotARefusal) {
  PerfMapCache cache(root_);
  Status why;
  EXPECT_EQ(cache.Get(42, &why), nullptr);
  EXPECT_EQ(why.code(), StatusCode::kNotFound) << why.ToString();
  EXPECT_EQ(cache.Get(43, &why), nullptr);
  EXPECT_EQ(why.code(), StatusCode::kNotFound) << why.ToString();
  EXPECT_EQ(cache.refusals().Total(), 0u);
  EXPECT_EQ(cache.stats().unreadable, 0u);
}

// Bounded in bytes: a second process's map pushes the first one out when both do not fit.
TEST_F(PerfMapCacheTest, TheCacheIsBoundedInBytes) {
  REQUIRE_ROOT();
  WriteMap(kMap);
  ASSERT_EQ(::mkdir((root_ + "/43").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/43/root").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((root_ + "/43/root/tmp").c_str(), 0755), 0);
  WriteStatus(43, "", 1000);  // no NStgid (a kernel before 4.1): named by its Tgid
  {
    std::ofstream f(root_ + "/43/root/tmp/perf-43.map");
    f << kMap;
  }
  ASSERT_EQ(::chown((root_ + "/43/root/tmp/perf-43.map").c_str(), 1000, 1000), 0);
  const uint64_t one = PerfMapCache(root_).Get(42)->memory_bytes();
  PerfMapCache::Options o;
  o.max_cache_bytes = one + one / 2;
  PerfMapCache cache(root_, o);
  ASSERT_NE(cache.Get(42), nullptr);
  ASSERT_NE(cache.Get(43), nullptr);
  EXPECT_EQ(cache.size(), 1u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_LE(cache.memory_bytes(), o.max_cache_bytes);
  ASSERT_NE(cache.Get(42), nullptr);
  EXPECT_EQ(cache.stats().reads, 3u) << "42 was evicted, and read again";
}

// Many threads asking for two processes' maps: every Get gets a map, each a read or a hit.
TEST_F(PerfMapCacheTest, GetIsThreadSafe) {
  REQUIRE_ROOT();
  WriteMap(kMap);
  PerfMapCache cache(root_);
  std::vector<std::thread> threads;
  std::atomic<int> found{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) found += cache.Get(42) != nullptr;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(found.load(), 800);
  const auto s = cache.stats();
  EXPECT_EQ(s.reads + s.hits, 800u);
  EXPECT_EQ(cache.size(), 1u);
}

// Through the real /proc: this process's own map in /tmp, reached through /proc/self's root
// magic link and named by its pid in its own namespace.
TEST(PerfMapCacheRealProcTest, ReadsThisProcessMap) {
  auto status = std::ifstream("/proc/self/status");
  const std::string status_text((std::istreambuf_iterator<char>(status)), std::istreambuf_iterator<char>());
  auto id = ParseProcessIdentity(status_text, "/proc/self/status");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::string path = "/tmp/perf-" + std::to_string(id->ns_tgid) + ".map";
  std::ofstream(path) << kMap;
  PerfMapCache cache("/proc");
  Status why;
  auto map = cache.Get(static_cast<uint32_t>(::getpid()), &why);
  ::unlink(path.c_str());
  ASSERT_NE(map, nullptr) << why.ToString();
  EXPECT_EQ(map->size(), 2u);
}

}  // namespace
}  // namespace tpe
