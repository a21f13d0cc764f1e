// Probe metrics and the processes they count: a "pid" metric counts every thread of
// its process, those created later included; a binary replaced under its path (a package
// upgrade) is counted in the processes of the old file and of the new one, on both engines,
// across reloads, with nothing lost or counted twice; a vanished "pid" is a clear error. On
// tests/triggers/uprobe_target (its --threads and --serve modes).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/file_util.h"
#include "daemon/daemon.h"
#include "kernel/kernel_util.h"
#include "plan/probes.h"

namespace tpe {
namespace {

std::string Target() { return TPE_UPROBE_TARGET; }

// The lines of uprobe_events in this process's probe group.
std::vector<std::string> OurProbeLines() {
  std::vector<std::string> out;
  auto text = ReadFileToString("/sys/kernel/tracing/uprobe_events");
  if (!text.ok()) return out;
  const std::string group = ":" + ProbeGroupForPid(getpid()) + "/";
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    std::string line = text->substr(pos, nl - pos);
    if (line.find(group) != std::string::npos) out.push_back(line);
    pos = nl + 1;
  }
  return out;
}

void RemoveUnreferenced() {
  if (ProbeRegistry* r = ProbeRegistry::IfCreated()) r->RemoveUnreferenced();
}

// The sum of every series of `metric` (-1 when absent).
double Sum(const std::vector<MetricSnapshot>& snap, const std::string& metric) {
  const MetricSnapshot* m = testing::FindMetric(snap, metric);
  if (m == nullptr) return -1;
  double n = 0;
  for (const auto& s : m->series) n += s.value;
  return n;
}

// A running uprobe_target (or a copy of it) with its stdin and stdout on pipes.
class Trigger {
 public:
  explicit Trigger(std::vector<std::string> argv) {
    int in[2], out[2];
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    in_ = in[1];
    out_ = fdopen(out[0], "r");
  }
  ~Trigger() {
    if (in_ >= 0) close(in_);
    if (out_ != nullptr) fclose(out_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // The next line it prints, without the newline ("" at end of output).
  std::string ReadLine() {
    char line[256];
    if (fgets(line, sizeof(line), out_) == nullptr) return "";
    std::string s = line;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void Send(const std::string& line) {
    const std::string l = line + "\n";
    EXPECT_EQ(write(in_, l.data(), l.size()), static_cast<ssize_t>(l.size()));
  }
  // --serve: `n` calls of tpe_target, returning once they are made.
  void Call(long n) {
    Send(std::to_string(n));
    EXPECT_EQ(ReadLine(), "done");
  }
  // Closes its stdin and waits for it to exit 0.
  void Finish() {
    close(in_);
    in_ = -1;
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    reaped_ = true;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }

 private:
  pid_t pid_ = -1;
  int in_ = -1;
  FILE* out_ = nullptr;
  bool reaped_ = false;
};

// Runs `argv` to its exit; true when it exited 0.
bool RunToExit(std::vector<std::string> argv) {
  Trigger t(std::move(argv));
  t.Finish();
  return !::testing::Test::HasFailure();
}

constexpr long kThreadCalls = 20000;

// The process's main thread never calls tpe_target; 2 threads exist before the
// pipeline opens and 2 are created after; each calls it 20,000 times. Before, a "pid" perf event
// followed the main thread alone (and a uprobe perf event fires only while its task runs): 0.
TEST(ProbeProcessesTest, PidCountsEveryThreadIncludingLaterOnes) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  Trigger process({Target(), "--threads", "2", "2", std::to_string(kThreadCalls)});
  ASSERT_EQ(process.ReadLine(), "ready");
  const std::string t = Target(), pid = std::to_string(process.pid());
  // Sampled: 80,000 samples of ~56 bytes fit one CPU's 8 MiB ring: exact whatever the reader does.
  auto snap = testing::RunPipeline(R"({"settings": {"ring_buffer_pages": 2048}, "metrics": [
      {"name": "calls_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target", "pid": )" + pid + R"(},
      {"name": "calls_by_comm_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target", "pid": )" + pid +
                                       R"(, "labels": [{"name": "comm", "source": "comm"}]},
      {"name": "x_total", "type": "counter", "event": "uprobe:)" +
                                       t + R"(:tpe_target", "pid": )" + pid +
                                       R"(, "args": {"x": "arg0"}, "value": {"field": "x"}}]})",
                                   [&] {
                                     process.Send("go");
                                     EXPECT_EQ(process.ReadLine(), "done");
                                     process.Finish();
                                   });
  EXPECT_EQ(testing::Value(snap, "calls_total"), 4 * kThreadCalls);
  EXPECT_EQ(Sum(snap, "calls_by_comm_total"), 4 * kThreadCalls);
  EXPECT_EQ(testing::Value(snap, "calls_by_comm_total", {{"comm", "uprobe_target"}}), 4 * kThreadCalls);
  EXPECT_EQ(testing::Value(snap, "x_total"), 4.0 * kThreadCalls * (kThreadCalls - 1) / 2);
  EXPECT_EQ(Sum(snap, "tracepoint_exporter_samples_lost_total"), 0);
  // The fds it took: one per thread that existed at open (the main thread and 2), per CPU when sampled.
  const MetricSnapshot* fds = testing::FindMetric(snap, "tracepoint_exporter_pid_perf_events");
  ASSERT_NE(fds, nullptr);
  auto cpus = OnlineCpus();
  ASSERT_TRUE(cpus.ok());
  for (const auto& s : fds->series) {
    const bool sampled = s.value != 3;
    EXPECT_EQ(s.value, sampled ? 3.0 * static_cast<double>(cpus->size()) : 3.0);
  }
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// Past settings.max_pid_perf_events a "pid" metric is refused, naming the numbers and the way out.
TEST(ProbeProcessesTest, PidBeyondTheFdLimitIsRefusedWithTheNumbers) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  Trigger process({Target(), "--threads", "4", "0", "1"});
  ASSERT_EQ(process.ReadLine(), "ready");
  auto cfg = ParseConfig(R"({"settings": {"max_pid_perf_events": 4}, "metrics": [
      {"name": "calls_total", "type": "counter", "event": "uprobe:)" +
                             Target() + R"(:tpe_target", "pid": )" + std::to_string(process.pid()) + R"(}]})",
                         "limit.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), true, testing::Bpf(), {}, testing::Probed());
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  {
    Pipeline pipeline(&*tracefs);
    Status st = pipeline.Open(std::move(*plan));
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kUnavailable);
    EXPECT_NE(
        st.message().find("limit.json: metrics[0].pid: process " + std::to_string(process.pid()) +
                          " has 5 threads: uprobe:" + Target() + ":tpe_target pid " + std::to_string(process.pid()) +
                          " needs a perf event per thread (5), more than settings.max_pid_perf_events (4)"),
        std::string::npos)
        << st.ToString();
  }
  process.Send("go");
  EXPECT_EQ(process.ReadLine(), "done");
  process.Finish();
  RemoveUnreferenced();
}

