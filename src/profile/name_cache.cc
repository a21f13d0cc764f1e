#include "profile/name_cache.h"

namespace tpe {

size_t NameCache::Find(std::span<const Key> keys, std::vector<Name>* out) const {
  out->assign(keys.size(), Name{});
  size_t found = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = names_.find(keys[i]);
    if (it == names_.end()) continue;
    (*out)[i] = it->second;
    ++found;
  }
  stats_.hits += found;
  stats_.misses += keys.size() - found;
  return found;
}

size_t NameCache::CountKept(std::span<const Key> keys) const {
  size_t found = 0;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Key& k : keys) found += names_.contains(k) ? 1 : 0;
  return found;
}

void NameCache::Put(const Key& key, Name name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (names_.size() >= max_entries_ && !names_.contains(key)) {
    names_.clear();
    ++stats_.resets;
  }
  names_[key] = std::move(name);
}

NameCache::Stats NameCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = names_.size();
  return s;
}

}  // namespace tpe
