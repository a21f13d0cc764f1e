#include "perf/ring_cursor.h"

#include <cstring>

namespace tpe {

void RingCursor::Copy(uint64_t pos, size_t n, uint8_t* dst) const {
  const uint64_t off = pos & (size_ - 1);
  const size_t first = static_cast<size_t>(std::min<uint64_t>(n, size_ - off));
  std::memcpy(dst, data_ + off, first);
  if (first < n) std::memcpy(dst + first, data_, n - first);
}

RingCursor::Result RingCursor::Next(RawRecord* out) {
  const uint64_t avail = end_ - pos_;
  if (avail == 0) return Result::kEnd;
  if (avail < sizeof(perf_event_header)) return Result::kCorrupt;
  perf_event_header hdr;
  Copy(pos_, sizeof(hdr), reinterpret_cast<uint8_t*>(&hdr));
  if (hdr.size < sizeof(hdr) || hdr.size > avail) return Result::kCorrupt;
  const uint64_t off = pos_ & (size_ - 1);
  if (off + hdr.size <= size_) {
    out->bytes = Bytes(data_ + off, hdr.size);
  } else {
    Copy(pos_, hdr.size, scratch_);
    out->bytes = Bytes(scratch_, hdr.size);
  }
  out->type = hdr.type;
  out->misc = hdr.misc;
  out->begin = pos_;
  pos_ += hdr.size;
  out->end = pos_;
  return Result::kRecord;
}

}  // namespace tpe