// A "pid" whose process is gone, at start and at a reload that opens its events:
// the error names the config file, the metric's JSON path, the pid and what to do.
TEST(ProbeProcessesTest, AVanishedPidNamesTheFileTheMetricAndThePid) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/probe_vanished_pid.json";
  auto config = [&](pid_t pid, const std::string& filter) {
    return R"({"metrics": [
        {"name": "other_total", "type": "counter", "event": "syscalls:sys_enter_getppid"},
        {"name": "calls_total", "type": "counter", "event": "uprobe:)" +
           Target() + R"(:tpe_target", "pid": )" + std::to_string(pid) + R"(, "filter": ")" + filter + R"("}]})";
  };
  auto expect_vanished = [&](const Status& st, pid_t pid) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kNotFound);
    EXPECT_NE(
        st.message().find(path + ": metrics[1].pid: process " + std::to_string(pid) + " does not exist (it exited?)"),
        std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("set \"pid\" to a running process (or remove it to trace every process) and reload"),
              std::string::npos)
        << st.ToString();
  };
  Trigger process({Target(), "--serve"});
  const pid_t pid = process.pid();
  process.Call(10);  // it runs (exec done)
  testing::WriteFile(path, config(pid, "common_pid != 0"));
  {
    Daemon daemon(path, &*tracefs, &enums);
    ASSERT_TRUE(daemon.Start().ok());
    process.Call(100);
    process.Finish();
    // Unchanged, its events are kept: the process's final count stays on the page.
    ASSERT_TRUE(daemon.Reload().ok());
    EXPECT_EQ(testing::Value(daemon.Snapshot(), "calls_total"), 100);
    // A changed filter opens its events again: the process is gone.
    testing::WriteFile(path, config(pid, "common_pid != 1"));
    expect_vanished(daemon.Reload(), pid);
    EXPECT_EQ(testing::Value(daemon.Snapshot(), "calls_total"), 100);  // still the running plan
  }
  // At start.
  {
    Daemon daemon(path, &*tracefs, &enums);
    expect_vanished(daemon.Start(), pid);
  }
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// A copy of uprobe_target at a path of its own, replaced by a new file (a new inode) as a package
// manager does: written beside it and renamed over it.
class ReplacedBinary {
 public:
  explicit ReplacedBinary(const std::string& name) : path_(::testing::TempDir() + "/" + name) { Replace(); }
  ~ReplacedBinary() { ::unlink(path_.c_str()); }
  const std::string& path() const { return path_; }
  void Replace() {
    const std::string tmp = path_ + ".new";
    ASSERT_TRUE(RunToExit({"/bin/cp", Target(), tmp}));
    ASSERT_EQ(::rename(tmp.c_str(), path_.c_str()), 0);
  }

