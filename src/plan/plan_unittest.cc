#include "plan/plan.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include "bpf/bpf_profile.h"
#include "collectors/counter.h"
#include "collectors/profile.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

// A copy of this kernel's tracefs (ids and formats) under tests/data: no root needed.
const Tracefs kTracefs(testing::DataDir() + "/linux-6.18");

StatusOr<std::unique_ptr<Plan>> Build(const std::string& metrics, const KernelEnums& enums = KernelEnums()) {
  auto cfg = ParseConfig(R"({"metrics": [)" + metrics + "]}", "cfg.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  return BuildPlan(*cfg, kTracefs, enums, /*check_filters=*/false);
}

TEST(PlanTest, CountingModeSampledModeAndSharing) {
  auto plan = Build(R"(
    {"name": "a_total", "type": "counter", "event": "sched:sched_switch"},
    {"name": "b_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "labels": [{"name": "comm", "source": "comm"}]},
    {"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid"},
    {"name": "d_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "filter": "common_pid == 1"})");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  // b samples; c, a label-less counter on the same event, gets a counting-mode event of its own
  // (so that it keeps its perf events across a reload whatever happens to b); d has its filter.
  ASSERT_EQ(p.events.size(), 4u);
  EXPECT_EQ(p.events[0]->event.ToString(), "sched:sched_switch");
  EXPECT_EQ(p.events[0]->tracepoint_id, 372u);
  EXPECT_FALSE(p.events[0]->sampled);
  EXPECT_TRUE(p.events[1]->sampled);
  EXPECT_EQ(p.events[1]->consumers.size(), 1u);
  EXPECT_FALSE(p.events[2]->sampled);
  EXPECT_EQ(p.events[2]->event, p.events[1]->event);
  EXPECT_FALSE(p.events[3]->sampled);
  EXPECT_EQ(p.events[3]->filter, "common_pid == 1");
  EXPECT_TRUE(p.needs_comm);
  EXPECT_TRUE(static_cast<CounterCollector*>(p.metrics[0].collector.get())->counting_mode());
  EXPECT_FALSE(static_cast<CounterCollector*>(p.metrics[1].collector.get())->counting_mode());
}

TEST(PlanTest, UnknownEventSuggestsCloseNames) {
  auto plan = Build(R"({"name": "a_total", "type": "counter", "event": "sched:sched_swich"})");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().message(), "cfg.json: metrics[0].event: no tracepoint \"sched:sched_swich\" in " +
                                         kTracefs.root() +
                                         "/events; closest: sched:sched_switch, sched:sched_waking, sched:sched_wakeup "
                                         "(list them with --list-events)");
}

TEST(PlanTest, UnknownFieldListsTheEventsFields) {
  auto plan = Build(R"({"name": "a_total", "type": "counter", "event": "sched:sched_waking",
                        "labels": [{"name": "p", "field": "pidd"}]})");
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(
      plan.status().message(),
      "cfg.json: metrics[0].labels[0].field: sched:sched_waking has no field \"pidd\"; its fields: comm (char[16]), "
      "pid (pid_t), prio (int), target_cpu (int), common_pid");
}

TEST(PlanTest, DecodeThatDoesNotFitTheField) {
  auto plan = Build(R"({"name": "a_total", "type": "counter", "event": "tcp:tcp_retransmit_skb",
                        "labels": [{"name": "p", "field": "sport", "decode": "inet"}]})");
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("cfg.json: metrics[0].labels[0].decode: decode \"inet\" needs a 4-byte"),
            std::string::npos);
}

