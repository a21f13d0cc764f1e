#include "perf/ring_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

namespace tpe {

RingBuffer::RingBuffer(int fd, Mmap map, uint64_t data_size)
    : fd_(fd), map_(std::move(map)), data_size_(data_size), scratch_(kMaxRecordBytes) {
  meta_ = static_cast<perf_event_mmap_page*>(map_.addr());
  data_ = static_cast<const uint8_t*>(map_.addr()) + meta_->data_offset;
  tail_ = __atomic_load_n(&meta_->data_tail, __ATOMIC_ACQUIRE);
}

StatusOr<RingBuffer> RingBuffer::Map(int fd, uint32_t data_pages) {
  if (data_pages == 0 || (data_pages & (data_pages - 1)) != 0) {
    return InvalidArgument("ring_buffer_pages=" + std::to_string(data_pages) +
                           " is not a power of two (1, 2, 4, ... 1024)");
  }
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t len = page * (1 + static_cast<size_t>(data_pages));
  void* addr = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (addr == MAP_FAILED) {
    int err = errno;
    if (err == ENOMEM || err == EPERM) {
      return Unavailable("mmap of a " + std::to_string(len / 1024) +
                         " KiB perf ring failed (locked-memory limit); lower settings.ring_buffer_pages "
                         "or raise kernel.perf_event_mlock_kb / LimitMEMLOCK");
    }
    return ErrnoStatus(err, "mmap perf ring");
  }
  auto* meta = static_cast<perf_event_mmap_page*>(addr);
  if (meta->data_size == 0) {  // kernels before 4.1 leave these 0: data follows the first page
    meta->data_offset = page;
    meta->data_size = page * data_pages;
  }
  return FromMapping(fd, Mmap(addr, len));
}

RingBuffer RingBuffer::FromMapping(int fd, Mmap map) {
  auto* meta = static_cast<perf_event_mmap_page*>(map.addr());
  uint64_t size = meta->data_size;
  return RingBuffer(fd, std::move(map), size);
}

uint64_t RingBuffer::LoadHead() const { return __atomic_load_n(&meta_->data_head, __ATOMIC_ACQUIRE); }

void RingBuffer::StoreTail(uint64_t tail) {
  tail_ = tail;
  __atomic_store_n(&meta_->data_tail, tail, __ATOMIC_RELEASE);
}

}  // namespace tpe
