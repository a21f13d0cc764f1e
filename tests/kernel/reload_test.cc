// Kernel tier: configuration reload keeps unchanged metrics' values exactly, drops removed ones,
// starts new ones, and a bad config leaves the running one in place.
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "bpf/loader.h"
#include "common/scoped_fd.h"
#include "daemon/daemon.h"
#include "daemon/pipeline.h"
#include "kernel/kernel_util.h"
#include "plan/plan.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

using testing::FindMetric;
using testing::FindSeries;

void ChildCalls(int n) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_NAME, "tpe_reload");
    for (int i = 0; i < n; ++i) syscall(SYS_getppid);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
}

const char* kByComm = R"({"name": "x_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
                          "labels": [{"name": "comm", "source": "comm"}]})";
const char* kCounting = R"({"name": "w_total", "type": "counter", "event": "syscalls:sys_enter_getppid"})";

TEST(ReloadTest, KeepsUnchangedMetricsDropsRemovedStartsNew) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/reload_test.json";
  testing::WriteFile(path, std::string(R"({"metrics": [)") + kByComm + "," + kCounting + R"(,
      {"name": "y_total", "type": "counter", "event": "sched:sched_switch"}]})");
  Daemon daemon(path, &*tracefs, &enums);
  ASSERT_TRUE(daemon.Start().ok());
  ChildCalls(1000);
  auto before = daemon.Snapshot();  // scrapes see the reader's progress; Stop() at reload drains the rest
  const double w_before = testing::Value(before, "w_total");
  EXPECT_GE(w_before, 1000);
  ASSERT_NE(FindMetric(before, "y_total"), nullptr);

  // y removed, z added, x and w unchanged.
  testing::WriteFile(path, std::string(R"({"metrics": [)") + kByComm + "," + kCounting + R"(,
      {"name": "z_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
       "labels": [{"name": "comm", "source": "comm"}]}]})");
  Status st = daemon.Reload();
  ASSERT_TRUE(st.ok()) << st.ToString();
  ChildCalls(2000);
  daemon.Stop();
  auto after = daemon.Snapshot();
  ASSERT_NE(FindSeries(after, "x_total", {{"comm", "tpe_reload"}}), nullptr);
  EXPECT_EQ(testing::Value(after, "x_total", {{"comm", "tpe_reload"}}), 3000);  // not reset
  ASSERT_NE(FindSeries(after, "z_total", {{"comm", "tpe_reload"}}), nullptr);
  EXPECT_EQ(testing::Value(after, "z_total", {{"comm", "tpe_reload"}}), 2000);  // new: from the reload on
  EXPECT_EQ(FindMetric(after, "y_total"), nullptr);                             // removed
  EXPECT_GE(testing::Value(after, "w_total"), w_before + 2000);                 // counting mode continues
  EXPECT_EQ(testing::Value(after, "tracepoint_exporter_config_last_reload_successful"), 1);
  EXPECT_EQ(testing::Value(after, "tracepoint_exporter_config_reloads_total", {{"result", "success"}}), 1);
}

TEST(ReloadTest, BadConfigKeepsTheRunningOne) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/reload_bad_test.json";
  testing::WriteFile(path, std::string(R"({"metrics": [)") + kByComm + "]}");
  Daemon daemon(path, &*tracefs, &enums);
  ASSERT_TRUE(daemon.Start().ok());
  ChildCalls(700);
  for (
      const char* bad :
      {"{\"metrics\": [", R"({"metrics": [{"name": "x_total", "type": "counter", "event": "sched:nope"}]})",
       R"({"metrics": [{"name": "x_total", "type": "counter", "event": "sched:sched_switch", "filter": "nope == 1"}]})"}) {
    testing::WriteFile(path, bad);
    Status st = daemon.Reload();
    EXPECT_FALSE(st.ok());
  }
  ChildCalls(300);  // still counted by the old config
  daemon.Stop();
  auto snap = daemon.Snapshot();
  ASSERT_NE(FindSeries(snap, "x_total", {{"comm", "tpe_reload"}}), nullptr);
  EXPECT_EQ(testing::Value(snap, "x_total", {{"comm", "tpe_reload"}}), 1000);
  EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_config_last_reload_successful"), 0);
  EXPECT_EQ(testing::Value(snap, "tracepoint_exporter_config_reloads_total", {{"result", "failure"}}), 3);
}

