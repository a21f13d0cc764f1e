// The decisions of the bpf engine's program shapes, run in the Interpreter and compared with the
// perf engine's collectors (collectors/*), which define what every metric means: the same
// bucket for every value, the same label keys (through ToLabelKey), exact counts, and every
// lost event counted in the stats map by reason.
#include "bpf/programs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>

#include "bpf/interpreter.h"
#include "bpf/programs_testing.h"
#include "collectors/buckets.h"
#include "collectors/comm_table.h"
#include "collectors/histogram.h"
#include "collectors/label_set.h"
#include "common/file_util.h"
#include "decode/field_extractor.h"
#include "decode/sample.h"
#include "filter/filter.h"
#include "format/event_format.h"
#include "testing/formats.h"
#include "testing/labels.h"
#include "testing/test_util.h"
namespace tpe::bpf {
namespace {

using testing::FieldLabel;
using testing::SourceLabel;

// ---------------------------------------------------------------------------------------------
// Thresholds: every raw value lands in Buckets::Index's bucket.

// The bucket of `raw` by the thresholds, as the program's search decides it.
size_t ThresholdBucket(const std::vector<uint64_t>& t, uint64_t raw, bool is_signed) {
  for (size_t i = 0; i < t.size(); ++i) {
    const bool le = is_signed ? static_cast<int64_t>(raw) <= static_cast<int64_t>(t[i]) : raw <= t[i];
    if (le) return i;
  }
  return t.size();
}

// HistogramCollector::OnSample's value.
double PerfValue(uint64_t raw, bool is_signed, double scale) {
  return (is_signed ? static_cast<double>(static_cast<int64_t>(raw)) : static_cast<double>(raw)) * scale;
}

// Raw values around each bound / scale (±span) and the extremes.
std::vector<uint64_t> Candidates(const Buckets& b, double scale, bool is_signed, int span) {
  std::vector<uint64_t> out = {
      0, 1, 2, ~uint64_t{0}, ~uint64_t{0} - 1, uint64_t{1} << 63, (uint64_t{1} << 63) - 1, (uint64_t{1} << 63) + 1};
  for (double bound : b.bounds()) {
    const double c = bound / scale;
    uint64_t center = 0;
    if (is_signed) {
      if (c <= -9.2e18) {
        center = static_cast<uint64_t>(std::numeric_limits<int64_t>::min());
      } else if (c >= 9.2e18) {
        center = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      } else {
        center = static_cast<uint64_t>(static_cast<int64_t>(c));
      }
    } else {
      center = c <= 0 ? 0 : c >= 1.8e19 ? ~uint64_t{0} : static_cast<uint64_t>(c);
    }
    for (int d = -span; d <= span; ++d) {
      // Saturate in the field's order (signed: biased by 2^63).
      const uint64_t bias = is_signed ? uint64_t{1} << 63 : 0;
      const uint64_t biased = center ^ bias;
      uint64_t v = biased + static_cast<uint64_t>(static_cast<int64_t>(d));
      if (d < 0 && v > biased) v = 0;
      if (d > 0 && v < biased) v = ~uint64_t{0};
      out.push_back(v ^ bias);
    }
  }
  return out;
}

struct Layout {
  std::string name;
  Buckets buckets;
};
std::vector<Layout> Layouts() {
  std::vector<Layout> out;
  out.push_back({"exp2", *Buckets::Exp2(0.001, 1000)});
  out.push_back({"exp2-ns", *Buckets::Exp2(1e-6, 10)});
  out.push_back({"linear", *Buckets::Linear(0, 0.25, 20)});
  out.push_back({"linear-big", *Buckets::Linear(1000, 4096, 12)});
  out.push_back({"explicit", *Buckets::Explicit({0, 1e-9, 0.3, 1, 3, 1000, 1e12, 1e18})});
  return out;
}
// Layouts with bounds below zero: unsigned values (and very negative bounds, signed ones) leave
// the lowest buckets empty.
std::vector<Layout> NegativeLayouts() {
  std::vector<Layout> out;
  out.push_back({"linear-neg", *Buckets::Linear(-5, 2.5, 10)});
  out.push_back({"explicit-neg", *Buckets::Explicit({-1e30, -1e6, -1, -0.5, 0, 0.3, 1, 1e12})});
  return out;
}
const double kScales[] = {1, 0.5, 1e-9, 512, 0.0009765625};

// Checks the thresholds of `b` in C++ and in the histogram program; returns the failures.
int CheckThresholds(const Layout& l, double scale, bool is_signed, int span, int run_span) {
  SCOPED_TRACE(l.name + " scale " + std::to_string(scale) + (is_signed ? " signed" : " unsigned"));
  const std::vector<uint64_t> t = Thresholds(l.buckets, scale, is_signed);
  EXPECT_EQ(t.size(), l.buckets.bounds().size());
  int failures = 0;
  for (uint64_t raw : Candidates(l.buckets, scale, is_signed, span)) {
    const size_t want = l.buckets.Index(PerfValue(raw, is_signed, scale));
    const size_t got = ThresholdBucket(t, raw, is_signed);
    if (got != want && ++failures <= 5) {
      ADD_FAILURE() << "raw " << (is_signed ? std::to_string(static_cast<int64_t>(raw)) : std::to_string(raw))
                    << ": thresholds say bucket " << got << ", Buckets::Index " << want;
    }
  }
  // The program: one series (no labels), a u64/s64 field at offset 8.
  HistogramShape shape;
  shape.value.name = "v";
  shape.value.offset = 8;
  shape.value.size = 8;
  shape.value.is_signed = is_signed;
  shape.thresholds = t;
  auto prog = EmitHistogram(shape, Fds());
  EXPECT_TRUE(prog.ok()) << prog.status().ToString();
  if (!prog.ok()) return failures + 1;
  Interpreter in;
  const uint32_t vbytes = HistogramValueBytes(t.size(), is_signed);
  AddMaps(&in, shape.key.size, vbytes, 4);
  std::vector<uint64_t> prev(vbytes / 8, 0);
  int128 sum = 0;
  for (uint64_t raw : Candidates(l.buckets, scale, is_signed, run_span)) {
    std::string rec(16, '\0');
    std::memcpy(rec.data() + 8, &raw, 8);
    RunProg(&in, *prog, rec, FakeTask{});
    sum += is_signed ? static_cast<int128>(static_cast<int64_t>(raw)) : static_cast<int128>(raw);
    FakeMap* values = in.map(kValuesFd);
    EXPECT_EQ(values->entries.size(), 1u);
    if (values->entries.size() != 1) return failures + 1;
    std::vector<uint64_t> now = U64s(values->entries.begin()->second);
    size_t got = t.size() + 1;  // none
    for (size_t i = 0; i <= t.size(); ++i) {
      if (now[i] == prev[i] + 1) got = i;
    }
    const size_t want = l.buckets.Index(PerfValue(raw, is_signed, scale));
    if (got != want && ++failures <= 10) {
      ADD_FAILURE() << "program: raw " << raw << " in bucket " << got << ", Buckets::Index " << want;
    }
    EXPECT_TRUE(WideAt(now, t.size() + 1, is_signed) == sum);  // exact, however many extremes added
    prev = now;
  }
  return failures;
}

TEST(ThresholdsTest, EveryValueNearEveryBoundInIndexBucket) {
  for (const Layout& l : Layouts()) {
    for (double scale : kScales) {
      for (bool is_signed : {false, true}) {
        EXPECT_EQ(CheckThresholds(l, scale, is_signed, 300, 20), 0);
      }
    }
  }
}

// When even the smallest raw value lies above a bound (bounds below zero with an unsigned field
// or latency; bounds below INT64_MIN × scale with a signed one) the perf engine leaves the lowest
// buckets empty; ascending thresholds cannot, so such layouts are refused (they run on perf).
TEST(ThresholdsTest, NegativeBoundsBelowTheFieldAreRefused) {
  for (const Layout& l : NegativeLayouts()) {
    for (double scale : kScales) {
      for (bool is_signed : {false, true}) {
        Status st = ::tpe::bpf::CheckThresholds(l.buckets, scale, is_signed);
        if (st.ok()) {
          EXPECT_EQ(CheckThresholds(l, scale, is_signed, 300, 3), 0) << l.name << " scale " << scale;
        } else {
          EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
          EXPECT_NE(st.message().find("below the smallest value"), std::string::npos) << st.message();
        }
      }
    }
  }
  EXPECT_FALSE(::tpe::bpf::CheckThresholds(*Buckets::Linear(-5, 2.5, 10), 1, false).ok());
  EXPECT_TRUE(::tpe::bpf::CheckThresholds(*Buckets::Linear(-5, 2.5, 10), 1, true).ok());
}

// Signed fields with bounds in range of every raw value are fine.
TEST(ThresholdsTest, NegativeBoundsWithSignedFields) {
  const Layout l{"linear-neg", *Buckets::Linear(-5, 2.5, 10)};
  for (double scale : kScales) EXPECT_EQ(CheckThresholds(l, scale, true, 300, 3), 0);
}

// A negative scale makes the bucket fall as the raw value rises: refused (runs on perf).
TEST(ThresholdsTest, NegativeScaleIsRefused) {
  for (const Layout& l : Layouts()) {
    for (bool is_signed : {false, true}) {
      Status st = ::tpe::bpf::CheckThresholds(l.buckets, -1, is_signed);
      EXPECT_EQ(st.code(), StatusCode::kUnimplemented);
      EXPECT_NE(st.message().find("scale"), std::string::npos);
    }
  }
}

TEST(ThresholdsTest, RandomValuesAgree) {
  std::mt19937_64 rng(42);
  for (const Layout& l : Layouts()) {
    for (double scale : kScales) {
      for (bool is_signed : {false, true}) {
        const std::vector<uint64_t> t = Thresholds(l.buckets, scale, is_signed);
        for (int i = 0; i < 2000; ++i) {
          uint64_t raw = rng();
          raw >>= rng() % 64;  // all magnitudes
          if (is_signed && (rng() & 1)) raw = ~raw + 1;
          ASSERT_EQ(ThresholdBucket(t, raw, is_signed), l.buckets.Index(PerfValue(raw, is_signed, scale)))
              << l.name << " scale " << scale << " raw " << raw;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Counter.

class CounterProgramTest : public ::testing::Test {
 protected:
  CounterProgramTest() : fmt_(Event("sched", "sched_switch")) {}

  // prev_comm (char[16]), prev_prio (int), prev_state (long, signed), then every source.
  LabelSet Labels() {
    std::vector<LabelSpec> specs;
    specs.push_back(FieldLabel(fmt_, "prev_comm"));
    specs.push_back(FieldLabel(fmt_, "prev_prio"));
    specs.push_back(FieldLabel(fmt_, "prev_state"));
    specs.push_back(SourceLabel("comm", LabelSource::kComm));
    specs.push_back(SourceLabel("pid", LabelSource::kPid));
    specs.push_back(SourceLabel("tid", LabelSource::kTid));
    specs.push_back(SourceLabel("cpu", LabelSource::kCpu));
    specs.push_back(SourceLabel("cgroup", LabelSource::kCgroup));
    return LabelSet(std::move(specs));
  }

  std::vector<FakeTask> Tasks() {
    std::vector<FakeTask> t(4);
    t[0] = {100, 100, 0, "init", 1, 0};
    t[1] = {100, 101, 1, "worker-thread-x", 7, 0};  // 15 bytes: TASK_COMM_LEN - 1
    t[2] = {200, 200, 3, "a", 0xffffffff00000001ull, 0};
    t[3] = {4000000, 4000001, 7, "", 2, 0};
    return t;
  }

  std::string RandomRecord(std::mt19937_64& rng, uint32_t tid) {
    static const char* kComms[] = {"bash", "", "kworker/0:1H-kb", "exactly16bytes!!", "x"};
    static const int64_t kStates[] = {0, 1, -1, INT64_MIN, INT64_MAX, 0x402};
    return Switch(kComms[rng() % 5], static_cast<int32_t>(rng() % 3), static_cast<int32_t>(rng() % 3) - 1,
                  kStates[rng() % 6], kComms[rng() % 5], static_cast<int32_t>(rng() % 1000) - 10,
                  static_cast<int32_t>(tid));
  }

  EventFormat fmt_;
};

TEST_F(CounterProgramTest, KeysMatchBuildKeyAndCountsAreExact) {
  LabelSet labels = Labels();
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(layout->size, 16u + 8 + 8 + 16 + 8 * 4);
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();

  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 10000);
  CommTable comms(NoProc);
  std::vector<FakeTask> tasks = Tasks();
  for (const FakeTask& t : tasks) comms.OnComm(t.tid, t.comm);
  std::map<std::string, uint64_t> want;
  std::mt19937_64 rng(7);
  const int kHits = 3000;
  for (int i = 0; i < kHits; ++i) {
    const FakeTask& t = tasks[rng() % tasks.size()];
    const std::string rec = RandomRecord(rng, t.tid);
    std::string key;
    ASSERT_TRUE(labels.BuildKey(SampleOf(rec, t), &comms, &key));
    ++want[key];
    RunProg(&in, *prog, rec, t);
  }
  std::map<std::string, uint64_t> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    ASSERT_EQ(k.size(), layout->MapKeySize());
    ASSERT_EQ(v.size(), 8u);
    got[ToLabelKey(*layout, k)] += U64s(v)[0];
  }
  EXPECT_EQ(got, want);
  EXPECT_GT(want.size(), 100u);
  EXPECT_EQ(StatOf(&in, kRuns), static_cast<uint64_t>(kHits));
  EXPECT_EQ(StatOf(&in, kDropped), 0u);
  EXPECT_EQ(StatOf(&in, kDecodeErrors), 0u);
  // The rendered labels are the perf engine's.
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    LabelPairs p = labels.Render(ToLabelKey(*layout, k));
    ASSERT_EQ(p.size(), 8u);
    EXPECT_EQ(p[0].first, "prev_comm");
    EXPECT_LE(p[0].second.size(), 16u);
    break;
  }
}

TEST_F(CounterProgramTest, NoLabelsIsOneSeriesInAOneEntryArray) {
  CounterShape shape;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, shape.key.size, 8, 1);
  for (int i = 0; i < 5; ++i) RunProg(&in, *prog, Switch("a", 1, 2, 3, "b", 4), FakeTask{1, 2, 3, "c", 4, 5});
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 1u);
  EXPECT_EQ(in.map(kValuesFd)->entries.begin()->first, std::string(4, '\0'));  // entry 0 of the array
  EXPECT_EQ(U64s(in.map(kValuesFd)->entries.begin()->second)[0], 5u);
  EXPECT_EQ(ToLabelKey(shape.key, in.map(kValuesFd)->entries.begin()->first), "");
  EXPECT_EQ(StatOf(&in, kDropped), 0u);
}

TEST_F(CounterProgramTest, ValueFieldAddsAndNegativeIsADecodeError) {
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt_, "next_comm"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  auto value = IntegerField(*fmt_.FindField("prev_state"));  // long: signed
  ASSERT_TRUE(value.ok());
  CounterShape shape;
  shape.key = *layout;
  shape.value = *value;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), CounterValueBytes(true), 100);
  CommTable comms(NoProc);
  std::map<std::string, uint128> want;
  uint64_t errors = 0;
  const int64_t states[] = {0, 1, 5, -1, INT64_MIN, 1000000007, INT64_MAX / 4, -5};
  const char* names[] = {"a", "bb", "c"};
  int runs = 0;
  for (int64_t st : states) {
    for (const char* n : names) {
      const std::string rec = Switch("p", 1, 2, st, n, 3);
      RunProg(&in, *prog, rec, FakeTask{});
      ++runs;
      if (st < 0) {
        ++errors;
        continue;
      }
      std::string key;
      ASSERT_TRUE(labels.BuildKey(SampleOf(rec, FakeTask{}), &comms, &key));
      want[key] += static_cast<uint64_t>(st);
    }
  }
  std::map<std::string, uint128> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) got[ToLabelKey(*layout, k)] += WideAt(U64s(v), 0);
  EXPECT_TRUE(got == want);
  EXPECT_EQ(StatOf(&in, kDecodeErrors), errors);
  EXPECT_EQ(StatOf(&in, kRuns), static_cast<uint64_t>(runs));
}

