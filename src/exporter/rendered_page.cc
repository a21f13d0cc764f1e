#include "exporter/rendered_page.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>

namespace tpe {
namespace {

size_t PageSize() {
  static const size_t size = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

size_t RoundUpToPages(size_t bytes) {
  const size_t page = PageSize();
  return std::max(page, (bytes + page - 1) / page * page);
}

char* MapAnonymous(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<char*>(p);
}

}  // namespace

RenderedPage RenderedPage::FromText(std::string_view text) {
  PageWriter w(text.size());
  w.sputn(text.data(), static_cast<std::streamsize>(text.size()));
  return w.Finish();
}

PageWriter::PageWriter(size_t expected_bytes) {
  mapped_ = RoundUpToPages(expected_bytes);
  data_ = MapAnonymous(mapped_);
  setp(data_, data_ + mapped_);
}

PageWriter::~PageWriter() {
  if (data_ != nullptr) ::munmap(data_, mapped_);
}

void PageWriter::SetPut(size_t used) {
  setp(data_, data_ + mapped_);
  while (used > 0) {  // pbump takes an int
    const size_t step = std::min<size_t>(used, std::numeric_limits<int>::max());
    pbump(static_cast<int>(step));
    used -= step;
  }
}

bool PageWriter::Grow(size_t needed) {
  if (data_ == nullptr) failed_ = true;  // written after Finish
  if (failed_) return false;
  const size_t used = static_cast<size_t>(pptr() - pbase());
  const size_t size = RoundUpToPages(std::max(needed, 2 * mapped_));
  void* p = ::mremap(data_, mapped_, size, MREMAP_MAYMOVE);
  if (p == MAP_FAILED) {
    failed_ = true;
    return false;
  }
  data_ = static_cast<char*>(p);
  mapped_ = size;
  SetPut(used);
  return true;
}

PageWriter::int_type PageWriter::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  if (pptr() == epptr() && !Grow(mapped_ + 1)) return traits_type::eof();
  *pptr() = traits_type::to_char_type(c);
  pbump(1);
  return c;
}

std::streamsize PageWriter::xsputn(const char* s, std::streamsize n) {
  if (n <= 0) return 0;
  const size_t count = static_cast<size_t>(n);
  const size_t used = static_cast<size_t>(pptr() - pbase());
  if (count > static_cast<size_t>(epptr() - pptr()) && !Grow(used + count)) return 0;
  std::memcpy(pptr(), s, count);
  SetPut(used + count);
  return n;
}

RenderedPage PageWriter::Finish() {
  if (failed_) throw std::bad_alloc();
  if (data_ == nullptr) return RenderedPage();  // finished already
  const size_t size = static_cast<size_t>(pptr() - pbase());
  const size_t keep = RoundUpToPages(size);
  // Shrinking in place never moves the mapping; should it fail, the page keeps the spare pages.
  if (keep < mapped_ && ::mremap(data_, mapped_, keep, 0) != MAP_FAILED) mapped_ = keep;
  RenderedPage page(Mmap(data_, mapped_), size);
  data_ = nullptr;
  mapped_ = 0;
  setp(nullptr, nullptr);
  return page;
}

}  // namespace tpe
