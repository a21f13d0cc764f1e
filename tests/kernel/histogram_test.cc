// Kernel tier for histograms and latency: known sleeps land in known buckets, known write sizes
// in known buckets, and wakeups on one CPU pair with their switch-in on another.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <functional>

#include "config/config.h"
#include "daemon/pipeline.h"
#include "kernel/kernel_util.h"
#include "plan/plan.h"
#include "testing/test_util.h"
#include "tracefs/kernel_enums.h"

namespace tpe {
namespace {

// Whether the running kernel is PREEMPT_RT (/sys/kernel/realtime, present and "1" on RT kernels).
bool PreemptRt() {
  std::ifstream f("/sys/kernel/realtime");
  int rt = 0;
  return static_cast<bool>(f >> rt) && rt == 1;
}

using testing::FindMetric;
using testing::ForkWaiting;
using testing::Release;
using testing::RunPipeline;

using testing::NanosleepRaw;

// A latency metric without labels (on bpf: its one series in a 1-entry per-CPU array, found
// without hashing a key): 10 nanosleeps of 2 ms are 10 observations above 1 ms, in one series.
using LabelLessLatencyTest = testing::EngineTest;
TPE_INSTANTIATE_ENGINES(LabelLessLatencyTest);

TEST_P(LabelLessLatencyTest, EverySleepOnceInItsOneSeries) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go;
  pid_t child = ForkWaiting(&go, [] {
    for (int i = 0; i < 10; ++i) NanosleepRaw(2'000'000);
  });
  const std::string pid = std::to_string(child);
  auto snap = RunPipeline(R"({"metrics": [{"name": "sleep_seconds", "type": "latency",
      "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid + R"("},
      "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid + R"("},
      "buckets": {"type": "explicit", "bounds": [0.001, 10]}}]})",
                          [&] { Release(go, child); });
  const MetricSnapshot* m = FindMetric(snap, "sleep_seconds");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  EXPECT_TRUE(m->series[0].labels.empty());
  EXPECT_EQ(m->series[0].count, 10u);
  EXPECT_EQ(m->series[0].bucket_counts, (std::vector<uint64_t>{0, 10, 0}));
  EXPECT_GE(m->series[0].sum, 0.02);
  testing::ExpectEngine(snap, "sleep_seconds", IsBpf());
}

// 20 nanosleeps of 2 ms and 20 of 20 ms: 40 observations in (1 ms, 100 ms], at least the 20
// long ones in (10 ms, 100 ms]; _count 40; _sum at least 0.44 s.
using KernelHistogramTest = testing::EngineTest;
TPE_INSTANTIATE_ENGINES(KernelHistogramTest);

TEST_P(KernelHistogramTest, NanosleepLatencyBuckets) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go;
  pid_t child = ForkWaiting(&go, [] {
    prctl(PR_SET_NAME, "tpe_sleeper");
    for (int i = 0; i < 20; ++i) NanosleepRaw(2'000'000);
    for (int i = 0; i < 20; ++i) NanosleepRaw(20'000'000);
  });
  const std::string pid = std::to_string(child);
  auto snap = RunPipeline(R"({"metrics": [{"name": "nanosleep_seconds", "type": "latency",
      "start": {"event": "syscalls:sys_enter_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid +
                              R"("},
      "end": {"event": "syscalls:sys_exit_nanosleep", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid +
                              R"("},
      "labels": [{"name": "comm", "source": "comm", "from": "start"}],
      "buckets": {"type": "explicit", "bounds": [0.001, 0.01, 0.1, 1]}}]})",
                          [&] { Release(go, child); });
  const MetricSnapshot* m = FindMetric(snap, "nanosleep_seconds");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  const SeriesSnapshot& s = m->series[0];
  EXPECT_EQ(s.labels, (LabelPairs{{"comm", "tpe_sleeper"}}));
  // Every sleep is observed once, none ends early (nanosleep(2)): nothing at or below 1 ms, the
  // 20 ms sleeps all above 10 ms. How late a sleep ends is the scheduler's business: a 2 ms
  // sleep lands in (1 ms, 10 ms] on an idle machine, but on a starved one (Debian 6.1-rt under
  // qemu TCG on a loaded host: 13 of 20 took over 10 ms) it can land in (10 ms, 100 ms], and
  // under single-threaded TCG beside a build one 20 ms sleep took over 100 ms. None takes 1 s.
  ASSERT_EQ(s.bucket_counts.size(), 5u);
  EXPECT_EQ(s.bucket_counts[0], 0u);
  EXPECT_EQ(s.bucket_counts[1] + s.bucket_counts[2] + s.bucket_counts[3], 40u);
  EXPECT_GE(s.bucket_counts[2] + s.bucket_counts[3], 20u);
  EXPECT_EQ(s.bucket_counts[4], 0u);
  EXPECT_EQ(s.count, 40u);
  EXPECT_GE(s.sum, 0.44 - 1e-6);
  EXPECT_LE(s.sum, 40 * 1.0);
}

