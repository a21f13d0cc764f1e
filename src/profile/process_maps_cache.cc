#include "profile/process_maps_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#include "common/file_util.h"

namespace tpe {

ProcessMapsCache::ProcessMapsCache(std::string proc_root, uint64_t max_age_ns)
    : proc_root_(std::move(proc_root)), max_age_ns_(max_age_ns) {}

std::optional<ProcessMapsCache::Identity> ProcessMapsCache::IdentityOf(uint32_t pid) const {
  const std::string base = proc_root_ + "/" + std::to_string(pid);
  auto text = ReadFileToString(base + "/stat");
  if (!text.ok()) return std::nullopt;
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; fields count from the
  // last ')'. starttime is field 22, the 20th after it.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  const char* p = text->c_str() + close + 1;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  while (*p == ' ') ++p;
  if (*p < '0' || *p > '9') return std::nullopt;
  Identity id;
  id.start_ticks = std::strtoull(p, nullptr, 10);
  struct stat st {};
  if (::stat((base + "/exe").c_str(), &st) == 0) {
    id.exe_dev = st.st_dev;
    id.exe_ino = st.st_ino;
  }
  return id;
}

std::optional<std::vector<ProcMapping>> ProcessMapsCache::Get(uint32_t pid, uint64_t generation, uint64_t now_ns) {
  const auto identity = IdentityOf(pid);
  if (!identity) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(pid);
    if (it != entries_.end() && it->second.identity == *identity && it->second.generation == generation &&
        now_ns >= it->second.read_ns && now_ns - it->second.read_ns < max_age_ns_) {
      return it->second.mappings;
    }
  }
  auto text = ReadFileToString(proc_root_ + "/" + std::to_string(pid) + "/maps");
  if (!text.ok()) return std::nullopt;
  auto maps = ParseProcMaps(*text);
  if (!maps.ok()) return std::nullopt;
  std::erase_if(*maps, [](const ProcMapping& m) { return !m.executable; });
  std::lock_guard<std::mutex> lock(mu_);
  ++reads_;
  entries_[pid] = Entry{*identity, generation, now_ns, *maps};
  return std::move(maps).value();
}

void ProcessMapsCache::Retain(const std::vector<uint32_t>& live) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(entries_, [&](const auto& e) { return !std::binary_search(live.begin(), live.end(), e.first); });
}

size_t ProcessMapsCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

uint64_t ProcessMapsCache::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

}  // namespace tpe
