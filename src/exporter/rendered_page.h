// A rendered /metrics page: immutable text in an anonymous memory mapping of its own, written
// by PageWriter (a std::streambuf, so prometheus-cpp's TextSerializer writes into it directly).
//
// Why a mapping: a page of 10 MB allocated with malloc lands, once glibc's
// dynamic mmap threshold has risen past it (it rises to the size of each large block freed,
// up to 32 MiB: mallopt(3) M_MMAP_THRESHOLD), in the malloc arena of whichever thread renders
// it, and freed there it stays in the process's RSS as a hole other allocations fragment. A
// mapping goes back to the kernel (munmap(2)) the moment the last response sending the page
// lets go of it. The mapping grows by mremap(2) (page tables move, bytes are not copied) and is
// trimmed to whole pages when the page is finished, so a page costs its size rounded up to the
// page size, with no spare capacity and no final copy.
//
// Thread-safety: a RenderedPage is immutable, readable from any number of threads; a
// PageWriter is used by one thread.
#pragma once

#include <cstddef>
#include <streambuf>
#include <string_view>
#include <utility>

#include "common/scoped_fd.h"

namespace tpe {

class RenderedPage {
 public:
  RenderedPage() = default;  // empty, maps nothing
  // A page holding a copy of `text`. Throws std::bad_alloc when mmap(2) fails.
  static RenderedPage FromText(std::string_view text);
  // Move-only; the mapping is unmapped (munmap(2)) with the object.

  std::string_view text() const { return {static_cast<const char*>(map_.addr()), size_}; }
  // Bytes mapped: the size rounded up to the page size (sysconf(_SC_PAGESIZE)), at least one
  // page; 0 when default-constructed.
  size_t mapped_bytes() const { return map_.size(); }

 private:
  friend class PageWriter;
  RenderedPage(Mmap map, size_t size) : map_(std::move(map)), size_(size) {}
  Mmap map_;
  size_t size_ = 0;
};

class PageWriter : public std::streambuf {
 public:
  // Maps `expected_bytes` (rounded up to the page size, at least one page) up front: a render
  // that passes the previous page's size avoids growing. Throws std::bad_alloc when mmap(2)
  // fails.
  explicit PageWriter(size_t expected_bytes);
  PageWriter(const PageWriter&) = delete;
  PageWriter& operator=(const PageWriter&) = delete;
  ~PageWriter() override;  // unmaps what Finish did not take

  // The text written so far, as a page; the writer is then empty. Throws std::bad_alloc when
  // the mapping could not grow during a write (the stream then had badbit set: text is missing).
  RenderedPage Finish();

 protected:
  int_type overflow(int_type c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  // Grows the mapping to hold at least `needed` bytes (doubling); false when mremap(2) fails.
  bool Grow(size_t needed);
  // The put area over the whole mapping, `used` bytes written.
  void SetPut(size_t used);
  char* data_ = nullptr;
  size_t mapped_ = 0;
  bool failed_ = false;
};

}  // namespace tpe
