// Kernel tier: the label decoders that need the running system — "errno" on a syscall's return
// value, "blkdev" on a block request's dev_t, "ksym" on a work item's function pointer — through
// the real pipeline. Needs root; skips with the reason otherwise (fails under TPE_REQUIRE_KERNEL=1).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "kernel/kernel_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

using testing::FindMetric;
using testing::FindSeries;
using testing::RunPipeline;

// Runs `cmd` with /bin/sh and returns its trimmed stdout, or nullopt when it fails.
std::optional<std::string> Run(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  int status = ::pclose(p);
  if (status != 0) return std::nullopt;
  return Trim(out);
}

constexpr int kFailedOpens = 500;

TEST(DecodersKernelTest, ErrnoNamesEveryFailedOpenatOfAChildExactly) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(go[1]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    for (int i = 0; i < kFailedOpens; ++i) {
      if (syscall(SYS_openat, AT_FDCWD, "/nonexistent/tpe", O_RDONLY) != -1) _exit(3);
    }
    _exit(0);
  }
  close(go[0]);
  const std::string p = std::to_string(pid);
  // 500 samples of ~40 bytes fit the 1 MiB ring: nothing can be lost, so the count is exact.
  auto snap = RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "openat_results_total", "type": "counter", "event": "syscalls:sys_exit_openat",
     "filter": "common_pid == )" +
                              p + R"(", "labels": [{"name": "errno", "field": "ret", "decode": "errno"}]}]})",
                          [&] {
                            EXPECT_EQ(write(go[1], "x", 1), 1);
                            close(go[1]);
                            int status = 0;
                            EXPECT_EQ(waitpid(pid, &status, 0), pid);
                            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
                          });
  const MetricSnapshot* m = FindMetric(snap, "openat_results_total");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  const SeriesSnapshot* enoent = FindSeries(snap, "openat_results_total", {{"errno", "ENOENT"}});
  ASSERT_NE(enoent, nullptr);
  EXPECT_EQ(enoent->value, kFailedOpens);
}

// A file-backed loop device, detached (and its file removed) on every path out of the test.
class LoopDevice {
 public:
  // Empty path() and a reason in `why` when no loop device can be made here.
  explicit LoopDevice(std::string* why) {
    char tmpl[] = "/tmp/tpe_loop_XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) {
      *why = "mkstemp failed";
      return;
    }
    backing_ = tmpl;
    bool sized = ftruncate(fd, 8 << 20) == 0;
    close(fd);
    if (!sized) {
      *why = "cannot size " + backing_;
      return;
    }
    if (access("/usr/sbin/losetup", X_OK) != 0 && access("/sbin/losetup", X_OK) != 0 && !Run("command -v losetup")) {
      *why = "losetup (util-linux) is not installed";
      return;
    }
    auto dev = Run("losetup -f --show " + backing_ + " 2>/dev/null");
    if (!dev || dev->rfind("/dev/loop", 0) != 0) {
      *why = "losetup -f --show " + backing_ + " failed (no loop driver or no free loop device?)";
      return;
    }
    path_ = *dev;
  }
  ~LoopDevice() {
    if (!path_.empty()) Run("losetup -d " + path_);
    if (!backing_.empty()) unlink(backing_.c_str());
  }
  const std::string& path() const { return path_; }
  std::string name() const { return path_.substr(path_.rfind('/') + 1); }

 private:
  std::string backing_;
  std::string path_;
};

constexpr int kDirectReads = 64;

TEST(DecodersKernelTest, BlkdevNamesTheLoopDeviceOfDirectReads) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  std::string why;
  LoopDevice loop(&why);
  if (loop.path().empty()) {
    if (::tpe::testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: " << why;
    GTEST_SKIP() << why;
  }
  struct stat st {};
  ASSERT_EQ(stat(loop.path().c_str(), &st), 0) << loop.path();
  // The kernel's dev_t encoding (include/linux/kdev_t.h), as block tracepoints carry it.
  const uint64_t kdev = static_cast<uint64_t>(major(st.st_rdev)) << 20 | minor(st.st_rdev);
  void* buf = nullptr;
  ASSERT_EQ(posix_memalign(&buf, 4096, 4096), 0);
  auto snap = RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "loop_requests_total", "type": "counter", "event": "block:block_rq_issue",
     "filter": "dev == )" + std::to_string(kdev) +
                              R"(", "labels": [{"name": "disk", "field": "dev", "decode": "blkdev"}]}]})",
                          [&] {
                            int fd = open(loop.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
                            ASSERT_GE(fd, 0) << loop.path() << ": " << strerror(errno);
                            for (int i = 0; i < kDirectReads; ++i) {
                              EXPECT_EQ(pread(fd, buf, 4096, static_cast<off_t>(i) * 4096), 4096);
                            }
                            close(fd);
                          });
  free(buf);
  const MetricSnapshot* m = FindMetric(snap, "loop_requests_total");
  ASSERT_NE(m, nullptr);
  // Every series of this device is labelled with exactly the name losetup printed.
  ASSERT_EQ(m->series.size(), 1u);
  const SeriesSnapshot* s = FindSeries(snap, "loop_requests_total", {{"disk", loop.name()}});
  ASSERT_NE(s, nullptr) << "no series {disk=\"" << loop.name() << "\"}";
  EXPECT_GE(s->value, kDirectReads);
  std::printf("%s: %.0f block_rq_issue for %d direct reads\n", loop.name().c_str(), s->value, kDirectReads);
}

TEST(DecodersKernelTest, KsymNamesVmstatUpdateWorkItems) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto kallsyms = ReadFileToString("/proc/kallsyms");
  ASSERT_TRUE(kallsyms.ok()) << kallsyms.status().ToString();
  if (kallsyms->find(" vmstat_update\n") == std::string::npos) GTEST_SKIP() << "no vmstat_update in /proc/kallsyms";
  auto snap = RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "work_items_total", "type": "counter", "event": "workqueue:workqueue_execute_start",
     "labels": [{"name": "function", "field": "function", "decode": "ksym"}]}]})",
                          [] {
                            // vmstat_update runs each second on CPUs whose vm counters changed:
                            // change ours while we wait.
                            auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2500);
                            while (std::chrono::steady_clock::now() < end) {
                              void* p =
                                  mmap(nullptr, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                              if (p != MAP_FAILED) {
                                std::memset(p, 1, 4 << 20);
                                munmap(p, 4 << 20);
                              }
                              std::this_thread::sleep_for(std::chrono::milliseconds(50));
                            }
                          });
  const SeriesSnapshot* s = FindSeries(snap, "work_items_total", {{"function", "vmstat_update"}});
  // An exact name, not "vmstat_update+0x..": the pointer is the function's own address.
  ASSERT_NE(s, nullptr) << "no work_items_total{function=\"vmstat_update\"}";
  EXPECT_GE(s->value, 1);
  std::printf("vmstat_update ran %.0f times; %zu work functions seen\n", s->value,
              FindMetric(snap, "work_items_total")->series.size());
}

}  // namespace
}  // namespace tpe
