// Kernel tier for gauges, both engines: K tasks blocked between a start and an end
// event read K, then 0; TCP connections in a network namespace of their own read by state through
// sock:inet_sock_set_state (up on newstate, down on oldstate); a max gauge reads each scrape
// window's largest value, then nothing until new values come. And "auto" plans gauges on the bpf
// engine where it is available.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <thread>

#include "bpf/loader.h"
#include "kernel/kernel_util.h"

namespace tpe {
namespace {

using testing::ExpectEngine;
using testing::FindMetric;
using testing::FindSeries;
using testing::RunPipelineWith;
using testing::WaitFor;

double Gauge(const std::vector<MetricSnapshot>& snap, const std::string& name, const LabelPairs& labels = {}) {
  const SeriesSnapshot* s = FindSeries(snap, name, labels);
  return s == nullptr ? -1e9 : s->value;
}

class KernelGaugeTest : public testing::EngineTest {};
TPE_INSTANTIATE_ENGINES(KernelGaugeTest);

TEST_P(KernelGaugeTest, InflightReadsTheBlockedTasksThenZero) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  constexpr int kBlocked = 4;
  int go[2], block[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(block, O_CLOEXEC), 0);
  std::vector<pid_t> kids;
  for (int i = 0; i < kBlocked; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_NAME, "tpe_blocked");
      close(go[1]);  // so that the parent's close is an end of file here
      close(block[1]);
      char c;
      if (read(go[0], &c, 1) != 1) _exit(2);     // before the pipeline: no start seen
      if (read(block[0], &c, 1) != 1) _exit(3);  // the read the gauge counts while it blocks
      _exit(0);
    }
    kids.push_back(pid);
  }
  // Each child blocked in its read of `go` before the pipeline starts (/proc/PID/syscall: the
  // syscall number first, 0 = read on x86-64), so that no start of that read is seen.
  for (pid_t p : kids) {
    for (int i = 0; i < 1000; ++i) {
      std::ifstream in("/proc/" + std::to_string(p) + "/syscall");
      std::string nr;
      if (in >> nr && nr == std::to_string(SYS_read)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string pids;
  for (pid_t p : kids) pids += (pids.empty() ? "" : " || ") + std::string("common_pid == ") + std::to_string(p);
  const std::string config = R"({"metrics": [{"name": "reads_in_flight", "type": "gauge",
      "timeout_seconds": 3600,
      "inflight": {"start": {"event": "syscalls:sys_enter_read", "key": ["common_pid"], "filter": ")" +
                             pids + R"("},
                   "end": {"event": "syscalls:sys_exit_read", "key": ["common_pid"], "filter": ")" +
                             pids + R"("}},
      "labels": [{"name": "comm", "source": "comm"}]}]})";
  bool saw_k = false, saw_zero = false;
  auto snap = RunPipelineWith(config, [&](Pipeline& pipeline) {
    ASSERT_EQ(write(go[1], "xxxx", kBlocked), kBlocked);
    saw_k = WaitFor(pipeline, [&](const auto& s) {
      return Gauge(s, "reads_in_flight", {{"comm", "tpe_blocked"}}) == kBlocked;
    });
    ASSERT_EQ(write(block[1], "yyyy", kBlocked), kBlocked);
    for (pid_t p : kids) {
      int status = 0;
      EXPECT_EQ(waitpid(p, &status, 0), p);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    saw_zero = WaitFor(pipeline, [&](const auto& s) {
      return Gauge(s, "reads_in_flight", {{"comm", "tpe_blocked"}}) == 0;
    });
  });
  for (int fd : {go[0], go[1], block[0], block[1]}) close(fd);  // children still waiting read EOF
  for (pid_t p : kids) waitpid(p, nullptr, 0);                  // (reaped already when all went well)
  EXPECT_TRUE(saw_k) << "never read " << kBlocked << " tasks in read()";
  EXPECT_TRUE(saw_zero) << "never back to 0; last " << Gauge(snap, "reads_in_flight", {{"comm", "tpe_blocked"}});
  // Back to 0 by the ends, not by the timeout; each start met its end, and the ends without a
  // start are the children's reads of `go`, which began before the pipeline.
  for (const char* reason : {"expired", "replaced", "table_full"}) {
    EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_latency_unmatched_total",
                             {{"metric", "reads_in_flight"}, {"reason", reason}}),
              0)
        << reason;
  }
  EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_latency_unmatched_total",
                           {{"metric", "reads_in_flight"}, {"reason", "no_start"}}),
            kBlocked);
  ExpectEngine(snap, "reads_in_flight", IsBpf());
}