// write() of known sizes to /dev/null: exact bucket counts of a value histogram.
TEST_P(KernelHistogramTest, WriteSizeHistogramExactBuckets) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go;
  pid_t child = ForkWaiting(&go, [] {
    static char buf[100000];
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    const std::pair<size_t, int> plan[] = {{1, 7}, {10, 3}, {11, 5}, {1000, 11}, {1001, 2}, {65536, 4}, {70000, 1}};
    for (const auto& [size, n] : plan) {
      for (int i = 0; i < n; ++i) (void)!write(fd, buf, size);
    }
    close(fd);
  });
  const std::string pid = std::to_string(child);
  auto snap = RunPipeline(R"({"metrics": [{"name": "write_request_bytes", "type": "histogram",
      "event": "syscalls:sys_enter_write", "filter": "common_pid == )" +
                              pid + R"(",
      "value": {"field": "count"}, "buckets": {"type": "explicit", "bounds": [10, 1000, 65536]}},
      {"name": "write_request_kib", "type": "histogram",
      "event": "syscalls:sys_enter_write", "filter": "common_pid == )" +
                              pid + R"(",
      "value": {"field": "count", "scale": 0.0009765625}, "buckets": {"type": "exp2", "min": 1, "max": 64}}]})",
                          [&] { Release(go, child); });
  const MetricSnapshot* m = FindMetric(snap, "write_request_bytes");
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(m->series.size(), 1u);
  EXPECT_EQ(m->series[0].bucket_counts, (std::vector<uint64_t>{10, 16, 6, 1}));  // le=10, le=1000, le=65536, +Inf
  EXPECT_EQ(m->series[0].count, 33u);
  EXPECT_DOUBLE_EQ(m->series[0].sum, 7 * 1 + 3 * 10 + 5 * 11 + 11 * 1000 + 2 * 1001 + 4 * 65536 + 70000);
  const MetricSnapshot* kib = FindMetric(snap, "write_request_kib");
  ASSERT_NE(kib, nullptr);
  // KiB: 1,10,11,1000,1001 B → <= 1 KiB (28); 65536 B = 64 KiB → le=64 (4); 70000 B → +Inf (1).
  EXPECT_EQ(kib->series[0].bucket_counts, (std::vector<uint64_t>{28, 0, 0, 0, 0, 0, 4, 1}));
}

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

