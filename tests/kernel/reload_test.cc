// Kernel tier: configuration reload keeps unchanged metrics' values exactly, drops removed ones,
// starts new ones, and a bad config leaves the running one in place.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "daemon/daemon.h"
#include "kernel/kernel_util.h"
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
  const double w_before = FindSeries(before, "w_total")->value;
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
  EXPECT_EQ(FindSeries(after, "x_total", {{"comm", "tpe_reload"}})->value, 3000);  // not reset
  ASSERT_NE(FindSeries(after, "z_total", {{"comm", "tpe_reload"}}), nullptr);
  EXPECT_EQ(FindSeries(after, "z_total", {{"comm", "tpe_reload"}})->value, 2000);  // new: from the reload on
  EXPECT_EQ(FindMetric(after, "y_total"), nullptr);                                // removed
  EXPECT_GE(FindSeries(after, "w_total")->value, w_before + 2000);                 // counting mode continues
  EXPECT_EQ(FindSeries(after, "tracepoint_exporter_config_last_reload_successful")->value, 1);
  EXPECT_EQ(FindSeries(after, "tracepoint_exporter_config_reloads_total", {{"result", "success"}})->value, 1);
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
  EXPECT_EQ(FindSeries(snap, "x_total", {{"comm", "tpe_reload"}})->value, 1000);
  EXPECT_EQ(FindSeries(snap, "tracepoint_exporter_config_last_reload_successful")->value, 0);
  EXPECT_EQ(FindSeries(snap, "tracepoint_exporter_config_reloads_total", {{"result", "failure"}})->value, 3);
}

}  // namespace
}  // namespace tpe
