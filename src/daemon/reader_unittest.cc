#include "daemon/reader.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "collectors/counter.h"
#include "collectors/latency.h"
#include "collectors/profile.h"
#include "perf/records.h"
#include "testing/perf_records.h"

namespace tpe {
namespace {

constexpr size_t kData = 4096;

// A synthetic perf mmap: metadata page + one data page, written like the kernel writes.
struct FakeMmap {
  uint8_t* base;
  uint64_t head = 0;
  FakeMmap() {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    base =
        static_cast<uint8_t*>(mmap(nullptr, page + kData, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    auto* meta = reinterpret_cast<perf_event_mmap_page*>(base);
    meta->data_offset = page;
    meta->data_size = kData;
  }
  perf_event_mmap_page* meta() { return reinterpret_cast<perf_event_mmap_page*>(base); }
  void Put(const std::vector<uint8_t>& rec) {
    uint8_t* data = base + meta()->data_offset;
    for (uint8_t b : rec) data[head++ % kData] = b;
    meta()->data_head = head;
  }
  Mmap Take() { return Mmap(base, static_cast<size_t>(sysconf(_SC_PAGESIZE)) + kData); }
};

using testing::AppendValue;
using testing::MakeRecord;

std::vector<uint8_t> SampleId(uint32_t tid, uint64_t time, uint64_t id) {
  std::vector<uint8_t> b;
  AppendValue(&b, tid);
  AppendValue(&b, tid);
  AppendValue(&b, time);
  AppendValue(&b, id);
  return b;
}
std::vector<uint8_t> Comm(uint32_t tid, const char* comm, uint64_t time) {
  std::vector<uint8_t> b;
  AppendValue(&b, tid);
  AppendValue(&b, tid);
  char name[16] = {};
  std::strncpy(name, comm, 15);
  b.insert(b.end(), name, name + 16);
  auto id = SampleId(tid, time, 0);
  b.insert(b.end(), id.begin(), id.end());
  return MakeRecord(PERF_RECORD_COMM, b);
}
std::vector<uint8_t> Fork(uint32_t pid, uint32_t ppid, uint64_t time) {
  std::vector<uint8_t> b;
  for (uint32_t v : {pid, ppid, pid, ppid}) AppendValue(&b, v);
  AppendValue(&b, time);
  auto id = SampleId(pid, time, 0);
  b.insert(b.end(), id.begin(), id.end());
  return MakeRecord(PERF_RECORD_FORK, b);
}
std::vector<uint8_t> SampleRec(uint64_t id, uint32_t tid, uint64_t time) {
  std::vector<uint8_t> b;
  AppendValue(&b, id);
  AppendValue(&b, tid);
  AppendValue(&b, tid);
  AppendValue(&b, time);
  AppendValue(&b, uint32_t{12});
  b.resize(b.size() + 12, 0);
  return MakeRecord(PERF_RECORD_SAMPLE, b);
}
std::vector<uint8_t> Lost(uint64_t id, uint64_t n, uint64_t time) {
  std::vector<uint8_t> b;
  AppendValue(&b, id);
  AppendValue(&b, n);
  auto sid = SampleId(0, time, id);
  b.insert(b.end(), sid.begin(), sid.end());
  return MakeRecord(PERF_RECORD_LOST, b);
}

struct Fixture {
  Plan plan;
  std::deque<CpuRing> rings;
  FakeMmap m0, m1;
  CounterCollector* counter;
  EventPlan* ev;

  Fixture() {
    auto e = std::make_unique<EventPlan>();
    e->ids = {100, 101};
    e->sampled = true;
    std::vector<LabelSpec> specs(1);
    specs[0].name = "comm";
    specs[0].source = LabelSource::kComm;
    auto c = std::make_unique<CounterCollector>("calls_total", "h", LabelSet(std::move(specs)), 10);
    counter = c.get();
    e->consumers.emplace_back(c.get(), 0);
    ev = e.get();
    plan.events.push_back(std::move(e));
    plan.AddMetric(std::move(c), "");
    plan.needs_comm = true;
  }
  void MapRings() {
    for (FakeMmap* m : {&m0, &m1}) {
      CpuRing& r = rings.emplace_back();
      r.cpu = static_cast<int>(rings.size() - 1);
      r.ring = std::make_unique<RingBuffer>(RingBuffer::FromMapping(-1, m->Take()));
    }
  }
};

// The task renames itself (PERF_RECORD_COMM on CPU 0) and then makes its calls on CPU 1. CPU 1's
// ring is read in the same round as CPU 0's, but the merge by timestamp must still apply the
// rename first: every sample is counted under the new name.
TEST(ReaderTest, CommRecordOnOneCpuAppliesToLaterSamplesOnAnother) {
  Fixture f;
  f.m0.Put(Comm(5, "renamed", 100));
  for (uint64_t t = 0; t < 7; ++t) f.m1.Put(SampleRec(101, 5, 150 + t));
  f.m0.Put(SampleRec(100, 5, 300));
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  reader.comms().OnComm(5, "before");
  reader.Round(/*flush_all=*/true);  // everything, still merged in timestamp order
  MetricSnapshot m = f.counter->Snapshot();
  ASSERT_EQ(m.series.size(), 1u);
  EXPECT_EQ(m.series[0].labels[0].second, "renamed");
  EXPECT_EQ(m.series[0].value, 8);
  EXPECT_EQ(f.ev->samples.Get(), 8u);
  // data_tail released past everything consumed.
  EXPECT_EQ(f.m0.meta()->data_tail, f.m0.head);
  EXPECT_EQ(f.m1.meta()->data_tail, f.m1.head);
}

// Task records teach ProcessImages only while the plan has events that learn mappings (a profile
// with user frames): without one, a fork neither reads its parent's /proc/PID/maps nor keeps an
// image; when a reload drops the last such event, what was learnt is forgotten.
TEST(ReaderTest, ProcessImagesLearnOnlyForPlansThatNameUserFrames) {
  for (bool learns : {false, true}) {
    SCOPED_TRACE(learns);
    Fixture f;
    f.ev->mmap_tracker = learns;
    f.m0.Put(Fork(7, 0, 100));
    f.m1.Put(Fork(8, 0, 110));
    f.MapRings();
    MappedFiles files;
    ProcessImages images(&files);
    Reader reader(&f.plan, &f.rings, &images);
    reader.Round(/*flush_all=*/true);
    EXPECT_EQ(images.stats().processes, learns ? 2u : 0u);
    EXPECT_EQ(images.Current(7).has_value(), learns);
    f.ev->mmap_tracker = false;
    reader.SetPlan(&f.plan);
    EXPECT_EQ(images.stats().processes, 0u);
    EXPECT_FALSE(images.Current(7).has_value());
  }
}

uint64_t Now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

// A record stamped within the reorder slack of the round is held back — copied out of the ring
// so the ring is released at once — and dispatched, in order, in a later round.
TEST(ReaderTest, RecentRecordsAreHeldOutsideTheRing) {
  Fixture f;
  const uint64_t future = Now() + 60'000'000'000ULL;  // "just written": after any round's limit
  f.m0.Put(SampleRec(100, 5, 10));
  f.m0.Put(Comm(5, "late_name", future));
  f.m1.Put(SampleRec(101, 5, future + 1));
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  reader.comms().OnComm(5, "early_name");
  reader.Round(false);
  EXPECT_EQ(f.ev->samples.Get(), 1u);
  EXPECT_EQ(reader.held_records(), 2u);
  EXPECT_EQ(f.m0.meta()->data_tail, f.m0.head);  // released although a record is held
  EXPECT_EQ(f.m1.meta()->data_tail, f.m1.head);
  f.m1.Put(SampleRec(101, 5, future + 2));
  reader.Round(false);  // still too young: held again (copied between side buffers)
  EXPECT_EQ(f.ev->samples.Get(), 1u);
  reader.Round(true);
  MetricSnapshot m = f.counter->Snapshot();
  ASSERT_EQ(m.series.size(), 2u);
  EXPECT_EQ(m.series[0].labels[0].second, "early_name");
  EXPECT_EQ(m.series[0].value, 1);
  EXPECT_EQ(m.series[1].labels[0].second, "late_name");
  EXPECT_EQ(m.series[1].value, 2);
}

// The dispatch limit: a ring that delivered records bounds it by its last record minus the
// nesting slack; a ring that delivered nothing, by the round's start minus the quiet slack.
TEST(ReaderTest, LimitFollowsTheSlowestRing) {
  Fixture f;
  const uint64_t base = Now() - 10'000'000;  // 10 ms ago
  f.m0.Put(SampleRec(100, 5, base));
  f.m0.Put(SampleRec(100, 5, base + 100'000));
  f.m1.Put(SampleRec(101, 5, base + 30'000));
  f.m1.Put(SampleRec(101, 5, base + 60'000));  // ring 1's bound: base + 10 us
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  reader.Round(false);
  EXPECT_EQ(f.ev->samples.Get(), 1u);  // only `base`; the rest wait for ring 1 to move on
  EXPECT_EQ(reader.held_records(), 3u);
  reader.Round(false);  // nothing new anywhere: quiet bound now - 1 ms releases all
  EXPECT_EQ(f.ev->samples.Get(), 4u);
}

// A PERF_RECORD_LOST's count covers every event writing into the ring; its id only names the
// event that wrote next. It is charged to the CPU ring, never to that event (whose losses come
// from PERF_FORMAT_LOST).
TEST(ReaderTest, LostRecordsAreCountedPerCpuOnly) {
  Fixture f;
  f.m1.Put(Lost(101, 42, 10));
  f.m1.Put(SampleRec(101, 5, 20));
  f.m1.Put(MakeRecord(0x4242, std::vector<uint8_t>(16, 0)));  // unknown type: stepped over
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  reader.Round(true);
  EXPECT_EQ(f.rings[1].lost_samples.Get(), 42u);
  EXPECT_EQ(f.rings[0].lost_samples.Get(), 0u);
  EXPECT_EQ(f.ev->samples.Get(), 1u);
  EXPECT_EQ(reader.other_records(), 1u);
}

TEST(ReaderTest, GarbledRingIsSkippedAndCounted) {
  Fixture f;
  f.m0.Put(SampleRec(100, 5, 20));
  std::vector<uint8_t> bad(16, 0);  // a header of size 0
  f.m0.Put(bad);
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  reader.Round(true);
  EXPECT_EQ(f.ev->samples.Get(), 1u);
  EXPECT_EQ(f.rings[0].errors.Get(), 1u);
  EXPECT_EQ(f.m0.meta()->data_tail, f.m0.head);  // the garbage is released, not re-read forever
}

TEST(ReaderTest, WrappedRecordsAcrossManyRounds) {
  Fixture f;
  f.MapRings();
  Reader reader(&f.plan, &f.rings);
  uint64_t t = 1;
  for (int round = 0; round < 50; ++round) {
    for (int i = 0; i < 37; ++i) f.m0.Put(SampleRec(100, 5, t++));  // 48-byte records wrap 4096
    reader.Round(true);
  }
  EXPECT_EQ(f.ev->samples.Get(), 50u * 37u);
  EXPECT_EQ(f.rings[0].errors.Get(), 0u);
}

}  // namespace
}  // namespace tpe

namespace tpe {
namespace {

// A latency whose start lands in CPU 0's ring and whose end lands in CPU 1's ring, with CPU 1's
// end read first: the merge by timestamp still pairs every start with its end.
TEST(ReaderTest, LatencyPairsAcrossCpusReadOutOfOrder) {
  Plan plan;
  auto start_ev = std::make_unique<EventPlan>();
  start_ev->ids = {200};
  auto end_ev = std::make_unique<EventPlan>();
  end_ev->ids = {201};
  // Key: the first 4 bytes of the 12-byte raw payload (zero in SampleRec) → all pair on key 0.
  FieldFormat key;
  key.name = "k";
  key.type = "int";
  key.offset = 0;
  key.size = 4;
  key.is_signed = true;
  LatencyEndpoint s, e;
  s.key.push_back(*FieldExtractor::Compile(key, LabelDecode::kAuto, nullptr));
  e.key.push_back(*FieldExtractor::Compile(key, LabelDecode::kAuto, nullptr));
  std::vector<LatencyEndpoint> starts;
  starts.push_back(std::move(s));
  auto c =
      std::make_unique<LatencyCollector>("lat_seconds", "h", std::move(starts), std::move(e),
                                         *Buckets::Explicit({1e-6, 1e-3}), std::nullopt, 10, 100, 10'000'000'000ULL);
  LatencyCollector* lat = c.get();
  start_ev->consumers.emplace_back(c.get(), 0);
  end_ev->consumers.emplace_back(c.get(), 1);
  plan.events.push_back(std::move(start_ev));
  plan.events.push_back(std::move(end_ev));
  plan.AddMetric(std::move(c), "");
  plan.needs_ordering = true;

  FakeMmap m0, m1;
  // start at 1000, end at 1500, next start at 2000, end at 4000 (ring 1 holds all the ends).
  m0.Put(SampleRec(200, 7, 1000));
  m0.Put(SampleRec(200, 7, 2000));
  m1.Put(SampleRec(201, 7, 1500));
  m1.Put(SampleRec(201, 7, 4000));
  std::deque<CpuRing> rings;
  for (FakeMmap* m : {&m1, &m0}) {  // CPU 1's ring first: its ends are read before the starts
    CpuRing& r = rings.emplace_back();
    r.cpu = m == &m1 ? 1 : 0;
    r.ring = std::make_unique<RingBuffer>(RingBuffer::FromMapping(-1, m->Take()));
  }
  Reader reader(&plan, &rings);
  reader.Round(/*flush_all=*/true);  // everything, still merged in timestamp order
  MetricSnapshot snap = lat->Snapshot();
  ASSERT_EQ(snap.series.size(), 1u);
  EXPECT_EQ(snap.series[0].count, 2u);
  EXPECT_EQ(snap.series[0].bucket_counts, (std::vector<uint64_t>{1, 1, 0}));  // 500 ns, 2000 ns
  EXPECT_DOUBLE_EQ(snap.series[0].sum, 2.5e-6);
  EXPECT_EQ(lat->unmatched(LatencyCollector::kNoStart), 0u);
  EXPECT_EQ(lat->unmatched(LatencyCollector::kReplaced), 0u);
}

// Two events share a ring: one samples the cgroup id (8 bytes after raw), one does not. The
// reader parses each sample by its own event's layout.
TEST(ReaderTest, CgroupAndPlainSamplesShareARing) {
  Plan plan;
  auto mk = [&](uint64_t id, bool cgroup, LabelSource source) {
    auto e = std::make_unique<EventPlan>();
    e->ids = {id};
    e->sampled = true;
    e->cgroup = cgroup;
    std::vector<LabelSpec> specs(1);
    specs[0].name = "l";
    specs[0].source = source;
    auto c =
        std::make_unique<CounterCollector>("c" + std::to_string(id) + "_total", "h", LabelSet(std::move(specs)), 10);
    e->consumers.emplace_back(c.get(), 0);
    CounterCollector* raw = c.get();
    plan.events.push_back(std::move(e));
    plan.AddMetric(std::move(c), "");
    return raw;
  };
  CounterCollector* by_cgroup = mk(200, true, LabelSource::kCgroup);
  CounterCollector* by_tid = mk(201, false, LabelSource::kTid);
  FakeMmap m;
  for (uint64_t t = 0; t < 3; ++t) {
    std::vector<uint8_t> rec = SampleRec(200, 9, 10 + t);
    auto* h = reinterpret_cast<perf_event_header*>(rec.data());
    h->size = static_cast<uint16_t>(h->size + 8);
    AppendValue(&rec, uint64_t{4242 + t % 2});  // cgroup ids 4242, 4243, 4242
    m.Put(rec);
    m.Put(SampleRec(201, 9, 20 + t));
  }
  std::deque<CpuRing> rings;
  CpuRing& r = rings.emplace_back();
  r.cpu = 0;
  r.ring = std::make_unique<RingBuffer>(RingBuffer::FromMapping(-1, m.Take()));
  Reader reader(&plan, &rings);
  reader.Round(/*flush_all=*/true);
  MetricSnapshot a = by_cgroup->Snapshot();
  ASSERT_EQ(a.series.size(), 2u);
  EXPECT_EQ(a.series[0].labels, (LabelPairs{{"l", "4242"}}));  // no resolver: the id
  EXPECT_EQ(a.series[0].value, 2);
  EXPECT_EQ(a.series[1].labels, (LabelPairs{{"l", "4243"}}));
  MetricSnapshot b = by_tid->Snapshot();
  ASSERT_EQ(b.series.size(), 1u);
  EXPECT_EQ(b.series[0].value, 3);
  EXPECT_EQ(reader.sample_errors(), 0u);
}

// The reader sleeps up to 100 ms while a metric counts ring samples (its /metrics counts lag by
// at most that), up to 1 s when only a profile reads the rings (a render catches up with a mark)
// or no event has a consumer; a pending mark shows as next_mark_ns.
TEST(ReaderTest, SleepsLongerWhenOnlyProfilesReadTheRings) {
  std::deque<CpuRing> rings;
  Plan empty;
  Reader idle(&empty, &rings);
  EXPECT_EQ(idle.idle_ns(), kIdleNs);
  EXPECT_EQ(idle.next_mark_ns(), ~0ull);
  idle.AddMark(5000, [](const Plan&) {});
  EXPECT_EQ(idle.next_mark_ns(), 5000u);

  Plan profiles;
  auto e = std::make_unique<EventPlan>();
  e->ids = {300};
  e->sampled = true;
  auto p = std::make_unique<ProfileCollector>("stacks", "h", LabelSet(std::vector<LabelSpec>{}), 10);
  e->consumers.emplace_back(p.get(), 0);
  profiles.events.push_back(std::move(e));
  profiles.AddMetric(std::move(p), "");
  Reader reader(&profiles, &rings);
  EXPECT_EQ(reader.idle_ns(), kIdleNs);

  Fixture f;  // a counter on a sampled event
  reader.SetPlan(&f.plan);
  EXPECT_EQ(reader.idle_ns(), kMetricIdleNs);
  reader.SetPlan(&profiles);
  EXPECT_EQ(reader.idle_ns(), kIdleNs);
}

}  // namespace
}  // namespace tpe