TEST_F(CounterProgramTest, UnsignedValueFieldIsNeverADecodeError) {
  // An unsigned 8-byte field (here: prev_state read as unsigned) adds its full value.
  FieldRef v;
  v.name = "u";
  v.offset = 32;
  v.size = 8;
  v.is_signed = false;
  CounterShape shape;
  shape.value = v;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok());
  Interpreter in;
  AddMaps(&in, 0, CounterValueBytes(true), 1);
  RunProg(&in, *prog, Switch("p", 1, 2, -1, "n", 3), FakeTask{});
  RunProg(&in, *prog, Switch("p", 1, 2, 3, "n", 3), FakeTask{});
  EXPECT_EQ(StatOf(&in, kDecodeErrors), 0u);
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 1u);
  // 2^64 - 1 + 3: exact (a u64 sum wrapped to 2).
  EXPECT_TRUE(WideAt(U64s(in.map(kValuesFd)->entries.begin()->second), 0) == (static_cast<int128>(1) << 64) + 2);
}

// write()'s count summed read 1000, then 384 after one write of 2^64 - 616
// bytes. The program's sum is 128 bits wide: 2^64 + 384, with labels (the series created by the
// program, then added to) or without; and every state its stores leave the words in reads, from
// another CPU, as a sum the series held (WideStoreTrace) — a scrape never reads it lower than
// the scrape before.
TEST(CounterProgramWideTest, ValueSumsPastTwoToThe64) {
  const EventFormat write = Event("syscalls", "sys_enter_write");
  std::vector<LabelSpec> specs;
  specs.push_back(SourceLabel("pid", LabelSource::kPid));
  auto layout = LayoutKey(LabelSet(std::move(specs)));
  ASSERT_TRUE(layout.ok());
  for (bool labelled : {false, true}) {
    SCOPED_TRACE(labelled ? "labelled" : "no labels");
    CounterShape shape;
    shape.value = *IntegerField(*write.FindField("count"));
    if (labelled) shape.key = *layout;
    auto prog = EmitCounter(shape, Fds());
    ASSERT_TRUE(prog.ok()) << prog.status().ToString();
    Interpreter in;
    AddMaps(&in, shape.key.size, CounterValueBytes(true), 10);
    WideStoreTrace trace(&in, 0);
    auto run = [&](uint64_t count) {
      std::string rec(40, '\0');
      std::memcpy(rec.data() + 32, &count, 8);
      RunProg(&in, *prog, rec, FakeTask{7, 7, 0, "w", 0, 0});
    };
    auto sum = [&] {
      EXPECT_EQ(in.map(kValuesFd)->entries.size(), 1u);
      return WideAt(U64s(in.map(kValuesFd)->entries.begin()->second), 0);
    };
    for (int i = 0; i < 100; ++i) run(1);
    EXPECT_TRUE(sum() == 100);
    run(18446744073709551000ULL);  // 2^64 - 616
    EXPECT_TRUE(sum() == (static_cast<int128>(1) << 64) + 100 - 616);
    // Values that cross 2^63 boundaries on every add, and halves of the largest ones.
    const uint64_t extremes[] = {~uint64_t{0}, uint64_t{1} << 63, (uint64_t{1} << 63) + 1, 1, ~uint64_t{0} - 1};
    int128 want = sum();
    for (uint64_t v : extremes) {
      run(v);
      want += v;
      EXPECT_TRUE(sum() == want);
    }
    EXPECT_GT(trace.stores(), 100u);
    EXPECT_GT(trace.Check(), 0u);
  }
}

