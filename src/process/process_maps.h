// A process's memory mappings, from /proc/PID/maps or PERF_RECORD_MMAP2 records, and the
// mapping that holds an instruction address.
//
// Source: proc(5) "/proc/pid/maps" ("address perms offset dev inode pathname", fs/proc/
// task_mmu.c show_map_vma: dev as hex "MAJOR:MINOR", inode decimal, the path escaped only for
// '\n' as "\012"); perf_event_open(2) PERF_RECORD_MMAP2 (addr, len, pgoff, maj, min, ino,
// prot, filename).
//
// ParseProcMaps and MappingAt are pure; ListProcesses reads a directory. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tpe {

struct ProcMapping {
  uint64_t start = 0;   // first address, inclusive
  uint64_t end = 0;     // end address, exclusive
  uint64_t offset = 0;  // file offset `start` maps, bytes
  uint32_t dev_major = 0, dev_minor = 0;
  uint64_t inode = 0;       // 0: anonymous (or a pseudo mapping: [stack], [vdso], ...)
  bool executable = false;  // 'x' in perms (PROT_EXEC)
  std::string path;         // "" for anonymous; "[vdso]", "[heap]", or the file's path
  // "MAJOR:MINOR:INODE" in decimal: the same file whatever path a process reached it by.
  std::string Identity() const;
  // The file offset of `address` (which must lie in [start, end)).
  uint64_t FileOffset(uint64_t address) const { return address - start + offset; }
};

// Parses /proc/PID/maps text into mappings in address order. Returns InvalidArgument naming
// the first malformed line (its number and text).
StatusOr<std::vector<ProcMapping>> ParseProcMaps(std::string_view text);

// The mapping of `mappings` (sorted by start, not overlapping) that holds `address`, or nullptr.
const ProcMapping* MappingAt(const std::vector<ProcMapping>& mappings, uint64_t address);

// The processes (thread-group ids) alive now: the numeric entries of `proc_root` ("/proc"; tests
// use a fake tree), sorted ascending. One directory read instead of an open per process: a
// render asks about hundreds of processes that exited long ago, and a failed open of
// /proc/PID/maps costs a slow path walk each (proc(5): /proc lists thread-group leaders only).
// Errors: the directory's errno (NotFound, PermissionDenied, ...) naming `proc_root`.
StatusOr<std::vector<uint32_t>> ListProcesses(const std::string& proc_root);

}  // namespace tpe
