// Kernel tier: the fallbacks the plan chooses for older kernels, run for real on this kernel.
// The older kernel's answers come through the fault seams (perf: SetPerfOpenFaultForTesting;
// bpf: SetBpfFaultForTesting), the rest (opening, loading, counting) is real.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "kernel/kernel_util.h"
#include "perf/perf_event.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

using testing::Child;
using testing::FindMetric;
using testing::FindSeries;

// RunPipeline (kernel_util.h) with the kernel features the plan is given.
std::vector<MetricSnapshot> RunWith(const std::string& config, const KernelFeatures& features,
                                    const std::function<void()>& during) {
  return testing::RunPipeline(config, during, features);
}

double Feature(const std::vector<MetricSnapshot>& snap, const std::string& feature) {
  const SeriesSnapshot* s = FindSeries(snap, "tracepoint_exporter_kernel_feature", {{"feature", feature}});
  return s == nullptr ? -1 : s->value;
}

// Linux 5.x: perf_event_open refuses PERF_FORMAT_LOST (injected); the probe finds it, the plan
// drops the bit, counts stay exact, and the per-event lost series is absent rather than 0.
TEST(KernelFeaturesTest, PerfWithoutFormatLost) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  SetPerfOpenFaultForTesting([](const perf_event_attr& a, int, int) {
    return (a.read_format & PERF_FORMAT_LOST) ? EINVAL : 0;  // as perf_copy_attr() before 6.0
  });
  KernelFeatures f = testing::Probed();
  f.perf = DetectPerfFeatures();
  EXPECT_FALSE(f.perf.format_lost);
  constexpr int kCalls = 3000;
  Child child("tpe_nolost", kCalls);
  auto snap = RunWith(R"({"metrics": [
    {"name": "by_comm_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "perf",
     "labels": [{"name": "comm", "source": "comm"}]},
    {"name": "counting_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "filter": "common_pid == )" +
                          std::to_string(child.pid()) + R"("}]})",
                      f, [&] { child.RunToExit(); });
  SetPerfOpenFaultForTesting(nullptr);
  const SeriesSnapshot* by_comm = FindSeries(snap, "by_comm_total", {{"comm", "tpe_nolost"}});
  ASSERT_NE(by_comm, nullptr);
  EXPECT_EQ(by_comm->value, kCalls);
  ASSERT_NE(FindSeries(snap, "counting_total"), nullptr);
  EXPECT_EQ(testing::Value(snap, "counting_total"), kCalls);
  const MetricSnapshot* lost = FindMetric(snap, "tracepoint_exporter_samples_lost_total");
  ASSERT_NE(lost, nullptr);
  EXPECT_TRUE(lost->series.empty());  // unavailable, not a false 0
  EXPECT_NE(FindMetric(snap, "tracepoint_exporter_ring_lost_samples_total"), nullptr);
  EXPECT_EQ(Feature(snap, "perf_format_lost"), 0);
}

