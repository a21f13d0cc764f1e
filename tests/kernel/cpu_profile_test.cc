// Kernel tier, CPU profiles (issue 24): a "profiles" entry on the "cpu-clock" software event,
// sampled on every CPU, each sample weighted by its period. A child (tests/triggers/stack_paths
// spin) spins in tpe_spin on CPU 0 for 2 s of CPU time: at least 90 % of its weight in the profile
// is under tpe_spin, and its total is within 10 % of the CPU time /proc/PID/stat gives it. The
// idle task only with include_idle; a CPU that went offline and came back is sampled again.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "daemon/profiles.h"
#include "kernel/kernel_util.h"
#include "kernel/stack_paths_trigger.h"
#include "pprof/profile.pb.h"

namespace tpe {
namespace {

std::string Gunzip(const std::string& gz) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 16) != Z_OK) return "";
  std::string out(8 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(rc == Z_STREAM_END ? z.total_out : 0);
  inflateEnd(&z);
  return out;
}

// utime + stime of process `pid` (proc(5) /proc/PID/stat fields 14 and 15), in ns.
int64_t ProcessCpuNs(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(text.substr(paren + 2));  // field 3 (state) onwards
  std::string field;
  int64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return (utime + stime) * (1000000000 / sysconf(_SC_CLK_TCK));
}

// The weight of samples labelled comm=`comm`: all of it, and the part whose stack has `function`.
struct Weight {
  int64_t total = 0, under = 0;
};
Weight WeightOf(const perftools::profiles::Profile& p, const std::string& comm, const std::string& function) {
  std::map<uint64_t, bool> has;  // location id -> one of its lines is `function`
  std::map<uint64_t, std::string> names;
  for (const auto& f : p.function()) names[f.id()] = p.string_table(f.name());
  for (const auto& l : p.location()) {
    for (const auto& line : l.line()) has[l.id()] = has[l.id()] || names[line.function_id()] == function;
  }
  Weight w;
  for (const auto& s : p.sample()) {
    bool mine = false;
    for (const auto& l : s.label()) mine |= p.string_table(l.key()) == "comm" && p.string_table(l.str()) == comm;
    if (!mine) continue;
    w.total += s.value(0);
    bool under = false;
    for (uint64_t id : s.location_id()) under |= has[id];
    if (under) w.under += s.value(0);
  }
  return w;
}

TEST(CpuProfileTest, ASpinningChildsCpuTimeIsUnderItsFunction) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  testing::Trigger t({"spin", "2", "tpe_spin"}, /*cpu=*/0);
  ASSERT_GT(t.pid(), 0);
  const std::string config = R"({"settings": {"ring_buffer_pages": 256},
      "profiles": [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 99,
                    "labels": [{"name": "comm", "source": "comm"}]}]})";
  int64_t cpu_ns = 0;
  std::string pprof, folded;
  std::vector<MetricSnapshot> page;
  testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    t.Go();  // returns once it has spun its 2 s and holds
    cpu_ns = ProcessCpuNs(t.pid());
    HttpAnswer a = RenderProfile(pipeline, "cpu", "");
    EXPECT_EQ(a.status, 200u);
    pprof = a.body;
    folded = RenderProfile(pipeline, "cpu", "folded").body;
    page = pipeline.Snapshot();
    t.Release();
  });
  perftools::profiles::Profile p;
  ASSERT_TRUE(p.ParseFromString(Gunzip(pprof)));
  ASSERT_EQ(p.sample_type_size(), 1);
  EXPECT_EQ(p.string_table(p.sample_type(0).type()), "cpu");
  EXPECT_EQ(p.string_table(p.sample_type(0).unit()), "nanoseconds");
  EXPECT_EQ(p.string_table(p.period_type().unit()), "nanoseconds");
  const Weight w = WeightOf(p, "tpe_spin", "tpe_spin");
  std::printf("cpu profile: %lld of %lld ns under tpe_spin; /proc/PID/stat: %lld ns\n", static_cast<long long>(w.under),
              static_cast<long long>(w.total), static_cast<long long>(cpu_ns));
  ASSERT_GT(cpu_ns, 1900000000) << "the child spun for 2 s of CPU time";
  EXPECT_GE(w.under, w.total * 9 / 10) << folded;
  EXPECT_NEAR(static_cast<double>(w.total), static_cast<double>(cpu_ns), 0.1 * static_cast<double>(cpu_ns))
      << "profile " << w.total << " ns, /proc/PID/stat " << cpu_ns << " ns";
  // The idle task is left out: no stack through the idle loop (kernel/sched/idle.c).
  EXPECT_EQ(folded.find("do_idle"), std::string::npos) << folded;
  EXPECT_GT(testing::Value(page, "tracepoint_exporter_profile_samples_total", {{"profile", "cpu"}}), 150);
  // The exporter's own time on the profile: handling its samples, rendering it (twice above).
  EXPECT_GT(testing::Value(page, "tracepoint_exporter_profile_sample_seconds_total", {{"profile", "cpu"}}), 0);
  EXPECT_GT(testing::Value(page, "tracepoint_exporter_profile_render_cpu_seconds_total", {{"profile", "cpu"}}), 0);
  // A clock's kernel count is ns, not hits: no hits series for it, samples and lost are there.
  EXPECT_EQ(
      testing::Value(page, "tracepoint_exporter_event_hits_total", {{"event", "cpu-clock stacks"}, {"filter", ""}}),
      -1);
}

