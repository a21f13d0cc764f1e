// Kernel tier, profiles through the daemon's pipeline: a "profiles" entry of the config
// on raw_syscalls:sys_enter (id == getppid) filtered on tests/triggers/stack_paths' pid, served as
// /debug/pprof/<name> would serve it (RenderProfile): folded stacks with exactly N1 and N2 per
// path, named from main to tpe_leaf and into the kernel; pprof protobuf with the same counts and
// the comm label; the profile off /metrics, its self-metrics on it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "common/file_util.h"
#include "daemon/daemon.h"
#include "daemon/profile_pages.h"
#include "kernel/gunzip.h"
#include "kernel/kernel_util.h"
#include "kernel/stack_paths_trigger.h"
#include "plan/probes.h"
#include "pprof/profile.pb.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

using testing::kPathA;
using testing::kPathB;

// Rings that hold a whole run (2 x 4000 samples with their callchains and, the user stacks being
// unwound here ("unwind": "dwarf", the default), 1 KiB of stack copy each: the trigger's chain
// is shallow), so no sample is lost while the reader is slow on a loaded machine.
const std::string kRings = R"({"settings": {"ring_buffer_pages": 4096, "profile_stack_bytes": 1024}, )";

// Where the frame "main" begins in a folded line ("...;main;..."), or npos: a whole frame, not
// the end of another's name (__libc_start_main).
size_t MainFrame(const std::string& line) {
  for (size_t at = line.find("main;"); at != std::string::npos; at = line.find("main;", at + 1)) {
    if (at == 0 || line[at - 1] == ';') return at;
  }
  return std::string::npos;
}

using testing::Gunzip;

// Folded stacks' counts by user path (main;...;tpe_leaf), summed over everything else.
std::map<std::string, int64_t> Paths(const std::string& folded) {
  std::map<std::string, int64_t> paths;
  for (size_t at = 0; at < folded.size();) {
    const size_t nl = folded.find('\n', at);
    const std::string line = folded.substr(at, nl - at);
    at = nl + 1;
    const size_t sp = line.rfind(' '), m = MainFrame(line), leaf = line.find(";tpe_leaf;");
    if (m == std::string::npos || leaf == std::string::npos) {
      ADD_FAILURE() << line;
      continue;
    }
    paths[line.substr(m, leaf + 9 - m)] += std::stoll(line.substr(sp + 1));
  }
  return paths;
}

// Run on both engines: perf callchains, and bpf stack maps ("engine": "bpf", which "auto" does
// not choose for a profile).
class ProfileEngineTest : public testing::EngineTest {};
TPE_INSTANTIATE_ENGINES(ProfileEngineTest);

