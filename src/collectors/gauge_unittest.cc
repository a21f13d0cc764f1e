#include "collectors/gauge.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "collectors/comm_table.h"
#include "testing/labels.h"

namespace tpe {
namespace {

// A 16-byte record: common fields (8 bytes), then s64 `v` at 8.
FieldFormat Field(const std::string& name, uint32_t offset) {
  FieldFormat f;
  f.name = name;
  f.type = "s64";
  f.offset = offset;
  f.size = 8;
  f.is_signed = true;
  f.kind = FieldKind::kInteger;
  return f;
}

std::vector<uint8_t> Record(int64_t v) {
  std::vector<uint8_t> raw(16, 0);
  std::memcpy(&raw[8], &v, 8);
  return raw;
}

Sample At(const std::vector<uint8_t>& raw, uint32_t cpu, uint64_t t) {
  Sample s;
  s.raw = Bytes(raw);
  s.cpu = cpu;
  s.time_ns = t;
  return s;
}

LabelSet CpuLabel() {
  std::vector<LabelSpec> specs;
  specs.push_back(testing::SourceLabel("cpu", LabelSource::kCpu));
  return LabelSet(std::move(specs));
}

double ValueOf(const MetricSnapshot& m, const std::string& cpu) {
  for (const auto& s : m.series) {
    if (s.labels == LabelPairs{{"cpu", cpu}}) return s.value;
  }
  return -12345;
}

TEST(GaugeTest, InflightCountsStartsUntilTheirEndReplacementOrExpiry) {
  std::vector<GaugeCollector::Side> sides(2);
  sides[0].key.push_back(*FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr));
  sides[1].key.push_back(*FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr));
  sides[0].labels = CpuLabel();
  GaugeCollector g("inflight", "h", GaugeCollector::Kind::kInflight, std::move(sides), 100, 100, 5'000'000'000ULL);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  for (int64_t k = 1; k <= 3; ++k) g.OnSample(0, At(Record(k), 0, 10 + k), &comms);  // 3 starts on cpu 0
  g.OnSample(0, At(Record(4), 1, 20), &comms);                                       // 1 on cpu 1
  EXPECT_EQ(ValueOf(g.Snapshot(), "0"), 3);
  EXPECT_EQ(ValueOf(g.Snapshot(), "1"), 1);
  g.OnSample(0, At(Record(2), 1, 30), &comms);  // key 2 starts again, now on cpu 1: replaced
  g.OnSample(1, At(Record(1), 0, 40), &comms);  // key 1 ends
  g.OnSample(1, At(Record(9), 0, 41), &comms);  // no start
  MetricSnapshot m = g.Snapshot();
  EXPECT_EQ(ValueOf(m, "0"), 1);  // key 3
  EXPECT_EQ(ValueOf(m, "1"), 2);  // keys 4 and 2
  EXPECT_EQ(g.unmatched(LatencyUnmatched::kReplaced), 1u);
  EXPECT_EQ(g.unmatched(LatencyUnmatched::kNoStart), 1u);
  EXPECT_EQ(g.inflight(), 3u);
  // 6 s later every start has expired: the gauges drop to 0 (a task that died inside).
  g.OnSample(1, At(Record(100), 0, 6'000'000'100ULL), &comms);  // an end moves the trace clock
  g.OnRoundEnd();
  m = g.Snapshot();
  EXPECT_EQ(ValueOf(m, "0"), 0);
  EXPECT_EQ(ValueOf(m, "1"), 0);
  EXPECT_EQ(g.unmatched(LatencyUnmatched::kExpired), 3u);
  EXPECT_EQ(g.inflight(), 0u);
}

TEST(GaugeTest, UpDownAddsAndSubtractsTheValue) {
  std::vector<GaugeCollector::Side> sides(2);
  sides[0].labels = CpuLabel();
  sides[1].labels = CpuLabel();
  sides[1].value = *FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr);
  sides[1].scale = 0.5;
  GaugeCollector g("g", "h", GaugeCollector::Kind::kUpDown, std::move(sides), 100);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  for (int i = 0; i < 5; ++i) g.OnSample(0, At(Record(0), 0, i), &comms);  // +1 each
  g.OnSample(1, At(Record(4), 0, 10), &comms);                             // -4 × 0.5
  g.OnSample(1, At(Record(6), 1, 11), &comms);                             // -3 on cpu 1
  MetricSnapshot m = g.Snapshot();
  EXPECT_EQ(ValueOf(m, "0"), 3);
  EXPECT_EQ(ValueOf(m, "1"), -3);
  EXPECT_EQ(ValueOf(g.Snapshot(), "0"), 3);  // stands across scrapes
}

TEST(GaugeTest, MaxMinLastPerScrapeWindow) {
  for (auto kind : {GaugeCollector::Kind::kMax, GaugeCollector::Kind::kMin, GaugeCollector::Kind::kLast}) {
    std::vector<GaugeCollector::Side> sides(1);
    sides[0].labels = CpuLabel();
    sides[0].value = *FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr);
    sides[0].scale = 2;
    GaugeCollector g("g", "h", kind, std::move(sides), 100);
    CommTable comms([](uint32_t, char*, size_t) { return -1; });
    for (int64_t v : {5, -3, 9, 2}) g.OnSample(0, At(Record(v), 0, 1), &comms);
    MetricSnapshot m = g.Snapshot();
    const double want1 = kind == GaugeCollector::Kind::kMax ? 18 : kind == GaugeCollector::Kind::kMin ? -6 : 4;
    EXPECT_EQ(ValueOf(m, "0"), want1);
    // The next window starts empty: no series until a value comes, then only the new values.
    EXPECT_TRUE(g.Snapshot().series.empty());
    for (int64_t v : {1, 3}) g.OnSample(0, At(Record(v), 0, 2), &comms);
    m = g.Snapshot();
    const double want2 = kind == GaugeCollector::Kind::kMax ? 6 : kind == GaugeCollector::Kind::kMin ? 2 : 6;
    EXPECT_EQ(ValueOf(m, "0"), want2);
  }
}

// Label churn: label sets whose starts all ended free their ids, so max_series bounds the sets in
// flight, not the sets ever seen. And a standing series goes idle only at 0.
TEST(GaugeTest, InflightLabelIdsAreReusedAndOnlyZeroSeriesGoIdle) {
  std::vector<GaugeCollector::Side> sides(2);
  sides[0].key.push_back(*FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr));
  sides[1].key.push_back(*FieldExtractor::Compile(Field("v", 8), LabelDecode::kAuto, nullptr));
  sides[0].labels = CpuLabel();
  GaugeCollector g("inflight", "h", GaugeCollector::Kind::kInflight, std::move(sides), 2, 100, 0);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  for (uint32_t cpu = 0; cpu < 50; ++cpu) {  // 50 label sets, one at a time
    g.OnSample(0, At(Record(cpu), cpu, 10 * cpu), &comms);
    g.OnSample(1, At(Record(cpu), cpu, 10 * cpu + 1), &comms);
    g.Sweep(10 * cpu + 2, 1, [](uint32_t) { return false; });  // series at 0 go idle
  }
  EXPECT_EQ(g.series_dropped(), 0u);
  g.OnSample(0, At(Record(7), 3, 1000), &comms);  // one standing start
  g.Sweep(2000, 1, [](uint32_t) { return false; });
  g.Sweep(3000, 1, [](uint32_t) { return false; });
  EXPECT_EQ(ValueOf(g.Snapshot(), "3"), 1);  // not idle at 1
}