// include_idle keeps the idle task's samples: on a machine with an idle moment, stacks through
// the idle loop (do_idle, kernel/sched/idle.c) are in the profile.
TEST(CpuProfileTest, IncludeIdleKeepsTheIdleTask) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string config = R"({"profiles": [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 199,
      "include_idle": true, "stack": "kernel"}]})";
  std::string folded;
  testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    folded = RenderProfile(pipeline, "cpu", "folded").body;
  });
  EXPECT_NE(folded.find("do_idle"), std::string::npos) << folded.substr(0, 2000);
}

// CPU hotplug: cpu1 goes offline and comes back; its clock event is reopened (as tracepoints'
// are) and a thread spinning on it afterwards has its CPU time in the profile, within 10 %.
TEST(CpuProfileTest, ACpuThatCameBackIsSampledAgain) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  const std::string online = "/sys/devices/system/cpu/cpu1/online";
  if (access(online.c_str(), W_OK) != 0) {
    if (testing::KernelRequired()) FAIL() << online << " is not writable: cannot take cpu1 offline";
    GTEST_SKIP() << online << " is not writable (one CPU, or no hotplug): cannot take cpu1 offline";
  }
  const auto set_online = [&](bool on) { std::ofstream(online) << (on ? "1" : "0"); };
  struct Restore {
    std::function<void(bool)> set;
    ~Restore() { set(true); }
  } restore{set_online};
  const std::string config = R"({"profiles": [{"name": "cpu", "event": "cpu-clock", "frequency_hz": 99,
      "labels": [{"name": "comm", "source": "comm"}]}]})";
  int64_t spun_ns = 0, profiled_ns = 0;
  testing::RunPipelineWith(config, [&](Pipeline& pipeline) {
    const auto wait_for = [&](const char* metric, double want) {
      return testing::WaitFor(
          pipeline,
          [&](const std::vector<MetricSnapshot>& s) {
            return testing::Value(s, metric, {{"cpu", "1"}}) >= want;
          },
          10);
    };
    set_online(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    set_online(true);
    ASSERT_TRUE(wait_for("tracepoint_exporter_cpu_reopens_total", 1)) << "cpu1's events were not reopened";
    std::thread spin([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(1, &set);
      sched_setaffinity(0, sizeof(set), &set);
      prctl(PR_SET_NAME, "tpe_hot_spin");
      const auto cpu_now = [] {
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
      };
      volatile uint64_t sink = 0;
      while (cpu_now() < 1000000000) {
        for (int i = 0; i < 100000; ++i) sink = sink + static_cast<uint64_t>(i);
      }
      spun_ns = cpu_now();
    });
    spin.join();
    RenderProfile(pipeline, "cpu", "folded");  // waits for the reader to catch up with now
    auto data = pipeline.Profile("cpu");
    ASSERT_TRUE(data.has_value());
    for (const StackCount& sc : data->stacks) {
      for (const auto& [k, v] : sc.labels) {
        if (k == "comm" && v == "tpe_hot_spin") profiled_ns += static_cast<int64_t>(sc.value);
      }
    }
  });
  std::printf("after cpu1 came back: %lld ns profiled, %lld ns spun\n", static_cast<long long>(profiled_ns),
              static_cast<long long>(spun_ns));
  EXPECT_NEAR(static_cast<double>(profiled_ns), static_cast<double>(spun_ns), 0.1 * static_cast<double>(spun_ns));
}

}  // namespace
}  // namespace tpe