TEST_F(CounterProgramTest, FullMapCountsDropped) {
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt_, "next_pid"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok());
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 3);
  for (int pid = 0; pid < 10; ++pid) {
    for (int i = 0; i < 2; ++i) RunProg(&in, *prog, Switch("p", 1, 2, 3, "n", pid), FakeTask{});
  }
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 3u);
  for (const auto& [k, v] : in.map(kValuesFd)->entries) EXPECT_EQ(U64s(v)[0], 2u);
  EXPECT_EQ(StatOf(&in, kDropped), 14u);  // as CounterTest.CardinalityLimitDropsAndCounts
  EXPECT_EQ(StatOf(&in, kRuns), 20u);
}

TEST_F(CounterProgramTest, FilterSkipsTheUpdateButCountsTheRun) {
  auto filter = ParseFilter("prev_prio > 0 && next_comm ~ \"k*\"", fmt_);
  ASSERT_TRUE(filter.ok()) << filter.status().ToString();
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt_, "next_comm"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  CounterShape shape;
  shape.key = *layout;
  shape.filter = &*filter;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 100);
  CommTable comms(NoProc);
  std::map<std::string, uint64_t> want;
  std::mt19937_64 rng(3);
  const int kHits = 500;
  for (int i = 0; i < kHits; ++i) {
    const FakeTask t{1, 2, 0, "t", 0, 0};
    const std::string rec = RandomRecord(rng, t.tid);
    RunProg(&in, *prog, rec, t);
    if (!EvaluateFilter(*filter, AsBytes(rec), FilterContext{})) continue;
    std::string key;
    ASSERT_TRUE(labels.BuildKey(SampleOf(rec, t), &comms, &key));
    ++want[key];
  }
  std::map<std::string, uint64_t> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) got[ToLabelKey(*layout, k)] += U64s(v)[0];
  EXPECT_EQ(got, want);
  EXPECT_FALSE(want.empty());
  uint64_t passed = 0;
  for (const auto& [k, v] : want) passed += v;
  EXPECT_LT(passed, static_cast<uint64_t>(kHits));
  EXPECT_EQ(StatOf(&in, kRuns), static_cast<uint64_t>(kHits));
}

