// Opening the very file a process mapped (MappedFile), as an untrusted file: what the symbolizer
// reads symbols from and the unwinder reads unwind tables from.
//
// Tried in order: /proc/PID/map_files/START-END (a magic link to the mapped file itself, still
// reachable when the file was deleted or replaced under its path; needs CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE), the path in the process's own mount namespace (/proc/PID/root, no
// symlink followed in it: a container's /usr/bin/app is not the host's), then the path in the
// daemon's root (no symlink followed; a process that exited). Each is opened with
// common/untrusted_file.h (regular files only, never a FIFO or device, bounded) and accepted
// only when the opened file is the one the frames were taken in: its inode, and its size and
// mtime when they were known (MappedFile::stat_known).
//
// Thread-safety: a free function; `refusals` is thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "common/untrusted_file.h"
#include "process/mapped_files.h"

namespace tpe {

// The file `f` (kind kFile) opened for reading, and `display`, how it was reached (for
// messages). Errors: NotFound when no way reaches that very file (the process and the file are
// gone, or the file was replaced or overwritten since: `*changed` true when a file was found
// under the path that is another one); each refusal is counted in `refusals` (optional).
// `max_bytes`: larger files are refused.
StatusOr<UntrustedFile> OpenMappedFile(const MappedFile& f, const std::string& proc_root, uint64_t max_bytes,
                                       FileRefusalCounts* refusals, std::string* display, bool* changed = nullptr);

}  // namespace tpe
