// Kernel tier, a stack belongs to its time (frames were named after the wrong program or left
// unnamed), on both engines through the daemon's pipeline:
//  - samples taken before an exec are named with the program that made them, not the exec'd one;
//  - children forked (no exec) by a process older than the profile are named after they exit;
//  - 4,200 short processes started after a trigger exited do not push its frames out;
//  - a CPU profile run in a pid namespace of its own keeps the samples of the host's tasks (the
//    kernel reports them as pid 0).
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "daemon/profile_pages.h"
#include "kernel/gunzip.h"
#include "kernel/kernel_util.h"
#include "kernel/stack_paths_trigger.h"
#include "pprof/profile.pb.h"
#include "profile/pprof_builder.h"
#include "testing/test_util.h"

extern char** environ;

namespace tpe {
namespace {

using testing::Gunzip;
using testing::Trigger;

// Rings that hold a whole run (4000 samples with 1 KiB of user stack each: the user stacks are
// unwound here, "unwind": "dwarf"), so no sample is lost while the reader is slow.
const std::string kRings = R"({"settings": {"ring_buffer_pages": 4096, "profile_stack_bytes": 1024}, )";

// pprof samples by their user path, "main;...;tpe_leaf" (root first; the frames from main to
// tpe_leaf), for the samples whose comm label is `comm` ("" for any). A stack without main or
// tpe_leaf counts under its whole user part, so a wrong name shows in the map.
std::map<std::string, int64_t> UserPaths(const std::string& gzipped, const std::string& comm = "") {
  perftools::profiles::Profile p;
  EXPECT_TRUE(p.ParseFromString(Gunzip(gzipped)));
  const auto names = NameLocations(p);
  std::map<std::string, int64_t> out;
  for (const auto& s : p.sample()) {
    bool match = comm.empty();
    for (const auto& l : s.label()) {
      if (p.string_table(l.key()) == "comm" && p.string_table(l.str()) == comm) match = true;
    }
    if (!match) continue;
    std::string path;
    bool in = false;
    for (int i = s.location_id_size() - 1; i >= 0; --i) {  // root first
      auto it = names.find(s.location_id(i));
      if (it == names.end() || it->second.kind == FrameKind::kKernel) continue;
      if (it->second.name == "main") in = true;
      if (!in) continue;
      path += (path.empty() ? "" : ";") + it->second.name;
      if (it->second.name == "tpe_leaf") break;
    }
    out[path.empty() ? "(no main)" : path] += s.value(0);
  }
  return out;
}

std::string GetppidProfile(const std::string& filter, bool comm_label = false) {
  return kRings + R"("profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter", "filter": ")" + filter +
         " && id == " + std::to_string(SYS_getppid) + R"(")" +
         (comm_label ? R"(, "labels": [{"name": "comm", "source": "comm"}])" : "") + "}]}";
}

int64_t ProfileSamples(const std::vector<MetricSnapshot>& s) {
  return static_cast<int64_t>(
      testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}));
}

class ProfileTruthTest : public testing::EngineTest {};
TPE_INSTANTIATE_ENGINES(ProfileTruthTest);

