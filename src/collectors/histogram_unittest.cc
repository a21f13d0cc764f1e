#include "collectors/histogram.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "collectors/buckets.h"
#include "collectors/inflight_table.h"
#include "collectors/latency.h"
#include "common/file_util.h"
#include "format/event_format.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

// Every bound b of a layout: b itself and anything just below belongs to bucket i (le=b), the
// next representable value above it to bucket i+1.
void ExpectBoundaries(const Buckets& b) {
  const auto& bounds = b.bounds();
  for (size_t i = 0; i < bounds.size(); ++i) {
    EXPECT_EQ(b.Index(bounds[i]), i) << "at " << bounds[i];
    EXPECT_EQ(b.Index(std::nextafter(bounds[i], -INFINITY)), i) << "below " << bounds[i];
    EXPECT_EQ(b.Index(std::nextafter(bounds[i], INFINITY)), i + 1) << "above " << bounds[i];
  }
  EXPECT_EQ(b.Index(-1e300), 0u);
  EXPECT_EQ(b.Index(1e300), bounds.size());
}

TEST(BucketsTest, Exp2BoundsAndEveryBoundary) {
  auto b = Buckets::Exp2(1e-6, 1.0);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->bounds().size(), 21u);  // 1us .. 1.048576s
  EXPECT_DOUBLE_EQ(b->bounds()[10], 1.024e-3);
  ExpectBoundaries(*b);
  EXPECT_EQ(b->Index(0), 0u);
  EXPECT_EQ(b->Index(1.5e-6), 1u);
  EXPECT_EQ(b->Index(3e-3), 12u);  // (2.048ms, 4.096ms]
  auto ints = Buckets::Exp2(64, 65536);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(ints->bounds().size(), 11u);
  ExpectBoundaries(*ints);
  EXPECT_EQ(ints->Index(142), 2u);  // (128, 256]
}

TEST(BucketsTest, LinearAndExplicit) {
  auto l = Buckets::Linear(0, 0.1, 10);
  ASSERT_TRUE(l.ok());
  ExpectBoundaries(*l);
  EXPECT_EQ(l->Index(0.25), 3u);
  auto neg = Buckets::Linear(-100, 25, 9);
  ASSERT_TRUE(neg.ok());
  ExpectBoundaries(*neg);
  auto e = Buckets::Explicit({0.001, 0.01, 0.1, 1});
  ASSERT_TRUE(e.ok());
  ExpectBoundaries(*e);
  EXPECT_EQ(e->Index(0.002), 1u);
  EXPECT_EQ(e->Index(0.02), 2u);
}

// A value exactly on a bound belongs to that bound's bucket (le is inclusive), the last finite
// one included: the quotient (v - start) / width can round up past the last bucket.
TEST(BucketsTest, LinearValuesOnEveryBoundIncludingTheLast) {
  size_t checked = 0;
  for (double start : {-3.7, -1.0, 0.0, 1e-6, 0.1, 17.0, 1e9}) {
    for (double width : {1e-3, 0.1, 0.3, 0.7, 1.0, 7.0, 1e-7}) {
      for (size_t count = 1; count <= 60; ++count) {
        auto b = Buckets::Linear(start, width, count);
        if (!b.ok()) {  // bounds that collapse in double precision are refused, not misplaced
          EXPECT_NE(b.status().message().find("width is too small"), std::string::npos);
          continue;
        }
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ(b->Index(b->bounds()[i]), i) << "start " << start << " width " << width << " count " << count;
          ++checked;
        }
        ASSERT_EQ(b->Index(std::nextafter(b->bounds().back(), 1e300)), count);
      }
    }
  }
  EXPECT_GT(checked, 10000u);
}

TEST(BucketsTest, BadLayoutsAreExplained) {
  EXPECT_EQ(Buckets::Exp2(0, 1).status().message(), "exp2 buckets: min must be > 0");
  EXPECT_EQ(Buckets::Exp2(2, 1).status().message(), "exp2 buckets: max must be greater than min");
  EXPECT_FALSE(Buckets::Exp2(1e-300, 1e300).ok());
  EXPECT_EQ(Buckets::Linear(0, 0, 3).status().message(), "linear buckets: width must be > 0");
  EXPECT_FALSE(Buckets::Linear(0, 1, 0).ok());
  EXPECT_EQ(Buckets::Explicit({}).status().message(), "explicit buckets: bounds must not be empty");
  EXPECT_EQ(Buckets::Explicit({1, 1}).status().message(),
            "explicit buckets: bounds must be strictly increasing; bounds[1] is not greater than bounds[0]");
}