// __data_loc strings (up to 127 bytes: kStringSlotBytes) and byte arrays key as BuildKey does.
TEST(CounterStringsTest, DataLocStringsAndByteArrays) {
  auto f = testing::ParseSyntheticFormat(
      "\tfield:__data_loc char[] msg;\toffset:8;\tsize:4;\tsigned:0;\n"
      "\tfield:u8 addr[6];\toffset:12;\tsize:6;\tsigned:0;\n"
      "\tfield:s16 small;\toffset:18;\tsize:2;\tsigned:1;\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(*f, "msg"));
  specs.push_back(FieldLabel(*f, "addr"));
  specs.push_back(FieldLabel(*f, "small"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  ASSERT_EQ(layout->segments.size(), 3u);
  EXPECT_EQ(layout->segments[0].kind, KeySegment::Kind::kString);
  EXPECT_EQ(layout->segments[1].kind, KeySegment::Kind::kBytes);
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 100);
  CommTable comms(NoProc);
  std::map<std::string, uint64_t> want;
  const std::string msgs[] = {"", "hello", std::string(100, 'x'), std::string(127, 'y'), "hello"};
  int16_t small = -3;
  for (const std::string& m : msgs) {
    std::string rec(24, '\0');
    const uint32_t loc = static_cast<uint32_t>(m.size() + 1) << 16 | 24;
    std::memcpy(rec.data() + 8, &loc, 4);
    for (int i = 0; i < 6; ++i) rec[12 + i] = static_cast<char>(i == 0 ? 0 : 0xf0 + i + m.size() % 2);
    std::memcpy(rec.data() + 18, &small, 2);
    small = static_cast<int16_t>(-small);
    rec += m;
    rec.push_back('\0');
    rec.resize((rec.size() + 7) / 8 * 8, '\0');
    std::string key;
    ASSERT_TRUE(labels.BuildKey(SampleOf(rec, FakeTask{}), &comms, &key));
    ++want[key];
    RunProg(&in, *prog, rec, FakeTask{});
  }
  std::map<std::string, uint64_t> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) got[ToLabelKey(*layout, k)] += U64s(v)[0];
  EXPECT_EQ(got, want);
  EXPECT_EQ(want.size(), 5u);  // "hello" twice, with different small values
}

// ---------------------------------------------------------------------------------------------
// Histogram: differential against HistogramCollector.

TEST(HistogramProgramTest, SameBucketsAndSumAsHistogramCollector) {
  EventFormat fmt = Event("sched", "sched_switch");
  auto make_labels = [&] {
    std::vector<LabelSpec> specs;
    specs.push_back(FieldLabel(fmt, "next_comm"));
    specs.push_back(SourceLabel("cpu", LabelSource::kCpu));
    return LabelSet(std::move(specs));
  };
  for (const char* field : {"prev_state", "next_pid"}) {  // signed 8 and 4 bytes
    for (double scale : {1.0, 0.5, 1e-3}) {
      SCOPED_TRACE(std::string(field) + " scale " + std::to_string(scale));
      const Buckets buckets = *Buckets::Exp2(1, 1 << 20);
      const FieldFormat* vf = fmt.FindField(field);
      ASSERT_NE(vf, nullptr);
      HistogramCollector perf("h", "h", make_labels(), *FieldExtractor::Compile(*vf, LabelDecode::kAuto, nullptr),
                              scale, buckets, std::nullopt, 1000);
      LabelSet labels = make_labels();
      auto layout = LayoutKey(labels);
      ASSERT_TRUE(layout.ok());
      HistogramShape shape;
      shape.key = *layout;
      shape.value = *IntegerField(*vf);
      shape.thresholds = Thresholds(buckets, scale, vf->is_signed);
      auto prog = EmitHistogram(shape, Fds());
      ASSERT_TRUE(prog.ok()) << prog.status().ToString();
      Interpreter in;
      AddMaps(&in, layout->MapKeySize(), HistogramValueBytes(shape.thresholds.size(), vf->is_signed), 1000);
      CommTable comms(NoProc);
      std::mt19937_64 rng(11);
      const char* names[] = {"a", "b", "c"};
      const int kHits = 2000;
      for (int i = 0; i < kHits; ++i) {
        int64_t v = static_cast<int64_t>(rng() % (uint64_t{1} << (rng() % 24)));
        if (rng() % 8 == 0) v = -v;
        const std::string rec = Switch("p", 1, 2, v, names[rng() % 3], static_cast<int32_t>(v));
        FakeTask t{1, 2, static_cast<uint32_t>(rng() % 2), "t", 0, 0};
        perf.OnSample(0, SampleOf(rec, t), &comms);
        RunProg(&in, *prog, rec, t);
      }
      MetricSnapshot m = perf.Snapshot();
      ASSERT_EQ(m.series.size(), in.map(kValuesFd)->entries.size());
      std::map<LabelPairs, const SeriesSnapshot*> by_labels;
      for (const SeriesSnapshot& s : m.series) by_labels[s.labels] = &s;
      for (const auto& [k, v] : in.map(kValuesFd)->entries) {
        const LabelPairs lp = labels.Render(ToLabelKey(*layout, k));
        auto it = by_labels.find(lp);
        ASSERT_NE(it, by_labels.end());
        const std::vector<uint64_t> slots = U64s(v);
        ASSERT_EQ(slots.size(), shape.thresholds.size() + 1 + WideSumWords(vf->is_signed));
        const std::vector<uint64_t> counts(slots.begin(), slots.begin() + shape.thresholds.size() + 1);
        EXPECT_EQ(counts, it->second->bucket_counts);
        // bpf_metric.cc: sum = the exact raw sum rounded once × scale: the perf engine's, exactly.
        const double sum = ToDouble(WideAt(slots, shape.thresholds.size() + 1, vf->is_signed)) * scale;
        EXPECT_EQ(sum, it->second->sum);
      }
      EXPECT_EQ(StatOf(&in, kRuns), static_cast<uint64_t>(kHits));
      EXPECT_EQ(StatOf(&in, kDropped), 0u);
    }
  }
}

// A signed field's histogram keeps two wide sums, of the values >= 0 and of the negative ones'
// magnitudes: both exact far past 2^64, and each read whole by another CPU at every store
// (WideStoreTrace). _sum is their difference.
TEST(HistogramProgramTest, SignedSumsPastTwoToThe64) {
  HistogramShape shape;
  shape.value.name = "v";
  shape.value.offset = 8;
  shape.value.size = 8;
  shape.value.is_signed = true;
  shape.thresholds = Thresholds(*Buckets::Explicit({0}), 1, true);
  auto prog = EmitHistogram(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  const int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  const int64_t values[] = {kMax, kMin, -1, kMin, 5, kMax, kMin, kMax, -7, kMin, kMax, kMax};
  for (size_t which = 0; which < 2; ++which) {  // trace the sum of values >= 0, then the negative one
    SCOPED_TRACE(which == 0 ? "values >= 0" : "negative values");
    Interpreter in;
    AddMaps(&in, 0, HistogramValueBytes(shape.thresholds.size(), true), 1);
    WideStoreTrace trace(&in, shape.thresholds.size() + 1 + which * kWideWords);
    int128 want = 0;
    uint64_t at_most_zero = 0;
    for (int64_t v : values) {
      std::string rec(16, '\0');
      std::memcpy(rec.data() + 8, &v, 8);
      RunProg(&in, *prog, rec, FakeTask{});
      want += v;
      if (v <= 0) ++at_most_zero;
    }
    ASSERT_EQ(in.map(kValuesFd)->entries.size(), 1u);
    const std::vector<uint64_t> w = U64s(in.map(kValuesFd)->entries.begin()->second);
    ASSERT_EQ(w.size(), 2 + WideSumWords(true));
    EXPECT_EQ(w[0], at_most_zero);
    EXPECT_EQ(w[1], std::size(values) - at_most_zero);
    EXPECT_TRUE(WideAt(w, 2, true) == want);
    EXPECT_TRUE(WideAt(w, 2) == 5 * static_cast<int128>(kMax) + 5);
    EXPECT_TRUE(WideAt(w, 2 + kWideWords) == -(4 * static_cast<int128>(kMin)) + 8);
    EXPECT_GT(trace.Check(), 0u);
  }
}

TEST(HistogramProgramTest, FullMapCountsDropped) {
  EventFormat fmt = Event("sched", "sched_switch");
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt, "next_pid"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  HistogramShape shape;
  shape.key = *layout;
  shape.value = *IntegerField(*fmt.FindField("prev_prio"));
  shape.thresholds = Thresholds(*Buckets::Linear(0, 10, 5), 1, true);
  auto prog = EmitHistogram(shape, Fds());
  ASSERT_TRUE(prog.ok());
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), HistogramValueBytes(shape.thresholds.size(), true), 2);
  for (int pid = 0; pid < 5; ++pid) RunProg(&in, *prog, Switch("p", 1, 25, 0, "n", pid), FakeTask{});
  EXPECT_EQ(in.map(kValuesFd)->entries.size(), 2u);
  EXPECT_EQ(StatOf(&in, kDropped), 3u);
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    // 6 buckets, then the wide sums {commit, lo, announce} of values >= 0 and of negative ones.
    EXPECT_EQ(U64s(v), (std::vector<uint64_t>{0, 0, 0, 1, 0, 0, 0, 25, 0, 0, 0, 0}));
  }
}