// 3000 calls through tpe_path_a, an exec of the same (position-independent) program, 1000
// through tpe_path_b: each named as the image that made it, also once the process is gone.
// (Named with the mappings of render time, the first 3000 were [unknown] or another function.)
TEST_P(ProfileTruthTest, SamplesBeforeAnExecKeepTheirProgram) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  Trigger t({"exec", "3000", "1000", "tpe_exec"});
  ASSERT_GT(t.pid(), 0);
  std::string pprof;
  testing::RunPipelineWith(GetppidProfile("common_pid == " + std::to_string(t.pid())), [&](Pipeline& pipeline) {
    t.Go();
    t.Exit();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const auto& s) { return ProfileSamples(s) >= 4000; }));
    HttpAnswer a = RenderProfile(pipeline, "getppid_stacks", "");
    EXPECT_EQ(a.status, 200u);
    pprof = a.body;
  });
  EXPECT_EQ(UserPaths(pprof),
            (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", 3000}, {"main;tpe_path_b;tpe_leaf", 1000}}));
}

// A pre-forking server: the trigger exec'd before the profile began, then forks 10 children
// (no exec) that make 100 calls each and exit. Every one of their 1000 samples is named.
TEST_P(ProfileTruthTest, ChildrenOfAProcessOlderThanTheProfileAreNamed) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  Trigger t({"forks", "10", "100", "tpe_forker"}, -1, /*early=*/true);
  ASSERT_GT(t.pid(), 0);
  // Its exec done before the pipeline starts: /proc/PID/exe is stack_paths.
  for (int i = 0; i < 500; ++i) {
    char exe[4096] = {};
    const ssize_t n = readlink(("/proc/" + std::to_string(t.pid()) + "/exe").c_str(), exe, sizeof(exe) - 1);
    if (n > 0 && std::string(exe, static_cast<size_t>(n)) == TPE_STACK_PATHS) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string pprof;
  testing::RunPipelineWith(GetppidProfile("common_pid != 0", /*comm_label=*/true), [&](Pipeline& pipeline) {
    t.Go();  // forks the children, waits for them, says done
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const auto& s) { return ProfileSamples(s) >= 1000; }));
    HttpAnswer a = RenderProfile(pipeline, "getppid_stacks", "");
    EXPECT_EQ(a.status, 200u);
    pprof = a.body;
    t.Exit();
  });
  EXPECT_EQ(UserPaths(pprof, "tpe_forker"), (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", 1000}}))
      << ::testing::PrintToString(UserPaths(pprof));
}

// The trigger exits, then 4,200 runs of /bin/true: its frames are still named (the bound on
// what is remembered of processes lets go of those no sample used first).
TEST_P(ProfileTruthTest, ShortProcessesAfterwardsDoNotPushOutTheSampledOnes) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  Trigger t;
  ASSERT_GT(t.pid(), 0);
  std::string pprof;
  testing::RunPipelineWith(GetppidProfile("common_pid == " + std::to_string(t.pid())), [&](Pipeline& pipeline) {
    t.Go();
    t.Exit();
    // In a guest (qemu TCG: ~50 ms a spawn) 100: what is remembered of processes is this
    // program's logic, the same on every kernel; the guest checks the records that feed it.
    const int runs = testing::InGuest() ? 100 : 4200;
    for (int i = 0; i < runs; ++i) {
      pid_t pid = 0;
      char* argv[] = {const_cast<char*>("/bin/true"), nullptr};
      ASSERT_EQ(posix_spawn(&pid, "/bin/true", nullptr, nullptr, argv, environ), 0);
      ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
    }
    EXPECT_TRUE(testing::WaitFor(pipeline,
                                 [](const auto& s) { return ProfileSamples(s) >= testing::kPathA + testing::kPathB; }));
    pprof = RenderProfile(pipeline, "getppid_stacks", "").body;
  });
  EXPECT_EQ(UserPaths(pprof), (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", testing::kPathA},
                                                              {"main;tpe_path_b;tpe_leaf", testing::kPathB}}));
}

// Run in a pid namespace of its own, the perf engine's CPU profile sees every host task as pid 0
// (perf_event_pid_type: outside the event's namespace): their samples are counted (the kernel
// leaves the idle task out itself, attr.exclude_idle), not dropped as idle. The pipeline runs in
// a child that is pid 1 of a new pid namespace; a host process spins meanwhile.
TEST(ProfilePidNamespaceTest, HostTasksAreCountedFromAPidNamespace) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  Trigger spinner({"spin", "1.5", "tpe_spinner"});
  ASSERT_GT(spinner.pid(), 0);
  int result[2];
  ASSERT_EQ(pipe(result), 0);
  const pid_t outer = fork();
  if (outer == 0) {
    close(result[0]);
    if (unshare(CLONE_NEWPID) != 0) _exit(2);
    const pid_t inner = fork();  // pid 1 of the new namespace
    if (inner == 0) {
      double cpu_seconds = -1;
      testing::RunPipelineWith(R"({"profiles": [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 99}]})",
                               [&](Pipeline& pipeline) {
                                 spinner.Go();  // spins 1.5 s of CPU, says done
                                 const std::string folded = RenderProfile(pipeline, "cpu", "folded").body;
                                 double ns = 0;
                                 for (size_t at = 0; at < folded.size();) {
                                   const size_t nl = folded.find('\n', at);
                                   const std::string line = folded.substr(at, nl - at);
                                   at = nl == std::string::npos ? folded.size() : nl + 1;
                                   ns += std::stod(line.substr(line.rfind(' ') + 1));
                                 }
                                 cpu_seconds = ns * 1e-9;
                               });
      const std::string out = std::to_string(cpu_seconds) + "\n";
      _exit(write(result[1], out.data(), out.size()) == static_cast<ssize_t>(out.size()) ? 0 : 3);
    }
    int status = 0;
    _exit(inner > 0 && waitpid(inner, &status, 0) == inner && WIFEXITED(status) ? WEXITSTATUS(status) : 4);
  }
  close(result[1]);
  std::string said;
  char c;
  while (read(result[0], &c, 1) == 1) said += c;
  close(result[0]);
  int status = 0;
  ASSERT_EQ(waitpid(outer, &status, 0), outer);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << ", said " << said;
  spinner.Exit();
  // The spinner alone used 1.5 s of CPU in the window (2 CPUs, 99 Hz: ~150 samples of it).
  EXPECT_GE(std::stod(said), 1.0) << said;
}

}  // namespace
}  // namespace tpe
