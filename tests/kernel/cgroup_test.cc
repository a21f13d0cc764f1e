// Kernel tier: the "cgroup" label source. A child moved into a fresh cgroup v2
// directory makes exactly N getppid() calls; a counter labelled by cgroup (PERF_SAMPLE_CGROUP,
// resolved at scrape through the directory's file handle) shows exactly N under its path.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/cgroup_resolver.h"
#include "kernel/kernel_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

constexpr int kCalls = 3000;

// mkdir on construction, rmdir on destruction (whatever the test's outcome).
class TempCgroup {
 public:
  explicit TempCgroup(std::string path) : path_(std::move(path)) {
    ok_ = mkdir(path_.c_str(), 0755) == 0;
    if (!ok_) why_ = "mkdir " + path_ + ": " + std::strerror(errno);
  }
  ~TempCgroup() {
    if (!ok_) return;
    // The last task left when its parent reaped it; retry briefly in case the kernel is still
    // tearing it down (EBUSY).
    for (int i = 0; i < 100 && rmdir(path_.c_str()) != 0 && errno == EBUSY; ++i) usleep(10000);
  }
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, why_;
  bool ok_ = false;
};

TEST(CgroupKernelTest, ExactCountUnderTheChildsCgroupPath) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string root = DiscoverCgroup2Mount();
  if (root.empty()) {
    if (testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: no cgroup2 mount in /proc/self/mountinfo";
    GTEST_SKIP() << "no cgroup2 mount in /proc/self/mountinfo";
  }
  const std::string name = "tpe_cg_" + std::to_string(getpid());
  TempCgroup cg(root + "/" + name);
  ASSERT_TRUE(cg.ok()) << cg.why();
  // The directory's file handle is the id PERF_SAMPLE_CGROUP reports.
  ASSERT_TRUE(KernfsCgroupId(cg.path()).has_value());

  int go[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(go[1]);
    pollfd p{go[0], POLLIN, 0};
    if (poll(&p, 1, -1) != 1) _exit(3);
    // Renamed once the pipeline runs, so its PERF_RECORD_COMM names it even after it exited.
    prctl(PR_SET_NAME, "tpe_cgchild");
    for (int i = 0; i < kCalls; ++i) syscall(SYS_getppid);
    _exit(0);
  }
  close(go[0]);
  const std::string spid = std::to_string(pid);
  {
    const std::string procs = cg.path() + "/cgroup.procs";
    const int fd = open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    const bool moved = fd >= 0 && write(fd, spid.data(), spid.size()) == static_cast<ssize_t>(spid.size());
    if (fd >= 0) close(fd);
    if (!moved) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      FAIL() << "cannot move the child into " << procs << ": " << std::strerror(errno);
    }
  }
  // This test places its child in a cgroup v2 directory itself, so v2 labels tell it apart even
  // on a hybrid host whose own tasks sit in the v1 hierarchies (where the daemon leaves them out).
  KernelFeatures features = testing::Probed();
  features.cgroup = CgroupFacts{};
  // 3000 samples of < 100 bytes: the ring holds the whole run.
  auto snap = testing::RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "getppid_by_cgroup_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "common_pid == )" + spid +
                                       R"(", "labels": [{"name": "cgroup", "source": "cgroup"}]},
    {"name": "getppid_by_comm_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "common_pid == )" + spid +
                                       R"(", "labels": [{"name": "comm", "source": "comm"}]}
  ]})",
                                   [&] {
                                     close(go[1]);
                                     int status = 0;
                                     EXPECT_EQ(waitpid(pid, &status, 0), pid);
                                     EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
                                   },
                                   features);
  const MetricSnapshot* m = testing::FindMetric(snap, "getppid_by_cgroup_total");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  EXPECT_EQ(m->series[0].labels, (LabelPairs{{"cgroup", "/" + name}}));
  EXPECT_EQ(m->series[0].value, kCalls);
  // A metric without a cgroup label shares the event (and ignores the id).
  const SeriesSnapshot* by_comm = testing::FindSeries(snap, "getppid_by_comm_total", {{"comm", "tpe_cgchild"}});
  ASSERT_NE(by_comm, nullptr);
  EXPECT_EQ(by_comm->value, kCalls);
}

}  // namespace
}  // namespace tpe
