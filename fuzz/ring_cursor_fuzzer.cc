// Fuzzes RingCursor (src/perf/ring_cursor.h) over fuzz bytes with fuzz positions, checking each
// record against a byte-by-byte reading of the ring, and feeds every record to the record
// parsers (src/perf/records.h, src/decode/sample.h) as the reader would.
//
// Input: <k: u8> <begin: u64> <avail: u32> <ring bytes...>. The data area is 2^(3 + k % 14)
// bytes (8 B .. 64 KiB) holding the ring bytes (zero-padded or cut); the cursor runs over
// [begin, begin + avail % (size + 1)): like the kernel's data_tail/data_head, at most one
// ring's worth apart (RingCursor's documented contract).
#include <linux/perf_event.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "decode/sample.h"
#include "fuzz/fuzz_util.h"
#include "perf/records.h"
#include "perf/ring_cursor.h"

using namespace tpe;

namespace {

void ParseRecord(const RawRecord& rec) {
  uint64_t t = 0, id = 0;
  (void)RecordTime(rec.type, rec.bytes, &t);
  switch (rec.type) {
    case PERF_RECORD_SAMPLE: {
      Sample s;
      (void)SampleId(rec.bytes, &id);
      if (ParseSample(rec.bytes, &s)) {
        TPE_FUZZ_CHECK(
            s.raw.data() >= rec.bytes.data() && s.raw.data() + s.raw.size() <= rec.bytes.data() + rec.bytes.size(),
            "sample raw outside its record");
      }
      break;
    }
    case PERF_RECORD_COMM: {
      CommRecord c;
      if (ParseCommRecord(rec.bytes, &c)) {
        const auto* p = reinterpret_cast<const uint8_t*>(c.comm.data());
        TPE_FUZZ_CHECK(p >= rec.bytes.data() && p + c.comm.size() <= rec.bytes.data() + rec.bytes.size(),
                       "comm outside its record");
      }
      break;
    }
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
      TaskRecord task;
      (void)ParseTaskRecord(rec.bytes, &task);
      break;
    }
    default: {
      LostRecord lost;
      (void)ParseLostRecord(rec.type, rec.bytes, &lost);
      break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 13) return 0;
  const uint64_t ring_size = uint64_t{1} << (3 + data[0] % 14);
  uint64_t begin = 0;
  uint32_t avail = 0;
  std::memcpy(&begin, data + 1, 8);
  std::memcpy(&avail, data + 9, 4);
  const uint64_t end = begin + avail % (ring_size + 1);
  std::vector<uint8_t> ring(ring_size, 0);
  std::memcpy(ring.data(), data + 13, std::min<size_t>(size - 13, ring_size));
  std::vector<uint8_t> scratch(kMaxRecordBytes);

  RingCursor cursor(ring.data(), ring_size, begin, end, scratch.data());
  uint64_t expect_begin = begin;
  for (;;) {
    RawRecord rec;
    RingCursor::Result r = cursor.Next(&rec);
    if (r == RingCursor::Result::kEnd) {
      TPE_FUZZ_CHECK(cursor.position() == end, "kEnd before the end");
      break;
    }
    if (r == RingCursor::Result::kCorrupt) {
      TPE_FUZZ_CHECK(cursor.position() == expect_begin, "kCorrupt moved the cursor");
      break;
    }
    TPE_FUZZ_CHECK(rec.begin == expect_begin, "records not contiguous");
    TPE_FUZZ_CHECK(rec.end - rec.begin == rec.bytes.size(), "end - begin != size");
    TPE_FUZZ_CHECK(rec.bytes.size() >= sizeof(perf_event_header), "record shorter than its header");
    TPE_FUZZ_CHECK(rec.end - begin <= end - begin, "record past the end");
    TPE_FUZZ_CHECK(cursor.position() == rec.end, "position is not the record's end");
    // The record's bytes are the ring's bytes from rec.begin on, modulo the ring size.
    for (size_t i = 0; i < rec.bytes.size(); ++i) {
      TPE_FUZZ_CHECK(rec.bytes[i] == ring[(rec.begin + i) & (ring_size - 1)], "byte %zu differs from the ring", i);
    }
    perf_event_header h;
    std::memcpy(&h, rec.bytes.data(), sizeof(h));
    TPE_FUZZ_CHECK(h.size == rec.bytes.size() && h.type == rec.type && h.misc == rec.misc, "header mismatch");
    ParseRecord(rec);
    expect_begin = rec.end;
  }
  return 0;
}
