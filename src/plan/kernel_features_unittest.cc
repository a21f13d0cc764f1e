// The plan's fallbacks for each feature a kernel of the fleet lacks (values as the probes would
// return them there; the probes' own injection tests are in perf/ and bpf/).
#include "plan/kernel_features.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bpf/bpf_profile.h"
#include "common/file_util.h"
#include "plan/plan.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

const Tracefs kTracefs(testing::DataDir() + "/linux-6.18");

constexpr char kV2Mount[] = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n";
constexpr char kV1Mounts[] =
    "30 23 0:27 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
    "31 23 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";

TEST(CgroupFactsTest, V2V1OnlyAndUnusedV2) {
  EXPECT_TRUE(DetectCgroupFacts(kV2Mount, "0::/system.slice/tpe.service\n").v2_labels);
  EXPECT_TRUE(DetectCgroupFacts(kV2Mount, "0::/\n").v2_labels);  // a container's own cgroup namespace
  CgroupFacts v1 = DetectCgroupFacts(kV1Mounts, "4:memory:/system.slice/tpe.service\n");
  EXPECT_FALSE(v1.v2_labels);
  EXPECT_NE(v1.why.find("no cgroup2"), std::string::npos);
  // cgroup2 mounted (systemd's hybrid "unified" without tasks) but the v1 hierarchies hold them.
  CgroupFacts unused = DetectCgroupFacts(std::string(kV1Mounts) + kV2Mount,
                                         "4:memory:/system.slice/tpe.service\n1:name=systemd:/x\n0::/\n");
  EXPECT_FALSE(unused.v2_labels);
  EXPECT_NE(unused.why.find("holds no tasks"), std::string::npos);
}

// Kernel facts as a kernel `release` (and RT-ness) would give them.
KernelFeatures On(const std::string& release, bool rt = false) {
  KernelFeatures f;
  f.bpf = bpf::BpfFeaturesFromUname(release, rt ? "PREEMPT_RT" : "", "");
  f.perf.format_lost = f.bpf.major >= 6;
  f.perf.sample_cgroup = !(f.bpf.major < 5 || (f.bpf.major == 5 && f.bpf.minor < 7));
  f.perf.inherit_thread = !(f.bpf.major < 5 || (f.bpf.major == 5 && f.bpf.minor < 13));
  return f;
}

StatusOr<std::unique_ptr<Plan>> Build(const std::string& metrics, const KernelFeatures& f) {
  auto cfg = ParseConfig(R"({"metrics": [)" + metrics + "]}", "cfg.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
  return BuildPlan(*cfg, kTracefs, KernelEnums(), /*check_filters=*/false, bpf::BpfSupport{false, "not probed"}, {}, f);
}

constexpr char kCgroupPerf[] =
    R"({"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "perf",
        "labels": [{"name": "cgroup", "source": "cgroup"}]})";

TEST(KernelFeaturesPlanTest, CgroupLabelOnPerfNeedsSampleCgroup) {
  auto p = Build(kCgroupPerf, On("5.4.0-170-generic"));
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("metrics[0].labels[0].source: a cgroup label on the perf engine needs "
                                      "PERF_SAMPLE_CGROUP (Linux 5.7), which this kernel (5.4.0-170-generic)"),
            std::string::npos)
      << p.status().message();
  EXPECT_TRUE(Build(kCgroupPerf, On("5.10.0-28-amd64")).ok());
}

TEST(KernelFeaturesPlanTest, CgroupLabelLeftOutWhereV2HoldsNoTasks) {
  KernelFeatures f = On("6.1.0-18-amd64");
  f.cgroup = DetectCgroupFacts(kV1Mounts, "4:memory:/system.slice/tpe.service\n");
  auto p = Build(R"({"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "perf",
        "labels": [{"name": "comm", "source": "comm"}, {"name": "cgroup", "source": "cgroup"}]})",
                 f);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_FALSE((*p)->events[0]->cgroup);  // no PERF_SAMPLE_CGROUP, no cgroup label
  EXPECT_EQ((*p)->cgroups, nullptr);
  ASSERT_EQ((*p)->warnings.size(), 1u);
  EXPECT_NE((*p)->warnings[0].find("metrics[0].labels[1]: cgroup label \"cgroup\" left out: it needs tasks in cgroup "
                                   "v2 (no cgroup2 filesystem"),
            std::string::npos)
      << (*p)->warnings[0];
  ASSERT_EQ((*p)->kernel_notes.size(), 2u);  // misses (6.1) and cgroup
  EXPECT_NE((*p)->kernel_notes[1].find("cgroup labels are left out"), std::string::npos);
}

