// Gauge programs (programs.h GaugeShape), run in the Interpreter: an up/down side adds its raw
// value (negative ones as such) or 1 to its slot of the label set's value; a max, min or last
// gauge keeps the extreme or latest raw value of the window the epoch map names, and a value of
// an older window is replaced whole.
#include <gtest/gtest.h>

#include <map>

#include "bpf/programs_testing.h"
#include "collectors/label_set.h"
#include "testing/labels.h"

namespace tpe::bpf {
namespace {

using testing::SourceLabel;
constexpr int kEpochFd = 15, kRefusedFd = 16, kLostFd = 17;

// The maps of an up/down gauge: AddMaps' with `max_series` series, and its refused map (up to
// `max_refused` keys of 8 bytes) and lost flag.
MapFds UpDownFds() {
  MapFds fds = Fds();
  fds.refused = kRefusedFd;
  fds.lost = kLostFd;
  return fds;
}
void AddUpDownMaps(Interpreter* in, uint32_t max_series, uint32_t max_refused) {
  AddMaps(in, 8, 8 * kUpDownSlots, max_series);
  FakeMap refused;
  refused.type = BPF_MAP_TYPE_HASH;
  refused.key_size = 8;
  refused.value_size = 8 * kUpDownSlots;
  refused.max_entries = max_refused;
  in->AddMap(kRefusedFd, refused);
  FakeMap lost;
  lost.type = BPF_MAP_TYPE_ARRAY;
  lost.key_size = 4;
  lost.value_size = 8;
  lost.max_entries = 1;
  in->AddMap(kLostFd, lost);
}
uint64_t LostFlag(Interpreter* in) {
  uint64_t v = 0;
  std::memcpy(&v, in->map(kLostFd)->entries.at(std::string(4, '\0')).data(), 8);
  return v;
}

// The value slots of each label set (the cpu label: its key's first 4 bytes).
std::map<uint32_t, std::vector<uint64_t>> ByCpu(Interpreter* in) {
  std::map<uint32_t, std::vector<uint64_t>> out;
  for (const auto& [k, v] : in->map(kValuesFd)->entries) {
    uint32_t cpu = 0;
    std::memcpy(&cpu, k.data(), 4);
    out[cpu] = U64s(v);
  }
  return out;
}

KeyLayout CpuKey() {
  std::vector<LabelSpec> specs;
  specs.push_back(SourceLabel("cpu", LabelSource::kCpu));
  auto key = LayoutKey(LabelSet(std::move(specs)));
  EXPECT_TRUE(key.ok());
  return *key;
}

TEST(GaugeProgramTest, UpAndDownAddToTheirSlotsNegativeValuesIncluded) {
  EventFormat fmt = Event("sched", "sched_switch");
  GaugeShape up, down;
  up.key = down.key = CpuKey();
  up.value = down.value = *IntegerField(*fmt.FindField("prev_state"));  // 8 bytes, signed
  down.slot = 1;
  auto up_prog = EmitGauge(up, UpDownFds());
  auto down_prog = EmitGauge(down, UpDownFds());
  ASSERT_TRUE(up_prog.ok() && down_prog.ok()) << up_prog.status().ToString() << down_prog.status().ToString();
  Interpreter in;
  AddUpDownMaps(&in, 100, 100);
  auto run = [&](const std::vector<bpf_insn>& p, int64_t v, uint32_t cpu) {
    RunProg(&in, p, Switch("p", 1, 2, v, "n", 3), FakeTask{1, 2, cpu, "t", 0, 0});
  };
  run(*up_prog, 5, 0);
  run(*up_prog, 7, 0);
  run(*up_prog, -2, 0);
  run(*down_prog, 3, 0);
  run(*down_prog, 4, 1);
  auto got = ByCpu(&in);
  EXPECT_EQ(got[0], (std::vector<uint64_t>{10, 3}));
  EXPECT_EQ(got[1], (std::vector<uint64_t>{0, 4}));
  EXPECT_EQ(StatOf(&in, kDecodeErrors), 0u);
  EXPECT_EQ(StatOf(&in, kRuns), 5u);

  // Without a value field: 1 per event.
  up.value.reset();
  down.value.reset();
  Interpreter ones;
  AddUpDownMaps(&ones, 100, 100);
  for (int i = 0; i < 3; ++i) {
    RunProg(&ones, *EmitGauge(up, UpDownFds()), Switch("p", 1, 2, 99, "n", 3), FakeTask{1, 2, 0, "t", 0, 0});
  }
  RunProg(&ones, *EmitGauge(down, UpDownFds()), Switch("p", 1, 2, 99, "n", 3), FakeTask{1, 2, 0, "t", 0, 0});
  EXPECT_EQ(ByCpu(&ones)[0], (std::vector<uint64_t>{3, 1}));
}

TEST(GaugeProgramTest, ExtremesKeepTheWindowsValueAndANewWindowReplacesIt) {
  EventFormat fmt = Event("sched", "sched_switch");
  struct Case {
    GaugeShape::Op op;
    bool is_signed;
    uint64_t first_window, second_window;  // after -5, 9, 3 in window 1; 4 in window 2
  };
  const Case cases[] = {
      {GaugeShape::Op::kMax, true, 9, 4},  {GaugeShape::Op::kMin, true, static_cast<uint64_t>(-5), 4},
      {GaugeShape::Op::kMin, false, 3, 4}, {GaugeShape::Op::kMax, false, static_cast<uint64_t>(-5), 4},
      {GaugeShape::Op::kLast, true, 3, 4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(static_cast<int>(c.op)) + (c.is_signed ? " signed" : " unsigned"));
    GaugeShape s;
    s.op = c.op;
    s.key = CpuKey();
    s.value = *IntegerField(*fmt.FindField("prev_state"));
    s.value->is_signed = c.is_signed;
    MapFds fds = Fds();
    fds.epoch = kEpochFd;
    auto prog = EmitGauge(s, fds);
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    Interpreter in;
    AddMaps(&in, 8, 8 * kExtremeSlots * kExtremeRecords, 100);
    FakeMap epoch;
    epoch.type = BPF_MAP_TYPE_ARRAY;
    epoch.key_size = 4;
    epoch.value_size = 8;
    epoch.max_entries = 1;
    in.AddMap(kEpochFd, epoch);
    auto set_epoch = [&](uint64_t e) {
      std::string v(8, '\0');
      std::memcpy(v.data(), &e, 8);
      in.map(kEpochFd)->entries[std::string(4, '\0')] = v;
    };
    uint64_t t = 1000;
    auto run = [&](int64_t v) {
      t += 10;
      RunProg(&in, *prog, Switch("p", 1, 2, v, "n", 3), FakeTask{1, 2, 0, "t", 0, t});
    };
    // Window 1 is record 1 (slots 3-5); window 2 record 0, which leaves window 1's record as it
    // was for the scrape that reads it; window 3 replaces record 1 whole.
    constexpr uint32_t kOdd = kExtremeSlots;
    set_epoch(1);
    for (int64_t v : {-5, 9, 3}) run(v);
    std::vector<uint64_t> got = ByCpu(&in)[0];
    ASSERT_EQ(got.size(), kExtremeSlots * kExtremeRecords);
    EXPECT_EQ(got[kOdd + kExtremeValue], c.first_window);
    EXPECT_EQ(got[kOdd + kExtremeWindow], 1u);
    EXPECT_EQ(got[kOdd + kExtremeTime], c.op == GaugeShape::Op::kLast ? 1030u : 0u);
    EXPECT_EQ(got[kExtremeWindow], 0u);  // record 0 untouched
    set_epoch(2);
    run(4);
    got = ByCpu(&in)[0];
    EXPECT_EQ(got[kExtremeValue], c.second_window);
    EXPECT_EQ(got[kExtremeWindow], 2u);
    EXPECT_EQ(got[kOdd + kExtremeValue], c.first_window);
    EXPECT_EQ(got[kOdd + kExtremeWindow], 1u);
    set_epoch(3);
    run(6);
    got = ByCpu(&in)[0];
    EXPECT_EQ(got[kOdd + kExtremeValue], 6u);
    EXPECT_EQ(got[kOdd + kExtremeWindow], 3u);
    EXPECT_EQ(got[kExtremeValue], c.second_window);
    EXPECT_EQ(StatOf(&in, kDropped), 0u);
  }
}

// An inflight gauge's end (LatencyEndShape::observe false) deletes its start and nothing else;
// an end without a start counts kNoStart.
TEST(GaugeProgramTest, InflightEndOnlyTakesItsStartOut) {
  EventFormat fmt = Event("sched", "sched_switch");
  LatencyStartShape start;
  start.match = {*IntegerField(*fmt.FindField("prev_pid"))};
  start.labels = CpuKey();
  LatencyEndShape end;
  end.match = start.match;
  end.start_label_bytes = start.labels.size;
  end.observe = false;
  auto start_prog = EmitLatencyStart(start, Fds());
  auto end_prog = EmitLatencyEnd(end, Fds());
  ASSERT_TRUE(start_prog.ok() && end_prog.ok()) << start_prog.status().ToString() << end_prog.status().ToString();
  Interpreter in;
  AddMaps(&in, 8, 16, 100);
  FakeMap starts;
  starts.type = BPF_MAP_TYPE_HASH;
  starts.key_size = 8;
  starts.value_size = 8 + start.labels.MapKeySize();
  starts.max_entries = 100;
  in.AddMap(kStartsFd, starts);
  for (int32_t pid : {7, 8}) RunProg(&in, *start_prog, Switch("p", pid, 2, 0, "n", 3), FakeTask{1, 2, 1, "t", 0, 50});
  EXPECT_EQ(in.map(kStartsFd)->entries.size(), 2u);
  RunProg(&in, *end_prog, Switch("p", 7, 2, 0, "n", 3), FakeTask{1, 2, 0, "t", 0, 90});
  EXPECT_EQ(in.map(kStartsFd)->entries.size(), 1u);
  EXPECT_EQ(StatOf(&in, kNoStart), 0u);
  RunProg(&in, *end_prog, Switch("p", 9, 2, 0, "n", 3), FakeTask{1, 2, 0, "t", 0, 95});
  EXPECT_EQ(StatOf(&in, kNoStart), 1u);
  EXPECT_EQ(in.map(kStartsFd)->entries.size(), 1u);
  EXPECT_TRUE(in.map(kValuesFd)->entries.empty()) << "nothing observed";
}

// One series (max_series 1): cpu 0 holds it; the ups of cpus 1 (twice) and 2 are refused and
// kept aside. The series of cpu 0 goes (a sweep); cpu 1's down creates cpu 1's series, which
// starts at the kept-aside ups: 2 - 1, not -1. Cpu 2's down finds no room: kept aside too (+1 -
// 1). Nothing is lost.
TEST(GaugeProgramTest, ADownWhoseUpWasRefusedJoinsItsKeptAsideUp) {
  GaugeShape up, down;
  up.key = down.key = CpuKey();
  down.slot = 1;
  auto up_prog = EmitGauge(up, UpDownFds());
  auto down_prog = EmitGauge(down, UpDownFds());
  ASSERT_TRUE(up_prog.ok() && down_prog.ok()) << up_prog.status().ToString() << down_prog.status().ToString();
  Interpreter in;
  AddUpDownMaps(&in, 1, 10);
  auto run = [&](const std::vector<bpf_insn>& p, uint32_t cpu) {
    RunProg(&in, p, Switch("p", 1, 2, 0, "n", 3), FakeTask{1, 2, cpu, "t", 0, 0});
  };
  for (uint32_t cpu : {0, 1, 1, 2}) run(*up_prog, cpu);
  EXPECT_EQ(StatOf(&in, kDropped), 3u);
  EXPECT_EQ(ByCpu(&in), (std::map<uint32_t, std::vector<uint64_t>>{{0, {1, 0}}}));
  EXPECT_EQ(in.map(kRefusedFd)->entries.size(), 2u);
  in.map(kValuesFd)->entries.clear();  // the sweep took cpu 0's series out
  run(*down_prog, 1);
  EXPECT_EQ(ByCpu(&in), (std::map<uint32_t, std::vector<uint64_t>>{{1, {2, 1}}}));
  EXPECT_EQ(in.map(kRefusedFd)->entries.size(), 1u) << "cpu 1's entry taken into its series";
  run(*down_prog, 2);  // no room: kept aside with its up
  EXPECT_EQ(StatOf(&in, kDropped), 4u);
  ASSERT_EQ(in.map(kRefusedFd)->entries.size(), 1u);
  EXPECT_EQ(U64s(in.map(kRefusedFd)->entries.begin()->second), (std::vector<uint64_t>{1, 1}));
  EXPECT_EQ(LostFlag(&in), 0u);
}

// The refused map full (1 key): cpu 2's refused up is lost, which sets the lost flag; from then on
// a down of a key with neither a series nor a kept-aside change is refused (cpu 2's: its up may be
// the lost one), while cpu 1's down joins its kept-aside up. An up is never refused that way.
TEST(GaugeProgramTest, OnceAChangeIsLostDownsWithoutASeriesAreRefused) {
  GaugeShape up, down;
  up.key = down.key = CpuKey();
  down.slot = 1;
  auto up_prog = EmitGauge(up, UpDownFds());
  auto down_prog = EmitGauge(down, UpDownFds());
  ASSERT_TRUE(up_prog.ok() && down_prog.ok());
  Interpreter in;
  AddUpDownMaps(&in, 1, 1);
  auto run = [&](const std::vector<bpf_insn>& p, uint32_t cpu) {
    RunProg(&in, p, Switch("p", 1, 2, 0, "n", 3), FakeTask{1, 2, cpu, "t", 0, 0});
  };
  for (uint32_t cpu : {0, 1, 2}) run(*up_prog, cpu);
  EXPECT_EQ(StatOf(&in, kDropped), 2u);
  EXPECT_EQ(LostFlag(&in), 1u);
  in.map(kValuesFd)->entries.clear();
  run(*down_prog, 2);
  EXPECT_TRUE(in.map(kValuesFd)->entries.empty()) << "cpu 2's down made a series";
  EXPECT_EQ(StatOf(&in, kDropped), 3u);
  run(*down_prog, 1);
  EXPECT_EQ(ByCpu(&in), (std::map<uint32_t, std::vector<uint64_t>>{{1, {1, 1}}}));
  EXPECT_TRUE(in.map(kRefusedFd)->entries.empty());
  in.map(kValuesFd)->entries.clear();
  run(*up_prog, 3);
  EXPECT_EQ(ByCpu(&in), (std::map<uint32_t, std::vector<uint64_t>>{{3, {1, 0}}}));
}

// Another CPU creates the series between this run's lookup and its insert (EEXIST): the run adds
// to that series, and leaves the refused entry to its creator.
TEST(GaugeProgramTest, ASeriesCreatedMeanwhileIsAddedTo) {
  GaugeShape up;
  up.key = CpuKey();
  auto prog = EmitGauge(up, UpDownFds());
  ASSERT_TRUE(prog.ok());
  Interpreter in;
  AddUpDownMaps(&in, 10, 10);
  int updates = 0;
  in.set_before_helper([&](int helper) {
    if (helper != BPF_FUNC_map_update_elem || updates++ != 0) return;
    std::string key(8, '\0'), value(16, '\0');
    value[0] = 5;  // another CPU's up of 5
    in.map(kValuesFd)->entries[key] = value;
  });
  RunProg(&in, *prog, Switch("p", 1, 2, 0, "n", 3), FakeTask{1, 2, 0, "t", 0, 0});
  EXPECT_EQ(ByCpu(&in), (std::map<uint32_t, std::vector<uint64_t>>{{0, {6, 0}}}));
  EXPECT_EQ(StatOf(&in, kDropped), 0u);
}

TEST(GaugeProgramTest, RefusesAnExtremeWithoutAValue) {
  GaugeShape s;
  s.op = GaugeShape::Op::kMax;
  EXPECT_EQ(EmitGauge(s, Fds()).status().code(), StatusCode::kUnimplemented);
  s.op = GaugeShape::Op::kAdd;
  s.slot = 2;
  EXPECT_EQ(EmitGauge(s, Fds()).status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace tpe::bpf