 private:
  std::string path_;
};

class ReplacedBinaryTest : public testing::EngineTest {};

// A binary replaced under its path: a process of the old file and one of the new file around a
// reload, exact on both engines; the old file's event goes once its last process exited (a refresh
// notices).
TEST_P(ReplacedBinaryTest, OldAndNewFilesCountAcrossReloads) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  ReplacedBinary bin("tpe_upgraded_target");
  const std::string engine = GetParam();
  const std::string path = ::testing::TempDir() + "/probe_replaced_" + engine + ".json";
  testing::WriteFile(path, R"({"settings": {"ring_buffer_pages": 256, "probe_refresh_seconds": 0}, "metrics": [
      {"name": "calls_total", "type": "counter", "engine": ")" +
                               engine + R"(", "event": "uprobe:)" + bin.path() + R"(:tpe_target"},
      {"name": "calls_by_comm_total", "type": "counter", "engine": ")" +
                               engine + R"(", "event": "uprobe:)" + bin.path() + R"(:tpe_target",
       "labels": [{"name": "comm", "source": "comm"}]},
      {"name": "x_total", "type": "counter", "engine": ")" +
                               engine + R"(", "event": "uprobe:)" + bin.path() + R"(:tpe_target",
       "args": {"x": "arg0"}, "value": {"field": "x"}},
      {"name": "call_seconds", "type": "latency", "engine": ")" +
                               engine + R"(",
       "start": {"event": "uprobe:)" +
                               bin.path() + R"(:tpe_target", "key": ["common_pid"]},
       "end": {"event": "uretprobe:)" +
                               bin.path() + R"(:tpe_target", "key": ["common_pid"]},
       "buckets": {"type": "exp2", "min": 1e-7, "max": 1}}]})");
  auto expect = [&](const std::vector<MetricSnapshot>& snap, double calls, double xsum) {
    EXPECT_EQ(testing::Value(snap, "calls_total"), calls);
    EXPECT_EQ(Sum(snap, "calls_by_comm_total"), calls);
    EXPECT_EQ(testing::Value(snap, "x_total"), xsum);
    EXPECT_EQ(testing::Count(snap, "call_seconds"), static_cast<int64_t>(calls));
  };
  auto xsum = [](double n) { return n * (n - 1) / 2; };  // tpe_target(i), i < n
  {
    Daemon daemon(path, &*tracefs, &enums);
    Status st = daemon.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    Trigger old_process({bin.path(), "--serve"});
    old_process.Call(1000);
    bin.Replace();
    // Nothing changed in the config: the reload sees the new file and keeps the old one's event
    // while old_process runs it.
    st = daemon.Reload();
    ASSERT_TRUE(st.ok()) << st.ToString();
    // On each file: the uprobe without args, the one with x = arg0, the uretprobe.
    EXPECT_EQ(OurProbeLines().size(), 6u);
    old_process.Call(1000);
    Trigger new_process({bin.path(), "--serve"});
    new_process.Call(500);
    new_process.Finish();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the reader's rounds
    expect(daemon.Snapshot(), 2500, 2 * xsum(1000) + xsum(500));
    // The old file's last process exits: a refresh drops its events, the counts stay.
    old_process.Finish();
    auto refreshed = daemon.RefreshProbes();
    ASSERT_TRUE(refreshed.ok()) << refreshed.status().ToString();
    EXPECT_TRUE(*refreshed);
    EXPECT_EQ(OurProbeLines().size(), 3u);
    ASSERT_TRUE(RunToExit({bin.path(), "300"}));
    refreshed = daemon.RefreshProbes();
    ASSERT_TRUE(refreshed.ok());
    EXPECT_FALSE(*refreshed);  // nothing changed since
    daemon.Stop();
    expect(daemon.Snapshot(), 2800, 2 * xsum(1000) + xsum(500) + xsum(300));
  }
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

