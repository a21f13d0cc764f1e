#include "process/process_maps.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <memory>

namespace tpe {

std::string ProcMapping::Identity() const {
  return std::to_string(dev_major) + ":" + std::to_string(dev_minor) + ":" + std::to_string(inode);
}

StatusOr<std::vector<ProcMapping>> ParseProcMaps(std::string_view text) {
  std::vector<ProcMapping> out;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string line(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    ProcMapping m;
    char perms[8] = {};
    unsigned long long ino = 0;
    int path_at = -1;
    // "start-end perms offset MAJOR:MINOR inode [path]"
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %llu %n", &m.start, &m.end, perms,
                    &m.offset, &m.dev_major, &m.dev_minor, &ino, &path_at) != 7 ||
        m.end < m.start) {
      return InvalidArgument("maps line " + std::to_string(line_no) +
                             " is not \"start-end perms offset MAJOR:MINOR inode [path]\": \"" + line.substr(0, 120) +
                             "\"");
    }
    m.inode = ino;
    m.executable = std::string_view(perms).find('x') != std::string_view::npos;
    if (path_at > 0 && static_cast<size_t>(path_at) < line.size()) m.path = line.substr(static_cast<size_t>(path_at));
    out.push_back(std::move(m));
  }
  std::sort(out.begin(), out.end(), [](const ProcMapping& a, const ProcMapping& b) { return a.start < b.start; });
  return out;
}

const ProcMapping* MappingAt(const std::vector<ProcMapping>& mappings, uint64_t address) {
  auto it = std::upper_bound(mappings.begin(), mappings.end(), address,
                             [](uint64_t a, const ProcMapping& m) { return a < m.start; });
  if (it == mappings.begin()) return nullptr;
  --it;
  return address < it->end ? &*it : nullptr;
}

StatusOr<std::vector<uint32_t>> ListProcesses(const std::string& proc_root) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(proc_root.c_str()), ::closedir);
  if (dir == nullptr) return ErrnoStatus(errno, "opendir " + proc_root);
  std::vector<uint32_t> pids;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(dir.get());
    if (e == nullptr) {
      // A list cut short would take live processes for exited ones.
      if (errno != 0) return ErrnoStatus(errno, "readdir " + proc_root);
      break;
    }
    uint64_t pid = 0;
    const char* c = e->d_name;
    for (; *c >= '0' && *c <= '9' && pid <= UINT32_MAX; ++c) pid = pid * 10 + static_cast<uint64_t>(*c - '0');
    if (*c == '\0' && c != e->d_name && pid <= UINT32_MAX) pids.push_back(static_cast<uint32_t>(pid));
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

}  // namespace tpe