// CPUS{...} filters came with Linux 6.6; 6.1 refuses them ("CPU & CPUS{0}": the kernel matrix's
// 6.1 guest). The bpf engine gives the kernel's verdict instead of compiling them.
TEST(KernelFeaturesPlanTest, CpusFiltersNeedLinux6_6OnTheBpfEngineToo) {
  auto cfg = ParseConfig(R"({"metrics": [{"name": "c_total", "type": "counter", "event": "sched:sched_waking",
      "filter": "CPU & CPUS{0}", "labels": [{"name": "comm", "source": "comm"}]}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto p = BuildPlan(*cfg, kTracefs, KernelEnums(), /*check_filters=*/false, bpf::BpfSupport{true, ""}, {},
                     On("6.1.0-18-amd64"));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(NameOf((*p)->metrics[0].engine), "perf");  // where the kernel itself refuses the filter at open
  EXPECT_NE(
      (*p)->metrics[0].engine_reason.find("metrics[0].filter \"CPU & CPUS{0}\": CPUS{...} filters need Linux 6.6; "
                                          "this kernel (6.1.0-18-amd64) refuses them"),
      std::string::npos)
      << (*p)->metrics[0].engine_reason;
}

TEST(KernelFeaturesPlanTest, NotesLoadOptionsAndPerfBitsPerKernel) {
  constexpr char kCounter[] = R"({"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid"})";
  struct Row {
    const char* release;
    bool rt;
    bool prealloc, probe_read;
    size_t notes;
  } rows[] = {
      {"4.18.0-513.el8.x86_64", false, true, true, 10},  // every feature but cgroup v2
      {"5.4.0-170-generic", false, true, true, 10},
      // format_lost, inherit_thread, alloc, misses, xchg, lookup_and_delete, memlock
      {"5.10.0-28-amd64", false, true, false, 7},
      {"5.15.0-91-generic", false, true, false, 3},
      {"6.1.0-18-amd64", false, false, false, 1},   // misses
      {"6.1.0-18-rt-amd64", true, true, false, 3},  // misses, alloc, skipped runs
      {"6.12.9-amd64", false, false, false, 0},
  };
  for (const auto& r : rows) {
    KernelFeatures f = On(r.release, r.rt);
    auto p = Build(kCounter, f);
    ASSERT_TRUE(p.ok()) << r.release << ": " << p.status().ToString();
    EXPECT_EQ((*p)->kernel_notes.size(), r.notes) << r.release;
    EXPECT_EQ(bpf::GetLoadOptions().preallocate_maps, r.prealloc) << r.release;
    EXPECT_EQ(bpf::GetLoadOptions().probe_read_fallback, r.probe_read) << r.release;
    EXPECT_EQ(bpf::GetLoadOptions().map_lookup_and_delete, f.bpf.map_lookup_and_delete) << r.release;
    EXPECT_EQ(bpf::GetLoadOptions().atomic_xchg, f.bpf.atomic_xchg) << r.release;
    EXPECT_EQ((*p)->features.perf.format_lost, f.perf.format_lost) << r.release;
  }
  auto p = Build(kCounter, On("5.10.0-28-amd64"));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(
      (*p)->kernel_notes[0].rfind("perf_format_lost (needs Linux 6.0) unavailable on 5.10.0-28-amd64: per-event lost "
                                  "samples are not counted",
                                  0),
      0u)
      << (*p)->kernel_notes[0];
  bpf::SetLoadOptions(bpf::LoadOptions{});
}