TEST_P(KernelGaugeTest, TcpConnectionsByStateInANetworkNamespace) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  if (system("command -v unshare >/dev/null && command -v python3 >/dev/null && command -v ip >/dev/null") != 0) {
    if (testing::KernelRequired()) FAIL() << "unshare, ip and python3 are needed (util-linux, iproute2, python3)";
    GTEST_SKIP() << "unshare, ip or python3 missing";
  }
  if (system("unshare -n true 2>/dev/null") != 0) {  // e.g. a container without CAP_SYS_ADMIN
    if (testing::KernelRequired()) FAIL() << "unshare -n (a network namespace) is refused here";
    GTEST_SKIP() << "unshare -n (a network namespace) is refused here";
  }
  constexpr int kConnections = 3;
  const std::string config = R"json({"metrics": [{"name": "tcp_connections", "type": "gauge",
      "up": {"event": "sock:inet_sock_set_state", "filter": "sport == 47123 || dport == 47123",
             "labels": [{"name": "state", "field": "newstate", "decode": "symbolic"}]},
      "down": {"event": "sock:inet_sock_set_state",
               "filter": "(sport == 47123 || dport == 47123) && (oldstate != 10 || newstate != 3)",
               "labels": [{"name": "state", "field": "oldstate", "decode": "symbolic"}]}}]})json";
  std::vector<MetricSnapshot> held;
  const auto end = RunPipelineWith(config, [&](Pipeline& pipeline) {
    // A namespace of its own: no other socket on port 47123. A listener and 3 connections, held
    // until the file "release" appears.
    const std::string dir = ::testing::TempDir();
    const std::string release = dir + "/tpe_tcp_release", ready = dir + "/tpe_tcp_ready";
    unlink(release.c_str());
    unlink(ready.c_str());
    const std::string script =
        "import os, socket, time\n"
        "os.system('ip link set lo up')\n"
        "l = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
        "l.bind(('127.0.0.1', 47123)); l.listen(8)\n"
        "cs = [socket.create_connection(('127.0.0.1', 47123)) for _ in range(" +
        std::to_string(kConnections) +
        ")]\n"
        "ss = [l.accept()[0] for _ in cs]\n"
        "open('" +
        ready +
        "', 'w').close()\n"
        "while not os.path.exists('" +
        release + "'): time.sleep(0.05)\n";
    const pid_t child = fork();
    if (child == 0) {
      execlp("unshare", "unshare", "-n", "python3", "-c", script.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 600 && access(ready.c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(access(ready.c_str(), F_OK), 0) << "the namespace's connections never came up";
    WaitFor(
        pipeline,
        [&](const auto& s) {
          return Gauge(s, "tcp_connections", {{"state", "TCP_ESTABLISHED"}}) == 2 * kConnections;
        },
        30);
    held = pipeline.Snapshot();
    FILE* f = fopen(release.c_str(), "w");
    if (f != nullptr) fclose(f);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  });
  // Each connection is ESTABLISHED at both ends; the listener is LISTEN; nothing is left half-open.
  // A server-side socket is cloned from the listener and reports LISTEN -> SYN_RECV
  // (inet_csk_clone_lock): not a listener going down, so the down side filters it out
  // (TCP_LISTEN = 10, TCP_SYN_RECV = 3). CLOSE reads minus the sockets that left it (the
  // listener and the clients): the gauge starts at 0, not at the number of closed sockets.
  EXPECT_EQ(Gauge(held, "tcp_connections", {{"state", "TCP_ESTABLISHED"}}), 2 * kConnections);
  EXPECT_EQ(Gauge(held, "tcp_connections", {{"state", "TCP_LISTEN"}}), 1);
  for (const char* st : {"TCP_SYN_SENT", "TCP_SYN_RECV"}) {
    const double v = Gauge(held, "tcp_connections", {{"state", st}});
    EXPECT_TRUE(v == 0 || v == -1e9) << st << " " << v;
  }
  EXPECT_EQ(Gauge(held, "tcp_connections", {{"state", "TCP_CLOSE"}}), -(kConnections + 1));
  ExpectEngine(end, "tcp_connections", IsBpf());
}

// write() sizes from one task: the max gauge of each scrape window.
TEST_P(KernelGaugeTest, MaxPerScrapeWindowThenReset) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  int go[2], again[2], done[2];
  ASSERT_EQ(pipe2(go, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(again, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(done, O_CLOEXEC), 0);
  const pid_t child = fork();
  if (child == 0) {
    static char buf[10000];
    char c;
    close(go[1]);
    close(again[1]);
    close(done[0]);
    int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (read(go[0], &c, 1) != 1) _exit(2);
    for (size_t n : {100, 5000, 300}) (void)!write(fd, buf, n);
    if (write(done[1], "d", 1) != 1) _exit(4);  // 1 byte: filtered out (count > 1)
    if (read(again[0], &c, 1) != 1) _exit(2);
    for (size_t n : {7, 9}) (void)!write(fd, buf, n);
    _exit(0);
  }
  close(done[1]);
  const std::string pid = std::to_string(child);
  // The child's signal to us is a write of 1 byte too: the filter keeps writes of 2 bytes or more.
  const std::string config = R"({"metrics": [{"name": "write_max_bytes", "type": "gauge",
      "max": {"event": "syscalls:sys_enter_write", "field": "count", "filter": "common_pid == )" +
                             pid + R"( && count > 1"}}]})";
  std::vector<MetricSnapshot> first, empty, second;
  const auto end = RunPipelineWith(config, [&](Pipeline& pipeline) {
    // The reader reads the rings at least every 100 ms: 2 s (8 s in a slow guest) after the writes
    // are done, they are in. (Polling would close the windows: every snapshot is a scrape.)
    const auto settle = std::chrono::milliseconds(testing::StretchedForGuest(2000));
    char c;
    ASSERT_EQ(write(go[1], "x", 1), 1);
    ASSERT_EQ(read(done[0], &c, 1), 1);
    std::this_thread::sleep_for(settle);
    first = pipeline.Snapshot();
    empty = pipeline.Snapshot();
    ASSERT_EQ(write(again[1], "x", 1), 1);
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    std::this_thread::sleep_for(settle);
    second = pipeline.Snapshot();
  });
  for (int fd : {go[0], go[1], again[0], again[1], done[0]}) close(fd);
  waitpid(child, nullptr, 0);  // (reaped already when all went well)
  EXPECT_EQ(Gauge(first, "write_max_bytes"), 5000);
  ASSERT_NE(FindMetric(empty, "write_max_bytes"), nullptr);
  EXPECT_TRUE(FindMetric(empty, "write_max_bytes")->series.empty()) << "a window without writes has no value";
  EXPECT_EQ(Gauge(second, "write_max_bytes"), 9);
  ExpectEngine(end, "write_max_bytes", IsBpf());
}

