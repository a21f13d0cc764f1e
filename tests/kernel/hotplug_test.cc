// Kernel tier: CPU hotplug. A per-CPU perf event dies when its CPU goes offline and stays dead
// when the CPU comes back; the pipeline must notice and reopen that CPU's ring and events. A
// child pinned to the CPU that went away and came back makes a known number of calls: the
// counting-mode and the {cpu} counter must both say exactly that many, and the self-metrics
// must show the reopen. (Under "engine": "auto" the {cpu} counter runs on the bpf engine when it
// can: its program is CPU-agnostic and must keep counting on the CPU that came back.)
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "daemon/daemon.h"
#include "kernel/kernel_util.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

using testing::Child;
using testing::FindSeries;

constexpr int kCpu = 1;
constexpr int kCalls = 30000;

std::string OnlinePath() { return "/sys/devices/system/cpu/cpu" + std::to_string(kCpu) + "/online"; }

bool SetOnline(bool on) {
  std::ofstream f(OnlinePath());
  f << (on ? "1" : "0");
  f.flush();
  return static_cast<bool>(f);
}

// Kernel access and a CPU that can be taken offline, or skip with the reason (fail under
// TPE_REQUIRE_KERNEL=1).
#define TPE_REQUIRE_HOTPLUG_OR_SKIP()                                                                        \
  do {                                                                                                       \
    TPE_REQUIRE_KERNEL_OR_SKIP();                                                                            \
    if (access(OnlinePath().c_str(), W_OK) != 0) {                                                           \
      if (testing::KernelRequired()) FAIL() << OnlinePath() << " is not writable: cannot take cpu1 offline"; \
      GTEST_SKIP() << OnlinePath() << " is not writable (one CPU, or no hotplug): cannot take cpu1 offline"; \
    }                                                                                                        \
  } while (0)

// Brings the CPU back whatever happens to the test.
struct RestoreCpu {
  ~RestoreCpu() { SetOnline(true); }
};

double Value(const std::vector<MetricSnapshot>& snap, const std::string& metric, const LabelPairs& labels) {
  const SeriesSnapshot* s = FindSeries(snap, metric, labels);
  return s ? s->value : -1;
}

TEST(HotplugTest, ACpuThatCameBackIsCountedAgain) {
  TPE_REQUIRE_HOTPLUG_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/hotplug_test.json";
  std::ofstream(path) << R"({"settings": {"ring_buffer_pages": 1024}, "metrics": [
    {"name": "sampled_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "comm == \"tpe_hotplug\"", "labels": [{"name": "cpu", "source": "cpu"}]},
    {"name": "counted_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "comm == \"tpe_hotplug\""}]})";
  Daemon daemon(path, &*tracefs, &enums);
  ASSERT_TRUE(daemon.Start().ok());
  RestoreCpu restore;
  const std::string cpu = std::to_string(kCpu);

  ASSERT_TRUE(SetOnline(false));
  // The reader checks every second and on the kernel's uevent.
  for (int i = 0; i < 50 && Value(daemon.Snapshot(), "tracepoint_exporter_cpu_online", {{"cpu", cpu}}) != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Value(daemon.Snapshot(), "tracepoint_exporter_cpu_online", {{"cpu", cpu}}), 0);
  ASSERT_TRUE(SetOnline(true));
  for (int i = 0; i < 50 && Value(daemon.Snapshot(), "tracepoint_exporter_cpu_online", {{"cpu", cpu}}) != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  auto mid = daemon.Snapshot();
  EXPECT_EQ(Value(mid, "tracepoint_exporter_cpu_online", {{"cpu", cpu}}), 1);
  EXPECT_EQ(Value(mid, "tracepoint_exporter_cpu_reopens_total", {{"cpu", cpu}}), 1);
  EXPECT_GT(Value(mid, "tracepoint_exporter_cpu_untraced_seconds_total", {{"cpu", cpu}}), 0);

  Child child("tpe_hotplug", kCalls, kCpu);
  child.RunToExit();
  daemon.Stop();
  auto snap = daemon.Snapshot();
  EXPECT_EQ(Value(snap, "sampled_total", {{"cpu", cpu}}), kCalls);
  EXPECT_EQ(Value(snap, "counted_total", {}), kCalls);
}

// The same with the CPU going away and coming back between two checks: its events are dead
// although the CPU is online at every check.
TEST(HotplugTest, OfflineAndBackBetweenChecksIsNoticed) {
  TPE_REQUIRE_HOTPLUG_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  auto cfg = ParseConfig(R"({"metrics": [{"name": "counted_total", "type": "counter",
      "event": "syscalls:sys_enter_getppid", "filter": "comm == \"tpe_hotplug2\""}]})",
                         "t.json");
  ASSERT_TRUE(cfg.ok());
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), /*check_filters=*/false, bpf::BpfSupport{false, "not probed"},
                        {}, testing::Probed());
  ASSERT_TRUE(plan.ok());
  Pipeline pipeline(&*tracefs);
  ASSERT_TRUE(pipeline.Open(std::move(*plan)).ok());  // not started: checks run when the test says
  RestoreCpu restore;
  ASSERT_TRUE(SetOnline(false));
  ASSERT_TRUE(SetOnline(true));
  pipeline.CheckCpusNow();
  Child child("tpe_hotplug2", kCalls, kCpu);
  child.RunToExit();
  pipeline.Stop();
  auto snap = pipeline.Snapshot();
  EXPECT_EQ(Value(snap, "counted_total", {}), kCalls);
  EXPECT_EQ(Value(snap, "tracepoint_exporter_cpu_reopens_total", {{"cpu", std::to_string(kCpu)}}), 1);
}

}  // namespace
}  // namespace tpe
