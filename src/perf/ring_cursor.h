// A pure cursor over the data area of a perf ring buffer: yields the records between
// data_tail and data_head, rebuilding records that wrap past the end into a scratch buffer.
//
// Source: perf_event_open(2) "MMAP layout"; include/uapi/linux/perf_event.h (struct
// perf_event_header, PERF_RECORD_*). The data area is `size` bytes (a power of two); positions
// are the kernel's free-running byte counters (data_head/data_tail), taken modulo `size`.
//
// Pure: reads only the bytes it is given, so unit tests drive it with synthetic buffers.
// Thread-safety: one cursor per thread.
#pragma once

#include <linux/perf_event.h>

#include <cstdint>

#include "common/byte_reader.h"

namespace tpe {

// Largest possible record: header.size is a u16.
inline constexpr size_t kMaxRecordBytes = 65536;

struct RawRecord {
  uint32_t type = 0;  // PERF_RECORD_*
  uint16_t misc = 0;
  Bytes bytes;         // the whole record, header included; valid until the next Next()
  uint64_t begin = 0;  // position of the record's first byte
  uint64_t end = 0;    // position just past it (what data_tail becomes once it is consumed)
};

class RingCursor {
 public:
  enum class Result {
    kRecord,   // *out holds a record
    kEnd,      // no more complete records before `end`
    kCorrupt,  // a header claims fewer than 8 bytes or more than remain: the ring is garbled
  };

  // `data`: the ring's data area of `size` bytes (power of two). [begin, end): positions of
  // unread bytes (data_tail, data_head). `scratch`: at least kMaxRecordBytes bytes, used for
  // records that wrap; the caller owns it and keeps it alive as long as the cursor.
  RingCursor(const uint8_t* data, uint64_t size, uint64_t begin, uint64_t end, uint8_t* scratch)
      : data_(data), size_(size), pos_(begin), end_(end), scratch_(scratch) {}

  Result Next(RawRecord* out);

  uint64_t position() const { return pos_; }

 private:
  void Copy(uint64_t pos, size_t n, uint8_t* dst) const;

  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_;
  uint64_t end_;
  uint8_t* scratch_;
};

}  // namespace tpe
