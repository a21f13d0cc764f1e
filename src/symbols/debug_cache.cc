#include "symbols/debug_cache.h"

namespace tpe::symbols {

std::shared_ptr<const DebugEntry> DebugCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

void DebugCache::Put(const std::string& key, std::shared_ptr<const DebugEntry> entry) {
  if (entry == nullptr || max_entries_ == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  while (!lru_.empty() && entries_.size() >= max_entries_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
  lru_.push_front(key);
  entries_.emplace(key, Slot{std::move(entry), lru_.begin()});
}

size_t DebugCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace tpe::symbols
