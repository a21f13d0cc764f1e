// ProcessMapsCache: what live processes map, read from /proc/PID/maps once and kept between
// profile renders. A continuous profile is rendered at every scrape, and reading and parsing
// every process's maps each time was the largest part of a render.
//
// A kept copy is used again while the process is the same and has mapped nothing executable
// since:
//  - the same process: its start time (proc(5) /proc/PID/stat field 22, clock ticks since boot)
//    is unchanged, so a pid reused by another process is read anew;
//  - the same program: /proc/PID/exe names the same file (device and inode), so an exec of
//    another program is read anew even when its records were lost from a full ring (an exec
//    keeps the start time);
//  - nothing new mapped: the caller's `generation` for the pid is unchanged (LearntMaps::Process::
//    generation, stamped by every PERF_RECORD_MMAP2, exec and fork of the process);
//  - and the copy is younger than `max_age_ns` (60 s by default): records lost in a full ring
//    leave a generation unchanged, so no copy is trusted for long.
// Only executable mappings are kept (an instruction address lies in one; LearntMaps keeps the
// same): a return address a frame-pointer walk made up from data, which used to land in
// [heap] or [stack] and count as unsymbolized, is now [unknown] (unknown_mapping). An exec of
// the same file whose records were all lost keeps the old copy until max_age_ns: its frames
// are [unknown] (ASLR moved them) until then.
//
// Thread-safety: every member may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "profile/process_maps.h"

namespace tpe {

class ProcessMapsCache {
 public:
  // `proc_root`: where /proc is ("/proc"; tests use a fake tree).
  explicit ProcessMapsCache(std::string proc_root, uint64_t max_age_ns = 60'000'000'000ULL);

  // The executable mappings of `pid` (sorted by start), kept or read now (`now_ns`: a monotonic
  // clock, ns). nullopt when /proc/PID/maps or /proc/PID/stat cannot be read or parsed (the
  // process exited, or is not readable).
  std::optional<std::vector<ProcMapping>> Get(uint32_t pid, uint64_t generation, uint64_t now_ns);

  // Forgets every process not in `live` (sorted ascending: ListProcesses'). Bounds the cache
  // by the processes alive.
  void Retain(const std::vector<uint32_t>& live);

  size_t size() const;
  // How many times /proc/PID/maps was read (for tests and the benchmark).
  uint64_t reads() const;

 private:
  // What tells one process (and program) from another behind a pid.
  struct Identity {
    uint64_t start_ticks = 0;  // /proc/PID/stat starttime
    uint64_t exe_dev = 0;      // stat(2) of /proc/PID/exe; 0, 0 when unreadable (kernel
    uint64_t exe_ino = 0;      // threads, a process of another user namespace's root)
    bool operator==(const Identity&) const = default;
  };
  struct Entry {
    Identity identity;
    uint64_t generation = 0;
    uint64_t read_ns = 0;
    std::vector<ProcMapping> mappings;
  };
  // The process's identity; nullopt when its stat is unreadable (it exited).
  std::optional<Identity> IdentityOf(uint32_t pid) const;

  const std::string proc_root_;
  const uint64_t max_age_ns_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, Entry> entries_;
  uint64_t reads_ = 0;
};

}  // namespace tpe
