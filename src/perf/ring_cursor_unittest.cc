#include "perf/ring_cursor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "perf/perf_event.h"
#include "perf/records.h"
#include "testing/perf_records.h"

namespace tpe {
namespace {

// Writes records into a synthetic ring of `size` bytes at free-running positions, as the
// kernel does (wrapping at the end).
class FakeRing {
 public:
  explicit FakeRing(size_t size) : data_(size, 0xee) {}
  uint64_t Put(uint32_t type, const std::vector<uint8_t>& body) {
    for (uint8_t b : testing::MakeRecord(type, body)) data_[head_++ % data_.size()] = b;
    return head_;
  }
  void PutBytes(const std::vector<uint8_t>& raw) {
    for (uint8_t b : raw) data_[head_++ % data_.size()] = b;
  }
  void Seek(uint64_t pos) { head_ = pos; }
  uint64_t head() const { return head_; }
  const uint8_t* data() const { return data_.data(); }
  size_t size() const { return data_.size(); }

 private:
  std::vector<uint8_t> data_;
  uint64_t head_ = 0;
};

std::vector<uint8_t> Body(size_t n, uint8_t fill) { return std::vector<uint8_t>(n, fill); }

TEST(RingCursorTest, YieldsRecordsInOrderAndStepsOverUnknownTypes) {
  FakeRing ring(256);
  ring.Put(PERF_RECORD_SAMPLE, Body(24, 1));
  ring.Put(0x4242, Body(8, 2));  // a type we do not know
  ring.Put(PERF_RECORD_LOST, Body(16, 3));
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  RingCursor c(ring.data(), ring.size(), 0, ring.head(), scratch.data());
  RawRecord r;
  ASSERT_EQ(c.Next(&r), RingCursor::Result::kRecord);
  EXPECT_EQ(r.type, PERF_RECORD_SAMPLE);
  EXPECT_EQ(r.bytes.size(), 32u);
  EXPECT_EQ(r.end, 32u);
  ASSERT_EQ(c.Next(&r), RingCursor::Result::kRecord);
  EXPECT_EQ(r.type, 0x4242u);
  EXPECT_EQ(r.begin, 32u);
  EXPECT_EQ(r.bytes[8], 2);
  ASSERT_EQ(c.Next(&r), RingCursor::Result::kRecord);
  EXPECT_EQ(r.type, PERF_RECORD_LOST);
  EXPECT_EQ(c.Next(&r), RingCursor::Result::kEnd);
  EXPECT_EQ(c.position(), ring.head());
}

TEST(RingCursorTest, RecordThatWrapsIsRebuiltContiguously) {
  FakeRing ring(64);
  ring.Seek(48);  // 16 bytes before the end: a 32-byte record wraps after 16
  std::vector<uint8_t> body(24);
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<uint8_t>(i);
  ring.Put(PERF_RECORD_SAMPLE, body);
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  RingCursor c(ring.data(), ring.size(), 48, ring.head(), scratch.data());
  RawRecord r;
  ASSERT_EQ(c.Next(&r), RingCursor::Result::kRecord);
  ASSERT_EQ(r.bytes.size(), 32u);
  EXPECT_EQ(r.bytes.data(), scratch.data());
  for (size_t i = 0; i < body.size(); ++i) EXPECT_EQ(r.bytes[8 + i], i) << i;
  EXPECT_EQ(r.end, 80u);
  EXPECT_EQ(c.Next(&r), RingCursor::Result::kEnd);
}

TEST(RingCursorTest, HeaderWrappingAcrossTheEnd) {
  FakeRing ring(64);
  ring.Seek(60);  // the 8-byte header itself wraps
  ring.Put(PERF_RECORD_COMM, Body(16, 7));
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  RingCursor c(ring.data(), ring.size(), 60, ring.head(), scratch.data());
  RawRecord r;
  ASSERT_EQ(c.Next(&r), RingCursor::Result::kRecord);
  EXPECT_EQ(r.type, PERF_RECORD_COMM);
  EXPECT_EQ(r.bytes.size(), 24u);
  EXPECT_EQ(r.bytes[23], 7);
}

TEST(RingCursorTest, TruncatedRecordIsCorruptNotRead) {
  FakeRing ring(128);
  ring.Put(PERF_RECORD_SAMPLE, Body(24, 1));  // 32 bytes, but head says only 20 are written
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  RingCursor c(ring.data(), ring.size(), 0, 20, scratch.data());
  RawRecord r;
  EXPECT_EQ(c.Next(&r), RingCursor::Result::kCorrupt);
  RingCursor c2(ring.data(), ring.size(), 0, 4, scratch.data());  // not even a header
  EXPECT_EQ(c2.Next(&r), RingCursor::Result::kCorrupt);
}

TEST(RingCursorTest, HeaderSmallerThanItselfIsCorrupt) {
  FakeRing ring(128);
  perf_event_header h{PERF_RECORD_SAMPLE, 0, 4};
  std::vector<uint8_t> raw(sizeof(h));
  std::memcpy(raw.data(), &h, sizeof(h));
  ring.PutBytes(raw);
  ring.PutBytes(Body(24, 0));
  std::vector<uint8_t> scratch(kMaxRecordBytes);
  RingCursor c(ring.data(), ring.size(), 0, ring.head(), scratch.data());
  RawRecord r;
  EXPECT_EQ(c.Next(&r), RingCursor::Result::kCorrupt);
}

// PERF_RECORD_LOST { u64 id; u64 lost; sample_id { pid, tid, time, id } }.
TEST(RecordsTest, LostRecordCountsAndTime) {
  std::vector<uint8_t> body;
  testing::AppendValue(&body, uint64_t{77});    // id
  testing::AppendValue(&body, uint64_t{1234});  // lost
  testing::AppendValue(&body, uint64_t{0});     // sample_id: pid, tid
  testing::AppendValue(&body, uint64_t{999});   //            time
  testing::AppendValue(&body, uint64_t{77});    //            id
  std::vector<uint8_t> rec = testing::MakeRecord(PERF_RECORD_LOST, body);
  LostRecord l;
  ASSERT_TRUE(ParseLostRecord(PERF_RECORD_LOST, Bytes(rec), &l));
  EXPECT_EQ(l.id, 77u);
  EXPECT_EQ(l.lost, 1234u);
  uint64_t t = 0;
  ASSERT_TRUE(RecordTime(PERF_RECORD_LOST, Bytes(rec), &t));
  EXPECT_EQ(t, 999u);
  EXPECT_FALSE(ParseLostRecord(PERF_RECORD_LOST, Bytes(rec.data(), 12), &l));
}

TEST(RecordsTest, CommRecord) {
  // { header; u32 pid, tid; char comm[16]; sample_id }
  std::vector<uint8_t> body;
  testing::AppendValue(&body, uint32_t{10});  // pid
  testing::AppendValue(&body, uint32_t{11});  // tid
  const char comm[16] = "renamed";
  body.insert(body.end(), comm, comm + 16);
  testing::AppendValue(&body, uint64_t{0});  // sample_id: pid, tid
  testing::AppendValue(&body, uint64_t{5});  //            time
  testing::AppendValue(&body, uint64_t{0});  //            id
  std::vector<uint8_t> rec = testing::MakeRecord(PERF_RECORD_COMM, body);
  CommRecord c;
  ASSERT_TRUE(ParseCommRecord(Bytes(rec), &c));
  EXPECT_EQ(c.tid, 11u);
  EXPECT_EQ(c.comm, "renamed");
  EXPECT_EQ(c.time_ns, 5u);
  EXPECT_FALSE(ParseCommRecord(Bytes(rec.data(), 20), &c));
}

TEST(RecordsTest, CommRecordOfAnExec) {
  std::vector<uint8_t> body;
  testing::AppendValue(&body, uint32_t{10});
  testing::AppendValue(&body, uint32_t{10});
  const char comm[8] = "true";
  body.insert(body.end(), comm, comm + 8);
  for (int i = 0; i < 3; ++i) testing::AppendValue(&body, uint64_t{7});  // sample_id
  std::vector<uint8_t> rec = testing::MakeRecord(PERF_RECORD_COMM, body, PERF_RECORD_MISC_COMM_EXEC);
  CommRecord c;
  ASSERT_TRUE(ParseCommRecord(Bytes(rec), &c));
  EXPECT_TRUE(c.exec);
  EXPECT_EQ(c.comm, "true");
}

// PERF_RECORD_MMAP2 as kernel/events/core.c perf_event_mmap_output writes it.
std::vector<uint8_t> Mmap2Body(const std::string& filename, bool build_id) {
  std::vector<uint8_t> body;
  testing::AppendValue(&body, uint32_t{4242});            // pid
  testing::AppendValue(&body, uint32_t{4243});            // tid
  testing::AppendValue(&body, uint64_t{0x55d0c8a00000});  // addr
  testing::AppendValue(&body, uint64_t{0x3000});          // len
  testing::AppendValue(&body, uint64_t{0x1000});          // pgoff
  if (build_id) {
    testing::AppendValue(&body, uint8_t{20});  // build_id_size
    testing::AppendValue(&body, uint8_t{0});
    testing::AppendValue(&body, uint16_t{0});
    for (uint8_t i = 0; i < 20; ++i) testing::AppendValue(&body, static_cast<uint8_t>(0xa0 + i));
  } else {
    testing::AppendValue(&body, uint32_t{254});      // maj
    testing::AppendValue(&body, uint32_t{1});        // min
    testing::AppendValue(&body, uint64_t{1234567});  // ino
    testing::AppendValue(&body, uint64_t{9});        // ino_generation
  }
  testing::AppendValue(&body, uint32_t{5});  // prot: PROT_READ | PROT_EXEC
  testing::AppendValue(&body, uint32_t{2});  // flags: MAP_PRIVATE
  std::vector<uint8_t> name(filename.begin(), filename.end());
  name.resize((filename.size() + 8) / 8 * 8, 0);  // NUL-padded to 8 bytes, at least one NUL
  body.insert(body.end(), name.begin(), name.end());
  testing::AppendValue(&body, uint64_t{0});     // sample_id: pid, tid
  testing::AppendValue(&body, uint64_t{4711});  //            time
  testing::AppendValue(&body, uint64_t{3});     //            id
  return body;
}

TEST(RecordsTest, Mmap2Record) {
  std::vector<uint8_t> rec = testing::MakeRecord(PERF_RECORD_MMAP2, Mmap2Body("/usr/bin/stack_paths", false));
  Mmap2Record m;
  ASSERT_TRUE(ParseMmap2Record(Bytes(rec), &m));
  EXPECT_EQ(m.pid, 4242u);
  EXPECT_EQ(m.tid, 4243u);
  EXPECT_EQ(m.addr, 0x55d0c8a00000u);
  EXPECT_EQ(m.len, 0x3000u);
  EXPECT_EQ(m.pgoff, 0x1000u);
  EXPECT_EQ(m.maj, 254u);
  EXPECT_EQ(m.min, 1u);
  EXPECT_EQ(m.ino, 1234567u);
  EXPECT_FALSE(m.has_build_id);
  EXPECT_EQ(m.prot, 5u);
  EXPECT_EQ(m.flags, 2u);
  EXPECT_EQ(m.filename, "/usr/bin/stack_paths");
  EXPECT_EQ(m.time_ns, 4711u);
  // A name of exactly 8 bytes takes a second word for its NUL.
  rec = testing::MakeRecord(PERF_RECORD_MMAP2, Mmap2Body("/bin/abc", false));
  ASSERT_TRUE(ParseMmap2Record(Bytes(rec), &m));
  EXPECT_EQ(m.filename, "/bin/abc");
  // Cut records and a name without its NUL are refused.
  for (size_t cut : {8ul, 40ul, 72ul, rec.size() - 1})
    EXPECT_FALSE(ParseMmap2Record(Bytes(rec.data(), cut), &m)) << cut;
  std::vector<uint8_t> bad = rec;
  std::fill(bad.begin() + 72, bad.end() - 24, 'x');
  EXPECT_FALSE(ParseMmap2Record(Bytes(bad), &m));
}

TEST(RecordsTest, Mmap2RecordWithBuildId) {
  std::vector<uint8_t> rec =
      testing::MakeRecord(PERF_RECORD_MMAP2, Mmap2Body("//anon", true), PERF_RECORD_MISC_MMAP_BUILD_ID);
  Mmap2Record m;
  ASSERT_TRUE(ParseMmap2Record(Bytes(rec), &m));
  EXPECT_TRUE(m.has_build_id);
  ASSERT_EQ(m.build_id.size(), 20u);
  EXPECT_EQ(static_cast<uint8_t>(m.build_id[0]), 0xa0);
  EXPECT_EQ(static_cast<uint8_t>(m.build_id[19]), 0xb3);
  EXPECT_EQ(m.ino, 0u);
  EXPECT_EQ(m.filename, "//anon");
}

TEST(PerfEventTest, CpuList) {
  EXPECT_EQ(*ParseCpuList("0-3,5\n"), (std::vector<int>{0, 1, 2, 3, 5}));
  EXPECT_EQ(*ParseCpuList("0"), (std::vector<int>{0}));
  EXPECT_FALSE(ParseCpuList("").ok());
  EXPECT_FALSE(ParseCpuList("3-1").ok());
  EXPECT_FALSE(ParseCpuList("a").ok());
}

TEST(PerfEventTest, AttrForSampledAndCountingModes) {
  TracepointEventOptions o;
  o.tracepoint_id = 305;
  perf_event_attr counting = MakeTracepointAttr(o);
  EXPECT_EQ(counting.type, PERF_TYPE_TRACEPOINT);
  EXPECT_EQ(counting.config, 305u);
  EXPECT_EQ(counting.sample_period, 0u);
  EXPECT_EQ(counting.disabled, 1u);
  EXPECT_EQ(counting.read_format, static_cast<uint64_t>(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_LOST));
  o.sampled = true;
  o.track_tasks = true;
  o.wakeup_watermark_bytes = 4096;
  perf_event_attr s = MakeTracepointAttr(o);
  EXPECT_EQ(s.mmap, 0u);
  o.track_mmap = true;
  EXPECT_EQ(MakeTracepointAttr(o).mmap, 1u);
  EXPECT_EQ(MakeTracepointAttr(o).mmap2, 1u);
  EXPECT_EQ(s.sample_period, 1u);
  EXPECT_EQ(s.sample_type, kSampleType);
  EXPECT_EQ(s.use_clockid, 1u);
  EXPECT_EQ(s.clockid, CLOCK_MONOTONIC);
  EXPECT_EQ(s.sample_id_all, 1u);
  EXPECT_EQ(s.watermark, 1u);
  EXPECT_EQ(s.wakeup_watermark, 4096u);
  o.cgroup = true;  // an event with a cgroup label also samples the cgroup id
  EXPECT_EQ(MakeTracepointAttr(o).sample_type, kSampleType | PERF_SAMPLE_CGROUP);
  EXPECT_EQ(s.comm, 1u);
  EXPECT_EQ(s.task, 1u);
}

}  // namespace
}  // namespace tpe
