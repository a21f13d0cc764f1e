#include "collectors/gauge.h"

#include <gtest/gtest.h>

#include <cstring>

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

}  // namespace
}  // namespace tpe
