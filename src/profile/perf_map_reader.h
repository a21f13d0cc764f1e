// Finds, reads and caches the perf map file of a process (perf_map.h: /tmp/perf-PID.map, JIT
// symbols), as perf does and as safely as a root daemon must: the file belongs to whichever user
// runs the process, and anyone can create files in /tmp.
//
// For process `pid` (in the daemon's pid namespace), the file is
//   PROC_ROOT/pid/root/tmp/perf-N.map
// where N is the process's id in its own pid namespace (the last entry of the NStgid line of
// /proc/PID/status, Linux 4.1; NSpid's, then `pid`, where a kernel has no NStgid) — a runtime in
// a container names its map with the pid it sees — and /proc/PID/root puts the lookup in the
// process's own mount namespace (its /tmp, not the host's). The path is resolved below that root
// with no symlink in any component (openat2 RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS, or a
// component walk on kernels before 5.6). The file must be a regular file (never a FIFO or a
// device: nothing blocks), of at most Options::max_file_bytes, owned by the process's effective
// uid (the Uid line of /proc/PID/status) or by root — perf's rule ("not owned by current user or
// root, ignoring it", tools/perf/util/symbol.c), with the process's user in place of perf's.
// /proc/PID is opened once and status and root are read through that directory fd, so a pid
// reused meanwhile gives ESRCH instead of another process's file.
//
// Parsed maps are cached by the file's (device, inode, mtime, size): a render that finds the
// same file reads nothing but its metadata; a runtime that appends to its map changes mtime and
// size, and the next Get reads it again (the older version is dropped). The cache is bounded by
// Options::max_cache_bytes (PerfMap::memory_bytes) and max_files, least recently used first out.
//
// Refusals are counted by reason (refusals(): the self-metric
// tracepoint_exporter_profile_file_refusals_total{source="perf_map",reason}); the first of each
// reason is logged. A process with no map file is the common case: not counted, not logged.
//
// Thread-safety: every method, from any thread; Get reads files without holding the lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "common/status.h"
#include "common/untrusted_file.h"
#include "profile/perf_map.h"

namespace tpe {

// What /proc/PID/status says about a process's identity, for reading its files.
struct ProcessIdentity {
  uint32_t ns_tgid = 0;  // its thread group id in its own (innermost) pid namespace
  uid_t euid = 0;        // its effective uid, in the reader's user namespace
};
// Parses a /proc/PID/status text: NStgid's last entry (else NSpid's, else Tgid's) and the
// second field of Uid. Errors: InvalidArgument naming `display` when no Tgid/NStgid/NSpid or no
// Uid line parses.
StatusOr<ProcessIdentity> ParseProcessIdentity(const std::string& status_text, const std::string& display);

class PerfMapCache {
 public:
  struct Options {
    // A map file with more bytes is refused (too_large). 64 MiB: about 600,000 lines of a
    // Node --perf-basic-prof map (~100 bytes a line); perf itself has no bound.
    uint64_t max_file_bytes = uint64_t{64} << 20;
    // Lines parsed per file (the newest kept; PerfMap::Parse).
    size_t max_entries = PerfMap::kDefaultMaxEntries;
    // Parsed maps kept, in PerfMap::memory_bytes. 128 MiB: one map at both bounds above
    // (64 MiB of names + 48 MiB of entries) still fits.
    uint64_t max_cache_bytes = uint64_t{128} << 20;
    size_t max_files = 256;
  };
  struct Stats {
    uint64_t reads = 0;            // files read and parsed
    uint64_t hits = 0;             // Gets answered from the cache (same device, inode, mtime, size)
    uint64_t evictions = 0;        // maps dropped to stay within max_cache_bytes / max_files
    uint64_t replaced = 0;         // maps dropped for a newer version of their file (same inode)
    uint64_t truncated_lines = 0;  // lines past max_entries, over all reads
    uint64_t unreadable = 0;       // other errors than refusals and absence (I/O, permission)
  };

  // `proc_root`: where /proc is ("/proc"; tests use a fake tree with PID/status and PID/root).
  explicit PerfMapCache(std::string proc_root);
  PerfMapCache(std::string proc_root, Options options);

  // The perf map of process `pid`, or null: the process is gone, has no map file, or its file
  // was refused (counted in refusals()) or could not be read (stats().unreadable). `why`, when
  // not null, gets the reason: NotFound for no file or no process, the refusal's or read's
  // Status otherwise; Ok with a map.
  std::shared_ptr<const PerfMap> Get(uint32_t pid, Status* why = nullptr);

  const FileRefusalCounts& refusals() const { return refusals_; }
  Stats stats() const;
  size_t size() const;            // maps kept
  uint64_t memory_bytes() const;  // their PerfMap::memory_bytes, summed

 private:
  struct Key {
    dev_t dev;
    ino_t ino;
    int64_t mtime_ns;
    int64_t size;
    auto operator<=>(const Key&) const = default;
  };
  struct Entry {
    std::shared_ptr<const PerfMap> map;
    uint64_t bytes = 0;
    std::list<Key>::iterator lru;  // position in lru_ (front: most recent)
  };
  // Keeps `map` under `key`, dropping the least recently used past the bounds. Needs mu_.
  void PutLocked(const Key& key, std::shared_ptr<const PerfMap> map);

  const std::string proc_root_;
  const Options options_;
  FileRefusalCounts refusals_{"perf_map"};
  mutable std::mutex mu_;
  std::map<Key, Entry> maps_;  // guarded by mu_
  std::list<Key> lru_;         // guarded by mu_
  uint64_t bytes_ = 0;         // guarded by mu_
  Stats stats_;                // guarded by mu_
};

}  // namespace tpe
