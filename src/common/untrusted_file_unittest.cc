#include "common/untrusted_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

namespace tpe {
namespace {

using Symlinks = UntrustedFileOptions::Symlinks;

constexpr uint64_t k64MiB = uint64_t{64} << 20;

UntrustedFileOptions Options(Symlinks symlinks = Symlinks::kRefuseLast, std::vector<uid_t> owners = {}) {
  UntrustedFileOptions o;
  o.max_bytes = k64MiB;
  o.symlinks = symlinks;
  o.owners = std::move(owners);
  return o;
}

// Runs `fn` in a child process that SIGALRM ends after `seconds` (a guard so that an open that
// blocks fails the test instead of hanging it; not a measure of time). Returns the child's exit
// status, or 128 + the signal that ended it.
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

class UntrustedFileTest : public testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tpe_untrusted_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string dir_;
};

TEST_F(UntrustedFileTest, ReadsARegularFile) {
  const std::string path = Write("map", "1000 10 hello\n");
  FileRefusal why = FileRefusal::kFifo;
  auto f = OpenUntrusted(path, Options(), &why);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(why, FileRefusal::kNone);
  EXPECT_TRUE(S_ISREG(f->st.st_mode));
  EXPECT_EQ(f->st.st_size, 14);
  auto text = ReadUntrusted(*f, k64MiB, path);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "1000 10 hello\n");
}

// A FIFO with no writer: open(2) without O_NONBLOCK would wait for one forever. Refused at
// once, in a child that an alarm ends if it ever blocks.
TEST_F(UntrustedFileTest, AFifoIsRefusedWithoutBlocking) {
  const std::string path = dir_ + "/fifo";
  ASSERT_EQ(::mkfifo(path.c_str(), 0666), 0);
  for (Symlinks s : {Symlinks::kFollow, Symlinks::kRefuseLast, Symlinks::kRefuseAny}) {
    const int rc = RunInChild([&] {
      FileRefusal why = FileRefusal::kNone;
      auto f = OpenUntrusted(path, Options(s), &why);
      if (f.ok()) return 1;
      if (f.status().message().find("is a FIFO") == std::string::npos) return 2;
      return why == FileRefusal::kFifo ? 0 : 3;
    });
    EXPECT_EQ(rc, 0) << "symlink policy " << static_cast<int>(s) << " (142 = SIGALRM: the open blocked)";
  }
}

// A symlink to /dev/zero: not followed by default; followed, the device is refused from its
// O_PATH fstat, never opened (an endless read).
TEST_F(UntrustedFileTest, ASymlinkToDevZeroIsRefused) {
  const std::string path = dir_ + "/zero";
  ASSERT_EQ(::symlink("/dev/zero", path.c_str()), 0);
  FileRefusal why = FileRefusal::kNone;
  auto f = OpenUntrusted(path, Options(Symlinks::kRefuseLast), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kSymlink) << f.status().ToString();
  EXPECT_EQ(f.status().code(), StatusCode::kPermissionDenied);

  f = OpenUntrusted(path, Options(Symlinks::kRefuseAny), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kSymlink) << f.status().ToString();

  f = OpenUntrusted(path, Options(Symlinks::kFollow), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kNotRegular) << f.status().ToString();
  EXPECT_NE(f.status().message().find("a character device"), std::string::npos) << f.status().ToString();
}

// A sparse file of 1 GiB (no disk blocks): refused by its size, nothing read.
TEST_F(UntrustedFileTest, ASparseGigabyteFileIsTooLarge) {
  const std::string path = Write("sparse", "");
  ASSERT_EQ(::truncate(path.c_str(), off_t{1} << 30), 0);
  FileRefusal why = FileRefusal::kNone;
  auto f = OpenUntrusted(path, Options(), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kTooLarge);
  EXPECT_NE(f.status().message().find("1073741824 bytes, more than the 67108864"), std::string::npos)
      << f.status().ToString();
}

// A file that grows past the bound after it was opened: the read stops one byte past it.
TEST_F(UntrustedFileTest, AFileThatGrowsPastTheBoundIsRefusedWhenRead) {
  const std::string path = Write("grows", "0123456789");
  UntrustedFileOptions o = Options();
  o.max_bytes = 16;
  auto f = OpenUntrusted(path, o);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::ofstream(path, std::ios::app) << "0123456789";
  FileRefusal why = FileRefusal::kNone;
  auto text = ReadUntrusted(*f, o.max_bytes, path, &why);
  ASSERT_FALSE(text.ok());
  EXPECT_EQ(why, FileRefusal::kTooLarge);
  EXPECT_NE(text.status().message().find("grew past the 16 bytes"), std::string::npos) << text.status().ToString();
}