// A bpf metric that fell back to perf at start (injected here: the first plan
// is built as if bpf were unavailable, as when its map creation fails with ENOMEM) and is planned
// on bpf at an unchanged-config reload must count afterwards. Before, Reload matched it by
// identity alone: it skipped Attach() of the new program and adopted the old perf collector,
// whose perf events the new plan no longer had: metric_info said engine="bpf" and every later
// call was lost (x_total stayed at 500).
TEST(ReloadTest, AMetricThatChangesEngineAtAReloadKeepsCounting) {
  TPE_REQUIRE_BPF_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/reload_engine_test.json";
  testing::WriteFile(path, std::string(R"({"metrics": [)") + kByComm + "]}");
  auto config = LoadConfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  auto first = BuildPlan(*config, *tracefs, enums, false, bpf::BpfSupport{false, "injected: map creation failed"}, {},
                         testing::Probed());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_EQ(NameOf((*first)->metrics[0].engine), "perf");
  Pipeline pipeline(&*tracefs);
  ASSERT_TRUE(pipeline.Open(std::move(*first)).ok());
  ASSERT_TRUE(pipeline.Start().ok());
  ChildCalls(500);
  // Memory is available again: the same config now plans x_total on bpf.
  auto second = BuildPlan(*config, *tracefs, enums, false, testing::Bpf(), {}, testing::Probed());
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  ASSERT_EQ(NameOf((*second)->metrics[0].engine), "bpf");
  Status st = pipeline.Reload(std::move(*second));
  ASSERT_TRUE(st.ok()) << st.ToString();
  ChildCalls(1000);
  pipeline.Stop();
  auto snap = pipeline.Snapshot();
  ASSERT_NE(FindSeries(snap, "tracepoint_exporter_metric_info", {{"metric", "x_total"}, {"engine", "bpf"}}), nullptr);
  // The engine changed, so the series starts again (a counter reset): exactly the calls since.
  const SeriesSnapshot* x = FindSeries(snap, "x_total", {{"comm", "tpe_reload"}});
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->value, 1000);
}

// 40 bpf counters on one tracepoint, all renamed by a reload: the running plan's programs are
// detached before the new ones attach, so at most 40 (not 80) are attached at once under the
// kernel's 64 per tracepoint (BPF_TRACE_MAX_PROGS). Before, the reload failed with
// "PERF_EVENT_IOC_SET_BPF ... Argument list too long". sys_enter_getsid: a
// tracepoint no other test uses, so nothing else holds its program slots.
TEST(ReloadTest, RenamingFortyBpfMetricsStaysUnderThePerTracepointProgramLimit) {
  TPE_REQUIRE_BPF_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/reload_rename_test.json";
  auto config = [&](const std::string& prefix) {
    std::string text = R"({"settings": {"max_series_per_metric": 16}, "metrics": [)";
    for (int i = 0; i < 40; ++i) {
      text += std::string(i ? "," : "") + R"({"name": ")" + prefix + std::to_string(i) +
              R"(_total", "type": "counter", "event": "syscalls:sys_enter_getsid", "engine": "bpf",
               "labels": [{"name": "comm", "source": "comm"}]})";
    }
    testing::WriteFile(path, text + "]}");
  };
  auto getsid_calls = [](int n) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_NAME, "tpe_rename");
      for (int i = 0; i < n; ++i) syscall(SYS_getsid, 0);
      _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
  };
  config("old");
  Daemon daemon(path, &*tracefs, &enums);
  Status st = daemon.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  getsid_calls(100);
  config("new");
  st = daemon.Reload();
  ASSERT_TRUE(st.ok()) << st.ToString();
  getsid_calls(200);
  daemon.Stop();
  auto snap = daemon.Snapshot();
  for (int i = 0; i < 40; ++i) {
    const std::string name = "new" + std::to_string(i) + "_total";
    const SeriesSnapshot* s = FindSeries(snap, name, {{"comm", "tpe_rename"}});
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->value, 200) << name;
    EXPECT_EQ(FindMetric(snap, "old" + std::to_string(i) + "_total"), nullptr);
  }
}

// 65 "auto" metrics on one tracepoint: 64 BPF programs is the kernel's limit per tracepoint
// (BPF_TRACE_MAX_PROGS), so the 65th runs on perf, says why, and every one counts exactly.
// Before, the daemon exited with "PERF_EVENT_IOC_SET_BPF ... Argument list too long".
TEST(ReloadTest, SixtyFiveAutoMetricsOnOneTracepointTheLastRunsOnPerf) {
  TPE_REQUIRE_BPF_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  const std::string path = ::testing::TempDir() + "/sixty_five_test.json";
  std::string text = R"({"settings": {"max_series_per_metric": 16}, "metrics": [)";
  for (int i = 0; i < 65; ++i) {
    text += std::string(i ? "," : "") + R"({"name": "m)" + std::to_string(i) +
            R"(_total", "type": "counter", "event": "syscalls:sys_enter_getsid",
               "labels": [{"name": "comm", "source": "comm"}]})";
  }
  testing::WriteFile(path, text + "]}");
  Daemon daemon(path, &*tracefs, &enums);
  Status st = daemon.Start();
  ASSERT_TRUE(st.ok()) << st.ToString();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_NAME, "tpe_sixtyfive");
    for (int i = 0; i < 300; ++i) syscall(SYS_getsid, 0);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  daemon.Stop();
  auto snap = daemon.Snapshot();
  for (int i = 0; i < 65; ++i) {
    const std::string name = "m" + std::to_string(i) + "_total";
    const SeriesSnapshot* s = FindSeries(snap, name, {{"comm", "tpe_sixtyfive"}});
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->value, 300) << name;
    EXPECT_NE(FindSeries(snap, "tracepoint_exporter_metric_info",
                         {{"metric", name}, {"engine", i < 64 && !testing::AutoAvoidsBpf() ? "bpf" : "perf"}}),
              nullptr)
        << name;
  }
}