// ---------------------------------------------------------------------------------------------
// LayoutKey and ToLabelKey.

TEST(LayoutKeyTest, UnimplementedSaysWhichLabel) {
  EventFormat sw = Event("sched", "sched_switch");
  {
    std::vector<LabelSpec> specs;
    specs.push_back(FieldLabel(sw, "common_flags"));
    auto l = LayoutKey(LabelSet(std::move(specs)));
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(l.status().message().find("common_flags"), std::string::npos) << l.status().message();
  }
  {
    std::vector<LabelSpec> specs;
    specs.push_back(FieldLabel(sw, "common_pid"));
    auto l = LayoutKey(LabelSet(std::move(specs)));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_TRUE(l->segments[0].field.current_tid);
  }
  {
    auto f = testing::ParseSyntheticFormat(
        "\tfield:char big[65];\toffset:8;\tsize:65;\tsigned:0;\n"
        "\tfield:char ok[64];\toffset:80;\tsize:64;\tsigned:0;\n");
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    std::vector<LabelSpec> specs;
    specs.push_back(FieldLabel(*f, "big"));
    auto l = LayoutKey(LabelSet(std::move(specs)));
    ASSERT_FALSE(l.ok());
    EXPECT_EQ(l.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(l.status().message().find("big"), std::string::npos) << l.status().message();
    EXPECT_NE(l.status().message().find("65 bytes"), std::string::npos) << l.status().message();
    std::vector<LabelSpec> ok;
    ok.push_back(FieldLabel(*f, "ok"));
    auto l2 = LayoutKey(LabelSet(std::move(ok)));
    ASSERT_TRUE(l2.ok()) << l2.status().ToString();
    EXPECT_EQ(l2->size, 64u);
  }
  {
    // 16 comm labels are 256 bytes: the most a key takes; one more is too many.
    std::vector<LabelSpec> specs;
    for (int i = 0; i < 16; ++i) specs.push_back(SourceLabel("c" + std::to_string(i), LabelSource::kComm));
    auto l = LayoutKey(LabelSet(specs));
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->size, kMaxKeyBytes);
    specs.push_back(SourceLabel("pid", LabelSource::kPid));
    auto l2 = LayoutKey(LabelSet(specs));
    ASSERT_FALSE(l2.ok());
    EXPECT_EQ(l2.status().code(), StatusCode::kUnimplemented);
    EXPECT_NE(l2.status().message().find("264"), std::string::npos) << l2.status().message();
  }
}