// An old kernel's answer to BPF_MAP_CREATE (injected: no map reaches this kernel), through the
// plan: "auto" runs the metric on perf and says why; "bpf" refuses to start with the reason.
struct MapErrnoRow {
  const char* release;
  int err;
  const char* auto_reason;  // in engine_reasons under "auto"
};

TEST(KernelFeaturesPlanTest, MapCreationErrnoFallsBackUnderAutoAndRefusesUnderBpf) {
  const MapErrnoRow rows[] = {
      {"5.10.0-28-amd64", ENOMEM,
       "Cannot allocate memory (kernel memory: the memory cgroup's limit, or "
       "RLIMIT_MEMLOCK before Linux 5.11)"},
      {"5.4.0-170-generic", E2BIG, "Argument list too long (larger than this kernel allows"},
      {"6.12.9-amd64", ENOMEM, "Cannot allocate memory (kernel memory: the memory cgroup's limit);"},
  };
  constexpr char kComm[] =
      R"({"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "%s",
          "labels": [{"name": "comm", "source": "comm"}]})";
  for (const auto& r : rows) {
    bpf::SetBpfFaultForTesting([&](const bpf::BpfCall& c) { return c.cmd == BPF_MAP_CREATE ? r.err : EPERM; });
    char metric[512];
    std::snprintf(metric, sizeof(metric), kComm, "auto");
    auto cfg = ParseConfig(std::string(R"({"metrics": [)") + metric + "]}", "cfg.json");
    ASSERT_TRUE(cfg.ok());
    auto p = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, On(r.release));
    ASSERT_TRUE(p.ok()) << r.release << ": " << p.status().ToString();
    EXPECT_EQ(NameOf((*p)->metrics[0].engine), "perf") << r.release;
    EXPECT_NE((*p)->metrics[0].engine_reason.find(r.auto_reason), std::string::npos)
        << r.release << ": " << (*p)->metrics[0].engine_reason;
    std::snprintf(metric, sizeof(metric), kComm, "bpf");
    cfg = ParseConfig(std::string(R"({"metrics": [)") + metric + "]}", "cfg.json");
    ASSERT_TRUE(cfg.ok());
    p = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, On(r.release));
    ASSERT_FALSE(p.ok()) << r.release;
    EXPECT_NE(p.status().message().find(r.auto_reason), std::string::npos) << p.status().message();
    EXPECT_NE(p.status().message().find("\"bpf\" for c_total"), std::string::npos) << p.status().message();
  }
  bpf::SetBpfFaultForTesting(nullptr);
  bpf::SetLoadOptions(bpf::LoadOptions{});
}

