// Shared by the kernel-tier tests: run a config through the real pipeline around an action.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bpf/loader.h"
#include "config/config.h"
#include "daemon/pipeline.h"
#include "plan/kernel_features.h"
#include "plan/plan.h"
#include "testing/test_util.h"
#include "tracefs/kernel_enums.h"
#include "tracefs/tracefs.h"

namespace tpe::testing {

// The engine RunPipeline puts every metric on: "auto" (the config's own), or "perf"/"bpf" in
// the tests parameterized over both engines (EngineTest).
inline std::string& CurrentEngine() {
  static std::string engine = "auto";
  return engine;
}

// Whether this process can use the bpf engine (probed once).
inline const bpf::BpfSupport& Bpf() {
  static const bpf::BpfSupport support = bpf::ProbeBpf();
  return support;
}

// The running kernel's features (DetectKernelFeatures, probed once): what the daemon plans for.
inline const KernelFeatures& ProbedAsIs() {
  static const KernelFeatures features = [] {
    auto tracefs = Tracefs::Discover("auto");
    return DetectKernelFeatures(tracefs.ok() ? tracefs->root() : "");
  }();
  return features;
}

// Whether the daemon's "auto" avoids the bpf engine on this kernel (it preempts map syscalls and
// does not count the programs it skips meanwhile: PREEMPT_RT before 6.7, where this process cannot
// run its map syscalls at SCHED_FIFO). Tests that run a real Daemon (which plans with ProbedAsIs)
// expect perf there.
inline bool AutoAvoidsBpf() {
  const KernelFeatures& f = ProbedAsIs();
  return f.bpf.preemptible_syscalls && !f.bpf.tracepoint_misses && !f.bpf.fifo_map_syscalls;
}

// What the kernel tests plan for: ProbedAsIs() except that bpf programs skipped during a
// preempted map syscall count as counted (BpfFeatures::preemptible_syscalls false), so that on
// PREEMPT_RT kernels before 6.7 — where the daemon's "auto" puts every metric on perf unless its
// map syscalls run at SCHED_FIFO (ProbedAsIs() enables that as root: map_syscall_priority.h) — the tests
// of auto's other choices and of the bpf engine under auto run the bpf engine too. The RT choice
// itself: KernelFeaturesTest.AutoFollowsWhetherSkippedRunsAreCounted (kernel tier) and
// KernelFeaturesPlanTest.PreemptibleMapSyscallsBeforeMissesCountMeanPerf (unit). A test that
// wants an older kernel starts from these and changes what it injects.
inline const KernelFeatures& Probed() {
  static const KernelFeatures features = [] {
    KernelFeatures f = ProbedAsIs();
    f.bpf.preemptible_syscalls = false;
    return f;
  }();
  return features;
}

// The loader options the daemon would choose on this kernel (preallocated maps below 6.1 or on
// PREEMPT_RT, no BPF_XCHG below 5.12, ...): set before any test runs, and restored by
// RunPipeline, so that tests creating BpfMetrics directly load what this kernel takes.
inline void ResetLoadOptions() { bpf::SetLoadOptions(ChooseLoadOptions(Probed())); }
class ProbedLoadOptions : public ::testing::Environment {
 public:
  void SetUp() override { ResetLoadOptions(); }
};
inline ::testing::Environment* const kProbedLoadOptions = ::testing::AddGlobalTestEnvironment(new ProbedLoadOptions);

// Skips (or fails under TPE_REQUIRE_KERNEL=1) when the kernel tier or the bpf engine cannot run.
#define TPE_REQUIRE_BPF_OR_SKIP()                                                                            \
  do {                                                                                                       \
    TPE_REQUIRE_KERNEL_OR_SKIP();                                                                            \
    if (!::tpe::testing::Bpf().available) {                                                                  \
      if (::tpe::testing::KernelRequired())                                                                  \
        FAIL() << "TPE_REQUIRE_KERNEL=1: the bpf engine is not available: " << ::tpe::testing::Bpf().reason; \
      GTEST_SKIP() << "the bpf engine is not available: " << ::tpe::testing::Bpf().reason;                   \
    }                                                                                                        \
  } while (0)

// A kernel-tier test run once per engine: GetParam() is "perf" or "bpf". Under "bpf" without
// BPF (privileges, kernel) it skips with the reason, or fails under TPE_REQUIRE_KERNEL=1.
class EngineTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    CurrentEngine() = GetParam();
    if (IsBpf()) TPE_REQUIRE_BPF_OR_SKIP();
  }
  void TearDown() override { CurrentEngine() = "auto"; }
  bool IsBpf() const { return std::string(GetParam()) == "bpf"; }
};
#define TPE_INSTANTIATE_ENGINES(suite)                                       \
  INSTANTIATE_TEST_SUITE_P(Engines, suite, ::testing::Values("perf", "bpf"), \
                           [](const ::testing::TestParamInfo<const char*>& i) { return std::string(i.param); })