TEST(LayoutKeyTest, ToLabelKeyOnTruncatedKeysReadsZeros) {
  EventFormat sw = Event("sched", "sched_switch");
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(sw, "prev_comm"));
  specs.push_back(FieldLabel(sw, "prev_pid"));
  specs.push_back(SourceLabel("comm", LabelSource::kComm));
  specs.push_back(SourceLabel("pid", LabelSource::kPid));
  specs.push_back(SourceLabel("cgroup", LabelSource::kCgroup));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  std::string full(layout->size, '\0');
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<char>('a' + i % 26);
  for (size_t n = 0; n <= full.size() + 8; ++n) {
    std::string cut = full.substr(0, std::min(n, full.size()));
    std::string padded = cut;
    padded.resize(full.size(), '\0');
    const std::string got = ToLabelKey(*layout, cut);
    EXPECT_EQ(got, ToLabelKey(*layout, padded)) << n;
    (void)labels.Render(got);  // renders without reading past the key
  }
  EXPECT_EQ(ToLabelKey(*layout, ""), ToLabelKey(*layout, std::string(layout->size, '\0')));
}

// ---------------------------------------------------------------------------------------------
// Map-access defects: keys with bytes from past a string's end, and ENOMEM counted as a
// cardinality drop (each fails on the program shapes before the fix).

