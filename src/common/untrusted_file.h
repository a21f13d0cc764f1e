// Opening, as root, a file that another user controls: a perf map in /tmp, a binary a process
// maps, a debug file. The daemon runs as root, so a plain open(2) of such a path lets its owner
// choose what the daemon does: a FIFO blocks the opening thread until a writer comes (forever),
// a symlink to /dev/zero or a sparse file of any size is read until memory runs out, a symlink
// redirects the read to a file the user may not read, and a file planted in a shared /tmp for
// another user's pid is believed.
//
// OpenUntrusted never blocks and never opens anything but a regular file: the path is first
// opened with O_PATH (which does not open the inode: no FIFO wait, no device open(), no side
// effect), fstat(2) says what it is, and only a regular file that passes every check is reopened
// for reading through /proc/self/fd/N (proc(5); open(2), O_PATH). Each refusal has its own
// reason (FileRefusal), so callers can count them.
//
// Symlinks (UntrustedFileOptions::symlinks):
//  - kFollow: resolved as open(2) does (a path the administrator named: /usr/lib/libc.so.6);
//  - kRefuseLast: the last component must not be a symlink (O_NOFOLLOW);
//  - kRefuseAny: no component may be a symlink: openat2(2) RESOLVE_NO_SYMLINKS (Linux 5.6); on
//    older kernels (ENOSYS) the components are opened one openat(O_PATH | O_NOFOLLOW) at a time
//    and any that is a symlink is refused.
// OpenUntrustedInRoot resolves a path below a root directory (e.g. /proc/PID/root, a process's
// own mount namespace) with openat2 RESOLVE_IN_ROOT; ".." is refused, so with kRefuseAny the
// result is always below the root.
//
// Thread-safety: free functions, safe from any thread; FileRefusalCounts is thread-safe.
// Sources: open(2) (O_PATH, O_NOFOLLOW, O_NONBLOCK), openat2(2) (RESOLVE_*), fstat(2),
// fifo(7), proc(5) (/proc/self/fd), and perf's rule for perf maps (tools/perf/util/symbol.c,
// dso__load: "not owned by current user or root, ignoring it").
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "common/metric_desc.h"
#include "common/scoped_fd.h"
#include "common/status.h"

namespace tpe {

// Why a file was refused. kNone: not refused (opened, or absent / unreadable: see the Status).
enum class FileRefusal : uint8_t {
  kNone = 0,
  kFifo,        // a FIFO (named pipe): opening it would wait for a writer
  kNotRegular,  // a directory, character or block device, socket (anything but a regular file or FIFO)
  kSymlink,     // a symbolic link where the options allow none
  kTooLarge,    // more than UntrustedFileOptions::max_bytes bytes
  kOwner,       // owned by a uid that UntrustedFileOptions::owners does not list
};
inline constexpr size_t kFileRefusalReasons = 6;  // including kNone

// The reason's name as a metric label value: "fifo", "not_regular", "symlink", "too_large",
// "owner" ("" for kNone).
const char* FileRefusalName(FileRefusal reason);

struct UntrustedFileOptions {
  enum class Symlinks { kFollow, kRefuseLast, kRefuseAny };
  // Files with more bytes (st_size, and what a read finds) are refused as kTooLarge. Required:
  // there is no unbounded default.
  uint64_t max_bytes = 0;
  Symlinks symlinks = Symlinks::kRefuseLast;
  // The uids that may own the file; empty: any.
  std::vector<uid_t> owners;
  // Tests: behave as on a kernel without openat2(2).
  bool force_no_openat2 = false;
};

// A regular file opened for reading (O_RDONLY | O_CLOEXEC | O_NONBLOCK) and its fstat(2).
struct UntrustedFile {
  ScopedFd fd;
  struct stat st {};
};

// Opens `path` as `options` say. Returns the file, or:
//  - a refusal (`*refusal` set to the reason; code InvalidArgument for kFifo, kNotRegular,
//    kTooLarge, PermissionDenied for kSymlink and kOwner), the message naming `path`, what it is
//    and what is accepted;
//  - NotFound / PermissionDenied / Internal from open(2) (`*refusal` = kNone), naming `path`.
// `refusal` may be null. Never blocks on the file (FIFO, device) and never opens a non-regular
// file for reading.
StatusOr<UntrustedFile> OpenUntrusted(const std::string& path, const UntrustedFileOptions& options,
                                      FileRefusal* refusal = nullptr);

// As OpenUntrusted, for `relative` (no leading '/' needed; "." and empty components are skipped;
// ".." is refused with InvalidArgument) below the directory `root_fd`, as if `root_fd` were "/"
// (openat2 RESOLVE_IN_ROOT: a followed absolute symlink stays below it too). With kRefuseAny no
// component of `relative` may be a symlink. Where openat2 is missing (before Linux 5.6, or
// refused by a seccomp filter) kRefuseAny walks the components, and kFollow / kRefuseLast fall
// back to openat(2), where an absolute symlink resolves from the daemon's own root. The root
// itself is the caller's (open it through /proc/PID/root to be in a process's mount namespace).
// `display` names the file in messages (e.g. "/proc/42/root/tmp/perf-7.map").
StatusOr<UntrustedFile> OpenUntrustedInRoot(int root_fd, const std::string& relative,
                                            const UntrustedFileOptions& options, const std::string& display,
                                            FileRefusal* refusal = nullptr);

// Reads `file` from offset 0 to its end (pread(2): the file offset is not used). A file that has
// grown past `max_bytes` since it was opened is refused as kTooLarge (`*refusal` set); read
// errors are Internal. Never more than max_bytes + 1 bytes are read.
StatusOr<std::string> ReadUntrusted(const UntrustedFile& file, uint64_t max_bytes, const std::string& display,
                                    FileRefusal* refusal = nullptr);

// Refusals counted by reason, for a self-metric such as
// tracepoint_exporter_profile_file_refusals_total{source,reason}; the first refusal of each
// reason is logged (warn) with its message, later ones only counted. Thread-safe.
class FileRefusalCounts {
 public:
  // `source` names the files in the log line ("perf_map", "elf").
  explicit FileRefusalCounts(std::string source) : source_(std::move(source)) {}
  // Counts `reason` (kNone is ignored); logs `status` the first time `reason` is seen.
  void Add(FileRefusal reason, const Status& status);
  uint64_t Get(FileRefusal reason) const { return counts_[static_cast<size_t>(reason)].load(); }
  uint64_t Total() const;
  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::array<std::atomic<uint64_t>, kFileRefusalReasons> counts_{};
  std::array<std::atomic<bool>, kFileRefusalReasons> logged_{};
};

// Self-metrics counted here (common/metric_desc.h; written by the pipeline's Snapshot).
inline constexpr MetricDesc kProfileFileRefusalsTotalDesc{
    "tracepoint_exporter_profile_file_refusals_total",
    "Files other users control that were refused (source elf or perf_map: a render's reads; unwind: "
    "the unwind tables of a \"dwarf\" profile's samples), by "
    "reason: fifo, not_regular, symlink, too_large, owner. Each reason is logged once.",
    MetricKind::kCounter};

}  // namespace tpe