// A waker pinned to CPU 0 wakes a sleeper pinned to CPU 1, N times: sched_waking is written to
// CPU 0's ring, the sleeper's return from read() (sys_exit_read) to CPU 1's. Every wakeup is
// paired with the read it ended. (The end is sys_exit_read rather than the sleeper's switch-in
// because some kernels — this VM's 6.18 build among them — do not emit sched_switch when a CPU
// leaves idle for the woken task; ftrace shows the same.)
TEST_P(KernelHistogramTest, CrossCpuWakeupPairing) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 CPUs";
  constexpr int kWakeups = 200;
  int wake[2];
  ASSERT_EQ(pipe2(wake, O_CLOEXEC), 0);
  // The sleeper inherits CPU 1 from the fork: pinning itself later would block it on the
  // migration and add a wakeup that ends no read.
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  ASSERT_TRUE(Pin(1));
  int go;
  pid_t sleeper = ForkWaiting(&go, [&] {
    char c;
    for (int i = 0; i < kWakeups; ++i) {
      if (read(wake[0], &c, 1) != 1) _exit(3);
    }
  });
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  const std::string pid = std::to_string(sleeper);
  auto snap = RunPipeline(R"({"metrics": [
      {"name": "wakeup_to_run_seconds", "type": "latency",
       "start": {"event": "sched:sched_waking", "key": ["pid"], "filter": "pid == )" +
                              pid + R"("},
       "end": {"event": "syscalls:sys_exit_read", "key": ["common_pid"], "filter": "common_pid == )" +
                              pid + R"("},
       "buckets": {"type": "exp2", "min": 1e-6, "max": 1}},
      {"name": "sleeper_wakeups_total", "type": "counter", "event": "sched:sched_waking",
       "filter": "pid == )" + pid +
                              R"("}]})",
                          [&] {
                            ASSERT_EQ(write(go, "x", 1), 1);
                            close(go);
                            usleep(20000);
                            pid_t waker = fork();
                            if (waker == 0) {
                              Pin(0);
                              for (int i = 0; i < kWakeups; ++i) {
                                usleep(1000);  // the sleeper is blocked in read() again by then
                                if (write(wake[1], "w", 1) != 1) _exit(3);
                              }
                              _exit(0);
                            }
                            int status;
                            waitpid(waker, &status, 0);
                            waitpid(sleeper, &status, 0);
                            EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                          });
  const MetricSnapshot* wakeups = FindMetric(snap, "sleeper_wakeups_total");
  const MetricSnapshot* lat = FindMetric(snap, "wakeup_to_run_seconds");
  ASSERT_NE(wakeups, nullptr);
  ASSERT_NE(lat, nullptr);
  ASSERT_EQ(lat->series.size(), 1u);
  // The sleeper makes kWakeups + 1 reads (the start pipe, then one per byte); each read ends one
  // latency (its last sched_waking start), unless the byte was already there when read() was
  // called, so _count is between kWakeups / 2 and kWakeups + 1 and never above the wakeups.
  const double count = static_cast<double>(lat->series[0].count);
  EXPECT_GE(count, kWakeups / 2);
  EXPECT_LE(count, kWakeups + 1);
  EXPECT_GE(wakeups->series[0].value, count);
  if (!PreemptRt()) {
    // Without PREEMPT_RT, the sleeper is woken by the byte it waits for: one wakeup per read,
    // and at most a stray one or two besides (seen once in CI under ASan: 202 wakeups for 201
    // reads; a fault in the forked child that sleeps — reclaim, a page under writeback — is a
    // wakeup too). A stray wakeup inside a read replaces its pending start; the count of
    // paired reads is what the engines must get exactly.
    EXPECT_LE(wakeups->series[0].value, count + 2);
  } else {
    // PREEMPT_RT turns spinlock_t (the pipe's rd_wait/wr_wait wait-queue locks) and the pipe mutex
    // into rtmutexes: a sleeper that contends on one of them while the waker holds it blocks
    // (TASK_RTLOCK_WAIT) and is woken by the unlock (rt_mutex_slowunlock -> wake_up_q ->
    // try_to_wake_up), which fires sched_waking again inside the same read(). Measured on Debian
    // 6.1-rt under TCG: 203-234 wakeups for 201 reads. Such a wakeup replaces the pending start,
    // it ends no extra read; at most one per lock the read takes (pipe->mutex, rd_wait.lock,
    // wr_wait.lock) and per wait-queue lock the waker's write takes.
    EXPECT_LE(wakeups->series[0].value, 5 * (kWakeups + 1));
  }
  EXPECT_GT(lat->series[0].sum, 0);
}

}  // namespace
}  // namespace tpe