TEST_P(ProfileEngineTest, ExactStacksServedAsFoldedAndPprof) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger t;
  ASSERT_GT(t.pid(), 0);
  const std::string config = kRings + R"("profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter",
      "filter": "common_pid == )" +
                             std::to_string(t.pid()) + " && id == " + std::to_string(SYS_getppid) + R"(",
      "labels": [{"name": "comm", "source": "comm"}]}]})";
  std::string folded, pprof;
  std::vector<MetricSnapshot> page;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}) >=
             kPathA + kPathB;
    }));
    folded = RenderProfile(pipeline, "getppid_stacks", "folded").body;
    HttpAnswer a = RenderProfile(pipeline, "getppid_stacks", "");
    EXPECT_EQ(a.status, 200u);
    EXPECT_EQ(a.content_type, "application/octet-stream");
    pprof = a.body;
    EXPECT_EQ(RenderProfile(pipeline, "nope", "").status, 404u);
    page = pipeline.Snapshot();
    t.Release();
  });
  // Folded: the user part from main to tpe_leaf per path, exactly; kernel frames below tpe_leaf.
  EXPECT_EQ(Paths(folded), (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", kPathA},
                                                           {"main;tpe_path_b;tpe_leaf", kPathB}}))
      << folded;
  for (size_t at = 0, nl; (nl = folded.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = folded.substr(at, nl - at);
    EXPECT_NE(line.find("do_syscall_64", line.find(";tpe_leaf;")), std::string::npos) << line;
  }
  // pprof: a perftools.profiles.Profile, gzip-compressed; samples add up, labelled by comm.
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(Gunzip(pprof)));
  ASSERT_EQ(p.sample_type_size(), 1);
  EXPECT_EQ(p.string_table(p.sample_type(0).type()), "samples");
  int64_t total = 0;
  for (const auto& s : p.sample()) {
    total += s.value(0);
    bool comm = false;
    for (const auto& l : s.label())
      comm |= p.string_table(l.key()) == "comm" && p.string_table(l.str()) == "tpe_stacks";
    EXPECT_TRUE(comm);
  }
  EXPECT_EQ(total, kPathA + kPathB);
  // Off /metrics; its self-metrics on it.
  for (const auto& m : page) EXPECT_NE(m.name, "getppid_stacks");
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}),
            kPathA + kPathB);
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_stacks", {{"profile", "getppid_stacks"}}), 2);
  // The last render: every frame in a known mapping (the trigger was alive), at least
  // main..tpe_leaf per stack; only the libc frame below main may be unnamed (Debian's libc has no
  // .symtab, and __libc_start_call_main is not in .dynsym).
  const auto frames = [&](const char* which) {
    return testing::Value(page, "tracepoint_exporter_profile_render_frames",
                          {{"profile", "getppid_stacks"}, {"frames", which}});
  };
  EXPECT_GE(frames("all"), 2 * 3);
  EXPECT_LE(frames("no_symbol"), 2) << folded;  // at most libc's root frame, whose symbol is local
  EXPECT_EQ(frames("unknown_mapping"), 0);
}

// The trigger has exited (and been reaped) before the profile is rendered: its frames are named
// through the mappings learnt from its exec and PERF_RECORD_MMAP2 records, exactly as before.
TEST_P(ProfileEngineTest, AProcessThatExitedBeforeTheRequestIsStillNamed) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger t;
  ASSERT_GT(t.pid(), 0);
  const std::string pid = std::to_string(t.pid());
  const std::string config = kRings + R"("profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter",
      "filter": "common_pid == )" +
                             pid + " && id == " + std::to_string(SYS_getppid) + R"("}]})";
  std::string folded;
  std::vector<MetricSnapshot> page;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();
    t.Exit();
    ASSERT_FALSE(std::ifstream("/proc/" + pid + "/maps").good()) << "the trigger is gone";
    EXPECT_TRUE(testing::WaitFor(pipeline, [&](const std::vector<MetricSnapshot>&) {
      auto p = pipeline.process_images().Current(static_cast<uint32_t>(std::stoul(pid)));
      return p && p->ended;
    })) << "the exit record reached the learnt maps";
    folded = RenderProfile(pipeline, "getppid_stacks", "folded").body;
    page = pipeline.Snapshot();
  });
  EXPECT_EQ(Paths(folded), (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", kPathA},
                                                           {"main;tpe_path_b;tpe_leaf", kPathB}}))
      << folded;
  EXPECT_EQ(folded.find("[unknown]"), std::string::npos) << folded;
  EXPECT_GE(testing::Value(page, "tracepoint_exporter_profile_learnt_processes", {}), 1);
}