TEST(InflightTableTest, PutTakeReplaceFull) {
  InflightTable t(2);
  EXPECT_EQ(t.Put("a", {10, 1}), InflightTable::PutResult::kInserted);
  EXPECT_EQ(t.Put("a", {20, 2}), InflightTable::PutResult::kReplaced);
  EXPECT_EQ(t.Put("b", {30, 3}), InflightTable::PutResult::kInserted);
  EXPECT_EQ(t.Put("c", {40, 4}), InflightTable::PutResult::kFull);
  InflightTable::Start s;
  ASSERT_TRUE(t.Take("a", &s));
  EXPECT_EQ(s.time_ns, 20u);
  EXPECT_EQ(s.label_id, 2u);
  EXPECT_FALSE(t.Take("a", &s));
  EXPECT_EQ(t.ExpireBefore(35), 1u);
  EXPECT_EQ(t.size(), 0u);
}

// Expiry scans only when a start may have expired: an idle table, or one whose starts end
// quickly, is never scanned (a 1,000,000-entry table scanned every second cost 0.6 CPU-s/s).
// Memory follows the most starts in flight at once: a million distinct keys, one at a time,
// never grow the table past its first page; 1000 at once grow it to 2048 slots (load <= 0.5),
// each still found after the doublings.
TEST(InflightTableTest, CapacityFollowsTheStartsInFlight) {
  InflightTable t(100000);
  EXPECT_EQ(t.capacity(), InflightTable::kMinCapacity);
  InflightTable::Start s;
  for (uint64_t k = 0; k < 1'000'000; ++k) {
    const std::string key(reinterpret_cast<const char*>(&k), sizeof(k));
    ASSERT_EQ(t.Put(key, {k, 0}), InflightTable::PutResult::kInserted);
    ASSERT_TRUE(t.Take(key, &s));
  }
  EXPECT_EQ(t.capacity(), InflightTable::kMinCapacity);
  for (uint64_t k = 0; k < 1000; ++k) {
    const std::string key(reinterpret_cast<const char*>(&k), sizeof(k));
    ASSERT_EQ(t.Put(key, {k, static_cast<uint32_t>(k)}), InflightTable::PutResult::kInserted);
  }
  EXPECT_EQ(t.capacity(), 2048u);
  EXPECT_EQ(t.size(), 1000u);
  for (uint64_t k = 0; k < 1000; ++k) {
    const std::string key(reinterpret_cast<const char*>(&k), sizeof(k));
    ASSERT_TRUE(t.Take(key, &s)) << k;
    EXPECT_EQ(s.time_ns, k);
    EXPECT_EQ(s.label_id, k);
  }
  EXPECT_EQ(t.size(), 0u);
}

// The table stops doubling at twice max_entries: max_entries starts fit, one more is kFull.
TEST(InflightTableTest, FullAtMaxEntriesAfterGrowing) {
  InflightTable t(300);
  for (uint64_t k = 0; k < 300; ++k) {
    const std::string key(reinterpret_cast<const char*>(&k), sizeof(k));
    ASSERT_EQ(t.Put(key, {k, 0}), InflightTable::PutResult::kInserted);
  }
  EXPECT_EQ(t.Put("one more", {1, 0}), InflightTable::PutResult::kFull);
  EXPECT_EQ(t.capacity(), 1024u);
}

TEST(InflightTableTest, ExpiryScansOnlyWhenSomethingMayExpire) {
  InflightTable t(1'000'000);
  for (uint64_t now = 0; now < 100; ++now) EXPECT_EQ(t.ExpireBefore(now), 0u);  // empty
  EXPECT_EQ(t.scans(), 0u);
  EXPECT_EQ(t.Put("a", {50, 0}), InflightTable::PutResult::kInserted);
  EXPECT_EQ(t.Put("b", {70, 0}), InflightTable::PutResult::kInserted);
  EXPECT_EQ(t.ExpireBefore(40), 0u);  // nothing is that old: no scan
  EXPECT_EQ(t.scans(), 0u);
  EXPECT_EQ(t.ExpireBefore(60), 1u);  // a expires; b (70) is the new bound
  EXPECT_EQ(t.scans(), 1u);
  EXPECT_EQ(t.ExpireBefore(65), 0u);
  EXPECT_EQ(t.scans(), 1u);
  EXPECT_EQ(t.Put("c", {10, 0}), InflightTable::PutResult::kInserted);  // older than the bound
  EXPECT_EQ(t.ExpireBefore(20), 1u);
  EXPECT_EQ(t.size(), 1u);
}

