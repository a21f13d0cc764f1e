// Kretprobe MAXACTIVE and misses: a kretprobe catches the returns of at most
// MAXACTIVE calls in flight; the others are missed, which only <tracefs>/kprobe_profile says
// (third column). The daemon writes a MAXACTIVE ("maxactive", default kDefaultMaxactive) and
// exports the misses as tracepoint_exporter_probe_misses_total{event}. Needs kprobe events: on
// this development VM the test says why it cannot run; the kernel matrix's Debian guests (5.10,
// 6.1, 6.12) run it.
#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "kernel/kernel_util.h"
#include "plan/probes.h"

namespace tpe {
namespace {

constexpr int kSleepers = 8;

// `kSleepers` threads named tpe_ma_sleep that enter nanosleep(2) (the raw syscall: glibc's
// nanosleep() is clock_nanosleep, so __x64_sys_nanosleep is called by these threads alone) at
// once and sleep 300 ms: all of them are in the function together.
void SleepTogether() {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kSleepers; ++i) {
    threads.emplace_back([&] {
      prctl(PR_SET_NAME, "tpe_ma_sleep");
      ++ready;
      while (ready.load() < kSleepers) std::this_thread::yield();
      timespec ts{0, 300'000'000};
      syscall(SYS_nanosleep, &ts, nullptr);
    });
  }
  for (auto& t : threads) t.join();
}

std::string Config(const std::string& maxactive) {
  return R"({"metrics": [
      {"name": "calls_total", "type": "counter", "event": "kprobe:__x64_sys_nanosleep",
       "filter": "comm == \"tpe_ma_sleep\""},
      {"name": "returns_total", "type": "counter", "event": "kretprobe:__x64_sys_nanosleep",
       "filter": "comm == \"tpe_ma_sleep\"")" +
         maxactive + R"(},
      {"name": "sleep_seconds", "type": "latency",
       "start": {"event": "kprobe:__x64_sys_nanosleep", "key": ["common_pid"], "filter": "comm == \"tpe_ma_sleep\""},
       "end": {"event": "kretprobe:__x64_sys_nanosleep", "key": ["common_pid"],
               "filter": "comm == \"tpe_ma_sleep\"")" +
         maxactive + R"(},
       "buckets": {"type": "explicit", "bounds": [0.1, 1]}}]})";
}

double Misses(const std::vector<MetricSnapshot>& snap) {
  return testing::Value(snap, "tracepoint_exporter_probe_misses_total", {{"event", "kretprobe:__x64_sys_nanosleep"}});
}

TEST(KretprobeTest, MaxactiveBoundsTheCaughtReturnsAndTheMissesAreExported) {
  TPE_REQUIRE_KERNEL_OR_SKIP();
  auto tracefs = Tracefs::Discover("auto");
  ASSERT_TRUE(tracefs.ok());
  if (access((tracefs->root() + "/kprobe_events").c_str(), F_OK) != 0) {
    // No kprobe events (this development VM): the config is refused, saying so.
    auto cfg = ParseConfig(Config(R"(, "maxactive": 2)"), "k.json");
    ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto plan =
        BuildPlan(*cfg, *tracefs, KernelEnums(), true, bpf::BpfSupport{false, "not probed"}, {}, testing::Probed());
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kUnavailable) << plan.status().ToString();
    return;
  }
  for (const char* engine : {"perf", "bpf"}) {
    SCOPED_TRACE(engine);
    if (std::string(engine) == "bpf" && !testing::Bpf().available) {
      if (testing::KernelRequired()) FAIL() << "the bpf engine is not available: " << testing::Bpf().reason;
      continue;
    }
    testing::CurrentEngine() = engine;
    // maxactive 2: two of the eight returns are caught, the other six are missed, and say so.
    auto snap = testing::RunPipeline(Config(R"(, "maxactive": 2)"), SleepTogether);
    EXPECT_EQ(testing::Value(snap, "calls_total"), kSleepers);
    const double returns = testing::Value(snap, "returns_total");
    EXPECT_GE(returns, 2);  // never fewer than maxactive: the first two calls hold the instances
    EXPECT_GT(Misses(snap), 0);
    EXPECT_EQ(returns + Misses(snap), kSleepers);
    EXPECT_EQ(testing::Count(snap, "sleep_seconds"), static_cast<int64_t>(returns));
    // The default covers them: every return caught, no miss.
    snap = testing::RunPipeline(Config(""), SleepTogether);
    EXPECT_EQ(testing::Value(snap, "calls_total"), kSleepers);
    EXPECT_EQ(testing::Value(snap, "returns_total"), kSleepers);
    EXPECT_EQ(Misses(snap), 0);
    EXPECT_EQ(testing::Count(snap, "sleep_seconds"), kSleepers);
    testing::CurrentEngine() = "auto";
    if (ProbeRegistry* r = ProbeRegistry::IfCreated()) r->RemoveUnreferenced();
  }
}

// The line the kernel gets: "r<MAXACTIVE>:" (Documentation/trace/kprobetrace.rst), default
// kDefaultMaxactive; a maxactive on anything but a kretprobe is refused in the config.
TEST(KretprobeTest, MaxactiveInTheDefinitionAndOnlyOnKretprobes) {
  ProbeEventSpec spec;
  spec.kind = ProbeKind::kKretprobe;
  spec.group = "tpe_1";
  spec.event = "kr_x";
  spec.symbol = "do_nanosleep";
  spec.maxactive = 16;
  auto line = ProbeEventLine(spec);
  ASSERT_TRUE(line.ok()) << line.status().ToString();
  EXPECT_EQ(*line, "r16:tpe_1/kr_x do_nanosleep");
  spec.maxactive = 4097;
  EXPECT_FALSE(ProbeEventLine(spec).ok());
  spec.kind = ProbeKind::kKprobe;
  spec.maxactive = 2;
  EXPECT_FALSE(ProbeEventLine(spec).ok());
  auto cfg = ParseConfig(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "kprobe:f",
      "maxactive": 4}]})",
                         "m.json");
  ASSERT_FALSE(cfg.ok());
  EXPECT_NE(cfg.status().message().find("m.json: metrics[0].maxactive: \"maxactive\""), std::string::npos)
      << cfg.status().ToString();
  cfg = ParseConfig(R"({"metrics": [{"name": "a_total", "type": "counter", "event": "kretprobe:f",
      "maxactive": 5000}]})",
                    "m.json");
  ASSERT_FALSE(cfg.ok());
}

}  // namespace
}  // namespace tpe
