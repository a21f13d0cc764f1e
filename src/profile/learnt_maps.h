// LearntMaps: what each process maps, learnt from perf records while it runs, so that the user
// frames of a process that exited before a profile is requested can still be named.
//
// Fed by the reader thread in record order (perf_event_open(2)):
//  - PERF_RECORD_MMAP2 (attr.mmap + attr.mmap2 on the profiles' events): an executable mapping;
//    it replaces what it overlaps, as mmap(2) over an old range does;
//  - PERF_RECORD_COMM with PERF_RECORD_MISC_COMM_EXEC: the process exec'd; its mappings start
//    over and, from then on, are known whole ("complete": every executable mapping since the
//    exec was recorded);
//  - PERF_RECORD_FORK of a new process (pid != ppid): it starts with a copy of its parent's;
//  - PERF_RECORD_EXIT of the thread-group leader (tid == pid): kept, marked exited.
// A process that predates the daemon is known only by the mappings it made since (incomplete):
// the renderer prefers its /proc/PID/maps while it lives.
//
// Bounded: at most `max_processes` processes; beyond that the one that exited longest ago is
// forgotten (else the one learnt longest ago), counted in evicted(). Only executable mappings
// are recorded (a process has tens), so the default 4096 processes hold a few MiB.
//
// Thread-safety: every member may be called from any thread (one mutex); the reader writes,
// renderers read copies.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profile/process_maps.h"

namespace tpe {

class LearntMaps {
 public:
  struct Process {
    std::vector<ProcMapping> mappings;  // sorted by start, not overlapping
    bool complete = false;              // learnt since its exec (or a complete parent's fork)
    bool exited = false;
    // Stamped anew (from one counter, never reused) by every record that changed `mappings`:
    // a copy of the process's maps read at one generation still holds at the same one.
    uint64_t generation = 0;
  };

  explicit LearntMaps(size_t max_processes = 4096);

  // PERF_RECORD_MMAP2 of `pid`: [addr, addr + len) maps `filename` at file offset `pgoff`.
  // "//anon" (anonymous executable memory, e.g. JIT code) is recorded with an empty path.
  void OnMmap(uint32_t pid, uint64_t addr, uint64_t len, uint64_t pgoff, uint32_t maj, uint32_t min, uint64_t ino,
              uint32_t prot, std::string_view filename);
  void OnExec(uint32_t pid);
  // A PERF_RECORD_FORK: only a new process (pid != ppid) is recorded.
  void OnFork(uint32_t ppid, uint32_t pid);
  // A PERF_RECORD_EXIT: only the thread-group leader's (tid == pid) marks the process exited.
  void OnExit(uint32_t pid, uint32_t tid);

  // A copy of what is known of `pid`, or nullopt.
  std::optional<Process> Get(uint32_t pid) const;
  size_t size() const;
  uint64_t evicted() const;

 private:
  struct Entry {
    Process p;
    uint64_t seq = 0;  // when learnt (insertion), or when exited
  };
  Entry& Touch(uint32_t pid);  // under mu_: the entry, created (evicting one) if new
  void EvictOne();             // under mu_

  const size_t max_;
  mutable std::mutex mu_;
  std::unordered_map<uint32_t, Entry> procs_;
  std::map<uint64_t, uint32_t> exited_order_, live_order_;  // seq -> pid
  uint64_t next_seq_ = 1;
  uint64_t next_generation_ = 1;
  uint64_t evicted_ = 0;
};

}  // namespace tpe