TEST(PlanTest, ErrnoAndBlkdevDecodesPlanAndRefuseWithTheJsonPath) {
  auto ok = Build(R"({"name": "a_total", "type": "counter", "event": "syscalls:sys_exit_nanosleep",
                      "labels": [{"name": "e", "field": "ret", "decode": "errno"}]},
                    {"name": "b_total", "type": "counter", "event": "block:block_rq_issue",
                      "labels": [{"name": "disk", "field": "dev", "decode": "blkdev"}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto bad = Build(R"({"name": "a_total", "type": "counter", "event": "block:block_rq_issue",
                       "labels": [{"name": "d", "field": "rwbs", "decode": "blkdev"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "cfg.json: metrics[0].labels[0].decode: decode \"blkdev\" needs an integer field holding a kernel dev_t "
            "(e.g. block:block_rq_issue dev); field \"rwbs\" (char[10], 10 bytes) is not one: use \"auto\"");
}

TEST(PlanTest, SymbolicTcpStateUsesKernelEnums) {
  KernelEnums enums({{"TCP_ESTABLISHED", 1}, {"TCP_SYN_SENT", 2}});
  auto plan = Build(R"({"name": "a_total", "type": "counter", "event": "tcp:tcp_retransmit_skb",
                        "labels": [{"name": "state", "field": "state", "decode": "symbolic"}]})",
                    enums);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ((*plan)->events[0]->symbols.at("state").Render(2), "TCP_SYN_SENT");
  EXPECT_TRUE((*plan)->warnings.empty());
  // Without BTF the names cannot be resolved: numbers, and a warning that says why.
  auto bare = Build(R"({"name": "a_total", "type": "counter", "event": "tcp:tcp_retransmit_skb",
                        "labels": [{"name": "state", "field": "state", "decode": "symbolic"}]})");
  ASSERT_TRUE(bare.ok());
  ASSERT_EQ((*bare)->warnings.size(), 1u);
  EXPECT_NE((*bare)->warnings[0].find("have no values without kernel BTF"), std::string::npos);
  // A field with no table at all is an error.
  auto none = Build(R"({"name": "a_total", "type": "counter", "event": "tcp:tcp_retransmit_skb",
                        "labels": [{"name": "p", "field": "sport", "decode": "symbolic"}]})");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no __print_symbolic or __print_flags table"), std::string::npos);
}

TEST(PlanTest, LatencyPlansStartsAndEndOnSharedEvents) {
  auto plan = Build(R"({"name": "runq_seconds", "type": "latency",
      "start": [{"event": "sched:sched_waking", "key": ["pid"]},
                {"event": "sched:sched_switch", "key": ["prev_pid"], "filter": "prev_state == 0"}],
      "end": {"event": "sched:sched_switch", "key": ["next_pid"]},
      "labels": [{"name": "comm", "field": "next_comm", "from": "end"}],
      "buckets": {"type": "exp2", "min": 1e-6, "max": 1}})");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  ASSERT_EQ(p.events.size(), 3u);  // end (no filter), waking, switch with filter
  EXPECT_TRUE(p.needs_ordering);
  EXPECT_FALSE(p.needs_comm);
  for (const auto& e : p.events) EXPECT_TRUE(e->sampled);
  EXPECT_EQ(p.events[0]->consumers[0].second, 2u);  // the end is event index starts.size()
  EXPECT_EQ(p.events[1]->consumers[0].second, 0u);
  EXPECT_EQ(p.events[2]->consumers[0].second, 1u);
}

TEST(PlanTest, HistogramAndLatencyErrors) {
  auto r = Build(R"({"name": "h", "type": "histogram", "event": "net:net_dev_xmit", "value": {"field": "name"},
                     "buckets": {"type": "exp2", "min": 1, "max": 2}})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "cfg.json: metrics[0].value.field: \"name\" of net:net_dev_xmit is __data_loc char[] (__data_loc), not a "
            "number; a histogram needs an integer field");
  // Bucket layouts are checked when the config is parsed (config_unittest).
  r = Build(R"({"name": "l_seconds", "type": "latency", "start": {"event": "sched:sched_waking", "key": ["comm"]},
                "end": {"event": "sched:sched_switch", "key": ["next_pid"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}})");
  EXPECT_EQ(r.status().message(),
            "cfg.json: metrics[0].start.key[0]: key field \"comm\" of sched:sched_waking is "
            "char[16] (char array); keys must be integer or pointer fields");
  r = Build(R"({"name": "l_seconds", "type": "latency", "start": {"event": "sched:sched_waking", "key": ["pid"]},
                "end": {"event": "sched:sched_switch", "key": ["prev_state"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}})");
  EXPECT_EQ(r.status().message(),
            "cfg.json: metrics[0].start.key[0]: key types differ: start \"pid\" is pid_t (4 "
            "bytes) but end \"prev_state\" is long (8 bytes)");
  r = Build(R"({"name": "l_seconds", "type": "latency", "start": {"event": "sched:sched_wakin", "key": ["pid"]},
                "end": {"event": "sched:sched_switch", "key": ["next_pid"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}})");
  EXPECT_NE(r.status().message().find("cfg.json: metrics[0].start.event: no tracepoint \"sched:sched_wakin\""),
            std::string::npos);
  r = Build(R"({"name": "l_seconds", "type": "latency", "start": {"event": "sched:sched_waking", "key": ["pidd"]},
                "end": {"event": "sched:sched_switch", "key": ["next_pid"]}, "buckets": {"type": "exp2", "min": 1, "max": 2}})");
  EXPECT_NE(r.status().message().find("cfg.json: metrics[0].start.key[0]: sched:sched_waking has no field \"pidd\""),
            std::string::npos);
}