// Forks a child that waits on a pipe, then runs `body` and exits.
template <typename Body>
pid_t ForkWaiting(int* go, Body body) {
  int p[2];
  EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
  pid_t pid = fork();
  if (pid == 0) {
    close(p[1]);
    char c;
    if (read(p[0], &c, 1) != 1) _exit(2);
    body();
    _exit(0);
  }
  close(p[0]);
  *go = p[1];
  return pid;
}

inline void Release(int go, pid_t pid) {
  EXPECT_EQ(write(go, "x", 1), 1);
  close(go);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// nanosleep(2) for `ns` nanoseconds by the raw syscall (the libc wrapper may use clock_nanosleep).
inline void NanosleepRaw(long ns) {
  timespec ts{0, ns};
  syscall(SYS_nanosleep, &ts, nullptr);
}

// Replaces the file at `path` with `text` (a config for a Daemon to load or reload).
inline void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// Forks a child named `comm` that waits until a byte is written to *go_fd (then close it), makes
// `sleeps` nanosleep(1 ms) calls and exits 0. Returns its pid (reap it with waitpid).
inline pid_t ForkSleeper(const char* comm, int sleeps, int* go_fd) {
  int go[2];
  if (pipe2(go, O_CLOEXEC) != 0) return -1;
  const pid_t child = fork();
  if (child == 0) {
    close(go[1]);
    prctl(PR_SET_NAME, comm);
    char c;
    if (read(go[0], &c, 1) != 1) _exit(2);
    for (int i = 0; i < sleeps; ++i) {
      timespec ts{0, 1'000'000};
      nanosleep(&ts, nullptr);
    }
    _exit(0);
  }
  close(go[0]);
  *go_fd = go[1];
  return child;
}

// Pins the calling thread, and the threads it creates while in scope (a pipeline's reader and
// sweeper), to the last online CPU; restores the thread's affinity at the end of the scope. A test
// that counts a child pinned to CPU 0 exactly keeps the daemon's map syscalls off the child's CPU:
// before Linux 6.7 the kernel skips a program run, uncounted, while a BPF map syscall is under
// way on that CPU, and on PREEMPT_RT the child can preempt one there (docs/OPERATIONS.md, Kernel support).
class DaemonOnLastCpu {
 public:
  DaemonOnLastCpu() {
    sched_getaffinity(0, sizeof(saved_), &saved_);
    cpu_set_t last;
    CPU_ZERO(&last);
    CPU_SET(static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN) - 1), &last);
    sched_setaffinity(0, sizeof(last), &last);
  }
  ~DaemonOnLastCpu() { sched_setaffinity(0, sizeof(saved_), &saved_); }
  DaemonOnLastCpu(const DaemonOnLastCpu&) = delete;
  DaemonOnLastCpu& operator=(const DaemonOnLastCpu&) = delete;

 private:
  cpu_set_t saved_;
};

// Forks a child that optionally pins itself to `cpu`, waits for Release() (or RunToExit()),
// renames itself `name`, makes `calls` getppid() and exits.
class Child {
 public:
  Child(const char* name, int calls, int cpu = -1) {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      close(p[1]);
      if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0) _exit(3);
      }
      char c;
      if (read(p[0], &c, 1) != 1) _exit(2);
      // Renamed once released, i.e. while the pipeline runs: the name reaches the reader as a
      // PERF_RECORD_COMM. (Named before the pipeline opened and gone before the reader's first
      // read, a task's name would be nowhere: not in a record, no longer in /proc.)
      prctl(PR_SET_NAME, name);
      for (int i = 0; i < calls; ++i) syscall(SYS_getppid);
      _exit(0);
    }
    close(p[0]);
    go_ = p[1];
  }
  pid_t pid() const { return pid_; }
  // Lets the child run.
  void Release() {
    EXPECT_EQ(write(go_, "x", 1), 1);
    close(go_);
    go_ = -1;
  }
  // Waits for the child to exit (releasing it first if needed).
  void RunToExit() {
    if (go_ >= 0) Release();
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }

 private:
  pid_t pid_;
  int go_;
};