// Bursts of new series met an empty allocator (ENOMEM with memory free) when every hash map was
// allocated at run time. Hash maps whose full size fits settings.bpf_preallocate_max_bytes are
// created preallocated (no BPF_F_NO_PREALLOC); larger ones, and all of them with a budget of 0,
// allocate at run time.
TEST(KernelFeaturesPlanTest, SmallMapsArePreallocated) {
  std::map<std::string, uint32_t> flags;  // map name -> flags
  bpf::SetBpfFaultForTesting([&](const bpf::BpfCall& c) {
    if (c.cmd == BPF_MAP_CREATE) flags[c.name] = c.map_flags;
    return bpf::kInjectSuccess;
  });
  auto plan = [&](const std::string& settings) {
    flags.clear();
    auto cfg = ParseConfig(R"({"settings": {)" + settings + R"(}, "metrics": [
        {"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "bpf",
         "labels": [{"name": "comm", "source": "comm"}]},
        {"name": "l_seconds", "type": "latency", "engine": "bpf",
         "start": {"event": "syscalls:sys_enter_getppid", "key": ["common_pid"]},
         "end": {"event": "syscalls:sys_enter_getppid", "key": ["common_pid"]},
         "buckets": {"type": "exp2", "min": 1e-6, "max": 1}}]})",
                           "cfg.json");
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    auto p = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, On("6.12.9-amd64"));
    EXPECT_TRUE(p.ok()) << p.status().ToString();
  };
  plan(R"("max_series_per_metric": 10000)");
  EXPECT_EQ(flags["tpe_c_total"] & BPF_F_NO_PREALLOC, 0u);
  EXPECT_EQ(flags["tpe_l_seconds"] & BPF_F_NO_PREALLOC, 0u);
  EXPECT_EQ(flags["tpe_starts"] & BPF_F_NO_PREALLOC, 0u);
  plan(R"("bpf_preallocate_max_bytes": 0)");
  EXPECT_NE(flags["tpe_c_total"] & BPF_F_NO_PREALLOC, 0u);
  EXPECT_NE(flags["tpe_starts"] & BPF_F_NO_PREALLOC, 0u);
  // 1,000,000 {comm} series: 1e6 x (48 + 16 + 8 + 8 x CPUs) bytes, over a 64 MiB budget.
  plan(R"("max_series_per_metric": 1000000)");
  EXPECT_NE(flags["tpe_c_total"] & BPF_F_NO_PREALLOC, 0u);
  EXPECT_EQ(flags["tpe_starts"] & BPF_F_NO_PREALLOC, 0u);  // 100,000 starts of 48 + 8 + 16 bytes: 7 MB
  bpf::SetBpfFaultForTesting(nullptr);
  bpf::SetLoadOptions(bpf::LoadOptions{});
}