// A bpf stack map with room for one stack: the kernel stack of getppid() takes it, and every
// user stack then finds its bucket held by another stack. No sample is lost: all of them are
// counted under the kernel stack and a frame naming the reason, and the lost user stacks are
// counted exactly in tracepoint_exporter_profile_stacks_lost_total.
TEST(ProfileBpfTest, AFullStackMapLosesStacksNotSamplesAndCountsThem) {
  TPE_REQUIRE_BPF_OR_SKIP();
  testing::Trigger t;
  ASSERT_GT(t.pid(), 0);
  const std::string config = R"({"settings": {"max_stacks_per_profile": 1},
      "profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter", "engine": "bpf",
      "filter": "common_pid == )" +
                             std::to_string(t.pid()) + " && id == " + std::to_string(SYS_getppid) + R"("}]})";
  std::string folded;
  std::vector<MetricSnapshot> page;
  testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();
    folded = RenderProfile(pipeline, "getppid_stacks", "folded").body;
    page = pipeline.Snapshot();
    t.Release();
  });
  ASSERT_EQ(std::count(folded.begin(), folded.end(), '\n'), 1) << folded;
  EXPECT_NE(folded.find("[user_stack_lost:_hash_collision];"), std::string::npos) << folded;  // folded: no spaces
  EXPECT_NE(folded.find("do_syscall_64"), std::string::npos) << folded;
  EXPECT_NE(folded.find(" " + std::to_string(kPathA + kPathB) + "\n"), std::string::npos) << folded;
  const LabelPairs user_collisions{{"profile", "getppid_stacks"}, {"part", "user"}, {"reason", "hash_collision"}};
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_stacks_lost_total", user_collisions), kPathA + kPathB);
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_stacks_lost_total",
                           {{"profile", "getppid_stacks"}, {"part", "kernel"}, {"reason", "hash_collision"}}),
            0);
  EXPECT_EQ(testing::Value(page, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}),
            kPathA + kPathB);
}

// Reloads keep an unchanged profile and its stacks; a profile added and removed on every other
// reload opens and closes its perf events: after 100 reloads exactly as many fds are open as
// after the second, and the kept profile holds both runs exactly (one before the reloads, one
// after), served through the daemon as /debug/pprof/<name> is.
TEST(ProfileDaemonTest, HundredReloadsKeepAnUnchangedProfileAndLeakNothing) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  KernelEnums enums;
  testing::Trigger first, second;
  ASSERT_GT(first.pid(), 0);
  ASSERT_GT(second.pid(), 0);
  const std::string filter = "(common_pid == " + std::to_string(first.pid()) +
                             " || common_pid == " + std::to_string(second.pid()) +
                             ") && id == " + std::to_string(SYS_getppid);
  auto config = [&](bool extra) {
    std::string c = kRings +
                    R"("profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter", "filter": ")" +
                    filter + R"("})";
    if (extra) c += R"(, {"name": "extra_stacks", "event": "syscalls:sys_enter_getpgid", "stack": "user"})";
    return c + "]}";
  };
  const std::string path = ::testing::TempDir() + "/profile_reload_test.json";
  testing::WriteFile(path, config(false));
  Daemon daemon(path, &*tracefs, &enums);
  ASSERT_TRUE(daemon.Start().ok());
  first.Go();
  size_t fds_warm = 0;
  for (int reloads = 0; reloads < 100; ++reloads) {
    testing::WriteFile(path, config(reloads % 2 == 0));
    Status st = daemon.Reload();
    ASSERT_TRUE(st.ok()) << st.ToString();
    if (reloads == 1) fds_warm = OpenFdCount();
  }
  EXPECT_EQ(OpenFdCount(), fds_warm);
  second.Go();
  std::string folded;
  for (int i = 0; i < 200; ++i) {
    // Rendered by the reply's `later` (the server's delayed-answer thread), not at once.
    PprofReply reply = daemon.Profile(PprofRequest{"getppid_stacks", "folded", std::nullopt});
    ASSERT_TRUE(reply.later);
    EXPECT_EQ(reply.delay.count(), 0);
    folded = reply.later().body;
    auto paths = Paths(folded);
    if (paths["main;tpe_path_a;tpe_leaf"] + paths["main;tpe_path_b;tpe_leaf"] >= 2 * (kPathA + kPathB)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Paths(folded), (std::map<std::string, int64_t>{{"main;tpe_path_a;tpe_leaf", 2 * kPathA},
                                                           {"main;tpe_path_b;tpe_leaf", 2 * kPathB}}))
      << folded;
  daemon.Stop();
}