LabelSet PidLabel() {
  std::vector<LabelSpec> specs;
  specs.push_back(testing::SourceLabel("pid", LabelSource::kPid));
  return LabelSet(std::move(specs));
}

// An up/down gauge by pid: sides 0 (up, +1) and 1 (down, -1).
GaugeCollector PidUpDown(size_t max_series) {
  std::vector<GaugeCollector::Side> sides(2);
  sides[0].labels = PidLabel();
  sides[1].labels = PidLabel();
  return GaugeCollector("held", "h", GaugeCollector::Kind::kUpDown, std::move(sides), max_series);
}

Sample OfPid(const std::vector<uint8_t>& raw, uint32_t pid, uint64_t t) {
  Sample s = At(raw, 0, t);
  s.pid = s.tid = pid;
  return s;
}

std::map<std::string, double> ByPid(const MetricSnapshot& m) {
  std::map<std::string, double> out;
  for (const auto& s : m.series) out[s.labels.at(0).second] = s.value;
  return out;
}

// A task's up/down series goes when the task exits, whatever its value (once a scrape exported
// it), and a series standing at a value other than 0 never goes idle.
TEST(GaugeTest, UpDownSeriesOfAnExitedTaskGoesAtAnyValue) {
  GaugeCollector g = PidUpDown(100);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  const auto raw = Record(0);
  g.OnSample(0, OfPid(raw, 7, 1), &comms);  // pid 7 holds 2
  g.OnSample(0, OfPid(raw, 7, 2), &comms);
  g.OnSample(0, OfPid(raw, 8, 3), &comms);  // pid 8 up then down: 0
  g.OnSample(1, OfPid(raw, 8, 4), &comms);
  g.OnSample(0, OfPid(raw, 9, 5), &comms);                                           // pid 9 holds 1 and lives
  for (uint64_t t = 10; t < 20; ++t) g.Sweep(t, 1, [](uint32_t) { return false; });  // idle: only pid 8 at 0
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"7", 2}, {"9", 1}}));
  EXPECT_EQ(g.series_removed().first, 1u);
  // Pid 7 exits; the scrape above exported its last value: the next sweep removes it.
  g.Sweep(100, 0, [](uint32_t pid) { return pid == 7; });
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"9", 1}}));
  EXPECT_EQ(g.series_removed().second, 1u);
}