// Seen on 6.1-rt in the kernel matrix: the sweep test's starts went missing (4,451 of
// 4,526 accounted). A map syscall holds bpf_prog_active under a migrate_disable that PREEMPT_RT
// (or full preemption) can preempt, and the kernel skips every program on that CPU meanwhile,
// counting it nowhere before 6.7. There "auto" runs metrics on perf and says why, "bpf" runs with
// a warning; from 6.7 (misses counted) and on kernels that do not preempt kernel code, bpf.
TEST(KernelFeaturesPlanTest, PreemptibleMapSyscallsBeforeMissesCountMeanPerf) {
  bpf::SetBpfFaultForTesting([](const bpf::BpfCall&) { return bpf::kInjectSuccess; });
  constexpr char kComm[] =
      R"({"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid", "engine": "%s",
          "labels": [{"name": "comm", "source": "comm"}]})";
  auto plan = [&](const char* engine, const KernelFeatures& f) {
    char metric[512];
    std::snprintf(metric, sizeof(metric), kComm, engine);
    auto cfg = ParseConfig(std::string(R"({"metrics": [)") + metric + "]}", "cfg.json");
    EXPECT_TRUE(cfg.ok());
    return BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, f);
  };
  KernelFeatures full = On("6.1.0-18-amd64");
  full.bpf = bpf::BpfFeaturesFromUname("6.1.0-18-amd64", "#1 SMP PREEMPT Debian 6.1.76-1", "");
  EXPECT_TRUE(full.bpf.preemptible_syscalls);
  EXPECT_FALSE(bpf::BpfFeaturesFromUname("6.1.0-18-amd64", "#1 SMP PREEMPT_DYNAMIC Debian", "").preemptible_syscalls);
  for (const KernelFeatures& f : {On("6.1.0-18-rt-amd64", true), On("5.10.0-32-rt-amd64", true), full}) {
    auto p = plan("auto", f);
    ASSERT_TRUE(p.ok()) << f.bpf.release << ": " << p.status().ToString();
    EXPECT_EQ(NameOf((*p)->metrics[0].engine), "perf") << f.bpf.release;
    EXPECT_NE((*p)->metrics[0].engine_reason.find("skips a bpf program, uncounted, while one of the exporter's map "
                                                  "syscalls is preempted on its CPU"),
              std::string::npos)
        << (*p)->metrics[0].engine_reason;
    p = plan("bpf", f);
    ASSERT_TRUE(p.ok()) << f.bpf.release << ": " << p.status().ToString();
    EXPECT_EQ(NameOf((*p)->metrics[0].engine), "bpf");
    ASSERT_EQ((*p)->warnings.size(), 1u) << f.bpf.release;
    EXPECT_NE((*p)->warnings[0].find("its counts may fall short"), std::string::npos) << (*p)->warnings[0];
  }
  for (const KernelFeatures& f : {On("6.8.0-rt-amd64", true), On("6.1.0-18-amd64")}) {
    auto p = plan("auto", f);
    ASSERT_TRUE(p.ok()) << f.bpf.release << ": " << p.status().ToString();
    EXPECT_EQ(NameOf((*p)->metrics[0].engine), "bpf") << f.bpf.release << ": " << (*p)->metrics[0].engine_reason;
    EXPECT_TRUE((*p)->warnings.empty());
  }
  // Where this process runs its map syscalls at SCHED_FIFO 99, no task preempts
  // one, so no program is skipped for one: bpf under "auto", saying so, and "bpf" without warning.
  for (KernelFeatures f : {On("6.1.0-18-rt-amd64", true), On("5.10.0-32-rt-amd64", true), full}) {
    f.bpf.fifo_map_syscalls = true;
    auto p = plan("auto", f);
    ASSERT_TRUE(p.ok()) << f.bpf.release << ": " << p.status().ToString();
    EXPECT_EQ(NameOf((*p)->metrics[0].engine), "bpf") << f.bpf.release << ": " << (*p)->metrics[0].engine_reason;
    EXPECT_NE((*p)->metrics[0].engine_reason.find(
                  "the exporter's map syscalls run at SCHED_FIFO 99, so no task preempts one"),
              std::string::npos)
        << (*p)->metrics[0].engine_reason;
    EXPECT_TRUE((*p)->warnings.empty());
    p = plan("bpf", f);
    ASSERT_TRUE(p.ok()) << f.bpf.release << ": " << p.status().ToString();
    EXPECT_TRUE((*p)->warnings.empty()) << (*p)->warnings[0];
  }
  // Where it cannot (no CAP_SYS_NICE, RestrictRealtime=yes): perf, and the reason says why not.
  KernelFeatures refused = On("6.1.0-18-rt-amd64", true);
  refused.bpf.fifo_map_syscalls_note =
      "cannot run map syscalls at SCHED_FIFO 99 (sched_setscheduler: Operation not permitted)";
  auto p = plan("auto", refused);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(NameOf((*p)->metrics[0].engine), "perf");
  EXPECT_NE((*p)->metrics[0].engine_reason.find(
                "and the exporter cannot run map syscalls at SCHED_FIFO 99 (sched_setscheduler: "),
            std::string::npos)
      << (*p)->metrics[0].engine_reason;
  bpf::SetBpfFaultForTesting(nullptr);
  bpf::SetLoadOptions(bpf::LoadOptions{});
}

// The probe syntax rows come from the tracefs README each kernel wrote (captured): 4.19 has
// neither USDT semaphores nor ustring, 5.10 and 6.18 both; without a README nothing is said.
TEST(KernelFeaturesTest, ProbeSyntaxRowsFromTheTracefsReadme) {
  auto rows_of = [](const std::string& kernel) {
    KernelFeatures f = On("6.12.9-amd64");
    if (!kernel.empty()) {
      auto text = ReadFileToString(testing::DataDir() + "/" + kernel + "/README");
      EXPECT_TRUE(text.ok()) << kernel;
      if (text.ok()) f.probe_readme = ParseProbeReadme(*text);
    }
    std::map<std::string, bool> out;
    for (const auto& r : DescribeFeatures(f)) out[r.feature] = r.available;
    return out;
  };
  auto old = rows_of("linux-4.19");
  EXPECT_FALSE(old.at("uprobe_ref_ctr_offset"));
  EXPECT_FALSE(old.at("kprobe_ustring"));
  for (const char* k : {"linux-5.10", "linux-6.18"}) {
    auto rows = rows_of(k);
    EXPECT_TRUE(rows.at("uprobe_ref_ctr_offset")) << k;
    EXPECT_TRUE(rows.at("kprobe_ustring")) << k;
  }
  EXPECT_EQ(rows_of("").count("kprobe_ustring"), 0u);
}

