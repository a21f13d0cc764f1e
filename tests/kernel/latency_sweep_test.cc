// Kernel tier, bpf engine: the user-space sweep of expired latency starts racing real start and
// end programs. Threads of this process make start (getppid) and end (getpgid) syscalls keyed by
// their tid, some ends late enough for their start to expire, while this thread runs the metric's
// own BpfMetric::Sweep in a loop. Every start must be counted exactly
// once: observed + replaced + expired + table_full == starts. The sweep used to read the map and
// delete expired starts by key, deleting starts written in between (counted nowhere) and counting
// the ones they replaced twice. Run once per way of taking entries (start_sweep.h): with
// BPF_MAP_LOOKUP_AND_DELETE_ELEM (5.14+) and with BPF_MAP_LOOKUP_AND_DELETE_BATCH (5.6+).
// The threads run on CPU 0 and the sweep on CPU 1: the race is across CPUs. (On one CPU, where
// kernel code is preemptible — PREEMPT_RT — a preempted map syscall of the sweep makes the kernel
// skip the threads' programs, uncounted before Linux 6.7: 75 of 4,526 starts on 6.1-rt. The plan
// puts such kernels' metrics on perf under "auto": KernelFeaturesPlanTest.
// PreemptibleMapSyscallsBeforeMissesCountMeanPerf.)
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bpf/bpf_metric.h"
#include "common/clock.h"
#include "kernel/kernel_util.h"

namespace tpe {
namespace {

class LatencySweepTest : public ::testing::TestWithParam<bool> {};

// The calling thread on `cpu` (the kernel matrix's guests and CI have 2).
void PinToCpu(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

TEST_P(LatencySweepTest, EveryStartIsCountedExactlyOnceUnderASweep) {
  TPE_REQUIRE_BPF_OR_SKIP();
  const bool lookup_and_delete = GetParam();
  KernelFeatures features = testing::Probed();
  if (lookup_and_delete && !features.bpf.map_lookup_and_delete) {
    GTEST_SKIP() << "this kernel has no BPF_MAP_LOOKUP_AND_DELETE_ELEM for hash maps (Linux 5.14): the batch run "
                    "covers it";
  }
  features.bpf.map_lookup_and_delete = lookup_and_delete;
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  // 1 ms: a late end (2 ms) finds its start expired, or the sweep takes it first.
  auto cfg = ParseConfig(R"({"metrics": [{"name": "swept_seconds", "type": "latency", "engine": "bpf",
      "start": {"event": "syscalls:sys_enter_getppid", "key": ["common_pid"], "filter": "comm ~ \"tpe_swp*\""},
      "end": {"event": "syscalls:sys_enter_getpgid", "key": ["common_pid"], "filter": "comm ~ \"tpe_swp*\""},
      "timeout_seconds": 0.001, "max_inflight": 64, "buckets": {"type": "exp2", "min": 1e-6, "max": 1}}]})",
                         "sweep.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), false, testing::Bpf(), {}, features);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  auto* metric = dynamic_cast<bpf::BpfMetric*>((*plan)->metrics[0].collector.get());
  ASSERT_NE(metric, nullptr);
  ASSERT_TRUE(metric->Attach().ok());

  const int kThreads = 8, kRounds = testing::ScaledForGuest(1500);
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, kRounds] {
      PinToCpu(0);
      const std::string name = "tpe_swp" + std::to_string(t);
      prctl(PR_SET_NAME, name.c_str());
      uint32_t rng = 7919u * (t + 1);
      for (int i = 0; i < kRounds; ++i) {
        syscall(SYS_getppid);  // start
        rng = rng * 1103515245u + 12345u;
        const uint32_t r = (rng >> 8) % 8;
        if (r < 4) {
          // About the timeout: the sweep may be reading this start as expired when the next start
          // replaces it — the race.
          std::this_thread::sleep_for(std::chrono::microseconds(900 + (rng >> 16) % 200));
          syscall(SYS_getppid);
        }
        if (r != 7) syscall(SYS_getpgid, 0);  // the end (1 in 8 has none: the next start replaces it)
      }
      prctl(PR_SET_NAME, "tpe_done");
    });
  }
  const TaskExited none = [](uint32_t) { return false; };
  std::thread sweeper([&] {
    PinToCpu(1);
    while (!done.load()) metric->Sweep(MonotonicNs(), 0, none);
  });
  for (auto& t : threads) t.join();
  done = true;
  sweeper.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  metric->Sweep(MonotonicNs(), 0, none);  // every start left is now expired
  metric->Detach();

  using R = LatencyUnmatched;
  const MetricSnapshot snap = metric->Snapshot();
  uint64_t observed = 0;
  for (const auto& s : snap.series) observed += s.count;
  const uint64_t replaced = metric->unmatched(R::kReplaced), expired = metric->unmatched(R::kExpired),
                 table_full = metric->unmatched(R::kTableFull), series_limit = metric->unmatched(R::kSeriesLimit),
                 no_start = metric->unmatched(R::kNoStart);
  uint64_t starts = 0;  // as the threads made them (same generator)
  for (int t = 0; t < kThreads; ++t) {
    uint32_t rng = 7919u * (t + 1);
    for (int i = 0; i < kRounds; ++i) {
      rng = rng * 1103515245u + 12345u;
      starts += ((rng >> 8) % 8) < 4 ? 2 : 1;
    }
  }
  EXPECT_EQ(metric->inflight(), 0u);
  EXPECT_EQ(observed + replaced + expired + table_full + series_limit, starts)
      << "observed " << observed << " replaced " << replaced << " expired " << expired << " table_full " << table_full
      << " series_limit " << series_limit << " no_start " << no_start;
  // The race was run: starts expired (by the sweep or a late end) and starts were replaced.
  EXPECT_GT(expired, 0u);
  EXPECT_GT(replaced, 0u);
  EXPECT_GT(observed, starts / 2);
}

INSTANTIATE_TEST_SUITE_P(Takes, LatencySweepTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "LookupAndDelete" : "Batch");
                         });

}  // namespace
}  // namespace tpe