// Reloads while a process of the old file calls the function without pause: the
// binary replaced under it, then touched (same inode: the same event), then the old file's
// process is the only one. No sample lost, none counted twice in counting mode.
TEST_P(ReplacedBinaryTest, ReloadsUnderLoadLoseAndDoubleNothing) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  ReplacedBinary bin("tpe_loaded_target");
  const std::string engine = GetParam();
  const std::string path = ::testing::TempDir() + "/probe_load_" + engine + ".json";
  // 100,000 samples of ~56 bytes fit one CPU's 8 MiB ring: exact whatever the reader does.
  const std::string counting = engine == "bpf" ? R"(, "engine": "bpf")" : "";
  testing::WriteFile(path, R"({"settings": {"ring_buffer_pages": 2048, "probe_refresh_seconds": 0}, "metrics": [
      {"name": "calls_total", "type": "counter", "event": "uprobe:)" +
                               bin.path() + R"(:tpe_target")" + counting + R"(},
      {"name": "calls_by_comm_total", "type": "counter", "engine": ")" +
                               engine + R"(", "event": "uprobe:)" + bin.path() + R"(:tpe_target",
       "labels": [{"name": "comm", "source": "comm"}]}]})");
  constexpr long kCalls = 100000;
  {
    Daemon daemon(path, &*tracefs, &enums);
    Status st = daemon.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    Trigger process({bin.path(), "--serve"});
    // The first batch answered before the binary is replaced: the process runs the old file (a
    // fork's exec that a busy machine delays past the Replace would run the new one, which no
    // probe watches until the first reload: seen as 0 counts and one probe line).
    process.Send(std::to_string(kCalls / 10));
    EXPECT_EQ(process.ReadLine(), "done");
    for (int i = 1; i < 10; ++i) process.Send(std::to_string(kCalls / 10));
    std::thread reloads([&] {
      bin.Replace();
      EXPECT_TRUE(daemon.Reload().ok());
      ASSERT_EQ(::utimensat(AT_FDCWD, bin.path().c_str(), nullptr, 0), 0);  // touched: same inode
      EXPECT_TRUE(daemon.Reload().ok());
      EXPECT_TRUE(daemon.Reload().ok());
    });
    reloads.join();
    for (int i = 1; i < 10; ++i) EXPECT_EQ(process.ReadLine(), "done");
    process.Finish();
    EXPECT_EQ(OurProbeLines().size(), 2u);  // the old file's and the new file's, never a second on one inode
    daemon.Stop();
    auto snap = daemon.Snapshot();
    EXPECT_EQ(testing::Value(snap, "calls_total"), kCalls);
    EXPECT_EQ(Sum(snap, "calls_by_comm_total"), kCalls);
    if (engine == "perf") {
      EXPECT_EQ(Sum(snap, "tracepoint_exporter_samples_lost_total"), 0);
      EXPECT_EQ(Sum(snap, "tracepoint_exporter_ring_lost_samples_total"), 0);
      EXPECT_EQ(Sum(snap, "tracepoint_exporter_ring_other_records_total"), 0);
    }
  }
  RemoveUnreferenced();
  EXPECT_EQ(OurProbeLines(), std::vector<std::string>{});
}

TPE_INSTANTIATE_ENGINES(ReplacedBinaryTest);

}  // namespace
}  // namespace tpe