// A probe event's profile works as a tracepoint's: a uretprobe on tpe_leaf fires with the return
// address in tpe_path_a or tpe_path_b and their frame intact (at a function's entry the caller's
// frame would be skipped by a frame-pointer unwind), so the user stacks are main;tpe_path_a 3000
// times and main;tpe_path_b 1000 times, exactly.
TEST_P(ProfileEngineTest, AUretprobeProfileHasBothPathsExactly) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger t;
  ASSERT_GT(t.pid(), 0);
  const std::string config = kRings + R"("profiles": [{"name": "leaf_returns", "event": "uretprobe:)" +
                             std::string(TPE_STACK_PATHS) + R"(:tpe_leaf", "stack": "user",
      "filter": "common_pid == )" +
                             std::to_string(t.pid()) + R"("}]})";
  std::string folded;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "leaf_returns"}}) >=
             kPathA + kPathB;
    }));
    folded = RenderProfile(pipeline, "leaf_returns", "folded").body;
    t.Release();
  });
  std::map<std::string, int64_t> paths;
  for (size_t at = 0, nl; (nl = folded.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = folded.substr(at, nl - at);
    const size_t m = MainFrame(line), sp = line.rfind(' ');
    ASSERT_NE(m, std::string::npos) << line;
    paths[line.substr(m, sp - m)] += std::stoll(line.substr(sp + 1));
  }
  EXPECT_EQ(paths, (std::map<std::string, int64_t>{{"main;tpe_path_a", kPathA}, {"main;tpe_path_b", kPathB}}))
      << folded;
  if (ProbeRegistry* r = ProbeRegistry::IfCreated()) r->RemoveUnreferenced();
}

