// Probe events from config (plan/probes.h) through the whole pipeline on the live kernel:
// uprobes and uretprobes on tests/triggers/uprobe_target, CPython's USDT probes, and no probe
// event left behind after a run or a reload that drops it.
#include "plan/probes.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <string>

#include "common/file_util.h"
#include "common/scoped_fd.h"
#include "daemon/daemon.h"
#include "kernel/kernel_util.h"

namespace tpe {
namespace {

constexpr int kCalls = 1000;
constexpr const char* kPython = "/usr/bin/python3.11";

// Runs `argv` to its exit; true when it exited 0.
bool RunCommand(std::vector<std::string> argv) {
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> a;
    for (auto& s : argv) a.push_back(s.data());
    a.push_back(nullptr);
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execv(a[0], a.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The lines of uprobe_events in this process's probe group.
std::vector<std::string> OurProbeLines() {
  std::vector<std::string> out;
  auto text = ReadFileToString("/sys/kernel/tracing/uprobe_events");
  if (!text.ok()) return out;
  const std::string group = ProbeGroupForPid(getpid()) + "/";
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    std::string line = text->substr(pos, nl - pos);
    if (line.find(":" + group) != std::string::npos) out.push_back(line);
    pos = nl + 1;
  }
  return out;
}

// The sum of every series of `metric` (0 when absent).
double Sum(const std::vector<MetricSnapshot>& snap, const std::string& metric) {
  const MetricSnapshot* m = testing::FindMetric(snap, metric);
  double n = 0;
  if (m != nullptr) {
    for (const auto& s : m->series) n += s.value;
  }
  return n;
}

void RemoveUnreferenced() {
  if (ProbeRegistry* r = ProbeRegistry::IfCreated()) r->RemoveUnreferenced();
}

std::string Target() { return TPE_UPROBE_TARGET; }

TEST(ProbesKernelTest, UprobeCountsSumsStringsReturnValuesAndLatencyExactly) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string t = Target();
  // The rings hold the whole run (~5 sampled hits per call, < 128 bytes each, on one CPU): the
  // counts are exact whatever the scheduler does with the reader (a 6.12 guest under TCG lost 103
  // calls' samples to a 64-page ring, counted as lost).
  auto snap = testing::RunPipeline(R"({"settings": {"ring_buffer_pages": 1024}, "metrics": [
      {"name": "calls_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target"},
      {"name": "xsum_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target",
       "args": {"x": "arg0:s64"}, "value": {"field": "x"}},
      {"name": "big_x_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target",
       "args": {"x": "arg0:s64"}, "filter": "x >= 900", "labels": [{"name": "comm", "source": "comm"}]},
      {"name": "strs_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target_str",
       "args": {"s": "arg0:ustring"}, "labels": [{"name": "s", "field": "s"}]},
      {"name": "rv_total", "type": "counter", "event": "uretprobe:)" +
                                       t + R"(:tpe_target",
       "args": {"rv": "retval:s64"}, "value": {"field": "rv"}},
      {"name": "call_seconds", "type": "latency",
       "start": {"event": "uprobe:)" + t +
                                       R"(:tpe_target", "key": ["common_pid"]},
       "end": {"event": "uretprobe:)" + t +
                                       R"(:tpe_target", "key": ["common_pid"]},
       "buckets": {"type": "exp2", "min": 1e-7, "max": 1}}]})",
                                   [&] {
                                     EXPECT_TRUE(RunCommand({t, std::to_string(kCalls)}));
                                   });
  ASSERT_NE(testing::FindSeries(snap, "calls_total"), nullptr);
  EXPECT_EQ(testing::Value(snap, "calls_total"), kCalls);
  EXPECT_EQ(Sum(snap, "tracepoint_exporter_samples_lost_total"), 0);
  EXPECT_EQ(Sum(snap, "tracepoint_exporter_ring_lost_samples_total"), 0);
  EXPECT_EQ(testing::Value(snap, "xsum_total"), kCalls * (kCalls - 1) / 2);  // tpe_target(i), i < N
  ASSERT_NE(testing::FindSeries(snap, "big_x_total", {{"comm", "uprobe_target"}}), nullptr);
  EXPECT_EQ(testing::Value(snap, "big_x_total", {{"comm", "uprobe_target"}}), 100);
  ASSERT_NE(testing::FindSeries(snap, "strs_total", {{"s", "tpe_hello"}}), nullptr);
  EXPECT_EQ(testing::Value(snap, "strs_total", {{"s", "tpe_hello"}}), kCalls);
  EXPECT_EQ(testing::Value(snap, "rv_total"), static_cast<double>(kCalls) * kCalls);  // sum of 2i + 1
  ASSERT_NE(testing::FindSeries(snap, "call_seconds"), nullptr);
  EXPECT_EQ(testing::Count(snap, "call_seconds"), kCalls);
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