// A metric name with ':' on engine bpf: before the names were sanitised, map creation failed
// with EINVAL (bpf_obj_name_cpy) and "engine": "bpf" refused to start.
TEST(KernelFeaturesTest, ColonMetricNameOnBpf) {
  TPE_REQUIRE_BPF_OR_SKIP();
  constexpr int kCalls = 1000;
  Child child("tpe_colon", kCalls);
  auto snap = RunWith(R"({"metrics": [
    {"name": "tpe:colon_calls_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "bpf",
     "labels": [{"name": "comm", "source": "comm"}]}]})",
                      testing::Probed(), [&] { child.RunToExit(); });
  const SeriesSnapshot* s = FindSeries(snap, "tpe:colon_calls_total", {{"comm", "tpe_colon"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, kCalls);
}

// Linux 5.4 on the bpf engine: the verifier refuses probe_read_kernel(_str) (injected EINVAL,
// as "invalid func unknown#115"), run-time allocation is unsafe, misses are not counted. The
// plan loads the probe_read(_str) versions into preallocated maps; counts stay exact, the
// string label decodes, and the misses family is absent rather than 0.
TEST(KernelFeaturesTest, BpfOnLinux5_4) {
  TPE_REQUIRE_BPF_OR_SKIP();
  std::vector<uint32_t> hash_flags;
  int refused = 0;
  bpf::SetBpfFaultForTesting([&](const bpf::BpfCall& c) {
    if (c.cmd == BPF_MAP_CREATE && (c.map_type == BPF_MAP_TYPE_HASH || c.map_type == BPF_MAP_TYPE_PERCPU_HASH))
      hash_flags.push_back(c.map_flags);
    if (c.CallsHelper(BPF_FUNC_probe_read_kernel_str) || c.CallsHelper(BPF_FUNC_probe_read_kernel)) {
      ++refused;
      return EINVAL;
    }
    return 0;
  });
  KernelFeatures f = testing::Probed();
  f.bpf = bpf::DetectBpfFeatures();
  EXPECT_FALSE(f.bpf.probe_read_kernel_str);
  f.bpf.runtime_alloc_safe = false;
  f.bpf.tracepoint_misses = false;
  EXPECT_EQ(refused, 1);  // the probe
  const std::string path = "/tmp/tpe_exec_" + std::to_string(getpid());
  ASSERT_EQ(symlink("/bin/true", path.c_str()), 0) << strerror(errno);
  constexpr int kCalls = 1000, kExecs = 3;
  Child child("tpe_old_bpf", kCalls);
  auto snap = RunWith(R"({"metrics": [
    {"name": "by_comm_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "bpf",
     "labels": [{"name": "comm", "source": "comm"}]},
    {"name": "execs_total", "type": "counter", "event": "sched:sched_process_exec", "engine": "bpf",
     "labels": [{"name": "filename", "field": "filename"}]}]})",
                      f, [&] {
                        child.RunToExit();
                        for (int i = 0; i < kExecs; ++i) {
                          pid_t p = fork();
                          if (p == 0) {
                            execl(path.c_str(), path.c_str(), nullptr);
                            _exit(127);
                          }
                          int status = 0;
                          waitpid(p, &status, 0);
                          EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
                        }
                      });
  bpf::SetBpfFaultForTesting(nullptr);
  unlink(path.c_str());
  EXPECT_EQ(refused, 1);  // no loaded program called the 5.5 helpers
  ASSERT_FALSE(hash_flags.empty());
  for (uint32_t fl : hash_flags) EXPECT_EQ(fl & BPF_F_NO_PREALLOC, 0u);
  const SeriesSnapshot* s = FindSeries(snap, "by_comm_total", {{"comm", "tpe_old_bpf"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, kCalls);
  const SeriesSnapshot* e = FindSeries(snap, "execs_total", {{"filename", path}});
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->value, kExecs);
  EXPECT_EQ(FindMetric(snap, "tracepoint_exporter_bpf_program_misses_total"), nullptr);
  EXPECT_NE(FindMetric(snap, "tracepoint_exporter_bpf_program_runs_total"), nullptr);
  EXPECT_EQ(Feature(snap, "bpf_tracepoint_misses"), 0);
  EXPECT_EQ(Feature(snap, "bpf_runtime_alloc_safe"), 0);
  EXPECT_EQ(Feature(snap, "bpf_probe_read_kernel_str"), 0);
}

// A program the kernel refuses with E2BIG (over an older kernel's instruction limit; injected):
// under "auto" the metric runs on perf, says why, and counts exactly.
TEST(KernelFeaturesTest, ProgramE2bigFallsBackToPerf) {
  TPE_REQUIRE_BPF_OR_SKIP();
  bpf::SetBpfFaultForTesting([](const bpf::BpfCall& c) { return c.cmd == BPF_PROG_LOAD ? E2BIG : 0; });
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  auto cfg = ParseConfig(R"({"metrics": [{"name": "big_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
      "labels": [{"name": "comm", "source": "comm"}]}]})",
                         "t.json");
  ASSERT_TRUE(cfg.ok());
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), false, testing::Bpf(), {}, testing::Probed());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(NameOf((*plan)->metrics[0].engine), "perf");
  EXPECT_NE((*plan)->metrics[0].engine_reason.find("Argument list too long (larger than this kernel allows"),
            std::string::npos)
      << (*plan)->metrics[0].engine_reason;
  constexpr int kCalls = 1000;
  Child child("tpe_e2big", kCalls);
  auto snap = RunWith(R"({"metrics": [{"name": "big_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
      "labels": [{"name": "comm", "source": "comm"}]}]})",
                      testing::Probed(), [&] { child.RunToExit(); });
  bpf::SetBpfFaultForTesting(nullptr);
  const SeriesSnapshot* s = FindSeries(snap, "big_total", {{"comm", "tpe_e2big"}});
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, kCalls);
  EXPECT_NE(FindSeries(snap, "tracepoint_exporter_metric_info", {{"metric", "big_total"}, {"engine", "perf"}}),
            nullptr);
}

