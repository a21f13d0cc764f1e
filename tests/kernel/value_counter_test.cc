// Kernel tier: a counter that adds a field's value. A child reads a known number of
// bytes from /dev/zero; a counter on syscalls:sys_exit_read with value {"field": "ret"},
// filtered on the child's pid and labelled by comm, must equal exactly the bytes read. And sums
// past 2^64 on both engines (64-bit sums wrapped and the counter went backwards).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
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

// A counter summing write()'s count read 1000, then 384 after one write() of
// 18446744073709551000 bytes (2^64 - 616; any user can make the call: it fails, and
// syscalls:sys_enter_write still fires with that count), on both engines: the 64-bit sums
// wrapped and the counter went backwards; the bpf histogram's _sum wrapped too. Sums are 128
// bits wide now: every engine reads 1000 + 18446744073709551000 to double precision, never less
// than the 1000 it read first, and a classic histogram's _sum and a native one's sample sum are
// that same double.
using ValueSumKernelTest = testing::EngineTest;
TPE_INSTANTIATE_ENGINES(ValueSumKernelTest);

TEST_P(ValueSumKernelTest, SumsPastTwoToThe64NeverGoBack) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  constexpr long kBadFd = 32429;  // never open: every write() below fails with EBADF
  constexpr uint64_t kHuge = 18446744073709551000ULL;
  int go[2], ready[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(go[1]);
    close(ready[0]);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    // A bad fd and a null buffer: nothing is written; the tracepoint fires before the checks.
    for (int i = 0; i < 1000; ++i) syscall(SYS_write, kBadFd, nullptr, uint64_t{1});
    if (write(ready[1], "r", 1) != 1) _exit(3);  // another fd: filtered out
    if (read(go[0], &c, 1) != 1) _exit(4);
    syscall(SYS_write, kBadFd, nullptr, kHuge);
    _exit(0);
  }
  close(go[0]);
  close(ready[1]);
  const std::string filter = "common_pid == " + std::to_string(pid) + " && fd == " + std::to_string(kBadFd);
  const std::string config = R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
    {"name": "write_bytes_total", "type": "counter", "event": "syscalls:sys_enter_write",
     "filter": ")" + filter + R"(", "value": {"field": "count"}},
    {"name": "write_half_bytes_total", "type": "counter", "event": "syscalls:sys_enter_write",
     "filter": ")" + filter + R"(", "value": {"field": "count", "scale": 0.5},
     "labels": [{"name": "pid", "source": "pid"}]},
    {"name": "write_request_bytes", "type": "histogram", "event": "syscalls:sys_enter_write",
     "filter": ")" + filter + R"(", "value": {"field": "count"},
     "buckets": {"type": "exp2", "min": 1, "max": 1024}},
    {"name": "write_request_native_bytes", "type": "histogram", "event": "syscalls:sys_enter_write",
     "filter": ")" + filter + R"(", "value": {"field": "count"}, "buckets": {"type": "native"}}
  ]})";
  double first = -1, first_half = -1;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    EXPECT_EQ(write(go[1], "g", 1), 1);
    char c;
    EXPECT_EQ(read(ready[0], &c, 1), 1);
    // The perf engine's reader drains its rings at its own pace: wait for the 1000 (exact).
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      const SeriesSnapshot* c = testing::FindSeries(s, "write_bytes_total");
      return c != nullptr && c->value == 1000;
    }));
    const auto before = pipeline.Snapshot();
    if (const SeriesSnapshot* c = testing::FindSeries(before, "write_bytes_total")) first = c->value;
    if (const SeriesSnapshot* c = testing::FindSeries(before, "write_half_bytes_total")) first_half = c->value;
    EXPECT_EQ(write(go[1], "g", 1), 1);
    close(go[1]);
    int status = 0;
    EXPECT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  });
  close(ready[0]);
  EXPECT_EQ(first, 1000);
  EXPECT_EQ(first_half, 500);
  // The exact sum, 2^64 + 384, to the nearest double (2^64).
  const double want = static_cast<double>(static_cast<unsigned __int128>(1000) + kHuge);
  EXPECT_EQ(want, 1000 + 18446744073709551000.0);
  const SeriesSnapshot* c = testing::FindSeries(snap, "write_bytes_total");
  ASSERT_NE(c, nullptr);
  EXPECT_GE(c->value, first) << "the counter went backwards";
  EXPECT_EQ(c->value, want);
  const SeriesSnapshot* half = testing::FindSeries(snap, "write_half_bytes_total", {{"pid", std::to_string(pid)}});
  ASSERT_NE(half, nullptr);
  EXPECT_GE(half->value, first_half) << "the counter went backwards";
  EXPECT_EQ(half->value, want * 0.5);
  const SeriesSnapshot* h = testing::FindSeries(snap, "write_request_bytes");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->count, 1001u);
  EXPECT_EQ(h->sum, want);
  const SeriesSnapshot* n = testing::FindSeries(snap, "write_request_native_bytes");
  ASSERT_NE(n, nullptr);
  ASSERT_TRUE(n->native.has_value());
  EXPECT_EQ(n->count, 1001u);
  EXPECT_EQ(n->sum, want);  // the native sample sum: the classic _sum, on both engines
  const SeriesSnapshot* errors =
      testing::FindSeries(snap, "tracepoint_exporter_decode_errors_total", {{"metric", "write_bytes_total"}});
  ASSERT_NE(errors, nullptr);
  EXPECT_EQ(errors->value, 0);
}

}  // namespace
}  // namespace tpe