TEST(ProbesKernelTest, CpythonUsdtAuditByEventAndGcStartByGeneration) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  if (access(kPython, X_OK) != 0) {
    if (testing::KernelRequired()) FAIL() << kPython << " is missing (scripts/install-deps.sh installs python3)";
    GTEST_SKIP() << kPython << " is missing";
  }
  const std::string py = kPython;
  constexpr int kAudits = 700, kCollects = 1000;
  auto snap = testing::RunPipeline(
      R"({"settings": {"ring_buffer_pages": 1024}, "metrics": [
      {"name": "py_audit_total", "type": "counter", "event": "usdt:)" +
          py + R"(:python:audit",
       "args": {"event": "arg0:ustring"}, "labels": [{"name": "event", "field": "event"}]},
      {"name": "py_gc1_total", "type": "counter", "event": "usdt:)" +
          py + R"(:python:gc__start",
       "args": {"generation": "arg0"}, "filter": "generation == 1"}]})",
      [&] {
        EXPECT_TRUE(RunCommand({py, "-c",
                                "import sys, gc\ngc.disable()\nfor _ in range(" + std::to_string(kAudits) +
                                    "): sys.audit('tpe_x')\nfor _ in range(" + std::to_string(kCollects) +
                                    "): gc.collect(1)\n"}));
      });
  ASSERT_NE(testing::FindSeries(snap, "py_audit_total", {{"event", "tpe_x"}}), nullptr);
  EXPECT_EQ(testing::Value(snap, "py_audit_total", {{"event", "tpe_x"}}), kAudits);
  ASSERT_NE(testing::FindSeries(snap, "py_gc1_total"), nullptr);
  EXPECT_EQ(testing::Value(snap, "py_gc1_total"), kCollects);
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// A reload that drops a probe metric removes its event at once; one that keeps it keeps the very
// event (and its count); the daemon's end removes the rest.
TEST(ProbesKernelTest, ReloadKeepsOrRemovesProbeEventsAndStopLeavesNone) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string t = Target();
  const std::string path = ::testing::TempDir() + "/probes_reload_test.json";
  const std::string calls = R"({"name": "calls_total", "type": "counter", "event": "uprobe:)" + t +
                            R"(:tpe_target", "args": {"x": "arg0"}, "labels": [{"name": "comm", "source": "comm"}]})";
  const std::string strs =
      R"({"name": "strs_total", "type": "counter", "event": "uprobe:)" + t + R"(:tpe_target_str"})";
  const std::string settings = R"({"settings": {"ring_buffer_pages": 1024}, )";
  testing::WriteFile(path, settings + R"("metrics": [)" + calls + "," + strs + "]}");
  {
    Daemon daemon(path, &*tracefs, &enums);
    ASSERT_TRUE(daemon.Start().ok());
    EXPECT_EQ(OurProbeLines().size(), 2u);
    ASSERT_TRUE(RunCommand({t, "300"}));
    testing::WriteFile(path, settings + R"("metrics": [)" + calls + "]}");  // strs_total dropped
    Status st = daemon.Reload();
    ASSERT_TRUE(st.ok()) << st.ToString();
    const std::vector<std::string> lines = OurProbeLines();
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_NE(lines[0].find("tpe_target"), std::string::npos) << lines[0];
    ASSERT_TRUE(RunCommand({t, "200"}));
    // A refused reload (an unknown symbol) keeps the running metrics and creates nothing.
    testing::WriteFile(path, settings + R"("metrics": [)" + calls + R"(, {"name": "n_total", "type": "counter",
        "event": "uprobe:)" + t + R"(:tpe_targt"}]})");
    st = daemon.Reload();
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find("tpe_target"), std::string::npos) << st.ToString();  // the closest name
    EXPECT_EQ(OurProbeLines().size(), 1u);
    daemon.Stop();
    auto snap = daemon.Snapshot();
    ASSERT_NE(testing::FindSeries(snap, "calls_total", {{"comm", "uprobe_target"}}), nullptr);
    EXPECT_EQ(testing::Value(snap, "calls_total", {{"comm", "uprobe_target"}}), 500);
  }
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// kprobe:/kretprobe: through the whole pipeline where the kernel has kprobe events (Debian's
// kernels in the kernel matrix); elsewhere (this development VM) the plan says why, exactly.
TEST(ProbesKernelTest, KprobeCountsAndKretprobeLatencyOrAClearRefusal) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  constexpr int kSleeps = 20;
  const std::string config = R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
      {"name": "sleeps_total", "type": "counter", "event": "kprobe:do_nanosleep",
       "filter": "comm == \"tpe_kp_sleep\""},
      {"name": "sleep_seconds", "type": "latency",
       "start": {"event": "kprobe:do_nanosleep", "key": ["common_pid"], "filter": "comm == \"tpe_kp_sleep\""},
       "end": {"event": "kretprobe:do_nanosleep", "key": ["common_pid"], "args": {"ret": "retval:s32"},
               "filter": "comm == \"tpe_kp_sleep\""},
       "labels": [{"name": "ret", "field": "ret", "from": "end"}],
       "buckets": {"type": "explicit", "bounds": [0.0005, 1]}}]})";
  if (access((tracefs->root() + "/kprobe_events").c_str(), F_OK) != 0) {
    auto cfg = ParseConfig(config, "k.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan =
        BuildPlan(*cfg, *tracefs, KernelEnums(), true, bpf::BpfSupport{false, "not probed"}, {}, testing::Probed());
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kUnavailable) << plan.status().ToString();
    EXPECT_NE(plan.status().message().find("k.json: metrics[0].event \"kprobe:do_nanosleep\": kprobes are not "
                                           "available on this kernel (no " +
                                           tracefs->root() + "/kprobe_events; CONFIG_KPROBE_EVENTS)"),
              std::string::npos)
        << plan.status().ToString();
    return;
  }
  // Both engines: perf events, and the bpf engine's BPF_PROG_TYPE_KPROBE programs (with
  // "engine": "bpf" forced, the label-less counter is a program too).
  for (const char* engine : {"perf", "bpf"}) {
    SCOPED_TRACE(engine);
    if (std::string(engine) == "bpf" && !testing::Bpf().available) continue;
    int go = -1;
    const pid_t child = testing::ForkSleeper("tpe_kp_sleep", kSleeps, &go);
    ASSERT_GT(child, 0);
    testing::CurrentEngine() = engine;
    auto snap = testing::RunPipeline(config, [&] {
      EXPECT_EQ(write(go, "x", 1), 1);
      close(go);
      int status = 0;
      waitpid(child, &status, 0);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    });
    testing::CurrentEngine() = "auto";
    ASSERT_NE(testing::FindSeries(snap, "sleeps_total"), nullptr);
    EXPECT_EQ(testing::Value(snap, "sleeps_total"), kSleeps);
    const SeriesSnapshot* lat = testing::FindSeries(snap, "sleep_seconds", {{"ret", "0"}});
    ASSERT_NE(lat, nullptr);
    EXPECT_EQ(lat->count, static_cast<uint64_t>(kSleeps));
    ASSERT_EQ(lat->bucket_counts.size(), 3u);
    EXPECT_EQ(lat->bucket_counts[0], 0u);  // none shorter than 0.5 ms: each slept 1 ms
    EXPECT_GE(lat->sum, kSleeps * 0.001);
    RemoveUnreferenced();
  }
}