TEST(PlanTest, CounterWithValueSamplesAndNeedsAnIntegerField) {
  auto plan = Build(R"({"name": "r_total", "type": "counter", "event": "raw_syscalls:sys_exit",
                        "value": {"field": "ret"}})");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ((*plan)->events.size(), 1u);
  EXPECT_TRUE((*plan)->events[0]->sampled);  // no labels, but it needs every sample's value
  EXPECT_FALSE(static_cast<CounterCollector*>((*plan)->metrics[0].collector.get())->counting_mode());
  auto bad = Build(R"({"name": "r_total", "type": "counter", "event": "sched:sched_waking",
                       "value": {"field": "comm"}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "cfg.json: metrics[0].value.field: \"comm\" of sched:sched_waking is char[16] (char array), not an "
            "integer; a counter adds an integer field; its integer fields: pid, prio, target_cpu");
  auto missing = Build(R"({"name": "r_total", "type": "counter", "event": "raw_syscalls:sys_exit",
                           "value": {"field": "rett"}})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cfg.json: metrics[0].value.field: raw_syscalls:sys_exit has no field "
                                            "\"rett\"; its fields: "),
            std::string::npos);
}

// Profiles: "auto" takes perf (exact stacks) and says why; "bpf" takes stack maps, with the
// mmap tracking event that names user frames (planned unloaded, as for a reload that keeps it:
// no privilege needed); a value profile on "bpf" is refused with what works.
TEST(PlanTest, ProfileEnginesAndTheMmapTracker) {
  const bpf::BpfSupport bpf_ok{true, ""};
  auto parse = [](const std::string& profile) {
    auto cfg = ParseConfig(R"({"profiles": [)" + profile + "]}", "cfg.json");
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    return *cfg;
  };
  Config autocfg = parse(R"({"name": "p", "event": "raw_syscalls:sys_enter"})");
  auto auto_plan = BuildPlan(autocfg, kTracefs, KernelEnums(), false, bpf_ok);
  ASSERT_TRUE(auto_plan.ok()) << auto_plan.status().ToString();
  EXPECT_EQ(NameOf((*auto_plan)->metrics[0].engine), "perf");
  EXPECT_NE((*auto_plan)->metrics[0].engine_reason.find("\"unwind\": \"dwarf\" (the default)"), std::string::npos)
      << (*auto_plan)->metrics[0].engine_reason;
  Config fpcfg = parse(R"({"name": "p", "event": "raw_syscalls:sys_enter", "unwind": "frame_pointer"})");
  auto fp_plan = BuildPlan(fpcfg, kTracefs, KernelEnums(), false, bpf_ok);
  ASSERT_TRUE(fp_plan.ok()) << fp_plan.status().ToString();
  EXPECT_EQ(NameOf((*fp_plan)->metrics[0].engine), "perf");
  EXPECT_NE((*fp_plan)->metrics[0].engine_reason.find("hash collisions"), std::string::npos);

  // "dwarf" is the perf engine's: on "bpf" it is refused when asked for, and the default
  // becomes frame pointers with a warning.
  Config bpf_dwarf = parse(R"({"name": "p", "event": "raw_syscalls:sys_enter", "engine": "bpf", "unwind": "dwarf"})");
  auto d_plan = BuildPlan(bpf_dwarf, kTracefs, KernelEnums(), false, bpf_ok);
  ASSERT_FALSE(d_plan.ok());
  EXPECT_EQ(d_plan.status().message(),
            "cfg.json: profiles[0].engine: \"bpf\" for p: \"unwind\": \"dwarf\" runs on the perf engine; user stacks "
            "on the bpf engine are walked by frame pointers (bpf_get_stackid), which stop at the first function "
            "built without them (most of a distribution's binaries); use \"auto\" or \"perf\" for dwarf, or "
            "\"unwind\": \"frame_pointer\"");

  Config bpfcfg = parse(R"({"name": "p", "event": "raw_syscalls:sys_enter", "engine": "bpf"})");
  auto bpf_plan = BuildPlan(bpfcfg, kTracefs, KernelEnums(), false, bpf_ok, {bpfcfg.metrics[0].canonical});
  ASSERT_TRUE(bpf_plan.ok()) << bpf_plan.status().ToString();
  const Plan& p = **bpf_plan;
  EXPECT_EQ(NameOf(p.metrics[0].engine), "bpf");
  ASSERT_NE(p.metrics[0].collector->stack_profile(), nullptr);
  EXPECT_FALSE(p.metrics[0].collector->stack_profile()->stamped());
  ASSERT_EQ(p.events.size(), 1u);  // no tracepoint event: the mmap tracker only
  EXPECT_TRUE(p.events[0]->mmap_tracker);
  EXPECT_TRUE(p.events[0]->sampled);
  EXPECT_TRUE(p.needs_ordering);
  EXPECT_EQ(std::count_if(p.warnings.begin(), p.warnings.end(),
                          [](const std::string& w) {
                            return w.find(
                                       "p on the bpf engine: user stacks on the bpf engine are walked by frame "
                                       "pointers") != std::string::npos;
                          }),
            1);

  Config kernel_only = parse(R"({"name": "p", "event": "raw_syscalls:sys_enter", "engine": "bpf", "stack": "kernel"})");
  auto k_plan = BuildPlan(kernel_only, kTracefs, KernelEnums(), false, bpf_ok, {kernel_only.metrics[0].canonical});
  ASSERT_TRUE(k_plan.ok()) << k_plan.status().ToString();
  EXPECT_TRUE((*k_plan)->events.empty()) << "kernel stacks need no mappings";

  Config value =
      parse(R"({"name": "p", "event": "raw_syscalls:sys_enter", "engine": "bpf", "value": {"field": "id"}})");
  auto v_plan = BuildPlan(value, kTracefs, KernelEnums(), false, bpf_ok);
  ASSERT_FALSE(v_plan.ok());
  EXPECT_EQ(
      v_plan.status().message(),
      "cfg.json: profiles[0].engine: \"bpf\" for p: a profile that sums a \"value\" field runs on the perf engine "
      "in this release; use \"perf\" or \"auto\"");

  // A stack map is preallocated: 1,000,000 stacks of 127 frames would be ~1 GiB.
  auto big = ParseConfig(R"({"settings": {"max_stacks_per_profile": 1000000},
      "profiles": [{"name": "p", "event": "raw_syscalls:sys_enter", "engine": "bpf"}]})",
                         "cfg.json");
  ASSERT_TRUE(big.ok()) << big.status().ToString();
  auto b_plan = BuildPlan(*big, kTracefs, KernelEnums(), false, bpf_ok);
  ASSERT_FALSE(b_plan.ok());
  EXPECT_EQ(b_plan.status().message(),
            "cfg.json: profiles[0].engine: \"bpf\" for p: its stack map of 1000000 stacks of 127 frames preallocates "
            "999 MiB, over settings.bpf_preallocate_max_bytes (64 MiB): lower settings.max_stacks_per_profile or "
            "profile_max_frames, or raise it");
}