// On this kernel as it is: "auto" runs a {comm} counter on bpf unless the kernel preempts map
// syscalls, does not count the programs it skips meanwhile (PREEMPT_RT before 6.7: the 5.10-rt
// and 6.1-rt guests) and this process cannot run its map syscalls at SCHED_FIFO 99, where it runs
// on perf and says why.
TEST(KernelFeaturesTest, AutoFollowsWhetherSkippedRunsAreCounted) {
  TPE_REQUIRE_BPF_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  auto cfg = ParseConfig(R"({"metrics": [{"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
      "labels": [{"name": "comm", "source": "comm"}]}]})",
                         "t.json");
  ASSERT_TRUE(cfg.ok());
  const KernelFeatures& f = testing::ProbedAsIs();
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), false, testing::Bpf(), {}, f);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const bool uncounted_skips = f.bpf.preemptible_syscalls && !f.bpf.tracepoint_misses && !f.bpf.fifo_map_syscalls;
  std::printf("%s: preemptible map syscalls %d, misses counted %d, map syscalls at SCHED_FIFO %d: auto runs on %s\n",
              f.bpf.release.c_str(), f.bpf.preemptible_syscalls, f.bpf.tracepoint_misses, f.bpf.fifo_map_syscalls,
              std::string(NameOf((*plan)->metrics[0].engine)).c_str());
  EXPECT_EQ(NameOf((*plan)->metrics[0].engine), uncounted_skips ? "perf" : "bpf") << (*plan)->metrics[0].engine_reason;
  if (uncounted_skips) {
    EXPECT_NE((*plan)->metrics[0].engine_reason.find("skips a bpf program, uncounted"), std::string::npos)
        << (*plan)->metrics[0].engine_reason;
  }
  // Root on a preemptible kernel (the 5.10-rt and 6.1-rt guests): the map syscalls run at
  // SCHED_FIFO 99 and auto says so.
  if (f.bpf.preemptible_syscalls && getuid() == 0) {
    EXPECT_TRUE(f.bpf.fifo_map_syscalls) << f.bpf.fifo_map_syscalls_note;
    EXPECT_NE((*plan)->metrics[0].engine_reason.find("map syscalls run at SCHED_FIFO 99"), std::string::npos)
        << (*plan)->metrics[0].engine_reason;
  }
  testing::ResetLoadOptions();
}

// tracepoint_exporter_kallsyms_hidden says what the plan found: 1, 0, or no series when unknown.
TEST(KernelFeaturesTest, KallsymsHiddenSelfMetric) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  constexpr char kConfig[] =
      R"({"metrics": [{"name": "getppid_total", "type": "counter", "event": "syscalls:sys_enter_getppid"}]})";
  for (std::optional<bool> hidden : {std::optional<bool>(true), std::optional<bool>(false), std::optional<bool>()}) {
    KernelFeatures f = testing::Probed();
    f.kallsyms_hidden = hidden;
    auto snap = testing::RunPipeline(
        kConfig, [] {}, f);
    const SeriesSnapshot* s = FindSeries(snap, "tracepoint_exporter_kallsyms_hidden");
    if (!hidden) {
      EXPECT_EQ(s, nullptr);
      continue;
    }
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->value, *hidden ? 1 : 0);
  }
  EXPECT_EQ(testing::Probed().kallsyms_hidden, std::optional<bool>(false)) << "root sees kallsyms' addresses";
}

