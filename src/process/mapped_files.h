// MappedFiles: every file a profile's stacks point into, interned once for the daemon's life, so
// that a user frame is (file id, file offset) — as pprof's and Parca's normalized locations —
// and no longer (pid, address): a frame keeps naming the code it was taken in after its process
// exec'd, exited or its pid was reused, and no process's address layout leaves the host.
//
// A file's identity is what a mapping record gives (perf_event_open(2) PERF_RECORD_MMAP2: path,
// device, inode) plus its content as stat(2) saw it when a sample first used it (size and
// modification time): a file overwritten in place afterwards keeps its inode but is another
// identity, and the renderer names the old one only if the file still matches (else its frames
// keep file and offset, counted). Anonymous executable memory (JIT code, named through the
// process's perf map) is one entry per process image; pseudo files ([vdso], [vsyscall]) one per
// name.
//
// Bounded: at most `max_files` entries (never evicted: stacks hold their ids as long as their
// profile lives); past it Intern returns kNoFile and counts the refusal.
//
// Thread-safety: every method from any thread (one mutex); Get returns a copy.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/metric_desc.h"

namespace tpe {

// An index into MappedFiles; kNoFile: the frame lies in no mapping known for its process.
using FileId = uint32_t;
inline constexpr FileId kNoFile = 0;

struct MappedFile {
  enum class Kind : uint8_t {
    kFile,       // a file on a file system
    kAnonymous,  // anonymous executable memory of one process image (JIT code)
    kPseudo,     // a kernel-provided image: [vdso], [vsyscall]
  };
  Kind kind = Kind::kFile;
  std::string path;  // as the process named it (in its own mount namespace); "" for kAnonymous
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;
  // stat(2) of the file when a sample first used it; `stat_known` false when it could not be
  // reached then (the process and the file were gone).
  bool stat_known = false;
  uint64_t size = 0;     // bytes
  int64_t mtime_ns = 0;  // st_mtim, ns since the epoch
  // Where the file could be reached when it was interned: process `pid` mapped it at
  // [map_start, map_end) (/proc/PID/map_files/START-END, /proc/PID/root/PATH); for kAnonymous
  // the process whose JIT code it is. `image_ns`: that process image's start (0: before the
  // daemon learnt it), which tells a reused pid apart.
  uint32_t pid = 0;
  uint64_t map_start = 0, map_end = 0;
  uint64_t image_ns = 0;

  // The fields that make two entries one file (kind, path, device, inode, size, mtime; the
  // process image for anonymous memory).
  auto Identity() const {
    return std::make_tuple(kind, path, dev_major, dev_minor, inode, stat_known, size, mtime_ns,
                           kind == Kind::kAnonymous ? pid : 0u, kind == Kind::kAnonymous ? image_ns : 0ull);
  }
};

class MappedFiles {
 public:
  explicit MappedFiles(size_t max_files = 1 << 20) : max_files_(max_files) {}

  // The id of the entry with `f`'s Identity(), made now if there is none (ids from 1, never
  // reused). kNoFile when the table is full (counted in refused()).
  FileId Intern(const MappedFile& f);
  // A copy of entry `id`; nullopt for kNoFile or an id never handed out.
  std::optional<MappedFile> Get(FileId id) const;

  size_t size() const;
  uint64_t refused() const;
  // Approximate bytes held (entries and their paths).
  size_t memory_bytes() const;

 private:
  const size_t max_files_;
  mutable std::mutex mu_;
  std::vector<MappedFile> files_;  // id - 1
  std::map<decltype(std::declval<MappedFile>().Identity()), FileId> ids_;
  uint64_t refused_ = 0;
  size_t bytes_ = 0;
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileMappedFilesDesc{
    "tracepoint_exporter_profile_mapped_files",
    "Distinct files (path, device, inode, size, mtime) profiles' user frames lie in.", MetricKind::kGauge};

}  // namespace tpe