// sched_switch prev_comm "abc\0xyz" and "abc\0qqq": one series, not one per stale tail (the
// program used to key all 16 bytes).
TEST_F(CounterProgramTest, CharArrayKeysStopAtTheNul) {
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt_, "prev_comm"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 100);
  RunProg(&in, *prog, Switch(std::string("abc\0xyz", 7), 0, 0, 0, "n", 1), FakeTask{});
  RunProg(&in, *prog, Switch(std::string("abc\0qqqqqqqqqqqq", 16), 0, 0, 0, "n", 1), FakeTask{});
  RunProg(&in, *prog, Switch("abc", 0, 0, 0, "n", 1), FakeTask{});
  RunProg(&in, *prog, Switch("exactly16bytes!!", 0, 0, 0, "n", 1), FakeTask{});
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 2u);
  std::map<std::string, uint64_t> got;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    got[labels.Render(ToLabelKey(*layout, k))[0].second] = U64s(v)[0];
  }
  EXPECT_EQ(got, (std::map<std::string, uint64_t>{{"abc", 3}, {"exactly16bytes!!", 1}}));
}

// A __data_loc string is read for at most its length (loc >> 16), as the perf decoder reads it:
// a length of 3 over "abcdef\0" is "abc" on both engines (the program used to read to the NUL).
TEST(CounterStringsTest, DataLocReadIsBoundedByItsLength) {
  auto f = testing::ParseSyntheticFormat("\tfield:__data_loc char[] msg;\toffset:8;\tsize:4;\tsigned:0;\n");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(*f, "msg"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 100);
  CommTable comms(NoProc);
  std::map<std::string, uint64_t> want;
  // (length in the __data_loc word, bytes at the offset)
  const std::pair<uint32_t, std::string> cases[] = {{3, std::string("abcdef\0", 7)},
                                                    {0, std::string("zzz\0", 4)},
                                                    {7, std::string("abcdef\0", 7)},
                                                    {128, std::string(127, 'q') + '\0'}};
  for (const auto& [len, bytes] : cases) {
    std::string rec(16, '\0');
    const uint32_t loc = len << 16 | 16;
    std::memcpy(rec.data() + 8, &loc, 4);
    rec += bytes;
    rec.resize((rec.size() + 7) / 8 * 8 + 8, '\0');
    std::string key;
    ASSERT_TRUE(labels.BuildKey(SampleOf(rec, FakeTask{}), &comms, &key));
    ++want[key];
    RunProg(&in, *prog, rec, FakeTask{});
  }
  std::map<std::string, uint64_t> got;
  std::vector<std::string> rendered;
  for (const auto& [k, v] : in.map(kValuesFd)->entries) {
    got[ToLabelKey(*layout, k)] += U64s(v)[0];
    rendered.push_back(labels.Render(ToLabelKey(*layout, k))[0].second);
  }
  EXPECT_EQ(got, want);
  EXPECT_NE(std::find(rendered.begin(), rendered.end(), "abc"), rendered.end());
  EXPECT_NE(std::find(rendered.begin(), rendered.end(), ""), rendered.end());
}