// Another tool's programs take slots of the kernel's 64 per tracepoint too: with 60 foreign
// programs on sys_enter_umask (attached here the way bpftrace does, not through the exporter),
// 4 of 10 "auto" metrics run on bpf and 6 on perf, each saying why, and all count exactly; one
// with "engine": "bpf" is refused at planning, naming the other tools' programs. Before, the
// daemon exited with "PERF_EVENT_IOC_SET_BPF ... Argument list too long" (E2BIG: the kernel's
// 64 programs per tracepoint, BPF_TRACE_MAX_PROGS).
TEST(ReloadTest, OtherToolsProgramsOnATracepointSendTheRestToPerf) {
  TPE_REQUIRE_BPF_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  auto id = tracefs->ReadId(EventName{"syscalls", "sys_enter_umask"});
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  bpf_insn ret1[2] = {};  // r0 = 1; exit
  ret1[0].code = BPF_ALU64 | BPF_MOV | BPF_K;
  ret1[0].dst_reg = BPF_REG_0;
  ret1[0].imm = 1;
  ret1[1].code = BPF_JMP | BPF_EXIT;
  std::vector<ScopedFd> foreign;  // the kernel attaches a program once per tracepoint: 60 programs
  for (int i = 0; i < 60; ++i) {
    ScopedFd prog(bpf_prog_load(BPF_PROG_TYPE_TRACEPOINT, "foreign", "GPL", ret1, 2, nullptr));
    ASSERT_TRUE(prog.valid()) << std::strerror(errno);
    perf_event_attr attr{};
    attr.type = PERF_TYPE_TRACEPOINT;
    attr.size = sizeof(attr);
    attr.config = *id;
    attr.disabled = 1;
    ScopedFd ev(static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC)));
    ASSERT_TRUE(ev.valid()) << std::strerror(errno);
    ASSERT_EQ(ioctl(ev.get(), PERF_EVENT_IOC_SET_BPF, prog.get()), 0) << std::strerror(errno);
    foreign.push_back(std::move(ev));  // the event holds the program
  }
  auto foreign_count = bpf::ForeignPrograms(*id);
  ASSERT_TRUE(foreign_count.ok()) << foreign_count.status().ToString();
  EXPECT_EQ(*foreign_count, 60);

  const std::string path = ::testing::TempDir() + "/foreign_programs_test.json";
  auto metric = [](int i, const char* engine) {
    return R"({"name": "u)" + std::to_string(i) + R"(_total", "type": "counter", "event": "syscalls:sys_enter_umask",
               "engine": ")" +
           engine + R"(", "labels": [{"name": "comm", "source": "comm"}]})";
  };
  std::string text = R"({"settings": {"max_series_per_metric": 16}, "metrics": [)";
  for (int i = 0; i < 10; ++i) text += std::string(i ? "," : "") + metric(i, "auto");
  testing::WriteFile(path, text + "]}");
  {
    Daemon daemon(path, &*tracefs, &enums);
    Status st = daemon.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(*bpf::ForeignPrograms(*id), 60);  // ours are not counted as foreign
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_NAME, "tpe_foreign");
      for (int i = 0; i < 500; ++i) umask(022);
      _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    daemon.Stop();
    auto snap = daemon.Snapshot();
    for (int i = 0; i < 10; ++i) {
      const std::string name = "u" + std::to_string(i) + "_total";
      const SeriesSnapshot* s = FindSeries(snap, name, {{"comm", "tpe_foreign"}});
      ASSERT_NE(s, nullptr) << name;
      EXPECT_EQ(s->value, 500) << name;
      EXPECT_NE(FindSeries(snap, "tracepoint_exporter_metric_info",
                           {{"metric", name}, {"engine", i < 4 && !testing::AutoAvoidsBpf() ? "bpf" : "perf"}}),
                nullptr)
          << name;
    }
  }
  // Five forced onto bpf: four fit beside the 60, the fifth is refused.
  testing::WriteFile(path, std::string(R"({"metrics": [)") + metric(0, "bpf") + "," + metric(1, "bpf") + "," +
                               metric(2, "bpf") + "," + metric(3, "bpf") + "," + metric(4, "bpf") + "]}");
  Daemon forced(path, &*tracefs, &enums);
  Status st = forced.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("60 from other tools"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("u4_total"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace tpe