// A task writes 100, 200, 5000 and 300 bytes over and over while the pipeline is scraped 12
// times: every window has the writes, so every page reads max 5000, min of -1 x bytes -5000 (a
// negative scale: the smallest value is the largest field) and last 5000 (of the 5000-byte
// writes): no window loses its value to the scrape that closes it while writes go on (both
// engines keep a window's value apart from the next window's: gauge.h, bpf_metric.h).
void ExpectExtremesHoldWhileWritesRaceTheScrapes(bool bpf) {
  int stop[2];
  ASSERT_EQ(pipe2(stop, O_CLOEXEC), 0);
  const pid_t child = fork();
  if (child == 0) {
    static char buf[5000];
    close(stop[1]);
    fcntl(stop[0], F_SETFL, O_NONBLOCK);
    const int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    char c;
    while (read(stop[0], &c, 1) < 0) {
      for (size_t n : {100, 200, 5000, 300}) (void)!write(fd, buf, n);
    }
    _exit(0);
  }
  close(stop[0]);
  const std::string filter = "common_pid == " + std::to_string(child) + " && count > 1";
  const std::string config = R"({"metrics": [
      {"name": "w_max", "type": "gauge", "max": {"event": "syscalls:sys_enter_write", "field": "count", "filter": ")" +
                             filter + R"("}},
      {"name": "w_min", "type": "gauge", "min": {"event": "syscalls:sys_enter_write", "field": "count",
       "scale": -1, "filter": ")" +
                             filter + R"("}},
      {"name": "w_last", "type": "gauge", "last": {"event": "syscalls:sys_enter_write", "field": "count",
       "filter": ")" + filter +
                             R"( && count == 5000"}}]})";
  std::vector<std::vector<MetricSnapshot>> pages;
  const auto end = RunPipelineWith(config, [&](Pipeline& pipeline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(testing::StretchedForGuest(300)));
    pipeline.Snapshot();  // the first window began before the child's writes reached every CPU
    for (int i = 0; i < 12; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(testing::StretchedForGuest(300)));
      pages.push_back(pipeline.Snapshot());
    }
    ASSERT_EQ(write(stop[1], "x", 1), 1);
  });
  close(stop[1]);
  waitpid(child, nullptr, 0);
  const std::pair<const char*, double> want[] = {{"w_max", 5000}, {"w_min", -5000}, {"w_last", 5000}};
  for (const auto& [name, value] : want) {
    int missing = 0;
    for (const auto& page : pages) {
      const double v = Gauge(page, name);
      if (v == -1e9) {
        ++missing;
        continue;
      }
      EXPECT_EQ(v, value) << name;
    }
    EXPECT_EQ(missing, 0) << name << " missing from " << missing << " of " << pages.size() << " pages";
    ExpectEngine(end, name, bpf);
  }
}

