// Move-only owners of kernel resources: a file descriptor and a memory mapping.
//
// Thread-safety: an object is owned by one thread at a time; moving transfers ownership.
#pragma once

#include <cstddef>
#include <utility>

namespace tpe {

// Owns a file descriptor; closes it on destruction. -1 means "none".
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { Reset(); }
  ScopedFd(ScopedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& o) noexcept {
    if (this != &o) {
      Reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void Reset();

 private:
  int fd_ = -1;
};

// Owns an mmap(2) region of `size` bytes; munmaps it on destruction.
class Mmap {
 public:
  Mmap() = default;
  Mmap(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~Mmap() { Reset(); }
  Mmap(Mmap&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  Mmap& operator=(Mmap&& o) noexcept {
    if (this != &o) {
      Reset();
      addr_ = std::exchange(o.addr_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  Mmap(const Mmap&) = delete;
  Mmap& operator=(const Mmap&) = delete;

  void* addr() const { return addr_; }
  size_t size() const { return size_; }
  void Reset();

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tpe
