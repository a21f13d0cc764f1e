// cgroup v2 ids → paths, for the "cgroup" label source.
//
// A PERF_SAMPLE_CGROUP sample carries the task's cgroup v2 id: the kernfs node id of its cgroup
// directory, which is also that directory's file handle (name_to_handle_at(2) gives handle_type
// FILEID_KERNFS and 8 bytes that are the id; kernel/cgroup/cgroup.c, fs/kernfs/mount.c). So
// walking the cgroup2 hierarchy and asking each directory for its handle builds id → path.
//
// Paths are relative to the cgroup2 mount, with a leading "/" ("/" is the root cgroup,
// "/system.slice/ssh.service"); the same form as /proc/<pid>/cgroup's "0::" line and as
// cAdvisor's `id` label.
//
// The resolver runs at render (scrape) time, never on the reader's hot path (labels key the u64
// id). An id not in the cache is resolved when first seen, so a series' cgroup label never
// changes value: first through open_by_handle_at(2) on the cgroup2 mount with the id as a
// FILEID_KERNFS handle (needs CAP_DAC_READ_SEARCH; the kernel's kernfs_fh_to_dentry), then, if
// that fails, by a fresh walk of the hierarchy (not rate-limited: an id is looked up this way
// once). An id that neither finds belongs to a cgroup removed before it was first rendered (ids
// are never reused): it renders as "unknown" (kUnknown) for good, never as a bare id then a path.
// Entries of removed cgroups are kept (a series keeps its label value until it ages out through
// series_idle_timeout_seconds), up to kMaxStale of them.
//
// Thread-safety: PathOf may be called from any thread (a mutex; scrapes only).
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tpe {

// The mount point of the first cgroup2 filesystem in /proc/self/mountinfo text ("" if none).
// Mount points are unescaped (\040 is a space).
std::string FindCgroup2Mount(std::string_view mountinfo);
// FindCgroup2Mount of this process's /proc/self/mountinfo.
std::string DiscoverCgroup2Mount();

// The cgroup id of a cgroup2 directory: its name_to_handle_at file handle (8 bytes). nullopt
// when the handle is not an 8-byte kernfs handle (not on cgroup2) or the call fails.
std::optional<uint64_t> KernfsCgroupId(const std::string& path);

// The path of cgroup `id` relative to the cgroup2 mount `root` ("/" for the root cgroup), found
// with open_by_handle_at(2) (handle type FILEID_KERNFS, 8 bytes = the id; O_PATH) and the
// opened fd's /proc/self/fd link. nullopt when the cgroup was removed (ESTALE), the caller lacks
// CAP_DAC_READ_SEARCH (EPERM), or `root` is not a cgroup2 mount.
std::optional<std::string> KernfsCgroupPath(const std::string& root, uint64_t id);

class CgroupResolver {
 public:
  using IdOf = std::function<std::optional<uint64_t>(const std::string& path)>;
  using PathOfId = std::function<std::optional<std::string>(const std::string& root, uint64_t id)>;
  static constexpr size_t kMaxStale = 65536;
  // The label value of a cgroup that was removed before its id could be resolved.
  static constexpr const char* kUnknown = "unknown";

  // `root`: the cgroup2 mount ("" = none: every id renders as its decimal number). `id_of`
  // (used by the walk) and `path_of_id` (the direct lookup) are injectable for tests.
  explicit CgroupResolver(std::string root, IdOf id_of = KernfsCgroupId, PathOfId path_of_id = KernfsCgroupPath);

  // The path of cgroup `id`; kUnknown when it can no longer be found; the same value on every
  // call for one id.
  std::string PathOf(uint64_t id);
  const std::string& root() const { return root_; }
  uint64_t walks() const { return walks_; }

 private:
  void Walk();  // mu_ held

  const std::string root_;
  const IdOf id_of_;
  const PathOfId path_of_id_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> paths_;  // guarded by mu_
  uint64_t walks_ = 0;                               // guarded by mu_
};

}  // namespace tpe
