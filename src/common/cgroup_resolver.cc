#include "common/cgroup_resolver.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <filesystem>
#include <vector>

#include "common/file_util.h"
#include "common/scoped_fd.h"

namespace tpe {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' && s[i + 2] <= '7' &&
        s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::vector<std::string_view> Split(std::string_view line) {
  std::vector<std::string_view> f;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) f.push_back(line.substr(i, j - i));
    i = j;
  }
  return f;
}

}  // namespace

// Source: proc(5) /proc/pid/mountinfo:
//   36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//   (1)(2)(3)   (4)   (5)      (6)      (7)   (8) (9)   (10)         (11)
// (7) is zero or more optional fields ended by "-"; (9) is the filesystem type.
std::string FindCgroup2Mount(std::string_view mountinfo) {
  while (!mountinfo.empty()) {
    size_t nl = mountinfo.find('\n');
    std::string_view line = mountinfo.substr(0, nl);
    mountinfo = nl == std::string_view::npos ? std::string_view() : mountinfo.substr(nl + 1);
    std::vector<std::string_view> f = Split(line);
    size_t dash = 6;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (f.size() < 5 || dash + 1 >= f.size()) continue;
    if (f[dash + 1] == "cgroup2") return Unescape(f[4]);
  }
  return "";
}

std::string DiscoverCgroup2Mount() {
  auto text = ReadFileToString("/proc/self/mountinfo");
  return text.ok() ? FindCgroup2Mount(*text) : "";
}

std::optional<uint64_t> KernfsCgroupId(const std::string& path) {
  struct {
    file_handle fh;
    unsigned char bytes[MAX_HANDLE_SZ];
  } h{};
  h.fh.handle_bytes = MAX_HANDLE_SZ;
  int mount_id = 0;
  if (name_to_handle_at(AT_FDCWD, path.c_str(), &h.fh, &mount_id, 0) != 0) return std::nullopt;
  if (h.fh.handle_bytes != sizeof(uint64_t)) return std::nullopt;
  uint64_t id = 0;
  std::memcpy(&id, h.fh.f_handle, sizeof(id));
  return id;
}

// Source: open_by_handle_at(2); the kernfs handle is FILEID_KERNFS (0xfe) with the 8-byte node
// id (include/linux/exportfs.h, fs/kernfs/mount.c kernfs_fh_to_dentry).
std::optional<std::string> KernfsCgroupPath(const std::string& root, uint64_t id) {
  constexpr int kFileIdKernfs = 0xfe;
  ScopedFd mount(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (mount.get() < 0) return std::nullopt;
  struct {
    file_handle fh;
    unsigned char bytes[sizeof(uint64_t)];
  } h{};
  h.fh.handle_bytes = sizeof(uint64_t);
  h.fh.handle_type = kFileIdKernfs;
  std::memcpy(h.fh.f_handle, &id, sizeof(id));
  ScopedFd fd(::open_by_handle_at(mount.get(), &h.fh, O_PATH | O_CLOEXEC));
  if (fd.get() < 0) return std::nullopt;
  char buf[4096];
  const std::string link = "/proc/self/fd/" + std::to_string(fd.get());
  ssize_t n = ::readlink(link.c_str(), buf, sizeof(buf));
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return std::nullopt;
  std::string abs(buf, static_cast<size_t>(n));
  std::string base = root.size() > 1 && root.back() == '/' ? root.substr(0, root.size() - 1) : root;
  if (base == "/") base.clear();
  if (abs.compare(0, base.size(), base) != 0) return std::nullopt;  // outside the mount (namespace)
  std::string rel = abs.substr(base.size());
  if (rel.empty()) return std::string("/");
  if (rel[0] != '/' || rel.find(" (deleted)") != std::string::npos) return std::nullopt;
  return rel;
}

CgroupResolver::CgroupResolver(std::string root, IdOf id_of, PathOfId path_of_id)
    : root_(std::move(root)), id_of_(std::move(id_of)), path_of_id_(std::move(path_of_id)) {}

std::string CgroupResolver::PathOf(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = paths_.find(id);
  if (it != paths_.end()) return it->second;
  if (root_.empty()) return std::to_string(id);
  if (path_of_id_) {
    if (auto path = path_of_id_(root_, id)) return paths_.emplace(id, std::move(*path)).first->second;
  }
  Walk();
  it = paths_.find(id);
  if (it != paths_.end()) return it->second;
  // Not in a walk done after the sample was taken: its cgroup is gone. Remember the verdict so
  // that the label keeps one value.
  return paths_.emplace(id, kUnknown).first->second;
}

void CgroupResolver::Walk() {
  ++walks_;
  std::unordered_map<uint64_t, std::string> fresh;
  auto add = [&](const std::string& abs, std::string rel) {
    if (auto id = id_of_(abs)) fresh.emplace(*id, std::move(rel));
  };
  add(root_, "/");
  std::error_code ec;
  namespace fs = std::filesystem;
  fs::recursive_directory_iterator it(root_, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code tec;
    if (!it->is_directory(tec) || it->is_symlink(tec)) {
      if (it->is_symlink(tec)) it.disable_recursion_pending();
      continue;
    }
    const std::string abs = it->path().string();
    add(abs, abs.substr(root_.size() == 1 ? 0 : root_.size()));
  }
  // Keep the paths of cgroups removed since (their series still carry them), within a bound.
  size_t stale = 0;
  for (auto& [id, path] : paths_) {
    if (stale >= kMaxStale) break;
    stale += fresh.emplace(id, std::move(path)).second ? 1 : 0;
  }
  paths_ = std::move(fresh);
}

}  // namespace tpe
