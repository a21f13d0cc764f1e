// cgroup v2 ids → paths, for the "cgroup" label source (issue 10).
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
// id). An id not in the cache triggers a fresh walk, at most once per second; until found it
// renders as the decimal id. Entries of removed cgroups are kept (ids are never reused, and a
// series keeps its label value until it ages out through series_idle_timeout_seconds), up to
// kMaxStale of them.
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

class CgroupResolver {
 public:
  using IdOf = std::function<std::optional<uint64_t>(const std::string& path)>;
  using Clock = std::function<uint64_t()>;  // monotonic ns
  static constexpr uint64_t kRefreshIntervalNs = 1'000'000'000;
  static constexpr size_t kMaxStale = 65536;

  // `root`: the cgroup2 mount ("" = none: every id renders as a number). `id_of` and `now_ns`
  // are injectable for tests.
  explicit CgroupResolver(std::string root, IdOf id_of = KernfsCgroupId, Clock now_ns = nullptr);

  // The path of cgroup `id`, or its decimal id while unknown.
  std::string PathOf(uint64_t id);
  const std::string& root() const { return root_; }
  uint64_t walks() const { return walks_; }

 private:
  void Walk();  // mu_ held

  const std::string root_;
  const IdOf id_of_;
  const Clock now_ns_;
  std::mutex mu_;
  std::unordered_map<uint64_t, std::string> paths_;  // guarded by mu_
  uint64_t last_walk_ns_ = 0;                        // guarded by mu_
  uint64_t walks_ = 0;                               // guarded by mu_
};

}  // namespace tpe
