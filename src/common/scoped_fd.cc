#include "common/scoped_fd.h"

#include <sys/mman.h>
#include <unistd.h>

namespace tpe {

void ScopedFd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Mmap::Reset() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

}  // namespace tpe