TEST_F(UntrustedFileTest, ADirectoryAndASocketAreNotRegular) {
  FileRefusal why = FileRefusal::kNone;
  auto f = OpenUntrusted(dir_, Options(), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kNotRegular);
  EXPECT_NE(f.status().message().find("is a directory"), std::string::npos) << f.status().ToString();

  const std::string sock_path = dir_ + "/sock";
  ScopedFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(sock.valid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", sock_path.c_str());
  ASSERT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  f = OpenUntrusted(sock_path, Options(), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kNotRegular);
  EXPECT_NE(f.status().message().find("is a socket"), std::string::npos) << f.status().ToString();
}

// Owned by another uid than the allowed ones (chown needs root: skipped, saying so, without).
TEST_F(UntrustedFileTest, AFileOfAnotherOwnerIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "chown to another uid needs root";
  const std::string path = Write("owned", "x");
  ASSERT_EQ(::chown(path.c_str(), 12345, 12345), 0);
  FileRefusal why = FileRefusal::kNone;
  auto f = OpenUntrusted(path, Options(Symlinks::kRefuseLast, {0, 1000}), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(why, FileRefusal::kOwner);
  EXPECT_EQ(f.status().message(), path + " is owned by uid 12345; only a file owned by uid 0, 1000 is read");
  f = OpenUntrusted(path, Options(Symlinks::kRefuseLast, {0, 12345}), &why);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(why, FileRefusal::kNone);
}

TEST_F(UntrustedFileTest, AMissingFileIsNotFoundNotARefusal) {
  FileRefusal why = FileRefusal::kFifo;
  auto f = OpenUntrusted(dir_ + "/absent", Options(), &why);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(why, FileRefusal::kNone);
}

// Below a root (a process's /proc/PID/root): a symlink in any component is refused, with
// openat2(2) and with the component walk of older kernels; ".." is refused; a plain path opens.
TEST_F(UntrustedFileTest, BelowARootNoComponentMayBeASymlink) {
  ASSERT_EQ(::mkdir((dir_ + "/root").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_ + "/root/tmp").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((dir_ + "/elsewhere").c_str(), 0755), 0);
  Write("root/tmp/perf-1.map", "1 2 in_root\n");
  Write("elsewhere/perf-1.map", "1 2 elsewhere\n");
  ASSERT_EQ(::symlink("tmp", (dir_ + "/root/link").c_str()), 0);
  ASSERT_EQ(::symlink("tmp/perf-1.map", (dir_ + "/root/last").c_str()), 0);
  ScopedFd root(::open((dir_ + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  for (bool no_openat2 : {false, true}) {
    SCOPED_TRACE(no_openat2 ? "component walk" : "openat2");
    UntrustedFileOptions o = Options(Symlinks::kRefuseAny);
    o.force_no_openat2 = no_openat2;
    FileRefusal why = FileRefusal::kNone;
    auto f = OpenUntrustedInRoot(root.get(), "/tmp/perf-1.map", o, "root/tmp/perf-1.map", &why);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_EQ(*ReadUntrusted(*f, o.max_bytes, "x"), "1 2 in_root\n");

    f = OpenUntrustedInRoot(root.get(), "link/perf-1.map", o, "root/link/perf-1.map", &why);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(why, FileRefusal::kSymlink) << f.status().ToString();

    f = OpenUntrustedInRoot(root.get(), "last", o, "root/last", &why);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(why, FileRefusal::kSymlink) << f.status().ToString();

    f = OpenUntrustedInRoot(root.get(), "tmp/../../elsewhere/perf-1.map", o, "root/..", &why);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(why, FileRefusal::kNone);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);

    f = OpenUntrustedInRoot(root.get(), "", o, "root", &why);
    ASSERT_FALSE(f.ok());
    EXPECT_EQ(why, FileRefusal::kNotRegular) << f.status().ToString();
  }
  // The last component only: an intermediate symlink is followed, the last is not.
  FileRefusal why = FileRefusal::kNone;
  auto f = OpenUntrustedInRoot(root.get(), "link/perf-1.map", Options(Symlinks::kRefuseLast), "x", &why);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  f = OpenUntrustedInRoot(root.get(), "last", Options(Symlinks::kRefuseLast), "x", &why);
  EXPECT_EQ(why, FileRefusal::kSymlink);
}

// Followed symlinks below a root resolve inside it (openat2 RESOLVE_IN_ROOT): an absolute
// symlink in a container names the container's file, not the host's.
TEST_F(UntrustedFileTest, BelowARootAnAbsoluteSymlinkStaysInside) {
  ASSERT_EQ(std::system(("mkdir -p " + dir_ + "/root" + dir_).c_str()), 0);  // the same path inside the root
  Write("host.map", "host\n");
  Write("root" + dir_ + "/host.map", "container\n");
  ASSERT_EQ(::symlink((dir_ + "/host.map").c_str(), (dir_ + "/root/abs").c_str()), 0);
  ScopedFd root(::open((dir_ + "/root").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root.valid());
  auto f = OpenUntrustedInRoot(root.get(), "abs", Options(Symlinks::kFollow), "root/abs");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*ReadUntrusted(*f, k64MiB, "root/abs"), "container\n");
}

TEST(FileRefusalCountsTest, CountsEachReason) {
  FileRefusalCounts counts("perf_map");
  counts.Add(FileRefusal::kFifo, InvalidArgument("a"));
  counts.Add(FileRefusal::kFifo, InvalidArgument("b"));
  counts.Add(FileRefusal::kOwner, PermissionDenied("c"));
  counts.Add(FileRefusal::kNone, Status::Ok());
  EXPECT_EQ(counts.Get(FileRefusal::kFifo), 2u);
  EXPECT_EQ(counts.Get(FileRefusal::kOwner), 1u);
  EXPECT_EQ(counts.Get(FileRefusal::kTooLarge), 0u);
  EXPECT_EQ(counts.Total(), 3u);
  EXPECT_STREQ(FileRefusalName(FileRefusal::kNotRegular), "not_regular");
  EXPECT_STREQ(FileRefusalName(FileRefusal::kTooLarge), "too_large");
}

}  // namespace
}  // namespace tpe
