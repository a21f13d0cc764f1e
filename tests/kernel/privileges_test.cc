// Kernel tier: dropping capabilities (daemon/privileges.h) for every thread, and what
// /proc/kallsyms shows the exporter after the drop (profile/kallsyms.h). Capabilities are dropped
// in forked children only, so the test process keeps its own.
#include "daemon/privileges.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "kernel/kernel_util.h"
#include "perf/perf_event.h"
#include "profile/kallsyms.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

// Runs `body` in a forked child (one thread: the forking one) and returns what it returned:
// "" when every check held, else what failed.
std::string InChild(const std::function<std::string()>& body) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return "pipe2 failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    const std::string out = body();
    (void)!write(p[1], out.data(), out.size());
    _exit(0);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  close(p[0]);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    out += " (child status " + std::to_string(status) + ")";
  }
  return out;
}

// The capability lines and NoNewPrivs of one thread's status file, e.g. "CapEff=0 ... NoNewPrivs=1".
std::string CapLines(const std::string& status_path) {
  auto text = ReadFileToString(status_path);
  if (!text.ok()) return text.status().ToString();
  std::string out;
  for (const char* field : {"CapInh", "CapPrm", "CapEff", "CapAmb", "NoNewPrivs"}) {
    const size_t at = text->find(std::string("\n") + field + ":");
    if (at == std::string::npos) continue;
    const size_t value = text->find_first_not_of(" \t", at + 1 + std::string(field).size() + 1);
    const std::string v = text->substr(value, text->find('\n', value) - value);
    out +=
        std::string(out.empty() ? "" : " ") + field + "=" + (v.find_first_not_of('0') == std::string::npos ? "0" : v);
  }
  return out;
}
constexpr char kNone[] = "CapInh=0 CapPrm=0 CapEff=0 CapAmb=0 NoNewPrivs=1";

// Capabilities are per thread: with another thread running, a drop would leave it its
// capabilities, so DropAllCapabilities refuses, naming why, and drops nothing.
TEST(PrivilegesTest, DropRefusedWhileAnotherThreadRuns) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string failed = InChild([] {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::thread other([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    });
    const std::string before = CapLines("/proc/thread-self/status");
    const Status st = DropAllCapabilities();
    const std::string after = CapLines("/proc/thread-self/status");
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_one();
    other.join();
    std::string out;
    if (st.ok()) out += "dropped with 2 threads; ";
    if (st.message().find("cannot drop capabilities with 2 threads running: capabilities are per thread") ==
        std::string::npos) {
      out += "message: " + st.message() + "; ";
    }
    if (after != before) out += "capabilities changed: " + before + " -> " + after + "; ";
    if (before.find("CapEff=0 ") != std::string::npos) out += "root without capabilities to begin with; ";
    return out;
  });
  EXPECT_EQ(failed, "");
}

// Dropped while the process has one thread: it and every thread started afterwards have no
// capability and no_new_privs.
TEST(PrivilegesTest, ThreadsStartedAfterTheDropHaveNone) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string failed = InChild([] {
    const Status st = DropAllCapabilities();
    if (!st.ok()) return st.ToString();
    std::string out;
    if (std::string main = CapLines("/proc/thread-self/status"); main != kNone) out += "main: " + main + "; ";
    std::string in_thread;
    std::thread([&] { in_thread = CapLines("/proc/thread-self/status"); }).join();
    if (in_thread != kNone) out += "a later thread: " + in_thread + "; ";
    return out;
  });
  EXPECT_EQ(failed, "");
}

// Whether a process without CAP_SYSLOG sees zeros in /proc/kallsyms here (kallsyms_show_value).
bool HiddenWithoutSyslog() {
  auto restrict = ReadFileToString("/proc/sys/kernel/kptr_restrict");
  auto paranoid = ReadFileToString("/proc/sys/kernel/perf_event_paranoid");
  return !restrict.ok() || !paranoid.ok() || std::stoi(*restrict) != 0 || std::stoi(*paranoid) > 1;
}

// /proc/kallsyms opened before the drop (DropAllCapabilities holds it) still shows addresses
// after it, on every read: the kernel decided at the open. A new open shows zeros where the
// sysctls hide them from a process without CAP_SYSLOG (kernel.perf_event_paranoid >= 2 here).
TEST(PrivilegesTest, KallsymsHeldAcrossTheDropShowsAddresses) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto before = KallsymsHidden();
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  ASSERT_FALSE(*before) << "/proc/kallsyms hides its addresses from this root test process";
  const bool fresh_hidden = HiddenWithoutSyslog();
  const std::string failed = InChild([fresh_hidden] {
    const Status st = DropAllCapabilities();
    if (!st.ok()) return st.ToString();
    std::string out;
    for (int i = 0; i < 2; ++i) {
      auto held = KallsymsHidden();
      if (!held.ok() || *held) out += "held file hides addresses (read " + std::to_string(i) + "); ";
      auto table = Kallsyms::Read();
      if (!table.ok() || table->hidden() || table->size() < 1000) out += "held table unnamed; ";
    }
    auto fresh = KallsymsHidden("/proc/./kallsyms");  // another path: a new open, without CAP_SYSLOG
    if (!fresh.ok() || *fresh != fresh_hidden) {
      out += "a new open: " + (fresh.ok() ? std::string(*fresh ? "hidden" : "shown") : fresh.status().ToString()) +
             ", expected " + (fresh_hidden ? "hidden" : "shown") + "; ";
    }
    return out;
  });
  EXPECT_EQ(failed, "");
}

}  // namespace
}  // namespace tpe