// "pid": only that process's hits, on the perf engine (its perf events are opened for the
// process; the kernel installs the uprobe in it alone). Two processes run the same binary.
TEST(ProbesKernelTest, PidLimitsAUprobeToOneProcess) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  // Two copies of the trigger, held before exec so their pids are known to the config.
  auto hold = [](int calls, int* go_fd) {
    int go[2];
    EXPECT_EQ(pipe2(go, O_CLOEXEC), 0);
    pid_t pid = fork();
    if (pid == 0) {
      close(go[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(2);
      const std::string n = std::to_string(calls), t = Target();
      execl(t.c_str(), t.c_str(), n.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(go[0]);
    *go_fd = go[1];
    return pid;
  };
  int go_a = -1, go_b = -1;
  const pid_t a = hold(300, &go_a), b = hold(200, &go_b);
  const std::string t = Target();
  auto snap = testing::RunPipeline(R"({"settings": {"ring_buffer_pages": 256}, "metrics": [
      {"name": "a_calls_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target", "pid": )" + std::to_string(a) + R"(},
      {"name": "a_x_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target", "pid": )" + std::to_string(a) +
                                       R"(, "args": {"x": "arg0"}, "value": {"field": "x"}},
      {"name": "all_calls_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target"}]})",
                                   [&] {
                                     for (int fd : {go_a, go_b}) {
                                       EXPECT_EQ(write(fd, "x", 1), 1);
                                       close(fd);
                                     }
                                     for (pid_t p : {a, b}) {
                                       int status = 0;
                                       waitpid(p, &status, 0);
                                       EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
                                     }
                                   });
  ASSERT_NE(testing::FindSeries(snap, "a_calls_total"), nullptr);
  EXPECT_EQ(testing::Value(snap, "a_calls_total"), 300);
  EXPECT_EQ(testing::Value(snap, "a_x_total"), 300 * 299 / 2);
  EXPECT_EQ(testing::Value(snap, "all_calls_total"), 500);
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// A package upgrade replaces the binary under the same path (a new inode): the kernel bound the
// old uprobe to the old inode, so a reload must define a new event, and the count goes on.
TEST(ProbesKernelTest, ReloadAfterTheBinaryWasReplacedProbesTheNewFile) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string bin = ::testing::TempDir() + "/tpe_replaced_target";
  auto copy = [&] {
    const std::string tmp = bin + ".new";
    ASSERT_TRUE(RunCommand({"/bin/cp", Target(), tmp}));
    ASSERT_EQ(::rename(tmp.c_str(), bin.c_str()), 0);  // a new inode at the same path
  };
  copy();
  const std::string path = ::testing::TempDir() + "/probes_replaced_test.json";
  testing::WriteFile(path, R"({"metrics": [{"name": "calls_total", "type": "counter", "event": "uprobe:)" + bin +
                               R"(:tpe_target"}]})");
  {
    Daemon daemon(path, &*tracefs, &enums);
    ASSERT_TRUE(daemon.Start().ok());
    ASSERT_TRUE(RunCommand({bin, "30"}));
    copy();
    Status st = daemon.Reload();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_TRUE(RunCommand({bin, "40"}));
    daemon.Stop();
    auto snap = daemon.Snapshot();
    ASSERT_NE(testing::FindSeries(snap, "calls_total"), nullptr);
    EXPECT_EQ(testing::Value(snap, "calls_total"), 70);
  }
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
  ::unlink(bin.c_str());
}

