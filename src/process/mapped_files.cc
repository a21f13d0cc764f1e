#include "process/mapped_files.h"

namespace tpe {

FileId MappedFiles::Intern(const MappedFile& f) {
  auto identity = f.Identity();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(identity);
  if (it != ids_.end()) return it->second;
  if (files_.size() >= max_files_) {
    ++refused_;
    return kNoFile;
  }
  files_.push_back(f);
  const FileId id = static_cast<FileId>(files_.size());
  ids_.emplace(std::move(identity), id);
  // The entry, its copy of the path in the index key, and the index node.
  bytes_ += sizeof(MappedFile) + 2 * f.path.size() + 128;
  return id;
}

std::optional<MappedFile> MappedFiles::Get(FileId id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id == kNoFile || id > files_.size()) return std::nullopt;
  return files_[id - 1];
}

size_t MappedFiles::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.size();
}

uint64_t MappedFiles::refused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return refused_;
}

size_t MappedFiles::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace tpe
