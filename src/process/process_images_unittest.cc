#include "process/process_images.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace tpe {
namespace {

constexpr uint32_t kRX = PROT_READ | PROT_EXEC;

// The frames of `ips` with pid's current image (Normalize) or the one of `at` (NormalizeAt).
std::vector<UserFrame> Now(ProcessImages* t, uint32_t pid, std::vector<uint64_t> ips) {
  std::vector<UserFrame> out;
  t->Normalize(pid, ips, 1, &out);
  return out;
}
std::vector<UserFrame> At(ProcessImages* t, uint32_t pid, uint64_t at, std::vector<uint64_t> ips) {
  std::vector<UserFrame> out;
  t->NormalizeAt(pid, at, ips, 1, &out);
  return out;
}

// A proc root with no processes: nothing is read from it.
ProcessImages::Options NoProc() { return {.proc_root = "/nonexistent-proc"}; }

TEST(ProcessImagesTest, FramesAreFileAndOffsetOfTheImageOfTheirTime) {
  MappedFiles files;
  ProcessImages t(&files, NoProc());
  t.OnExec(100, 10);
  t.OnMmap(101, 10, 0x400000, 0x2000, 0x1000, 8, 1, 100, kRX, "/usr/bin/app");
  t.OnMmap(102, 10, 0x7f0000000000, 0x5000, 0x26000, 8, 1, 200, kRX, "/lib/libc.so.6");
  t.OnMmap(103, 10, 0x7f1000000000, 0x1000, 0, 0, 0, 0, kRX, "//anon");
  t.OnMmap(104, 10, 0x500000, 0x1000, 0, 8, 1, 300, PROT_READ, "/data");  // not executable: not kept
  // The leaf at its address; a return address looked up at ip - 1 (one past the end of app).
  auto f = Now(&t, 10, {0x400010, 0x402000, 0x7f0000000010, 0x7f1000000020, 0x10});
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(f[0].offset, 0x1010u);
  EXPECT_EQ(f[1].offset, 0x3000u);
  EXPECT_EQ(f[1].file, f[0].file) << "a return address one past the mapping is its call's";
  EXPECT_EQ(files.Get(f[0].file)->path, "/usr/bin/app");
  EXPECT_EQ(files.Get(f[2].file)->path, "/lib/libc.so.6");
  EXPECT_EQ(f[2].offset, 0x26010u);
  EXPECT_EQ(files.Get(f[3].file)->kind, MappedFile::Kind::kAnonymous);
  EXPECT_EQ(f[3].offset, 0x7f1000000020u) << "JIT code keeps its address (perf maps name addresses)";
  EXPECT_EQ(f[4].file, kNoFile);

  // exec: the same addresses now lie in another program; the old frames keep the old file.
  t.OnExec(200, 10);
  t.OnMmap(201, 10, 0x400000, 0x2000, 0, 8, 1, 999, kRX, "/usr/bin/other");
  auto g = Now(&t, 10, {0x400010});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(files.Get(g[0].file)->path, "/usr/bin/other");
  EXPECT_EQ(g[0].offset, 0x10u);
  // By time (the bpf engine's stamps): before the exec, the first image; after, the second.
  EXPECT_EQ(files.Get(At(&t, 10, 150, {0x400010})[0].file)->path, "/usr/bin/app");
  EXPECT_EQ(files.Get(At(&t, 10, 200, {0x400010})[0].file)->path, "/usr/bin/other");
  EXPECT_EQ(At(&t, 10, 50, {0x400010})[0].file, kNoFile) << "before anything learnt: nothing, not a later image";
}

TEST(ProcessImagesTest, ForkCopiesExitEndsAndAReusedPidIsAnotherImage) {
  MappedFiles files;
  ProcessImages t(&files, NoProc());
  t.OnExec(100, 10);
  t.OnMmap(101, 10, 0x400000, 0x1000, 0, 8, 1, 100, kRX, "/usr/bin/app");
  t.OnFork(110, 10, 10);  // a thread: nothing new
  EXPECT_FALSE(t.Current(11));
  t.OnFork(120, 10, 11);  // a child process: the parent's mappings, complete
  ASSERT_TRUE(t.Current(11));
  EXPECT_TRUE(t.Current(11)->complete);
  EXPECT_EQ(t.Current(11)->mappings, 1u);
  t.OnExit(130, 11, 12);  // a thread of 11
  EXPECT_FALSE(t.Current(11)->ended);
  t.OnExit(140, 11, 11);
  EXPECT_TRUE(t.Current(11)->ended);
  const FileId app = Now(&t, 11, {0x400000})[0].file;
  EXPECT_EQ(files.Get(app)->path, "/usr/bin/app") << "an exited process is named as it was";
  // Pid 11 reused by a child of another process: a new image; the old one by its time.
  t.OnExec(150, 20);
  t.OnMmap(151, 20, 0x400000, 0x1000, 0, 8, 1, 500, kRX, "/usr/bin/server");
  t.OnFork(160, 20, 11);
  EXPECT_EQ(files.Get(Now(&t, 11, {0x400000})[0].file)->path, "/usr/bin/server");
  EXPECT_EQ(At(&t, 11, 125, {0x400000})[0].file, app);
}

TEST(ProcessImagesTest, AnMmapOverAnOldRangeReplacesItAndHostileRecordsAreIgnored) {
  MappedFiles files;
  ProcessImages t(&files, NoProc());
  t.OnExec(1, 3);
  t.OnMmap(2, 3, 0x7f0000000000, 0x5000, 0, 8, 1, 200, kRX, "/lib/libc.so.6");
  t.OnMmap(3, 3, 0x7f0000001000, 0x1000, 0, 8, 1, 300, kRX, "/lib/libz.so");
  EXPECT_EQ(files.Get(Now(&t, 3, {0x7f0000001010})[0].file)->path, "/lib/libz.so");
  EXPECT_EQ(Now(&t, 3, {0x7f0000000010})[0].file, kNoFile) << "what it overlapped is gone";
  t.OnMmap(4, 3, 0x1000, 0, 0, 0, 0, 0, kRX, "/x");
  t.OnMmap(5, 3, ~0ull - 5, 100, 0, 0, 0, 0, kRX, "/x");
  t.OnMmap(6, 0, 0x1000, 0x1000, 0, 0, 0, 0, kRX, "/x");  // pid 0: outside our pid namespace
  EXPECT_EQ(t.Current(3)->mappings, 1u);
  EXPECT_FALSE(t.Current(0));
  EXPECT_EQ(Now(&t, 0, {0x1000})[0].file, kNoFile);
}

// Thousands of short processes must not push out the image a profile's samples are in (they did:
// 4,200 runs of /bin/true left the profiled program's frames unnamed). Ended images no sample used
// go first.
TEST(ProcessImagesTest, BoundedSampledImagesOutliveUnsampledOnes) {
  MappedFiles files;
  ProcessImages::Options o = NoProc();
  o.max_bytes = 64 * 1024;
  ProcessImages t(&files, o);
  t.OnExec(1, 7);  // the trigger
  t.OnMmap(2, 7, 0x400000, 0x1000, 0, 8, 1, 100, kRX, "/usr/bin/trigger");
  ASSERT_NE(Now(&t, 7, {0x400000})[0].file, kNoFile);  // a sample: the image is used
  t.OnExit(3, 7, 7);
  uint32_t pid = 100;
  for (uint64_t time = 10; time < 10 + 4200; ++time, ++pid) {  // 4,200 runs of /bin/true
    t.OnFork(time, 1, pid);
    t.OnExec(time, pid);
    for (uint64_t i = 0; i < 4; ++i) {
      t.OnMmap(time, pid, 0x400000 + i * 0x100000, 0x1000, 0, 8, 1, 10 + i, kRX, "/bin/true");
    }
    t.OnExit(time, pid, pid);
  }
  const auto s = t.stats();
  EXPECT_GT(s.evicted, 1000u);
  EXPECT_LE(s.bytes, o.max_bytes);
  EXPECT_EQ(files.Get(At(&t, 7, 1, {0x400000})[0].file)->path, "/usr/bin/trigger");
}

// A fake /proc: a process that predates the daemon is read from its maps when a sample first
// needs it, and its children, forked without exec, are named after they exited.
class ProcessImagesProcTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tpe_pi_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    ASSERT_EQ(::mkdir((root_ + "/42").c_str(), 0755), 0);
    std::ofstream(root_ + "/42/maps") << "55d1c2a00000-55d1c2a01000 r--p 00000000 fe:01 1835079 /usr/bin/server\n"
                                         "55d1c2a01000-55d1c2a02000 r-xp 00001000 fe:01 1835079 /usr/bin/server\n";
  }
  void TearDown() override {
    ::unlink((root_ + "/42/maps").c_str());
    ::rmdir((root_ + "/42").c_str());
    ::rmdir(root_.c_str());
  }
  std::string root_;
};

