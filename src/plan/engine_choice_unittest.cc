#include "plan/engine_choice.h"

#include <gtest/gtest.h>

namespace tpe {
namespace {

// A labelled counter on a tracepoint, asked "auto", on a kernel with the bpf engine: bpf.
EngineQuestion Counter() {
  EngineQuestion q;
  q.name = "m";
  q.where = "c.json: metrics[0].engine";
  q.where_metric = "c.json: metrics[0]";
  q.bpf_available = true;
  q.preallocate_max_bytes = uint64_t{64} << 20;
  return q;
}

EngineQuestion BpfProfile(bool dwarf) {
  EngineQuestion q = Counter();
  q.asked = Engine::kBpf;
  q.type = MetricType::kProfile;
  q.dwarf_user_stacks = dwarf;
  q.stack_map_frames = 127;
  q.stack_map_stacks = 10000;
  return q;
}

TEST(ChooseEngineTest, AutoRunsOnBpfUnlessARuleSaysWhyNot) {
  EXPECT_TRUE(ChooseEngine(Counter()).bpf);

  EngineQuestion q = Counter();
  q.asked = Engine::kPerf;
  EXPECT_EQ(ChooseEngine(q).why_not, "\"engine\": \"perf\" in the config");

  q = Counter();
  q.label_less_counter = true;
  EXPECT_EQ(ChooseEngine(q).why_not.rfind("counting mode", 0), 0u) << ChooseEngine(q).why_not;

  q = Counter();
  q.one_process = true;
  EXPECT_NE(ChooseEngine(q).why_not.find("\"pid\" (one process)"), std::string::npos);

  q = Counter();
  q.bpf_available = false;
  q.bpf_reason = "no CAP_BPF";
  EXPECT_EQ(ChooseEngine(q).why_not, "the bpf engine is not available: no CAP_BPF");
  q.running_on_bpf = true;  // a reload keeps what runs on bpf already
  EXPECT_TRUE(ChooseEngine(q).bpf);

  q = Counter();
  q.uncounted_skips = "on 6.1-rt the kernel skips";
  EXPECT_EQ(ChooseEngine(q).why_not, "on 6.1-rt the kernel skips; the perf engine accounts every sample");

  q = Counter();
  q.type = MetricType::kProfile;
  q.dwarf_user_stacks = true;
  EXPECT_NE(ChooseEngine(q).why_not.find("\"unwind\": \"dwarf\" (the default)"), std::string::npos);
  q.dwarf_user_stacks = false;
  EXPECT_NE(ChooseEngine(q).why_not.find("perf callchains record every stack exactly"), std::string::npos);
}

TEST(ChooseEngineTest, BpfIsRefusedWithTheReasonOrWarned) {
  // The rules' first refusal wins: a gauge of probe events.
  EngineQuestion q = Counter();
  q.asked = Engine::kBpf;
  q.type = MetricType::kGauge;
  q.probe = true;
  q.one_process = true;
  EngineAnswer a = ChooseEngine(q);
  EXPECT_EQ(a.refusal.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.refusal.message(),
            "c.json: metrics[0].engine: \"bpf\" for m: a gauge of probe events runs on the perf engine in this "
            "release; use \"auto\" or \"perf\"");
  EXPECT_FALSE(a.bpf);

  // "unwind": "dwarf" written: refused; defaulted: planned on bpf with a warning.
  q = BpfProfile(true);
  q.unwind_given = true;
  a = ChooseEngine(q);
  EXPECT_EQ(a.refusal.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.refusal.message().find("\"unwind\": \"dwarf\" runs on the perf engine"), std::string::npos);
  q.unwind_given = false;
  a = ChooseEngine(q);
  EXPECT_TRUE(a.refusal.ok());
  EXPECT_TRUE(a.bpf);
  ASSERT_EQ(a.warnings.size(), 1u);
  EXPECT_EQ(a.warnings[0].rfind("c.json: metrics[0]: m on the bpf engine: user stacks", 0), 0u) << a.warnings[0];

  q = BpfProfile(false);
  q.sums_value = true;
  EXPECT_NE(ChooseEngine(q).refusal.message().find("sums a \"value\" field"), std::string::npos);

  // 10,000 stacks of 127 frames: 10000 * (8 * 127 + 24) + 8 * 10000 = 10,480,000 bytes.
  EXPECT_EQ(StackMapBytes(10000, 127), 10480000u);
  q = BpfProfile(false);
  q.preallocate_max_bytes = 10480000;
  EXPECT_TRUE(ChooseEngine(q).bpf) << "at the bound: kept";
  q.preallocate_max_bytes = 10479999;
  a = ChooseEngine(q);
  EXPECT_EQ(a.refusal.message(),
            "c.json: metrics[0].engine: \"bpf\" for m: its stack map of 10000 stacks of 127 frames preallocates 9 MiB, "
            "over settings.bpf_preallocate_max_bytes (9 MiB): lower settings.max_stacks_per_profile or "
            "profile_max_frames, or raise it");

  // Uncounted skips: "bpf" runs, warned.
  q = Counter();
  q.asked = Engine::kBpf;
  q.uncounted_skips = "on 6.1-rt the kernel skips";
  a = ChooseEngine(q);
  EXPECT_TRUE(a.bpf);
  EXPECT_EQ(a.warnings,
            std::vector<std::string>{
                "c.json: metrics[0].engine: \"bpf\" for m: on 6.1-rt the kernel skips: its counts may fall short"});

  q = Counter();
  q.asked = Engine::kBpf;
  q.bpf_available = false;
  q.bpf_reason = "no CAP_BPF";
  EXPECT_EQ(ChooseEngine(q).refusal.code(), StatusCode::kPermissionDenied);
  q.label_less_counter = true;  // counting mode is "auto"'s choice, not a refusal of "bpf"
  EXPECT_EQ(ChooseEngine(q).refusal.message(), "c.json: metrics[0].engine: \"bpf\" for m: no CAP_BPF");
}

}  // namespace
}  // namespace tpe