TEST_P(KernelGaugeTest, ExtremesHoldWhileWritesRaceTheScrapes) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  ExpectExtremesHoldWhileWritesRaceTheScrapes(IsBpf());
}

// With one CPU online, membarrier(MEMBARRIER_CMD_GLOBAL) waits for nothing (loader.h
// WaitForProgramRuns): the scrapes of max/min/last gauges then wait by the map-in-map update. This
// takes every CPU but cpu0 offline for its run (and brings them back), as the hotplug tests do.
TEST(KernelGaugeHotplugTest, ExtremesHoldWithOneCpuOnline) {
  TPE_REQUIRE_BPF_OR_SKIP();
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_CONF));
  auto set_online = [](int cpu, bool on) {
    std::ofstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/online");
    f << (on ? "1" : "0");
    f.flush();
    return static_cast<bool>(f);
  };
  struct Restore {
    std::function<void()> f;
    ~Restore() { f(); }
  } restore{[&] {
    for (int c = 1; c < cpus; ++c) set_online(c, true);
  }};
  for (int c = 1; c < cpus; ++c) {
    if (access(("/sys/devices/system/cpu/cpu" + std::to_string(c) + "/online").c_str(), W_OK) == 0) {
      ASSERT_TRUE(set_online(c, false)) << "cpu" << c;
    }
  }
  ASSERT_EQ(sysconf(_SC_NPROCESSORS_ONLN), 1) << "CPUs that cannot go offline";
  Status st = bpf::WaitForProgramRuns();
  ASSERT_TRUE(st.ok()) << st.ToString();
  testing::CurrentEngine() = "bpf";
  ExpectExtremesHoldWhileWritesRaceTheScrapes(true);
  testing::CurrentEngine() = "auto";
}

// A child that steps through up to 3 actions, one per byte the test writes to it, and exits at
// the end of its pipe: getpgid(marker) (the up), getsid(marker) (the down), then exit. Syscalls
// on a pid no task has (`marker`) fail, and the filters pick them out of every other task's.
class Stepper {
 public:
  explicit Stepper(long marker) {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      // Only its own read end: the write ends of earlier Steppers' pipes, inherited here, would
      // keep those from reading the end of their pipe.
      if (dup2(p[0], 3) != 3 || close_range(4, ~0U, 0) != 0) _exit(3);
      char c;
      if (read(3, &c, 1) != 1) _exit(0);
      syscall(SYS_getpgid, marker);
      if (read(3, &c, 1) != 1) _exit(0);
      syscall(SYS_getsid, marker);
      if (read(3, &c, 1) != 1) _exit(0);
      _exit(0);
    }
    close(p[0]);
    go_ = p[1];
  }
  Stepper(const Stepper&) = delete;
  Stepper& operator=(const Stepper&) = delete;
  ~Stepper() { Exit(); }
  pid_t pid() const { return pid_; }
  void Step() { EXPECT_EQ(write(go_, "x", 1), 1); }
  void Exit() {
    if (go_ < 0) return;
    close(go_);
    go_ = -1;
    int status = 0;
    EXPECT_EQ(waitpid(pid_, &status, 0), pid_);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
};

