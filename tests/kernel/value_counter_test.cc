// Kernel tier: a counter that adds a field's value (issue 10). A child reads a known number of
// bytes from /dev/zero; a counter on syscalls:sys_exit_read with value {"field": "ret"},
// filtered on the child's pid and labelled by comm, must equal exactly the bytes read.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernel/kernel_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

constexpr int kBigReads = 37, kBigSize = 1000, kSmallReads = 5, kSmallSize = 7;
constexpr double kBytes = kBigReads * kBigSize + kSmallReads * kSmallSize;  // 37035

TEST(ValueCounterKernelTest, SumsBytesReadExactly) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(go[1]);
    const int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    if (fd < 0) _exit(2);
    // Wait for the go signal with poll (POLLHUP when the parent closes its end), not read():
    // a read here would be one more sys_exit_read of this pid.
    pollfd p{go[0], POLLIN, 0};
    if (poll(&p, 1, -1) != 1) _exit(3);
    // Renamed once the pipeline runs, so its PERF_RECORD_COMM names it even after it exited.
    prctl(PR_SET_NAME, "tpe_vread");
    char buf[kBigSize];
    for (int i = 0; i < kBigReads; ++i) {
      if (read(fd, buf, kBigSize) != kBigSize) _exit(4);
    }
    for (int i = 0; i < kSmallReads; ++i) {
      if (read(fd, buf, kSmallSize) != kSmallSize) _exit(5);
    }
    _exit(0);
  }
  close(go[0]);
  const std::string spid = std::to_string(pid);
  // 42 samples of < 100 bytes: the ring holds the whole run; nothing can be lost.
  auto snap = testing::RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "read_bytes_total", "type": "counter", "event": "syscalls:sys_exit_read",
     "filter": "common_pid == )" + spid +
                                       R"(", "value": {"field": "ret"},
     "labels": [{"name": "comm", "source": "comm"}]},
    {"name": "read_bytes_unlabelled_total", "type": "counter", "event": "syscalls:sys_exit_read",
     "filter": "common_pid == )" + spid +
                                       R"(", "value": {"field": "ret", "scale": 0.5}}
  ]})",
                                   [&] {
                                     close(go[1]);
                                     int status = 0;
                                     EXPECT_EQ(waitpid(pid, &status, 0), pid);
                                     EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
                                   });
  const SeriesSnapshot* s = testing::FindSeries(snap, "read_bytes_total", {{"comm", "tpe_vread"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, kBytes);
  const SeriesSnapshot* u = testing::FindSeries(snap, "read_bytes_unlabelled_total");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->value, kBytes * 0.5);
  const SeriesSnapshot* errors =
      testing::FindSeries(snap, "tracepoint_exporter_decode_errors_total", {{"metric", "read_bytes_total"}});
  ASSERT_NE(errors, nullptr);
  EXPECT_EQ(errors->value, 0);
}

}  // namespace
}  // namespace tpe