// Probes that would count the wrong thing, or change what the program executes, are refused.
TEST(ProbesKernelTest, IfuncsAndOffsetsIntoFunctionsAreRefused) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  auto plan_error = [&](const std::string& event) {
    auto cfg =
        ParseConfig(R"({"metrics": [{"name": "a_total", "type": "counter", "event": ")" + event + R"("}]})", "p.json");
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan =
        BuildPlan(*cfg, *tracefs, KernelEnums(), true, bpf::BpfSupport{false, "not probed"}, {}, testing::Probed());
    return plan.ok() ? std::string("planned") : plan.status().message();
  };
  const std::string libc = "/lib/x86_64-linux-gnu/libc.so.6";
  EXPECT_NE(plan_error("uprobe:" + libc + ":strlen").find("strlen is an IFUNC"), std::string::npos)
      << plan_error("uprobe:" + libc + ":strlen");
  EXPECT_NE(plan_error("uprobe:" + Target() + ":tpe_target+1").find("an offset into a function is refused"),
            std::string::npos);
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// A process that had this pid before (a crash loop in a container, where the daemon is always pid
// 1) left events in the group this process uses: a new registry removes them first.
TEST(ProbesKernelTest, ANewRegistryRemovesItsGroupsLeftovers) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  ProbeEventSpec left;
  left.group = ProbeGroupForPid(getpid());
  left.event = "left_by_a_dead_process";
  left.path = Target();
  auto line = ProbeEventLine(left);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  {  // written by hand, owned by no object: as a crashed process leaves it
    ScopedFd fd(::open((tracefs->root() + "/uprobe_events").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    ASSERT_EQ(::write(fd.get(), line->data(), line->size()), static_cast<ssize_t>(line->size()));
  }
  ASSERT_EQ(OurProbeLines().size(), 1u);
  ProbeRegistry fresh(*tracefs);
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

TEST(ProbesKernelTest, MissingBinaryAndStrippedNamesAreClearErrors) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  auto cfg = ParseConfig(
      R"({"metrics": [{"name": "a_total", "type": "counter", "event": "uprobe:/nonexistent/tpe:main"}]})", "p.json");
  ASSERT_TRUE(cfg.ok());
  auto plan =
      BuildPlan(*cfg, *tracefs, KernelEnums(), true, bpf::BpfSupport{false, "not probed"}, {}, testing::Probed());
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kNotFound) << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("p.json: metrics[0].event"), std::string::npos) << plan.status().ToString();
  EXPECT_NE(plan.status().message().find("/nonexistent/tpe"), std::string::npos) << plan.status().ToString();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

}  // namespace
}  // namespace tpe