std::string HeldConfig(long marker, int max_series) {
  const std::string filter = "pid == " + std::to_string(marker);
  return R"({"settings": {"max_series_per_metric": )" + std::to_string(max_series) + R"(},
      "metrics": [{"name": "held", "type": "gauge",
        "up": {"event": "syscalls:sys_enter_getpgid", "filter": ")" +
         filter + R"("},
        "down": {"event": "syscalls:sys_enter_getsid", "filter": ")" +
         filter + R"("},
        "labels": [{"name": "pid", "source": "pid"}]}]})";
}

// The series of `held` by pid.
std::map<std::string, double> HeldByPid(const std::vector<MetricSnapshot>& snap) {
  std::map<std::string, double> out;
  if (const MetricSnapshot* m = FindMetric(snap, "held")) {
    for (const auto& s : m->series) out[s.labels.at(0).second] = s.value;
  }
  return out;
}

double Dropped(const std::vector<MetricSnapshot>& snap) {
  return testing::Value(snap, "tracepoint_exporter_series_dropped_total", {{"metric", "held"}});
}

// Tasks that exit while they hold 1 take their series with them (docs/ARCHITECTURE.md: series have a
// lifetime), as tasks back at 0 do.
TEST_P(KernelGaugeTest, UpDownSeriesOfExitedTasksGoWhateverTheirValue) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  constexpr long kMarker = 1999999901;
  std::vector<std::unique_ptr<Stepper>> kids;
  for (int i = 0; i < 3; ++i) kids.push_back(std::make_unique<Stepper>(kMarker));
  bool held = false, gone = false;
  std::map<std::string, double> last;
  const auto end = RunPipelineWith(HeldConfig(kMarker, 100), [&](Pipeline& pipeline) {
    for (auto& k : kids) k->Step();  // up
    kids[2]->Step();                 // the third goes back down
    held = WaitFor(pipeline, [&](const auto& s) {
      last = HeldByPid(s);
      return last == std::map<std::string, double>{{std::to_string(kids[0]->pid()), 1},
                                                   {std::to_string(kids[1]->pid()), 1},
                                                   {std::to_string(kids[2]->pid()), 0}};
    });
    for (auto& k : kids) k->Exit();
    gone = WaitFor(pipeline, [&](const auto& s) {
      last = HeldByPid(s);
      return last.empty();
    });
  });
  EXPECT_TRUE(held) << "never read 1, 1, 0; last " << ::testing::PrintToString(last);
  EXPECT_TRUE(gone) << "the exited tasks' series stayed: " << ::testing::PrintToString(last);
  EXPECT_EQ(
      testing::Value(end, "tracepoint_exporter_series_removed_total", {{"metric", "held"}, {"reason", "task_exited"}}),
      3);
  EXPECT_EQ(Dropped(end), 0);
  ExpectEngine(end, "held", IsBpf());
}