// ENOMEM from the kernel's element allocation is kNoMemory, not a cardinality drop.
TEST_F(CounterProgramTest, EnomemIsCountedApartFromDrops) {
  std::vector<LabelSpec> specs;
  specs.push_back(FieldLabel(fmt_, "next_pid"));
  LabelSet labels(std::move(specs));
  auto layout = LayoutKey(labels);
  ASSERT_TRUE(layout.ok());
  CounterShape shape;
  shape.key = *layout;
  auto prog = EmitCounter(shape, Fds());
  ASSERT_TRUE(prog.ok()) << prog.status().ToString();
  Interpreter in;
  AddMaps(&in, layout->MapKeySize(), 8, 1);
  RunProg(&in, *prog, Switch("a", 0, 0, 0, "n", 1), FakeTask{});
  in.map(kValuesFd)->insert_errno = ENOMEM;
  RunProg(&in, *prog, Switch("a", 0, 0, 0, "n", 1), FakeTask{});  // existing: still counted
  RunProg(&in, *prog, Switch("a", 0, 0, 0, "n", 2), FakeTask{});  // full (max 1): a drop
  in.map(kValuesFd)->max_entries = 10;
  RunProg(&in, *prog, Switch("a", 0, 0, 0, "n", 3), FakeTask{});  // room, but no memory
  EXPECT_EQ(StatOf(&in, kDropped), 1u);
  EXPECT_EQ(StatOf(&in, kNoMemory), 1u);
  ASSERT_EQ(in.map(kValuesFd)->entries.size(), 1u);
  EXPECT_EQ(U64s(in.map(kValuesFd)->entries.begin()->second)[0], 2u);
}

}  // namespace
}  // namespace tpe::bpf