TEST_F(ProcessImagesProcTest, APreForkingServerOlderThanTheDaemon) {
  MappedFiles files;
  ProcessImages t(&files, {.proc_root = root_});
  t.OnFork(1000, 42, 43);  // the old server forks a worker: its maps read now
  EXPECT_EQ(t.stats().proc_reads, 1u);
  t.OnExit(1100, 43, 43);
  auto f = Now(&t, 43, {0x55d1c2a01010});
  ASSERT_EQ(f.size(), 1u);
  ASSERT_NE(f[0].file, kNoFile);
  EXPECT_EQ(files.Get(f[0].file)->path, "/usr/bin/server");
  EXPECT_EQ(f[0].offset, 0x1010u);
  // The server itself, first seen by a sample.
  EXPECT_EQ(Now(&t, 42, {0x55d1c2a01010})[0].file, f[0].file);
  EXPECT_EQ(t.stats().proc_reads, 1u) << "read once";
  // A process the fake /proc does not hold: read once, then not again within a second.
  EXPECT_EQ(Now(&t, 77, {0x1000})[0].file, kNoFile);
  EXPECT_EQ(Now(&t, 77, {0x1000})[0].file, kNoFile);
  EXPECT_EQ(t.stats().proc_reads, 2u);
}

// After a full ring (records lost, an exec among them perhaps), a process's image is read again
// from /proc; a process gone by then has no frames rather than its old program's.
TEST_F(ProcessImagesProcTest, AfterALossImagesAreReadAgainOrUnused) {
  MappedFiles files;
  ProcessImages t(&files, {.proc_root = root_});
  t.OnExec(100, 42);  // known from records: the old program, at the range /proc now shows server
  t.OnMmap(101, 42, 0x55d1c2a01000, 0x1000, 0x1000, 8, 1, 5, kRX, "/usr/bin/old");
  t.OnExec(100, 50);  // another one, which exits unseen (its EXIT record lost)
  t.OnMmap(101, 50, 0x400000, 0x1000, 0, 8, 1, 6, kRX, "/usr/bin/gone");
  EXPECT_EQ(files.Get(Now(&t, 42, {0x55d1c2a01010})[0].file)->path, "/usr/bin/old");
  EXPECT_EQ(files.Get(Now(&t, 50, {0x400010})[0].file)->path, "/usr/bin/gone");
  EXPECT_EQ(t.stats().proc_reads, 0u);
  t.OnLost();
  auto f = Now(&t, 42, {0x55d1c2a01010});
  ASSERT_NE(f[0].file, kNoFile);
  EXPECT_EQ(files.Get(f[0].file)->path, "/usr/bin/server") << "read again: what it runs now";
  EXPECT_EQ(Now(&t, 50, {0x400010})[0].file, kNoFile) << "gone from /proc: not its old program";
  EXPECT_EQ(t.stats().proc_reads, 2u);
  EXPECT_EQ(Now(&t, 42, {0x55d1c2a01010})[0].file, f[0].file);
  EXPECT_EQ(t.stats().proc_reads, 2u) << "once per loss";
}

// A file overwritten in place (same inode) after its process exited is another identity.
TEST(MappedFilesTest, IdentityIncludesContentAndTheTableIsBounded) {
  MappedFiles files(2);
  MappedFile a;
  a.path = "/usr/bin/app";
  a.inode = 5;
  a.stat_known = true;
  a.size = 100;
  a.mtime_ns = 1;
  MappedFile b = a;
  b.mtime_ns = 2;
  const FileId ia = files.Intern(a);
  EXPECT_EQ(files.Intern(a), ia);
  const FileId ib = files.Intern(b);
  EXPECT_NE(ib, ia);
  MappedFile c = a;
  c.path = "/other";
  EXPECT_EQ(files.Intern(c), kNoFile) << "full";
  EXPECT_EQ(files.refused(), 1u);
  EXPECT_EQ(files.Get(ib)->mtime_ns, 2);
  EXPECT_FALSE(files.Get(kNoFile));
  EXPECT_FALSE(files.Get(99));
}

}  // namespace
}  // namespace tpe