// Random operations against std::map: probing and backward-shift deletion stay correct under
// heavy collisions (a small table, many keys).
TEST(InflightTableTest, MatchesAReferenceMap) {
  InflightTable t(64);
  std::map<std::string, uint64_t> ref;
  std::mt19937 rng(42);
  for (int i = 0; i < 200000; ++i) {
    std::string key(8, '\0');
    uint64_t k = rng() % 100;
    std::memcpy(key.data(), &k, 8);
    const int op = static_cast<int>(rng() % 3);
    if (op == 0) {
      auto r = t.Put(key, {static_cast<uint64_t>(i), 0});
      if (ref.count(key)) {
        EXPECT_EQ(r, InflightTable::PutResult::kReplaced);
        ref[key] = static_cast<uint64_t>(i);
      } else if (ref.size() < 64) {
        EXPECT_EQ(r, InflightTable::PutResult::kInserted);
        ref[key] = static_cast<uint64_t>(i);
      } else {
        EXPECT_EQ(r, InflightTable::PutResult::kFull);
      }
    } else if (op == 1) {
      InflightTable::Start s;
      bool found = t.Take(key, &s);
      ASSERT_EQ(found, ref.count(key) == 1);
      if (found) {
        EXPECT_EQ(s.time_ns, ref[key]);
        ref.erase(key);
      }
    } else if (i % 1000 == 0) {
      const uint64_t cutoff = static_cast<uint64_t>(i) - 500;
      size_t expected = 0;
      for (auto it = ref.begin(); it != ref.end();) {
        if (it->second < cutoff) {
          it = ref.erase(it);
          ++expected;
        } else {
          ++it;
        }
      }
      EXPECT_EQ(t.ExpireBefore(cutoff), expected);
    }
    ASSERT_EQ(t.size(), ref.size());
  }
}

EventFormat Format(const std::string& rel) {
  return *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/" + rel + "/format"), rel);
}

TEST(HistogramTest, ValueTimesScaleIntoBuckets) {
  EventFormat f = Format("net/net_dev_xmit");
  auto value = FieldExtractor::Compile(*f.FindField("len"), LabelDecode::kAuto, nullptr);
  HistogramCollector h("bytes", "h", LabelSet(), *value, 2.0, *Buckets::Explicit({100, 1000}), std::nullopt, 10);
  CommTable comms;
  std::vector<uint8_t> raw(32, 0);
  Sample s;
  s.raw = Bytes(raw);
  for (uint32_t len : {10u, 50u, 51u, 499u, 500u, 501u, 4000u}) {
    std::memcpy(&raw[16], &len, 4);
    h.OnSample(0, s, &comms);
  }
  MetricSnapshot m = h.Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.kind, MetricKind::kHistogram);
  EXPECT_EQ(m.series[0].bucket_counts, (std::vector<uint64_t>{2, 3, 2}));  // le=100, le=1000, +Inf
  EXPECT_EQ(m.series[0].count, 7u);
  EXPECT_DOUBLE_EQ(m.series[0].sum, 2.0 * (10 + 50 + 51 + 499 + 500 + 501 + 4000));
}