// max_series 2: tasks 1 and 2 hold the two series; the ups of tasks 3..22 are refused. Then 1 and
// 2 go down and exit (their series go), and 3..22 go down, the last first: a down whose up was
// refused never takes a series below 0. Tasks 3 and 4's refusals were kept aside (room for
// max_series label sets): their downs give their new series 0; 5..22's were lost, so downs
// without a series are refused from then on.
TEST(GaugeTest, ADownWhoseUpWasRefusedNeverTakesASeriesBelowZero) {
  GaugeCollector g = PidUpDown(2);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  const auto raw = Record(0);
  uint64_t t = 1;
  for (uint32_t pid = 1; pid <= 22; ++pid) g.OnSample(0, OfPid(raw, pid, t++), &comms);
  EXPECT_EQ(g.series_dropped(), 20u);
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"1", 1}, {"2", 1}}));
  for (uint32_t pid : {1, 2}) g.OnSample(1, OfPid(raw, pid, t++), &comms);
  const TaskExited exited = [](uint32_t pid) { return pid <= 2; };
  g.Sweep(t++, 0, exited);
  g.Snapshot();
  g.Sweep(t++, 0, exited);
  EXPECT_TRUE(g.Snapshot().series.empty());
  for (uint32_t pid = 22; pid >= 3; --pid) {
    g.OnSample(1, OfPid(raw, pid, t++), &comms);
    for (const auto& [p, v] : ByPid(g.Snapshot())) EXPECT_GE(v, 0) << "pid " << p << " after the down of " << pid;
  }
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"3", 0}, {"4", 0}}));
  EXPECT_EQ(g.series_dropped(), 20u + 18u);  // 20 ups, and the downs of 5..22
  // Task 4 takes its lock again: its series counts it.
  g.OnSample(0, OfPid(raw, 4, t++), &comms);
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"3", 0}, {"4", 1}}));
}

// A refused up kept aside is added when its label set gets a series, whichever side creates it;
// a kept-aside change of a task that exited is dropped by the sweep, so that a later task with
// its pid starts at 0.
TEST(GaugeTest, RefusedChangesJoinTheLabelSetsLaterSeries) {
  GaugeCollector g = PidUpDown(2);
  CommTable comms([](uint32_t, char*, size_t) { return -1; });
  const auto raw = Record(0);
  uint64_t t = 1;
  for (uint32_t pid : {1, 5}) g.OnSample(0, OfPid(raw, pid, t++), &comms);     // pids 1 and 5 hold the series
  for (uint32_t pid : {2, 2, 3}) g.OnSample(0, OfPid(raw, pid, t++), &comms);  // kept aside: pid 2 +2, pid 3 +1
  EXPECT_EQ(g.series_dropped(), 3u);
  g.OnSample(1, OfPid(raw, 1, t++), &comms);  // pid 1 at 0; pids 1 and 3 exit
  const TaskExited exited = [](uint32_t pid) { return pid == 1 || pid == 3; };
  g.Snapshot();
  g.Sweep(t++, 0, exited);
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"5", 1}}));
  g.OnSample(1, OfPid(raw, 2, t++), &comms);  // pid 2's down makes its series: 2 - 1
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"2", 1}, {"5", 1}}));
  g.OnSample(1, OfPid(raw, 2, t++), &comms);
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"2", 0}, {"5", 1}}));
  g.Sweep(t++, 0, [](uint32_t pid) { return pid <= 3; });  // pid 2 exits too: room for one series
  g.OnSample(0, OfPid(raw, 3, t++), &comms);               // a new task 3: its exited namesake's +1 is not added
  EXPECT_EQ(ByPid(g.Snapshot()), (std::map<std::string, double>{{"3", 1}, {"5", 1}}));
  EXPECT_EQ(g.series_dropped(), 3u);
}

}  // namespace
}  // namespace tpe