// A CPU profile: a sampled cpu-clock event with callchains and the period in its samples, no
// tracefs format; two profiles sampling alike share it, another frequency gets its own.
TEST(PlanTest, CpuProfilesSampleTheClockEvent) {
  auto cfg = ParseConfig(R"({"profiles": [{"name": "a", "event": "cpu-clock"},
      {"name": "b", "event": "cpu-clock", "labels": [{"name": "comm", "source": "comm"}]},
      {"name": "c", "event": "cpu-clock", "frequency_hz": 99, "include_idle": true, "stack": "kernel"}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  ASSERT_EQ(p.events.size(), 2u);
  const EventPlan& e = *p.events[0];
  EXPECT_EQ(e.display, "cpu-clock stacks at 19 Hz");
  EXPECT_TRUE(e.clock());
  EXPECT_EQ(e.software_clock, PERF_COUNT_SW_CPU_CLOCK);
  EXPECT_EQ(e.frequency_hz, 19u);
  EXPECT_FALSE(e.include_idle);
  EXPECT_TRUE(e.sampled);
  // User stacks unwound here ("unwind": "dwarf", the default): the kernel's callchain carries
  // the kernel part, the sample the registers and 8 KiB of the user stack.
  EXPECT_EQ(e.callchain, EventPlan::kCallchainKernel);
  EXPECT_EQ(e.stack_user_bytes, 8192u);
  EXPECT_EQ(e.consumers.size(), 2u);
  EXPECT_EQ(p.events[1]->frequency_hz, 99u);
  EXPECT_TRUE(p.events[1]->include_idle);
  EXPECT_EQ(p.Engines(), (std::vector<Engine>{Engine::kPerf, Engine::kPerf, Engine::kPerf}));
  ASSERT_NE(p.metrics[0].collector->stack_profile(), nullptr);
  EXPECT_EQ(p.metrics[0].collector->stack_profile()->value_type(), "cpu");
  EXPECT_EQ(p.metrics[0].collector->stack_profile()->value_unit(), "nanoseconds");
  // The attr: a software clock at 19 Hz, the period in each sample, the idle task left out.
  TracepointEventOptions o;
  o.sampled = true;
  o.software_clock = e.software_clock;
  o.frequency_hz = e.frequency_hz;
  o.exclude_idle = true;
  const perf_event_attr a = MakeTracepointAttr(o);
  EXPECT_EQ(a.type, PERF_TYPE_SOFTWARE);
  EXPECT_EQ(a.config, PERF_COUNT_SW_CPU_CLOCK);
  EXPECT_EQ(a.freq, 0u);
  EXPECT_EQ(a.sample_period, 1000000000u / 19);
  EXPECT_EQ(a.exclude_idle, 1u);
  EXPECT_EQ(a.sample_type & PERF_SAMPLE_PERIOD, PERF_SAMPLE_PERIOD);
}

// A CPU profile on "bpf": a clock event of its own that runs the profile's program
// (EventPlan::bpf_profile; never shared with a perf profile's clock, which has samples), the
// mmap tracker for user frames, and the profile weighs each sample by the period.
TEST(PlanTest, ABpfCpuProfileHasItsOwnClockEventThatRunsItsProgram) {
  auto cfg = ParseConfig(R"({"profiles": [{"name": "a", "event": "cpu-clock", "frequency_hz": 99, "engine": "bpf",
      "labels": [{"name": "comm", "source": "comm"}]},
      {"name": "b", "event": "cpu-clock", "frequency_hz": 99}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {cfg->metrics[0].canonical});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  EXPECT_EQ(p.Engines(), (std::vector<Engine>{Engine::kBpf, Engine::kPerf}));
  ASSERT_EQ(p.events.size(), 3u);  // b's clock; a's clock and the mmap tracker
  const EventPlan* bpf_clock = nullptr;
  const EventPlan* perf_clock = nullptr;
  for (const auto& e : p.events) {
    if (!e->bpf_profile.empty()) bpf_clock = e.get();
    if (e->clock() && e->bpf_profile.empty()) perf_clock = e.get();
  }
  ASSERT_NE(bpf_clock, nullptr);
  ASSERT_NE(perf_clock, nullptr);
  EXPECT_EQ(bpf_clock->bpf_profile, cfg->metrics[0].canonical);
  EXPECT_EQ(bpf_clock->display, "cpu-clock stacks at 99 Hz (bpf profile a)");
  EXPECT_EQ(bpf_clock->callchain, 0) << "the program takes the stacks";
  EXPECT_FALSE(bpf_clock->sampled) << "no sample is written: no ring";
  TracepointEventOptions o;
  o.software_clock = bpf_clock->software_clock;
  o.frequency_hz = bpf_clock->frequency_hz;
  o.exclude_idle = true;
  o.bpf_overflow = true;
  const perf_event_attr attr = MakeTracepointAttr(o);
  EXPECT_EQ(attr.sample_period, 1000000000u / 99);
  EXPECT_EQ(attr.sample_type, 0u);
  EXPECT_EQ(attr.exclude_idle, 1u);
  EXPECT_TRUE(bpf_clock->consumers.empty());
  EXPECT_FALSE(bpf_clock->SamePerfEvents(*perf_clock));
  EXPECT_EQ(perf_clock->consumers.size(), 1u);
  const StackProfile* a = p.metrics[0].collector->stack_profile();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->value_type(), "cpu");
  EXPECT_EQ(a->value_unit(), "nanoseconds");
  EXPECT_EQ(a->scale(), static_cast<double>(1000000000u / 99));  // the period, whole ns
  EXPECT_FALSE(a->stamped());
}