// Linux 5.10: an EPERM creating a map while CAP_BPF/CAP_SYS_ADMIN are held is RLIMIT_MEMLOCK.
TEST(KernelFeaturesPlanTest, MemlockEpermIsNamedWhenCharged) {
  EXPECT_TRUE(ChooseLoadOptions(On("5.10.0-28-amd64")).memlock_charged);
  EXPECT_FALSE(ChooseLoadOptions(On("5.15.0-91-generic")).memlock_charged);
  bpf::SetBpfFaultForTesting([](const bpf::BpfCall&) { return EPERM; });
  auto cfg = ParseConfig(R"({"metrics": [{"name": "c_total", "type": "counter", "engine": "bpf",
      "event": "syscalls:sys_enter_getppid", "labels": [{"name": "comm", "source": "comm"}]}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok());
  auto old = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, On("5.10.0-28-amd64"));
  auto now = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {}, On("6.12.9-amd64"));
  bpf::SetBpfFaultForTesting(nullptr);
  bpf::SetLoadOptions(bpf::LoadOptions{});
  ASSERT_FALSE(old.ok());
  ASSERT_FALSE(now.ok());
  // 5.11+: EPERM is capabilities whatever we hold.
  EXPECT_NE(now.status().message().find("needs CAP_BPF"), std::string::npos) << now.status().message();
  if (geteuid() == 0) {  // root holds CAP_SYS_ADMIN: before 5.11 the EPERM is RLIMIT_MEMLOCK
    EXPECT_NE(old.status().message().find("this is RLIMIT_MEMLOCK"), std::string::npos) << old.status().message();
    EXPECT_EQ(old.status().message().find("needs CAP_BPF"), std::string::npos) << old.status().message();
  }
}

// Profiles where kernel.perf_event_max_stack (injected: 16) is below settings.profile_max_frames
// (127): both engines take 16 frames — the perf events' attr.sample_max_stack (the kernel
// refuses more with EOVERFLOW) and the bpf stack map's depth (EINVAL) — with one warning per
// profile; at 0 a profile is refused; unknown (-1) leaves 127.
TEST(KernelFeaturesPlanTest, ProfileFramesFollowPerfEventMaxStackOnBothEngines) {
  auto cfg = ParseConfig(R"({"profiles": [
      {"name": "on_perf", "event": "raw_syscalls:sys_enter", "engine": "perf"},
      {"name": "cpu", "event": "cpu-clock", "engine": "perf"},
      {"name": "on_bpf", "event": "raw_syscalls:sys_enter", "engine": "bpf", "stack": "kernel"}]})",
                         "cfg.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().ToString();
  auto plan_for = [&](int max_stack) {
    KernelFeatures f = On("6.12.9-amd64");
    f.perf.max_stack = max_stack;
    // on_bpf planned unloaded, as for a reload that keeps it: no privilege needed.
    return BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{true, ""}, {cfg->metrics[2].canonical}, f);
  };
  auto frames = [](const Plan& p) {
    std::vector<uint32_t> out;  // the perf events' max_stack, then the bpf stack map's
    for (const auto& e : p.events) {
      if (e->callchain != 0) out.push_back(e->max_stack);
    }
    auto* bp = dynamic_cast<const bpf::BpfProfile*>(p.metrics[2].collector.get());
    EXPECT_NE(bp, nullptr);
    if (bp != nullptr) out.push_back(bp->metric().spec().max_frames);
    return out;
  };
  auto low = plan_for(16);
  ASSERT_TRUE(low.ok()) << low.status().ToString();
  EXPECT_EQ(frames(**low), (std::vector<uint32_t>{16, 16, 16}));
  std::vector<std::string> want;
  for (const char* m : {"profiles[0]: on_perf", "profiles[1]: cpu", "profiles[2]: on_bpf"}) {
    want.push_back(std::string("cfg.json: ") + m +
                   ": stacks of at most 16 frames (kernel.perf_event_max_stack), not 127 "
                   "(settings.profile_max_frames)");
  }
  EXPECT_EQ((*low)->warnings, want);

  auto unknown = plan_for(-1);
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  EXPECT_EQ(frames(**unknown), (std::vector<uint32_t>{127, 127, 127}));
  EXPECT_TRUE((*unknown)->warnings.empty());
  auto same = plan_for(127);
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(frames(**same), (std::vector<uint32_t>{127, 127, 127}));
  EXPECT_TRUE((*same)->warnings.empty());

  auto zero = plan_for(0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().message(),
            "cfg.json: profiles[0]: on_perf: kernel.perf_event_max_stack is 0, so the kernel takes no stack frames; "
            "raise it (sysctl kernel.perf_event_max_stack=127)");
}

