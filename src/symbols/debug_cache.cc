#include "symbols/debug_cache.h"

namespace tpe::symbols {

uint64_t DebugCache::BytesOf(const DebugEntry& entry) {
  uint64_t bytes = sizeof(DebugEntry) + entry.display.size();
  if (entry.dwarf != nullptr) bytes += entry.dwarf->memory_bytes();
  if (entry.names != nullptr) bytes += entry.names->memory_bytes();
  return bytes;
}

std::shared_ptr<const DebugEntry> DebugCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

void DebugCache::Erase(const std::string& key) {
  auto it = entries_.find(key);
  if (it == entries_.end()) return;
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  entries_.erase(it);
}

void DebugCache::Put(const std::string& key, std::shared_ptr<const DebugEntry> entry) {
  if (entry == nullptr || max_entries_ == 0) return;
  const uint64_t bytes = BytesOf(*entry);
  std::lock_guard<std::mutex> lock(mu_);
  Erase(key);
  if (bytes > max_bytes_) return;
  while (!lru_.empty() && (entries_.size() >= max_entries_ || bytes_ + bytes > max_bytes_)) {
    Erase(std::string(lru_.back()));
  }
  lru_.push_front(key);
  entries_.emplace(key, Slot{std::move(entry), lru_.begin(), bytes});
  bytes_ += bytes;
}

size_t DebugCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t DebugCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tpe::symbols