// An off-CPU profile on "bpf": the switch's fields in the spec, no sampled sched_switch event
// (the kernel pairs), the mmap tracker for user frames; ns blocked as on perf.
TEST(PlanTest, ABpfOffCpuProfilePairsInTheKernel) {
  auto cfg = ParseConfig(R"({"profiles": [{"name": "off", "type": "off_cpu", "engine": "bpf",
      "min_block_seconds": 0.001, "labels": [{"name": "comm", "source": "comm"}]}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {cfg->metrics[0].canonical});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  EXPECT_EQ(p.Engines(), (std::vector<Engine>{Engine::kBpf}));
  ASSERT_EQ(p.events.size(), 1u);
  EXPECT_TRUE(p.events[0]->mmap_tracker);
  const auto* profile = dynamic_cast<const bpf::BpfProfile*>(p.metrics[0].collector.get());
  ASSERT_NE(profile, nullptr);
  EXPECT_EQ(profile->value_type(), "off_cpu");
  EXPECT_EQ(profile->value_unit(), "nanoseconds");
  EXPECT_EQ(profile->scale(), 1);
  const auto& off = profile->metric().spec().off_cpu;
  ASSERT_TRUE(off.has_value());
  EXPECT_EQ(off->prev_pid.name, "prev_pid");
  EXPECT_EQ(off->next_pid.name, "next_pid");
  EXPECT_EQ(off->prev_state.name, "prev_state");
  EXPECT_EQ(off->min_block_ns, 1000000u);
  EXPECT_EQ(off->own_tgid, static_cast<uint32_t>(::getpid()));
}