// max_series_per_metric 20: 20 tasks hold the 20 series; the ups of 20 more are refused (counted).
// 10 holders go down and exit (their series go), then the 20 refused tasks go down: 10 find room
// and their series start at their refused up (0), 10 are refused again. No series ever reads
// below 0, and each refusal is counted once: 20 ups and 10 downs.
TEST_P(KernelGaugeTest, DownsOfRefusedUpsNeverReadBelowZero) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  constexpr long kMarker = 1999999902;
  constexpr int kMax = 20;
  std::vector<std::unique_ptr<Stepper>> holders, refused;
  for (int i = 0; i < kMax; ++i) holders.push_back(std::make_unique<Stepper>(kMarker));
  for (int i = 0; i < kMax; ++i) refused.push_back(std::make_unique<Stepper>(kMarker));
  double lowest = 0;
  std::map<std::string, double> last;
  auto watch = [&](const std::vector<MetricSnapshot>& s) {
    last = HeldByPid(s);
    for (const auto& [pid, v] : last) lowest = std::min(lowest, v);
  };
  bool phase[4] = {};
  const auto end = RunPipelineWith(HeldConfig(kMarker, kMax), [&](Pipeline& pipeline) {
    for (auto& k : holders) k->Step();
    phase[0] = WaitFor(pipeline, [&](const auto& s) {
      watch(s);
      return last.size() == kMax;
    });
    for (auto& k : refused) k->Step();
    phase[1] = WaitFor(pipeline, [&](const auto& s) {
      watch(s);
      return Dropped(s) == kMax;
    });
    for (int i = 0; i < kMax / 2; ++i) {
      holders[i]->Step();  // down
      holders[i]->Exit();
    }
    phase[2] = WaitFor(pipeline, [&](const auto& s) {
      watch(s);
      return last.size() == kMax / 2;
    });
    for (auto& k : refused) k->Step();  // down
    phase[3] = WaitFor(pipeline, [&](const auto& s) {
      watch(s);
      return Dropped(s) == kMax + kMax / 2 && last.size() == kMax;
    });
  });
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(phase[i]) << "phase " << i << "; last " << ::testing::PrintToString(last);
  watch(end);
  EXPECT_EQ(lowest, 0) << "a series read below 0";
  int zeros = 0, ones = 0;
  for (const auto& [pid, v] : last) {
    zeros += v == 0;
    ones += v == 1;
  }
  EXPECT_EQ(zeros, kMax / 2);  // refused tasks whose down found room
  EXPECT_EQ(ones, kMax / 2);   // the holders still up
  for (int i = kMax / 2; i < kMax; ++i) EXPECT_EQ(last[std::to_string(holders[i]->pid())], 1);
  EXPECT_EQ(Dropped(end), kMax + kMax / 2);
  ExpectEngine(end, "held", IsBpf());
}

// Both ways of waiting for the programs' runs (an RCU grace period) work on this kernel.
TEST(KernelGaugeAutoTest, BothWaysOfWaitingForProgramRunsWork) {
  TPE_REQUIRE_BPF_OR_SKIP();
  for (auto how : {bpf::GraceWait::kMembarrierFirst, bpf::GraceWait::kMapInMap}) {
    Status st = bpf::WaitForProgramRuns(how);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
}

// "auto" plans every kind of gauge on the bpf engine where it is available (in-kernel
// aggregation, as for counters with labels), else on perf.
TEST(KernelGaugeAutoTest, AutoPlansBpfWhereAvailable) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  const std::string want = testing::Bpf().available ? "bpf" : "perf";
  for (const char* gauge : {
           R"("last": {"event": "syscalls:sys_enter_write", "field": "count"})",
           R"("up": {"event": "syscalls:sys_enter_write"}, "down": {"event": "syscalls:sys_exit_write"})",
           R"("inflight": {"start": {"event": "syscalls:sys_enter_write", "key": ["common_pid"]},
                           "end": {"event": "syscalls:sys_exit_write", "key": ["common_pid"]}})",
       }) {
    SCOPED_TRACE(gauge);
    auto cfg = ParseConfig(std::string(R"({"metrics": [{"name": "g", "type": "gauge", )") + gauge + "}]}", "cfg.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), true, testing::Bpf(), {}, testing::Probed());
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ((*plan)->Engines(), std::vector<Engine>{FromName<Engine>(want).value()})
        << (*plan)->metrics.at(0).engine_reason;
  }
  // Up and down labels that differ are the config's error on every engine, in the same words.
  for (const char* engine : {"auto", "bpf", "perf"}) {
    SCOPED_TRACE(engine);
    if (std::string(engine) == "bpf" && !testing::Bpf().available) continue;  // refused for that first
    auto cfg = ParseConfig(std::string(R"({"metrics": [{"name": "g", "type": "gauge", "engine": ")") + engine +
                               R"(",
        "up": {"event": "sock:inet_sock_set_state", "labels": [{"name": "state", "field": "newstate"}]},
        "down": {"event": "sock:inet_sock_set_state", "labels": [{"name": "old", "field": "oldstate"}]}}]})",
                           "cfg.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan = BuildPlan(*cfg, *tracefs, KernelEnums(), true, testing::Bpf(), {}, testing::Probed());
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.status().message().find("\"old\" must match up's label 0 (\"state\")"), std::string::npos)
        << plan.status().message();
  }
}

}  // namespace
}  // namespace tpe
