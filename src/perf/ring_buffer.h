// A perf event's mmap'ed ring buffer: 1 metadata page (struct perf_event_mmap_page) followed by
// 2^n data pages.
//
// Source: perf_event_open(2) "MMAP layout". Protocol (as tools/lib/perf's ring loop): acquire-
// load data_head, read every record up to it, then release-store data_tail once per batch.
//
// Thread-safety: one reader thread per ring.
#pragma once

#include <cstdint>
#include <vector>

#include "common/scoped_fd.h"
#include "common/status.h"
#include "perf/ring_cursor.h"

namespace tpe {

class RingBuffer {
 public:
  // mmaps `data_pages` (a power of two, >= 1) data pages plus the metadata page of `fd`.
  // Errors: InvalidArgument (not a power of two), Unavailable (mlock limit: ENOMEM/EPERM with a
  // hint to lower settings.ring_buffer_pages or raise perf_event_mlock_kb).
  static StatusOr<RingBuffer> Map(int fd, uint32_t data_pages);

  // Wraps an existing mapping laid out like a perf mmap (metadata page, then data at
  // meta->data_offset of meta->data_size bytes). Used by Map() and by tests that build
  // synthetic rings in anonymous memory. `fd` may be -1.
  static RingBuffer FromMapping(int fd, Mmap map);

  // Acquire-loads data_head.
  uint64_t LoadHead() const;
  // Release-stores data_tail: the kernel may now overwrite everything before `tail`.
  void StoreTail(uint64_t tail);
  // The data_tail last stored.
  uint64_t tail() const { return tail_; }

  // A cursor over [tail(), head).
  RingCursor Cursor(uint64_t head) { return CursorFrom(tail_, head); }
  // A cursor over [begin, head), for a reader that keeps records past data_tail indexed;
  // `begin` must lie between tail() and head on a record boundary.
  RingCursor CursorFrom(uint64_t begin, uint64_t head) {
    return RingCursor(data_, data_size_, begin, head, scratch_.data());
  }

  uint64_t data_size() const { return data_size_; }  // bytes
  int fd() const { return fd_; }

 private:
  RingBuffer(int fd, Mmap map, uint64_t data_size);

  int fd_ = -1;  // not owned; the perf event fd
  Mmap map_;
  perf_event_mmap_page* meta_ = nullptr;  // points into map_
  const uint8_t* data_ = nullptr;         // points into map_
  uint64_t data_size_ = 0;
  uint64_t tail_ = 0;
  std::vector<uint8_t> scratch_;  // kMaxRecordBytes, for records that wrap
};

}  // namespace tpe
