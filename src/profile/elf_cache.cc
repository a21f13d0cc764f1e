#include "profile/elf_cache.h"

namespace tpe {

std::shared_ptr<const elf::ElfFile> ElfFileCache::Find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(key);
  if (it == files_.end()) {
    ++stats_.misses;
    return nullptr;
  }
  ++stats_.hits;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.file;
}

void ElfFileCache::Put(const std::string& key, std::shared_ptr<const elf::ElfFile> file) {
  if (file == nullptr) return;
  const uint64_t bytes = file->memory_bytes();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = files_.find(key); it != files_.end()) EraseLocked(it);
  if (bytes > options_.max_bytes || options_.max_files == 0) {
    ++stats_.not_kept;
    return;
  }
  while (!lru_.empty() && (bytes_ + bytes > options_.max_bytes || files_.size() >= options_.max_files)) {
    EraseLocked(files_.find(lru_.back()));
    ++stats_.evictions;
  }
  lru_.push_front(key);
  files_.emplace(key, Entry{std::move(file), bytes, lru_.begin()});
  bytes_ += bytes;
}

void ElfFileCache::EraseLocked(std::unordered_map<std::string, Entry>::iterator it) {
  bytes_ -= it->second.bytes;
  lru_.erase(it->second.lru);
  files_.erase(it);
}

size_t ElfFileCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

uint64_t ElfFileCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

ElfFileCache::Stats ElfFileCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string ElfFileCache::KeyOf(const struct stat& st) {
  return std::to_string(static_cast<uint64_t>(st.st_dev)) + ":" + std::to_string(static_cast<uint64_t>(st.st_ino)) +
         ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace tpe