TEST(PlanTest, CgroupLabelSamplesTheCgroupIdOnItsEventOnly) {
  auto plan = Build(R"(
    {"name": "a_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "labels": [{"name": "comm", "source": "comm"}]},
    {"name": "b_total", "type": "counter", "event": "syscalls:sys_enter_getppid",
     "labels": [{"name": "cgroup", "source": "cgroup"}]},
    {"name": "c_total", "type": "counter", "event": "sched:sched_waking",
     "labels": [{"name": "cpu", "source": "cpu"}]})");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const Plan& p = **plan;
  // a and b share one sampled event, which now carries the cgroup id; c's does not.
  ASSERT_EQ(p.events.size(), 2u);
  EXPECT_TRUE(p.events[0]->sampled);
  EXPECT_TRUE(p.events[0]->cgroup);
  EXPECT_EQ(p.events[0]->consumers.size(), 2u);
  EXPECT_FALSE(p.events[1]->cgroup);
  ASSERT_NE(p.cgroups, nullptr);
  EventPlan other;
  other.event = p.events[0]->event;
  other.sampled = true;
  EXPECT_FALSE(other.SamePerfEvents(*p.events[0]));  // a reload adding a cgroup label reopens it
  other.cgroup = true;
  EXPECT_TRUE(other.SamePerfEvents(*p.events[0]));
}

}  // namespace
}  // namespace tpe