// A kprobe profile, where the kernel has kprobe events (the matrix guests): kernel stacks of
// do_nanosleep for 20 sleeps, exactly, each from its syscall path; elsewhere a clear refusal.
TEST_P(ProfileEngineTest, AKprobeProfileOrAClearRefusal) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  constexpr int kSleeps = 20;
  const std::string config = kRings + R"("profiles": [
      {"name": "sleep_stacks", "event": "kprobe:do_nanosleep", "stack": "kernel",
       "filter": "comm == \"tpe_kp_prof\""}]})";
  if (access((tracefs->root() + "/kprobe_events").c_str(), F_OK) != 0) {
    auto cfg = ParseConfig(config, "k.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan =
        BuildPlan(*cfg, *tracefs, KernelEnums(), true, bpf::BpfSupport{false, "not probed"}, {}, testing::Probed());
    ASSERT_FALSE(plan.ok());
    EXPECT_NE(plan.status().message().find("k.json: profiles[0].event \"kprobe:do_nanosleep\": kprobes are not "
                                           "available on this kernel"),
              std::string::npos)
        << plan.status().ToString();
    return;
  }
  int go = -1;
  const pid_t child = testing::ForkSleeper("tpe_kp_prof", kSleeps, &go);
  ASSERT_GT(child, 0);
  std::string folded;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    EXPECT_EQ(write(go, "x", 1), 1);
    close(go);
    waitpid(child, nullptr, 0);
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "sleep_stacks"}}) >= kSleeps;
    }));
    folded = RenderProfile(pipeline, "sleep_stacks", "folded").body;
  });
  int64_t total = 0;
  for (size_t at = 0, nl; (nl = folded.find('\n', at)) != std::string::npos; at = nl + 1) {
    const std::string line = folded.substr(at, nl - at);
    EXPECT_NE(line.find("hrtimer_nanosleep;do_nanosleep "), std::string::npos) << line;
    total += std::stoll(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(total, kSleeps) << folded;
  if (ProbeRegistry* r = ProbeRegistry::IfCreated()) r->RemoveUnreferenced();
}

// ?seconds=N: the samples of the window only (a first trigger ran before it, a second within
// it), exactly; pprof's time and duration are the window's; bad seconds, formats and names are
// refused at once.
TEST_P(ProfileEngineTest, SecondsGiveTheWindowsSamplesExactly) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger before, within;
  ASSERT_GT(before.pid(), 0);
  ASSERT_GT(within.pid(), 0);
  const std::string config = kRings + R"("profiles": [{"name": "getppid_stacks", "event": "raw_syscalls:sys_enter",
      "filter": "(common_pid == )" +
                             std::to_string(before.pid()) + " || common_pid == " + std::to_string(within.pid()) +
                             ") && id == " + std::to_string(SYS_getppid) + R"("}]})";
  std::string folded, all, pprof;
  int64_t start_ns = 0;
  auto snap = testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    before.Go();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}) >=
             kPathA + kPathB;
    }));
    // Refused at once, whatever the window would be.
    for (const char* bad : {"0", "-1", "abc", "601", "99999999999999999999", "1.5", " 5", "+5", "0x10"}) {
      PprofReply r = ServeProfile(pipeline, PprofRequest{"getppid_stacks", "", std::string(bad)});
      EXPECT_FALSE(r.later) << bad;
      EXPECT_EQ(r.answer.status, 400u) << bad;
      EXPECT_NE(r.answer.body.find("is not a whole number of seconds from 1 to 600"), std::string::npos)
          << r.answer.body;
    }
    EXPECT_EQ(ServeProfile(pipeline, PprofRequest{"nope", "", std::string("5")}).answer.status, 404u);
    EXPECT_EQ(ServeProfile(pipeline, PprofRequest{"../../etc/passwd", "", std::nullopt}).answer.status, 404u);
    EXPECT_EQ(ServeProfile(pipeline, PprofRequest{"getppid_stacks", "svg", std::string("5")}).answer.status, 400u);
    PprofReply dflt = ServeProfile(pipeline, PprofRequest{"getppid_stacks", "folded", std::string()});
    EXPECT_EQ(dflt.delay, std::chrono::seconds(30)) << "seconds without a value: Go's 30";

    const auto t0 = std::chrono::system_clock::now().time_since_epoch();
    start_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0).count();
    PprofReply window = ServeProfile(pipeline, PprofRequest{"getppid_stacks", "folded", std::string("2")});
    PprofReply window_pb = ServeProfile(pipeline, PprofRequest{"getppid_stacks", "", std::string("2")});
    ASSERT_TRUE(window.later && window.start);
    ASSERT_TRUE(window_pb.later && window_pb.start);
    window.start();  // as the server does once it accepts the wait
    window_pb.start();
    EXPECT_EQ(window.delay, std::chrono::seconds(2));
    within.Go();
    EXPECT_TRUE(testing::WaitFor(pipeline, [](const std::vector<MetricSnapshot>& s) {
      return testing::Value(s, "tracepoint_exporter_profile_samples_total", {{"profile", "getppid_stacks"}}) >=
             2 * (kPathA + kPathB);
    }));
    folded = window.later().body;  // waits for the window's end (2 s), as the server does
    HttpAnswer a = window_pb.later();
    EXPECT_EQ(a.status, 200u);
    pprof = a.body;
    all = RenderProfile(pipeline, "getppid_stacks", "folded").body;
    before.Release();
    within.Release();
  });
  const std::map<std::string, int64_t> once{{"main;tpe_path_a;tpe_leaf", kPathA}, {"main;tpe_path_b;tpe_leaf", kPathB}};
  const std::map<std::string, int64_t> twice{{"main;tpe_path_a;tpe_leaf", 2 * kPathA},
                                             {"main;tpe_path_b;tpe_leaf", 2 * kPathB}};
  EXPECT_EQ(Paths(folded), once) << folded;
  EXPECT_EQ(Paths(all), twice) << all;
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(Gunzip(pprof)));
  int64_t total = 0;
  for (const auto& s : p.sample()) total += s.value(0);
  EXPECT_EQ(total, kPathA + kPathB);
  EXPECT_EQ(p.duration_nanos(), 2000000000);
  EXPECT_GE(p.time_nanos(), start_ns);
  EXPECT_LT(p.time_nanos(), start_ns + 10000000000);
}

}  // namespace
}  // namespace tpe