// _sum is the exact integer sum of the raw values rounded once, as the bpf
// engine computes it: a double accumulated per observation (the perf engine's before) dropped
// 1000 observations of 1 after one of 2^53 (2^53 + 1 rounds back to 2^53), and a native
// series' sample sum past 2^64 differed by engine. Classic and native sums alike, unsigned
// values past 2^64 and signed ones below -2^63.
TEST(HistogramTest, SumIsTheExactRawSumRoundedOnce) {
  EventFormat f = Format("syscalls/sys_enter_write");
  auto count = FieldExtractor::Compile(*f.FindField("count"), LabelDecode::kAuto, nullptr);
  auto native = NativeLayout::Make(NativeOptions{}, 1);
  ASSERT_TRUE(native.ok());
  HistogramCollector classic("classic", "h", LabelSet(), *count, 1, *Buckets::Exp2(1, 1024), std::nullopt, 10);
  HistogramCollector sparse("native", "h", LabelSet(), *count, 1, Buckets::None(), *native, 10);
  HistogramCollector scaled("scaled", "h", LabelSet(), *count, 0.25, *Buckets::Exp2(1, 1024), std::nullopt, 10);
  CommTable comms;
  std::vector<uint8_t> raw(40, 0);
  Sample s;
  s.raw = Bytes(raw);
  auto write = [&](uint64_t n) {
    std::memcpy(&raw[32], &n, 8);
    for (HistogramCollector* h : {&classic, &sparse, &scaled}) h->OnSample(0, s, &comms);
  };
  auto sum = [](const HistogramCollector& h) { return h.Snapshot().series.at(0).sum; };
  write(uint64_t{1} << 53);
  for (int i = 0; i < 1000; ++i) write(1);
  EXPECT_EQ(sum(classic), 0x1p53 + 1000);
  EXPECT_EQ(sum(sparse), 0x1p53 + 1000);
  EXPECT_EQ(sum(scaled), (0x1p53 + 1000) * 0.25);
  write(18446744073709551000ULL);                       // 2^64 - 616
  const double want = 18446744073709551616.0 + 0x1p53;  // 2^64 + 2^53 + 384, nearest double
  EXPECT_EQ(sum(classic), want);
  EXPECT_EQ(sum(sparse), want);
  EXPECT_EQ(sum(scaled), want * 0.25);
  EXPECT_EQ(classic.Snapshot().series[0].count, 1002u);
  EXPECT_EQ(sparse.Snapshot().series[0].count, 1002u);

  // A signed field (raw_syscalls:sys_exit ret): values below 0 are subtracted, exactly.
  EventFormat e = Format("raw_syscalls/sys_exit");
  auto ret = FieldExtractor::Compile(*e.FindField("ret"), LabelDecode::kAuto, nullptr);
  auto signed_native = NativeLayout::Make(NativeOptions{}, 1);
  HistogramCollector sc("signed_classic", "h", LabelSet(), *ret, 1, *Buckets::Explicit({0}), std::nullopt, 10);
  HistogramCollector sn("signed_native", "h", LabelSet(), *ret, 1, Buckets::None(), *signed_native, 10);
  std::vector<uint8_t> r(24, 0);
  s.raw = Bytes(r);
  auto exit = [&](int64_t v) {
    std::memcpy(&r[16], &v, 8);
    sc.OnSample(0, s, &comms);
    sn.OnSample(0, s, &comms);
  };
  exit(-5);
  exit(3);
  EXPECT_EQ(sum(sc), -2);
  exit(std::numeric_limits<int64_t>::min());
  exit(std::numeric_limits<int64_t>::min());
  exit(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(sum(sc), -3 * 0x1p63);  // -3·2^63 - 2, nearest double
  EXPECT_EQ(sum(sn), -3 * 0x1p63);
  exit(std::numeric_limits<int64_t>::max());
  exit(std::numeric_limits<int64_t>::max());
  exit(std::numeric_limits<int64_t>::max());
  EXPECT_EQ(sum(sc), -5);  // exactly: -3·2^63 - 2 + 3·(2^63 - 1)
  EXPECT_EQ(sum(sn), -5);
}

// Latency over sched_waking(pid) → sched_switch(next_pid), driven directly in timestamp order.

struct LatencyFixture {
  EventFormat waking = Format("sched/sched_waking");
  EventFormat sw = Format("sched/sched_switch");
  CommTable comms{[](uint32_t, char*, size_t) { return -1; }};
  std::unique_ptr<LatencyCollector> c;

  explicit LatencyFixture(size_t max_inflight = 100, uint64_t timeout_ns = 10'000'000'000ULL) {
    LatencyEndpoint start, end;
    start.key.push_back(*FieldExtractor::Compile(*waking.FindField("pid"), LabelDecode::kAuto, nullptr));
    std::vector<LabelSpec> sl(1);
    sl[0].name = "woken";
    sl[0].extractor = *FieldExtractor::Compile(*waking.FindField("comm"), LabelDecode::kAuto, nullptr);
    start.labels = LabelSet(std::move(sl));
    end.key.push_back(*FieldExtractor::Compile(*sw.FindField("next_pid"), LabelDecode::kAuto, nullptr));
    std::vector<LabelSpec> el(1);
    el[0].name = "cpu";
    el[0].source = LabelSource::kCpu;
    end.labels = LabelSet(std::move(el));
    std::vector<LatencyEndpoint> starts;
    starts.push_back(std::move(start));
    c = std::make_unique<LatencyCollector>("lat_seconds", "h", std::move(starts), std::move(end),
                                           *Buckets::Explicit({1e-6, 1e-3, 1}), std::nullopt, 100, max_inflight,
                                           timeout_ns);
  }
  void Waking(int32_t pid, const char* comm, uint64_t t) {
    std::vector<uint8_t> raw(40, 0);
    std::strncpy(reinterpret_cast<char*>(&raw[8]), comm, 15);
    std::memcpy(&raw[24], &pid, 4);
    Feed(0, raw, t, 0);
  }
  void Switch(int32_t next_pid, uint64_t t, uint32_t cpu = 1) {
    std::vector<uint8_t> raw(64, 0);
    std::memcpy(&raw[56], &next_pid, 4);
    Feed(1, raw, t, cpu);
  }
  void Feed(size_t index, const std::vector<uint8_t>& raw, uint64_t t, uint32_t cpu) {
    Sample s;
    s.raw = Bytes(raw);
    s.time_ns = t;
    s.cpu = cpu;
    c->OnSample(index, s, &comms);
  }
};

TEST(LatencyTest, PairsByKeyAndLabelsFromBothSides) {
  LatencyFixture f;
  f.Waking(10, "sleeper", 1000);
  f.Waking(11, "other", 1100);
  f.Switch(11, 1600);     // 500 ns → le=1e-6
  f.Switch(10, 3001000);  // 3 ms → le=1
  MetricSnapshot m = f.c->Snapshot();
  ASSERT_EQ(m.series.size(), 2u);
  std::map<std::string, SeriesSnapshot> by;
  for (auto& s : m.series) by[s.labels[0].second] = s;
  EXPECT_EQ(by["other"].labels, (LabelPairs{{"woken", "other"}, {"cpu", "1"}}));
  EXPECT_EQ(by["other"].bucket_counts, (std::vector<uint64_t>{1, 0, 0, 0}));
  EXPECT_EQ(by["sleeper"].bucket_counts, (std::vector<uint64_t>{0, 0, 1, 0}));
  EXPECT_DOUBLE_EQ(by["sleeper"].sum, 0.003);
  EXPECT_EQ(f.c->inflight(), 0u);
}

TEST(LatencyTest, UnmatchedAreCountedByReason) {
  LatencyFixture f(/*max_inflight=*/2, /*timeout_ns=*/5'000'000'000ULL);
  f.Switch(99, 10);  // no_start
  f.Waking(1, "a", 100);
  f.Waking(1, "a", 200);  // replaced: the second start wins
  f.Waking(2, "b", 300);
  f.Waking(3, "c", 400);  // table_full
  f.Switch(1, 1200);      // 1000 ns from the replacing start
  EXPECT_EQ(f.c->unmatched(LatencyCollector::kNoStart), 1u);
  EXPECT_EQ(f.c->unmatched(LatencyCollector::kReplaced), 1u);
  EXPECT_EQ(f.c->unmatched(LatencyCollector::kTableFull), 1u);
  MetricSnapshot m = f.c->Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_DOUBLE_EQ(m.series[0].sum, 1e-6);
  // pid 2 never ends: expired once trace time passes its start + timeout.
  f.Switch(500, 6'000'000'000ULL);  // moves trace time (no_start again)
  f.c->OnRoundEnd();
  EXPECT_EQ(f.c->unmatched(LatencyCollector::kExpired), 1u);
  EXPECT_EQ(f.c->inflight(), 0u);
}

// With timeout 1 s, a start followed 2.5 s later by its end was observed on
// perf (nothing else advanced trace time, so OnRoundEnd never expired it); the bpf engine counts
// it expired. Both engines must agree: expired, never observed. An end exactly at the timeout is
// still observed (the bpf program compares delta <= timeout_ns).
TEST(LatencyTest, AnEndPastTheTimeoutIsExpiredEvenBeforeTheSweep) {
  LatencyFixture f(/*max_inflight=*/100, /*timeout_ns=*/1'000'000'000ULL);
  for (int32_t pid = 1; pid <= 3; ++pid) {
    f.Waking(pid, "late", 1'000'000'000ULL * static_cast<uint64_t>(10 * pid));
    f.Switch(pid, 1'000'000'000ULL * static_cast<uint64_t>(10 * pid) + 2'500'000'000ULL);
  }
  f.Waking(7, "ontime", 100'000'000'000ULL);
  f.Switch(7, 101'000'000'000ULL);  // exactly the timeout: observed
  EXPECT_EQ(f.c->unmatched(LatencyCollector::kExpired), 3u);
  MetricSnapshot m = f.c->Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].labels[0].second, "ontime");
  EXPECT_EQ(m.series[0].count, 1u);
  EXPECT_EQ(f.c->inflight(), 0u);
}

}  // namespace
}  // namespace tpe
