#include "profile/learnt_maps.h"

#include <sys/mman.h>

#include <algorithm>

namespace tpe {

LearntMaps::LearntMaps(size_t max_processes) : max_(std::max<size_t>(max_processes, 1)) {}

LearntMaps::Entry& LearntMaps::Touch(uint32_t pid) {
  auto it = procs_.find(pid);
  if (it != procs_.end()) return it->second;
  if (procs_.size() >= max_) EvictOne();
  Entry& e = procs_[pid];
  e.seq = next_seq_++;
  live_order_.emplace(e.seq, pid);
  return e;
}

void LearntMaps::EvictOne() {
  auto& order = exited_order_.empty() ? live_order_ : exited_order_;
  if (order.empty()) return;
  const auto first = order.begin();
  procs_.erase(first->second);
  order.erase(first);
  ++evicted_;
}

void LearntMaps::OnMmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint32_t maj, uint32_t min,
                        uint64_t ino, uint32_t prot, std::string_view filename) {
  if (len == 0 || addr + len < addr) return;
  ProcMapping m;
  m.start = addr;
  m.end = addr + len;
  m.offset = pgoff;
  m.dev_major = maj;
  m.dev_minor = min;
  m.inode = ino;
  m.executable = (prot & PROT_EXEC) != 0;
  if (filename != "//anon") m.path = std::string(filename);
  std::lock_guard<std::mutex> lock(mu_);
  Process& p = Touch(pid).p;
  p.generation = next_generation_++;
  auto& maps = p.mappings;
  std::erase_if(maps, [&](const ProcMapping& old) { return old.start < m.end && m.start < old.end; });
  maps.insert(
      std::upper_bound(maps.begin(), maps.end(), m.start, [](uint64_t a, const ProcMapping& x) { return a < x.start; }),
      std::move(m));
}

void LearntMaps::OnExec(uint32_t pid) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = Touch(pid);
  e.p.mappings.clear();
  e.p.complete = true;
  e.p.generation = next_generation_++;
  if (e.p.exited) {  // a pid reused: live again
    exited_order_.erase(e.seq);
    e.p.exited = false;
    e.seq = next_seq_++;
    live_order_.emplace(e.seq, pid);
  }
}

void LearntMaps::OnFork(uint32_t ppid, uint32_t pid) {
  if (ppid == pid) return;  // a new thread: same mappings
  std::lock_guard<std::mutex> lock(mu_);
  auto parent = procs_.find(ppid);
  if (parent == procs_.end()) {
    // Unknown parent: what the child had before is unknown too (a stale entry of a reused pid goes).
    auto old = procs_.find(pid);
    if (old != procs_.end()) {
      (old->second.p.exited ? exited_order_ : live_order_).erase(old->second.seq);
      procs_.erase(old);
    }
    return;
  }
  Process copy = parent->second.p;  // before Touch: it may evict the parent
  copy.exited = false;
  Entry& e = Touch(pid);
  if (e.p.exited) {
    exited_order_.erase(e.seq);
    e.seq = next_seq_++;
    live_order_.emplace(e.seq, pid);
  }
  e.p = std::move(copy);
  e.p.generation = next_generation_++;
}

void LearntMaps::OnExit(uint32_t pid, uint32_t tid) {
  if (pid != tid) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end() || it->second.p.exited) return;
  live_order_.erase(it->second.seq);
  it->second.p.exited = true;
  it->second.seq = next_seq_++;
  exited_order_.emplace(it->second.seq, pid);
}

std::optional<LearntMaps::Process> LearntMaps::Get(uint32_t pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = procs_.find(pid);
  if (it == procs_.end()) return std::nullopt;
  return it->second.p;
}

size_t LearntMaps::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return procs_.size();
}

uint64_t LearntMaps::evicted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return evicted_;
}

}  // namespace tpe