// Parses `config` (JSON text), puts its metrics on CurrentEngine() (unless "auto"), plans it for
// `features` (the running kernel's unless a test gives an older one's), opens and starts the
// pipeline on the live kernel, runs `during` with it, stops (draining the rings) and returns the
// snapshot. The plan's process-wide BPF load options are reset to this kernel's afterwards.
// In a matrix guest, a config that leaves max_series_per_metric at its default gets
// kGuestMaxSeries instead: kernels that need preallocated maps (before 6.1, PREEMPT_RT) fill
// every element at creation, which under TCG took 15-30 s per native-histogram map of 10,000
// series; no test that leaves the default has more than a few hundred series.
inline constexpr uint64_t kGuestMaxSeries = 1000;
inline std::vector<MetricSnapshot> RunPipelineWith(const std::string& config,
                                                   const std::function<void(Pipeline&)>& during,
                                                   const KernelFeatures& features = Probed()) {
  auto tracefs = Tracefs::Discover("auto");
  EXPECT_TRUE(tracefs.ok()) << tracefs.status().ToString();
  if (!tracefs.ok()) return {};
  auto cfg = ParseConfig(config, "kernel_test.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  if (!cfg.ok()) return {};
  if (InGuest() && cfg->settings.max_series_per_metric == Settings{}.max_series_per_metric) {
    cfg->settings.max_series_per_metric = kGuestMaxSeries;
  }
  if (CurrentEngine() != "auto") {
    for (auto& m : cfg->metrics) m.engine = FromName<Engine>(CurrentEngine()).value();
  }
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), /*check_filters=*/true, Bpf(), {}, features);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  if (!plan.ok()) return {};
  Pipeline pipeline(&*tracefs);
  Status st = pipeline.Open(std::move(*plan));
  EXPECT_TRUE(st.ok()) << st.ToString();
  st = pipeline.Start();
  EXPECT_TRUE(st.ok()) << st.ToString();
  during(pipeline);
  pipeline.Stop();
  ResetLoadOptions();
  return pipeline.Snapshot();
}

// RunPipelineWith for an action that does not need the running pipeline.
inline std::vector<MetricSnapshot> RunPipeline(const std::string& config, const std::function<void()>& during,
                                               const KernelFeatures& features = Probed()) {
  return RunPipelineWith(
      config, [&](Pipeline&) { during(); }, features);
}

// Polls pipeline.Snapshot() every 50 ms until `done(snapshot)` or `seconds` pass: for what a
// background thread (the sweep) does at its own pace, which a slow guest stretches. Returns
// whether `done` held.
inline bool WaitFor(Pipeline& pipeline, const std::function<bool(const std::vector<MetricSnapshot>&)>& done,
                    double seconds = 60) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  while (std::chrono::steady_clock::now() < end) {
    if (done(pipeline.Snapshot())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

inline const MetricSnapshot* FindMetric(const std::vector<MetricSnapshot>& all, const std::string& name) {
  for (const auto& m : all) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

// The first series of `metric` carrying every label of `labels`, or null.
inline const SeriesSnapshot* FindSeries(const std::vector<MetricSnapshot>& all, const std::string& metric,
                                        const LabelPairs& labels = {}) {
  const MetricSnapshot* m = FindMetric(all, metric);
  if (m == nullptr) return nullptr;
  for (const auto& s : m->series) {
    bool match = true;
    for (const auto& l : labels) {
      bool found = false;
      for (const auto& sl : s.labels) found |= sl == l;
      match &= found;
    }
    if (match) return &s;
  }
  return nullptr;
}

// Expects `metric` to have run on the bpf engine (its programs' runs are reported) or not.
inline void ExpectEngine(const std::vector<MetricSnapshot>& snap, const std::string& metric, bool bpf) {
  EXPECT_EQ(FindSeries(snap, "tracepoint_exporter_bpf_program_runs_total", {{"metric", metric}}) != nullptr, bpf)
      << metric << " should run on " << (bpf ? "bpf" : "perf");
}

// The value of FindSeries(all, metric, labels), or -1 when there is no such series (no count or
// sum a test expects is negative, so an absent series fails the comparison instead of crashing
// the test binary).
inline double Value(const std::vector<MetricSnapshot>& all, const std::string& metric, const LabelPairs& labels = {}) {
  const SeriesSnapshot* s = FindSeries(all, metric, labels);
  return s == nullptr ? -1 : s->value;
}
// The observation count of a histogram series, or -1 when absent.
inline int64_t Count(const std::vector<MetricSnapshot>& all, const std::string& metric, const LabelPairs& labels = {}) {
  const SeriesSnapshot* s = FindSeries(all, metric, labels);
  return s == nullptr ? -1 : static_cast<int64_t>(s->count);
}

}  // namespace tpe::testing