// kernel.perf_event_max_stack set to `value` for the object's life, restored on every path.
// Writing it fails with EBUSY while any callchain perf event or BPF stack map exists on the host
// (perf_event_max_stack_handler), so both the change and the restore are retried for a while.
class ScopedMaxStack {
 public:
  static constexpr char kPath[] = "/proc/sys/kernel/perf_event_max_stack";
  explicit ScopedMaxStack(int value) : old_(ReadPerfEventMaxStack()) {
    for (int i = 0; i < 500 && old_ > 0; ++i) {
      last_ = WriteStringToFile(kPath, std::to_string(value));
      if (last_.ok() || last_.code() != StatusCode::kUnavailable) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    set_ = last_.ok() && old_ > 0;
  }
  ~ScopedMaxStack() { Restore(); }
  ScopedMaxStack(const ScopedMaxStack&) = delete;
  ScopedMaxStack& operator=(const ScopedMaxStack&) = delete;
  bool set() const { return set_; }
  const Status& status() const { return last_; }
  void Restore() {
    if (!set_) return;
    Status st;
    for (int i = 0; i < 1000; ++i) {  // 10 s
      st = WriteStringToFile(kPath, std::to_string(old_));
      if (st.ok()) {
        set_ = false;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ADD_FAILURE() << "could not restore " << kPath << " to " << old_ << ": " << st.ToString();
  }

 private:
  int old_;
  Status last_ = Internal("kernel.perf_event_max_stack unreadable");
  bool set_ = false;
};

// Profiles on both engines with kernel.perf_event_max_stack (16) below settings.profile_max_frames
// (127): they open (perf_event_open refused 127 frames with EOVERFLOW before the perf engine
// clamped too) and count every call. The sysctl is lowered only while the plan is made and run.
TEST(KernelFeaturesTest, ProfilesRunUnderALoweredPerfEventMaxStack) {
  TPE_REQUIRE_BPF_OR_SKIP();
  constexpr int kCalls = 500;
  const int original = ReadPerfEventMaxStack();
  Child child("tpe_maxstack", kCalls);
  // The kernel's callchain (frame pointers) is what the sysctl bounds: a "dwarf" profile takes
  // only the kernel part from it.
  const std::string config = R"({"profiles": [
      {"name": "on_perf", "event": "syscalls:sys_enter_getppid", "engine": "perf", "unwind": "frame_pointer",
       "filter": "common_pid == )" +
                             std::to_string(child.pid()) +
                             R"("},
      {"name": "on_bpf", "event": "syscalls:sys_enter_getppid", "engine": "bpf",
       "filter": "common_pid == )" +
                             std::to_string(child.pid()) + R"("}]})";
  std::vector<MetricSnapshot> snap;
  std::vector<uint32_t> frames;
  {
    ScopedMaxStack lowered(16);
    if (!lowered.set()) {
      child.RunToExit();
      const std::string why =
          "cannot set kernel.perf_event_max_stack (other callchain users on the host?): " + lowered.status().ToString();
      if (testing::KernelRequired()) FAIL() << "TPE_REQUIRE_KERNEL=1: " << why;
      GTEST_SKIP() << why;
    }
    KernelFeatures f = testing::Probed();
    RefreshRuntimeFacts(&f);
    EXPECT_EQ(f.perf.max_stack, 16);
    snap = testing::RunPipelineWith(
        config,
        [&](Pipeline& p) {
          for (const auto& e : p.plan().events) {
            if (e->callchain != 0) frames.push_back(e->max_stack);
          }
          child.RunToExit();
        },
        f);
  }  // restored: the pipeline is gone, so no callchain event of ours holds the sysctl
  EXPECT_EQ(ReadPerfEventMaxStack(), original) << "restored";
  EXPECT_EQ(frames, std::vector<uint32_t>{16});  // the perf profile's event; bpf's stacks come from its map
  EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_profile_samples_total", {{"profile", "on_perf"}}), kCalls);
  EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_profile_samples_total", {{"profile", "on_bpf"}}), kCalls);
}

}  // namespace
}  // namespace tpe