// A file of kallsyms text standing in for /proc/kallsyms.
std::string KallsymsFile(const std::string& text) {
  char path[] = "/tmp/tpe_features_kallsyms_XXXXXX";
  const int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  return path;
}

TEST(KernelFeaturesTest, RuntimeFactsReadKallsymsAndMaxStack) {
  const std::string zero = KallsymsFile("0000000000000000 T _stext\n0000000000000000 T do_one\n");
  const std::string shown = KallsymsFile("ffffffff81000000 T _stext\n");
  KernelFeatures f;
  RefreshRuntimeFacts(&f, zero);
  EXPECT_EQ(f.kallsyms_hidden, std::optional<bool>(true));
  EXPECT_EQ(f.perf.max_stack, ReadPerfEventMaxStack());
  RefreshRuntimeFacts(&f, shown);
  EXPECT_EQ(f.kallsyms_hidden, std::optional<bool>(false));
  RefreshRuntimeFacts(&f, "/nonexistent/kallsyms");
  EXPECT_EQ(f.kallsyms_hidden, std::nullopt);  // not known: no warning, no metric
  unlink(zero.c_str());
  unlink(shown.c_str());
}

// Where /proc/kallsyms shows no address (injected), one warning per plan names the profiles
// whose kernel frames stay addresses, and what would show them; none when it shows them, when it
// is unknown, or when no profile takes kernel stacks.
TEST(KernelFeaturesPlanTest, HiddenKallsymsWarnsOnceForProfilesWithKernelStacks) {
  auto plan_for = [](const std::string& profiles, std::optional<bool> hidden) {
    auto cfg =
        ParseConfig(R"({"metrics": [{"name": "c_total", "type": "counter", "event": "syscalls:sys_enter_getppid"}],
        "profiles": [)" +
                        profiles + "]}",
                    "cfg.json");
    EXPECT_TRUE(cfg.ok()) << cfg.status().ToString();
    KernelFeatures f = On("6.12.9-amd64");
    f.kallsyms_hidden = hidden;
    auto plan = BuildPlan(*cfg, kTracefs, KernelEnums(), false, bpf::BpfSupport{false, "not probed"}, {}, f);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? (*plan)->warnings : std::vector<std::string>{"not planned"};
  };
  const std::string three = R"({"name": "both", "event": "raw_syscalls:sys_enter"},
      {"name": "kernel_only", "event": "cpu-clock", "stack": "kernel"},
      {"name": "user_only", "event": "raw_syscalls:sys_enter", "stack": "user"})";
  auto w = plan_for(three, true);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].rfind("cfg.json: kernel frames of both, kernel_only stay raw addresses: /proc/kallsyms lists every "
                       "kernel address as 0 to this process (kernel.kptr_restrict=",
                       0),
            0u)
      << w[0];
  EXPECT_NE(w[0].find("Grant CAP_SYSLOG (the shipped systemd unit and DaemonSet do)"), std::string::npos) << w[0];
  EXPECT_TRUE(plan_for(three, false).empty());
  EXPECT_TRUE(plan_for(three, std::nullopt).empty());
  EXPECT_TRUE(plan_for(R"({"name": "user_only", "event": "raw_syscalls:sys_enter", "stack": "user"})", true).empty());
}

}  // namespace
}  // namespace tpe
