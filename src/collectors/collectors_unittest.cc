#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>

#include "collectors/comm_table.h"
#include "collectors/counter.h"
#include "collectors/label_set.h"
#include "collectors/snapshot.h"
#include "common/file_util.h"
#include "common/utf8.h"
#include "format/event_format.h"
#include "testing/test_util.h"

namespace tpe {
namespace {

int NoProc(uint32_t, char*, size_t) { return -1; }

TEST(CommTableTest, ForkInheritsRenameOverridesExitForgetsLater) {
  CommTable t(NoProc);
  EXPECT_EQ(t.Lookup(1), "[unknown]");
  t.OnComm(1, "bash");
  t.OnFork(1, 2);
  EXPECT_EQ(t.Lookup(2), "bash");
  t.OnComm(2, "tpe_child_with_a_long_name");  // truncated to TASK_COMM_LEN - 1
  EXPECT_EQ(t.Lookup(2), "tpe_child_with_");
  t.OnExit(2);
  EXPECT_EQ(t.Lookup(2), "tpe_child_with_");  // still right for samples that follow the exit
  for (uint32_t i = 0; i < CommTable::kExitGrace; ++i) {
    t.OnFork(1, 1000 + i);
    t.OnExit(1000 + i);
  }
  EXPECT_EQ(t.Lookup(2), "[unknown]");  // forgotten after the grace period
}

TEST(CommTableTest, ReusedTidIsNotForgotten) {
  CommTable t(NoProc);
  t.OnComm(5, "old");
  t.OnExit(5);
  t.OnComm(5, "new");  // tid reused
  for (uint32_t i = 0; i <= CommTable::kExitGrace; ++i) {
    t.OnComm(100 + i, "x");
    t.OnExit(100 + i);
  }
  EXPECT_EQ(t.Lookup(5), "new");
}

// A task that predates the daemon, never named by a record nor looked up, is known to have exited
// once its PERF_RECORD_EXIT comes (its pid/tid series go), with its comm read at the exit.
TEST(CommTableTest, ExitOfATaskNeverSeenBeforeIsRemembered) {
  CommTable gone(NoProc);
  gone.OnExit(7);
  EXPECT_TRUE(gone.HasExited(7));
  EXPECT_EQ(gone.Lookup(7), "[unknown]");
  CommTable zombie([](uint32_t, char* out, size_t) {
    std::memcpy(out, "sshd", 4);
    return 4;
  });
  zombie.OnExit(9);
  EXPECT_TRUE(zombie.HasExited(9));
  EXPECT_EQ(zombie.Lookup(9), "sshd");
  zombie.OnComm(9, "new");  // tid reused
  EXPECT_FALSE(zombie.HasExited(9));
}

// After a ring lost records, a name set before the loss may be stale (a lost exec or rename):
// it is checked against /proc once; a task gone by then is "[unknown]", not its parent's name.
TEST(CommTableTest, NamesSetBeforeALossAreCheckedOnce) {
  std::map<uint32_t, std::string> proc = {{1, "bash"}, {3, "python3"}};
  int reads = 0;
  CommTable t([&](uint32_t tid, char* out, size_t cap) {
    ++reads;
    auto it = proc.find(tid);
    if (it == proc.end()) return -1;
    const size_t n = std::min(cap, it->second.size());
    std::memcpy(out, it->second.data(), n);
    return static_cast<int>(n);
  });
  t.OnComm(1, "bash");
  t.OnFork(1, 2);  // then lost: 2's exec of "taskset" and rename to "tpe_soak_exact"
  t.OnComm(3, "python3");
  t.OnComm(4, "done");
  t.OnExit(4);  // final before the loss
  reads = 0;
  t.OnLost();
  EXPECT_EQ(t.Lookup(2), "[unknown]");  // gone from /proc: not "bash"
  EXPECT_EQ(t.Lookup(3), "python3");    // alive: /proc agrees
  EXPECT_EQ(t.Lookup(4), "done");
  EXPECT_EQ(reads, 2);
  EXPECT_EQ(t.Lookup(3), "python3");  // checked once per loss
  EXPECT_EQ(t.Lookup(2), "[unknown]");
  EXPECT_EQ(reads, 2);
  t.OnComm(5, "after");  // named by a record after the loss: trusted
  EXPECT_EQ(t.Lookup(5), "after");
  EXPECT_EQ(reads, 2);
  t.OnLost();
  proc[3] = "renamed";
  EXPECT_EQ(t.Lookup(3), "renamed");
  EXPECT_EQ(reads, 3);
}

TEST(CommTableTest, FallbackReadsProcOnce) {
  int calls = 0;
  CommTable t([&](uint32_t, char* out, size_t) {
    ++calls;
    std::memcpy(out, "sshd", 4);
    return 4;
  });
  EXPECT_EQ(t.Lookup(9), "sshd");
  EXPECT_EQ(t.Lookup(9), "sshd");
  EXPECT_EQ(calls, 1);
  // A task gone from /proc is remembered as gone, not looked up again for each sample.
  int misses = 0;
  CommTable gone([&](uint32_t, char*, size_t) {
    ++misses;
    return -1;
  });
  EXPECT_EQ(gone.Lookup(77), "[unknown]");
  EXPECT_EQ(gone.Lookup(77), "[unknown]");
  EXPECT_EQ(misses, 1);
  gone.OnComm(77, "came_back");  // a later COMM record still wins
  EXPECT_EQ(gone.Lookup(77), "came_back");
  char buf[16];
  EXPECT_GT(CommTable::ReadProcComm(static_cast<uint32_t>(getpid()), buf, sizeof(buf)), 0);
}

EventFormat SchedWaking() {
  return *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/sched/sched_waking/format"), "x");
}

std::vector<uint8_t> WakingRaw(const char* comm, int32_t pid) {
  std::vector<uint8_t> raw(40, 0);
  std::strncpy(reinterpret_cast<char*>(&raw[8]), comm, 16);
  std::memcpy(&raw[24], &pid, 4);
  return raw;
}

TEST(CounterTest, CountsPerLabelSetAndRendersLabels) {
  EventFormat f = SchedWaking();
  std::vector<LabelSpec> specs(3);
  specs[0].name = "comm";
  specs[0].source = LabelSource::kComm;
  specs[1].name = "target";
  specs[1].extractor = *FieldExtractor::Compile(*f.FindField("comm"), LabelDecode::kAuto, nullptr);
  specs[2].name = "cpu";
  specs[2].source = LabelSource::kCpu;
  CounterCollector c("wakeups_total", "help", LabelSet(std::move(specs)), 100);
  EXPECT_TRUE(c.NeedsComm());
  CommTable comms(NoProc);
  comms.OnComm(7, "waker");
  auto a = WakingRaw("sleeper", 8);
  auto b = WakingRaw("other", 9);
  Sample s;
  s.tid = 7;
  s.cpu = 1;
  s.raw = Bytes(a);
  for (int i = 0; i < 5; ++i) c.OnSample(0, s, &comms);
  s.raw = Bytes(b);
  for (int i = 0; i < 3; ++i) c.OnSample(0, s, &comms);
  MetricSnapshot m = c.Snapshot();
  ASSERT_EQ(m.series.size(), 2u);
  EXPECT_EQ(m.series[0].labels, (LabelPairs{{"comm", "waker"}, {"target", "sleeper"}, {"cpu", "1"}}));
  EXPECT_EQ(m.series[0].value, 5);
  EXPECT_EQ(m.series[1].labels[1].second, "other");
  EXPECT_EQ(m.series[1].value, 3);
  EXPECT_EQ(c.series_dropped(), 0u);
}

// A counter labelled by sched_waking's pid field, with at most `max_series` series.
CounterCollector PidCounter(size_t max_series) {
  EventFormat f = SchedWaking();
  std::vector<LabelSpec> specs(1);
  specs[0].name = "pid";
  specs[0].extractor = *FieldExtractor::Compile(*f.FindField("pid"), LabelDecode::kAuto, nullptr);
  return CounterCollector("x_total", "h", LabelSet(std::move(specs)), max_series);
}

TEST(CounterTest, CardinalityLimitDropsAndCounts) {
  CounterCollector c = PidCounter(3);
  CommTable comms(NoProc);
  for (int pid = 0; pid < 10; ++pid) {
    auto raw = WakingRaw("t", pid);
    Sample s;
    s.raw = Bytes(raw);
    c.OnSample(0, s, &comms);
    c.OnSample(0, s, &comms);
  }
  EXPECT_EQ(c.Snapshot().series.size(), 3u);
  EXPECT_EQ(c.series_dropped(), 14u);
}

TEST(CounterTest, ShortRawIsADecodeErrorNotACrash) {
  CounterCollector c = PidCounter(3);
  CommTable comms(NoProc);
  std::vector<uint8_t> raw(12, 0);
  Sample s;
  s.raw = Bytes(raw);
  c.OnSample(0, s, &comms);
  EXPECT_EQ(c.decode_errors(), 1u);
  EXPECT_TRUE(c.Snapshot().series.empty());
}

TEST(CounterTest, CountingModeReadsTheKernelCount) {
  uint64_t kernel = 41;
  CounterCollector c("cs_total", "h", [&] { return ++kernel; });
  EXPECT_TRUE(c.counting_mode());
  MetricSnapshot m = c.Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_TRUE(m.series[0].labels.empty());
  EXPECT_EQ(m.series[0].value, 42);
}

// raw_syscalls:sys_exit: long id at 8, long ret at 16 (signed).
std::vector<uint8_t> SysExitRaw(int64_t id, int64_t ret) {
  std::vector<uint8_t> raw(24, 0);
  std::memcpy(&raw[8], &id, 8);
  std::memcpy(&raw[16], &ret, 8);
  return raw;
}

TEST(CounterTest, ValueModeAddsFieldTimesScaleAndSkipsNegatives) {
  EventFormat f =
      *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/raw_syscalls/sys_exit/format"), "x");
  std::vector<LabelSpec> specs(1);
  specs[0].name = "nr";
  specs[0].extractor = *FieldExtractor::Compile(*f.FindField("id"), LabelDecode::kAuto, nullptr);
  CounterCollector c("bytes_total", "h", LabelSet(std::move(specs)), 100,
                     *FieldExtractor::Compile(*f.FindField("ret"), LabelDecode::kAuto, nullptr), 0.5);
  EXPECT_FALSE(c.counting_mode());
  CommTable comms(NoProc);
  Sample s;
  auto r0 = SysExitRaw(0, 1000);
  s.raw = Bytes(r0);
  for (int i = 0; i < 37; ++i) c.OnSample(0, s, &comms);
  auto r1 = SysExitRaw(0, 7);
  s.raw = Bytes(r1);
  for (int i = 0; i < 5; ++i) c.OnSample(0, s, &comms);
  auto neg = SysExitRaw(0, -11);  // -EAGAIN: skipped and counted, never subtracted
  s.raw = Bytes(neg);
  c.OnSample(0, s, &comms);
  auto zero = SysExitRaw(1, 0);  // adds 0: the series exists with value 0
  s.raw = Bytes(zero);
  c.OnSample(0, s, &comms);
  std::vector<uint8_t> shortraw(20, 0);  // ret outside the payload
  s.raw = Bytes(shortraw);
  c.OnSample(0, s, &comms);
  MetricSnapshot m = c.Snapshot();
  ASSERT_EQ(m.series.size(), 2u);
  EXPECT_EQ(m.series[0].labels, (LabelPairs{{"nr", "0"}}));
  EXPECT_EQ(m.series[0].value, (37 * 1000 + 5 * 7) * 0.5);
  EXPECT_EQ(m.series[1].value, 0);
  EXPECT_EQ(c.decode_errors(), 2u);
}

TEST(CounterTest, ValueModeWithoutLabelsIsOneSampledSeries) {
  EventFormat f =
      *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/raw_syscalls/sys_exit/format"), "x");
  CounterCollector c("bytes_total", "h", LabelSet(), 100,
                     *FieldExtractor::Compile(*f.FindField("ret"), LabelDecode::kAuto, nullptr), 1);
  EXPECT_FALSE(c.counting_mode());
  CommTable comms(NoProc);
  Sample s;
  auto r = SysExitRaw(0, 4096);
  s.raw = Bytes(r);
  c.OnSample(0, s, &comms);
  c.OnSample(0, s, &comms);
  MetricSnapshot m = c.Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_TRUE(m.series[0].labels.empty());
  EXPECT_EQ(m.series[0].value, 8192);
}

// A counter summing write()'s count read 1000, then 384 after one write of
// 2^64 - 616 bytes (any user can ask; it fails, the tracepoint still fires): the u64 sum wrapped
// and the counter went backwards. The sum is 128 bits wide now: 2^64 + 384, as the nearest
// double.
TEST(CounterTest, ValueSumsDoNotWrapPastTwoToThe64) {
  EventFormat f =
      *ParseFormat(*ReadFileToString(testing::DataDir() + "/linux-6.18/events/syscalls/sys_enter_write/format"), "x");
  CounterCollector c("write_bytes_total", "h", LabelSet(), 100,
                     *FieldExtractor::Compile(*f.FindField("count"), LabelDecode::kAuto, nullptr), 1);
  CounterCollector half("write_half_total", "h", LabelSet(), 100,
                        *FieldExtractor::Compile(*f.FindField("count"), LabelDecode::kAuto, nullptr), 0.5);
  CommTable comms(NoProc);
  std::vector<uint8_t> raw(40, 0);
  Sample s;
  s.raw = Bytes(raw);
  auto write = [&](uint64_t count) {
    std::memcpy(&raw[32], &count, 8);
    c.OnSample(0, s, &comms);
    half.OnSample(0, s, &comms);
  };
  for (int i = 0; i < 1000; ++i) write(1);
  ASSERT_EQ(c.Snapshot().series.size(), 1u);
  const double before = c.Snapshot().series[0].value;
  EXPECT_EQ(before, 1000);
  write(18446744073709551000ULL);
  const double after = c.Snapshot().series[0].value;
  EXPECT_GE(after, before);
  EXPECT_EQ(after, 1000 + 18446744073709551000.0);  // 2^64 + 384 rounds to 2^64
  EXPECT_EQ(after, 0x1p64);
  EXPECT_EQ(half.Snapshot().series[0].value, 0x1p63);
  write(~uint64_t{0});
  write(~uint64_t{0});
  EXPECT_EQ(c.Snapshot().series[0].value, 0x1p64 * 3);  // exact 3·2^64 + 382, nearest double
  EXPECT_EQ(c.decode_errors(), 0u);
}

TEST(LabelSetTest, CgroupLabelKeysTheIdAndRendersThePathAtScrape) {
  int walks = 0;
  auto resolver =
      std::make_shared<CgroupResolver>(testing::DataDir(),  // any directory: ids come from the injected function
                                       [&](const std::string& p) -> std::optional<uint64_t> {
                                         if (p == testing::DataDir()) ++walks;
                                         if (p == testing::DataDir()) return 1;
                                         if (p == testing::DataDir() + "/linux-6.18") return 77;
                                         return std::nullopt;
                                       });
  std::vector<LabelSpec> specs(2);
  specs[0].name = "cgroup";
  specs[0].source = LabelSource::kCgroup;
  specs[0].cgroups = resolver;
  specs[1].name = "cpu";
  specs[1].source = LabelSource::kCpu;
  LabelSet set(std::move(specs));
  EXPECT_TRUE(set.needs_cgroup());
  EXPECT_FALSE(set.needs_comm());
  Sample s;
  s.cgroup_id = 77;
  s.cpu = 3;
  std::string key;
  ASSERT_TRUE(set.BuildKey(s, nullptr, &key));
  ASSERT_EQ(key.size(), 12u);  // u64 id + u32 cpu: no lookup on the hot path
  uint64_t id = 0;
  std::memcpy(&id, key.data(), 8);
  EXPECT_EQ(id, 77u);
  EXPECT_EQ(set.KeySize(key + "tail"), 12u);
  EXPECT_EQ(walks, 0);
  EXPECT_EQ(set.Render(key), (LabelPairs{{"cgroup", "/linux-6.18"}, {"cpu", "3"}}));
  s.cgroup_id = 5;  // not in a fresh walk either: removed, "unknown" (CgroupResolver::kUnknown)
  ASSERT_TRUE(set.BuildKey(s, nullptr, &key));
  EXPECT_EQ(set.Render(key)[0].second, "unknown");
  EXPECT_EQ(walks, 2);
  EXPECT_EQ(ParseLabelSource("cgroup"), LabelSource::kCgroup);
  // Without a resolver: numbers.
  std::vector<LabelSpec> bare(1);
  bare[0].name = "cgroup";
  bare[0].source = LabelSource::kCgroup;
  LabelSet plain(std::move(bare));
  s.cgroup_id = 77;
  ASSERT_TRUE(plain.BuildKey(s, nullptr, &key));
  EXPECT_EQ(plain.Render(key), (LabelPairs{{"cgroup", "77"}}));
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

// Property: whatever bytes tasks put in their comm, the merged snapshot has no two series with
// one rendered label set, and no count is lost or doubled by merging. Comms are drawn from bytes
// that render alike (0xff, 0xfe and the 3-byte U+FFFD all render as U+FFFD).
TEST(MergeSeriesByLabelsTest, NoTwoSeriesShareALabelSetAndCountsAreKept) {
  std::vector<LabelSpec> specs(1);
  specs[0].name = "comm";
  specs[0].source = LabelSource::kComm;
  CounterCollector c("calls_total", "help", LabelSet(std::move(specs)), 100000);
  CommTable comms(NoProc);
  const std::vector<std::string> pieces = {"t", "\xff", "\xfe", "\xef\xbf\xbd", "\xc3", "\xc3\xa9", "\x80"};
  std::mt19937 rng(17);
  uint64_t total = 0;
  for (uint32_t tid = 1; tid <= 2000; ++tid) {
    std::string comm;
    for (size_t n = rng() % 5; n > 0; --n) comm += pieces[rng() % pieces.size()];
    comm.resize(std::min<size_t>(comm.size(), 15));
    comms.OnComm(tid, comm);
    auto raw = WakingRaw("x", 1);
    Sample s;
    s.tid = tid;
    s.raw = Bytes(raw);
    const int calls = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < calls; ++i) c.OnSample(0, s, &comms);
    total += static_cast<uint64_t>(calls);
  }
  MetricSnapshot m = c.Snapshot();
  MergeSeriesByLabels(&m);
  std::set<LabelPairs> seen;
  double sum = 0;
  for (const auto& s : m.series) {
    EXPECT_TRUE(seen.insert(s.labels).second) << "duplicate comm=" << s.labels[0].second;
    EXPECT_TRUE(IsValidUtf8(s.labels[0].second));
    sum += s.value;
  }
  EXPECT_EQ(sum, static_cast<double>(total));
}

// Gauges: inflight and up/down series of one label set add; max keeps the larger, min the
// smaller, last the first.
TEST(MergeSeriesByLabelsTest, GaugesCombineAsTheirKindSays) {
  using Combine = MetricSnapshot::Combine;
  const std::pair<Combine, double> cases[] = {
      {Combine::kAdd, 12}, {Combine::kMax, 7}, {Combine::kMin, 2}, {Combine::kFirst, 3}};
  for (const auto& [combine, want] : cases) {
    MetricSnapshot m;
    m.kind = MetricKind::kGauge;
    m.combine = combine;
    for (double v : {3.0, 7.0, 2.0}) {
      SeriesSnapshot s;
      s.labels = {{"comm", "\uFFFD"}};
      s.value = v;
      m.series.push_back(s);
    }
    MergeSeriesByLabels(&m);
    ASSERT_EQ(m.series.size(), 1u);
    EXPECT_EQ(m.series[0].value, want) << static_cast<int>(combine);
  }
}

TEST(MergeSeriesByLabelsTest, HistogramsAddCountSumAndEveryBucket) {
  MetricSnapshot m;
  m.kind = MetricKind::kHistogram;
  m.bucket_bounds = {1, 2};
  m.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {1, 0, 2}, 7.5, 3, std::nullopt});
  m.series.push_back(SeriesSnapshot{{{"cgroup", "/y"}}, 0, {0, 1, 0}, 1.5, 1, std::nullopt});
  m.series.push_back(SeriesSnapshot{{{"cgroup", "/x"}}, 0, {0, 4, 1}, 9, 5, std::nullopt});
  MergeSeriesByLabels(&m);
  ASSERT_EQ(m.series.size(), 2u);
  EXPECT_EQ(m.series[0].labels[0].second, "/x");
  EXPECT_EQ(m.series[0].bucket_counts, (std::vector<uint64_t>{1, 4, 3}));
  EXPECT_EQ(m.series[0].sum, 16.5);
  EXPECT_EQ(m.series[0].count, 8u);
  EXPECT_EQ(m.series[1].labels[0].second, "/y");
  EXPECT_EQ(m.series[1].count, 1u);
}

}  // namespace
}  // namespace tpe
