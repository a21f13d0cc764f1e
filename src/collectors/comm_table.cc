#include "collectors/comm_table.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace tpe {

int CommTable::ReadProcComm(uint32_t tid, char* out, size_t cap) {
  char path[48];
  std::snprintf(path, sizeof(path), "/proc/%u/comm", tid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = ::read(fd, out, cap);
  ::close(fd);
  if (n <= 0) return -1;
  if (out[n - 1] == '\n') --n;
  return static_cast<int>(n);
}

CommTable::Entry& CommTable::Set(uint32_t tid, std::string_view comm) {
  Entry& e = map_[tid];
  e.len = static_cast<uint8_t>(std::min(comm.size(), kCommLen - 1));
  std::memcpy(e.comm, comm.data(), e.len);
  e.exited = false;
  e.epoch = loss_epoch_;
  return e;
}

void CommTable::OnComm(uint32_t tid, std::string_view comm) { Set(tid, comm); }

void CommTable::OnFork(uint32_t parent_tid, uint32_t child_tid) {
  std::string_view parent = Lookup(parent_tid);
  char copy[kCommLen];
  size_t n = std::min(parent.size(), kCommLen - 1);
  std::memcpy(copy, parent.data(), n);  // Set() may rehash and move `parent`'s storage
  Set(child_tid, std::string_view(copy, n));
}

void CommTable::OnExit(uint32_t tid) {
  auto it = map_.find(tid);
  if (it == map_.end()) {
    // A task no record named and no sample looked up (it predates the daemon): looked up now
    // (while /proc may still have it, for samples that follow its exit), so that it is known to
    // have exited (HasExited: the series of its pid/tid go). One gone from /proc already is
    // marked exited by Lookup itself.
    (void)Lookup(tid);
    it = map_.find(tid);
    if (it == map_.end() || it->second.exited) return;
  }
  it->second.exited = true;
  exited_.push_back(tid);
  while (exited_.size() > kExitGrace) {
    auto old = map_.find(exited_.front());
    if (old != map_.end() && old->second.exited) map_.erase(old);  // not reused since
    exited_.pop_front();
  }
}

std::string_view CommTable::Lookup(uint32_t tid) {
  auto it = map_.find(tid);
  if (it != map_.end()) {
    const Entry& known = it->second;
    // An entry set before a ring lost records is asked of /proc once (below), unless final.
    if (known.epoch == loss_epoch_ || known.exited) return std::string_view(known.comm, known.len);
  }
  char buf[kCommLen];
  int n = fallback_ ? fallback_(tid, buf, sizeof(buf)) : -1;
  if (n < 0) {
    // The task is gone: remember that (until a COMM/FORK record says otherwise, or it ages out
    // like an exited task) instead of re-reading /proc for each of its samples.
    Entry& e = Set(tid, "[unknown]");
    OnExit(tid);
    return std::string_view(e.comm, e.len);
  }
  Entry& e = Set(tid, std::string_view(buf, static_cast<size_t>(n)));
  return std::string_view(e.comm, e.len);
}

}  // namespace tpe
